"""The Web Messaging guest WebSocket ``/v1?deploymentId=..`` (platforms.md §1, SIMULATOR SPEC 6).

Frames in: ``{"action", "token", "tracingId"?, ...}``. Frames out: ``{"type","class","code","body",
"tracingId"?}``. Actions:

- ``configureSession`` -> ``SessionResponse`` ``{connected, newSession, readOnly, maxCustomDataBytes,
  clearedExistingSession, durationSeconds, expirationDate}`` plus the simulator extension
  ``conversationId``, ``agentId``, ``status``. A known token resumes (``newSession:false``);
  ``startNew:true`` after the agent disconnected starts a new conversation. Opening the same token
  on another connection pushes ``ConnectionClosedEvent`` to the older one and closes it (1000).
- ``onMessage`` -> the message echoed as ``type:"message"`` StructuredMessage (Inbound);
  ``channel.metadata.customAttributes`` are stored on the customer participant.
  Errors: 4007 session not found, 4006 session expired, 4011 message too long, 4013 custom
  attributes too large, 4029 ``TooManyRequestsErrorMessage`` (per-session rate [I] or a fault).
- ``echo`` -> ``type:"response"`` StructuredMessage with the request's ``tracingId``.
- ``getJwt`` -> ``JwtResponse {jwt, exp}``; ``closeSession`` -> ``ConnectionClosedEvent`` then close 1000.
- anything malformed -> ``{"type":"response","class":"string","code":400,"body":"Request failed."}``.
Faults: RATE_LIMIT_STORM (4029), SERVER_ERROR_BURST (5000), LATENCY, SESSION_EXPIRED
(``mode:"code"`` 4006 on the next request; ``mode:"event"`` SessionExpiredEvent pushed now),
CONNECTION_CLOSED_EVENT, MISSING_FIELDS / CONVERSATION_DRIFT / MALFORMED_BODY on SessionResponse,
and the connection faults of :class:`~supervisor.sim.genesys.connections.WsListener`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
from typing import Any
from urllib.parse import parse_qs, urlsplit

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request as WsRequest
from websockets.http11 import Response

from supervisor.sim.bodies import MalformedBody, parse_json
from supervisor.sim.faults import Fault, FaultKind, retry_after_seconds
from supervisor.sim.genesys.connections import WsListener
from supervisor.sim.genesys.context import SimContext
from supervisor.sim.genesys.state import GuestSession
from supervisor.sim.genesys.wire import WmClass, WmCode, iso_utc, wm_envelope, wm_error

__all__ = ["WebMessagingServer"]

LISTENER = "webmessaging"
ENDPOINT = "WS /v1"
_FAILED = "Request failed."
_UNSUPPORTED = {"configureAuthenticatedSession", "onAttachment", "getAttachment", "deleteAttachment"}


class WebMessagingServer:
    """Guest sessions over WebSockets; one instance per simulator."""

    def __init__(self, ctx: SimContext) -> None:
        self.ctx = ctx
        self.listener = WsListener(ctx, LISTENER, ENDPOINT)
        self.listener.extra[FaultKind.SESSION_EXPIRED] = self._expire_now
        self.listener.extra[FaultKind.CONNECTION_CLOSED_EVENT] = self._closed_event
        self.by_token: dict[str, set[ServerConnection]] = {}
        self.token_of: dict[ServerConnection, str] = {}
        self._next_sweep = 0.0
        ctx.push_outbound = self.push_outbound

    # -- handshake and connection -------------------------------------------------------------------

    async def process_request(self, conn: ServerConnection, request: WsRequest) -> Response | None:
        url = urlsplit(request.path)
        query = parse_qs(url.query)
        deployment = (query.get("deploymentId") or [""])[0]
        if url.path != "/v1":
            return self.listener.refuse(conn, 404, "Not Found")
        if not deployment:
            return self.listener.refuse(conn, 400, "Missing deploymentId")
        allowed = self.ctx.config.deployments
        if allowed and deployment not in allowed:
            # a 403 on the upgrade is AccessDenied for the SDK (§1)
            return self.listener.refuse(conn, 403, "Forbidden")
        return await self.listener.admit(conn, request)

    async def handler(self, conn: ServerConnection) -> None:
        request = conn.request
        query = parse_qs(urlsplit(request.path).query) if request else {}
        deployment = (query.get("deploymentId") or [""])[0]
        self.listener.opened(conn, _conn_key(conn))
        try:
            async for frame in conn:
                if self.listener.intercept(conn):
                    continue
                await self._on_frame(conn, deployment, frame)
        except ConnectionClosed:
            pass
        finally:
            self.listener.closed(conn)
            token = self.token_of.pop(conn, None)
            if token is not None:
                peers = self.by_token.get(token)
                if peers is not None:
                    peers.discard(conn)
                    if not peers:
                        del self.by_token[token]

    async def _send(self, conn: ServerConnection, payload: bytes, kind: str) -> None:
        self.ctx.recorder.record_ws_message(LISTENER, "out", kind)
        with contextlib.suppress(ConnectionClosed):
            await conn.send(payload.decode())

    # -- frames -------------------------------------------------------------------------------------

    async def _on_frame(self, conn: ServerConnection, deployment: str, frame: str | bytes) -> None:
        try:
            msg = parse_json(frame)
        except MalformedBody:  # answered "Request failed." below, like any malformed request (§1)
            msg = None
        action = msg.get("action") if isinstance(msg, dict) else None
        self.ctx.recorder.record_ws_message(LISTENER, "in", action if isinstance(action, str) else "invalid")
        if not isinstance(msg, dict) or not isinstance(action, str):
            await self._send(conn, wm_error(400, _FAILED), "string")
            return
        tracing = msg.get("tracingId") if isinstance(msg.get("tracingId"), str) else None
        token = msg.get("token")
        key = token if isinstance(token, str) and token else self.listener.conns.get(conn, "")
        gate = self.ctx.gate
        latency = gate.hit(FaultKind.LATENCY, key, ENDPOINT)
        if latency is not None:
            await asyncio.sleep(float(latency.params["latency_ms"]) / 1000.0)
        if action != "closeSession":
            early = self._early_fault(key, tracing)
            if early is not None:
                await self._send(conn, early[0], early[1])
                return
        if not isinstance(token, str) or not token or len(token) > 256:
            await self._send(conn, wm_error(400, _FAILED, tracing), "string")
            return
        if action == "configureSession":
            await self._configure(conn, deployment, token, msg, tracing)
        elif action == "onMessage":
            await self._on_message(conn, token, msg, tracing)
        elif action == "echo":
            await self._echo(conn, token, msg, tracing)
        elif action == "getJwt":
            await self._get_jwt(conn, token, tracing)
        elif action == "closeSession":
            await self._close_session(conn, token, msg)
        elif action in _UNSUPPORTED:
            await self._send(
                conn, wm_error(WmCode.FEATURE_UNAVAILABLE, "Feature unavailable.", tracing), "string"
            )
        else:
            await self._send(conn, wm_error(400, _FAILED, tracing), "string")

    def _early_fault(self, key: str, tracing: str | None) -> tuple[bytes, str] | None:
        gate = self.ctx.gate
        if gate.hit(FaultKind.SERVER_ERROR_BURST, key, ENDPOINT) is not None:
            return wm_error(WmCode.UNEXPECTED_ERROR, _FAILED, tracing), "string"
        storm = gate.hit(FaultKind.RATE_LIMIT_STORM, key, ENDPOINT)
        if storm is not None:
            return self._too_many(retry_after_seconds(storm.params.get("retry_after")), tracing)
        return None

    def _too_many(self, retry_after: int | None, tracing: str | None) -> tuple[bytes, str]:
        body: dict[str, Any] = {"errorCode": 4029, "errorMessage": "Message rate too high for this session"}
        if retry_after is not None:
            body = {"retryAfter": retry_after, **body}
        payload = wm_envelope("response", WmClass.TOO_MANY_REQUESTS, 429, body, tracing)
        return payload, WmClass.TOO_MANY_REQUESTS.value

    def _session(self, conn: ServerConnection, token: str) -> tuple[GuestSession | None, bytes | None]:
        """The configured session of this connection, or the 4007/4006 error to answer."""
        sess = self.ctx.state.sessions.get(token)
        if sess is None or self.token_of.get(conn) != token:
            return None, wm_error(WmCode.SESSION_NOT_FOUND, "session not found")
        if self.ctx.gate.hit(FaultKind.SESSION_EXPIRED, token, ENDPOINT) is not None:
            sess.expired = True
        if self.ctx.state.session_expired(sess):
            return None, wm_error(WmCode.SESSION_HAS_EXPIRED, "session expired")
        return sess, None

    async def _configure(
        self, conn: ServerConnection, deployment: str, token: str, msg: dict[str, Any], tracing: str | None
    ) -> None:
        state = self.ctx.state
        frame_deployment = msg.get("deploymentId")
        if frame_deployment is not None and frame_deployment != deployment:
            await self._send(conn, wm_error(400, _FAILED, tracing), "string")
            return
        sess = state.sessions.get(token)
        start_new = msg.get("startNew") is True
        if sess is not None and state.session_expired(sess) and not start_new:
            await self._send(conn, wm_error(WmCode.SESSION_HAS_EXPIRED, "session expired", tracing), "string")
            return
        new = sess is None or (start_new and (sess.read_only or state.session_expired(sess)))
        if new:
            sess = state.new_session(token, deployment)
        assert sess is not None
        for other in list(self.by_token.get(token, ())):
            if other is not conn:  # the same session opened elsewhere (§1, "SessionLimitReached")
                self._closed_event(other, None)
        self.token_of[conn] = token
        self.by_token.setdefault(token, set()).add(conn)
        self.listener.rekey(conn, token)
        conv = state.conversation(sess.conversation_id)
        now_epoch = self.ctx.clock.time()
        remaining = max(0, math.ceil(sess.expires_at - self.ctx.clock.monotonic()))
        body: Any = {
            "connected": True,
            "newSession": new,
            "readOnly": sess.read_only,
            "maxCustomDataBytes": self.ctx.config.max_custom_data_bytes,
            "clearedExistingSession": False,
            "durationSeconds": self.ctx.config.wm_session_ttl_s,
            "expirationDate": int(now_epoch + remaining),
            # simulator extension: the seed's required session fields (docs/simulators.md)
            "conversationId": conv.id,
            "agentId": conv.agent_id,
            "status": "readOnly" if sess.read_only else "connected",
        }
        body = self.ctx.gate.after(token, ENDPOINT, body, conv.id)
        if isinstance(body, bytes):  # MALFORMED_BODY: the whole frame is broken JSON
            payload = wm_envelope("response", WmClass.SESSION_RESPONSE, 200, {}, tracing)[:-3] + b',"conn'
        else:
            payload = wm_envelope("response", WmClass.SESSION_RESPONSE, 200, body, tracing)
        await self._send(conn, payload, WmClass.SESSION_RESPONSE.value)

    async def _on_message(
        self, conn: ServerConnection, token: str, msg: dict[str, Any], tracing: str | None
    ) -> None:
        sess, error = self._session(conn, token)
        if sess is None:
            await self._send(conn, error or wm_error(400, _FAILED), "string")
            return
        message = msg.get("message")
        mtype = message.get("type") if isinstance(message, dict) else None
        if not isinstance(message, dict) or mtype not in ("Text", "Event", "Structured"):
            await self._send(conn, wm_error(400, _FAILED, tracing), "string")
            return
        text = message.get("text")
        if mtype == "Text" and not isinstance(text, str):
            await self._send(conn, wm_error(400, _FAILED, tracing), "string")
            return
        if isinstance(text, str) and len(text) > self.ctx.config.max_message_chars:
            await self._send(conn, wm_error(WmCode.MESSAGE_TOO_LONG, "message too long", tracing), "string")
            return
        channel = message.get("channel")
        meta = channel.get("metadata") if isinstance(channel, dict) else None
        custom = meta.get("customAttributes") if isinstance(meta, dict) else None
        limit = self.ctx.config.max_custom_data_bytes
        if custom is not None and len(json.dumps(custom).encode()) > limit:
            text_4013 = f"Custom Attributes in channel metadata is larger than {limit} bytes"
            await self._send(
                conn, wm_error(WmCode.CUSTOM_ATTRIBUTE_SIZE_TOO_LARGE, text_4013, tracing), "string"
            )
            return
        if not self.ctx.state.session_rate_check(sess):
            window_left = sess.window_start + self.ctx.config.wm_rate_window_s - self.ctx.clock.monotonic()
            payload, kind = self._too_many(max(1, math.ceil(window_left)), tracing)
            await self._send(conn, payload, kind)
            return
        if isinstance(custom, dict):
            attrs = {str(k): str(v) for k, v in custom.items()}
            conv = self.ctx.state.conversation(sess.conversation_id)
            conv.customer().attributes.update(attrs)
            self.ctx.recorder.record_attributes(conv.id, attrs)
        msg_id = self.ctx.state.uuid()
        body: dict[str, Any] = {
            "id": msg_id,
            "channel": {"time": iso_utc(self.ctx.clock.time()), "messageId": msg_id},
            "type": mtype,
            "direction": "Inbound",
        }
        for field in ("text", "content", "events", "metadata"):
            if message.get(field) is not None:
                body[field] = message[field]
        self.ctx.state.conversation(sess.conversation_id).remember(body)
        payload = wm_envelope("message", WmClass.STRUCTURED_MESSAGE, 200, body, tracing)
        await self._send(conn, payload, WmClass.STRUCTURED_MESSAGE.value)

    async def _echo(
        self, conn: ServerConnection, token: str, msg: dict[str, Any], tracing: str | None
    ) -> None:
        message = msg.get("message")
        text = message.get("text") if isinstance(message, dict) else None
        body: dict[str, Any] = {
            "text": text if isinstance(text, str) else "ping",
            "type": "Text",
            "direction": "Inbound",
            "id": self.ctx.state.uuid(),
        }
        sess = self.ctx.state.sessions.get(token)
        if sess is not None:
            left = max(0, math.ceil(sess.expires_at - self.ctx.clock.monotonic()))
            body["metadata"] = {
                "durationSeconds": str(self.ctx.config.wm_session_ttl_s),
                "expirationDate": str(int(self.ctx.clock.time() + left)),
            }
        payload = wm_envelope("response", WmClass.STRUCTURED_MESSAGE, 200, body, tracing)
        await self._send(conn, payload, "echo")

    async def _get_jwt(self, conn: ServerConnection, token: str, tracing: str | None) -> None:
        sess, error = self._session(conn, token)
        if sess is None:
            await self._send(conn, error or wm_error(400, _FAILED), "string")
            return
        jwt, exp = self.ctx.state.issue_jwt(token)
        body = {"jwt": jwt, "exp": exp}
        await self._send(
            conn, wm_envelope("response", WmClass.JWT_RESPONSE, 200, body, tracing), "JwtResponse"
        )

    async def _close_session(self, conn: ServerConnection, token: str, msg: dict[str, Any]) -> None:
        sess, error = self._session(conn, token)
        if sess is None:
            await self._send(conn, error or wm_error(400, _FAILED), "string")
            return
        targets = list(self.by_token.get(token, ())) if msg.get("closeAllConnections") is True else [conn]
        del self.ctx.state.sessions[token]
        for target in targets:
            self._closed_event(target, None)

    # -- pushes -------------------------------------------------------------------------------------

    def _closed_event(self, conn: ServerConnection, fault: Fault | None) -> None:
        reason = fault.params.get("reason") if fault is not None else None
        body = {"reason": reason} if reason else {}
        payload = wm_envelope("message", WmClass.CONNECTION_CLOSED_EVENT, 200, body)

        async def tell_and_close() -> None:
            await self._send(conn, payload, WmClass.CONNECTION_CLOSED_EVENT.value)
            await conn.close(1000, "connection closed")

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
        """Push an agent message (Outbound StructuredMessage) to the guest's open connections."""
        body = {
            "id": message["id"],
            "channel": {"time": message["time"], "messageId": message["id"]},
            "type": "Text",
            "text": message["text"],
            "direction": "Outbound",
            "originatingEntity": "Human",
        }
        self.ctx.state.conversation(conversation_id).remember(body)
        payload = wm_envelope("message", WmClass.STRUCTURED_MESSAGE, 200, body)
        sent = 0
        for token, conns in list(self.by_token.items()):
            sess = self.ctx.state.sessions.get(token)
            if sess is None or sess.conversation_id != conversation_id:
                continue
            for conn in list(conns):
                if conn not in self.listener.blackholed:
                    await self._send(conn, payload, WmClass.STRUCTURED_MESSAGE.value)
                    sent += 1
        return sent

    async def end_conversation(self, conversation_id: str) -> int:
        """The agent disconnects: sessions go read-only; a Presence Disconnect event is pushed (§1)."""
        sent = 0
        for token, conns in list(self.by_token.items()):
            sess = self.ctx.state.sessions.get(token)
            if sess is None or sess.conversation_id != conversation_id:
                continue
            sess.read_only = True
            msg_id = self.ctx.state.uuid()
            body = {
                "id": msg_id,
                "channel": {"time": iso_utc(self.ctx.clock.time()), "messageId": msg_id},
                "type": "Event",
                "direction": "Outbound",
                "events": [{"eventType": "Presence", "presence": {"type": "Disconnect"}}],
            }
            payload = wm_envelope("message", WmClass.STRUCTURED_MESSAGE, 200, body)
            for conn in list(conns):
                await self._send(conn, payload, WmClass.STRUCTURED_MESSAGE.value)
                sent += 1
        for sess in self.ctx.state.sessions.values():
            if sess.conversation_id == conversation_id:
                sess.read_only = True
        self.ctx.state.conversation(conversation_id).status = "disconnected"
        return sent

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


def _conn_key(conn: ServerConnection) -> str:
    addr = conn.remote_address
    return f"{addr[0]}:{addr[1]}" if addr else "peer"
