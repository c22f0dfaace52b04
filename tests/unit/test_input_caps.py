"""Unbounded reads: every file and line we read has a documented cap and a one-line error.

``/dev/zero``, ``/dev/urandom`` and a FIFO fed forever end at once with one
``session-supervisor: ...`` line (docs/configuration.md and docs/taxonomy.md, "Limits"). Every file the daemon reads is opened ``O_NONBLOCK`` and ``fstat``'d; what is not a
regular file (a FIFO with or without a writer, a device, a directory, a socket) is refused before a
byte is read, so no open(2) or read(2) waits on another process.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from supervisor.cli import classify_cmd, main
from supervisor.config import MAX_CREDENTIAL_BYTES, read_secret
from supervisor.errors import ConfigError
from supervisor.taxonomy.envelope import MAX_LINE_BYTES
from supervisor.taxonomy.loader import LimitError, NotRegularFile, read_capped

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
def test_endless_devices_are_refused_before_a_byte_is_read(device: str) -> None:
    with pytest.raises(NotRegularFile, match=r"^not a regular file \(a character device\)$"):
        read_capped(device, 1024 * 1024)


def _read_in_a_thread(path: Path) -> BaseException | bytes | None:
    """read_capped(path) on a thread; None if it has not returned within 20 s (it blocked)."""
    outcome: list[BaseException | bytes] = []

    def read() -> None:
        try:
            outcome.append(read_capped(path, 1024))
        except BaseException as exc:  # the outcome is what the test looks at
            outcome.append(exc)

    # a daemon thread: one stuck in open() does not keep the test process alive
    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    thread.join(timeout=20)
    return outcome[0] if outcome else None


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_nobody_writes_is_refused_at_once_not_waited_on(tmp_path: Path) -> None:
    """open(2) of a FIFO blocks until a writer comes (fifo(7)); the file is opened O_NONBLOCK and fstat'd."""
    fifo = tmp_path / "config.toml"
    os.mkfifo(fifo)
    outcome = _read_in_a_thread(fifo)
    assert isinstance(outcome, NotRegularFile), outcome
    assert str(outcome) == "not a regular file (a FIFO)"


def test_a_directory_and_a_socket_are_refused_naming_what_they_are(tmp_path: Path) -> None:
    assert str(_read_in_a_thread(tmp_path)) == "not a regular file (a directory)"
    with socket.socket(socket.AF_UNIX) as listening:
        listening.bind(str(tmp_path / "s"))
        assert str(_read_in_a_thread(tmp_path / "s")) == "not a regular file (a socket)"


def test_a_symlink_to_a_regular_file_is_read(tmp_path: Path) -> None:
    (tmp_path / "real").write_bytes(b"k = 1\n")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert read_capped(tmp_path / "link", 1024) == b"k = 1\n"


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
        "session-supervisor: error: /dev/zero: cannot read: not a regular file (a character device)"
    ]


@needs_devices
def test_the_taxonomy_override_pointing_at_dev_zero_is_one_line() -> None:
    result = run_cli("classify", "--sample", env={"SESSION_SUPERVISOR_TAXONOMY": "/dev/zero"})
    assert result.returncode == 1
    assert stderr_lines(result) == [
        "session-supervisor: error: /dev/zero: cannot read: not a regular file (a character device)"
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
    assert stderr_lines(result) == [
        f"session-supervisor: error: {device}: not a regular file (a character device)"
    ]


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
        "not a regular file (a character device)"
    ]


def test_a_credential_file_of_exactly_the_cap_is_read(tmp_path: Path) -> None:
    (tmp_path / "s").write_bytes(b"k" * MAX_CREDENTIAL_BYTES)
    secret = read_secret("s", key="k", config_dir=tmp_path, environ={})
    assert secret is not None and len(secret.reveal()) == MAX_CREDENTIAL_BYTES
    (tmp_path / "s").write_bytes(b"k" * (MAX_CREDENTIAL_BYTES + 1))
    with pytest.raises(ConfigError, match=r"^k: credential file .* is larger than the 64 KiB cap$"):
        read_secret("s", key="k", config_dir=tmp_path, environ={})


FEEDER = (
    "import sys\n"
    "try:\n"
    "    with open(sys.argv[1], 'wb') as f:\n"
    "        while True:\n"
    "            f.write(b'# forever\\n' * 4096)\n"
    "except (BrokenPipeError, OSError):\n"
    "    pass\n"
)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
@pytest.mark.parametrize("writer", ["nobody", "fed-forever"])
def test_a_fifo_as_the_configuration_is_refused_in_one_line(tmp_path: Path, writer: str) -> None:
    fifo = tmp_path / "config.toml"
    os.mkfifo(fifo)
    feeder = None
    if writer == "fed-forever":
        feeder = subprocess.Popen([sys.executable, "-c", FEEDER, str(fifo)], stderr=subprocess.DEVNULL)
    try:
        result = run_cli("run", "--config", str(fifo), "--check")
    finally:
        if feeder is not None:
            feeder.kill()
            feeder.wait(timeout=20)
    assert result.returncode == 1
    assert stderr_lines(result) == [f"session-supervisor: error: {fifo}: not a regular file (a FIFO)"]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_as_a_credential_file_is_refused_in_one_line(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "secret")
    result = run_cli("run", "--config", str(config_with_secret(tmp_path, "secret")), "--check")
    assert result.returncode == 1
    assert stderr_lines(result) == [
        "session-supervisor: error: platforms.cxone.clientSecretFile: credential file "
        f"{tmp_path / 'secret'} is not a regular file (a FIFO)"
    ]


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
