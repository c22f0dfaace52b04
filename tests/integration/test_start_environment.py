"""What the environment hands ``run`` at start-up, as a real child process:
values systemd never sends (a warning, the feature off) and hand-overs gone wrong (one located line,
exit 1); never a traceback. The platform is the in-process Genesys simulator over loopback.

A warning comes while the daemon builds itself, after its event lines started: it is one of them, a
``LOG_RECORD`` of the daemon's own (docs/systemd.md, "The journal"), and stderr stays empty."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import anyio
import pytest

from supervisor.sim.genesys import GenesysSimulator
from tests.harness.config import config_file, genesys_config, short_dir, sockets_table
from tests.harness.waits import wait_until
from tests.integration.systemd_harness import listening_unix, notify_receiver, spawn
from tests.integration.test_systemd_notify import reading

pytestmark = [pytest.mark.integration, pytest.mark.anyio, pytest.mark.genesys_sim(seed=5)]


def warnings_said(lines: object) -> list[str]:
    """The daemon's own warnings: its ``LOG_RECORD`` event lines."""
    records = lines.named("LOG_RECORD")  # type: ignore[attr-defined]
    assert all((r["logger"], r["level"]) == ("session-supervisor", "warning") for r in records), records
    return [r["message"] for r in records]


# a platform nobody answers for: the start must end before any session would need one
UNREACHABLE = {
    "login": "http://127.0.0.1:9",
    "api": "http://127.0.0.1:9",
    "webmessaging": "ws://127.0.0.1:9",
    "streaming": "ws://127.0.0.1:9",
}


def write_config(directory: Path, urls: dict[str, str], sockets: tuple[Path, Path] | None = None) -> Path:
    text = genesys_config(urls, 1)
    if sockets is not None:
        text += sockets_table(*sockets)
    return config_file(directory, text)


async def stop_and_read(process: anyio.abc.Process, lines: object) -> tuple[int, str]:
    process.send_signal(signal.SIGTERM)
    with anyio.fail_after(30):
        code = await process.wait()
    return code, await lines.stderr()  # type: ignore[attr-defined]


# -- NOTIFY_SOCKET, WATCHDOG_USEC ----------------------------------------------------------------------------


async def test_an_unsupported_notify_socket_is_one_warning_and_the_daemon_runs(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    """systemd 254 hands a VM's manager ``vsock:CID:PORT``; the daemon speaks only to a path or an
    ``@`` name: one warning naming the variable, notifications off, everything else as usual."""
    config = write_config(tmp_path, genesys_sim.urls)
    process = await spawn(config, env={"NOTIFY_SOCKET": "vsock:2:1234", "WATCHDOG_USEC": "30000000"})
    async with reading(process) as lines:
        await wait_until(lambda: bool(lines.named("DAEMON_STARTED")), 30)
        code, err = await stop_and_read(process, lines)
    assert code == 0
    assert err == ""
    assert warnings_said(lines) == [
        "NOTIFY_SOCKET='vsock:2:1234': only a path or an @abstract name is supported; "
        "notifications are off (no READY=1, STATUS=, WATCHDOG=1)"
    ]


@pytest.mark.parametrize("value", ["²", "1" * 400])
async def test_a_watchdog_interval_systemd_never_sends_is_one_warning_and_no_pings(
    genesys_sim: GenesysSimulator, tmp_path: Path, value: str
) -> None:
    """``str.isdigit`` took these and ``int`` (or the float division after it) did not: a traceback.
    Now one warning, the watchdog off (a live one pings at once, before READY=1), the rest as usual."""
    config = write_config(tmp_path, genesys_sim.urls)
    async with notify_receiver("path") as notify:
        process = await spawn(config, env={**notify.env, "WATCHDOG_USEC": value})
        async with reading(process) as lines:
            await notify.wait_for(lambda n: n.get("READY") == "1")
            code, err = await stop_and_read(process, lines)
        assert notify.having("WATCHDOG") == []
    assert code == 0
    assert err == ""
    (said,) = warnings_said(lines)
    assert said.startswith("WATCHDOG_USEC=")
    assert said.endswith("is not a number of microseconds systemd sends: the watchdog is off")


async def test_a_watchdog_of_one_microsecond_pings_at_the_floor_and_says_so(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    config = write_config(tmp_path, genesys_sim.urls)
    async with notify_receiver("path") as notify:
        process = await spawn(config, env={**notify.env, "WATCHDOG_USEC": "1"})
        async with reading(process) as lines:
            await notify.wait_for(lambda n: n.get("READY") == "1")
            await notify.count("WATCHDOG", 1)
            code, err = await stop_and_read(process, lines)
    assert code == 0
    assert err == ""
    assert warnings_said(lines) == [
        "WATCHDOG_USEC=1 asks for a ping every 5e-07 s; the daemon pings every 0.1 s at most "
        "often (WatchdogSec= below 0.2 s cannot be honoured)"
    ]


# -- LISTEN_PID, LISTEN_FDS ----------------------------------------------------------------------------------


async def test_a_listen_pid_systemd_never_sends_is_one_warning_and_the_daemon_binds_its_own(
    genesys_sim: GenesysSimulator,
) -> None:
    with short_dir() as directory:
        paths = (directory / "s.sock", directory / "c.sock")
        config = write_config(directory, genesys_sim.urls, sockets=paths)
        process = await spawn(config, env={"LISTEN_PID": "²", "LISTEN_FDS": "2"})
        async with reading(process) as lines:
            await wait_until(lambda: bool(lines.named("DAEMON_STARTED")), 30)
            (listening,) = lines.named("SOCKET_API_LISTENING")
            code, err = await stop_and_read(process, lines)
    assert (listening["subscribe"], listening["control"]) == (str(paths[0]), str(paths[1]))
    assert code == 0
    assert err == ""
    assert warnings_said(lines) == ["LISTEN_PID='²' is not a process id: socket activation is off"]


@pytest.mark.parametrize("value", ["²", "1" * 400])
async def test_a_listen_fds_that_is_no_count_stops_the_start_with_one_line(
    tmp_path: Path, value: str
) -> None:
    """LISTEN_PID names the daemon (the launcher sets it, as systemd does) but LISTEN_FDS is no count."""
    with short_dir() as directory:
        handed = [listening_unix(directory / "s.sock"), listening_unix(directory / "c.sock")]
        config = write_config(tmp_path, UNREACHABLE)
        try:
            process = await spawn(
                config, env={"LISTEN_FDS": value, "LISTEN_FDNAMES": "subscribe:control"}, listeners=handed
            )
            async with reading(process) as lines:
                with anyio.fail_after(30):
                    code = await process.wait()
                err = await lines.stderr()
        finally:
            for sock in handed:
                sock.close()
    assert code == 1
    assert err.count("\n") == 1 and "Traceback" not in err and len(err) < 200
    assert err.startswith("session-supervisor: error: socket activation: LISTEN_FDS=")
    assert err.endswith("is not a count of descriptors\n")


# -- OTEL_* ---------------------------------------------------------------------------------------------------

# each one was a traceback at start-up: the SDK raised in its import (the first) or its constructors
SDK_REFUSES = [
    ("OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", "-1", "expected an integer >= 0 (attributes per span, or unset)"),
    ("OTEL_BSP_MAX_QUEUE_SIZE", "-1", "expected a positive integer (spans the batch queue holds)"),
    ("OTEL_METRIC_EXPORT_INTERVAL", "0", "expected a number > 0 (milliseconds)"),
]
COLLECTOR = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}  # telemetry on; nothing exported here


async def run_cli(*args: str, env: dict[str, str]) -> tuple[int, str, str]:
    done = await anyio.run_process(
        [sys.executable, "-m", "supervisor", *args], env={**os.environ, **env}, check=False
    )
    return done.returncode, done.stdout.decode(), done.stderr.decode()


@pytest.mark.parametrize("check", [False, True], ids=["run", "run --check"])
@pytest.mark.parametrize(("name", "value", "problem"), SDK_REFUSES)
async def test_an_otel_value_the_sdk_refuses_is_one_line_and_exit_1(
    tmp_path: Path, name: str, value: str, problem: str, check: bool
) -> None:
    config = write_config(tmp_path, UNREACHABLE)
    code, out, err = await run_cli(
        "run", "--config", str(config), *(["--check"] if check else []), env={**COLLECTOR, name: value}
    )
    assert code == 1 and out == ""
    assert err == f"session-supervisor: error: {name}={value!r}: {problem}\n"


async def test_with_telemetry_off_the_otel_variables_are_not_read(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    """Off (no endpoint): the SDK is not even imported, so what it would refuse changes nothing."""
    hostile = {name: value for name, value, _ in SDK_REFUSES}
    config = write_config(tmp_path, genesys_sim.urls)
    code, out, err = await run_cli("run", "--config", str(config), "--check", env=hostile)
    assert (code, err) == (0, "") and out.startswith("ok: ")
    process = await spawn(config, env=hostile)
    async with reading(process) as lines:
        await wait_until(lambda: bool(lines.named("DAEMON_STARTED")), 30)
        code, err = await stop_and_read(process, lines)
    assert (code, err) == (0, "")


async def test_demo_otlp_refuses_what_the_sdk_reads_from_the_process_before_it_starts() -> None:
    """The demo's environment is its own (a shell's OTEL_BSP_* changes nothing), but the SDK reads
    OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT from the process when it is imported: refused before any simulator starts."""
    code, out, err = await run_cli(
        "demo",
        "--fast",
        "--sessions",
        "5",
        "--otlp",
        "http://127.0.0.1:9",
        env={"OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT": "-1"},
    )
    assert code == 1 and out == ""
    assert err == (
        "session-supervisor: error: OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT='-1': "
        "expected an integer >= 0 (attributes per span, or unset)\n"
    )
