"""The daemon's Genesys transports held against the vendors' wire shapes (docs/platforms.md).

Not our simulators: a loopback server (:mod:`tests.conformance.genesys_wire`) answers from fixtures
that restate the vendors' own shapes (PY269 models, GMT 2.14.0 ``Response.kt``) and records what the
daemon sent. Compared: method, path and query, content type, form or JSON fields, the Authorization
scheme and principal; not compared: header order, User-Agent, telemetry headers. Time is injected
(:class:`~tests.harness.clocks.FakeTimers`, the retry executor's recorded waits): nothing sleeps for a
timer.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import httpx
import pytest

from machines.registry import CircuitRegistry, Endpoints
from machines.session import SessionConfig
from supervisor.attempts import Attempts
from supervisor.boundary import SessionContext
from supervisor.bus import EventBus
from supervisor.clock import FakeClock, SystemClock
from supervisor.config import Keepalive
from supervisor.errors import OperationError, SendUnconfirmed
from supervisor.events import ErrorClassified, Published
from supervisor.rest.executor import RetryExecutor
from supervisor.rest.pipeline import RequestPipeline
from supervisor.runtime.session_runner import SessionRunner
from supervisor.store import UpdateOutcome
from supervisor.taxonomy import Channel, Classifier, Platform, RawError, load_taxonomy
from supervisor.transports.webmessaging import WebMessagingConnection, WebMessagingTransport
from supervisor.transports.wm_history import GuestHistory
from supervisor.vocabulary import GENESYS_WEBMESSAGING, CloseCode
from tests.conformance.conftest import G, sdk
from tests.conformance.genesys_wire import (
    ACCESS_TOKEN,
    CANNOT_DOWNGRADE,
    CUSTOM_ATTRIBUTE_SIZE_TOO_LARGE,
    GMT_CLOSE_SESSION,
    GMT_CONFIGURE_SESSION,
    GMT_ECHO,
    GMT_ON_MESSAGE,
    GUEST_JWT,
    HEALTH_CHECK_ID,
    MESSAGE_TOO_LONG,
    SESSION_EXPIRED,
    SESSION_NOT_FOUND,
    SESSION_RESUMED,
    TOO_MANY_REQUESTS,
    UNKNOWN_ERROR,
    GenesysWire,
    conversation_read,
    genesys_wire,
    message_echo,
    session_response,
)
from tests.harness.clocks import FakeTimers, advancing
from tests.harness.config import attributes_config
from tests.harness.waits import wait_until
from tests.integration.attributes_harness import durable_daemon

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

LIMIT_S = 5.0  # hang guard only
CID = "0f8fad5b-d9cb-469f-a165-70867728950e"
CUSTOMER = "7c9e6679-7425-40de-944b-e07fc1f90ae7"
AGENT = "16fd2706-8baf-433b-82eb-8c7fada847da"
# echoes off: the tests of the health check turn it on
QUIET = Keepalive(ping_interval=60.0, ping_timeout=30.0, echo_interval=0.0, open_timeout=5.0)


def health(interval: float = 30.0) -> Keepalive:
    return Keepalive(
        ping_interval=60.0, ping_timeout=30.0, echo_interval=interval, echo_timeout=10.0, open_timeout=5.0
    )


@pytest.fixture
async def wire() -> AsyncIterator[GenesysWire]:
    async with genesys_wire() as server:
        yield server


# ================================================================== point 5: a conversation read


def _daemon_config(wire: GenesysWire, tmp_path: Path, taxonomy: str | None = None) -> str:
    text = attributes_config(wire.urls, [CID], store=tmp_path / "store.sqlite3")
    if taxonomy is not None:
        text = text.replace("[daemon]\n", f'[daemon]\ntaxonomyVersion = "{taxonomy}"\n', 1)
    return text


async def test_a_read_without_state_lets_the_update_go_out_as_py269_sends_it(
    wire: GenesysWire, tmp_path: Path
) -> None:
    """PY269 ``Conversation.state``: "When reading conversations, this field will never have a value
    present". The daemon reads the conversation (no ``state``), sends the update and reads it back;
    each request is the one PY269's ``ConversationsApi`` sends for the same call."""
    wire.conversations[CID] = conversation_read(CID, CUSTOMER, AGENT, {"survey": "pending"})
    async with durable_daemon(_daemon_config(wire, tmp_path), tmp_path, clock=FakeClock(start=1000.0)) as h:
        await h.wait_active(1)
        answer = await h.service.submit("wm-0", {"survey": "yes"})
        outcomes = await h.settle()
    assert outcomes[answer.update_id] is UpdateOutcome.VERIFIED
    daemon = list(wire.requests)
    token, first_read, *rest = daemon
    patches = [r for r in rest if r.method == "PATCH"]
    assert len(patches) == 1 and [r.method for r in rest] == ["PATCH", "GET"]  # then the read-back

    # the same three calls, made by Genesys' own Python SDK against the same server
    wire.requests.clear()
    client = G.ApiClient(host=wire.urls["login"])
    await sdk(client.get_client_credentials_token, "demo-client", "not-a-real-secret")
    client.host = wire.urls["api"]
    api = G.ConversationsApi(client)
    read = await sdk(api.get_conversation, CID)
    assert read.state is None  # the SDK's model, filled from the read: no state
    body = G.ParticipantAttributes()
    body.attributes = {"survey": "yes"}
    await sdk(api.patch_conversation_participant_attributes, CID, CUSTOMER, body)
    sdk_token, sdk_read, sdk_patch = wire.requests

    assert token == sdk_token
    assert (token.auth_scheme, token.auth_principal, token.form) == (
        "basic",
        "demo-client",
        {"grant_type": ["client_credentials"]},
    )
    assert first_read == sdk_read
    assert (first_read.path, first_read.auth_scheme, first_read.auth_principal) == (
        f"/api/v2/conversations/{CID}",
        "bearer",
        ACCESS_TOKEN,
    )
    assert patches[0] == sdk_patch
    assert patches[0].path == f"/api/v2/conversations/{CID}/participants/{CUSTOMER}/attributes"
    assert (patches[0].content_type, patches[0].json) == (
        "application/json",
        {"attributes": {"survey": "yes"}},
    )


async def test_a_read_naming_another_conversation_is_drift_and_nothing_is_sent(
    wire: GenesysWire, tmp_path: Path
) -> None:
    """The drift check on ``id`` stays (seed section 3): a read that names another conversation
    decides nothing, the update is flagged, no PATCH goes out."""
    other = "6ba7b810-9dad-41d1-80b4-00c04fd430c8"
    wire.conversations[CID] = conversation_read(other, CUSTOMER, AGENT, {"survey": "pending"})
    async with durable_daemon(_daemon_config(wire, tmp_path), tmp_path, clock=FakeClock(start=1000.0)) as h:
        await h.wait_active(1)
        answer = await h.service.submit("wm-0", {"survey": "yes"})
        outcomes = await h.settle()
        (flag,) = await h.service.mismatches()
    assert outcomes[answer.update_id] is UpdateOutcome.FLAGGED
    assert flag["reason"] == "failed: CONVERSATION_STATE_DRIFT"
    assert wire.seen("PATCH") == []


async def test_v1_pinned_still_refuses_the_read_as_v1_documented(wire: GenesysWire, tmp_path: Path) -> None:
    """A configuration pinning taxonomy v1 keeps v1's documented check (id, state, participants):
    the same read is INCOMPLETE_RESPONSE there and no update goes out (the reason v2 exists)."""
    wire.conversations[CID] = conversation_read(CID, CUSTOMER, AGENT, {"survey": "pending"})
    text = _daemon_config(wire, tmp_path, taxonomy="v1")
    async with durable_daemon(text, tmp_path, clock=FakeClock(start=1000.0)) as h:
        await h.wait_active(1)
        answer = await h.service.submit("wm-0", {"survey": "yes"})
        outcomes = await h.settle()
        (flag,) = await h.service.mismatches()
    assert outcomes[answer.update_id] is UpdateOutcome.FLAGGED
    assert flag["reason"] == "failed: INCOMPLETE_RESPONSE"
    assert wire.seen("PATCH") == []


# ================================================================== Web Messaging: helpers


def ctx(session_id: str = "wm-1") -> SessionContext:
    return SessionContext(session_id, Platform.GENESYS, Channel.WEBMESSAGING, agent_id="agent-1")


class Waits:
    """The retry executor's sleep: records each delay and returns at once."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)
        await anyio.lowlevel.checkpoint()


class Reports:
    """A Reporter: records every in-band failure, with its code, and answers ``keep``."""

    def __init__(self, classifier: Classifier, keep: bool = True) -> None:
        self.classifier = classifier
        self.keep = keep
        self.raws: list[RawError] = []

    @property
    def codes(self) -> list[str]:
        return [self.classifier.classify(r).code for r in self.raws]

    async def __call__(self, raw: RawError) -> bool:
        self.raws.append(raw)
        return self.keep


def wm(
    wire: GenesysWire,
    *,
    taxonomy: str = "v2",
    keepalive: Keepalive = QUIET,
    timers: FakeTimers | None = None,
    waits: Waits | None = None,
    **kwargs: Any,
) -> WebMessagingTransport:
    classifier = Classifier(load_taxonomy(taxonomy))
    executor = RetryExecutor(
        classifier,
        Attempts(Endpoints(SystemClock(), CircuitRegistry(SystemClock()))),
        SystemClock(),
        sleep=waits or Waits(),
    )
    timers = timers or FakeTimers()
    return WebMessagingTransport(
        kwargs.pop("context", None) or ctx(),
        url=wire.urls["webmessaging"],
        deployment_id="dep-1",
        keepalive=keepalive,
        executor=executor,
        clock=timers.clock,
        sleep=kwargs.pop("sleep", timers.sleep),
        **kwargs,
    )


def classifier_of(t: WebMessagingTransport) -> Classifier:
    assert t.executor is not None
    return t.executor.classifier


async def serving(conn: WebMessagingConnection, report: Reports, result: list[RawError]) -> None:
    result.append(await conn.serve(report))


# ================================================================== point 6: the SessionResponse


async def test_configure_session_is_the_frame_gmt_sends(wire: GenesysWire) -> None:
    conn = await wm(wire).open()
    (frame,) = wire.sent("configureSession")
    # GMT SerializationTest "ConfigureSessionRequest": token, deploymentId, startNew, tracingId, action
    assert {"token", "deploymentId", "startNew", "tracingId", "action"} <= set(frame) <= GMT_CONFIGURE_SESSION
    assert frame["startNew"] is False and frame["deploymentId"] == "dep-1"
    uuid.UUID(frame["tracingId"])
    await conn.close(CloseCode.GOING_AWAY)


class Runner:
    """A SessionRunner over the transport, on a fake clock whose sleeps move it; its events kept."""

    def __init__(self, transport: WebMessagingTransport) -> None:
        clock = FakeClock(start=5000.0)
        self.bus = EventBus()
        self.events: list[Published] = []
        self.bus.subscribe(self.events.append)
        self.runner = SessionRunner(
            transport,
            classifier=classifier_of(transport),
            gate=Attempts(Endpoints(clock)).connect(GENESYS_WEBMESSAGING),
            bus=self.bus,
            clock=clock,
            rng=random.Random(1),
            config=SessionConfig(first_delay_s=(2.0, 8.0)),
            sleep=advancing(clock),
        )

    @property
    def classified(self) -> list[str]:
        return [p.event.event.code for p in self.events if isinstance(p.event, ErrorClassified)]

    @property
    def state(self) -> str:
        return self.runner.state.value


async def run_until(runner: Runner, state: str) -> None:
    async with anyio.create_task_group() as tg:
        tg.start_soon(runner.runner.run)
        await wait_until(lambda: runner.state == state, LIMIT_S)
        await runner.runner.stop(CloseCode.GOING_AWAY)


async def test_a_minimal_resumed_session_response_keeps_the_session(wire: GenesysWire) -> None:
    """GMT's fixture of a resumed session is ``{"connected":true,"newSession":false}``: under v2 the
    session resumes and goes active (newSession and readOnly default to false, GMT SessionResponse.kt)."""
    wire.session_answers.append(SESSION_RESUMED)
    runner = Runner(wm(wire, guest_token="kept-guest-token", resuming=True))
    await run_until(runner, "active")
    assert runner.runner.termination is not None and runner.runner.termination.reason.value == "STOPPED"
    assert runner.classified == [] and len(wire.sent("configureSession")) == 1
    assert wire.sent("configureSession")[0]["token"] == "kept-guest-token"


async def test_v1_pinned_ends_that_session_as_v1_documented(wire: GenesysWire) -> None:
    wire.session_answers.append(SESSION_RESUMED)
    runner = Runner(wm(wire, taxonomy="v1", guest_token="kept-guest-token", resuming=True))
    await run_until(runner, "terminated")
    assert runner.classified == ["INCOMPLETE_RESPONSE"]


async def test_connected_false_and_read_only_ends_the_conversation_without_reconnecting(
    wire: GenesysWire,
) -> None:
    """GMT handleSessionResponse: readOnly -> State.ReadOnly; connected:false there is a conversation
    that is over (MessagingClientConversationDisconnectTest): the session ends cleanly."""
    wire.session_answers.append(session_response(connected=False, new_session=False, read_only=True))
    runner = Runner(wm(wire))
    async with anyio.create_task_group() as tg:
        tg.start_soon(runner.runner.run)
        await wait_until(lambda: runner.state == "terminated", LIMIT_S)
    termination = runner.runner.termination
    assert termination is not None and termination.reason.value == "GRACEFUL_CLOSE"
    assert runner.classified == ["CONVERSATION_ENDED"]
    assert len(wire.sent("configureSession")) == 1  # never reconnected
    assert wire.sent("closeSession") == []  # nothing to close: the platform ended it


async def test_connected_false_without_read_only_fails_the_attempt_and_reconnects(wire: GenesysWire) -> None:
    wire.session_answers.extend(
        [
            session_response(connected=False, new_session=True),
            session_response(connected=True, new_session=False),
        ]
    )
    transport = wm(wire)
    runner = Runner(transport)
    await run_until(runner, "active")
    assert runner.classified == ["NOT_CONNECTED"]
    first, second = wire.sent("configureSession")
    # the reconnection resumes the same guest token (startNew false), as GMT's reconnect does
    assert first["token"] == second["token"] == transport.guest_token and second["startNew"] is False


async def test_v1_pinned_never_judged_connected(wire: GenesysWire) -> None:
    """v1 documented only that connected, newSession and readOnly are present: a pinned v1 lacks
    NOT_CONNECTED and CONVERSATION_ENDED, so the transport names neither and v1 behaves as it did."""
    wire.session_answers.append(session_response(connected=False, new_session=True))
    runner = Runner(wm(wire, taxonomy="v1"))
    await run_until(runner, "active")
    assert runner.classified == [] and len(wire.sent("configureSession")) == 1


# ================================================================== point 7: requests and their answers


async def test_a_message_is_the_frame_gmt_sends(wire: GenesysWire) -> None:
    t = wm(wire)
    conn = await t.open()
    async with anyio.create_task_group() as tg:
        tg.start_soon(conn.serve, Reports(classifier_of(t)))
        answer = await conn.send_message("Hello world")
        tg.cancel_scope.cancel()
    (frame,) = wire.sent("onMessage")
    # GMT SerializationTest "OnMessageRequest": {"token","message":{"text","type":"Text"},"tracingId","action"}
    assert {"token", "message", "tracingId", "action"} <= set(frame) <= GMT_ON_MESSAGE
    # GMT TextMessage.kt: text, metadata?, content, channel?, type. The message's client id is the
    # frame's tracingId (GMT MessageStore.prepareMessage) and goes in its metadata too
    assert set(frame["message"]) <= {"text", "metadata", "content", "channel", "type"}
    assert frame["message"] == {
        "type": "Text",
        "text": "Hello world",
        "metadata": {"customMessageId": frame["tracingId"]},
    }
    assert answer["text"] == "Hello world" and answer["direction"] == "Inbound"
    await conn.close(CloseCode.GOING_AWAY)


async def _two_messages(
    wire: GenesysWire, conn: WebMessagingConnection, refusal: dict[str, Any]
) -> tuple[Any, Any]:
    """Send two messages; answer the first with ``refusal`` (no tracingId, as the platform's
    errors come) while both wait, then echo the second. Returns each one's outcome."""
    wire.hold("onMessage")
    outcomes: dict[str, Any] = {}

    async def send(text: str) -> None:
        try:
            outcomes[text] = await conn.send_message(text)
        except OperationError as failure:
            outcomes[text] = failure

    async with anyio.create_task_group() as tg:
        tg.start_soon(send, "first")
        await wait_until(lambda: len(wire.sent("onMessage")) == 1)
        tg.start_soon(send, "second")
        await wait_until(lambda: len(wire.sent("onMessage")) == 2)
        await wire.push(refusal)
        await wait_until(lambda: "first" in outcomes)
        second = wire.sent("onMessage")[1]
        await wire.push(message_echo(second["tracingId"], "second"))
    return outcomes["first"], outcomes["second"]


@pytest.mark.parametrize(
    ("refusal", "status"), [(MESSAGE_TOO_LONG, 4011), (CUSTOM_ATTRIBUTE_SIZE_TOO_LARGE, 4013)]
)
async def test_a_refusal_fails_exactly_the_oldest_message_and_is_never_resent(
    wire: GenesysWire, refusal: dict[str, Any], status: int
) -> None:
    """GMT MessageStore.onMessageError fails the oldest message still sending: that one fails, for
    good (MESSAGE_REJECTED, PERMANENT), and is not sent again; the other goes through."""
    t = wm(wire)
    conn = await t.open()
    report = Reports(classifier_of(t))
    with anyio.fail_after(LIMIT_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(conn.serve, report)
            first, second = await _two_messages(wire, conn, refusal)
            tg.cancel_scope.cancel()
    assert isinstance(first, OperationError) and not first.exhausted
    assert (first.event.code, first.event.raw_status) == ("MESSAGE_REJECTED", status)  # type: ignore[attr-defined]
    assert second["text"] == "second"
    assert [f["message"]["text"] for f in wire.sent("onMessage")] == ["first", "second"]  # never re-sent
    assert report.raws == []  # the request's answer, not an in-band failure of the session
    await conn.close(CloseCode.GOING_AWAY)


async def test_a_4029_is_resent_only_after_retry_after(wire: GenesysWire) -> None:
    """GMT tooManyRequests (retryAfter 3, no tracingId) fails the message still sending; the retry
    executor sends it again no sooner than 3 s later (the waits are recorded, not slept)."""
    waits = Waits()
    t = wm(wire, waits=waits)
    conn = await t.open()
    wire.answer_next("onMessage", TOO_MANY_REQUESTS)
    with anyio.fail_after(LIMIT_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(conn.serve, Reports(classifier_of(t)))
            answer = await conn.send_message("hello")
            tg.cancel_scope.cancel()
    assert answer["text"] == "hello"
    assert len(waits.delays) == 1 and waits.delays[0] >= 3.0
    first, again = wire.sent("onMessage")
    # the same message, with the same client id (its tracingId): the platform refused the first
    assert first["message"] == again["message"] and first["tracingId"] == again["tracingId"]
    await conn.close(CloseCode.GOING_AWAY)


async def test_a_5000_fails_the_waiting_message_as_a_server_error_and_it_is_retried(
    wire: GenesysWire,
) -> None:
    """[I] GMT leaves a message answered by 5000 sending forever; the daemon gives a 5000 reply to the
    oldest message waiting (the platform answers in order), which the server_error policy retries."""
    waits = Waits()
    t = wm(wire, waits=waits)
    conn = await t.open()
    wire.answer_next("onMessage", UNKNOWN_ERROR)
    with anyio.fail_after(LIMIT_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(conn.serve, Reports(classifier_of(t)))
            answer = await conn.send_message("hello")
            tg.cancel_scope.cancel()
    assert answer["text"] == "hello" and len(wire.sent("onMessage")) == 2 and len(waits.delays) == 1
    await conn.close(CloseCode.GOING_AWAY)


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (SESSION_EXPIRED, "SESSION_EXPIRED"),
        (SESSION_NOT_FOUND, "SESSION_NOT_FOUND"),
        (CANNOT_DOWNGRADE, "AUTH_DOWNGRADE_REJECTED"),
    ],
)
async def test_a_session_error_is_the_sessions_not_a_messages(
    wire: GenesysWire, error: dict[str, Any], code: str
) -> None:
    """GMT handleError: 4006, 4007, 4017 go to the client's error state, no message is failed by
    them. Reported in-band (the runtime ends the session: fail-fast); the message waiting on the
    link ends with it, and is not sent again."""
    t = wm(wire)
    conn = await t.open()
    report = Reports(classifier_of(t), keep=False)
    wire.answer_next("onMessage", error)
    result: list[RawError] = []
    with anyio.fail_after(LIMIT_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(serving, conn, report, result)
            with pytest.raises(OperationError) as info:
                await conn.send_message("hello")
    assert report.codes == [code] and result == report.raws
    assert getattr(info.value.event, "code", None) == code and not info.value.exhausted
    assert len(wire.sent("onMessage")) == 1


# ================================================================== a message left unanswered

# an unanswered message is given up on fast here; the check after it waits on a recorded sleep
UNANSWERED = Keepalive(ping_interval=60.0, ping_timeout=30.0, echo_interval=0.0, open_timeout=0.2)


def with_history(wire: GenesysWire, waits: Waits, client: httpx.AsyncClient) -> WebMessagingTransport:
    """A transport that reads the wire's guest history, its sendCheckAfter wait recorded by ``waits``."""
    classifier = Classifier(load_taxonomy("v2"))
    executor = RetryExecutor(
        classifier,
        Attempts(Endpoints(SystemClock(), CircuitRegistry(SystemClock()))),
        SystemClock(),
        sleep=waits,
    )
    history = GuestHistory(RequestPipeline(client, executor), wire.urls["api"])
    return WebMessagingTransport(
        ctx(),
        url=wire.urls["webmessaging"],
        deployment_id="dep-1",
        keepalive=UNANSWERED,
        executor=executor,
        sleep=waits,
        history=history,
        send_check_after=1.5,
    )


async def _send(t: WebMessagingTransport, text: str) -> Mapping[str, Any] | OperationError:
    conn = await t.open()
    outcome: Mapping[str, Any] | OperationError
    with anyio.fail_after(LIMIT_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(conn.serve, Reports(classifier_of(t)))
            try:
                outcome = await conn.send_message(text)
            except OperationError as failure:
                outcome = failure
            tg.cancel_scope.cancel()
    await conn.close(CloseCode.GOING_AWAY)
    return outcome


async def test_an_unanswered_message_found_in_the_guest_history_is_not_sent_again(
    wire: GenesysWire, http: httpx.AsyncClient
) -> None:
    """The platform stored the message but its echo never came: after sendCheckAfter the daemon reads the
    guest history as GMT reads it (getJwt, then GET /api/v2/webmessaging/messages with the JWT as a bearer,
    page 1 of 25), finds the message by its client id and answers with that entry: sent once."""
    wire.hold("onMessage")
    wire.store_held = True
    waits = Waits()
    answer = await _send(with_history(wire, waits, http), "kept")
    assert isinstance(answer, Mapping) and answer["text"] == "kept"
    (frame,) = wire.sent("onMessage")
    assert answer["metadata"]["customMessageId"] == frame["tracingId"]
    assert waits.delays == [1.5]  # sendCheckAfter, then the look-up
    assert len(wire.sent("getJwt")) == 1
    (read,) = wire.seen("GET", "/api/v2/webmessaging/")
    # the request GMT's WebMessagingApi.getMessages makes (and PY269's get_webmessaging_messages)
    assert (read.path, read.query) == (
        "/api/v2/webmessaging/messages",
        {"pageNumber": ["1"], "pageSize": ["25"]},
    )
    assert (read.auth_scheme, read.auth_principal) == ("bearer", GUEST_JWT)


async def test_an_unanswered_message_not_in_the_history_is_sent_again_once_with_its_client_id(
    wire: GenesysWire, http: httpx.AsyncClient
) -> None:
    """Neither echoed nor in the history: sent again, once, with the same tracingId and message; still
    unanswered and not found, the send ends SendUnconfirmed (it may have arrived), never a third send."""
    wire.hold("onMessage")
    waits = Waits()
    outcome = await _send(with_history(wire, waits, http), "lost")
    assert isinstance(outcome, SendUnconfirmed) and outcome.resent
    first, again = wire.sent("onMessage")
    assert first["tracingId"] == again["tracingId"] == outcome.client_id
    assert first["message"] == again["message"]
    assert waits.delays == [1.5, 1.5]  # looked for after each send
    assert len(wire.seen("GET", "/api/v2/webmessaging/")) == 2
    assert len(wire.sent("getJwt")) == 1  # the JWT kept while it is valid (GMT JwtHandler)


async def test_a_late_echo_answers_the_message_without_a_history_read(
    wire: GenesysWire, http: httpx.AsyncClient
) -> None:
    """The echo came after openTimeout: the check finds it (the echo names the client id as its
    tracingId) and neither reads the history nor sends again."""
    wire.hold("onMessage")
    t = with_history(wire, Waits(), http)
    conn = await t.open()

    async def late(seconds: float) -> None:  # sendCheckAfter: the late echo arrives meanwhile
        (frame,) = wire.sent("onMessage")
        await wire.push(message_echo(frame["tracingId"], "late", "m-late"))
        await wait_until(lambda: frame["tracingId"] in conn._late_echoes)

    t.sleep = late
    with anyio.fail_after(LIMIT_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(conn.serve, Reports(classifier_of(t)))
            answer = await conn.send_message("late")
            tg.cancel_scope.cancel()
    assert answer["id"] == "m-late"
    assert len(wire.sent("onMessage")) == 1 and wire.sent("getJwt") == []
    await conn.close(CloseCode.GOING_AWAY)


async def test_a_history_that_cannot_be_read_is_no_replay_and_no_resend(
    wire: GenesysWire, http: httpx.AsyncClient
) -> None:
    """A history read the platform refuses (400, not retried): a resync gets None (told "failed"), and an
    unanswered message is not sent again (the check could not tell: SendUnconfirmed, sent once)."""
    wire.history_status = 400
    t = with_history(wire, Waits(), http)
    conn = await t.open()
    with anyio.fail_after(LIMIT_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(conn.serve, Reports(classifier_of(t)))
            assert await conn.missed_messages() is None
            wire.hold("onMessage")
            with pytest.raises(SendUnconfirmed) as info:
                await conn.send_message("unknown")
            tg.cancel_scope.cancel()
    assert not info.value.resent and len(wire.sent("onMessage")) == 1
    await conn.close(CloseCode.GOING_AWAY)


async def test_the_history_is_read_back_to_the_newest_message_the_session_delivered(
    wire: GenesysWire, http: httpx.AsyncClient
) -> None:
    """After a reconnection the messages missed are those the history holds above the newest one the
    session delivered, oldest first; each only once, however often the history is read."""
    t = with_history(wire, Waits(), http)
    conn = await t.open()
    heard = message_echo("x", "heard", "m-heard")["body"]
    wire.history = [message_echo("x", f"missed {i}", f"m-{i}")["body"] for i in (2, 1, 0)] + [heard]
    with anyio.fail_after(LIMIT_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(conn.serve, Reports(classifier_of(t)))
            assert t.saw(heard)  # delivered live before the link was lost
            missed = await conn.missed_messages()
            again = await conn.missed_messages()
            tg.cancel_scope.cancel()
    assert missed is not None and [m["id"] for m in missed] == ["m-0", "m-1", "m-2"]
    assert again == []  # never twice
    await conn.close(CloseCode.GOING_AWAY)


async def test_without_a_history_an_unanswered_message_is_never_sent_again(wire: GenesysWire) -> None:
    wire.hold("onMessage")
    t = wm(wire, keepalive=UNANSWERED, sleep=Waits())
    outcome = await _send(t, "once")
    assert isinstance(outcome, SendUnconfirmed) and not outcome.resent
    assert len(wire.sent("onMessage")) == 1


# ================================================================== point 7: the echo health check


async def _serve_with_timers(
    wire: GenesysWire, keepalive: Keepalive, **kwargs: Any
) -> tuple[FakeTimers, WebMessagingConnection, Reports, list[RawError]]:
    timers = FakeTimers()
    t = wm(wire, keepalive=keepalive, timers=timers, **kwargs)
    conn = await t.open()
    return timers, conn, Reports(classifier_of(t)), []


async def test_the_echo_goes_out_only_after_echo_interval_without_inbound_frames(wire: GenesysWire) -> None:
    pushed: list[Mapping[str, Any]] = []
    timers, conn, report, result = await _serve_with_timers(wire, health(30.0), on_message=pushed.append)
    start = timers.clock.monotonic()
    with anyio.fail_after(LIMIT_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(serving, conn, report, result)
            await wait_until(lambda: timers.deadlines() == [start + 30.0])
            # a frame every 20 s (an agent's message): the link is never quiet for 30 s, and each
            # time the check wakes it finds the next echo 30 s after the last frame
            for n, frame_at in enumerate((20.0, 40.0), start=1):
                timers.advance(frame_at - (timers.clock.monotonic() - start))
                await wire.push(message_echo("pushed", f"agent message {n}"))
                await wait_until(lambda n=n: len(pushed) == n)  # type: ignore[misc]
                timers.advance(10.0)  # the check wakes where it had planned the echo
                await wait_until(lambda at=frame_at: timers.deadlines() == [start + at + 30.0])  # type: ignore[misc]
                assert wire.sent("echo") == []
            # then 30 s of silence: one echo, GMT's EchoRequest
            timers.advance(20.0)
            await wait_until(lambda: len(wire.sent("echo")) == 1)
            (echo,) = wire.sent("echo")
            assert set(echo) == GMT_ECHO and echo["tracingId"] == HEALTH_CHECK_ID
            assert echo["message"] == {"type": "Text", "text": "ping"}
            tg.cancel_scope.cancel()
    assert result == [] and report.raws == []
    await conn.close(CloseCode.GOING_AWAY)


async def test_echoes_are_at_least_30_seconds_apart(wire: GenesysWire) -> None:
    """GMT HealthCheckProvider: HEALTH_CHECK_COOL_DOWN_MILLISECONDS = 30000. With echoInterval 5 the
    first echo goes out after 5 quiet seconds, the next not before 30 s after it."""
    timers, conn, report, result = await _serve_with_timers(wire, health(5.0))
    start = timers.clock.monotonic()
    with anyio.fail_after(LIMIT_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(serving, conn, report, result)
            await wait_until(lambda: timers.deadlines() == [start + 5.0])
            timers.advance(5.0)
            await wait_until(lambda: len(wire.sent("echo")) == 1)
            # answered at once: next due 5 s after that answer, but the cool-down holds it to +30 s
            await wait_until(lambda: timers.deadlines() == [start + 35.0])
            timers.advance(29.9)
            assert timers.deadlines() == [start + 35.0]  # nothing woke: no echo can leave yet
            timers.advance(0.1)
            await wait_until(lambda: len(wire.sent("echo")) == 2)
            tg.cancel_scope.cancel()
    assert result == []
    await conn.close(CloseCode.GOING_AWAY)


@pytest.mark.parametrize("answer", [TOO_MANY_REQUESTS, UNKNOWN_ERROR], ids=["4029", "5000"])
async def test_an_error_reply_to_the_echo_is_not_a_liveness_failure(
    wire: GenesysWire, answer: dict[str, Any]
) -> None:
    """The echo answered by an error (no tracingId, as the platform's errors come): the platform read
    and wrote, so the link is alive. The error is reported (operation-scoped: nothing ends)."""
    timers, conn, report, result = await _serve_with_timers(wire, health(30.0))
    wire.answer_next("echo", answer)
    start = timers.clock.monotonic()
    with anyio.fail_after(LIMIT_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(serving, conn, report, result)
            await wait_until(lambda: timers.deadlines() == [start + 30.0])
            timers.advance(30.0)
            await wait_until(lambda: len(report.raws) == 1)
            # no answer-wait timer left running: the next echo is simply due 30 s on
            await wait_until(lambda: timers.deadlines() == [start + 60.0])
            timers.advance(10.0)  # echoTimeout passes: no timer was waiting for an answer
            assert timers.deadlines() == [start + 60.0] and result == []
            tg.cancel_scope.cancel()
    assert report.codes in (["RATE_LIMITED"], ["SERVER_ERROR"])
    await conn.close(CloseCode.GOING_AWAY)


async def test_an_unanswered_echo_aborts_the_link(wire: GenesysWire) -> None:
    timers, conn, report, result = await _serve_with_timers(wire, health(30.0))
    wire.hold("echo")
    start = timers.clock.monotonic()
    with anyio.fail_after(LIMIT_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(serving, conn, report, result)
            await wait_until(lambda: timers.deadlines() == [start + 30.0])
            timers.advance(30.0)
            await wait_until(lambda: timers.deadlines() == [start + 40.0])  # waiting for any frame
            timers.advance(10.0)
    (raw,) = result
    assert raw.close_code == 1006 and classifier_of(conn._t).classify(raw).code == "ABNORMAL_CLOSURE"


async def test_echo_interval_zero_disables_the_health_check(wire: GenesysWire) -> None:
    pushed: list[Mapping[str, Any]] = []
    timers, conn, report, result = await _serve_with_timers(wire, QUIET, on_message=pushed.append)
    with anyio.fail_after(LIMIT_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(serving, conn, report, result)
            await wire.push(message_echo("pushed", "agent message"))
            await wait_until(lambda: len(pushed) == 1)  # serving
            assert timers.sleeping == 0  # no health check timer at all
            timers.advance(3600.0)
            await wire.push(message_echo("pushed", "another"))
            await wait_until(lambda: len(pushed) == 2)
            tg.cancel_scope.cancel()
    assert wire.sent("echo") == []
    await conn.close(CloseCode.GOING_AWAY)


# ================================================================== point 7: closeSession


async def test_close_session_carries_a_tracing_id(wire: GenesysWire) -> None:
    """GMT CloseSessionRequest.kt: token, closeAllConnections, a tracingId (a fresh UUID), action."""
    conn = await wm(wire).open()
    await conn.close(CloseCode.NORMAL_CLOSURE)
    await wait_until(lambda: len(wire.sent("closeSession")) == 1)
    (frame,) = wire.sent("closeSession")
    assert set(frame) == GMT_CLOSE_SESSION and frame["closeAllConnections"] is True
    uuid.UUID(frame["tracingId"])
    configure = wire.sent("configureSession")[0]
    assert frame["token"] == configure["token"] and frame["tracingId"] != configure["tracingId"]
