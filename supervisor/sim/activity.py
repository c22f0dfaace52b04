"""The simulators' activity log: one entry per thing a client did, in a bounded ring, read as NDJSON.

The recorder (:mod:`supervisor.sim.recorder`) counts; this log keeps *who did what when*, which the
fleet's invariants need (docs/simulators.md, "Activity log"): no session active on two daemons at
once, epochs that never go back, nothing sent by a paused daemon after its deadline. Both
simulators share it (``sim.activity``, ``GET {admin}/activity``).

Every entry has ``seq`` (1, 2, 3, ...: the order entries were written), ``t`` (the simulator's
clock, epoch seconds, when the request or frame was *received*: a long poll is written when it is
answered, so ``t`` may be older than an earlier ``seq``'s), ``kind`` (:class:`ActivityKind`),
``listener``, ``peer`` (``host:port`` of the client's socket), ``conn`` (a number per TCP connection,
the same for every request or frame it carried), ``session`` (the simulator's session key, see
below), and ``member`` / ``epoch`` when the client stamped them (:data:`supervisor.stamp.STAMP_HEADER`
on the request, or on the WebSocket's upgrade), else null.
Per kind:

* ``request``: an HTTP request answered: ``method``, ``endpoint`` (the route template), ``status``;
  a CXone long poll (``get-next-event``) adds ``handle``: the agent session it polled (its first
  ``sessionId``, which stays the same while the rolling ``sessionId`` changes);
* ``connect``: a WebSocket upgrade answered (``status`` 101, or the refusal's 4xx/5xx);
* ``frame``: a frame a client sent on a WebSocket: ``action`` (Web Messaging) or ``message``
  (notifications: what the frame asked);
* ``disconnect``: a WebSocket connection ended;
* ``displaced``: a Web Messaging session configured on a second connection took the session from
  the first (which is told ``ConnectionClosedEvent`` and closed), or a notifications channel's newer
  socket replaced the older: ``peer`` / ``conn`` / ``member`` / ``epoch`` are the displaced socket's,
  ``by_peer`` / ``by_conn`` / ``by_member`` / ``by_epoch`` the socket that took it.

Session keys never carry a secret: a Web Messaging guest session is ``wm:`` and the first 16 hex
digits of the BLAKE2b digest of its guest token (:func:`token_key`: a test that knows the token
computes the same key); a notifications socket is keyed by its channel id; a Genesys REST request by
the key its fault gate uses (the conversation or channel id when the route names one, else the
token's printable stand-in, never the token); a login by its client id; a CXone request by its agent id.
An HTTP request the client gave up on before its answer (a cancelled handler) is recorded with 499,
as nginx's "client closed request".

**A bounded ring.** At most ``capacity`` entries are kept (the simulators' ``activity_capacity``);
the oldest go first. A reader keeps a cursor: ``since(n)`` returns the entries after ``seq`` n. When
entries after its cursor were dropped before it read them (it fell behind the ring), the answer
starts with a ``gap`` entry ``{"kind": "gap", "from": n + 1, "to": m, "lost": m - n}`` saying which
``seq`` it will never see; nothing else changes (the reader goes on from the entries that follow).
An invariant checked over a log with a gap is not proven, and a checker must say so.
"""

from __future__ import annotations

import asyncio
import enum
import hashlib
import weakref
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from websockets.asyncio.server import ServerConnection

from supervisor.clock import Clock, SystemClock
from supervisor.stamp import NO_STAMP, STAMP_HEADER, Stamp, parse_stamp

__all__ = [
    "ACTIVITY_FIELDS",
    "ACTIVITY_SESSION",
    "DEFAULT_CAPACITY",
    "MAX_PAGE",
    "ActivityKind",
    "ActivityLog",
    "ActivityPage",
    "Origin",
    "http_middleware",
    "token_key",
    "ws_origin",
]

#: entries kept by default: about 15 MB (760 bytes an entry, measured with tracemalloc on CXone poll entries)
DEFAULT_CAPACITY: Final = 20_000
#: the most entries one ``GET /activity`` returns (``limit``); the reader asks again from the last ``seq``
MAX_PAGE: Final = 50_000


class ActivityKind(enum.StrEnum):
    REQUEST = "request"
    CONNECT = "connect"
    FRAME = "frame"
    DISCONNECT = "disconnect"
    DISPLACED = "displaced"
    GAP = "gap"


def token_key(token: str, prefix: str = "wm") -> str:
    """A session key for a secret credential: ``prefix:`` and 16 hex digits of its BLAKE2b digest."""
    return f"{prefix}:{hashlib.blake2b(token.encode(), digest_size=8).hexdigest()}"


@dataclass(frozen=True, slots=True)
class ActivityPage:
    """What :meth:`ActivityLog.since` returns: entries after the cursor, and how many it missed."""

    entries: list[dict[str, Any]]
    lost: int
    #: the cursor to read on from: the last ``seq`` returned (or skipped), else the one given
    next: int

    def lines(self, since: int) -> list[dict[str, Any]]:
        """The NDJSON objects to send: a ``gap`` entry first when entries were lost."""
        if not self.lost:
            return self.entries
        gap = {"kind": ActivityKind.GAP.value, "from": since + 1, "to": since + self.lost, "lost": self.lost}
        return [gap, *self.entries]


class ActivityLog:
    """The ring of activity entries (see the module docstring)."""

    def __init__(self, clock: Clock | None = None, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self._clock: Clock = clock if clock is not None else SystemClock()
        self.capacity = capacity
        self._ring: deque[dict[str, Any]] = deque(maxlen=capacity)
        self._seq = 0
        # a number per transport (TCP connection); weak, so a closed connection's entry goes with it
        self._conns: weakref.WeakKeyDictionary[object, int] = weakref.WeakKeyDictionary()
        self._next_conn = 0

    @property
    def last_seq(self) -> int:
        return self._seq

    def now(self) -> float:
        """The receive time to give :meth:`record` (the simulator's clock)."""
        return self._clock.time()

    def conn_id(self, transport: object | None) -> int | None:
        """The number of the connection ``transport`` is (the same for every request it carries)."""
        if transport is None:
            return None
        number = self._conns.get(transport)
        if number is None:
            self._next_conn += 1
            number = self._conns[transport] = self._next_conn
        return number

    def record(
        self,
        kind: ActivityKind,
        *,
        t: float | None = None,
        listener: str,
        peer: str | None,
        conn: int | None,
        session: str | None,
        stamp: Stamp = NO_STAMP,
        extra: Mapping[str, str | int | float | None] | None = None,
    ) -> None:
        """Append one entry (``extra``: the fields of its kind); ``t`` is when it was received (now when None)."""
        self._seq += 1
        entry: dict[str, Any] = {
            "seq": self._seq,
            "t": self._clock.time() if t is None else t,
            "kind": kind.value,
            "listener": listener,
            "peer": peer,
            "conn": conn,
            "session": session,
            "member": stamp.member,
            "epoch": stamp.epoch,
        }
        if extra:
            entry.update(extra)
        self._ring.append(entry)

    def since(self, cursor: int, limit: int = MAX_PAGE) -> ActivityPage:
        """Up to ``limit`` entries with ``seq > cursor``, and how many after it were dropped unread.

        ``0 <= cursor <= last_seq`` (the endpoint refuses anything else)."""
        oldest = self._ring[0]["seq"] if self._ring else self._seq + 1
        lost = max(0, oldest - cursor - 1)
        start = max(cursor + 1, oldest) - oldest  # index in the ring: its seqs are consecutive
        entries = [self._ring[i] for i in range(start, min(len(self._ring), start + limit))]
        last = entries[-1]["seq"] if entries else cursor + lost
        return ActivityPage(entries, lost, last)

    def reset(self) -> None:
        """Forget every entry; ``seq`` keeps counting (a reader's cursor stays meaningful)."""
        self._ring.clear()


#: the session key an HTTP handler found for its request (the activity middleware records it)
ACTIVITY_SESSION: web.RequestKey[str] = web.RequestKey("activity_session", str)
#: more fields a handler adds to its request's entry (a CXone poll's ``handle``)
ACTIVITY_FIELDS: web.RequestKey[dict[str, str | int | None]] = web.RequestKey("activity_fields", dict)


def peer_of(address: Any) -> str | None:
    """``host:port`` of a socket address (``[v6]:port`` for IPv6), None when unknown."""
    if not address or not isinstance(address, tuple | list) or len(address) < 2:
        return None
    host = str(address[0])
    return f"[{host}]:{address[1]}" if ":" in host else f"{host}:{address[1]}"


def http_middleware(log: ActivityLog, listener: str) -> Middleware:
    """Record every request of an aiohttp app as a ``request`` entry (outermost but the body deadline:
    it sees the status the client gets). The handler names the session in ``request[ACTIVITY_SESSION]``."""

    @web.middleware
    async def activity(request: web.Request, handler: Handler) -> web.StreamResponse:
        received = log.now()
        status = 500
        try:
            response = await handler(request)
            status = response.status
            return response
        except web.HTTPException as exc:
            status = exc.status
            raise
        except asyncio.CancelledError:
            status = 499  # the client went away before its answer
            raise
        finally:
            transport = request.transport
            log.record(
                ActivityKind.REQUEST,
                t=received,
                listener=listener,
                peer=peer_of(transport.get_extra_info("peername")) if transport is not None else None,
                conn=log.conn_id(transport),
                session=request.get(ACTIVITY_SESSION),
                stamp=parse_stamp(request.headers.get(STAMP_HEADER)),
                extra={
                    "method": request.method,
                    "endpoint": _template(request),
                    "status": status,
                    **request.get(ACTIVITY_FIELDS, {}),
                },
            )

    return activity


def _template(request: web.Request) -> str:
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else request.path[:200]


#: a WebSocket connection as the log names it: peer, connection number, stamp
Origin = tuple[str | None, int | None, Stamp]


def ws_origin(log: ActivityLog, conn: ServerConnection) -> Origin:
    """A WebSocket connection's peer, connection number and stamp (from its upgrade request)."""
    request = conn.request
    stamp = parse_stamp(request.headers.get(STAMP_HEADER)) if request is not None else NO_STAMP
    return peer_of(conn.remote_address), log.conn_id(conn.transport), stamp
