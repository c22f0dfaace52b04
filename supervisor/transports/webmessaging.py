"""Genesys Web Messaging guest WebSocket (platforms.md §1): a :class:`~supervisor.transports.base.Transport`.

Wire (platforms.md §1): ``wss://webmessaging.<domain>/v1?deploymentId=D&application=A``; client frames
``{"action", "token", "tracingId", ...}``; server envelopes ``{"type","class","code","body","tracingId"?}``.

* :meth:`WebMessagingTransport.open` connects (WebSocket pings per :class:`~supervisor.config.Keepalive`:
  a missing pong closes the link, the client sees 1011/1006), sends ``configureSession`` with the guest
  token made once per transport (``startNew:false``, so a reconnect resumes the same conversation) and
  waits for the ``SessionResponse``.
* :meth:`WebMessagingConnection.serve` reports error envelopes and pushed events in-band and runs the
  app-level ``echo`` health check (GMT HealthCheckProvider) next to the receive loop.
* :meth:`WebMessagingConnection.send_message` is an in-band request: it goes through the one retry
  executor (supervisor/rest/executor.py) as a REST call does, and its answer (the echoed message, or
  an error envelope such as 4029 with ``retryAfter``) is matched to it by ``tracingId``. A 4029 is the
  guest's own message rate (platforms.md §1: only that message fails), so the request has no circuit.

The transport decides nothing (design.md, "Data flows one way"): every failure becomes a RawError.
The guest token is a bearer credential for the conversation: it is never put in a RawError (server
text that echoes it is scrubbed) nor in ``SessionContext``.
"""

from __future__ import annotations

import json
import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any
from urllib.parse import urlencode

import anyio
import websockets.exceptions as wsx
from websockets.asyncio.client import ClientConnection, connect
from websockets.protocol import State
from websockets.typing import Origin

from supervisor.boundary import (
    Learned,
    Reporter,
    SessionContext,
    raw_from_close,
    raw_from_exception,
    raw_from_message,
)
from supervisor.config import Keepalive
from supervisor.errors import ConnectionLost, OperationError, TransportFailure
from supervisor.rest.executor import RetryExecutor
from supervisor.rest.tokens import Token
from supervisor.taxonomy import RawError, SdkErrorEvent
from supervisor.transports.sockets import (
    abort_socket,
    decode_frame,
    discard_socket,
    malformed_frame,
    receive_frames,
    scrub,
    serve_alive,
    shutdown_socket,
)

__all__ = [
    "HEALTH_CHECK_TRACING_ID",
    "WebMessagingConnection",
    "WebMessagingTransport",
]

# GMT HealthCheckProvider sends echo with this tracingId (base64 of "HealthCheckMessageId"), §1
HEALTH_CHECK_TRACING_ID = "SGVhbHRoQ2hlY2tNZXNzYWdlSWQ="
ENDPOINT = "/v1"
# server classes that are failures or session-ending pushes (§1, GMT MessagingClientImpl.handleError)
_ERROR_CLASSES = frozenset(
    {
        "string",
        "TooManyRequestsErrorMessage",
        "SessionExpiredEvent",
        "ConnectionClosedEvent",
        "SessionClearedEvent",
        "LogoutEvent",
        "GenerateUrlError",
        "UploadFailureEvent",
    }
)
_TRACKED_REQUESTS = 256  # tracingId -> action, so an error reply names the request it answers


class WebMessagingTransport:
    """Opens guest connections for one session; the guest token survives reconnects (resume)."""

    # taxonomy v1 [responses."genesys.webmessaging.SessionResponse"]: connected, newSession, readOnly.
    # The guest protocol names no conversation (GMT SessionResponse.kt, WMJ, PY269: issue 14), so a
    # guest session learns none and is not checked for drift on it; see docs/taxonomy.md.
    response_kind = "genesys.webmessaging.SessionResponse"

    def __init__(
        self,
        ctx: SessionContext,
        *,
        url: str,
        deployment_id: str,
        keepalive: Keepalive,
        executor: RetryExecutor | None = None,
        guest_token: str | None = None,
        origin: str | None = None,
        application: str = "session-supervisor",
        close_timeout: float = 5.0,
        max_size: int = 1 << 20,
        proxy: str | None = None,
        on_message: Callable[[Mapping[str, Any]], None] | None = None,
        resuming: bool = False,
    ) -> None:
        self.context = ctx
        self.executor = executor
        self.guest_token = guest_token or str(uuid.uuid4())
        self.deployment_id = deployment_id
        self._uri = f"{url.rstrip('/')}{ENDPOINT}?" + urlencode(
            {"deploymentId": deployment_id, "application": application}
        )
        self._keepalive = keepalive
        self._origin = Origin(origin) if origin else None
        self._close_timeout = close_timeout
        self._max_size = max_size
        self._proxy = proxy
        self._on_message = on_message
        self._live: WebMessagingConnection | None = None
        # this guest token has had a configured session: a later configure resumes it. A token kept
        # across a planned restart (``resuming``) had one: the platform must answer newSession:false
        self._configured = resuming and guest_token is not None

    def resume_record(self) -> dict[str, str]:
        """What resumes this guest session after a restart: its token (kept in the state directory only)."""
        return {"guestToken": self.guest_token}

    def new_guest_token(self) -> None:
        """Start over with a fresh guest token (4006/4007 make the old one useless, §1)."""
        self.guest_token = str(uuid.uuid4())
        self._configured = False

    async def open(self) -> WebMessagingConnection:
        """Connect, configure the session, return the connection; raises :class:`TransportFailure`."""
        ctx = self.context
        ka = self._keepalive
        try:
            ws = await connect(
                self._uri,
                origin=self._origin,
                compression=None,  # per-connection deflate state costs memory (design.md targets)
                proxy=self._proxy,
                open_timeout=ka.open_timeout,
                # RFC 6455 §5.5.2 pings: a missing pong ends the connection (seed section 2: 1011/1006)
                ping_interval=ka.ping_interval,
                ping_timeout=ka.ping_timeout,
                close_timeout=self._close_timeout,
                max_size=self._max_size,
            )
        except (wsx.WebSocketException, OSError) as exc:
            # InvalidStatus keeps status and Retry-After (429/503 admission, 403 AccessDenied, §1)
            raise TransportFailure(
                raw_from_exception(exc, ctx=ctx, method="CONNECT", endpoint=ENDPOINT)
            ) from None
        conn = WebMessagingConnection(self, ws)
        try:
            with anyio.fail_after(ka.open_timeout):
                answer = await conn.configure()
        except (wsx.WebSocketException, OSError) as exc:  # TimeoutError (no answer) is an OSError
            failure: RawError | None = raw_from_exception(
                exc, ctx=ctx, method="configureSession", endpoint=ENDPOINT
            )
        except BaseException:
            # cancelled while configuring (the runner was stopped: a reload removed the session, the
            # drain): the socket goes with the attempt, or its keepalive pings hold it open at the
            # platform with nobody serving it (issue 23). An abort: nothing awaited while cancelled.
            abort_socket(ws)
            raise
        else:
            failure = answer
        if failure is not None:
            await discard_socket(ws, failure, self._close_timeout)
            raise TransportFailure(failure)
        drift = self._lost_conversation(conn)
        if drift is not None:
            await shutdown_socket(ws, 1000, "", self._close_timeout)
            raise OperationError(drift)
        self._configured = True
        self._live = conn
        return conn

    def _lost_conversation(self, conn: WebMessagingConnection) -> SdkErrorEvent | None:
        """The one drift a guest can see: it resumed its own token (``startNew:false``) and the
        platform answered ``newSession:true``, so the conversation it held is gone (the session
        expired or was cleared server-side). Named here, decided by the taxonomy."""
        if not self._configured or conn.session_response.get("newSession") is not True:
            return None
        if self.executor is None:
            return None
        return self.executor.classifier.state_drift(
            "the conversation of this guest session",
            "a new session (newSession: true)",
            platform=self.context.platform,
            channel=self.context.channel,
            context=self.context.envelope_context(),
            endpoint="configureSession",
        )

    async def aclose(self) -> None:
        """Close a connection still open (daemon shutdown: 1001 going away)."""
        if self._live is not None:
            await self._live.close(1001)
            self._live = None


class _Pending:
    """An in-band request waiting for the frame that answers it (same ``tracingId``)."""

    __slots__ = ("answer", "done", "method")

    def __init__(self, method: str) -> None:
        self.method = method
        self.done = anyio.Event()
        self.answer: dict[str, Any] | RawError | ConnectionLost | None = None

    def resolve(self, answer: dict[str, Any] | RawError | ConnectionLost) -> None:
        self.answer = answer
        self.done.set()


class WebMessagingConnection:
    """One configured guest connection."""

    def __init__(self, transport: WebMessagingTransport, ws: ClientConnection) -> None:
        self._t = transport
        self._ws = ws
        self._session: dict[str, Any] = {}
        self._requests: OrderedDict[str, str] = OrderedDict()
        self._pending: dict[str, _Pending] = {}
        self._ended: RawError | None = None
        self._echo_answered = anyio.Event()
        self._closed = False
        #: the agent ended the conversation (a Presence Disconnect arrived)
        self.agent_disconnected = False
        #: ...and the platform said the guest is read-only now (``metadata.readOnly == "true"``)
        self.read_only = False

    @property
    def session_response(self) -> Mapping[str, Any]:
        """The SessionResponse ``body`` (connected, newSession, readOnly, maxCustomDataBytes, ...)."""
        return self._session

    @property
    def learned(self) -> Learned:
        """Nothing: no guest-facing frame names the conversation, the agent or a platform session id
        (GMT SessionResponse.kt and StructuredMessage.kt, WMJ models; issue 14)."""
        return Learned()

    @property
    def _ctx(self) -> SessionContext:
        return self._t.context.learned(self.learned)

    # -- requests -----------------------------------------------------------------------------------

    def _frame(self, action: str, **fields: Any) -> str:
        tracing = fields.pop("tracingId", None) or str(uuid.uuid4())
        self._requests[tracing] = action
        while len(self._requests) > _TRACKED_REQUESTS:
            self._requests.popitem(last=False)
        return json.dumps({"action": action, "token": self._t.guest_token, "tracingId": tracing, **fields})

    def _raw(self, msg: Mapping[str, Any], method: str | None) -> RawError:
        body = scrub(msg, self._t.guest_token)
        return raw_from_message(body, ctx=self._ctx, method=method, endpoint=ENDPOINT)

    async def configure(self) -> RawError | None:
        """Send configureSession and read until its answer; None when the session is configured."""
        await self._ws.send(
            self._frame("configureSession", deploymentId=self._t.deployment_id, startNew=False)
        )
        while True:
            msg = decode_frame(await self._ws.recv())
            if msg is None:
                return malformed_frame(self._ctx, method="configureSession", endpoint=ENDPOINT)
            cls = msg.get("class")
            if cls == "SessionResponse":
                self._requests.clear()
                body = msg.get("body")
                # a body that is not an object leaves every required field missing (INCOMPLETE_RESPONSE)
                self._session = dict(body) if isinstance(body, Mapping) else {}
                self.read_only = self._session.get("readOnly") is True
                return None
            if cls in _ERROR_CLASSES:
                return self._raw(msg, "configureSession")
            # anything else (a StructuredMessage push before the answer) is not the answer: keep reading

    async def send_message(
        self, text: str, *, metadata: Mapping[str, str] | None = None
    ) -> Mapping[str, Any]:
        """Send a guest text (``onMessage``) and return the body of the platform's echo of it.

        An in-band request through the retry executor: a 4029 is retried after its
        ``retryAfter`` (seed edge case 2: a minimum delay), a 5000 per the server-error policy;
        a failure that ends the operation raises :class:`~supervisor.errors.OperationError`.
        Must be called while :meth:`serve` runs (it reads the answers).
        """
        executor = self._t.executor
        if executor is None:
            raise RuntimeError("send_message needs a transport built with a retry executor")
        message: dict[str, Any] = {"type": "Text", "text": text}
        if metadata:
            message["metadata"] = dict(metadata)

        async def attempt_once(token: Token | None) -> dict[str, Any] | RawError:
            del token  # the guest token is the frame's own credential, not an OAuth bearer
            answer = await self._request("onMessage", message=message)
            if isinstance(answer, RawError):
                return answer
            # the echoed StructuredMessage: its body is the message as the platform stored it
            body = answer.get("body")
            return dict(body) if isinstance(body, Mapping) else {}

        answer: Mapping[str, Any] = await executor.call(
            attempt_once, ctx=self._ctx, operation="message.create", circuit=None, route="onMessage"
        )
        return answer

    async def _request(self, action: str, **fields: Any) -> dict[str, Any] | RawError:
        """One in-band request: the answering frame, or the RawError of an error envelope.

        Raises :class:`~supervisor.errors.ConnectionLost` when the link goes before the answer.
        """
        if self._ended is not None:
            raise ConnectionLost(self._ended)
        tracing = str(uuid.uuid4())
        pending = self._pending[tracing] = _Pending(action)
        try:
            try:
                await self._ws.send(self._frame(action, tracingId=tracing, **fields))
            except (wsx.WebSocketException, OSError) as exc:
                raise ConnectionLost(
                    raw_from_exception(exc, ctx=self._ctx, method=action, endpoint=ENDPOINT)
                ) from None
            with anyio.move_on_after(self._t._keepalive.open_timeout):
                await pending.done.wait()
        finally:
            self._pending.pop(tracing, None)
        answer = pending.answer
        if answer is None:
            silence = TimeoutError(f"no answer to {action} within {self._t._keepalive.open_timeout:g} s")
            return raw_from_exception(silence, ctx=self._ctx, method=action, endpoint=ENDPOINT)
        if isinstance(answer, ConnectionLost):
            raise answer
        return answer

    # -- serving ------------------------------------------------------------------------------------

    async def serve(self, report: Reporter) -> RawError:
        """Receive until the connection ends; return the RawError that says why.

        The app-level ``echo`` health check (GMT HealthCheckProvider) runs beside the receive
        loop; when it goes unanswered the link is aborted: close 1006, ABNORMAL_CLOSURE, reconnect.
        """
        echo = json.dumps(
            {
                "action": "echo",
                "token": self._t.guest_token,
                "tracingId": HEALTH_CHECK_TRACING_ID,
                "message": {"type": "Text", "text": "ping"},
            }
        )
        return await serve_alive(
            self._ws,
            self._ctx,
            self._t._keepalive,
            echo,
            self._fresh_echo_event,
            partial(self._receive, report),
        )

    def _fresh_echo_event(self) -> anyio.Event:
        self._echo_answered = anyio.Event()
        return self._echo_answered

    async def _receive(self, report: Reporter) -> RawError:
        ended = await receive_frames(
            self._ws, self._ctx, ENDPOINT, self._classify_frame, report, self._let_go
        )
        self._end_requests(ended)
        return ended

    def _end_requests(self, ended: RawError) -> None:
        # requests still waiting will never be answered on this socket
        self._ended = ended
        for pending in list(self._pending.values()):
            pending.resolve(ConnectionLost(ended))

    async def _let_go(self) -> None:
        # the runtime has moved on: close the socket but send no closeSession, so the server
        # session survives for a resume with the same guest token
        await shutdown_socket(self._ws, 1000, "", self._t._close_timeout)
        self._closed = True

    def _classify_frame(self, msg: dict[str, Any] | None) -> RawError | None:
        """The RawError a frame stands for, or None when it is not a failure."""
        if msg is None:
            return malformed_frame(self._ctx, method=None, endpoint=ENDPOINT)
        tracing = msg.get("tracingId")
        if tracing == HEALTH_CHECK_TRACING_ID:
            self._echo_answered.set()  # any answer to the echo proves the server reads and writes
        method = self._requests.pop(tracing, None) if isinstance(tracing, str) else None
        cls = msg.get("class")
        waiter = self._pending.pop(tracing, None) if isinstance(tracing, str) else None
        if waiter is not None:
            # the answer to an in-band request goes to the executor, not to the runtime
            waiter.resolve(self._raw(msg, waiter.method) if cls in _ERROR_CLASSES else msg)
            if cls in _ERROR_CLASSES:
                return None
        elif cls in _ERROR_CLASSES:
            return self._raw(msg, method or ("echo" if tracing == HEALTH_CHECK_TRACING_ID else None))
        if cls == "StructuredMessage" and tracing != HEALTH_CHECK_TRACING_ID:
            body = msg.get("body")
            if _is_agent_disconnect(body):
                # the agent ended the conversation: not an error. GMT MessagingClientImpl goes
                # read-only only when metadata.readOnly is "true"; with "false" the deployment
                # merely shows the disconnect and the guest may go on writing
                self.agent_disconnected = True
                meta = body.get("metadata") if isinstance(body, Mapping) else None
                self.read_only = isinstance(meta, Mapping) and meta.get("readOnly") == "true"
            if self._t._on_message is not None and isinstance(body, Mapping):
                self._t._on_message(body)
        return None

    async def close(self, code: int = 1000, reason: str = "") -> None:
        """closeSession (only on 1000: the session is over) then a close frame; never raises."""
        if self._closed:
            return
        self._closed = True
        self._end_requests(raw_from_close(code, ctx=self._ctx))
        if self._t._live is self:
            self._t._live = None
        if code == 1000 and self._ws.state is State.OPEN:
            frame = json.dumps(
                {"action": "closeSession", "token": self._t.guest_token, "closeAllConnections": True}
            )
            try:
                with anyio.move_on_after(self._t._close_timeout):
                    await self._ws.send(frame)
            except (wsx.WebSocketException, OSError):
                pass
        await shutdown_socket(self._ws, code, reason, self._t._close_timeout)


def _is_agent_disconnect(body: object) -> bool:
    if not isinstance(body, Mapping) or body.get("type") != "Event":
        return False
    events = body.get("events")
    return isinstance(events, list) and any(
        isinstance(e, Mapping)
        and e.get("eventType") == "Presence"
        and isinstance(e.get("presence"), Mapping)
        and e["presence"].get("type") == "Disconnect"
        for e in events
    )
