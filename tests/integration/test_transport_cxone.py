"""The CXone Agent Session transport against the CXone simulator over loopback (docs/runtime.md).

A real :class:`RequestPipeline` (httpx, taxonomy v1, circuits, the CXone token cache with
:class:`CxoneLogin`, the API found by :class:`CxoneApi`) drives the simulator. The pipeline's backoff and the transport's
max-age wait go through one recording fake ``sleep``, so no test waits for a timer and no
test asserts on a timing. Server-side effects are awaited with ``wait_until`` (a protocol
wait); the one real-time wait is the watchdog test's 0.3 s watchdog on a black-holed poll.
"""

from __future__ import annotations

import functools
import json
import random
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx
import pytest

from machines.registry import CircuitRegistry, Endpoints
from supervisor.attempts import Attempts
from supervisor.boundary import SessionContext
from supervisor.clock import FakeClock, SystemClock
from supervisor.config import Secret
from supervisor.errors import OperationError
from supervisor.rest.cxone_auth import CxoneApi, CxoneLogin
from supervisor.rest.executor import RetryExecutor
from supervisor.rest.pipeline import RequestPipeline
from supervisor.rest.tokens import TokenCache
from supervisor.sim.cxone import CxoneSimConfig, CxoneSimulator
from supervisor.sim.cxone.state import EndReason
from supervisor.sim.faults import Fault, FaultKind
from supervisor.taxonomy import Channel, Classifier, Platform, RawError, SdkErrorEvent, load_taxonomy
from supervisor.transports.cxone import AgentSessionConnection, AgentSessionTransport
from supervisor.vocabulary import CloseCode
from tests.harness.waits import wait_until

pytestmark = [
    pytest.mark.integration,
    pytest.mark.anyio,
    pytest.mark.timeout(10),
    # the simulator on a fake clock of its own (the client's token cache has another)
    pytest.mark.cxone_sim(seed=7, fake_clock=True),
]

POLL = "/inContactAPI/services/v{N}.0/agent-sessions/{sessionId}/get-next-event"
START = "/inContactAPI/services/v{N}.0/agent-sessions"
ONE = "/inContactAPI/services/v{N}.0/agent-sessions/{sessionId}"
AGENT = "100001"


@dataclass
class Rig:
    """A simulator, the client-side pipeline, and what the client sent and received."""

    sim: CxoneSimulator
    pipeline: RequestPipeline
    tokens: TokenCache
    client_clock: FakeClock
    classifier: Classifier
    sleeps: list[float] = field(default_factory=list)
    # (method, session id or "", ?timeout=, bearer) of every API request the client sent
    sent: list[tuple[str, str, str | None, str]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    on_send: Callable[[httpx.Request], None] | None = None

    def transport(
        self, api_url: str | None = None, api_version: str = "v23.0", **overrides: Any
    ) -> AgentSessionTransport:
        ctx = SessionContext("cx-1", Platform.CXONE, Channel.AGENT_SESSION)
        # without apiUrl: discovered (the id_token's tenant, then cxone-configuration's api_endpoint)
        discovery = RequestPipeline(self.pipeline.client, self.pipeline.executor)
        api = CxoneApi(self.tokens, discovery, api_url=api_url, api_version=api_version)
        kwargs: dict[str, Any] = {
            "pipeline": self.pipeline,
            "api": api,
            "station_phone_number": "5551234",
            "poll_timeout": 0,
            "poll_watchdog": 60.0,  # > every poll_timeout used here; never reached
            "sleep": self.fake_sleep,
            "on_events": self.events.extend,
        }
        kwargs.update(overrides)
        return AgentSessionTransport(ctx, **kwargs)

    async def fake_sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        await anyio.lowlevel.checkpoint()

    def polled_ids(self) -> list[str]:
        return [sid for method, sid, _, _ in self.sent if method == "GET"]

    def handle(self, start_id: str) -> Any:
        handle = self.sim.state.handle(start_id)
        assert handle is not None
        return handle

    def types(self) -> list[str]:
        return [str(e.get("Type")) for e in self.events]


def _delivered(rig: Rig, kind: str, n: int) -> bool:
    return rig.types().count(kind) == n


def _session_id_of(path: str) -> str:
    parts = path.split("/agent-sessions/", 1)
    return parts[1].split("/", 1)[0] if len(parts) == 2 else ""


@pytest.fixture
def version() -> str:
    return "v1"


@pytest.fixture
async def rig(cxone_sim: CxoneSimulator, version: str) -> AsyncIterator[Rig]:
    holder: list[Rig] = []

    async def on_request(request: httpx.Request) -> None:
        if "/agent-sessions" not in request.url.path:
            return
        r = holder[0]
        bearer = request.headers.get("Authorization", "")
        r.sent.append(
            (request.method, _session_id_of(request.url.path), request.url.params.get("timeout"), bearer)
        )
        if r.on_send is not None:
            r.on_send(request)

    client_clock = FakeClock(start=1000.0)
    async with httpx.AsyncClient(timeout=5.0, event_hooks={"request": [on_request]}) as http:
        classifier = Classifier(load_taxonomy(version))
        source = CxoneLogin(
            http, cxone_sim.urls["auth"], "app@vendor", Secret("s3cret"), "agent1", Secret("pw")
        )
        tokens = TokenCache(source, client_clock, early_refresh_s=0.0, platform=Platform.CXONE)
        rig = Rig(cxone_sim, None, tokens, client_clock, classifier)  # type: ignore[arg-type]
        executor = RetryExecutor(
            classifier,
            Attempts(Endpoints(SystemClock(), CircuitRegistry(SystemClock()))),
            SystemClock(),
            rng=random.Random(7),
            sleep=rig.fake_sleep,
        )
        rig.pipeline = RequestPipeline(http, executor, tokens=tokens)
        holder.append(rig)
        yield rig


@dataclass
class Served:
    raw: RawError | None = None
    error: BaseException | None = None
    done: bool = False
    # what the transport reported in-band (a resync is the only thing CXone reports)
    reported: list[SdkErrorEvent] = field(default_factory=list)

    async def report(self, raw: RawError | SdkErrorEvent) -> bool:
        """The runtime's answer (session_runner._report): go on unless the event ends the connection."""
        assert isinstance(raw, SdkErrorEvent), f"CXone reports only events it named: {raw!r}"
        self.reported.append(raw)
        return not (raw.fail_fast or raw.reconnect or raw.graceful)


async def _serve_until_done(conn: AgentSessionConnection, outcome: Served) -> None:
    try:
        outcome.raw = await conn.serve(outcome.report)
    except Exception as exc:  # the test inspects it
        outcome.error = exc
    outcome.done = True


async def _serve(conn: AgentSessionConnection, during: Callable[[], Any] | None = None) -> Served:
    """Run serve() to its end; ``during`` (sync or async) runs once serve is under way."""
    outcome = Served()
    async with anyio.create_task_group() as tg:
        tg.start_soon(_serve_until_done, conn, outcome)
        if during is not None:
            result = during()
            if hasattr(result, "__await__"):
                await result
        await wait_until(lambda: outcome.done)
    return outcome


def _event(outcome: Served) -> SdkErrorEvent:
    assert isinstance(outcome.error, OperationError), outcome
    event = outcome.error.event
    assert isinstance(event, SdkErrorEvent)
    return event


# --------------------------------------------------------------------------- open


async def test_open_starts_a_session_and_runs_the_first_poll(rig: Rig) -> None:
    transport = rig.transport()
    conn = await transport.open()

    start_id = rig.sim.state.sessions()[0].key
    assert conn.session_response == {"sessionId": start_id, "agentId": AGENT, "status": "Unavailable"}
    assert (
        rig.classifier.validate_response(
            conn.session_response,
            platform=Platform.CXONE,
            channel=Channel.AGENT_SESSION,
            kind=transport.response_kind,
        )
        is None
    )
    handle = rig.handle(start_id)
    # the first 200 rolled the id: the connection reports the one to poll next
    assert conn.learned.platform_session_id == handle.current_id != start_id
    assert conn.learned.agent_id == AGENT
    assert rig.types() == ["AgentSessionStart", "AgentState"]
    assert rig.sim.recorder.request_count("POST", START, 202) == 1
    assert rig.sim.recorder.request_count("GET", POLL, 200) == 1
    assert rig.polled_ids() == [start_id]
    # the server holds a poll for up to poll_timeout: the read timeout must exceed it
    assert (
        transport.poll_http_timeout.read is not None
        and transport.poll_http_timeout.read > transport.poll_timeout
    )


async def test_explicit_api_base_is_used(rig: Rig) -> None:
    conn = await rig.transport(api_url=rig.sim.urls["api"] + "/inContactAPI", api_version="v31.0").open()
    assert conn.session_response["sessionId"]
    assert rig.sim.recorder.request_count("POST", START, 202) == 1


async def test_start_answer_without_session_id_is_incomplete(rig: Rig) -> None:
    rig.sim.faults.inject(
        Fault(
            kind=FaultKind.MISSING_FIELDS, endpoint="POST */agent-sessions", params={"fields": ["sessionId"]}
        )
    )
    transport = rig.transport()
    conn = await transport.open()

    assert conn.session_response == {"sessionId": None, "agentId": AGENT}  # from the token: no poll
    problem = rig.classifier.validate_response(
        conn.session_response,
        platform=Platform.CXONE,
        channel=Channel.AGENT_SESSION,
        kind=transport.response_kind,
    )
    assert problem is not None and problem.code == "INCOMPLETE_RESPONSE"
    assert problem.details == "Missing required fields: sessionId"
    assert rig.polled_ids() == []  # nothing to poll without an anchor
    assert conn.learned.platform_session_id is None


# --------------------------------------------------------------------------- polling


async def test_rolling_session_id_is_followed_across_polls(rig: Rig) -> None:
    transport = rig.transport(poll_timeout=10)
    conn = await transport.open()
    start_id = str(conn.session_response["sessionId"])

    async def three_contacts_then_end() -> None:
        for n in range(1, 4):
            rig.sim.push_contact(agent_id=AGENT)  # wakes the held poll
            await wait_until(functools.partial(_delivered, rig, "CallContactEvent", n))
        rig.sim.end_session(agent_id=AGENT)

    outcome = await _serve(conn, three_contacts_then_end)

    assert _event(outcome).code == "AGENT_SESSION_ENDED"
    handle = rig.handle(start_id)
    # every 200 handed out the next id and the next poll used it (docs/platforms.md, "NICE CXone")
    chain = [*handle.stale, handle.current_id]
    polled = rig.polled_ids()
    assert len(chain) >= 6  # start, first poll, three contacts, the final AgentSessionEnd
    assert polled == chain[: len(polled)]
    # AgentSessionEnd ended it: the id its answer handed out is never polled (the SDK stops)
    assert polled == chain[:-1] and conn.learned.platform_session_id == handle.current_id
    assert rig.types().count("AgentSessionStart") == 1  # never a replay
    assert rig.types()[-1] == "AgentSessionEnd"


async def test_idle_poll_with_timeout_zero_is_an_empty_poll(rig: Rig) -> None:
    transport = rig.transport(poll_timeout=0)
    conn = await transport.open()
    held_id = conn.learned.platform_session_id
    delivered = len(rig.events)

    async def idle_then_end() -> None:
        await wait_until(lambda: rig.sim.recorder.request_count("GET", POLL, 304) >= 3)
        assert conn.learned.platform_session_id == held_id  # a 304 carries no new id
        assert len(rig.events) == delivered
        rig.sim.end_session(agent_id=AGENT)

    outcome = await _serve(conn, idle_then_end)

    assert _event(outcome).code == "AGENT_SESSION_ENDED"
    assert rig.sleeps == []  # no max-age: polled again at once
    assert {t for m, _, t, _ in rig.sent if m == "GET"} == {"0"}


@pytest.mark.cxone_sim(CxoneSimConfig(max_age_s=2))
async def test_cache_control_max_age_spaces_empty_polls(rig: Rig) -> None:
    conn = await rig.transport(poll_timeout=0).open()

    async def idle_then_end() -> None:
        await wait_until(lambda: len(rig.sleeps) >= 3)
        rig.sim.end_session(agent_id=AGENT)

    outcome = await _serve(conn, idle_then_end)

    assert _event(outcome).code == "AGENT_SESSION_ENDED"
    assert rig.sleeps and set(rig.sleeps) == {2.0}  # RFC 9111 section 5.2.2.1, seed section 2
    # every re-poll after a 304 waited first; none after a 200 (open's poll, AgentSessionEnd)
    assert rig.sim.recorder.request_count("GET", POLL, 304) == len(rig.sleeps)


async def test_platform_end_is_the_agent_session_end_event(rig: Rig) -> None:
    """AgentSessionEnd ends the session as NICE's SDK takes it (cxone-get-next-adapter.js stops
    polling): AGENT_SESSION_ENDED named from the event, and no poll after it (no vendor source
    shows what such a poll answers)."""
    transport = rig.transport(poll_timeout=30)
    conn = await transport.open()
    rig.sim.end_session(agent_id=AGENT)

    outcome = await _serve(conn)

    event = _event(outcome)
    assert event.code == "AGENT_SESSION_ENDED" and event.raw_status == 200
    assert event.taxonomy_class.value == "PERMANENT" and event.fail_fast
    assert rig.types()[-1] == "AgentSessionEnd"
    polls = [t for m, _, t, _ in rig.sent if m == "GET"]
    assert polls[-1] == "30"  # the poll that delivered it; none followed
    assert rig.sim.recorder.request_count("GET", POLL, 409) == 0
    await conn.close(CloseCode.NORMAL_CLOSURE)
    assert rig.sim.recorder.request_count("DELETE", ONE) == 0  # already ended by the platform


@pytest.mark.cxone_sim(CxoneSimConfig(ended_poll_status=404))
async def test_the_end_does_not_depend_on_what_a_later_poll_answers(rig: Rig) -> None:
    conn = await rig.transport(poll_timeout=30).open()
    rig.sim.end_session(agent_id=AGENT)
    assert _event(await _serve(conn)).code == "AGENT_SESSION_ENDED"


async def test_start_join_and_end_send_nice_sdk_json_bodies(rig: Rig) -> None:
    """acd-session-manager.js: start {stationId, stationPhoneNumber, asAgentId?}, join {asAgentId},
    DELETE {forceLogoff, endContacts, ignorePersonalQueue}: JSON bodies, no query parameters."""
    bodies: list[tuple[str, str, object]] = []

    def keep(request: httpx.Request) -> None:
        content = request.content
        bodies.append((request.method, request.url.query.decode(), json.loads(content) if content else None))

    rig.on_send = keep
    conn = await rig.transport().open()
    await conn.close(CloseCode.NORMAL_CLOSURE)
    start = next(b for m, q, b in bodies if m == "POST")
    assert start == {"stationId": "", "stationPhoneNumber": "5551234"}  # no agent named: no asAgentId
    assert all(q in ("", "timeout=0") or q.startswith("timeout=") for _, q, _ in bodies)
    end = next(b for m, _, b in bodies if m == "DELETE")
    assert end == {"forceLogoff": False, "endContacts": False, "ignorePersonalQueue": False}
    session = rig.sim.state.sessions()[0]
    assert session.station_phone == "5551234" and session.agent_id == AGENT


async def test_silently_ended_session_answers_409(rig: Rig) -> None:
    conn = await rig.transport().open()
    rig.sim.faults.inject(Fault(kind=FaultKind.SESSION_ENDED, endpoint="*get-next-event"))

    outcome = await _serve(conn)

    assert _event(outcome).code == "AGENT_SESSION_ENDED"
    assert "AgentSessionEnd" not in rig.types()


@pytest.mark.parametrize("how", ["stale_session fault", "old id"])
async def test_pinned_v1_ends_the_session_on_a_replay(rig: Rig, how: str) -> None:
    """Taxonomy v1 (kept byte-identical for configurations that pin it) ends the session on the
    platform's replay, as v1 documented: SESSION_ID_MISMATCH."""
    transport = rig.transport()
    conn = await transport.open()
    start_id = str(conn.session_response["sessionId"])
    if how == "old id":
        conn.session_id = start_id  # superseded by the first poll
    else:
        rig.sim.faults.inject(Fault(kind=FaultKind.STALE_SESSION, endpoint="*get-next-event", count=1))
    delivered = len(rig.events)

    outcome = await _serve(conn)

    event = _event(outcome)
    assert event.code == "SESSION_ID_MISMATCH" and event.taxonomy_class.value == "STATE_CORRUPTING"
    assert event.taxonomy_version == "v1"
    assert isinstance(outcome.error, OperationError) and outcome.error.published  # reported once
    assert [e.code for e in outcome.reported] == ["SESSION_ID_MISMATCH"]
    assert len(rig.events) == delivered  # the replayed snapshot is not passed on as news
    # the connection follows the server's newest id (what close() must DELETE)
    assert conn.learned.platform_session_id == rig.handle(start_id).current_id


@pytest.mark.parametrize("version", ["v2"])
@pytest.mark.parametrize("how", ["stale_session fault", "old id"])
async def test_replay_for_the_sessions_own_agent_is_resynced_and_goes_on(rig: Rig, how: str) -> None:
    """A poll on an outdated sessionId gets AgentSessionStart plus a snapshot and a new id (the
    platform's own recovery): SESSION_RESYNCED is reported, the new id taken, the session goes on,
    as NICE's SDK goes on (get-next-event-provider.js stores response.sessionId)."""
    transport = rig.transport(poll_timeout=10)
    conn = await transport.open()
    start_id = str(conn.session_response["sessionId"])
    if how == "old id":
        conn.session_id = start_id  # superseded by the first poll: what a lost answer leaves
    else:
        rig.sim.faults.inject(Fault(kind=FaultKind.STALE_SESSION, endpoint="*get-next-event", count=1))

    async def after_the_resync_a_contact_then_the_end() -> None:
        await wait_until(lambda: rig.types().count("AgentSessionStart") == 2)
        rig.sim.push_contact(agent_id=AGENT)
        await wait_until(functools.partial(_delivered, rig, "CallContactEvent", 1))
        rig.sim.end_session(agent_id=AGENT)

    outcome = await _serve(conn, after_the_resync_a_contact_then_the_end)

    assert _event(outcome).code == "AGENT_SESSION_ENDED"  # it went on until the platform ended it
    (resynced,) = outcome.reported
    assert resynced.code == "SESSION_RESYNCED" and resynced.taxonomy_class.value == "TRANSIENT"
    assert not resynced.retryable and not resynced.fail_fast
    handle = rig.handle(start_id)
    chain = [*handle.stale, handle.current_id]
    polled = rig.polled_ids()
    # the same platform session throughout: after the replay every poll followed the new ids, and
    # the poll that got AgentSessionEnd used the id handed out just before it
    assert rig.sim.recorder.request_count("POST", START) == 1
    assert polled[-1] == chain[-2] and conn.learned.platform_session_id == chain[-1]
    assert rig.types().count("AgentSessionStart") == 2  # the snapshot was delivered, as the SDK takes it


@pytest.mark.parametrize("version", ["v2"])
async def test_the_platforms_snapshots_go_to_the_snapshot_sink_and_news_to_the_event_sink(rig: Rig) -> None:
    """The first poll after a start (AgentSessionStart, the agent's state) and the batch of a resync
    are the platform's snapshot (NICE cxone-get-next-adapter.js): they go to ``on_snapshot``; what
    the platform sends afterwards (a contact) is news, on ``on_events``."""
    snapshots: list[list[str]] = []
    transport = rig.transport(
        poll_timeout=10, on_snapshot=lambda batch: snapshots.append([str(e.get("Type")) for e in batch])
    )
    conn = await transport.open()
    assert snapshots and snapshots[0][0] == "AgentSessionStart" and rig.events == []
    rig.sim.faults.inject(Fault(kind=FaultKind.STALE_SESSION, endpoint="*get-next-event", count=1))

    async def after_the_resync_a_contact_then_the_end() -> None:
        await wait_until(lambda: len(snapshots) == 2)
        rig.sim.push_contact(agent_id=AGENT)
        await wait_until(functools.partial(_delivered, rig, "CallContactEvent", 1))
        rig.sim.end_session(agent_id=AGENT)

    outcome = await _serve(conn, after_the_resync_a_contact_then_the_end)

    assert _event(outcome).code == "AGENT_SESSION_ENDED"
    assert snapshots[1][0] == "AgentSessionStart"  # the resync's replay: a snapshot again
    assert "AgentSessionStart" not in rig.types() and "CallContactEvent" in rig.types()


@pytest.mark.parametrize("version", ["v1", "v2"])
async def test_session_start_naming_another_agent_is_session_id_mismatch(rig: Rig) -> None:
    """What the platform's recovery cannot explain: an AgentSessionStart for another agent."""
    conn = await rig.transport(poll_timeout=10).open()
    delivered = len(rig.events)

    outcome = await _serve(
        conn, lambda: rig.sim.push_event({"Type": "AgentSessionStart", "AgentId": "999999"}, agent_id=AGENT)
    )

    event = _event(outcome)
    assert event.code == "SESSION_ID_MISMATCH" and event.fail_fast
    assert outcome.reported == []  # raised, not reported: nothing to go on with
    assert len(rig.events) == delivered


async def test_poll_without_session_id_is_incomplete_response(rig: Rig) -> None:
    transport = rig.transport(poll_timeout=10)
    conn = await transport.open()
    held_id = conn.learned.platform_session_id
    rig.sim.faults.inject(
        Fault(
            kind=FaultKind.MISSING_FIELDS,
            endpoint="*get-next-event",
            params={"fields": ["sessionId"]},
            count=1,
        )
    )

    outcome = await _serve(conn, lambda: rig.sim.push_contact(agent_id=AGENT))

    event = _event(outcome)
    assert event.code == "INCOMPLETE_RESPONSE" and event.trigger is not None
    assert event.details is not None and "sessionId" in event.details
    assert conn.learned.platform_session_id == held_id  # nothing to follow


async def test_malformed_poll_body_is_malformed_response(rig: Rig) -> None:
    conn = await rig.transport(poll_timeout=10).open()
    rig.sim.faults.inject(Fault(kind=FaultKind.MALFORMED_BODY, endpoint="*get-next-event", count=1))

    outcome = await _serve(conn, lambda: rig.sim.push_contact(agent_id=AGENT))

    assert _event(outcome).code == "MALFORMED_RESPONSE"


# --------------------------------------------------------------------------- auth


async def test_revoked_token_is_oauth_token_invalid(rig: Rig) -> None:
    conn = await rig.transport().open()
    rig.sim.faults.inject(Fault(kind=FaultKind.TOKEN_REVOKE))

    outcome = await _serve(conn)

    event = _event(outcome)
    assert event.code == "OAUTH_TOKEN_INVALID" and event.raw_status == 401
    assert event.trigger is not None and event.trigger.value == "OAUTH_TOKEN_INVALID"
    assert rig.sim.recorder.tokens()["revoked"] == 1
    assert rig.sim.recorder.tokens()["refreshed"] == 0  # a fail-fast trigger is never retried
    token = rig.tokens.current
    assert token is not None and token.access.reveal() not in repr(event) + str(outcome.error)


async def test_token_expiring_mid_poll_is_refreshed_and_replayed(rig: Rig) -> None:
    transport = rig.transport()
    conn = await transport.open()
    start_id = str(conn.session_response["sessionId"])
    held_id = conn.learned.platform_session_id
    old = rig.tokens.current
    assert old is not None
    rig.client_clock.set(old.expires_at - 1.0)  # still valid when the next poll takes it
    armed = [True]

    def expire_in_flight(request: httpx.Request) -> None:
        # seed edge case 3: the token expires during the call, by our clock and the server's
        if armed[0] and request.method == "GET":
            armed[0] = False
            rig.client_clock.advance(2.0)
            rig.sim.faults.inject(Fault(kind=FaultKind.TOKEN_EXPIRE))

    rig.on_send = expire_in_flight

    async def after_refresh_end() -> None:
        await wait_until(lambda: rig.sim.recorder.tokens()["refreshed"] == 1)
        await wait_until(lambda: rig.sim.recorder.request_count("GET", POLL, 304) >= 1)
        rig.sim.end_session(agent_id=AGENT)

    outcome = await _serve(conn, after_refresh_end)

    assert _event(outcome).code == "AGENT_SESSION_ENDED"  # the session went on until ended
    new = rig.tokens.current
    assert new is not None and new is not old
    polls = [(sid, bearer) for m, sid, _, bearer in rig.sent if m == "GET"]
    # polls[0] is open()'s; polls[1] got the 401; polls[2] is the replay with the new token
    assert polls[1] == (held_id, old.authorization)
    assert polls[2] == (held_id, new.authorization)
    assert rig.sim.recorder.request_count("GET", POLL, 401) == 1
    assert rig.sim.recorder.tokens()["expired"] == 1
    assert rig.sim.recorder.request_count("POST", START) == 1  # the same session throughout
    assert rig.handle(start_id).session.ended is EndReason.FORCED


async def test_server_side_expiry_unknown_to_our_clock_fails_fast(rig: Rig) -> None:
    # by the 401 rule (docs/taxonomy.md) only a token expired *by our clock* is refreshed; otherwise a 401
    # invalid_token is the seed's OAUTH_TOKEN_INVALID trigger (even "Token expired")
    conn = await rig.transport().open()
    rig.sim.faults.inject(Fault(kind=FaultKind.TOKEN_EXPIRE))

    outcome = await _serve(conn)

    assert _event(outcome).code == "OAUTH_TOKEN_INVALID"
    assert rig.sim.recorder.tokens()["refreshed"] == 0


# --------------------------------------------------------------------------- throttling


async def test_rate_limit_storm_honours_retry_after(rig: Rig) -> None:
    conn = await rig.transport().open()
    rig.sim.faults.inject(
        Fault(
            kind=FaultKind.RATE_LIMIT_STORM, endpoint="*get-next-event", count=2, params={"retry_after": "3"}
        )
    )

    async def until_recovered() -> None:
        await wait_until(lambda: rig.sim.recorder.request_count("GET", POLL, 304) >= 1)
        rig.sim.end_session(agent_id=AGENT)

    outcome = await _serve(conn, until_recovered)

    assert _event(outcome).code == "AGENT_SESSION_ENDED"  # the storm passed; the session went on
    assert rig.sim.recorder.request_count("GET", POLL, 429) == 2
    assert len(rig.sleeps) == 2 and all(s >= 3.0 for s in rig.sleeps)  # Retry-After is the minimum


async def test_queue_full_is_the_fail_fast_trigger(rig: Rig) -> None:
    conn = await rig.transport().open()
    rig.sim.faults.inject(Fault(kind=FaultKind.QUEUE_FULL, endpoint="*get-next-event"))

    outcome = await _serve(conn)

    event = _event(outcome)
    assert event.code == "QUEUE_FULL" and event.trigger is not None and event.trigger.value == "QUEUE_FULL"
    assert rig.sleeps == []  # never retried
    assert rig.sim.recorder.request_count("GET", POLL, 429) == 1


# --------------------------------------------------------------------------- watchdog and close


async def test_watchdog_abandons_a_black_holed_poll(rig: Rig) -> None:
    transport = rig.transport(poll_timeout=0, poll_watchdog=0.3)
    conn = await transport.open()
    rig.sim.faults.inject(Fault(kind=FaultKind.BLACKHOLE, endpoint="*get-next-event"))

    outcome = await _serve(conn)

    assert outcome.error is None and outcome.raw is not None
    assert outcome.raw.exception == "TimeoutError" and outcome.raw.method == "GET"
    event = rig.classifier.classify(outcome.raw)
    assert event.code == "NETWORK_TIMEOUT" and event.taxonomy_class.value == "TRANSIENT"
    assert "Bearer" not in repr(outcome.raw)  # never a token in error text
    # the runtime then closes the connection: the DELETE is not black-holed
    await conn.close(CloseCode.GOING_AWAY)
    assert rig.sim.recorder.request_count("DELETE", ONE, 202) == 1


async def test_close_deletes_the_platform_session_once(rig: Rig) -> None:
    transport = rig.transport()
    conn = await transport.open()
    start_id = str(conn.session_response["sessionId"])

    await conn.close(CloseCode.NORMAL_CLOSURE)
    await conn.close(CloseCode.NORMAL_CLOSURE)

    assert rig.sim.recorder.request_count("DELETE", ONE, 202) == 1
    deletes = [sid for m, sid, _, _ in rig.sent if m == "DELETE"]
    assert deletes == [conn.learned.platform_session_id]  # the newest id of the chain
    assert rig.handle(start_id).session.ended is EndReason.CLIENT


async def test_close_never_raises(rig: Rig) -> None:
    conn = await rig.transport().open()
    rig.sim.faults.inject(Fault(kind=FaultKind.SESSION_ENDED))  # every call now answers 409

    await conn.close(CloseCode.GOING_AWAY)

    assert rig.sim.recorder.request_count("DELETE", ONE, 409) == 1


async def test_reopen_after_close_starts_a_fresh_session(rig: Rig) -> None:
    # the runtime's reconnect path: close(1001), then open() again on the same transport
    transport = rig.transport()
    first = await transport.open()
    await first.close(CloseCode.GOING_AWAY)
    second = await transport.open()

    assert second.session_response["sessionId"] != first.session_response["sessionId"]
    assert second.learned.platform_session_id == second.session_id
    assert rig.sim.recorder.request_count("POST", START, 202) == 2
    assert rig.sim.recorder.request_count("DELETE", ONE, 202) == 1


# --------------------------------------------------------------------------- handover


async def test_abandon_leaves_the_agent_session_logged_in_and_a_new_transport_polls_on_with_its_id(
    rig: Rig,
) -> None:
    """A handover: abandon() sends nothing (no DELETE); the next daemon's transport, given the rolling
    id, polls on with it and makes no start and no join (NICE core-sdk: a kept ``acd_session_id`` is
    polled on)."""
    first = await rig.transport().open()
    start_id = str(first.session_response["sessionId"])
    kept = first.learned.platform_session_id
    assert kept is not None
    sent = len(rig.sent)
    await first.abandon()
    await first.close(CloseCode.GOING_AWAY)  # a close after the abandon changes nothing either
    assert len(rig.sent) == sent
    assert rig.handle(start_id).session.ended is None

    second_transport = rig.transport(resume_session_id=kept)
    second = await second_transport.open()
    # the first start only: no start, no join
    assert rig.sim.recorder.request_count("POST", START) == 1
    assert rig.sim.recorder.request_count("POST", START + "/join") == 0
    assert rig.polled_ids()[-1] == kept
    assert second.session_response["sessionId"] == kept and second.session_response["agentId"] == AGENT
    assert second_transport.resume_record() == {"platformSessionId": kept}
    # the same agent session, its chain followed on
    assert rig.sim.state.handle(second.learned.platform_session_id or "") is rig.handle(start_id)
    # a later open (a reconnection) starts as before: the kept id is used once
    await second.close(CloseCode.GOING_AWAY)
    await second_transport.open()
    assert rig.sim.recorder.request_count("POST", START) == 2


@pytest.mark.parametrize("silent", [False, True], ids=["agent-session-end", "409"])
async def test_a_kept_id_of_an_ended_agent_session_is_answered_with_a_new_start(
    rig: Rig, silent: bool
) -> None:
    """The platform ended the agent session while no daemon polled it: the take-over's poll answers
    AgentSessionEnd (or, once that was delivered, 409), and the transport starts a new one."""
    first = await rig.transport().open()
    kept = first.learned.platform_session_id
    assert kept is not None
    await first.abandon()
    rig.sim.state.end(kept, EndReason.INACTIVITY, silent=silent)

    conn = await rig.transport(resume_session_id=kept).open()
    assert rig.sim.recorder.request_count("POST", START, 202) == 2
    assert conn.session_response["sessionId"] != kept


async def test_a_crashs_agent_session_is_joined_at_once_and_one_no_longer_live_is_started(rig: Rig) -> None:
    """A crash (kill -9, a fleet peer lost) left the agent session logged in, its last rolling id
    unknown: the next transport joins it at once (one request on the connect endpoint, where a start
    would be answered 409 and joined after); with no live session to join, it starts one."""
    first = await rig.transport().open()
    start_id = str(first.session_response["sessionId"])
    # the daemon died: nothing sent, the agent session still live on the platform
    joined = await rig.transport(join_first=True).open()
    assert rig.sim.recorder.request_count("POST", START) == 1
    assert rig.sim.recorder.request_count("POST", START + "/join", 202) == 1
    assert rig.sim.recorder.request_count("POST", START, 409) == 0
    # its own sessionId chain on the same agent session
    assert (
        rig.sim.state.handle(joined.learned.platform_session_id or "").session is rig.handle(start_id).session
    )
    # the platform ended it meanwhile: the join finds none, and a start follows (the join used once)
    rig.sim.state.end(joined.learned.platform_session_id or "", EndReason.INACTIVITY)
    transport = rig.transport(join_first=True)
    again = await transport.open()
    assert rig.sim.recorder.request_count("POST", START + "/join", 404) == 1
    assert rig.sim.recorder.request_count("POST", START, 202) == 2
    assert again.session_response["sessionId"] != start_id
    await again.close(CloseCode.GOING_AWAY)
    await transport.open()  # a later open (a reconnection) starts, no join first
    assert rig.sim.recorder.request_count("POST", START + "/join") == 2
    assert rig.sim.recorder.request_count("POST", START, 202) == 3
