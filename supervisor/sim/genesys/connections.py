"""Open WebSocket connections of one listener, and the connection faults applied to them.

Both Genesys WebSocket listeners (Web Messaging, notifications) use :class:`WsListener` for:

- the handshake: ADMISSION_LIMIT (429 or 503 with ``Retry-After``) and LATENCY, recording every
  attempt as accepted or refused (:meth:`WsListener.admit`);
- connection faults when they start (``FaultController.on_activate``): DROP =
  ``transport.abort()`` with no close frame, so the client sees 1006 (RFC 6455 §7.1.5);
  CLOSE = a close frame with the chosen code (§7.4.1); BLACKHOLE = ``pause_reading()``, nothing
  answered, TCP kept open, resumed when the fault ends; plus per-listener kinds (``extra``);
- faults still active when a connection sends a frame (:meth:`WsListener.intercept`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from typing import Any

from websockets.asyncio.server import ServerConnection
from websockets.http11 import Request, Response

from supervisor.sim.activity import ActivityKind, Origin, ws_origin
from supervisor.sim.faults import Fault, FaultKind, retry_after_header
from supervisor.sim.genesys.context import SimContext
from supervisor.vocabulary import CloseCode

__all__ = ["WsListener"]

ExtraAction = Callable[[ServerConnection, Fault], None]
_ONGOING = (FaultKind.DROP, FaultKind.CLOSE, FaultKind.BLACKHOLE)


class WsListener:
    """Connections of one WebSocket listener (``name``), keyed for share selection."""

    def __init__(self, ctx: SimContext, name: str, endpoint: str) -> None:
        self.ctx = ctx
        self.name = name
        self.endpoint = endpoint
        self.conns: dict[ServerConnection, str] = {}
        # [opened, last frame] on the injected clock, for the idle and lifetime limits
        self.times: dict[ServerConnection, list[float]] = {}
        self._next_sweep = 0.0
        self.blackholed: dict[ServerConnection, str] = {}
        self.origins: dict[ServerConnection, Origin] = {}
        self.extra: dict[FaultKind, ExtraAction] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        ctx.faults.on_activate(self._activated)
        ctx.faults.on_clear(self._cleared)

    # -- handshake ----------------------------------------------------------------------------------

    def refuse(
        self, conn: ServerConnection, status: int, text: str, retry_after: str | None = None
    ) -> Response:
        """An HTTP answer instead of the upgrade, recorded as a refused attempt."""
        self.ctx.recorder.record_attempt(self.name, accepted=False)
        self.record(conn, ActivityKind.CONNECT, None, status=status)
        response = conn.respond(status, text + "\n")
        if retry_after is not None:
            response.headers["Retry-After"] = retry_after
        return response

    async def admit(self, conn: ServerConnection, request: Request) -> Response | None:
        """ADMISSION_LIMIT and LATENCY at the handshake; None = accept (recorded)."""
        recorder = self.ctx.recorder
        recorder.handshake_started(self.name)
        try:
            return await self._admit(conn)
        finally:
            recorder.handshake_ended(self.name)

    async def _admit(self, conn: ServerConnection) -> Response | None:
        key = _peer(conn)
        latency = self.ctx.gate.hit(FaultKind.LATENCY, key, self.endpoint)
        if latency is not None:
            await asyncio.sleep(float(latency.params["latency_ms"]) / 1000.0)
        fault = self.ctx.faults.admission(key, self.endpoint)
        if fault is not None:
            self.ctx.recorder.record_fault_hit(fault)
            status = int(fault.params["status"])
            retry = retry_after_header(fault.params.get("retry_after"), self.ctx.clock.time())
            text = "Too Many Requests" if status == 429 else "Service Unavailable"
            return self.refuse(conn, status, text, retry)
        self.ctx.recorder.record_attempt(self.name, accepted=True)
        self.record(conn, ActivityKind.CONNECT, None, status=101)
        return None

    def _origin(self, conn: ServerConnection) -> Origin:
        origin = self.origins.get(conn)
        return origin if origin is not None else ws_origin(self.ctx.activity, conn)

    def record(
        self, conn: ServerConnection, kind: ActivityKind, session: str | None, **fields: str | int | None
    ) -> None:
        """One activity entry for ``conn`` (peer, connection number and stamp from its upgrade)."""
        peer, number, stamp = self._origin(conn)
        self.ctx.activity.record(
            kind, listener=self.name, peer=peer, conn=number, session=session, stamp=stamp, extra=fields
        )

    def displaced(self, session: str, old: ServerConnection, new: ServerConnection) -> None:
        """A ``displaced`` entry: ``old`` lost ``session`` to ``new`` (both peers, both stamps)."""
        peer, number, stamp = self._origin(old)
        by_peer, by_number, by_stamp = self._origin(new)
        extra: dict[str, str | int | None] = {
            "by_peer": by_peer,
            "by_conn": by_number,
            "by_member": by_stamp.member,
            "by_epoch": by_stamp.epoch,
        }
        self.ctx.activity.record(
            ActivityKind.DISPLACED,
            listener=self.name,
            peer=peer,
            conn=number,
            session=session,
            stamp=stamp,
            extra=extra,
        )

    # -- lifecycle ----------------------------------------------------------------------------------

    def opened(self, conn: ServerConnection, key: str) -> None:
        self.conns[conn] = key
        # the activity log's view of the connection, worked out once (peer, number, stamp)
        self.origins[conn] = ws_origin(self.ctx.activity, conn)
        now = self.ctx.clock.monotonic()
        self.times[conn] = [now, now]
        self.ctx.recorder.connection_opened(self.name)

    def rekey(self, conn: ServerConnection, key: str) -> None:
        if conn in self.conns:
            self.conns[conn] = key

    def closed(self, conn: ServerConnection) -> None:
        if self.conns.pop(conn, None) is not None:
            self.ctx.recorder.connection_closed(self.name)
            protocol = conn.protocol
            if protocol.close_rcvd is not None and protocol.close_rcvd_then_sent:
                # the client closed first: record its code (tests check 1000 on stop, 1001 on shutdown)
                self.ctx.recorder.record_event(
                    "client_close", listener=self.name, code=protocol.close_rcvd.code
                )
        self.times.pop(conn, None)
        self.blackholed.pop(conn, None)
        self.origins.pop(conn, None)

    def live(self) -> list[ServerConnection]:
        """Open connections that are not black-holed (pushes go to these)."""
        return [c for c in self.conns if c not in self.blackholed]

    # -- faults -------------------------------------------------------------------------------------

    def intercept(self, conn: ServerConnection) -> bool:
        """Apply DROP / CLOSE / BLACKHOLE faults still active to this connection; True if one applied."""
        key = self.conns.get(conn, _peer(conn))
        times = self.times.get(conn)
        if times is not None:
            times[1] = self.ctx.clock.monotonic()
        for kind in _ONGOING:
            fault = self.ctx.gate.hit(kind, key, self.endpoint)
            if fault is not None:
                self.apply(conn, fault)
                return True
        return False

    def apply(self, conn: ServerConnection, fault: Fault) -> None:
        """Do what ``fault`` says to ``conn`` (the hit is already counted)."""
        self.ctx.recorder.record_event(fault.kind.value, listener=self.name)
        if fault.kind is FaultKind.DROP:
            conn.transport.abort()
        elif fault.kind is FaultKind.CLOSE:
            self.spawn(conn.close(int(fault.params["code"]), str(fault.params.get("reason") or "")))
        elif fault.kind is FaultKind.BLACKHOLE:
            self.blackholed[conn] = fault.id or ""
            conn.transport.pause_reading()
        elif fault.kind in self.extra:
            self.extra[fault.kind](conn, fault)

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Run ``coro`` in the background, keeping a reference until it ends; errors are swallowed."""

        async def quiet() -> None:
            with contextlib.suppress(Exception):
                await coro

        task = asyncio.get_running_loop().create_task(quiet())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _activated(self, fault: Fault) -> None:
        if fault.kind not in _ONGOING and fault.kind not in self.extra:
            return
        if not fault.applies_to(self.endpoint):
            return
        if fault.kind is FaultKind.SESSION_EXPIRED and fault.params.get("mode") == "code":
            return  # a request-time fault: answered 4006 on the next request
        for conn, key in list(self.conns.items()):
            if conn in self.blackholed and fault.kind is FaultKind.BLACKHOLE:
                continue
            if self.ctx.faults.selected(fault, key) and self.ctx.faults.hit(fault):
                self.ctx.recorder.record_fault_hit(fault)
                self.apply(conn, fault)

    def _cleared(self, fault: Fault) -> None:
        if fault.kind is not FaultKind.BLACKHOLE:
            return
        for conn, fid in list(self.blackholed.items()):
            if fid == fault.id:
                del self.blackholed[conn]
                with contextlib.suppress(Exception):
                    conn.transport.resume_reading()

    def enforce_limits(self, idle_s: float | None, lifetime_s: float | None) -> int:
        """Close (1001, docs/platforms.md, "Genesys Cloud Web Messaging" [I]) connections idle or open for too long; at most once a second."""
        now = self.ctx.clock.monotonic()
        if (idle_s is None and lifetime_s is None) or now < self._next_sweep:
            return 0
        self._next_sweep = now + 1.0
        closed = 0
        for conn, (opened, last) in list(self.times.items()):
            idle = idle_s is not None and now - last >= idle_s
            if idle or (lifetime_s is not None and now - opened >= lifetime_s):
                del self.times[conn]  # closed once
                self.ctx.recorder.record_event(
                    "limit_close", listener=self.name, reason="idle" if idle else "lifetime"
                )
                self.spawn(
                    conn.close(
                        CloseCode.GOING_AWAY, "idle timeout" if idle else "connection lifetime reached"
                    )
                )
                closed += 1
        return closed

    async def close_all(self) -> None:
        """Cancel background tasks (shutdown)."""
        for task in list(self._tasks):
            task.cancel()


def _peer(conn: ServerConnection) -> str:
    addr = conn.remote_address
    return f"{addr[0]}:{addr[1]}" if addr else "peer"
