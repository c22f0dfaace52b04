"""The Web Messaging server's side that talks first: pushes to the guests' open connections.

``StructuredMessage`` pushes (agent messages, the agent's Presence Disconnect), ``SessionExpiredEvent``
(lifetime or fault), ``ConnectionClosedEvent`` then close 1000 (the same session opened
elsewhere, ``closeSession``, a fault). Pushes are ``type:"message"`` and carry no ``tracingId``
(docs/platforms.md, "Genesys Cloud Web Messaging"). :class:`~supervisor.sim.genesys.webmessaging.WebMessagingServer` adds the
handshake and the request frames.
"""

from __future__ import annotations

import contextlib
from typing import Any

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from supervisor.sim.faults import Fault, FaultKind
from supervisor.sim.genesys.connections import WsListener
from supervisor.sim.genesys.context import SimContext
from supervisor.sim.genesys.wire import WmClass, iso_utc, wm_envelope
from supervisor.sim.genesys.wm_frames import disconnect_body
from supervisor.vocabulary import CloseCode

__all__ = ["ENDPOINT", "LISTENER", "GuestConnections"]

LISTENER = "webmessaging"
ENDPOINT = "WS /v1"


class GuestConnections:
    """The guests' open connections by session token, and what the server pushes to them."""

    def __init__(self, ctx: SimContext, listener: WsListener) -> None:
        self.ctx = ctx
        self.listener = listener
        self.listener.extra[FaultKind.SESSION_EXPIRED] = self._expire_now
        self.listener.extra[FaultKind.CONNECTION_CLOSED_EVENT] = self._closed_event
        self.by_token: dict[str, set[ServerConnection]] = {}
        self.token_of: dict[ServerConnection, str] = {}
        self._next_sweep = 0.0
        ctx.push_outbound = self.push_outbound
        ctx.guest_disconnect = self.end_conversation

    async def _send(self, conn: ServerConnection, payload: bytes, kind: str) -> None:
        self.ctx.recorder.record_ws_message(LISTENER, "out", kind)
        with contextlib.suppress(ConnectionClosed):
            await conn.send(payload.decode())

    def _closed_event(self, conn: ServerConnection, fault: Fault | None) -> None:
        reason = fault.params.get("reason") if fault is not None else None
        body = {"reason": reason} if reason else {}
        payload = wm_envelope("message", WmClass.CONNECTION_CLOSED_EVENT, 200, body)

        async def tell_and_close() -> None:
            await self._send(conn, payload, WmClass.CONNECTION_CLOSED_EVENT.value)
            await conn.close(CloseCode.NORMAL_CLOSURE, "connection closed")

        self.listener.spawn(tell_and_close())

    def _expire_now(self, conn: ServerConnection, fault: Fault) -> None:
        token = self.token_of.get(conn)
        sess = self.ctx.state.sessions.get(token) if token else None
        if fault.params.get("mode") == "code":
            return  # answered 4006 on the next request (see _session)
        if sess is not None:
            sess.expired = True
        # pushed, so type "message" (§1); GMT's fixture spells it "response"
        payload = wm_envelope("message", WmClass.SESSION_EXPIRED_EVENT, 200, {})
        self.listener.spawn(self._send(conn, payload, WmClass.SESSION_EXPIRED_EVENT.value))

    async def push_outbound(self, conversation_id: str, message: dict[str, Any]) -> int:
        """Push an agent message to the guest's open connections: the MessageData's
        ``normalizedMessage`` as an Outbound StructuredMessage (what GMT ``StructuredMessage.kt`` reads)."""
        conv = self.ctx.state.conversations.get(conversation_id)
        if conv is None:
            return 0
        body = dict(message)
        conv.remember(body)
        payload = wm_envelope("message", WmClass.STRUCTURED_MESSAGE, 200, body)
        return await self._to_guests(conversation_id, payload, WmClass.STRUCTURED_MESSAGE.value)

    async def _to_guests(self, conversation_id: str, payload: bytes, kind: str) -> int:
        sent = 0
        for token, conns in list(self.by_token.items()):
            sess = self.ctx.state.sessions.get(token)
            if sess is None or sess.conversation_id != conversation_id:
                continue
            for conn in list(conns):
                if conn not in self.listener.blackholed:
                    await self._send(conn, payload, kind)
                    sent += 1
        return sent

    async def end_conversation(self, conversation_id: str) -> int:
        """The agent left (docs/platforms.md, "Genesys Cloud Web Messaging"): a Presence Disconnect to the guest's connections, with
        ``metadata.readOnly``; with ``wm_disconnect_read_only`` the sessions turn read-only (a
        reconfigure says ``readOnly:true``; onMessage is refused). Returns the frames sent."""
        read_only = self.ctx.config.wm_disconnect_read_only
        for sess in self.ctx.state.sessions.values():
            if sess.conversation_id == conversation_id:
                sess.read_only = sess.read_only or read_only
        msg_id = self.ctx.state.uuid()
        body = disconnect_body(msg_id, iso_utc(self.ctx.clock.time()), read_only)
        conv = self.ctx.state.conversations.get(conversation_id)
        if conv is not None:
            conv.remember(body)
        payload = wm_envelope("message", WmClass.STRUCTURED_MESSAGE, 200, body)
        return await self._to_guests(conversation_id, payload, WmClass.STRUCTURED_MESSAGE.value)

    def sweep(self) -> None:
        """SessionExpiredEvent to sessions past their lifetime; close idle or too-old connections."""
        cfg = self.ctx.config
        self.listener.enforce_limits(cfg.wm_idle_timeout_s, cfg.wm_max_connection_s)
        now = self.ctx.clock.monotonic()
        if now < self._next_sweep:  # once a clock second: cheap with thousands of sessions
            return
        self._next_sweep = now + 1.0
        for token, conns in list(self.by_token.items()):
            sess = self.ctx.state.sessions.get(token)
            if sess is None or sess.expired or not self.ctx.state.session_expired(sess):
                continue
            sess.expired = True
            payload = wm_envelope("message", WmClass.SESSION_EXPIRED_EVENT, 200, {})
            for conn in list(conns):
                self.listener.spawn(self._send(conn, payload, WmClass.SESSION_EXPIRED_EVENT.value))
