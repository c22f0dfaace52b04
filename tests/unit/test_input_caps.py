"""Unbounded reads: every file and line we read has a documented cap and a one-line error.

Issue 9, class 3. ``/dev/zero``, ``/dev/urandom`` and a FIFO fed forever end at once with one
``session-supervisor: ...`` line (docs/configuration.md and docs/taxonomy.md, "Limits").
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from supervisor.cli import classify_cmd, main
from supervisor.config import MAX_CREDENTIAL_BYTES, read_secret
from supervisor.errors import ConfigError
from supervisor.taxonomy.envelope import MAX_LINE_BYTES
from supervisor.taxonomy.loader import LimitError, read_capped

ROOT = Path(__file__).resolve().parents[2]
ZERO = Path("/dev/zero")
needs_devices = pytest.mark.skipif(not ZERO.exists(), reason="needs /dev/zero and /dev/urandom")
GOOD = b'{"platform":"genesys","channel":"rest","status":500}'
ORIGINAL_TABLE_MAX_ROWS = classify_cmd.TABLE_MAX_ROWS
LINE_CAP = "session-supervisor: line {n}: longer than the 1 MiB line cap; the input is not read past it"


def run_cli(
    *args: str, stdin: bytes = b"", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "supervisor", *args],
        input=stdin,
        capture_output=True,
        timeout=50,
        check=False,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
    )


def stderr_lines(result: subprocess.CompletedProcess[bytes]) -> list[str]:
    return result.stderr.decode().splitlines()


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cap=st.integers(0, 4096), extra=st.integers(-3, 3))
def test_read_capped_reads_up_to_the_cap_and_refuses_one_byte_more(
    tmp_path: Path, cap: int, extra: int
) -> None:
    size = max(0, cap + extra)
    path = tmp_path / "f"
    path.write_bytes(b"x" * size)
    if size > cap:
        with pytest.raises(LimitError, match="larger than the"):
            read_capped(path, cap)
    else:
        assert read_capped(path, cap) == b"x" * size


@needs_devices
@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_endless_devices_are_refused_at_the_cap(device: str) -> None:
    with pytest.raises(LimitError, match="larger than the 1 MiB cap"):
        read_capped(device, 1024 * 1024)


@needs_devices
def test_classify_dev_zero_is_one_line() -> None:
    result = run_cli("classify", "/dev/zero")
    assert result.returncode == 1
    assert result.stdout == b""
    assert stderr_lines(result) == [LINE_CAP.format(n=1)]


def test_classify_stops_at_a_line_past_the_cap_after_classifying_the_lines_before(tmp_path: Path) -> None:
    path = tmp_path / "in.ndjson"
    path.write_bytes(GOOD + b"\n" + b" " * (MAX_LINE_BYTES + 10) + b"\n" + GOOD + b"\n")
    result = run_cli("classify", str(path))
    assert result.returncode == 1
    assert len(result.stdout.splitlines()) == 1
    assert stderr_lines(result) == [LINE_CAP.format(n=2)]


def test_a_line_of_exactly_the_cap_is_classified() -> None:
    line = GOOD + b" " * (MAX_LINE_BYTES - len(GOOD))
    assert len(line) == MAX_LINE_BYTES
    result = run_cli("classify", stdin=line + b"\n" + GOOD + b"\n")
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == 2


@needs_devices
def test_taxonomy_check_dev_zero_is_one_line() -> None:
    result = run_cli("taxonomy", "check", "/dev/zero")
    assert result.returncode == 1
    assert stderr_lines(result) == [
        "session-supervisor: error: /dev/zero: cannot read: larger than the 1 MiB cap"
    ]


@needs_devices
def test_the_taxonomy_override_pointing_at_dev_zero_is_one_line() -> None:
    result = run_cli("classify", "--sample", env={"SESSION_SUPERVISOR_TAXONOMY": "/dev/zero"})
    assert result.returncode == 1
    assert stderr_lines(result) == [
        "session-supervisor: error: /dev/zero: cannot read: larger than the 1 MiB cap"
    ]


@needs_devices
def test_replay_of_dev_zero_is_one_problem_line() -> None:
    result = run_cli("taxonomy", "diff", "v1", "v1", "--replay", "/dev/zero", "--json")
    assert result.returncode == 1
    assert stderr_lines(result) == [LINE_CAP.format(n=1)]


@needs_devices
@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_run_check_with_an_endless_config_is_one_line(device: str) -> None:
    result = run_cli("run", "--config", device, "--check")
    assert result.returncode == 1
    assert stderr_lines(result) == [f"session-supervisor: error: {device}: larger than the 1 MiB cap"]


def config_with_secret(tmp_path: Path, secret_file: str) -> Path:
    path = tmp_path / "c.toml"
    path.write_text(
        f'[platforms.cxone]\nauthUrl = "http://127.0.0.1:9"\nclientId = "app"\nclientSecretFile = "{secret_file}"\n'
        'username = "AKID"\npasswordFile = "/dev/null"\n'
    )
    return path


@needs_devices
def test_run_check_with_an_endless_credential_file_is_one_line(tmp_path: Path) -> None:
    result = run_cli("run", "--config", str(config_with_secret(tmp_path, "/dev/zero")), "--check")
    assert result.returncode == 1
    assert stderr_lines(result) == [
        "session-supervisor: error: platforms.cxone.clientSecretFile: credential file /dev/zero is "
        "larger than the 64 KiB cap"
    ]


def test_a_credential_file_of_exactly_the_cap_is_read(tmp_path: Path) -> None:
    (tmp_path / "s").write_bytes(b"k" * MAX_CREDENTIAL_BYTES)
    secret = read_secret("s", key="k", config_dir=tmp_path, environ={})
    assert secret is not None and len(secret.reveal()) == MAX_CREDENTIAL_BYTES
    (tmp_path / "s").write_bytes(b"k" * (MAX_CREDENTIAL_BYTES + 1))
    with pytest.raises(ConfigError, match=r"^k: credential file .* is larger than the 64 KiB cap$"):
        read_secret("s", key="k", config_dir=tmp_path, environ={})


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_fed_forever_is_refused_at_the_cap(tmp_path: Path) -> None:
    fifo = tmp_path / "config.toml"
    os.mkfifo(fifo)
    feeder = (
        "import sys\n"
        "try:\n"
        "    with open(sys.argv[1], 'wb') as f:\n"
        "        while True:\n"
        "            f.write(b'# forever\\n' * 4096)\n"
        "except (BrokenPipeError, OSError):\n"
        "    pass\n"
    )
    writer = subprocess.Popen([sys.executable, "-c", feeder, str(fifo)], stderr=subprocess.DEVNULL)
    try:
        result = run_cli("run", "--config", str(fifo), "--check")
    finally:
        writer.kill()
        writer.wait(timeout=20)
    assert result.returncode == 1
    assert stderr_lines(result) == [f"session-supervisor: error: {fifo}: larger than the 1 MiB cap"]


def test_classify_table_holds_a_bounded_number_of_rows(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    # the table keeps every event in memory: an endless input must stop at the documented cap
    monkeypatch.setattr(classify_cmd, "TABLE_MAX_ROWS", 3)
    path = tmp_path / "in.ndjson"
    path.write_bytes((GOOD + b"\n") * 5)
    with pytest.raises(SystemExit) as info:
        main(["classify", str(path), "--format", "table"])
    out, err = capsysbinary.readouterr()
    assert info.value.code == 1
    assert "TRANSIENT 3" in out.decode()
    assert err.decode().splitlines() == [
        "session-supervisor: line 4: --format table holds at most 3 envelopes; the input is not read "
        "past it (--format json streams any number)"
    ]
    assert classify_cmd.TABLE_MAX_ROWS == 3 and ORIGINAL_TABLE_MAX_ROWS == 10_000
