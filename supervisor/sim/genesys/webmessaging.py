"""The Web Messaging guest WebSocket ``/v1?deploymentId=..`` (docs/platforms.md, "Genesys Cloud Web Messaging").

Frames in: ``{"action", "token", "tracingId"?, ...}``. Frames out: ``{"type","class","code","body",
"tracingId"?}``. Actions:

- ``configureSession`` -> ``SessionResponse``: a new session gets ``{connected, newSession,
  readOnly, maxCustomDataBytes, clearedExistingSession, durationSeconds, expirationDate}`` (GMT
  ``Response.kt`` ``configureSuccess``), a resumed one ``{"connected":true,"newSession":false}``
  (``configureSuccessWithNewSessionFalse``; plus ``readOnly:true`` when it is [I]); the full body on
  a resume too with ``wm_full_session_response`` (an extension). No conversation id reaches a guest
  (docs/taxonomy.md, "What the daemon can and cannot verify"). A known token resumes; ``startNew:true`` after the agent disconnected starts a new
  conversation. Opening the same token on another connection pushes ``ConnectionClosedEvent`` to
  the older one and closes it (1000).
- ``onMessage`` -> the message echoed as ``type:"message"`` StructuredMessage (Inbound) with the
  request's ``tracingId`` (GMT ``Response.kt`` ``onMessage``); custom attributes are read from the
  frame's top-level ``channel.metadata`` (WMJ) and the message's own (GMT) and stored on the
  customer participant. A Presence ``Clear`` ends the session with ``SessionClearedEvent``.
  Errors: 4007 session not found, 4006 session expired, 4011 message too long, 4013 custom
  attributes too large, 4029 ``TooManyRequestsErrorMessage`` (per-session rate [I] or a fault),
  400 once the conversation is read-only [I].
- ``echo`` -> ``type:"response"`` StructuredMessage with the request's ``tracingId``.
- ``getJwt`` -> ``JwtResponse {jwt, exp}``; ``closeSession`` ends the session: the requester gets a
  ``SessionResponse`` with ``connected: false`` on its open socket, the session's other connections
  (``closeAllConnections``) a ``ConnectionClosedEvent`` and close 1000 (GMT
  ``MessagingClientImpl.closeAllConnectionsForTheSession``).
- anything malformed -> ``{"type":"response","class":"string","code":400,"body":"Request failed."}``.
Error replies carry **no** ``tracingId``, as every error fixture of the vendor (GMT ``Response.kt``);
GMT fails its oldest message still sending (``MessageStore.onMessageError``).
``wm_error_tracing_id`` echoes the request's ``tracingId`` on errors too (an extension).
Faults: RATE_LIMIT_STORM (4029), SERVER_ERROR_BURST (5000), LATENCY, DROP_ECHO (a message stored, its
echo not sent), SESSION_EXPIRED
(``mode:"code"`` 4006 on the next request; ``mode:"event"`` SessionExpiredEvent pushed now),
CONNECTION_CLOSED_EVENT, MISSING_FIELDS / MALFORMED_BODY on SessionResponse,
and the connection faults of :class:`~supervisor.sim.genesys.connections.WsListener`.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any
from urllib.parse import parse_qs, urlsplit

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request as WsRequest
from websockets.http11 import Response

from supervisor.sim.activity import ActivityKind, token_key
from supervisor.sim.bodies import MalformedBody, parse_json
from supervisor.sim.faults import FaultKind, retry_after_seconds
from supervisor.sim.genesys.connections import WsListener
from supervisor.sim.genesys.context import SimContext
from supervisor.sim.genesys.conversations import ConversationChange
from supervisor.sim.genesys.state import GuestSession
from supervisor.sim.genesys.wire import WmClass, WmCode, iso_utc, wm_envelope, wm_error
from supervisor.sim.genesys.wm_frames import (
    custom_attributes,
    has_presence,
    inbound_body,
    resumed_body,
    session_body,
    too_large,
)
from supervisor.sim.genesys.wm_guests import ENDPOINT, LISTENER, GuestConnections

__all__ = ["WebMessagingServer"]

_FAILED = "Request failed."
# GMT RequestAction.kt / WMJ RequestType.java actions the simulator does not model: 4000 [I]
_UNSUPPORTED = {
    "configureAuthenticatedSession",
    "onAttachment",
    "getAttachment",
    "deleteAttachment",
    "getConfiguration",
    "resumeToken",
    "disconnectCustomer",
}


class WebMessagingServer(GuestConnections):
    """Guest sessions over WebSockets; one instance per simulator (pushes: :class:`GuestConnections`)."""

    def __init__(self, ctx: SimContext) -> None:
        super().__init__(ctx, WsListener(ctx, LISTENER, ENDPOINT))

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
            token = self.token_of.pop(conn, None)
            self.listener.record(conn, ActivityKind.DISCONNECT, None if token is None else token_key(token))
            self.listener.closed(conn)
            if token is not None:
                peers = self.by_token.get(token)
                if peers is not None:
                    peers.discard(conn)
                    if not peers:
                        del self.by_token[token]

    # -- frames -------------------------------------------------------------------------------------

    async def _on_frame(self, conn: ServerConnection, deployment: str, frame: str | bytes) -> None:
        try:
            msg = parse_json(frame)
        except MalformedBody:  # answered "Request failed." below, like any malformed request (§1)
            msg = None
        action = msg.get("action") if isinstance(msg, dict) else None
        self.ctx.recorder.record_ws_message(LISTENER, "in", action if isinstance(action, str) else "invalid")
        token = msg.get("token") if isinstance(msg, dict) else None
        self.listener.record(
            conn,
            ActivityKind.FRAME,
            token_key(token) if isinstance(token, str) and token else None,
            action=action[:40] if isinstance(action, str) else "invalid",
        )
        traced = msg.get("tracingId") if isinstance(msg, dict) else None
        tracing = traced if isinstance(traced, str) else None
        if not isinstance(msg, dict) or not isinstance(action, str):
            await self._send(conn, self._error(400, _FAILED, tracing), "string")
            return
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
            await self._send(conn, self._error(400, _FAILED, tracing), "string")
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
            await self._close_session(conn, token, msg, tracing)
        elif action in _UNSUPPORTED:
            await self._send(
                conn, self._error(WmCode.FEATURE_UNAVAILABLE, "Feature unavailable.", tracing), "string"
            )
        else:
            await self._send(conn, self._error(400, _FAILED, tracing), "string")

    def _early_fault(self, key: str, tracing: str | None) -> tuple[bytes, str] | None:
        gate = self.ctx.gate
        burst = gate.hit(FaultKind.SERVER_ERROR_BURST, key, ENDPOINT)
        if burst is not None:
            text = burst.params.get("message") or _FAILED
            return self._error(WmCode.UNEXPECTED_ERROR, text, tracing), "string"
        storm = gate.hit(FaultKind.RATE_LIMIT_STORM, key, ENDPOINT)
        if storm is not None:
            retry_after = retry_after_seconds(storm.params.get("retry_after"))
            return self._too_many(retry_after, tracing, storm.params.get("message"))
        return None

    def _error(self, code: int, text: str, tracing: str | None) -> bytes:
        """An error reply (``class:"string"``). Without a ``tracingId``, as every error fixture of
        the vendor has it (GMT ``Response.kt``: 4006, 4007, 4011, 4013, 4017, 5000, 400, 403);
        ``wm_error_tracing_id`` echoes the request's (an extension)."""
        return wm_error(code, text, self._error_tracing(tracing))

    def _error_tracing(self, tracing: str | None) -> str | None:
        return tracing if self.ctx.config.wm_error_tracing_id else None

    def _too_many(
        self, retry_after: int | None, tracing: str | None, message: str | None = None
    ) -> tuple[bytes, str]:
        """4029 as GMT ``Response.kt`` ``tooManyRequests`` has it: class ``TooManyRequestsErrorMessage``,
        code 429, body ``{retryAfter, errorCode: 4029, errorMessage}``, no ``tracingId``."""
        text = message or "Message rate too high for this session"
        body: dict[str, Any] = {"errorCode": 4029, "errorMessage": text}
        if retry_after is not None:
            body = {"retryAfter": retry_after, **body}
        payload = wm_envelope("response", WmClass.TOO_MANY_REQUESTS, 429, body, self._error_tracing(tracing))
        return payload, WmClass.TOO_MANY_REQUESTS.value

    def _session(
        self, conn: ServerConnection, token: str, tracing: str | None
    ) -> tuple[GuestSession | None, bytes]:
        """The configured session of this connection, or the 4007/4006 error to answer (with the tracingId)."""
        sess = self.ctx.state.sessions.get(token)
        if sess is None or self.token_of.get(conn) != token:
            return None, self._error(WmCode.SESSION_NOT_FOUND, "session not found", tracing)
        if self.ctx.gate.hit(FaultKind.SESSION_EXPIRED, token, ENDPOINT) is not None:
            sess.expired = True
        if self.ctx.state.session_expired(sess):
            return None, self._error(WmCode.SESSION_HAS_EXPIRED, "session expired", tracing)
        return sess, b""

    async def _configure(
        self, conn: ServerConnection, deployment: str, token: str, msg: dict[str, Any], tracing: str | None
    ) -> None:
        state = self.ctx.state
        frame_deployment = msg.get("deploymentId")
        if frame_deployment is not None and frame_deployment != deployment:
            await self._send(conn, self._error(400, _FAILED, tracing), "string")
            return
        sess = state.sessions.get(token)
        start_new = msg.get("startNew") is True
        if sess is not None and state.session_expired(sess) and not start_new:
            await self._send(
                conn, self._error(WmCode.SESSION_HAS_EXPIRED, "session expired", tracing), "string"
            )
            return
        new = sess is None or (start_new and (sess.read_only or state.session_expired(sess)))
        if new:
            sess = state.new_session(token, deployment)
        assert sess is not None
        # counted per answer: a restart that takes its guests over must answer none of them as new
        self.ctx.recorder.record_event("session_configured", listener=LISTENER, newSession=new)
        for other in list(self.by_token.get(token, ())):
            if other is not conn:  # the same session opened elsewhere (§1, "SessionLimitReached")
                self.listener.displaced(token_key(token), other, conn)
                self._closed_event(other, None)
        self.token_of[conn] = token
        self.by_token.setdefault(token, set()).add(conn)
        self.listener.rekey(conn, token)
        now_epoch = self.ctx.clock.time()
        remaining = max(0, math.ceil(sess.expires_at - self.ctx.clock.monotonic()))
        body: Any
        if new or self.ctx.config.wm_full_session_response:
            body = session_body(
                new=new,
                read_only=sess.read_only,
                max_custom_data_bytes=self.ctx.config.max_custom_data_bytes,
                duration_s=self.ctx.config.wm_session_ttl_s,
                expiration_epoch=int(now_epoch + remaining),
            )
        else:
            body = resumed_body(read_only=sess.read_only)
        # the guest protocol names no conversation, so CONVERSATION_DRIFT has nothing to change here
        body = self.ctx.gate.after(token, ENDPOINT, body, None)
        if isinstance(body, bytes):  # MALFORMED_BODY: the whole frame is broken JSON
            payload = wm_envelope("response", WmClass.SESSION_RESPONSE, 200, {}, tracing)[:-3] + b',"conn'
        else:
            payload = wm_envelope("response", WmClass.SESSION_RESPONSE, 200, body, tracing)
        await self._send(conn, payload, WmClass.SESSION_RESPONSE.value)

    async def _on_message(
        self, conn: ServerConnection, token: str, msg: dict[str, Any], tracing: str | None
    ) -> None:
        sess, error = self._session(conn, token, tracing)
        if sess is None:
            await self._send(conn, error, "string")
            return
        message = msg.get("message")
        mtype = message.get("type") if isinstance(message, dict) else None
        text = message.get("text") if isinstance(message, dict) else None
        if not isinstance(message, dict) or mtype not in ("Text", "Event", "Structured"):
            await self._send(conn, self._error(400, _FAILED, tracing), "string")
            return
        if (mtype == "Text" and not isinstance(text, str)) or sess.read_only:
            # [I] GMT refuses to send once read-only; the server's answer is not documented
            await self._send(conn, self._error(400, _FAILED, tracing), "string")
            return
        if isinstance(text, str) and len(text) > self.ctx.config.max_message_chars:
            await self._send(
                conn, self._error(WmCode.MESSAGE_TOO_LONG, "message too long", tracing), "string"
            )
            return
        custom = custom_attributes(msg, message)
        limit = self.ctx.config.max_custom_data_bytes
        if custom is not None and too_large(custom, limit):
            text_4013 = f"Custom Attributes in channel metadata is larger than {limit} bytes"
            code = WmCode.CUSTOM_ATTRIBUTE_SIZE_TOO_LARGE
            await self._send(conn, self._error(code, text_4013, tracing), "string")
            return
        if not self.ctx.state.session_rate_check(sess):
            window_left = sess.window_start + self.ctx.config.wm_rate_window_s - self.ctx.clock.monotonic()
            payload, kind = self._too_many(max(1, math.ceil(window_left)), tracing)
            await self._send(conn, payload, kind)
            return
        if mtype == "Event" and has_presence(message, "Clear"):
            await self._clear(conn, token, tracing)
            return
        conv = self.ctx.state.conversations.get(sess.conversation_id)
        customer = conv.customer() if conv is not None else None
        if conv is not None and customer is not None and custom and "" not in custom:
            attrs = {str(k): str(v) for k, v in custom.items()}
            customer.attributes.update(attrs)
            self.ctx.recorder.record_attributes(conv.id, attrs)
            self.ctx.changed(ConversationChange("attributes", conv, customer, attributes=attrs))
        msg_id = self.ctx.state.uuid()
        body = inbound_body(msg_id, iso_utc(self.ctx.clock.time()), message)
        if conv is not None and customer is not None:
            conv.remember(body)
            customer.communication.message_ids.append(msg_id)
            self.ctx.changed(ConversationChange("message", conv, customer, message=body))
        if self.ctx.gate.hit(FaultKind.DROP_ECHO, token, ENDPOINT) is not None:
            # stored and in the history, but its answer lost on the way back (DROP_ECHO)
            self.ctx.recorder.record_event("echo_dropped", listener=LISTENER)
            return
        payload = wm_envelope("message", WmClass.STRUCTURED_MESSAGE, 200, body, tracing)
        await self._send(conn, payload, WmClass.STRUCTURED_MESSAGE.value)

    async def _clear(self, conn: ServerConnection, token: str, tracing: str | None) -> None:
        """Presence ``Clear`` (GMT ``ClearConversationRequest.kt``): the conversation is cleared for the
        guest: ``SessionClearedEvent`` to every connection of the session, then ``ConnectionClosedEvent``
        and close (GMT reports reason ``ConversationCleared``); or 403 when the deployment disables it."""
        if not self.ctx.config.wm_clear_conversation:
            forbidden = "Presence events Conversation Clear are not supported"
            await self._send(conn, self._error(403, forbidden, tracing), "string")
            return
        self.ctx.state.sessions.pop(token, None)
        cleared = wm_envelope("message", WmClass.SESSION_CLEARED_EVENT, 200, {})
        for target in list(self.by_token.get(token, ())):
            await self._send(target, cleared, WmClass.SESSION_CLEARED_EVENT.value)
            self._closed_event(target, None)

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
        # the reply carries the request's metadata: GMT's health check keys on customMessageId
        sent = message.get("metadata") if isinstance(message, dict) else None
        metadata: dict[str, Any] = dict(sent) if isinstance(sent, dict) else {}
        sess = self.ctx.state.sessions.get(token)
        if sess is not None:
            left = max(0, math.ceil(sess.expires_at - self.ctx.clock.monotonic()))
            metadata["durationSeconds"] = str(self.ctx.config.wm_session_ttl_s)
            metadata["expirationDate"] = str(int(self.ctx.clock.time() + left))
        if metadata:
            body["metadata"] = metadata
        payload = wm_envelope("response", WmClass.STRUCTURED_MESSAGE, 200, body, tracing)
        await self._send(conn, payload, "echo")

    async def _get_jwt(self, conn: ServerConnection, token: str, tracing: str | None) -> None:
        sess, error = self._session(conn, token, tracing)
        if sess is None:
            await self._send(conn, error, "string")
            return
        jwt, exp = self.ctx.state.issue_jwt(token)
        body = {"jwt": jwt, "exp": exp}
        await self._send(
            conn, wm_envelope("response", WmClass.JWT_RESPONSE, 200, body, tracing), "JwtResponse"
        )

    async def _close_session(
        self, conn: ServerConnection, token: str, msg: dict[str, Any], tracing: str | None
    ) -> None:
        sess, error = self._session(conn, token, tracing)
        if sess is None:
            await self._send(conn, error, "string")
            return
        del self.ctx.state.sessions[token]
        if msg.get("closeAllConnections") is True:
            # GMT MessagingClientImpl.closeAllConnectionsForTheSession: the other connections of the
            # session get a ConnectionClosedEvent (and are closed, as on a session opened elsewhere)
            for other in list(self.by_token.get(token, ())):
                if other is not conn:
                    self._closed_event(other, None)
        # ...and the requester "a SessionResponse with connected=false", on its open socket (GMT then
        # configures a new chat on it); readOnly true as GMT's test answers it [I]
        body = {"connected": False, "newSession": False, "readOnly": True}
        payload = wm_envelope("response", WmClass.SESSION_RESPONSE, 200, body, tracing)
        await self._send(conn, payload, WmClass.SESSION_RESPONSE.value)


def _conn_key(conn: ServerConnection) -> str:
    addr = conn.remote_address
    return f"{addr[0]}:{addr[1]}" if addr else "peer"
