"""Genesys Web Messaging guest WebSocket (docs/platforms.md, "Genesys Cloud Web Messaging"): a :class:`~supervisor.transports.base.Transport`.

Wire (docs/platforms.md, "Genesys Cloud Web Messaging"): ``wss://webmessaging.<domain>/v1?deploymentId=D
&application=A``; client frames ``{"action", "token", "tracingId", ...}`` as GMT's requests encode them
(GMT = genesys-messenger-transport-mobile-sdk 2.14.0, ``shyrka/send/*.kt``); server envelopes
``{"type","class","code","body","tracingId"?}``.

* :meth:`WebMessagingTransport.open` connects (WebSocket pings per :class:`~supervisor.config.Keepalive`:
  a missing pong closes the link, the client sees 1011/1006), sends ``configureSession`` with the guest
  token made once per transport (``startNew:false``, so a reconnect resumes the same conversation) and
  waits for the ``SessionResponse``. ``connected: false`` is judged as GMT's
  ``MessagingClientImpl.handleSessionResponse`` does: with ``readOnly: true`` the conversation is over
  (CONVERSATION_ENDED), otherwise the attempt failed (NOT_CONNECTED) and the session reconnects.
* :meth:`WebMessagingConnection.serve` reports error envelopes and pushed events in-band and runs the
  app-level ``echo`` health check (GMT ``HealthCheckProvider``) next to the receive loop: only after
  ``keepalive.echoInterval`` s without an inbound frame, at most once per 30 s (:mod:`.wm_health`).
* :meth:`WebMessagingConnection.send_message` is an in-band request: it goes through the one retry
  executor (supervisor/rest/executor.py) as a REST call does. Its answer is the echoed message (same
  ``tracingId``) or an error reply, which carries no ``tracingId`` and is matched as GMT matches it
  (:mod:`.wm_replies`: 4011, 4013, 4029 fail the oldest message still sending). A 4029 is the
  guest's own message rate (only that message fails), so the request has no circuit; its
  ``retryAfter`` is the executor's minimum delay; a refusal for good (4011, 4013) is not re-sent.
  Each message carries a client id: the frame's ``tracingId`` (GMT ``MessageStore.prepareMessage``
  sends its own message id there, and matches the echo back by it: ``StructuredMessage.toMessage``)
  and the message's ``metadata`` (:data:`~.wm_history.CLIENT_ID_KEY`: the guest history names no
  tracingId but keeps a message's metadata). A send left unanswered within ``openTimeout`` may have
  reached the platform: it is never re-sent blindly. After ``sendCheckAfter`` s it is looked for by
  its client id in what the platform echoed since, then in the guest history
  (:mod:`.wm_history`); only when neither has it is it re-sent, once, with the same client id.

The transport decides nothing (docs/architecture.md, "Data flows one way"): every failure becomes a RawError, or
an event of a code the taxonomy defines and the transport names (drift, NOT_CONNECTED, ...).
The guest token is a bearer credential for the conversation: it is never put in a RawError (server
text that echoes it is scrubbed) nor in ``SessionContext``.
"""

from __future__ import annotations

import json
import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

import anyio
from websockets.asyncio.client import ClientConnection, connect
from websockets.protocol import State
from websockets.typing import Origin

from supervisor.attempts import Flight
from supervisor.boundary import (
    SOCKET_FAILURES,
    Learned,
    Reporter,
    SessionContext,
    raw_from_close,
    raw_from_exception,
    raw_from_message,
    socket_failures,
)
from supervisor.clock import Clock, SystemClock
from supervisor.config import Keepalive
from supervisor.errors import (
    CircuitOpenError,
    ConnectionLost,
    Fenced,
    OperationError,
    SendUnconfirmed,
    TransportFailure,
)
from supervisor.rest.executor import RetryExecutor, Sleep
from supervisor.rest.tokens import Token
from supervisor.taxonomy import RawError, SdkErrorEvent
from supervisor.transports.fenced_io import PLAIN_WIRE, Wire
from supervisor.transports.sockets import (
    abort_socket,
    decode_frame,
    discard_socket,
    malformed_frame,
    receive_frames,
    scrub,
    shutdown_socket,
)
from supervisor.transports.wm_health import EchoSchedule
from supervisor.transports.wm_history import CLIENT_ID_KEY, GuestHistory, client_id_of
from supervisor.transports.wm_replies import answers_oldest_message, is_failure
from supervisor.vocabulary import CloseCode

__all__ = [
    "CONVERSATION_CLASSES",
    "HEALTH_CHECK_TRACING_ID",
    "WebMessagingConnection",
    "WebMessagingTransport",
]

# GMT HealthCheckProvider sends echo with this tracingId (base64 of "HealthCheckMessageId"), §1
HEALTH_CHECK_TRACING_ID = "SGVhbHRoQ2hlY2tNZXNzYWdlSWQ="
ENDPOINT = "/v1"
#: inbound frames that are the conversation's messages or events, by their ``class`` (GMT
#: ``shyrka/receive/MessageClassName.kt``): structured messages (text, typing and presence events,
#: attachments in their content) and the attachment frames (metadata of a file uploaded or deleted).
#: Session, JWT and error replies are the protocol's own, not the conversation's.
CONVERSATION_CLASSES = frozenset(
    {"StructuredMessage", "UploadSuccessEvent", "UploadFailureEvent", "AttachmentDeletedResponse"}
)
_TRACKED_REQUESTS = 256  # tracingId -> action, so a reply that names its request names the action
_LATE_ECHOES = 256  # echoes of messages whose send had stopped waiting, by client id
_SEEN_MESSAGES = 1024  # platform message ids this session delivered (a replay never repeats one)
#: history pages read at most to close one gap (newest first: 4 x 25 messages)
RESYNC_PAGES = 4
# a history entry stamped this long before the link was lost may still be one we never heard [I]:
# the platform's clock and ours differ, and a frame in flight when the link died is lost too
_CLOCK_MARGIN_S = 5.0
# GMT JwtHandler: a JWT is used while it has more than 5 s left
_JWT_MARGIN_S = 5.0
# codes the transport names from a SessionResponse (taxonomy v2; a version without them, v1, never
# judged ``connected``'s value and keeps its documented behaviour)
NOT_CONNECTED = "NOT_CONNECTED"
CONVERSATION_ENDED = "CONVERSATION_ENDED"


class WebMessagingTransport:
    """Opens guest connections for one session; the guest token survives reconnects (resume)."""

    # taxonomy [responses."genesys.webmessaging.SessionResponse"]: v2 `connected` (GMT and WMJ
    # require only it), v1 connected, newSession, readOnly. The guest protocol names no
    # conversation (GMT SessionResponse.kt, WMJ, PY269; docs/taxonomy.md), so a guest session learns none
    # and is not checked for drift on it; see docs/taxonomy.md.
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
        on_event: Callable[[str, Mapping[str, Any]], None] | None = None,
        resuming: bool = False,
        clock: Clock | None = None,
        sleep: Sleep | None = None,
        history: GuestHistory | None = None,
        send_check_after: float = 3.0,
        stamp: Callable[[], Mapping[str, str]] | None = None,
        wire: Wire = PLAIN_WIRE,
    ) -> None:
        self.context = ctx
        # headers for the upgrade request: the test-only stamp (supervisor/stamp.py), else none
        self._stamp = stamp
        # a fleet member's sockets: each write fenced by the shard's lease deadline, bound to its address
        self._wire = wire
        #: the guest history (REST, guest JWT): where an unanswered send is looked for
        self.history = history
        #: seconds an unanswered send waits for a late echo before the history is read
        self.send_check_after = send_check_after
        # the echo health check's time (injected: tests move a fake clock instead of waiting)
        self.clock: Clock = clock or SystemClock()
        self.sleep: Sleep = sleep or anyio.sleep
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
        # every inbound frame of the conversation (CONVERSATION_CLASSES), with its class: the platform events
        self._on_event = on_event
        self._live: WebMessagingConnection | None = None
        # what this session delivered (platform message ids), and when its last link ended (epoch s):
        # a resync after a reconnection fetches the guest history back to there
        self.seen_ids: OrderedDict[str, None] = OrderedDict()
        self.lost_at: float | None = None
        # this guest token has had a configured session: a later configure resumes it. A token kept
        # across a planned restart (``resuming``) had one: the platform must answer newSession:false
        self._configured = resuming and guest_token is not None

    def saw(self, message: Mapping[str, Any]) -> bool:
        """Remember a message this session delivered; False when it had been delivered already."""
        message_id = message.get("id")
        if not isinstance(message_id, str):
            return True
        if message_id in self.seen_ids:
            return False
        self.seen_ids[message_id] = None
        while len(self.seen_ids) > _SEEN_MESSAGES:
            self.seen_ids.popitem(last=False)
        return True

    def resume_record(self) -> dict[str, str]:
        """What resumes this guest session after a restart: its token (kept in the state directory only)."""
        return {"guestToken": self.guest_token}

    def new_guest_token(self) -> None:
        """Start over with a fresh guest token (4006/4007 make the old one useless, §1)."""
        self.guest_token = str(uuid.uuid4())
        self._configured = False

    async def open(self, flight: Flight | None = None) -> WebMessagingConnection:
        """Connect, configure the session, return the connection; raises :class:`TransportFailure`.

        The attempt is the handshake and the ``configureSession`` it carries (a ``connected:
        false`` answer counts against the endpoint like a refused handshake): ``flight`` leaves
        right before the handshake, and the runtime tells its answer.
        """
        ctx = self.context
        ka = self._keepalive
        if flight is not None:
            await flight.leave()
        # InvalidStatus keeps status and Retry-After (429/503 admission, 403 AccessDenied, §1)
        with socket_failures(ctx=ctx, method="CONNECT", endpoint=ENDPOINT):
            ws = await connect(
                self._uri,
                origin=self._origin,
                additional_headers=self._stamp() if self._stamp is not None else None,
                compression=None,  # per-connection deflate state costs memory (docs/architecture.md, "Targets")
                proxy=self._proxy,
                open_timeout=ka.open_timeout,
                # RFC 6455 §5.5.2 pings: a missing pong ends the connection (seed section 2: 1011/1006)
                ping_interval=ka.ping_interval,
                ping_timeout=ka.ping_timeout,
                close_timeout=self._close_timeout,
                max_size=self._max_size,
                **self._wire.websocket_options(),
            )
        conn = WebMessagingConnection(self, ws)
        try:
            with anyio.fail_after(ka.open_timeout):
                answer = await conn.configure()
        except SOCKET_FAILURES as exc:  # TimeoutError (no answer) is an OSError
            failure: RawError | None = raw_from_exception(
                exc, ctx=ctx, method="configureSession", endpoint=ENDPOINT
            )
        except BaseException:
            # cancelled while configuring (the runner was stopped: a reload removed the session, the
            # drain): the socket goes with the attempt, or its keepalive pings hold it open at the
            # platform with nobody serving it. An abort: nothing awaited while cancelled.
            abort_socket(ws)
            raise
        else:
            failure = answer
        if failure is not None:
            await discard_socket(ws, failure, self._close_timeout)
            raise TransportFailure(failure)
        refused = self._not_connected(conn) or self._lost_conversation(conn)
        if refused is not None:
            # no closeSession: a guest that was not connected resumes with the same token later
            await shutdown_socket(ws, CloseCode.NORMAL_CLOSURE, "", self._close_timeout)
            raise OperationError(refused)
        self._configured = True
        self._live = conn
        return conn

    def _not_connected(self, conn: WebMessagingConnection) -> SdkErrorEvent | None:
        """``connected: false``, judged as GMT's ``MessagingClientImpl.handleSessionResponse`` does:
        with ``readOnly: true`` the conversation is over (read-only; GMT never reconnects it):
        CONVERSATION_ENDED; otherwise the guest is not configured and the attempt failed:
        NOT_CONNECTED (the session reconnects and resumes). Named here, decided by the taxonomy."""
        response = conn.session_response
        if response.get("connected") is not False:
            return None  # connected, or the field is missing (the runtime's response check says so)
        if response.get("readOnly") is True:
            return self._named(CONVERSATION_ENDED, "SessionResponse connected: false, readOnly: true")
        return self._named(NOT_CONNECTED, "SessionResponse connected: false")

    def _named(self, code: str, details: str) -> SdkErrorEvent | None:
        """The event of ``code``, or None when the active taxonomy has no such code (v1): the
        session then behaves as that version documented."""
        if self.executor is None:
            return None
        classifier = self.executor.classifier
        if code not in classifier.taxonomy.codes:
            return None
        return classifier.named(
            code,
            platform=self.context.platform,
            channel=self.context.channel,
            details=details,
            context=self.context.envelope_context(),
            endpoint="configureSession",
        )

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
            await self._live.close(CloseCode.GOING_AWAY)
            self._live = None


class _Pending:
    """An in-band request waiting for the frame that answers it: the one with its ``tracingId``, or
    an error reply, which names none, matched as GMT matches it (:mod:`.wm_replies`)."""

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
        # the echo health check's wait for an answer (any inbound frame proves the link, §1): the
        # frame that comes first cancels it (:meth:`_health_check`); None while no echo waits
        self._answer_wait: anyio.CancelScope | None = None
        ka = transport._keepalive
        self._health = EchoSchedule(ka.echo_interval, transport.clock.monotonic())
        self._closed = False
        # echoes that came after their send stopped waiting (openTimeout), by client id
        self._late_echoes: OrderedDict[str, dict[str, Any]] = OrderedDict()
        # the guest JWT for REST reads (getJwt) and its expiry, epoch seconds
        self._jwt: tuple[str, float] | None = None
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
        (GMT SessionResponse.kt and StructuredMessage.kt, WMJ models; docs/taxonomy.md, "What the daemon can and cannot verify")."""
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
                # GMT SessionResponse.kt: readOnly defaults to false when absent
                self.read_only = self._session.get("readOnly") is True
                return None
            if is_failure(msg):
                return self._raw(msg, "configureSession")
            # anything else (a StructuredMessage push before the answer) is not the answer: keep reading

    async def send_message(
        self,
        text: str,
        *,
        metadata: Mapping[str, str] | None = None,
        client_id: str | None = None,
    ) -> Mapping[str, Any]:
        """Send a guest text (``onMessage``) and return the body of the platform's echo of it.

        An in-band request through the retry executor: a 4029 is retried after its
        ``retryAfter`` (seed edge case 2: a minimum delay), a 5000 per the server-error policy;
        a failure that ends the operation raises :class:`~supervisor.errors.OperationError`.
        ``client_id`` (default: a new UUID) goes with every send of this message (module
        docstring); a send left unanswered is looked for by it before it is sent again, once.
        When the message was found in the guest history, the answer is that history entry.
        Must be called while :meth:`serve` runs (it reads the answers).
        """
        executor = self._t.executor
        if executor is None:
            raise RuntimeError("send_message needs a transport built with a retry executor")
        cid = client_id or str(uuid.uuid4())
        message: dict[str, Any] = {
            "type": "Text",
            "text": text,
            "metadata": {**(metadata or {}), CLIENT_ID_KEY: cid},
        }
        unanswered: OperationError | None = None
        sends = 0
        while sends < 2:  # the first send, and at most one re-send with the same client id
            sends += 1
            try:
                return await self._send_once(executor, message, cid)
            except _Unanswered as silence:
                unanswered = silence.failure
            found = await self._sent_meanwhile(cid)
            if isinstance(found, Mapping):
                return found
            if found is _UNKNOWN:
                break  # the history could not be read: sending again might deliver it twice
        assert unanswered is not None
        raise SendUnconfirmed(unanswered, cid, resent=sends > 1)

    async def _send_once(
        self, executor: RetryExecutor, message: dict[str, Any], cid: str
    ) -> Mapping[str, Any]:
        """One send operation (the executor's retries of an answered refusal included); raises
        :class:`_Unanswered` when an attempt got no answer: its outcome is unknown."""
        silent = False

        async def attempt_once(token: Token | None) -> dict[str, Any] | RawError:
            nonlocal silent
            del token  # the guest token is the frame's own credential, not an OAuth bearer
            answer = await self._exchange("onMessage", cid, message=message)
            if answer is None:
                # no answer within openTimeout: the message may be stored. The executor ends the
                # operation on it (a lost answer, never retried blindly: a retry with a new
                # tracingId was how a message arrived twice) and the send is looked for first
                silent = True
                raise ConnectionLost(self._silence("onMessage"))
            if isinstance(answer, RawError):
                return answer
            # the echoed StructuredMessage: its body is the message as the platform stored it
            body = answer.get("body")
            return dict(body) if isinstance(body, Mapping) else {}

        try:
            answer: Mapping[str, Any] = await executor.call(
                attempt_once,
                ctx=self._ctx,
                operation="message.create",
                circuit=None,
                route="onMessage",
                idempotent=False,
            )
        except OperationError as failure:
            if silent:
                raise _Unanswered(failure) from None
            raise
        return answer

    async def _sent_meanwhile(self, cid: str) -> Mapping[str, Any] | object:
        """What the platform holds of an unanswered send, after ``sendCheckAfter`` s: its late
        echo, else its guest history entry; :data:`_ABSENT` when neither has it, :data:`_UNKNOWN`
        when the history could not be read (or there is none to read)."""
        await self._t.sleep(self._t.send_check_after)
        echoed = self._late_echoes.pop(cid, None)
        if echoed is not None:
            return echoed
        history = self._t.history
        if history is None or self._ended is not None:
            return _UNKNOWN
        try:
            jwt = await self._guest_jwt()
            if jwt is None:
                return _UNKNOWN
            # the newest page: a message sent seconds ago is among the last 25 (GMT's page size)
            page = await history.page(self._ctx, jwt)
        except (OperationError, CircuitOpenError, ConnectionLost):
            return _UNKNOWN
        for entry in page.entities:
            if entry.get("direction") == "Inbound" and client_id_of(entry) == cid:
                self._t.saw(entry)  # delivered now: a later resync does not replay it
                return dict(entry)
        return _ABSENT

    async def _guest_jwt(self) -> str | None:
        """The guest JWT for REST reads (``getJwt``, GMT ``JwtHandler``: kept while it has more
        than 5 s left); None when the platform did not give one."""
        now = self._t.clock.time()
        if self._jwt is not None and self._jwt[1] > now + _JWT_MARGIN_S:
            return self._jwt[0]
        answer = await self._request("getJwt")
        body = answer.get("body") if isinstance(answer, dict) else None
        jwt = body.get("jwt") if isinstance(body, Mapping) else None
        exp = body.get("exp") if isinstance(body, Mapping) else None
        if not isinstance(jwt, str) or not jwt:
            return None
        self._jwt = (jwt, float(exp) if isinstance(exp, int | float) else now)
        return jwt

    async def missed_messages(self) -> list[dict[str, Any]] | None:
        """What the guest history holds that this session never delivered, since its last link
        ended, oldest first (docs/platforms.md, "Guest history"); None when the history could not
        be read (no history configured, no JWT, the read failed for good).

        The pages are read newest first (at most :data:`RESYNC_PAGES`, each through the retry
        executor on ``genesys:api``) down to the newest message this session delivered (or, for a
        session that delivered none, one stamped before its link was lost). Each message returned
        is remembered as delivered.
        """
        t = self._t
        history = t.history
        if history is None:
            return None
        # the paging stops at the newest message this session delivered; only a session that never
        # delivered one is bounded by when its link was lost (the platform's clock is not ours)
        since = None if t.lost_at is None or t.seen_ids else t.lost_at - _CLOCK_MARGIN_S
        found: list[dict[str, Any]] = []
        try:
            jwt = await self._guest_jwt()
            if jwt is None:
                return None
            for number in range(1, RESYNC_PAGES + 1):
                page = await history.page(self._ctx, jwt, number)
                reached = False
                for entry in page.entities:
                    message_id = entry.get("id")
                    stamped = _epoch(entry)
                    if (isinstance(message_id, str) and message_id in t.seen_ids) or (
                        since is not None and stamped is not None and stamped < since
                    ):
                        reached = True  # newest first: the rest was heard, or is older than the gap
                        break
                    found.append(dict(entry))
                if reached or number >= page.page_count or not page.entities:
                    break
        except (OperationError, CircuitOpenError, ConnectionLost, Fenced):
            # (Fenced: the session's shard is no longer this member's, its read refused at the write;
            # the resync that asked runs in the daemon's task group, which it must not end)
            return None
        found.reverse()
        return [m for m in found if t.saw(m)]

    async def _request(self, action: str, **fields: Any) -> dict[str, Any] | RawError:
        """One in-band request: the answering frame, or the RawError of an error envelope or of
        the silence (no answer within ``openTimeout``).

        Raises :class:`~supervisor.errors.ConnectionLost` when the link goes before the answer.
        """
        answer = await self._exchange(action, str(uuid.uuid4()), **fields)
        return self._silence(action) if answer is None else answer

    def _silence(self, action: str) -> RawError:
        silence = TimeoutError(f"no answer to {action} within {self._t._keepalive.open_timeout:g} s")
        return raw_from_exception(silence, ctx=self._ctx, method=action, endpoint=ENDPOINT)

    async def _exchange(self, action: str, tracing: str, **fields: Any) -> dict[str, Any] | RawError | None:
        """Send one request with ``tracing`` as its tracingId; its answer, or None when none came
        within ``openTimeout``. Raises :class:`~supervisor.errors.ConnectionLost` when the link goes."""
        if self._ended is not None:
            raise ConnectionLost(self._ended)
        pending = self._pending[tracing] = _Pending(action)
        try:
            try:
                await self._ws.send(self._frame(action, tracingId=tracing, **fields))
            except SOCKET_FAILURES as exc:
                raise ConnectionLost(
                    raw_from_exception(exc, ctx=self._ctx, method=action, endpoint=ENDPOINT)
                ) from None
            with anyio.move_on_after(self._t._keepalive.open_timeout):
                await pending.done.wait()
        finally:
            self._pending.pop(tracing, None)
        answer = pending.answer
        if isinstance(answer, ConnectionLost):
            raise answer
        return answer

    # -- serving ------------------------------------------------------------------------------------

    async def serve(self, report: Reporter) -> RawError:
        """Receive until the connection ends; return the RawError that says why.

        The app-level ``echo`` health check (GMT HealthCheckProvider) runs beside the receive
        loop (:meth:`_health_check`); when it goes unanswered the link is aborted: close 1006,
        ABNORMAL_CLOSURE, reconnect.
        """
        outcome: RawError | None = None
        self._health.heard(self._t.clock.monotonic())  # the SessionResponse just came in
        async with anyio.create_task_group() as tg:
            if self._t._keepalive.echo_interval > 0:
                tg.start_soon(self._health_check, tg.cancel_scope)
            outcome = await self._receive(report)
            tg.cancel_scope.cancel()
        if outcome is None:
            # the health check aborted the link: no close frame arrived (RFC 6455 section 7.1.5)
            outcome = raw_from_close(CloseCode.ABNORMAL_CLOSURE, ctx=self._ctx)
            self._end_requests(outcome)
        return outcome

    async def _health_check(self, scope: anyio.CancelScope) -> None:
        """Send ``echo`` once the link was quiet ``echoInterval`` s (at most once per 30 s, GMT
        HealthCheckProvider's cool-down); when no frame at all comes back within ``echoTimeout``
        s, abort the link and cancel ``scope`` (the serve task group). Any inbound frame is an
        answer, an error reply to the echo included: it proves the platform reads and writes."""
        clock, sleep = self._t.clock, self._t.sleep
        answer_within = self._t._keepalive.echo_timeout
        echo = json.dumps(
            {
                "action": "echo",
                "token": self._t.guest_token,
                "tracingId": HEALTH_CHECK_TRACING_ID,
                "message": {"type": "Text", "text": "ping"},
            }
        )
        while True:
            wait = self._health.due() - clock.monotonic()
            if wait > 0:
                await sleep(wait)
                continue  # a frame may have come in meanwhile: the next echo moved
            # the wait is a cancel scope the first inbound frame cancels (:meth:`_classify_frame`),
            # not a task beside an event: an echo per guest every 30 s, a task each was a tenth of
            # the steady CPU of 5,000 guests (docs/benchmarks.md, "Endurance and scale")
            waiting = self._answer_wait = anyio.CancelScope()
            self._health.sent(clock.monotonic())
            try:
                await self._ws.send(echo)
            except SOCKET_FAILURES:
                self._answer_wait = None
                return  # the link is gone: the receive loop reports how it ended
            with waiting:
                await sleep(answer_within)
            self._answer_wait = None
            if not waiting.cancel_called:
                abort_socket(self._ws)
                scope.cancel()
                return

    async def _receive(self, report: Reporter) -> RawError:
        ended = await receive_frames(
            self._ws, self._ctx, ENDPOINT, self._classify_frame, report, self._let_go
        )
        self._t.lost_at = self._t.clock.time()
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
        await shutdown_socket(self._ws, CloseCode.NORMAL_CLOSURE, "", self._t._close_timeout)
        self._closed = True

    def _classify_frame(self, msg: dict[str, Any] | None) -> RawError | None:
        """The RawError a frame stands for, or None when it is not a failure (or answers a request)."""
        # any inbound frame proves the link: the echo health check waits for one
        self._health.heard(self._t.clock.monotonic())
        waiting = self._answer_wait
        if waiting is not None:
            waiting.cancel()  # the echo's answer (any frame): its wait ends now
        if msg is None:
            return malformed_frame(self._ctx, method=None, endpoint=ENDPOINT)
        traced = msg.get("tracingId")
        tracing = traced if isinstance(traced, str) else None
        failure = is_failure(msg)
        if tracing is not None:
            method = self._requests.pop(tracing, None)
            waiter = self._pending.pop(tracing, None)
            if waiter is not None:
                # the answer to an in-band request goes to the executor, not to the runtime (an
                # echoed message is still the conversation's: it goes on to ``on_message`` below)
                waiter.resolve(self._raw(msg, waiter.method) if failure else msg)
                if failure:
                    return None
            elif failure:
                return self._raw(msg, method or ("echo" if tracing == HEALTH_CHECK_TRACING_ID else None))
            elif method == "onMessage" and msg.get("class") == "StructuredMessage":
                # the echo of a message whose send stopped waiting: kept for its check
                body = msg.get("body")
                self._late_echoes[tracing] = dict(body) if isinstance(body, Mapping) else {}
                while len(self._late_echoes) > _LATE_ECHOES:
                    self._late_echoes.popitem(last=False)
        elif failure:
            # error replies carry no tracingId (the vendor's fixtures): matched as GMT matches them
            waiter = self._oldest_message() if answers_oldest_message(msg) else None
            if waiter is not None:
                waiter.resolve(self._raw(msg, waiter.method))
                return None
            return self._raw(msg, None)
        cls = msg.get("class")
        if tracing == HEALTH_CHECK_TRACING_ID:
            return None  # the health check's own echo: not the conversation's
        if (
            self._t._on_event is not None
            and cls in CONVERSATION_CLASSES
            and isinstance(msg.get("body"), Mapping)
        ):
            self._t._on_event(cls, msg["body"])
        if cls == "StructuredMessage":
            body = msg.get("body")
            if _is_agent_disconnect(body):
                # the agent ended the conversation: not an error. GMT MessagingClientImpl goes
                # read-only only when metadata.readOnly is "true"; with "false" the deployment
                # merely shows the disconnect and the guest may go on writing
                self.agent_disconnected = True
                meta = body.get("metadata") if isinstance(body, Mapping) else None
                self.read_only = isinstance(meta, Mapping) and meta.get("readOnly") == "true"
            if isinstance(body, Mapping):
                self._t.saw(body)
                if self._t._on_message is not None:
                    self._t._on_message(body)
        return None

    def _oldest_message(self) -> _Pending | None:
        """The oldest ``onMessage`` still waiting for its answer, taken off the waiting list
        (GMT MessageStore.onMessageError: the first message still sending)."""
        tracing = next((t for t, p in self._pending.items() if p.method == "onMessage"), None)
        if tracing is None:
            return None
        self._requests.pop(tracing, None)
        return self._pending.pop(tracing)

    async def abandon(self) -> None:
        """A handover: the socket closed with 1001 (going away) and no ``closeSession``, so the guest
        session lives on and the next start resumes it with the same token (``newSession: false``,
        GMT ``configureSession`` with the stored token); never raises."""
        await self.close(CloseCode.GOING_AWAY)

    async def close(self, code: CloseCode = CloseCode.NORMAL_CLOSURE, reason: str = "") -> None:
        """closeSession (only on 1000: the session is over) then a close frame; never raises."""
        if self._closed:
            return
        self._closed = True
        self._end_requests(raw_from_close(code, ctx=self._ctx))
        if self._t._live is self:
            self._t._live = None
        if code == CloseCode.NORMAL_CLOSURE and self._ws.state is State.OPEN:
            # GMT CloseSessionRequest.kt: token, closeAllConnections, a fresh tracingId, action
            frame = self._frame("closeSession", closeAllConnections=True)
            try:
                with anyio.move_on_after(self._t._close_timeout):
                    await self._ws.send(frame)
            except SOCKET_FAILURES:
                pass
        await shutdown_socket(self._ws, code, reason, self._t._close_timeout)


class _Unanswered(Exception):
    """A send got no answer (its ``failure``, NETWORK_TIMEOUT): its outcome is unknown."""

    def __init__(self, failure: OperationError) -> None:
        super().__init__(str(failure))
        self.failure = failure


# what the check of an unanswered send found: not there, or nothing it could tell
_ABSENT = object()
_UNKNOWN = object()


def _epoch(message: Mapping[str, Any]) -> float | None:
    """When the platform stamped a history entry (``channel.time``, ISO 8601), epoch seconds."""
    channel = message.get("channel")
    stamp = channel.get("time") if isinstance(channel, Mapping) else None
    if not isinstance(stamp, str):
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


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
