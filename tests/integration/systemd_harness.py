"""systemd's side of the protocols, for tests that run the daemon as a child process (docs/systemd.md).

* :class:`NotifyReceiver`: a datagram socket the test binds (a path, or a name in the abstract
  namespace) and hands to the child as ``$NOTIFY_SOCKET``, as systemd does. ``SO_PASSCRED``
  makes the kernel attach the sender's pid to every datagram, so a test can check that the
  notifications come from the daemon itself (``NotifyAccess=main``).
* :func:`spawn`: ``python -m supervisor run --config ...`` (:func:`tests.harness.process.spawn`)
  through a small launcher that places the listening sockets on descriptors 3 and 4 and sets
  ``LISTEN_PID`` (and ``WATCHDOG_PID``) to its own pid before it ``exec``s the daemon, so they name
  the daemon, as systemd sets them for the process it forks.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import Process

from tests.harness import process
from tests.harness.config import short_dir

__all__ = ["Notice", "NotifyReceiver", "listening_unix", "notify_receiver", "spawn"]

_CRED = struct.Struct("3i")

# the launcher: descriptors given as LAUNCH_FDS=a,b become 3 and 4, LISTEN_PID / WATCHDOG_PID name
# this very process, then exec (same pid) into the daemon
LAUNCHER = """
import fcntl, os, sys
fds = [int(x) for x in os.environ.pop("LAUNCH_FDS", "").split(",") if x]
held = [fcntl.fcntl(fd, fcntl.F_DUPFD, 64) for fd in fds]  # out of the way of 3, 4, ...
for fd in fds:
    os.close(fd)
for target, fd in enumerate(held, start=3):
    os.dup2(fd, target)  # inheritable by default
    os.close(fd)
if fds:
    os.environ["LISTEN_PID"] = str(os.getpid())
if "WATCHDOG_USEC" in os.environ:
    os.environ["WATCHDOG_PID"] = str(os.getpid())
os.execv(sys.executable, [sys.executable, *sys.argv[1:]])
"""


@dataclass(frozen=True)
class Notice:
    """One notification: the sender's pid (from the kernel) and its assignments."""

    pid: int
    fields: dict[str, str]

    def __getitem__(self, key: str) -> str:
        return self.fields[key]

    def get(self, key: str) -> str | None:
        return self.fields.get(key)


class NotifyReceiver:
    """systemd's notify socket, for one test: run :meth:`pump` in a task group."""

    def __init__(self, sock: socket.socket, value: str) -> None:
        self.sock = sock
        self.value = value
        self.notices: list[Notice] = []

    @property
    def env(self) -> dict[str, str]:
        return {"NOTIFY_SOCKET": self.value}

    async def pump(self) -> None:
        space = socket.CMSG_SPACE(_CRED.size)
        while True:
            await anyio.wait_readable(self.sock)
            while True:
                try:
                    data, ancillary, _flags, _addr = self.sock.recvmsg(65536, space, socket.MSG_DONTWAIT)
                except BlockingIOError:
                    break
                pid = -1
                for level, kind, payload in ancillary:
                    if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                        pid, _uid, _gid = _CRED.unpack(payload[: _CRED.size])
                fields = dict(line.split("=", 1) for line in data.decode().splitlines() if "=" in line)
                self.notices.append(Notice(pid, fields))

    def having(self, key: str, since: int = 0) -> list[Notice]:
        return [n for n in self.notices[since:] if key in n.fields]

    async def wait_for(
        self, predicate: Callable[[Notice], bool], *, since: int = 0, limit_s: float = 30.0
    ) -> tuple[int, Notice]:
        """The first notice from index ``since`` on that matches: (its index, it)."""
        with anyio.fail_after(limit_s):
            while True:
                for index in range(since, len(self.notices)):
                    if predicate(self.notices[index]):
                        return index, self.notices[index]
                await anyio.sleep(0.005)  # polling what the pump received, not a timer

    async def count(self, key: str, n: int, *, since: int = 0, limit_s: float = 30.0) -> None:
        """Wait until ``n`` notices carrying ``key`` arrived from index ``since`` on."""
        with anyio.fail_after(limit_s):
            while len(self.having(key, since)) < n:  # noqa: ASYNC110 - the pump appends; no event to wait on
                await anyio.sleep(0.005)  # polling what the pump received, not a timer


@contextlib.asynccontextmanager
async def notify_receiver(kind: str = "path") -> AsyncIterator[NotifyReceiver]:
    """A bound receiver (``path`` or ``abstract``) whose pump runs for the block's duration."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
    sock.setblocking(False)
    with short_dir("ss-sd-") as directory:
        if kind == "path":
            value = str(directory / "notify")
            sock.bind(value)
        else:
            name = f"ss-test-notify-{uuid.uuid4().hex}"
            sock.bind(b"\0" + name.encode())
            value = "@" + name
        receiver = NotifyReceiver(sock, value)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(receiver.pump)
                yield receiver
                tg.cancel_scope.cancel()
        finally:
            sock.close()


def listening_unix(path: Path, *, mode: int = 0o660, kind: int = socket.SOCK_STREAM) -> socket.socket:
    """What a ``.socket`` unit makes: a socket bound at ``path`` (and listening, for a stream)."""
    sock = socket.socket(socket.AF_UNIX, kind)
    sock.bind(str(path))
    os.chmod(path, mode)
    if kind == socket.SOCK_STREAM:
        sock.listen(128)
    return sock


async def spawn(
    config: Path,
    *,
    env: dict[str, str] | None = None,
    listeners: Sequence[socket.socket] = (),
    args: Sequence[str] = (),
    prefix: Sequence[str] = (),
) -> Process:
    """The daemon as a child (:func:`tests.harness.process.spawn`), launched the way systemd starts a
    socket-activated service.

    ``listeners`` become descriptors 3, 4, ... with ``LISTEN_FDS``/``LISTEN_PID`` (names go in
    ``env["LISTEN_FDNAMES"]``); ``prefix`` runs before the launcher (``unshare -m ...``).
    """
    extra: dict[str, Any] = dict(env or {})
    fds = [s.fileno() for s in listeners]
    if fds:
        extra["LAUNCH_FDS"] = ",".join(str(fd) for fd in fds)
        extra.setdefault("LISTEN_FDS", str(len(fds)))
    launcher = [*prefix, sys.executable, "-c", LAUNCHER]
    return await process.spawn(config, env=extra, args=args, launcher=launcher, pass_fds=fds)
