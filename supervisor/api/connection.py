"""One accepted client on a raw non-blocking socket, and the accept loop both services share.

Raw sockets rather than anyio streams, for two reasons: the peer check must come before any
byte is read (an asyncio transport starts reading the moment it is made), and a subscriber's
writer must know exactly how many bytes the kernel refused, to tell the outbox it is backlogged
instead of letting a transport buffer grow out of sight.

The accept loop checks each peer (``SO_PEERCRED``) before anything else, closes a refused one
(counted at once, published as ``SOCKET_PEER_REFUSED`` once per peer per interval with a count:
supervisor/api/refusals.py), answers ``TooManyConnections`` past the cap,
and runs every accepted connection in its own task: a failing connection never reaches another
or the daemon (a bug is logged at this boundary, with its traceback, and that connection closed).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import math
import socket
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
from anyio.abc import TaskStatus

from supervisor.api.events import Peer, PeerRefused
from supervisor.api.listen import Identity, PeerPolicy, bind_unix, identity, peer_of, remove_if_ours
from supervisor.api.protocol import MAX_MESSAGE_BYTES, ApiFault, FrameDecoder, encode_error
from supervisor.api.refusals import RefusalLog, Report
from supervisor.errors import ApiError
from supervisor.events import Event

__all__ = ["Connection", "UnixService"]

_log = logging.getLogger("supervisor.api")
_RECV = 65536
# accept() failing for lack of descriptors leaves the listener readable: pause instead of spinning
_EXHAUSTED_PAUSE_S = 0.1
_EXHAUSTED = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
#: refused peers: one SOCKET_PEER_REFUSED per peer per this many seconds, with its count
REFUSAL_REPORT_INTERVAL_S = 10.0


class Connection:
    """A connected client: its socket, its peer, and the framing of what it sends."""

    __slots__ = ("_closed", "decoder", "peer", "sock")

    def __init__(self, sock: socket.socket, peer: Peer, *, limit: int = MAX_MESSAGE_BYTES) -> None:
        self.sock = sock
        self.peer = peer
        self.decoder = FrameDecoder(limit)
        self._closed = False

    async def receive(self) -> list[bytes] | None:
        """The next complete messages; None at end of stream (a truncated last message is dropped).

        Raises the fatal ``MessageTooLarge`` :class:`ApiError` from the framing.
        """
        while True:
            try:
                data = self.sock.recv(_RECV)
            except BlockingIOError:
                await anyio.wait_readable(self.sock)
                continue
            except OSError:
                return None
            if not data:
                return None
            frames = self.decoder.feed(data)
            if frames:
                return frames

    async def send(self, data: bytes, *, max_wait_s: float | None = None) -> bool:
        """Write everything, waiting while the socket pushes back; False when the peer is gone.

        ``max_wait_s`` bounds only the waiting (a reply the kernel takes at once costs no timer):
        False as well when the peer has not read for that long.
        """
        view = memoryview(data)
        deadline = None if max_wait_s is None else anyio.current_time() + max_wait_s
        while view:
            try:
                sent = self.sock.send(view)
            except BlockingIOError:
                sent = 0
            except OSError:
                return False
            view = view[sent:]
            if view:
                with anyio.CancelScope(deadline=math.inf if deadline is None else deadline) as scope:
                    await anyio.wait_writable(self.sock)
                if scope.cancelled_caught:
                    return False
        return True

    def send_nowait(self, data: bytes) -> None:
        """Best effort, never waiting: a last error reply before closing, or the stream's end."""
        with contextlib.suppress(OSError):
            self.sock.send(data)

    def fail(self, error: ApiError) -> None:
        """Answer a fatal error and close: the stream cannot go on."""
        self.send_nowait(encode_error(error))
        self.close()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.sock.close()

    @property
    def closed(self) -> bool:
        return self._closed


Handler = Callable[[Connection], Awaitable[None]]


class UnixService:
    """Listens on one socket path; each accepted, allowed connection runs ``handler`` in its own task."""

    def __init__(
        self,
        name: str,
        path: Path,
        *,
        mode: int,
        group: int | None = None,
        policy: PeerPolicy,
        handler: Handler,
        max_connections: int,
        publish: Callable[[Event], object],
        timestamp: Callable[[], str],
        create_directory: bool = False,
        listener: socket.socket | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        refusal_interval: float = REFUSAL_REPORT_INTERVAL_S,
    ) -> None:
        self.name = name
        self.path = path
        self.policy = policy
        self._mode = mode
        self._group = group
        self._handler = handler
        self._max = max_connections
        self._publish = publish
        self._timestamp = timestamp
        self._monotonic = monotonic
        self._refusals = RefusalLog(refusal_interval)
        self._refusal_interval = refusal_interval
        self._create_directory = create_directory
        # a descriptor handed over by systemd socket activation (docs/systemd.md) instead of binding
        self._listener = listener
        # (device, inode, ctime) of the file we bound, removed at exit only if still ours; None if handed over
        self._ours: Identity | None = None
        # each connection's cancel scope: a reload that takes a peer's access away ends its connections
        self._running: dict[Connection, anyio.CancelScope] = {}
        self.active = 0
        self.accepted = 0
        self.refused = 0
        self.over_capacity = 0
        self.internal_errors = 0

    def stats(self) -> dict[str, int | str]:
        return {
            "path": str(self.path),
            "connections": self.active,
            "accepted": self.accepted,
            "refusedPeers": self.refused,
            "overCapacity": self.over_capacity,
            "internalErrors": self.internal_errors,
        }

    def reconfigure(self, policy: PeerPolicy, max_connections: int) -> int:
        """Take a reloaded access list and connection cap: new connections are checked against
        ``policy``, and the connections of peers it no longer lets in are ended now (their access
        was taken away; they would otherwise keep it for as long as they stay connected). Returns
        how many were ended."""
        self.policy = policy
        self._max = max_connections
        ended = 0
        for connection, scope in list(self._running.items()):
            if not policy.allows(connection.peer):
                scope.cancel()
                ended += 1
        return ended

    def bind(self) -> None:
        """Bind now (before any session starts): a path held by a live daemon fails here, not mid-start."""
        if self._listener is None:
            self._listener = bind_unix(
                self.path, self._mode, group=self._group, create_directory=self._create_directory
            )
            self._ours = identity(self.path)

    def unbind(self) -> None:
        """Close the listener and remove our socket file (a start that failed after binding)."""
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        remove_if_ours(self.path, self._ours)
        self._ours = None

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Bind unless bound (or handed over), report started, accept until cancelled."""
        self.bind()
        listener, ours = self._listener, self._ours
        assert listener is not None
        listener.setblocking(False)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._report_refusals, name=f"api:{self.name}:refusals")
                task_status.started()
                while True:
                    accepted = await self._accept(listener)
                    if accepted is not None:
                        self._admit(tg, accepted)
        finally:
            listener.close()
            # only our own file: a daemon started after us on this path keeps its socket
            remove_if_ours(self.path, ours)

    async def _accept(self, listener: socket.socket) -> socket.socket | None:
        await anyio.wait_readable(listener)
        try:
            sock, _ = listener.accept()
        except BlockingIOError:
            return None
        except OSError as exc:
            if exc.errno in _EXHAUSTED:
                await anyio.sleep(_EXHAUSTED_PAUSE_S)
            return None
        sock.setblocking(False)
        return sock

    def _admit(self, tg: anyio.abc.TaskGroup, sock: socket.socket) -> None:
        try:
            peer = peer_of(sock)
        except OSError:
            sock.close()
            return
        if not self.policy.allows(peer):
            # before any byte is read or sent: the peer learns nothing but a closed connection
            sock.close()
            self.refused += 1
            # counted at once; published once per peer per interval (a peer can retry thousands of times a second)
            self._publish_refusals(self._refusals.refused(peer, self._monotonic()))
            return
        connection = Connection(sock, peer)
        if self.active >= self._max:
            self.over_capacity += 1
            connection.fail(
                ApiError(
                    ApiFault.TOO_MANY_CONNECTIONS,
                    {"limit": self._max, "problem": f"at most {self._max} connections on this socket"},
                    fatal=True,
                )
            )
            return
        self.accepted += 1
        self.active += 1
        tg.start_soon(self._run, connection, name=f"api:{self.name}:{peer.pid}")

    def _publish_refusals(self, reports: list[Report]) -> None:
        for report in reports:
            self._publish(PeerRefused(self.name, report.peer, self.refused, self._timestamp(), report.count))

    async def _report_refusals(self) -> None:
        """The counts of windows that ended while their peer stayed quiet: reported within an interval."""
        while True:
            await anyio.sleep(self._refusal_interval)
            self._publish_refusals(self._refusals.due(self._monotonic()))

    async def _run(self, connection: Connection) -> None:
        try:
            with anyio.CancelScope() as scope:
                self._running[connection] = scope
                await self._handler(connection)
        except Exception:  # the last-resort boundary of one connection: never the daemon's
            self.internal_errors += 1
            _log.error(
                "%s socket: connection from pid %s failed", self.name, connection.peer.pid, exc_info=True
            )
            # the client is told it was us, not its peer check (a connection closed without a
            # byte is what a refused uid sees; ``ctl`` would say so)
            connection.fail(
                ApiError(
                    ApiFault.INTERNAL_ERROR,
                    {"problem": "the daemon failed handling this connection; its log has the details"},
                    fatal=True,
                )
            )
        finally:
            self._running.pop(connection, None)
            self.active -= 1
            connection.close()
