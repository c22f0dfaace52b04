"""The daemon as a child process (``python -m supervisor run``), as systemd or a script runs it.

:func:`running_daemon` starts it, follows its stdout (one JSON event per line) and stderr, and
whatever happens in the test, never leaves it behind: a daemon still running when the block ends
is killed (SIGKILL) and reaped. :func:`kill9` is the crash test's ``kill -9``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import Process
from anyio.streams.text import TextReceiveStream

from supervisor.api.client import Client
from supervisor.api.protocol import Method
from supervisor.errors import ApiError, ApiUnavailable
from supervisor.sim.genesys import GenesysSimulator
from tests.integration.runtime_harness import genesys_config

CLI = [sys.executable, "-m", "supervisor"]


@dataclass
class Daemon:
    process: Process
    control: Path
    records: list[dict[str, Any]] = field(default_factory=list)
    err: str = ""

    async def pump(self) -> None:
        assert self.process.stdout is not None and self.process.stderr is not None
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._err)
            buffer = ""
            async for chunk in TextReceiveStream(self.process.stdout):
                buffer += chunk
                *lines, buffer = buffer.split("\n")
                self.records += [json.loads(line) for line in lines if line.strip()]

    async def _err(self) -> None:
        assert self.process.stderr is not None
        async for chunk in TextReceiveStream(self.process.stderr):
            self.err += chunk

    def named(self, name: str) -> list[dict[str, Any]]:
        return [r for r in self.records if r.get("event") == name]

    def call(self, method: str, parameters: dict[str, Any] | None = None) -> dict[str, Any]:
        """One control call (blocking: a script's client); raises ApiError / ApiUnavailable."""
        with Client(self.control, timeout=30.0) as client:
            return client.call(method, parameters)

    async def acall(self, method: str, parameters: dict[str, Any] | None = None) -> dict[str, Any]:
        return await anyio.to_thread.run_sync(self.call, method, parameters)

    async def wait_ready(self, active: int, limit_s: float = 45.0) -> None:
        """Until the control socket answers and ``active`` sessions are active."""
        with anyio.fail_after(limit_s):
            while True:
                try:
                    status = await self.acall(Method.STATUS)
                except (ApiUnavailable, ApiError):
                    status = None
                if status is not None and status["sessions"]["byState"].get("active", 0) >= active:
                    return
                if self.process.returncode is not None:
                    raise AssertionError(f"the daemon exited {self.process.returncode}: {self.err}")
                await anyio.sleep(0.05)  # polling the daemon's state, not waiting for a timer

    async def settled(self, limit_s: float = 45.0) -> dict[str, Any]:
        """Until no attribute write is queued, being sent or awaiting verification."""
        with anyio.fail_after(limit_s):
            while True:
                status = (await self.acall(Method.ATTRIBUTES_STATUS))["attributes"]
                rows = status.get("rows", {})
                if rows and not any(rows.get(k, 0) for k in ("pending", "sending", "accepted")):
                    return status
                await anyio.sleep(0.05)  # polling the daemon's state, not waiting for a timer

    async def stop(self, limit_s: float = 30.0) -> int:
        """SIGTERM (the drain), then the exit code."""
        self.process.send_signal(signal.SIGTERM)
        with anyio.fail_after(limit_s):
            return await self.process.wait()


@contextlib.asynccontextmanager
async def running_daemon(config: Path, *, env: Mapping[str, str] | None = None) -> AsyncIterator[Daemon]:
    environ = dict(os.environ)
    environ.update(env or {})
    process = await anyio.open_process([*CLI, "run", "--config", str(config)], env=environ)
    daemon = Daemon(process, control_socket(config))
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(daemon.pump)
            try:
                yield daemon
            finally:
                with anyio.CancelScope(shield=True):
                    if process.returncode is None:
                        process.kill()
                    await process.wait()
                tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await process.aclose()


def control_socket(config: Path) -> Path:
    return config.parent / "sockets" / "control.sock"


def kill9(daemon: Daemon) -> None:
    """``kill -9``: no signal handler, no drain, no flush."""
    daemon.process.send_signal(signal.SIGKILL)


def daemon_config(
    sim: GenesysSimulator,
    directory: Path,
    sessions: list[tuple[str, str | None]],
    *,
    store: Path | None = None,
    verify_after: float = 0.3,
    queue_depth: int = 50,
    synchronous: str = "normal",
    extra: str = "",
    cxone: dict[str, str] | None = None,
    cxone_sessions: Sequence[tuple[str, str]] = (),
) -> Path:
    """A config file with the sockets in ``directory/sockets`` (short enough for sun_path) and
    Web Messaging sessions ``(id, conversation id)``."""
    sockets = directory / "sockets"
    sockets.mkdir(exist_ok=True)
    text = f'[sockets]\nsubscribe = "{sockets / "subscribe.sock"}"\ncontrol = "{sockets / "control.sock"}"\n'
    if store is not None:
        text += f'[store]\npath = "{store}"\nsynchronous = "{synchronous}"\n'
    text += f"[attributes]\nqueueDepth = {queue_depth}\nverifyAfter = {verify_after}\n{extra}"
    text += genesys_config(sim.urls, 0)
    if cxone is not None:
        text += (
            f'[platforms.cxone]\nauthUrl = "{cxone["auth"]}"\nclientId = "app@vendor"\n'
            'clientSecretFile = "cxone-secret"\nusername = "agent1"\npasswordFile = "cxone-password"\n'
            "pollTimeout = 1\npollWatchdog = 5.0\n"
        )
        (directory / "cxone-secret").write_text("not-a-real-secret")
        (directory / "cxone-password").write_text("not-a-real-access-key-secret")
    for session_id, conversation in sessions:
        text += f'[[sessions]]\nid = "{session_id}"\nplatform = "genesys"\nkind = "webmessaging"\n'
        if conversation is not None:
            text += f'conversationId = "{conversation}"\n'
    for session_id, agent in cxone_sessions:
        text += (
            f'[[sessions]]\nid = "{session_id}"\nplatform = "cxone"\nkind = "agent-session"\n'
            f'agentId = "{agent}"\nstationId = "station-{agent}"\n'
        )
    config = directory / "supervisor.toml"
    config.write_text(text)
    (directory / "genesys-secret").write_text("not-a-real-secret")
    return config


def integrity(path: Path) -> str:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return "; ".join(str(r[0]) for r in conn.execute("PRAGMA integrity_check"))
    finally:
        conn.close()


def ledger_attempts(path: Path) -> dict[str, int]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return dict(conn.execute("SELECT idempotency_key, attempts FROM ledger"))
    finally:
        conn.close()


def server_sessions(path: Path) -> dict[str, dict[str, Any]]:
    """The session ledger as the file holds it (read-only, beside a running daemon: WAL)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    try:
        return {r["session_id"]: dict(r) for r in conn.execute("SELECT * FROM server_sessions")}
    finally:
        conn.close()
