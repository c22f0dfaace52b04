"""Metrics over real OTLP/HTTP after a scenario (docs/telemetry.md): storm, rate-limited call, a fail-fast.

The scenario: Web Messaging sessions dropped at once under a handshake admission limit (the
circuit opens, reconnections are throttled), a REST call rate-limited twice, an attribute
update answered QUEUE_FULL (that session terminates). The receiver decodes the metric
payloads; each instrument is checked against what the daemon's own JSON lines say happened,
and no label carries a session id.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from supervisor.errors import OperationError
from supervisor.sim.faults import Fault, FaultKind
from supervisor.sim.genesys import GenesysSimulator
from tests.harness.config import genesys_config
from tests.integration.otlp_receiver import OtlpReceiver
from tests.integration.telemetry_harness import traced

pytestmark = [pytest.mark.integration, pytest.mark.anyio, pytest.mark.genesys_sim(seed=11)]

N = 8
NS = "session_supervisor"


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    server = OtlpReceiver()
    yield server
    server.stop()


def series(receiver: OtlpReceiver, metric: str) -> dict[frozenset[tuple[str, Any]], float]:
    return {frozenset(k): v for k, v in receiver.latest(metric).items()}


def value(receiver: OtlpReceiver, metric: str, **labels: Any) -> float:
    """The sum over the series of ``metric`` whose labels include ``labels`` (keys with __ for .)."""
    wanted = {(k.replace("__", "."), v) for k, v in labels.items()}
    return sum(v for k, v in series(receiver, metric).items() if wanted <= k)


async def test_metrics_after_a_storm_a_rate_limited_call_and_a_fail_fast(
    genesys_sim: GenesysSimulator, tmp_path: Path, receiver: OtlpReceiver
) -> None:
    async def no_wait(seconds: float) -> None:
        del seconds  # the retry executor's backoff only: reconnections keep their real delays

    # adaptive pacing off: the storm must open the circuit (with it on, pacing absorbs the refusals)
    conversations = [genesys_sim.create_conversation().id]
    config = genesys_config(
        genesys_sim.urls,
        N,
        open_for=3.0,
        first_min=0.05,
        first_max=0.1,
        adaptive=False,
        conversations=conversations,
    )
    async with traced(config, tmp_path, receiver, ratio=0.0) as h:
        await h.wait(lambda: h.all_in("active") and len(h.runners) == N)
        h.supervisor.wiring.executor._sleep = no_wait
        # every handshake refused until cleared: the breaker opens on five consecutive failures (seed
        # section 2), so one admitted handshake between refusals resets the count; at one a second, on
        # a loaded machine the reconnections spread out enough never to make five in a row
        refuse = genesys_sim.faults.inject(
            Fault(kind=FaultKind.ADMISSION_LIMIT, params={"rate_per_s": 0, "status": 503, "retry_after": "1"})
        )
        genesys_sim.faults.inject(Fault(kind=FaultKind.DROP))
        await h.wait(lambda: bool(h.recorded.named("RECONNECTION_THROTTLED")))
        genesys_sim.faults.clear(refuse.id)
        await h.wait(lambda: h.all_in("active") and bool(h.recorded.named("CIRCUIT_BREAKER_CLOSED")), 20)

        cid = h.runners["wm-0"].context.conversation_id
        genesys_sim.faults.inject(
            Fault(kind=FaultKind.RATE_LIMIT_STORM, count=2, params={"retry_after": "1"}, endpoint="GET *")
        )
        await h.supervisor.request("wm-0", "GET", genesys_sim.urls["api"] + f"/api/v2/conversations/{cid}")
        genesys_sim.faults.inject(Fault(kind=FaultKind.QUEUE_FULL, endpoint="PATCH */attributes"))
        url = genesys_sim.urls["api"] + f"/api/v2/conversations/{cid}/participants/p-1/attributes"
        with pytest.raises(OperationError):
            await h.supervisor.request("wm-0", "PATCH", url, json={"attributes": {"a": "b"}})
        await h.wait(lambda: h.runners["wm-0"].state.value == "terminated")
        assert await h.flush()

        # sessions by state
        assert value(receiver, f"{NS}.sessions", **{f"{NS}__session__state": "active"}) == N - 1
        assert value(receiver, f"{NS}.sessions", **{f"{NS}__session__state": "terminated"}) == 1
        assert value(receiver, f"{NS}.sessions", **{f"{NS}__session__state": "reconnecting"}) == 0
        # reconnections: attempts by cause, and their outcomes
        lines = [e for e in h.recorded.named("RETRY_ATTEMPT") if e["kind"] == "reconnect"]
        by_code = Counter(e["code"] for e in lines)
        for code, count in by_code.items():
            assert value(receiver, f"{NS}.reconnection.attempts", error__type=code) == count
        assert value(receiver, f"{NS}.reconnection.outcomes", **{f"{NS}__outcome": "recovered"}) == N
        throttled = len(h.recorded.named("RECONNECTION_THROTTLED"))
        assert value(receiver, f"{NS}.reconnection.outcomes", **{f"{NS}__outcome": "throttled"}) == throttled
        failed = len(lines) - N  # every reconnection beyond the first per session followed a failed one
        assert value(receiver, f"{NS}.reconnection.outcomes", **{f"{NS}__outcome": "failed"}) == failed
        # refused handshakes, as the simulator counted them
        refused = genesys_sim.recorder.attempts_total("webmessaging")["refused"]
        assert refused > 0
        assert value(receiver, f"{NS}.handshake.refusals", http__response__status_code=503) == refused
        # operation retries by code, policy and reason
        retries = [e for e in h.recorded.named("RETRY_ATTEMPT") if e["kind"] == "operation"]
        assert len(retries) == 2
        for retry in retries:
            labels = {
                "error__type": retry["code"],
                f"{NS}__retry__policy": retry["policy"],
                f"{NS}__retry__reason": "retry",
                f"{NS}__retry__from_retry_after": retry["fromRetryAfter"],
            }
            assert value(receiver, f"{NS}.retries", **labels) >= 1
        assert value(receiver, f"{NS}.retries", error__type="RATE_LIMITED") == 2
        # the circuit: its state now, and every transition it made
        circuit = "circuit:genesys:webmessaging"
        state = {f"{NS}__circuit__id": circuit}
        assert value(receiver, f"{NS}.circuit.state", **state, **{f"{NS}__circuit__state": "closed"}) == 1
        assert value(receiver, f"{NS}.circuit.state", **state, **{f"{NS}__circuit__state": "open"}) == 0
        transitions = len([e for e in h.recorded.named("CIRCUIT_TRANSITION") if e["machineId"] == circuit])
        assert value(receiver, f"{NS}.circuit.transitions", **state) == transitions
        # tokens: the REST calls fetched one
        assert value(receiver, f"{NS}.token.fetches", **{f"{NS}__credential": "genesys"}) == 1
        assert value(receiver, f"{NS}.token.refresh_failures", **{f"{NS}__credential": "genesys"}) == 0
        # fail-fast terminations by trigger
        terminations = {
            f"{NS}__termination__reason": "FAIL_FAST_TRIGGER",
            f"{NS}__termination__trigger": "QUEUE_FULL",
        }
        assert value(receiver, f"{NS}.session.terminations", **terminations) == 1
        assert value(receiver, f"{NS}.bus.sink_failures") == 0

        # bounded labels: never a session, agent or conversation id, never a path
        names = {p.metric for p in receiver.points}
        assert len(names) >= 12
        for point in receiver.points:
            assert not {"session.id", f"{NS}.agent.id", f"{NS}.conversation.id"} & set(point.attributes)
            for label in point.attributes.values():
                assert not (isinstance(label, str) and ("wm-" in label or "/" in label)), point
        assert all(len(series(receiver, name)) <= 40 for name in names)
