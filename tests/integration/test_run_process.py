"""`session-supervisor run` as users run it: an unread stdout, signals at awkward moments,
SIGHUP reload, one daemon per configuration. Each test runs the daemon as a real child process
against an in-process simulator over loopback."""

from __future__ import annotations

import json
import os
import signal
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import anyio
import pytest

from supervisor.sim.faults import Fault, FaultKind
from supervisor.sim.genesys import GenesysSimulator
from tests.harness.config import Credentials, config_file, genesys_config, with_daemon
from tests.harness.process import CLI, Output, spawn
from tests.harness.waits import wait_until

V1 = (resources.files("supervisor.taxonomy") / "data" / "v1.toml").read_text(encoding="utf-8")
pytestmark = [pytest.mark.integration, pytest.mark.anyio, pytest.mark.genesys_sim(seed=9)]


#: the secret the lines must never show (the test of a rotated secret checks both)
CREDENTIALS = Credentials(genesys="s3cr3t-value")


#: Linux's default pipe capacity (pipe(7)) and the smallest eventBufferBytes (docs/configuration.md)
PIPE_CAPACITY = 65536
EVENT_BUFFER = 4096


def accepted(sim: GenesysSimulator) -> int:
    return sim.recorder.attempts_total("webmessaging")["accepted"]


async def read_all(stream: Any) -> str:
    chunks = []
    async for chunk in stream:
        chunks.append(chunk)
    return b"".join(chunks).decode()


def caught_signals(pid: int) -> int:
    """The SigCgt mask of a process: which signals it has a handler for (Linux /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return int(line.split()[1], 16)
    return 0


# -- stdout nobody reads ------------------------------------------------------------------------------


async def test_an_unread_stdout_never_stops_the_supervision_and_drops_are_reported(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    """Lines past what a pipe nobody reads and the event buffer hold: the daemon keeps recovering drops."""
    n = 30
    # the smallest buffer the configuration allows: the size is not the point, overflowing it is, and
    # each round of reconnections writes ~55 KB of lines, so four rounds are about three times what
    # the pipe and the buffer hold (with a 64 KiB buffer it took 25 rounds, the test's slowest part)
    config = config_file(
        tmp_path, with_daemon(genesys_config(genesys_sim.urls, n), eventBufferBytes=EVENT_BUFFER), CREDENTIALS
    )
    process = await spawn(config)
    lines = Output(process)
    try:
        await wait_until(lambda: accepted(genesys_sim) == n, 20)
        rounds = 4
        for _ in range(rounds):
            before = accepted(genesys_sim)
            genesys_sim.faults.inject(Fault(kind=FaultKind.DROP, count=n))
            # the daemon reconnects every session while its stdout is full: its loop is not blocked
            await wait_until(lambda b=before: accepted(genesys_sim) >= b + n, 20)
        # now read: the writer catches up and says how many lines it had to drop
        async with anyio.create_task_group() as tg:
            tg.start_soon(lines.pump)
            await wait_until(lambda: bool(lines.named("EVENTS_DROPPED")), 20)
            process.send_signal(signal.SIGTERM)
            with anyio.fail_after(20):
                code = await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
    assert code == 0
    (notice,) = lines.named("EVENTS_DROPPED")[:1]
    assert notice["sink"] == "stdout" and notice["dropped"] > 0
    dropped = max(r["totalDropped"] for r in lines.named("EVENTS_DROPPED"))
    read = sum(len(line) + 1 for line in lines.raw)
    # the dropped lines were lines like the ones read (transitions, classifications, retries)
    mean = read / len(lines.raw)
    # past what the pipe and the buffer hold together, twice over: the writer was stuck meanwhile
    assert read + dropped * mean > 2 * (PIPE_CAPACITY + EVENT_BUFFER)
    # seq still rises without a gap among what was written after the notice: nothing silently lost
    assert lines.named("DAEMON_STOPPED")


# -- signals at awkward moments -----------------------------------------------------------------------


async def test_a_stop_signal_during_start_up_exits_zero_not_143(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    config = config_file(tmp_path, genesys_config(genesys_sim.urls, 5), CREDENTIALS)
    process = await spawn(config)
    # the moment the daemon's own handlers are in place (SIGTERM caught): it is starting
    await wait_until(lambda: bool(caught_signals(process.pid) & (1 << (signal.SIGTERM - 1))), 20)
    process.send_signal(signal.SIGTERM)
    with anyio.fail_after(20):
        code = await process.wait()
    assert code == 0
    assert "Traceback" not in await read_all(process.stderr)


async def test_a_signal_after_the_drain_changes_nothing(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    """The drain completed: a late SIGTERM must not turn exit 0 into 143."""
    config = config_file(tmp_path, genesys_config(genesys_sim.urls, 2), CREDENTIALS)
    process = await spawn(config)
    lines = Output(process)
    async with anyio.create_task_group() as tg:
        tg.start_soon(lines.pump)
        await wait_until(
            lambda: len([r for r in lines.named("SESSION_TRANSITION") if r["to"] == "active"]) == 2, 20
        )
        process.send_signal(signal.SIGTERM)
        await wait_until(lambda: bool(lines.named("DAEMON_STOPPED")), 20)
        process.send_signal(signal.SIGTERM)  # after the drain: only recorded, never the default action
        with anyio.fail_after(20):
            code = await process.wait()
    assert code == 0


# -- SIGHUP reload ----------------------------------------------------------------------------------


def sessions_config(urls: dict[str, str], agents: dict[str, str]) -> str:
    """Web Messaging sessions by id -> agentId, on genesys_config's settings."""
    base = genesys_config(urls, 0)
    for sid, agent in agents.items():
        base += (
            f'[[sessions]]\nid = "{sid}"\nplatform = "genesys"\nkind = "webmessaging"\nagentId = "{agent}"\n'
        )
    return base


async def test_sighup_reloads_added_removed_changed_and_keeps_the_rest(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    config = config_file(
        tmp_path, sessions_config(genesys_sim.urls, {"wm-a": "a", "wm-b": "b", "wm-c": "c"}), CREDENTIALS
    )
    process = await spawn(config)
    lines = Output(process)

    def active(sid: str) -> int:
        return len(
            [r for r in lines.named("SESSION_TRANSITION") if r["machineId"] == sid and r["to"] == "active"]
        )

    async with anyio.create_task_group() as tg:
        tg.start_soon(lines.pump)
        await wait_until(lambda: all(active(s) == 1 for s in ("wm-a", "wm-b", "wm-c")), 20)
        # wm-a removed, wm-b changed (another agent), wm-c untouched, wm-d added
        config.write_text(sessions_config(genesys_sim.urls, {"wm-b": "b2", "wm-c": "c", "wm-d": "d"}))
        process.send_signal(signal.SIGHUP)
        await wait_until(lambda: bool(lines.named("CONFIG_RELOADED")), 20)
        (reloaded,) = lines.named("CONFIG_RELOADED")
        assert (reloaded["added"], reloaded["removed"], reloaded["restarted"]) == (
            ["wm-d"],
            ["wm-a"],
            ["wm-b"],
        )
        assert reloaded["unchanged"] == 1
        await wait_until(lambda: active("wm-d") == 1 and active("wm-b") == 2, 20)
        assert active("wm-c") == 1  # untouched: no second activation
        stopped = {r["sessionId"] for r in lines.named("SESSION_TERMINATED")}
        assert stopped == {"wm-a", "wm-b"}  # wm-b's old runner stopped before its new one started
        # a broken file is refused with its location; the daemon keeps running on the old one
        config.write_text("[daemon]\nshutdownGrace = -1\n")
        process.send_signal(signal.SIGHUP)
        await wait_until(lambda: bool(lines.named("CONFIG_RELOAD_FAILED")), 20)
        (failed,) = lines.named("CONFIG_RELOAD_FAILED")
        assert "supervisor.toml" in failed["error"] and "daemon.shutdownGrace" in failed["error"]
        assert len(lines.named("CONFIG_RELOADED")) == 1
        process.send_signal(signal.SIGTERM)
        with anyio.fail_after(20):
            code = await process.wait()
    assert code == 0
    # the removed session was ended on the platform (closeSession on a 1000 close)
    assert genesys_sim.recorder.ws_messages("webmessaging", "in", "closeSession") >= 2


async def test_sighup_rereads_a_rotated_credential_and_swaps_the_token_source(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    """The configuration is unchanged, the client secret file rotated: a reload reads it again,
    fetches a token with the new secret (never shown), and swaps the credential's token source; the
    sessions that use it (notifications channels) are not restarted (docs/runtime.md, "Rotation")."""
    config = config_file(tmp_path, genesys_config(genesys_sim.urls, 0, notifications=2), CREDENTIALS)
    process = await spawn(config)
    lines = Output(process)

    def active() -> int:
        return len([r for r in lines.named("SESSION_TRANSITION") if r["to"] == "active"])

    async with anyio.create_task_group() as tg:
        tg.start_soon(lines.pump)
        await wait_until(lambda: active() == 2, 20)
        fetched = genesys_sim.recorder.tokens()
        (tmp_path / "genesys-secret").write_text("r0tated-s3cr3t")
        process.send_signal(signal.SIGHUP)
        await wait_until(lambda: bool(lines.named("CONFIG_RELOADED")), 20)
        (reloaded,) = lines.named("CONFIG_RELOADED")
        assert reloaded["restarted"] == [] and reloaded["unchanged"] == 2
        (accepted,) = lines.named("CREDENTIAL_ACCEPTED")
        assert (accepted["platform"], accepted["rotated"]) == ("genesys", True)
        assert genesys_sim.recorder.tokens()["issued"] == fetched["issued"] + 1 >= 2  # the new secret's
        assert active() == 2  # no session went through a new connection
        process.send_signal(signal.SIGTERM)
        with anyio.fail_after(20):
            code = await process.wait()
    assert code == 0
    assert not any("r0tated" in line or "s3cr3t" in line for line in lines.raw)


async def test_a_taxonomy_switched_at_run_time_stays_across_a_reload_of_the_same_file(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    """`ctl taxonomy use` switches the version; a SIGHUP with a configuration that names the same
    version as before keeps the switched one (only a file naming another version switches it)."""
    staged = tmp_path / "staged.toml"
    staged.write_text(V1.replace('version = "v1"', 'version = "v1-staged"', 1))
    sockets = tmp_path / "s"
    sockets.mkdir()
    text = genesys_config(genesys_sim.urls, 1) + (
        f'[sockets]\nsubscribe = "{sockets / "sub.sock"}"\ncontrol = "{sockets / "ctl.sock"}"\n'
    )
    config = config_file(tmp_path, text, CREDENTIALS)
    process = await spawn(config)
    lines = Output(process)
    async with anyio.create_task_group() as tg:
        tg.start_soon(lines.pump)
        await wait_until(lambda: bool(lines.named("DAEMON_STARTED")), 20)
        used = await anyio.run_process(
            [*CLI, "ctl", "--socket", str(sockets / "ctl.sock"), "taxonomy", "use", str(staged)], check=False
        )
        assert used.returncode == 0, used.stderr.decode()
        process.send_signal(signal.SIGHUP)
        await wait_until(lambda: bool(lines.named("CONFIG_RELOADED")), 20)
        (reloaded,) = lines.named("CONFIG_RELOADED")
        assert reloaded["taxonomyVersion"] == "v1-staged"
        process.send_signal(signal.SIGTERM)
        with anyio.fail_after(20):
            assert await process.wait() == 0


# -- one daemon per configuration -------------------------------------------------------------------


async def test_a_second_daemon_on_the_same_configuration_refuses_and_the_first_goes_on(
    genesys_sim: GenesysSimulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sockets = tmp_path / "s"
    sockets.mkdir()
    text = genesys_config(genesys_sim.urls, 2) + (
        f'[sockets]\nsubscribe = "{sockets / "sub.sock"}"\ncontrol = "{sockets / "ctl.sock"}"\n'
    )
    config = config_file(tmp_path, text, CREDENTIALS)
    # the lock under $XDG_RUNTIME_DIR, as a user's daemon has it (not the conftest's $RUNTIME_DIRECTORY)
    monkeypatch.delenv("RUNTIME_DIRECTORY")
    env = {"XDG_RUNTIME_DIR": str(tmp_path / "run")}
    first = await spawn(config, env=env)
    lines = Output(first)
    async with anyio.create_task_group() as tg:
        tg.start_soon(lines.pump)
        await wait_until(
            lambda: len([r for r in lines.named("SESSION_TRANSITION") if r["to"] == "active"]) == 2, 20
        )
        result = await anyio.run_process(
            [sys.executable, "-m", "supervisor", "run", "--config", str(config)],
            env={**os.environ, **env},
            check=False,
        )
        assert result.returncode == 1
        err = result.stderr.decode().strip().splitlines()
        assert err == [
            f"session-supervisor: error: another session-supervisor (pid {first.pid}) already runs this "
            f"configuration (it holds {next((tmp_path / 'run' / 'session-supervisor').glob('*.lock'))})"
        ]
        assert result.stdout == b""  # it published nothing, started nothing
        assert first.returncode is None  # the first one goes on, its sockets untouched and answering
        status = await anyio.run_process(
            [
                sys.executable,
                "-m",
                "supervisor",
                "ctl",
                "--socket",
                str(sockets / "ctl.sock"),
                "status",
                "--json",
            ],
            check=False,
        )
        assert status.returncode == 0
        assert json.loads(status.stdout)["sessions"]["total"] == 2
        first.send_signal(signal.SIGTERM)
        with anyio.fail_after(20):
            assert await first.wait() == 0
    assert accepted(genesys_sim) == 2  # the second daemon never opened a session


async def test_run_with_stdout_on_dev_full_stops_with_one_line(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    config = config_file(tmp_path, genesys_config(genesys_sim.urls, 1), CREDENTIALS)
    full = os.open("/dev/full", os.O_WRONLY)
    try:
        result = await anyio.run_process(
            [sys.executable, "-m", "supervisor", "run", "--config", str(config)],
            stdout=full,
            check=False,
        )
    finally:
        os.close(full)
    assert result.returncode == 1
    assert result.stderr.decode().splitlines() == [
        "session-supervisor: error: cannot write events to standard output: No space left on device"
    ]
