"""The one composition root (supervisor/runtime/assembly.py; docs/runtime.md, "The composition root"), run in this process.

``run`` and ``demo`` both build their daemon here; these tests drive :class:`Daemon` directly with a
body (what the demo passes) against the simulator on loopback, over real Unix sockets:

* the sockets are bound inside the lifecycle, before any session starts: a path a live daemon
  holds ends the start with nothing connected at the platform;
* a body is given the session table, not the supervisor, and the drain follows it: every session
  stopped, the socket files removed, the outcome served and not forced;
* a fleet member's shard set (the seam) selects the sessions at start and at each reload.
"""

from __future__ import annotations

import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from pathlib import Path

import anyio
import pytest

from supervisor.api.protocol import Method
from supervisor.config import SessionSpec, parse_config
from supervisor.errors import ConfigError
from supervisor.runtime.assembly import Daemon, DaemonConfig, DaemonView, Outcome
from supervisor.runtime.main import Service
from supervisor.sim.genesys import GenesysSimulator
from tests.harness.config import genesys_config, short_dir
from tests.harness.waits import wait_until
from tests.integration.api_harness import Conn

pytestmark = [pytest.mark.integration, pytest.mark.anyio, pytest.mark.genesys_sim(seed=31)]


class Body:
    """A body as the demo passes one: it keeps what it is given and runs ``play`` with it."""

    def __init__(self, play: Callable[[DaemonView], Awaitable[None]] | None = None) -> None:
        self.view: DaemonView | None = None
        self.played = False
        self._play = play

    def attach(self, daemon: DaemonView) -> Sequence[Service]:
        self.view = daemon
        return []

    async def __call__(self) -> None:
        assert self.view is not None
        if self._play is not None:
            await self._play(self.view)
        self.played = True


def config_text(sim: GenesysSimulator, directory: Path, sessions: int) -> str:
    (directory / "genesys-secret").write_text("not-a-real-secret")
    return genesys_config(sim.urls, sessions) + (
        f'[sockets]\nsubscribe = "{directory / "s.sock"}"\ncontrol = "{directory / "c.sock"}"\n'
    )


def handshakes(sim: GenesysSimulator) -> int:
    return sum(r["accepted"] + r["refused"] for r in sim.recorder.attempts_per_second())


async def test_a_socket_path_a_live_daemon_holds_ends_the_start_before_any_session(
    genesys_sim: GenesysSimulator,
) -> None:
    with short_dir() as directory:
        config = parse_config(config_text(genesys_sim, directory, 2), "t.toml")
        # a live daemon's control socket: listening, so the path is not a leftover to replace
        held = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        held.bind(str(directory / "c.sock"))
        held.listen()
        body = Body()
        try:
            with pytest.raises(ConfigError, match="another daemon is listening on this socket"):
                await Daemon(
                    DaemonConfig(config, config_dir=directory, environ={}, service=False, body=body)
                ).serve()
        finally:
            held.close()
        assert body.view is not None  # built: the bind is the lifecycle's first step
        assert dict(body.view.sessions.runners) == {} and not body.played
        assert handshakes(genesys_sim) == 0
        # the subscribe socket bound just before it was closed again and its file removed
        assert not (directory / "s.sock").exists()


async def test_a_body_reads_the_session_table_and_the_drain_follows_it(genesys_sim: GenesysSimulator) -> None:
    with short_dir() as directory:
        config = parse_config(config_text(genesys_sim, directory, 2), "t.toml")
        seen: list[dict[str, int]] = []

        async def play(view: DaemonView) -> None:
            await wait_until(lambda: view.sessions.states() == {"active": 2}, 20)
            assert (directory / "s.sock").exists() and (directory / "c.sock").exists()
            # the control socket acts on the table the body reads: one session stopped through it
            conn = await Conn.open(directory / "c.sock")
            try:
                stopped = await conn.call(Method.STOP_SESSION, {"sessionId": "wm-1"})
                assert stopped.error is None, stopped
                await wait_until(lambda: view.sessions.states() == {"active": 1, "terminated": 1}, 20)
                status = await conn.call(Method.STATUS)
            finally:
                await conn.aclose()
            seen.append(status.parameters["sessions"]["byState"])

        body = Body(play)
        daemon = Daemon(DaemonConfig(config, config_dir=directory, environ={}, service=False, body=body))
        with anyio.fail_after(40):
            outcome = await daemon.serve()
        assert outcome == Outcome(served=True, forced=False, stopped_by=None)
        assert body.played and seen == [{"active": 1, "terminated": 1}]
        assert body.view is not None
        runners = body.view.sessions.runners
        assert sorted(runners) == ["wm-0", "wm-1"]
        assert {r.termination.reason.value for r in runners.values() if r.termination} == {"STOPPED"}
        assert not (directory / "s.sock").exists() and not (directory / "c.sock").exists()
        await wait_until(lambda: genesys_sim.recorder.connections_open("webmessaging") == 0, 20)


async def test_a_shard_set_selects_the_sessions_at_start_and_at_each_reload(
    genesys_sim: GenesysSimulator,
) -> None:
    with short_dir() as directory:
        path = directory / "supervisor.toml"
        path.write_text(config_text(genesys_sim, directory, 4))

        def even(spec: SessionSpec) -> bool:
            return int(spec.id.rsplit("-", 1)[1]) % 2 == 0

        async def play(view: DaemonView) -> None:
            await wait_until(lambda: view.sessions.states() == {"active": 2}, 20)
            assert sorted(view.sessions.runners) == ["wm-0", "wm-2"]
            assert [s.id for s in view.sessions.config.sessions] == ["wm-0", "wm-2"]
            # six configured now: the reload starts wm-4, never wm-3 or wm-5
            path.write_text(config_text(genesys_sim, directory, 6))
            conn = await Conn.open(directory / "c.sock")
            try:
                reloaded = await conn.call(Method.RELOAD)
            finally:
                await conn.aclose()
            assert reloaded.error is None, reloaded
            assert reloaded.parameters["result"]["added"] == ["wm-4"]
            await wait_until(lambda: view.sessions.states() == {"active": 3}, 20)
            assert sorted(view.sessions.runners) == ["wm-0", "wm-2", "wm-4"]

        body = Body(play)
        # the lock (a configuration file: one daemon for it) in the test's directory
        environ = {"RUNTIME_DIRECTORY": str(directory)}
        options = replace(DaemonConfig.from_file(path, environ=environ), service=False, body=body, shard=even)
        with anyio.fail_after(40):
            outcome = await Daemon(options).serve()
        assert outcome.served and not outcome.forced and body.played
