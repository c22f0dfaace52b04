"""The daemon as a child process (``python -m supervisor run --config PATH``), as users and systemd run it.

* :func:`spawn`: the child, with the test's variables over the process's own; ``launcher`` puts a
  command before the daemon's ``-m supervisor`` (systemd's side, tests/integration/systemd_harness.py:
  the listening sockets on descriptors 3, 4, ... and ``LISTEN_PID``, as systemd hands them over).
* :class:`Output`: its standard output read as it arrives, one JSON event per line, and its
  standard error.
* :func:`running_daemon`: a spawned daemon whose output is read for the block's duration and which,
  whatever happens in the test, is never left behind (killed and reaped); :class:`Daemon` adds its
  control socket (a script's client) and the waits a test needs. :func:`kill9` is the crash
  test's ``kill -9``.
* What a daemon left in its SQLite store, read beside it (:func:`integrity`, :func:`ledger_attempts`,
  :func:`server_sessions`).

Its configuration file comes from :mod:`tests.harness.config`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import sys
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import Process
from anyio.streams.text import TextReceiveStream

from supervisor.api.client import Client
from supervisor.api.protocol import Method
from supervisor.errors import ApiError, ApiUnavailable
from tests.harness.waits import wait_until

__all__ = [
    "CLI",
    "Daemon",
    "Output",
    "control_socket",
    "integrity",
    "kill9",
    "ledger_attempts",
    "running_daemon",
    "server_sessions",
    "spawn",
]

#: the command line's entry point, as ``python -m supervisor``
CLI = [sys.executable, "-m", "supervisor"]


async def spawn(
    config: Path,
    *,
    env: Mapping[str, str] | None = None,
    args: Sequence[str] = (),
    launcher: Sequence[str] = (),
    **options: Any,
) -> Process:
    """``python -m supervisor run --config CONFIG ARGS`` as a child, with ``env`` over the process's
    variables; ``launcher`` (an interpreter and what it runs first) replaces the plain interpreter;
    ``options`` go to :func:`anyio.open_process` (``pass_fds``, ``stdout``, ...)."""
    command = [*(launcher or [sys.executable]), "-m", "supervisor", "run", "--config", str(config), *args]
    return await anyio.open_process(command, env={**os.environ, **(env or {})}, **options)


class Output:
    """A process's standard output as it arrives (each line JSON-decoded when ``json_lines``) and
    its standard error; run :meth:`pump` in a task group."""

    def __init__(self, process: Process, *, json_lines: bool = True) -> None:
        self.process = process
        self.json_lines = json_lines
        #: the lines as written
        self.raw: list[str] = []
        #: the lines decoded (``json_lines``)
        self.records: list[dict[str, Any]] = []
        self.err = ""
        self._err_lock = anyio.Lock()
        self._err_done = False
        self._eof = False

    async def pump(self) -> None:
        """Read standard output (and standard error) until the process closes them."""
        assert self.process.stdout is not None
        async with anyio.create_task_group() as tg:
            if self.process.stderr is not None:
                tg.start_soon(self._read_err)
            buffer = ""
            async for chunk in TextReceiveStream(self.process.stdout):
                buffer += chunk
                *lines, buffer = buffer.split("\n")
                for line in lines:
                    self.raw.append(line)
                    if self.json_lines:
                        self.records.append(json.loads(line))
            self._eof = True

    async def _read_err(self) -> None:
        assert self.process.stderr is not None
        async with self._err_lock:  # one reader at a time: the pump's, or stderr()'s
            if self._err_done:
                return
            async for chunk in TextReceiveStream(self.process.stderr):
                self.err += chunk
            self._err_done = True

    async def stderr(self) -> str:
        """All of standard error, once the process has closed it (read here what the pump did not)."""
        await self._read_err()
        return self.err

    def named(self, event: str) -> list[dict[str, Any]]:
        """The event lines of ``event``."""
        return [r for r in self.records if r.get("event") == event]

    async def arrived(
        self,
        event: str,
        where: Callable[[dict[str, Any]], bool] | None = None,
        *,
        count: int = 1,
        limit_s: float = 10.0,
    ) -> list[dict[str, Any]]:
        """The event lines of ``event`` (those ``where`` holds for), once at least ``count`` came.

        Standard output is not the control socket: the daemon's writer thread takes a session's lines
        up to 20 ms after the loop buffered them (supervisor/runtime/stdout.py), so a line caused by a
        control call may come after its answer. Read what a call published through this, never right
        after it."""

        def matching() -> list[dict[str, Any]]:
            return [r for r in self.named(event) if where is None or where(r)]

        def ended() -> bool:
            return self.process.returncode is not None and self._eof

        await wait_until(lambda: len(matching()) >= count or ended(), limit_s)
        lines = matching()
        if len(lines) < count:
            raise AssertionError(f"the process exited {self.process.returncode} without {event}")
        return lines

    def typed(self, kind: str) -> list[dict[str, Any]]:
        """The lines of ``type`` ``kind`` (``watch --json``'s)."""
        return [r for r in self.records if r.get("type") == kind]


class Daemon(Output):
    """A daemon run as a process: its output, and its control socket as a script reaches it."""

    def __init__(self, process: Process, control: Path) -> None:
        super().__init__(process)
        self.control = control

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
    """A daemon serving ``config``, its output read until the block ends; then killed if still running."""
    process = await spawn(config, env=env)
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
    """Where :func:`tests.harness.config.daemon_config` puts the control socket."""
    return config.parent / "sockets" / "control.sock"


def kill9(daemon: Daemon) -> None:
    """``kill -9``: no signal handler, no drain, no flush."""
    daemon.process.send_signal(signal.SIGKILL)


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
