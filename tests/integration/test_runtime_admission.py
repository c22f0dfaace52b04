"""Admission beyond the seed (docs/runtime.md, "Admission"), end to end against the Genesys simulator.

A Retry-After on one session's REST call holds every call to that endpoint; a retry budget
across calls stops retries past its share; start-up is paced like a storm. The 4029 half (a
guest's own limit pauses nobody else) is in test_runtime_webmessaging.py.
"""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import httpx
import pytest

from supervisor.clock import FakeClock
from supervisor.errors import OperationError
from supervisor.sim.faults import Fault, FaultKind
from supervisor.sim.genesys import GenesysSimConfig, GenesysSimulator
from supervisor.vocabulary import GENESYS_WEBMESSAGING, EndpointId, Platform
from tests.harness.clocks import advancing
from tests.harness.config import genesys_config
from tests.harness.in_process import Harness, supervised
from tests.harness.simulators import StartGenesys

pytestmark = [
    pytest.mark.integration,
    pytest.mark.anyio,
    pytest.mark.genesys_sim(GenesysSimConfig(token_ttl_s=3600), seed=5, fake_clock=True),
]


def actives(h: Harness) -> list[dict[str, Any]]:
    return [t for t in h.recorded.named("SESSION_TRANSITION") if t["to"] == "active"]


def topics(sim: GenesysSimulator) -> str:
    return sim.urls["api"] + "/api/v2/notifications/availabletopics"


async def test_a_retry_after_on_one_sessions_call_holds_every_call_to_that_endpoint(
    genesys_sim: GenesysSimulator, clock: FakeClock, tmp_path: Path
) -> None:
    """wm-0's call is answered 429 + Retry-After: 7; wm-1 calls the same endpoint while wm-0 waits
    it out, and is held until the window ends: the platform is not asked before it said."""
    waits: list[tuple[float, int]] = []
    meanwhile: list[httpx.Response] = []

    async def sleep(seconds: float) -> None:
        # every executor wait, with how many requests the endpoint had seen when it began
        waits.append(
            (
                seconds,
                genesys_sim.recorder.request_count(
                    method="GET", endpoint="/api/v2/notifications/availabletopics"
                ),
            )
        )
        if len(waits) == 1:
            meanwhile.append(await h.supervisor.request("wm-1", "GET", topics(genesys_sim)))
        clock.advance(seconds)

    async with supervised(genesys_config(genesys_sim.urls, 2), tmp_path, clock=clock) as h:
        await h.wait(lambda: len(h.runners) == 2 and h.all_in("active"))
        h.supervisor.wiring.executor._sleep = sleep
        genesys_sim.faults.inject(
            Fault(kind=FaultKind.RATE_LIMIT_STORM, count=1, params={"retry_after": "7"}, endpoint="GET *")
        )
        first = await h.supervisor.request("wm-0", "GET", topics(genesys_sim))
        assert first.status_code == 200 and [r.status_code for r in meanwhile] == [200]
        (backoff, seen_then), *held = waits
        assert backoff >= 7.0 and seen_then == 1  # wm-0's own wait: never before Retry-After
        # wm-1 was held for the endpoint's window (asking again each second: the pacer books at
        # most a second ahead) before it sent anything: the endpoint had seen only the one 429
        assert sum(s for s, _ in held) == pytest.approx(7.0)
        assert {seen for _, seen in held} == {1}
        assert (
            genesys_sim.recorder.request_count(
                method="GET", endpoint="/api/v2/notifications/availabletopics", status=429
            )
            == 1
        )
        (cut,) = [p for p in h.recorded.named("PACING_CHANGED") if p["reason"] == "throttled"]
        assert (cut["endpoint"], cut["kind"], cut["pausedForS"]) == ("genesys:api", "rest", 7.0)
        assert h.terminations() == {}


def operation_retries(h: Harness) -> list[tuple[int, bool]]:
    return [
        (e["attempt"], e["budgetRefused"])
        for e in h.recorded.named("RETRY_ATTEMPT")
        if e["kind"] == "operation"
    ]


async def test_past_the_retry_budget_a_retryable_failure_is_not_retried_and_says_why(
    genesys_sim: GenesysSimulator, clock: FakeClock, tmp_path: Path
) -> None:
    """A budget of no share and one retry per 10 s, and backoffs that take no time: the first
    failing call gets its one retry, its next two come due in the same second and are refused
    (not sent, each said by the next event), and it ends RETRY_BUDGET_EXHAUSTED; the next call
    fails on its first attempt and every retry it schedules is refused."""

    async def sleep(seconds: float) -> None:
        await anyio.lowlevel.checkpoint()  # the clock stands still: the budget's window never moves

    config = genesys_config(genesys_sim.urls, 1, adaptive=False, retry_budget_ratio=0.0, retry_budget_min=0.1)
    async with supervised(config, tmp_path, clock=clock) as h:
        await h.wait(lambda: len(h.runners) == 1 and h.all_in("active"))
        h.supervisor.wiring.executor._sleep = sleep
        genesys_sim.faults.inject(
            Fault(kind=FaultKind.SERVER_ERROR_BURST, endpoint="GET /api/v2/notifications/availabletopics")
        )
        for _ in range(2):
            with pytest.raises(OperationError) as info:
                await h.supervisor.request("wm-0", "GET", topics(genesys_sim))
            assert info.value.exhausted
        # three attempts reached the endpoint: the first call's two, the second call's one
        assert (
            genesys_sim.recorder.request_count(method="GET", endpoint="/api/v2/notifications/availabletopics")
            == 3
        )
        # scheduled: (retry, the one before it was refused); the last refusal of each ends the call
        assert operation_retries(h) == [(1, False), (2, False), (3, True), (1, False), (2, True), (3, True)]
        exhausted = [e for e in h.recorded.named("RETRY_EXHAUSTED") if e["kind"] == "operation"]
        assert [(e["giveUp"], e["attempts"]) for e in exhausted] == [
            ("RETRY_BUDGET_EXHAUSTED", 3),
            ("RETRY_BUDGET_EXHAUSTED", 3),
        ]
        assert h.runners["wm-0"].state.value == "active"  # a spent budget fails calls, not sessions


async def test_a_retry_the_budget_refused_leaves_the_operation_its_next_scheduled_retry(
    genesys_sim: GenesysSimulator, clock: FakeClock, tmp_path: Path
) -> None:
    """The endpoint's one retry per 10 s is spent at second T; a call at T + 4 fails once. Its
    first two retries come due before T + 10 (within 1-2 s, then 2-3 s more) and are skipped; the
    third (4-5 s more, after T + 10) finds the budget free again, goes out and succeeds: asked
    when a retry comes due, the budget lets an operation outlast a spent window (docs/runtime.md, "Admission")."""
    sleep = advancing(clock)

    config = genesys_config(genesys_sim.urls, 1, adaptive=False, retry_budget_ratio=0.0, retry_budget_min=0.1)
    async with supervised(config, tmp_path, clock=clock) as h:
        await h.wait(lambda: len(h.runners) == 1 and h.all_in("active"))
        h.supervisor.wiring.executor._sleep = sleep
        endpoint = h.supervisor.wiring.attempts.endpoints.get(EndpointId(Platform.GENESYS, "api"))
        clock.advance(math.ceil(clock.monotonic()) - clock.monotonic())  # T: a whole second
        assert endpoint.may_retry()  # the window's one retry, spent at T
        clock.advance(4.0)
        genesys_sim.faults.inject(
            Fault(
                kind=FaultKind.SERVER_ERROR_BURST,
                count=1,
                endpoint="GET /api/v2/notifications/availabletopics",
            )
        )
        response = await h.supervisor.request("wm-0", "GET", topics(genesys_sim))
        assert response.status_code == 200
        assert (
            genesys_sim.recorder.request_count(method="GET", endpoint="/api/v2/notifications/availabletopics")
            == 2
        )
        assert operation_retries(h) == [(1, False), (2, True), (3, True)]
        (success,) = [e for e in h.recorded.named("RETRY_SUCCESS") if e["kind"] == "operation"]
        assert success["attempts"] == 1  # retries sent; the two skipped went nowhere
        assert not h.recorded.named("RETRY_EXHAUSTED")


async def test_rest_refusals_already_in_flight_at_the_first_count_once_toward_the_circuit(
    tmp_path: Path, start_genesys: StartGenesys
) -> None:
    """Six calls to one endpoint leave at once and each is answered 429 (Retry-After: 1) after
    0.3 s: the first refusal cuts the endpoint's pace, the five in flight with it echo it and
    count once toward the circuit (Pacer.echoes; RFC 6582 section 3.2), not as five in a row that
    open it. Every call succeeds on its retry. Real clock: the echo is told by send times."""
    endpoint = "GET /api/v2/notifications/availabletopics"
    sim = await start_genesys(GenesysSimConfig(token_ttl_s=3600), seed=5)
    config = genesys_config(sim.urls, 1, open_for=30.0)
    async with supervised(config, tmp_path) as h:
        await h.wait(lambda: len(h.runners) == 1 and h.all_in("active"))
        sim.faults.inject(
            Fault(kind=FaultKind.LATENCY, endpoint=endpoint, count=6, params={"latency_ms": 300})
        )
        sim.faults.inject(
            Fault(kind=FaultKind.RATE_LIMIT_STORM, endpoint=endpoint, count=6, params={"retry_after": "1"})
        )
        statuses: list[int] = []

        async def call() -> None:
            statuses.append((await h.supervisor.request("wm-0", "GET", topics(sim))).status_code)

        async with anyio.create_task_group() as tg:
            for _ in range(6):
                tg.start_soon(call)
        assert statuses == [200] * 6
        assert sim.recorder.request_count(method="GET", endpoint=endpoint.split(" ")[1], status=429) == 6
        assert not h.recorded.named("CIRCUIT_BREAKER_OPEN")


async def test_a_drop_after_start_up_restarts_the_connect_pace_from_the_initial_rate(
    genesys_sim: GenesysSimulator, clock: FakeClock, tmp_path: Path
) -> None:
    """A start-up of 40 sessions grows the connect pace from its initial 20/s; three quiet seconds
    later the platform drops every connection: the pace starts again from 20/s (RFC 5681 section
    3.1), once, and everyone comes back. Waits run on the fake clock (each advances it)."""
    sleep = advancing(clock)

    n = 40
    async with supervised(genesys_config(genesys_sim.urls, n), tmp_path, clock=clock, sleep=sleep) as h:
        await h.wait(lambda: len(h.runners) == n and h.all_in("active"))
        endpoint = h.supervisor.wiring.attempts.endpoints.connect(
            EndpointId(Platform.GENESYS, "webmessaging")
        )
        grown = endpoint.rate
        assert grown is not None and grown > 40.0
        assert not [p for p in h.recorded.named("PACING_CHANGED") if p["reason"] == "restart"]
        clock.advance(3.0)  # quiet: every session is up (idle restart is 10 s away)
        genesys_sim.faults.inject(Fault(kind=FaultKind.DROP))
        await h.wait(lambda: len(actives(h)) >= 2 * n and h.all_in("active"))
        restarts = [p for p in h.recorded.named("PACING_CHANGED") if p["reason"] == "restart"]
        assert [(p["endpoint"], p["kind"], p["rate"]) for p in restarts] == [
            ("genesys:webmessaging", "connect", 20.0)
        ]
        assert restarts[0]["previous"] == pytest.approx(grown)
        assert h.terminations() == {}


def _learned_rows(store: Path) -> dict[str, dict[str, float]]:
    """The learned limits in the store's ``meta`` table, read as another process reads the file."""
    conn = sqlite3.connect(store)
    try:
        rows = conn.execute("SELECT key, value FROM meta WHERE key LIKE 'pacer.%'").fetchall()
    finally:
        conn.close()
    return {str(key): json.loads(value) for key, value in rows}


async def test_a_restart_starts_the_connect_pace_from_the_limit_the_store_kept(
    genesys_sim: GenesysSimulator, clock: FakeClock, tmp_path: Path
) -> None:
    """A start whose first handshake is refused (503 + Retry-After: 1) cuts the Web Messaging
    connect pace: the limit it learned (the 20/s it was refused at) is in the store's ``meta``
    table at once (a kill -9 keeps it) and again, newly stamped, when the daemon stops. The next
    start seeds the endpoint's pacer with it: its slow start stops at 20 x 0.85 = 17/s, below the
    limit (and it starts there, below the initial 20/s). A start more than
    ``admission.learnedLimitMaxAge`` later discovers the limit again from the initial rate."""
    sleep = advancing(clock)
    store = tmp_path / "store.sqlite3"
    config = genesys_config(genesys_sim.urls, 2) + f'[store]\npath = "{store}"\n'
    key = "pacer.genesys:webmessaging"
    genesys_sim.faults.inject(
        Fault(kind=FaultKind.ADMISSION_LIMIT, count=1, params={"rate_per_s": 0, "status": 503})
    )
    async with supervised(config, tmp_path, clock=clock, sleep=sleep, durable=True) as h:
        await h.wait(lambda: len(h.runners) == 2 and h.all_in("active"), 20.0)
        cuts = [p for p in h.recorded.named("PACING_CHANGED") if p["reason"] == "throttled"]
        assert [(p["endpoint"], p["previous"]) for p in cuts] == [("genesys:webmessaging", 20.0)]
        # written at the cut, before any stop
        await h.wait(lambda: key in _learned_rows(store))
        at_cut = _learned_rows(store)[key]
        assert at_cut["limit"] == pytest.approx(20.0) and at_cut["at"] <= clock.time()
        clock.advance(30.0)
        stopped_at = clock.time()
    at_stop = _learned_rows(store)[key]
    assert at_stop == {"limit": pytest.approx(20.0), "at": pytest.approx(stopped_at, abs=5.0)}
    assert at_stop["at"] > at_cut["at"] + 25.0

    async with supervised(config, tmp_path, clock=clock, sleep=sleep, durable=True) as h:
        endpoint = h.supervisor.wiring.attempts.endpoints.connect(GENESYS_WEBMESSAGING)
        assert endpoint.learned() == pytest.approx(20.0)
        await h.wait(lambda: len(h.runners) == 2 and h.all_in("active"), 20.0)
        # in congestion avoidance from 17/s (2 % of the rate per second's worth of admissions)
        rate = endpoint.rate
        assert rate is not None and 17.0 <= rate < 17.5
        assert not [p for p in h.recorded.named("PACING_CHANGED") if p["reason"] == "throttled"]

    clock.advance(3600.0 + 60.0)  # past admission.learnedLimitMaxAge (1 h by default)
    async with supervised(config, tmp_path, clock=clock, sleep=sleep, durable=True) as h:
        endpoint = h.supervisor.wiring.attempts.endpoints.connect(GENESYS_WEBMESSAGING)
        assert endpoint.learned() is None
        await h.wait(lambda: len(h.runners) == 2 and h.all_in("active"), 20.0)
        # slow start from the initial 20/s: +1 per admitted handshake
        assert endpoint.rate == pytest.approx(22.0)
