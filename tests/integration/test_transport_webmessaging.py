"""WebMessagingTransport against the Genesys simulator (docs/runtime.md): open, resume, faults -> RawError -> code.

Every failure the transport meets must come out as a RawError that the v1 taxonomy classifies
as the fault's documented code (docs/platforms.md, "Genesys Cloud Web Messaging", "WebSocket close codes"; docs/taxonomy.md). Waits are protocol
waits (a frame, a close); ``anyio.fail_after`` only bounds a test that would otherwise hang.
"""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator, Mapping
from typing import Any

import anyio
import msgspec
import pytest
from websockets.asyncio.server import ServerConnection, serve

from machines.registry import CircuitRegistry, Endpoints
from supervisor.attempts import Attempts
from supervisor.boundary import SessionContext
from supervisor.clock import SystemClock
from supervisor.config import Keepalive
from supervisor.errors import OperationError, TransportFailure
from supervisor.rest.executor import RetryExecutor
from supervisor.sim.faults import Fault, FaultKind
from supervisor.sim.genesys.config import GenesysSimConfig
from supervisor.taxonomy import Channel, Classifier, Platform, RawError, load_taxonomy
from supervisor.transports.webmessaging import WebMessagingConnection, WebMessagingTransport
from supervisor.vocabulary import CloseCode
from tests.harness.clocks import FakeTimers
from tests.harness.simulators import Genesys
from tests.harness.waits import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.anyio]


class RecordingClassifier(Classifier):
    """The v1 classifier, keeping every RawError the retry executor hands it."""

    def __init__(self) -> None:
        super().__init__(load_taxonomy("v1"))
        self.raws: list[RawError] = []

    def classify(self, raw: RawError) -> Any:
        self.raws.append(raw)
        return super().classify(raw)


CLASSIFIER = Classifier(load_taxonomy("v1"))
# pings and echoes far apart: these tests drive the link with faults, not with keepalive timers
QUIET = Keepalive(ping_interval=60.0, ping_timeout=30.0, echo_interval=0.0, open_timeout=5.0)
# the app-level health check at its defaults, timed by FakeTimers (the test moves the clock)
HEALTH = Keepalive(
    ping_interval=60.0, ping_timeout=30.0, echo_interval=30.0, echo_timeout=10.0, open_timeout=5.0
)
LIMIT_S = 2.0  # hang guard only


class Reports:
    """A Reporter that records what it was told and answers ``keep``."""

    def __init__(self, keep: bool = True) -> None:
        self.keep = keep
        self.raws: list[RawError] = []

    async def __call__(self, raw: RawError) -> bool:
        self.raws.append(raw)
        return self.keep


def ctx(session_id: str = "wm-1") -> SessionContext:
    return SessionContext(session_id, Platform.GENESYS, Channel.WEBMESSAGING, agent_id="agent-1")


class Waits:
    """The retry executor's sleep: records each delay, advances the simulator's clock, returns at once."""

    def __init__(self, g: Genesys) -> None:
        self.g = g
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)
        self.g.clock.advance(seconds)
        self.g.sim.tick()


def executor(g: Genesys, classifier: Classifier = CLASSIFIER) -> RetryExecutor:
    return RetryExecutor(
        classifier,
        Attempts(Endpoints(SystemClock(), CircuitRegistry(SystemClock()))),
        SystemClock(),
        sleep=Waits(g),
    )


def transport(g: Genesys, keepalive: Keepalive = QUIET, **kwargs: Any) -> WebMessagingTransport:
    return WebMessagingTransport(
        kwargs.pop("context", None) or ctx(),
        url=g.sim.urls["webmessaging"],
        deployment_id=kwargs.pop("deployment_id", "dep-1"),
        keepalive=keepalive,
        executor=kwargs.pop("executor", None) or executor(g),
        **kwargs,
    )


def code_of(raw: RawError) -> str:
    return CLASSIFIER.classify(raw).code


async def serve_to_end(conn: WebMessagingConnection, report: Reports) -> RawError:
    with anyio.fail_after(LIMIT_S):
        return await conn.serve(report)


async def open_failure(t: WebMessagingTransport) -> RawError:
    with pytest.raises(TransportFailure) as info:
        await t.open()
    assert isinstance(info.value.raw, RawError)
    return info.value.raw


# -- open and resume ------------------------------------------------------------------------------------


async def test_open_gives_a_complete_session_response(genesys: Genesys) -> None:
    t = transport(genesys)
    conn = await t.open()
    response = conn.session_response
    assert response["connected"] is True and response["newSession"] is True
    event = CLASSIFIER.validate_response(
        response, platform=Platform.GENESYS, channel=Channel.WEBMESSAGING, kind=t.response_kind
    )
    assert event is None
    # no guest frame names the conversation (docs/taxonomy.md, "What the daemon can and cannot verify"): the transport learns none
    assert conn.learned.conversation_id is None and "conversationId" not in response
    await conn.close(CloseCode.NORMAL_CLOSURE)  # a stop ends the server session too
    rec = genesys.sim.recorder
    await wait_until(lambda: rec.ws_messages("webmessaging", "in", "closeSession") == 1)
    assert rec.ws_messages("webmessaging", "in", "configureSession") == 1


async def test_abandon_leaves_the_guest_session_for_a_new_transport_to_resume(genesys: Genesys) -> None:
    """A handover: the socket goes with 1001 and no closeSession; the next daemon's transport, given the
    kept token, is answered newSession: false, on the same conversation."""
    t = transport(genesys)
    first = await t.open()
    token = t.guest_token
    conversation = genesys.sim.conversation_of(token)
    await first.abandon()
    rec = genesys.sim.recorder
    await wait_until(lambda: rec.events("client_close", listener="webmessaging", code=1001) == 1)
    assert rec.ws_messages("webmessaging", "in", "closeSession") == 0
    later = transport(genesys, guest_token=token, resuming=True)
    second = await later.open()
    assert second.session_response["newSession"] is False
    assert genesys.sim.conversation_of(token) is conversation
    await second.close(CloseCode.GOING_AWAY)


async def test_reconnect_resumes_the_conversation_with_the_same_guest_token(genesys: Genesys) -> None:
    t = transport(genesys)
    first = await t.open()
    conversation = genesys.sim.conversation_of(t.guest_token)
    await first.close(CloseCode.GOING_AWAY)  # going away: the session must survive
    second = await t.open()
    assert second.session_response["newSession"] is False
    assert genesys.sim.conversation_of(t.guest_token) is conversation
    assert genesys.sim.recorder.ws_messages("webmessaging", "in", "closeSession") == 0
    t2 = transport(genesys, context=ctx("wm-2"))
    other = await t2.open()
    assert genesys.sim.conversation_of(t2.guest_token) is not conversation
    await second.close(CloseCode.GOING_AWAY)
    await other.close(CloseCode.GOING_AWAY)


async def test_a_resume_answered_with_a_new_session_is_conversation_drift(genesys: Genesys) -> None:
    """The one drift a guest can see: it resumed its token and the platform started over."""
    t = transport(genesys)
    first = await t.open()
    await first.close(CloseCode.GOING_AWAY)
    del genesys.sim.state.sessions[t.guest_token]  # the platform forgot the session (expiry, clear)
    with pytest.raises(OperationError) as info:
        await t.open()
    event = info.value.event
    assert getattr(event, "code", None) == "CONVERSATION_STATE_DRIFT"
    assert getattr(event, "trigger", None) == "CONVERSATION_STATE_DRIFT"


# -- the connection ends: close codes --------------------------------------------------------------------


async def test_drop_is_an_abnormal_closure(genesys: Genesys) -> None:
    conn = await transport(genesys).open()
    genesys.sim.faults.inject(Fault(kind=FaultKind.DROP))
    raw = await serve_to_end(conn, Reports())
    assert raw.close_code == 1006
    event = CLASSIFIER.classify(raw)
    assert event.code == "ABNORMAL_CLOSURE" and event.reconnect


@pytest.mark.parametrize(
    ("close", "code"),
    [
        (1000, "GRACEFUL_CLOSE"),
        (1001, "GOING_AWAY"),
        (1011, "WS_INTERNAL_ERROR"),
        (1012, "SERVICE_RESTART"),
        (1013, "TRY_AGAIN_LATER"),
    ],
)
async def test_server_close_code_is_classified(genesys: Genesys, close: int, code: str) -> None:
    conn = await transport(genesys).open()
    genesys.sim.faults.inject(Fault(kind=FaultKind.CLOSE, params={"code": close}))
    raw = await serve_to_end(conn, Reports())
    assert raw.close_code == close
    assert code_of(raw) == code


async def test_blackhole_is_ended_by_the_echo_health_check(genesys: Genesys) -> None:
    timers = FakeTimers()
    conn = await transport(genesys, HEALTH, clock=timers.clock, sleep=timers.sleep).open()
    rec = genesys.sim.recorder
    start = timers.clock.monotonic()
    result: list[RawError] = []

    async def run() -> None:
        result.append(await conn.serve(Reports()))

    with anyio.fail_after(LIMIT_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            # quiet for echoInterval: the echo goes out, the server answers it (the SDK's tracingId)
            await wait_until(lambda: timers.deadlines() == [start + 30.0])
            timers.advance(30.0)
            await wait_until(lambda: rec.ws_messages("webmessaging", "out", "echo") == 1)
            await wait_until(lambda: timers.deadlines() == [start + 60.0])  # the next one, 30 s on
            assert not result
            genesys.sim.faults.inject(Fault(kind=FaultKind.BLACKHOLE))
            timers.advance(30.0)
            # the second echo is out (never read): its answer is awaited for echoTimeout
            await wait_until(lambda: timers.deadlines() == [start + 70.0])
            timers.advance(10.0)
    (raw,) = result
    # no frame in time: the transport aborts the link without a close frame (RFC 6455 §7.1.5)
    assert raw.close_code == 1006 and code_of(raw) == "ABNORMAL_CLOSURE"
    assert rec.ws_messages("webmessaging", "out", "echo") == 1


async def test_blackhole_is_ended_by_missing_websocket_pongs(genesys: Genesys) -> None:
    pings = Keepalive(ping_interval=0.1, ping_timeout=0.2, echo_interval=0.0, open_timeout=5.0)
    conn = await transport(genesys, pings, close_timeout=0.2).open()
    genesys.sim.faults.inject(Fault(kind=FaultKind.BLACKHOLE))
    raw = await serve_to_end(conn, Reports())
    # no pong within ping_timeout: websockets fails the link with 1011, the server never answers
    # that close frame either, so no close frame was received: 1006 (RFC 6455 §7.1.5)
    assert raw.close_code == 1006 and code_of(raw) == "ABNORMAL_CLOSURE"


async def test_unanswered_configure_session_is_a_network_timeout(genesys: Genesys) -> None:
    short = Keepalive(ping_interval=60.0, ping_timeout=30.0, echo_interval=0.0, open_timeout=0.3)
    genesys.sim.faults.inject(Fault(kind=FaultKind.BLACKHOLE))  # upgrade answered, frames never read
    raw = await open_failure(transport(genesys, short))
    assert raw.method == "configureSession" and code_of(raw) == "NETWORK_TIMEOUT"


# -- the handshake is refused ----------------------------------------------------------------------------


@pytest.mark.parametrize(("status", "code"), [(429, "RATE_LIMITED"), (503, "SERVER_ERROR")])
async def test_admission_limit_refuses_the_handshake(genesys: Genesys, status: int, code: str) -> None:
    genesys.sim.faults.inject(
        Fault(kind=FaultKind.ADMISSION_LIMIT, params={"rate_per_s": 1, "status": status, "retry_after": "3"})
    )
    admitted = await transport(genesys).open()  # the one handshake of this clock second
    raw = await open_failure(transport(genesys, context=ctx("wm-2")))
    assert raw.status == status and raw.method == "CONNECT"
    event = CLASSIFIER.classify(raw)
    assert event.code == code and event.retry_after_ms == 3000
    await admitted.close(CloseCode.GOING_AWAY)


@pytest.mark.genesys_sim(GenesysSimConfig(deployments=("dep-1",)))
async def test_unknown_deployment_is_a_rejected_handshake(genesys: Genesys) -> None:
    raw = await open_failure(transport(genesys, deployment_id="dep-unknown"))
    assert raw.status == 403 and code_of(raw) == "HANDSHAKE_REJECTED"


async def test_nothing_listening_is_a_connection_failure() -> None:
    with socket.socket() as sock:  # a port that was free a moment ago
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    t = WebMessagingTransport(ctx(), url=f"ws://127.0.0.1:{port}", deployment_id="d", keepalive=QUIET)
    raw = await open_failure(t)
    assert raw.exception is not None and code_of(raw) == "CONNECTION_FAILED"


# -- the session response is wrong -----------------------------------------------------------------------


async def test_missing_fields_leave_an_incomplete_session_response(genesys: Genesys) -> None:
    genesys.sim.faults.inject(Fault(kind=FaultKind.MISSING_FIELDS, count=1, params={"fields": ["readOnly"]}))
    t = transport(genesys)
    conn = await t.open()
    assert "readOnly" not in conn.session_response
    event = CLASSIFIER.validate_response(
        conn.session_response,
        platform=Platform.GENESYS,
        channel=Channel.WEBMESSAGING,
        kind=t.response_kind,
    )
    assert event is not None and event.code == "INCOMPLETE_RESPONSE"
    assert event.details is not None and "readOnly" in event.details
    await conn.close(CloseCode.GOING_AWAY)


async def test_malformed_session_response_is_a_malformed_response(genesys: Genesys) -> None:
    genesys.sim.faults.inject(Fault(kind=FaultKind.MALFORMED_BODY, count=1))
    raw = await open_failure(transport(genesys))
    assert raw.exception == "json.JSONDecodeError" and raw.method == "configureSession"
    assert code_of(raw) == "MALFORMED_RESPONSE"


async def test_rate_limited_configure_fails_the_open(genesys: Genesys) -> None:
    genesys.sim.faults.inject(Fault(kind=FaultKind.RATE_LIMIT_STORM, count=1, params={"retry_after": "4"}))
    raw = await open_failure(transport(genesys))
    event = CLASSIFIER.classify(raw)
    assert event.code == "RATE_LIMITED" and event.retry_after_ms == 4000


# -- in-band errors --------------------------------------------------------------------------------------


async def test_4029_on_a_message_is_retried_after_retry_after_and_the_connection_goes_on(
    genesys: Genesys,
) -> None:
    seen: list[Mapping[str, Any]] = []
    waits = Waits(genesys)
    conn = await transport(genesys, on_message=seen.append, executor=executor(genesys)).open()
    conn._t.executor._sleep = waits  # type: ignore[union-attr]
    report = Reports(keep=True)
    result: list[RawError] = []

    async def run() -> None:
        result.append(await conn.serve(report))

    genesys.sim.faults.inject(Fault(kind=FaultKind.RATE_LIMIT_STORM, count=1, params={"retry_after": "2"}))
    with anyio.fail_after(LIMIT_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            answer = await conn.send_message("one")  # 4029, then retried: the executor's, not the runtime's
            assert answer["text"] == "one" and answer["direction"] == "Inbound"
            await conn.send_message("two")  # the session stays up: only that message was limited (§1)
            genesys.sim.faults.inject(Fault(kind=FaultKind.CLOSE, params={"code": 1000}))
    assert report.raws == []  # the 4029 answered the request: nothing was reported in-band
    # one retry, never before the 2 s Retry-After (seed edge case 2: a minimum delay)
    assert len(waits.delays) == 1 and waits.delays[0] >= 2.0
    assert [m["text"] for m in seen] == ["one", "two"]  # each arrived once
    assert code_of(result[0]) == "GRACEFUL_CLOSE"


async def test_a_persisting_4029_spends_the_budget_and_fails_the_message(genesys: Genesys) -> None:
    waits = Waits(genesys)
    conn = await transport(genesys, executor=executor(genesys)).open()
    conn._t.executor._sleep = waits  # type: ignore[union-attr]
    genesys.sim.faults.inject(Fault(kind=FaultKind.RATE_LIMIT_STORM, params={"retry_after": "3"}))
    with anyio.fail_after(LIMIT_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(conn.serve, Reports(keep=True))
            with pytest.raises(OperationError) as info:
                await conn.send_message("one")
            tg.cancel_scope.cancel()
    assert info.value.exhausted
    # the rate_limit policy's two retries, none before Retry-After (its backoff may wait longer)
    assert len(waits.delays) == 2 and all(d >= 3.0 for d in waits.delays)
    await conn.close(CloseCode.NORMAL_CLOSURE)


async def test_a_message_on_a_dead_link_is_connection_lost_not_retried(genesys: Genesys) -> None:
    conn = await transport(genesys).open()
    report = Reports(keep=True)
    genesys.sim.faults.inject(Fault(kind=FaultKind.DROP))
    assert code_of(await serve_to_end(conn, report)) == "ABNORMAL_CLOSURE"
    with pytest.raises(OperationError) as info:
        await conn.send_message("late")
    assert getattr(info.value.event, "code", None) == "ABNORMAL_CLOSURE" and not info.value.exhausted


async def test_session_expired_event_ends_the_connection_when_the_runtime_says_so(genesys: Genesys) -> None:
    t = transport(genesys)
    conn = await t.open()
    report = Reports(keep=False)
    genesys.sim.faults.inject(Fault(kind=FaultKind.SESSION_EXPIRED))
    raw = await serve_to_end(conn, report)
    assert report.raws == [raw] and raw is report.raws[0]  # the very RawError that was reported
    assert code_of(raw) == "SESSION_EXPIRED"
    # the same guest token is now useless: configureSession answers 4006
    again = await open_failure(t)
    assert again.status is None and code_of(again) == "SESSION_EXPIRED"
    old = genesys.sim.conversation_of(t.guest_token)
    t.new_guest_token()
    fresh = await t.open()  # a new token: a new session, not a drift
    assert fresh.session_response["newSession"] is True
    assert genesys.sim.conversation_of(t.guest_token) is not old
    await fresh.close(CloseCode.GOING_AWAY)


async def test_4006_is_the_sessions_and_ends_the_message_with_the_link(genesys: Genesys) -> None:
    """The platform's 4006 carries no tracingId (GMT Response.kt ``sessionExpired``) and GMT makes it
    the session's (``handleError``: ``transitionToStateError``), not a message's: it is reported
    in-band; the runtime ends the session (fail-fast), and the message waiting on the link ends
    with it as SESSION_EXPIRED (never re-sent on the dead socket)."""
    conn = await transport(genesys).open()
    report = Reports(keep=False)  # a STATE_CORRUPTING code: the runner answers False
    genesys.sim.faults.inject(Fault(kind=FaultKind.SESSION_EXPIRED, count=1, params={"mode": "code"}))
    result: list[RawError] = []

    async def run() -> None:
        result.append(await conn.serve(report))

    with anyio.fail_after(LIMIT_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            with pytest.raises(OperationError) as info:
                await conn.send_message("hello")
    event = info.value.event
    assert getattr(event, "code", None) == "SESSION_EXPIRED" and not info.value.exhausted
    assert [code_of(r) for r in report.raws] == ["SESSION_EXPIRED"] and result == report.raws
    assert genesys.sim.recorder.ws_messages("webmessaging", "in", "onMessage") == 1


@pytest.mark.genesys_sim(GenesysSimConfig(wm_error_tracing_id=True))
async def test_an_error_reply_naming_its_request_answers_that_request(genesys: Genesys) -> None:
    """The extension where error replies carry the request's tracingId (WMJ's BaseMessage reads one
    where present): the 4006 is then that message's answer, failing it as SESSION_EXPIRED, a
    fail-fast the runner turns into the session's end (SessionRunner.operation_failed)."""
    conn = await transport(genesys).open()
    report = Reports(keep=True)
    genesys.sim.faults.inject(Fault(kind=FaultKind.SESSION_EXPIRED, count=1, params={"mode": "code"}))
    with anyio.fail_after(LIMIT_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(conn.serve, report)
            with pytest.raises(OperationError) as info:
                await conn.send_message("hello")
            tg.cancel_scope.cancel()
    event = info.value.event
    assert getattr(event, "code", None) == "SESSION_EXPIRED" and getattr(event, "raw_status", None) == 4006
    assert getattr(event, "taxonomy_class", None) == "STATE_CORRUPTING"
    assert report.raws == []  # answered to the request, not pushed
    await conn.close(CloseCode.GOING_AWAY)


async def test_connection_closed_event_is_reported_then_the_close_ends_it(genesys: Genesys) -> None:
    conn = await transport(genesys).open()
    report = Reports(keep=True)
    genesys.sim.faults.inject(Fault(kind=FaultKind.CONNECTION_CLOSED_EVENT, params={"reason": "signedIn"}))
    raw = await serve_to_end(conn, report)
    assert [code_of(r) for r in report.raws] == ["SESSION_OPENED_ELSEWHERE"]
    assert code_of(raw) == "GRACEFUL_CLOSE"


async def test_agent_disconnect_is_not_an_error(genesys: Genesys) -> None:
    t = transport(genesys)
    conn = await t.open()
    report = Reports()
    conversation = genesys.sim.conversation_of(t.guest_token)
    assert conversation is not None
    assert await genesys.sim.end_conversation(conversation.id) is True
    genesys.sim.faults.inject(Fault(kind=FaultKind.CLOSE, params={"code": 1000}))
    raw = await serve_to_end(conn, report)
    # metadata.readOnly "true": read-only, as GMT's MessagingClientImpl decides
    assert report.raws == [] and conn.agent_disconnected and conn.read_only
    assert code_of(raw) == "GRACEFUL_CLOSE"


# -- secrets -------------------------------------------------------------------------------------------


def _leaks(token: str, raws: list[RawError]) -> list[str]:
    out = []
    for raw in raws:
        for blob in (msgspec.json.encode(raw), msgspec.json.encode(CLASSIFIER.classify(raw))):
            if token.encode() in blob:
                out.append(blob.decode())
    return out


async def test_no_guest_token_in_any_raw_error_from_the_simulator(genesys: Genesys) -> None:
    classifier = RecordingClassifier()
    t = transport(genesys, executor=executor(genesys, classifier))
    conn = await t.open()
    report = Reports(keep=True)
    genesys.sim.faults.inject(Fault(kind=FaultKind.RATE_LIMIT_STORM, count=1))
    with anyio.fail_after(LIMIT_S):
        async with anyio.create_task_group() as tg:
            result: list[RawError] = []

            async def run() -> None:
                result.append(await conn.serve(report))

            tg.start_soon(run)
            await conn.send_message("one")  # a 4029, retried
            genesys.sim.faults.inject(Fault(kind=FaultKind.SESSION_EXPIRED, count=1))
            await wait_until(lambda: len(report.raws) == 1)  # SessionExpiredEvent, pushed
            genesys.sim.faults.inject(Fault(kind=FaultKind.DROP))
    raws = [*classifier.raws, *report.raws, *result]
    raws.append(await open_failure(t))  # 4006 on configureSession
    assert len(raws) == 4
    assert _leaks(t.guest_token, raws) == []
    assert t.guest_token not in json.dumps(t.context.envelope_context())


@pytest.fixture
async def echoing_server() -> AsyncIterator[str]:
    """A fake Web Messaging server whose errors quote the guest token back (worst case)."""
    calls = 0

    async def handler(ws: ServerConnection) -> None:
        nonlocal calls
        calls += 1
        token = json.loads(await ws.recv())["token"]
        if calls == 1:
            body = f"Session authentication failed for {token}"
            await ws.send(json.dumps({"type": "response", "class": "string", "code": 403, "body": body}))
            return
        answer = {"connected": True, "newSession": True, "readOnly": False}
        await ws.send(
            json.dumps({"type": "response", "class": "SessionResponse", "code": 200, "body": answer})
        )
        push = {
            "type": "message",
            "class": "LogoutEvent",
            "code": 200,
            "body": {"reason": token, "t": [token]},
        }
        await ws.send(json.dumps(push))
        await ws.wait_closed()

    async with serve(handler, "127.0.0.1", 0) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        yield f"ws://127.0.0.1:{port}"


async def test_server_text_quoting_the_guest_token_is_scrubbed(echoing_server: str) -> None:
    t = WebMessagingTransport(ctx(), url=echoing_server, deployment_id="d", keepalive=QUIET)
    refused = await open_failure(t)
    assert code_of(refused) == "WEB_MESSAGING_AUTH_FAILED"
    assert isinstance(refused.body, dict) and "***" in refused.body["body"]
    conn = await t.open()
    report = Reports(keep=False)
    pushed = await serve_to_end(conn, report)
    assert code_of(pushed) == "SESSION_LOGGED_OUT"
    assert _leaks(t.guest_token, [refused, pushed]) == []
    await conn.close(CloseCode.NORMAL_CLOSURE)
