"""One attempt path (docs/runtime.md): each attempt is decided once, on the one endpoint that gated it.

Before, the session runner, the retry executor and the attribute sender each ran their own admission,
and where one wrapped the other the same refusal was counted twice: a CXone start refused for load
was recorded on ``cxone:api`` by the executor *and* on ``cxone:agent-sessions`` by the runner, and cut
both endpoints' pacers; an attribute response was classified by the attribute client and again by
the executor, and its Retry-After was kept by the attribute scheduler as well as by the endpoint.

Real loopback sockets against the simulators; waits run on a fake clock that every sleep advances.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

from machines.circuit import Circuit
from supervisor.clock import FakeClock
from supervisor.sim.faults import Fault, FaultKind
from supervisor.sim.genesys import GenesysSimConfig, GenesysSimulator
from supervisor.taxonomy import Classifier, RawError, SdkErrorEvent
from supervisor.vocabulary import EndpointId, Platform
from tests.harness.clocks import advancing
from tests.harness.config import attributes_config, cxone_config, genesys_config
from tests.harness.in_process import supervised
from tests.harness.simulators import StartCxone, StartGenesys
from tests.integration.attributes_harness import durable_daemon

pytestmark = [
    pytest.mark.integration,
    pytest.mark.anyio,
    pytest.mark.genesys_sim(GenesysSimConfig(rate_limit=1_000_000), seed=11, fake_clock=True),
]


@pytest.fixture
def failures_recorded(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """(circuit id, code) of every failure a circuit is told of, in order (the circuit's own input)."""
    told: list[tuple[str, str]] = []
    record_failure = Circuit.record_failure

    def spy(self: Circuit, event: SdkErrorEvent, probe_id: int = 0) -> object:
        told.append((self.circuit_id, event.code))
        return record_failure(self, event, probe_id)

    monkeypatch.setattr(Circuit, "record_failure", spy)
    return told


@pytest.fixture
def classifications(monkeypatch: pytest.MonkeyPatch) -> list[int | None]:
    """The status of every RawError the classifier is asked about, in order."""
    asked: list[int | None] = []
    classify = Classifier.classify

    def spy(self: Classifier, raw: RawError) -> SdkErrorEvent:
        asked.append(raw.status)
        return classify(self, raw)

    monkeypatch.setattr(Classifier, "classify", spy)
    return asked


async def test_a_cxone_start_refused_three_times_counts_three_failures_on_the_one_endpoint_that_gated_it(
    clock: FakeClock, tmp_path: Path, failures_recorded: list[tuple[str, str]], start_cxone: StartCxone
) -> None:
    """``POST agent-sessions`` answered 429 + Retry-After: 2 three times: the start is gated on the
    session's connect endpoint (``cxone:agent-sessions``) alone, so that endpoint's circuit hears of
    exactly three failures and no other circuit of any; each refusal cuts that endpoint's pacer once
    and no other pacer; each is classified once. The session then starts (the fourth answer)."""

    sim = await start_cxone(seed=4, clock=clock)
    sim.faults.inject(
        Fault(
            kind=FaultKind.RATE_LIMIT_STORM,
            count=3,
            endpoint="POST */agent-sessions",
            params={"retry_after": "2"},
        )
    )
    config = cxone_config(sim.urls, 1, poll_timeout=1)
    async with supervised(config, tmp_path, clock=clock, sleep=advancing(clock)) as h:
        await h.wait(lambda: h.all_in("active"), 20.0)
        assert sim.recorder.request_count(method="POST", status=429) == 3
        assert failures_recorded == [("circuit:cxone:agent-sessions", "RATE_LIMITED")] * 3
        cuts = [p for p in h.recorded.named("PACING_CHANGED") if p["reason"] == "throttled"]
        assert [(p["endpoint"], p["kind"], p["pausedForS"]) for p in cuts] == [
            ("cxone:agent-sessions", "connect", 2.0)
        ] * 3
        classified = [e["code"] for e in h.recorded.named("SDK_ERROR_CLASSIFIED")]
        assert classified == ["RATE_LIMITED"] * 3
        assert h.terminations() == {}


async def test_cxone_start_up_is_paced_on_the_sessions_connect_endpoint(
    clock: FakeClock, tmp_path: Path, start_cxone: StartCxone
) -> None:
    """Forty CXone sessions start at once: their starts leave at the connect endpoint's pace, from its
    initial 20/s (slow start), as a WebSocket storm's handshakes do; none goes unpaced."""

    n = 40
    sim = await start_cxone(seed=4, clock=clock)
    config = cxone_config(sim.urls, n, poll_timeout=1)
    started = clock.monotonic()
    async with supervised(config, tmp_path, clock=clock, sleep=advancing(clock)) as h:
        await h.wait(lambda: len(h.runners) == n and h.all_in("active"), 30.0)
        # forty starts at 20/s growing by one per admitted start: about a second and a half
        assert clock.monotonic() - started >= 1.0
        endpoint = h.supervisor.wiring.attempts.endpoints.connect(
            EndpointId(Platform.CXONE, "agent-sessions")
        )
        assert endpoint.rate is not None and endpoint.rate > 20.0  # admitted: slow start grew it
        assert endpoint.in_flight == 0  # every start gave its place back
        assert h.terminations() == {}


async def test_a_notifications_channel_refused_for_load_is_told_to_genesys_api_alone(
    clock: FakeClock, tmp_path: Path, failures_recorded: list[tuple[str, str]], start_genesys: StartGenesys
) -> None:
    """The channel's creation is a REST call on ``genesys:api``; the session's connect endpoint
    (``genesys:streaming``) gates the WebSocket handshake only, so a creation refused three times
    (its retries spent: the session reconnects) is told to ``genesys:api`` three times and to
    ``genesys:streaming`` never, and only ``genesys:api``'s pace is cut."""

    sim = await start_genesys(GenesysSimConfig(token_ttl_s=3600), seed=5, clock=clock)
    sim.faults.inject(
        Fault(
            kind=FaultKind.RATE_LIMIT_STORM,
            count=3,
            endpoint="POST /api/v2/notifications/channels",
            params={"retry_after": "2"},
        )
    )
    config = genesys_config(sim.urls, 0, notifications=1)
    async with supervised(config, tmp_path, clock=clock, sleep=advancing(clock)) as h:
        await h.wait(lambda: len(h.runners) == 1 and h.all_in("active"), 20.0)
        assert sim.recorder.request_count(method="POST", status=429) == 3
        assert failures_recorded == [("circuit:genesys:api", "RATE_LIMITED")] * 3
        cuts = [p for p in h.recorded.named("PACING_CHANGED") if p["reason"] == "throttled"]
        assert {(p["endpoint"], p["kind"]) for p in cuts} == {("genesys:api", "rest")}
        assert h.terminations() == {}


async def test_a_notifications_handshake_refused_for_load_is_told_to_genesys_streaming_once(
    clock: FakeClock, tmp_path: Path, failures_recorded: list[tuple[str, str]], start_genesys: StartGenesys
) -> None:
    """The WebSocket handshake is the session's connection attempt, gated where it is made: refused
    twice (429 + Retry-After: 2 on the upgrade), it is told to ``genesys:streaming`` twice and cuts that
    endpoint's connect pace; the channels created for it were answered, so ``genesys:api`` hears of
    no failure."""

    sim = await start_genesys(GenesysSimConfig(token_ttl_s=3600), seed=5, clock=clock)
    sim.faults.inject(
        Fault(
            kind=FaultKind.ADMISSION_LIMIT,
            count=2,
            endpoint="WS /channels/*",
            params={"rate_per_s": 0, "retry_after": "2"},
        )
    )
    config = genesys_config(sim.urls, 0, notifications=1)
    async with supervised(config, tmp_path, clock=clock, sleep=advancing(clock)) as h:
        await h.wait(lambda: len(h.runners) == 1 and h.all_in("active"), 20.0)
        assert failures_recorded == [("circuit:genesys:streaming", "RATE_LIMITED")] * 2
        cuts = [p for p in h.recorded.named("PACING_CHANGED") if p["reason"] == "throttled"]
        assert [(p["endpoint"], p["kind"]) for p in cuts] == [("genesys:streaming", "connect")] * 2
        assert (
            h.supervisor.wiring.attempts.endpoints.connect(
                EndpointId(Platform.GENESYS, "streaming")
            ).in_flight
            == 0
        )
        assert h.terminations() == {}


TOPICS = "/api/v2/notifications/availabletopics"


async def test_three_attribute_responses_are_classified_three_times(
    genesys_sim: GenesysSimulator, clock: FakeClock, tmp_path: Path, classifications: list[int | None]
) -> None:
    """An attribute write answered 429 + Retry-After: 2 three times (the executor's first attempt and
    the policy's two retries): three responses, three classifications, each published once."""
    conv = genesys_sim.create_conversation()
    text = attributes_config(genesys_sim.urls, [conv.id], store=tmp_path / "store.sqlite3")
    async with durable_daemon(text, tmp_path, clock=clock, sleep=advancing(clock)) as h:
        await h.wait_active(1)
        h.supervisor.wiring.executor._sleep = advancing(clock)
        genesys_sim.faults.inject(
            Fault(
                kind=FaultKind.RATE_LIMIT_STORM,
                count=3,
                endpoint="PATCH */attributes",
                params={"retry_after": "2"},
            )
        )
        await h.service.submit("wm-0", {"survey": "yes"})
        classifications.clear()
        published = len(h.recorded.named("SDK_ERROR_CLASSIFIED"))
        await h.service.run_due()
        assert genesys_sim.recorder.request_count(method="PATCH", status=429) == 3
        assert classifications == [429, 429, 429]
        assert len(h.recorded.named("SDK_ERROR_CLASSIFIED")) - published == 3


async def test_a_retry_after_is_held_once_by_the_endpoint_and_the_attribute_tenant_waits_on_that_hold(
    genesys_sim: GenesysSimulator, clock: FakeClock, tmp_path: Path
) -> None:
    """A Retry-After is kept in one place, the endpoint (``genesys:api``); the attribute scheduler
    reads that hold for its tenant instead of keeping a copy of its own. So a Retry-After that any
    call to the endpoint met (here a session's own REST call, not an attribute write) holds the
    tenant's queued writes for exactly as long as it holds the endpoint, and none leaves before."""
    conv = genesys_sim.create_conversation()
    text = attributes_config(genesys_sim.urls, [conv.id], store=tmp_path / "store.sqlite3")
    paused: list[float] = []
    patches: list[int] = []

    async def sleep(seconds: float) -> None:
        # the session's call waits its Retry-After out: the write falls due meanwhile
        if not paused:
            (tenant, _session), *_ = h.service.sender.owner.values()  # type: ignore[union-attr]
            paused.append(h.service.scheduler.paused_for(tenant))
            await h.service.run_due()
            patches.append(genesys_sim.recorder.request_count(method="PATCH"))
        clock.advance(max(0.0, seconds))
        await anyio.lowlevel.checkpoint()

    async with durable_daemon(text, tmp_path, clock=clock) as h:
        await h.wait_active(1)
        h.supervisor.wiring.executor._sleep = sleep
        await h.service.submit("wm-0", {"survey": "yes"})
        genesys_sim.faults.inject(
            Fault(
                kind=FaultKind.RATE_LIMIT_STORM,
                count=1,
                endpoint=f"GET {TOPICS}",
                params={"retry_after": "7"},
            )
        )
        response = await h.supervisor.request("wm-0", "GET", genesys_sim.urls["api"] + TOPICS)
        assert response.status_code == 200
        (hold,) = [p for p in h.recorded.named("PACING_CHANGED") if p["reason"] == "throttled"]
        assert (hold["endpoint"], hold["pausedForS"]) == ("genesys:api", 7.0)
        # the tenant was held exactly as long as the endpoint, and its write waited
        assert paused == [pytest.approx(7.0)] and patches == [0]
        await h.service.run_due()
        assert genesys_sim.recorder.request_count(method="PATCH") == 1
