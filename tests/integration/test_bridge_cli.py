"""``session-supervisor bridge`` as a script runs it: exit codes, one-line errors, SIGHUP, and no token
in anything it prints (docs/bridge.md). Real subprocesses, real signals, real loopback sockets."""

from __future__ import annotations

import hashlib
import json
import signal
import ssl
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from tests.harness.waits import wait_until
from tests.integration.test_api_cli import Output

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

CLI = [sys.executable, "-m", "supervisor", "bridge"]
FIRST = "first-token-Zq81"
SECOND = "second-token-Yx42"


def line(token: str, agents: list[str]) -> str:
    return json.dumps({"sha256": hashlib.sha256(token.encode()).hexdigest(), "agents": agents}) + "\n"


async def run(*args: str) -> tuple[int, str, str]:
    # a bridge that serves instead of refusing would run for ever: the test fails instead
    with anyio.fail_after(20):
        done = await anyio.run_process([*CLI, *args], check=False)
    return done.returncode, done.stdout.decode(), done.stderr.decode()


@pytest.mark.parametrize(
    ("args", "code", "error"),
    [
        (
            ["--listen", "0.0.0.0:8765"],
            1,
            "session-supervisor: error: --listen 0.0.0.0:8765: not a loopback address: give --cert and --key",
        ),
        (
            ["--listen", "[::]:8765"],
            1,
            "session-supervisor: error: --listen [::]:8765: not a loopback address",
        ),
        (
            ["--listen", "desktop.example.test:1"],
            1,
            "session-supervisor: error: --listen desktop.example.test:1: not a",
        ),
        (["--listen", "127.0.0.1"], 1, "session-supervisor: error: --listen '127.0.0.1': expected HOST:PORT"),
        (["--cert", "c.pem"], 2, "session-supervisor: usage error: --cert and --key go together"),
        (["--origin", "https://a.test/"], 2, "session-supervisor: usage error: Invalid value for --origin"),
    ],
)
async def test_refused_before_serving_with_one_line(
    tmp_path: Path, args: list[str], code: int, error: str
) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(line(FIRST, ["a-0"]))
    got = await run("--socket", str(tmp_path / "s.sock"), "--tokens", str(tokens), *args)
    assert (got[0], got[1]) == (code, "")
    assert got[2].startswith(error) and got[2].count("\n") == 1, got[2]


async def test_a_bad_tokens_file_is_named_with_its_line(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(line(FIRST, ["a-0"]) + "\n" + json.dumps({"sha256": SECOND, "agents": ["a-1"]}) + "\n")
    code, out, err = await run("--socket", str(tmp_path / "s.sock"), "--tokens", str(tokens))
    assert (code, out) == (1, "")
    assert (
        err
        == f"session-supervisor: error: {tokens} line 3: 'sha256' must be the 64 lowercase hex digits of the token's SHA-256\n"
    )
    assert SECOND not in err
    code, _, err = await run("--socket", str(tmp_path / "s.sock"), "--tokens", str(tmp_path / "absent"))
    assert code == 1 and err.startswith(
        f"session-supervisor: error: {tmp_path / 'absent'}: cannot read the tokens file"
    )


async def status_of(url: str, token: str) -> int:
    try:
        async with connect(url, additional_headers={"Authorization": f"Bearer {token}"}):
            return 101
    except InvalidStatus as exc:
        return exc.response.status_code


async def test_sighup_rereads_the_tokens_and_no_token_is_ever_printed(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(line(FIRST, ["a-0"]))
    # no daemon: authentication is decided at the upgrade, before any record
    process = await anyio.open_process(
        [*CLI, "--socket", str(tmp_path / "absent.sock"), "--tokens", str(tokens), "--listen", "127.0.0.1:0"]
    )
    output = Output(process)

    def events(name: str) -> list[dict[str, Any]]:
        return [r for r in output.records if r.get("event") == name]

    async with anyio.create_task_group() as tg:
        tg.start_soon(output.pump)
        await wait_until(lambda: bool(events("BRIDGE_LISTENING")), 20)
        url = events("BRIDGE_LISTENING")[0]["url"]
        assert url.startswith("ws://127.0.0.1:")
        assert [await status_of(url, FIRST), await status_of(url, SECOND)] == [101, 401]

        tokens.write_text(line(SECOND, ["a-1"]))
        process.send_signal(signal.SIGHUP)
        await wait_until(lambda: bool(events("BRIDGE_TOKENS_RELOADED")), 10)
        assert [await status_of(url, FIRST), await status_of(url, SECOND)] == [401, 101]

        # a bad file on reload: the old tokens stay, and the line says so
        tokens.write_text(json.dumps({"sha256": FIRST, "agents": ["a-0"]}) + "\n")
        process.send_signal(signal.SIGHUP)
        await wait_until(lambda: bool(events("BRIDGE_TOKENS_RELOAD_FAILED")), 10)
        (failed,) = events("BRIDGE_TOKENS_RELOAD_FAILED")
        assert failed["problem"].startswith(f"{tokens} line 1: 'sha256' must be") and failed["kept"] == 1
        assert await status_of(url, SECOND) == 101

        process.send_signal(signal.SIGTERM)
        with anyio.fail_after(10):
            assert await process.wait() == 0
    (stopped,) = events("BRIDGE_STOPPED")
    assert stopped["failedAuthentications"] == 2
    printed = "\n".join(output.lines) + output.err
    assert FIRST not in printed and SECOND not in printed
    assert output.err == ""


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (openssl, as an operator makes one for a test)."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    made = subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        capture_output=True,
        check=False,
        timeout=30,
    )
    if made.returncode != 0:
        pytest.skip(f"openssl cannot make a test certificate: {made.stderr.decode().strip()[-200:]}")
    return cert, key


async def test_tls_off_loopback_and_a_certificate_that_does_not_load(
    tmp_path: Path, certificate: tuple[Path, Path]
) -> None:
    cert, key = certificate
    tokens = tmp_path / "tokens"
    tokens.write_text(line(FIRST, ["a-0"]))
    code, out, err = await run(
        "--socket", str(tmp_path / "s.sock"), "--tokens", str(tokens), "--cert", str(key), "--key", str(key)
    )
    assert (code, out) == (1, "") and err.startswith(
        f"session-supervisor: error: --cert {key} / --key {key}: cannot load"
    )
    assert err.count("\n") == 1
    # with a certificate, a non-loopback address is served (wss://)
    process = await anyio.open_process(
        [
            *CLI,
            "--socket",
            str(tmp_path / "s.sock"),
            "--tokens",
            str(tokens),
            "--listen",
            "0.0.0.0:0",
            "--cert",
            str(cert),
            "--key",
            str(key),
        ]
    )
    output = Output(process)
    async with anyio.create_task_group() as tg:
        tg.start_soon(output.pump)
        await wait_until(lambda: any(r.get("event") == "BRIDGE_LISTENING" for r in output.records), 20)
        (listening,) = [r for r in output.records if r.get("event") == "BRIDGE_LISTENING"]
        assert listening["url"].startswith("wss://0.0.0.0:")
        port = listening["url"].rsplit(":", 1)[1]
        trusted = ssl.create_default_context(cafile=str(cert))
        async with connect(
            f"wss://127.0.0.1:{port}", ssl=trusted, additional_headers={"Authorization": f"Bearer {FIRST}"}
        ) as ws:
            assert ws.protocol.state.name == "OPEN"
        with pytest.raises(ssl.SSLCertVerificationError):  # a client that does not trust it is not fooled
            async with connect(f"wss://127.0.0.1:{port}", ssl=ssl.create_default_context()):
                pass
        process.send_signal(signal.SIGTERM)
        with anyio.fail_after(10):
            assert await process.wait() == 0
