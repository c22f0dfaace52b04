"""A reconnection storm over real OTLP/HTTP (docs/telemetry.md): one segment span per reconnection, circuit periods.

Web Messaging sessions are dropped at once (1006) while the simulator refuses every handshake
(503 + Retry-After) until the test lets them in again, so sessions reconnect more than once and
the endpoint's circuit opens on the first round of refusals. (Admitting one a second let a success
split that round's refusals; the circuit then opened on a later round whose next retries, 4-5 s
on, all fell past its 3 s open period, and no reconnection was ever throttled.) Sampling is 0: everything asserted here is traced because it is a failure, a
reconnection or a circuit period, never by chance.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from supervisor.sim.faults import Fault, FaultKind
from supervisor.sim.genesys import GenesysSimulator
from tests.harness.config import genesys_config
from tests.integration.otlp_receiver import OtlpReceiver, Span
from tests.integration.telemetry_harness import traced

pytestmark = [pytest.mark.integration, pytest.mark.anyio, pytest.mark.genesys_sim(seed=11)]

N = 8


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    server = OtlpReceiver()
    yield server
    server.stop()


def of(receiver: OtlpReceiver, name: str, session: str) -> list[Span]:
    return sorted((s for s in receiver.named(name) if s.attr("session.id") == session), key=lambda s: s.start)


async def test_a_storm_exports_one_segment_span_per_reconnection(
    genesys_sim: GenesysSimulator, tmp_path: Path, receiver: OtlpReceiver
) -> None:
    # adaptive pacing off: the storm must open the circuit (with it on, pacing absorbs the refusals)
    config = genesys_config(genesys_sim.urls, N, open_for=3.0, first_min=0.05, first_max=0.1, adaptive=False)
    async with traced(config, tmp_path, receiver, ratio=0.0) as h:
        await h.wait(lambda: h.all_in("active") and len(h.runners) == N)
        refuse = genesys_sim.faults.inject(
            Fault(kind=FaultKind.ADMISSION_LIMIT, params={"rate_per_s": 0, "status": 503, "retry_after": "1"})
        )
        genesys_sim.faults.inject(Fault(kind=FaultKind.DROP))
        await h.wait(lambda: bool(h.recorded.named("CIRCUIT_BREAKER_OPEN")))
        await h.wait(lambda: bool(h.recorded.named("RECONNECTION_THROTTLED")))
        genesys_sim.faults.clear(refuse.id)
        await h.wait(lambda: h.all_in("active") and bool(h.recorded.named("CIRCUIT_BREAKER_CLOSED")), 20)
        assert h.terminations() == {}
        assert await h.flush()

        reconnections = Counter(
            e["sessionId"] for e in h.recorded.named("RETRY_ATTEMPT") if e["kind"] == "reconnect"
        )
        assert sum(reconnections.values()) > N  # some sessions needed more than one reconnection
        refused: set[str] = set()  # the semantic codes the refused handshakes got
        for session in h.runners:
            dropped = [s for s in of(receiver, "session.active", session) if s.attr("error.type")]
            reconnecting = of(receiver, "session.reconnecting", session)
            connecting = [
                s
                for s in of(receiver, "session.connecting", session)
                if s.attr("session_supervisor.reconnect.attempt")
            ]
            # one reconnecting segment per reconnection scheduled, one connecting segment per attempt made
            assert len(reconnecting) == reconnections[session], session
            assert len(connecting) == reconnections[session], session
            assert [s.attr("session_supervisor.reconnect.attempt") for s in reconnecting] == list(
                range(1, reconnections[session] + 1)
            )
            (drop,) = dropped
            assert drop.attr("error.type") == "ABNORMAL_CLOSURE"
            assert drop.attr("session_supervisor.session.next_state") == "reconnecting"
            assert drop.attr("session_supervisor.websocket.close_code") == 1006
            assert drop.status == "ERROR"
            # the chain: every segment links to the one before it, and to the session's first
            chain = [drop, *sorted(reconnecting + connecting, key=lambda s: s.start)]
            for before, after in itertools.pairwise(chain):
                relations = {(tid, sid): a["session_supervisor.link.relation"] for tid, sid, a in after.links}
                assert relations.get((before.trace_id, before.span_id)) == "previous_segment"
                assert "first_segment" in relations.values()
                assert after.trace_id != before.trace_id  # a segment is a trace of its own
            for attempt in connecting:
                (handshake,) = receiver.children(attempt)
                assert handshake.kind == "CLIENT" and handshake.name == "websocket.open /v1"
                assert handshake.attr("network.transport") == "tcp"
                assert handshake.attr("network.protocol.name") == "websocket"
                assert handshake.attr("http.request.resend_count") == attempt.attr(
                    "session_supervisor.reconnect.attempt"
                )
                if attempt.attr("session_supervisor.session.next_state") == "reconnecting":
                    # refused by the platform's admission control
                    assert handshake.status == "ERROR"
                    assert handshake.attr("http.response.status_code") == 503
                    refused.add(handshake.attr("error.type"))
                else:
                    # the session went active over it: the upgrade was answered 101 Switching Protocols
                    assert attempt.attr("session_supervisor.session.next_state") == "active"
                    assert handshake.status == "UNSET"
                    assert handshake.attr("http.response.status_code") == 101
        # the RETRY_ATTEMPT lines lead to the reconnecting segments
        named = {(s.trace_id, s.span_id) for s in receiver.named("session.reconnecting")}
        lines = [e for e in h.recorded.named("RETRY_ATTEMPT") if e["kind"] == "reconnect"]
        assert {(e["traceId"], e["spanId"]) for e in lines} <= named

        # the circuit: short spans per open and half-open period, transitions as their events
        opened = receiver.named("circuit.open")
        assert opened
        first = min(opened, key=lambda s: s.start)
        assert first.attr("session_supervisor.circuit.id") == "circuit:genesys:webmessaging"
        assert first.attr("session_supervisor.circuit.next_state") == "half_open"
        assert first.attr("session_supervisor.circuit.consecutive_failures") >= 5
        # an open period is an error span with error.type: why it opened (the trip's semantic code, or
        # PROBE_FAILED when a half-open probe was refused again)
        for period in opened:
            assert period.status == "ERROR"
            assert period.attr("error.type") == period.attr("session_supervisor.circuit.reason")
        assert first.attr("error.type") in refused  # the trip's last failure: a refused handshake
        assert all(s.attr("error.type") is None for s in receiver.named("circuit.half_open"))
        assert [name for name, _, _ in first.events] == ["circuit.transition", "circuit.transition"]
        (line,) = h.recorded.named("CIRCUIT_BREAKER_OPEN")[:1]
        assert (line["traceId"], line["spanId"]) == (first.trace_id, first.span_id)
        closing = [
            s
            for s in receiver.named("circuit.half_open")
            if s.attr("session_supervisor.circuit.next_state") == "closed"
        ]
        assert len(closing) == 1
        closed_line = h.recorded.named("CIRCUIT_BREAKER_CLOSED")[0]
        assert (closed_line["traceId"], closed_line["spanId"]) == (closing[0].trace_id, closing[0].span_id)
