"""The socket API over real Unix sockets, in front of a daemon wired to the simulators.

:func:`api_daemon` is the in-process daemon of :mod:`tests.harness.in_process` with its
:class:`~supervisor.api.server.SocketApi` (as the composition root wires it: supervisor/runtime/assembly.py,
``socket_api``; the board on the bus before any session moves, the sockets bound before they are used);
:class:`Conn` is a small async client speaking the wire protocol, :class:`Watcher` a subscriber that
reads everything into a list as it arrives, :func:`calls_as` and :func:`cli_as` a client and the
command line run as another uid.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import pkgutil
import socket
import sys
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import anyio
from anyio.abc import SocketStream

from supervisor.api.control import Reload
from supervisor.api.protocol import FrameDecoder, Method, Reply, encode_call, parse_reply
from supervisor.clock import Clock
from supervisor.config import SocketsConfig
from tests.harness.config import short_dir
from tests.harness.in_process import ApiSockets, Harness, supervised


@contextlib.asynccontextmanager
async def api_daemon(
    config_text: str,
    tmp: Path,
    *,
    sockets: SocketsConfig | None = None,
    stop: anyio.Event | None = None,
    reload: Reload | None = None,
    clock: Clock | None = None,
) -> AsyncIterator[Harness]:
    """The in-process daemon (:func:`tests.harness.in_process.supervised`) with its socket API at
    ``subscribe.sock`` and ``control.sock`` in a short directory; ``clock`` is the API's own."""
    with short_dir() as directory:
        paths = (directory / "subscribe.sock", directory / "control.sock")
        api = ApiSockets(paths, sockets or SocketsConfig(), stop=stop, reload=reload, clock=clock)
        async with supervised(config_text, tmp, sockets=api) as daemon:
            yield daemon


class Conn:
    """One client connection: send calls, read replies (None at EOF)."""

    def __init__(self, stream: SocketStream) -> None:
        self.stream = stream
        self.decoder = FrameDecoder(64 * 1024 * 1024)
        self.pending: deque[bytes] = deque()
        self.received = 0

    @classmethod
    async def open(cls, path: Path) -> Conn:
        return cls(await anyio.connect_unix(path))

    async def send_raw(self, data: bytes) -> None:
        await self.stream.send(data)

    async def send(self, method: str, parameters: dict[str, Any] | None = None, **flags: bool) -> None:
        await self.stream.send(encode_call(method, parameters, **flags))

    async def reply(self, limit_s: float = 10.0) -> Reply | None:
        with anyio.fail_after(limit_s):
            while not self.pending:
                try:
                    data = await self.stream.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError, ConnectionResetError):
                    return None
                self.received += len(data)
                self.pending.extend(self.decoder.feed(data))
        return parse_reply(self.pending.popleft())

    async def call(self, method: str, parameters: dict[str, Any] | None = None) -> Reply:
        await self.send(method, parameters)
        reply = await self.reply()
        assert reply is not None, f"{method}: the connection closed"
        return reply

    async def aclose(self) -> None:
        await self.stream.aclose()


@dataclass
class Watcher:
    """A subscriber that reads every message as it arrives (run it in a task group)."""

    conn: Conn
    messages: list[dict[str, Any]] = field(default_factory=list)
    closed: bool = False

    @classmethod
    async def subscribe(cls, path: Path, parameters: dict[str, Any] | None = None) -> Watcher:
        conn = await Conn.open(path)
        await conn.send(Method.SUBSCRIBE, parameters or {}, more=True)
        return cls(conn)

    async def run(self) -> None:
        try:
            while True:
                reply = await self.conn.reply(limit_s=60.0)
                if reply is None:
                    self.closed = True
                    return
                assert reply.error is None, reply
                self.messages.append(reply.parameters)
        finally:
            with anyio.CancelScope(shield=True):
                await self.conn.aclose()

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [m for m in self.messages if m["type"] == kind]

    @property
    def snapshot(self) -> dict[str, Any]:
        return self.messages[0]


async def calls_as(
    path: Path,
    calls: list[tuple[str, dict[str, Any]]],
    *,
    uid: int,
    gid: int,
    groups: list[int],
    more: bool = False,
) -> list[tuple[str | None, dict[str, Any]]] | str:
    """Make ``calls`` on one connection to ``path`` as ``uid`` (a forked child that drops root with
    ``os.setuid``: real peer credentials); each reply's (error, parameters), or why it could not
    (``closed after N replies`` when the daemon closed the connection). ``more``: each call asks for
    a stream (``Subscribe``), and its first reply is the one read."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: plain blocking sockets, then _exit (never back into pytest)
        report: Any = "?"
        try:
            os.close(read_end)
            os.setgroups(groups)
            os.setgid(gid)
            os.setuid(uid)
            client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            client.settimeout(20)
            client.connect(str(path))
            replies: list[Any] = []
            buffer = b""
            try:
                for method, parameters in calls:
                    client.sendall(encode_call(method, parameters, more=more))
                    while b"\0" not in buffer:
                        chunk = client.recv(1 << 16)
                        if not chunk:
                            raise ConnectionResetError
                        buffer += chunk
                    frame, _, buffer = buffer.partition(b"\0")
                    reply = parse_reply(frame)
                    replies.append([reply.error, reply.parameters])
                report = replies
            except (ConnectionResetError, BrokenPipeError):
                report = f"closed after {len(replies)} replies"
        except BaseException as exc:
            report = f"error {type(exc).__name__}: {exc}"
        finally:
            os.write(write_end, json.dumps(report).encode())
            os._exit(0)
    os.close(write_end)
    chunks = []
    try:
        while True:
            # the daemon runs on this event loop: wait for the child without blocking it
            await anyio.wait_readable(read_end)
            chunk = os.read(read_end, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(read_end)
        await anyio.to_thread.run_sync(os.waitpid, pid, 0)
    result = json.loads(b"".join(chunks))
    return result if isinstance(result, str) else [(e, p) for e, p in result]


async def cli_as(args: list[str], *, uid: int, gid: int, groups: list[int]) -> tuple[int, str, str]:
    """``session-supervisor ARGS`` run as ``uid``: (exit code, stdout, stderr).

    A forked child drops root with ``os.setuid`` and runs the command line's ``main`` with its
    standard output and error on pipes: real peer credentials on the socket. (The interpreter and
    its standard library live under /root, which another uid cannot enter: the child does not exec
    it again, and imports what the commands need before it drops root.)
    """
    out_read, out_write = os.pipe()
    err_read, err_write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never back into pytest
        os.close(out_read)
        os.close(err_read)
        _cli_child(args, out_write, err_write, uid=uid, gid=gid, groups=groups)
    os.close(out_write)
    os.close(err_write)
    captured: dict[int, bytes] = {out_read: b"", err_read: b""}

    async def drain(fd: int) -> None:
        while True:
            await anyio.wait_readable(fd)
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return
            captured[fd] += chunk

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(drain, out_read)
            tg.start_soon(drain, err_read)
    finally:
        os.close(out_read)
        os.close(err_read)
    _, status = await anyio.to_thread.run_sync(os.waitpid, pid, 0)
    return os.waitstatus_to_exitcode(status), captured[out_read].decode(), captured[err_read].decode()


def _cli_child(args: list[str], out: int, err: int, *, uid: int, gid: int, groups: list[int]) -> NoReturn:
    code = 70
    try:
        os.dup2(out, 1)
        os.dup2(err, 2)
        sys.stdout = open(1, "w", encoding="utf-8", errors="backslashreplace", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False)  # noqa: SIM115
        # the standard library lives under /root too: import what the commands use while still root
        import supervisor.cli
        from supervisor.cli import main

        for module in pkgutil.iter_modules(supervisor.cli.__path__, "supervisor.cli."):
            importlib.import_module(module.name)
        for name in ("resource", "rich.table", "rich.live", "rich.console"):
            importlib.import_module(name)
        os.setgroups(groups)
        os.setgid(gid)
        os.setuid(uid)

        try:
            main(args)
            code = 0
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 1
    except BaseException as exc:  # the test shows what went wrong in the child
        os.write(2, f"cli_as: {type(exc).__name__}: {exc}\n".encode())
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)
