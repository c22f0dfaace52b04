"""Span trees over real OTLP/HTTP (docs/telemetry.md): a retried call, a token rotation, sampling, a fail-fast.

The daemon runs against the Genesys simulator on loopback and exports to the test's OTLP
receiver, which decodes the protobuf payloads; every assertion reads what crossed the wire.
The daemon's clock is fake (token lifetimes, backoff); span times are real.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from supervisor.clock import FakeClock
from supervisor.errors import OperationError
from supervisor.sim.faults import Fault, FaultKind
from supervisor.sim.genesys import GenesysSimConfig, GenesysSimulator
from supervisor.vocabulary import Platform
from tests.harness.clocks import advancing
from tests.harness.config import genesys_config
from tests.harness.in_process import Harness
from tests.integration.otlp_receiver import OtlpReceiver, Span
from tests.integration.telemetry_harness import traced

pytestmark = [
    pytest.mark.integration,
    pytest.mark.anyio,
    pytest.mark.genesys_sim(GenesysSimConfig(token_ttl_s=300), seed=5, fake_clock=True),
]

CONVERSATION = "/api/v2/conversations/{conversationId}"


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    server = OtlpReceiver()
    yield server
    server.stop()


async def active(h: Harness) -> str:
    await h.wait(lambda: len(h.runners) == 1 and h.all_in("active"))
    cid = h.runners["wm-0"].context.conversation_id
    assert cid
    return str(cid)


def resend(span: Span) -> int:
    # semantic conventions: absent on the first attempt, the ordinal of the resend after it
    return int(span.attr("http.request.resend_count", 0))


def operation_span(receiver: OtlpReceiver, template: str) -> Span:
    (span,) = [s for s in receiver.spans if s.kind == "INTERNAL" and s.attr("url.template") == template]
    return span


async def test_a_retried_call_is_one_operation_span_with_one_client_span_per_attempt(
    genesys_sim: GenesysSimulator, clock: FakeClock, tmp_path: Path, receiver: OtlpReceiver
) -> None:
    """429 twice with Retry-After: 7, then 200: resend counts 0, 1, 2; retry.scheduled from Retry-After."""
    backoff = advancing(clock)

    # sampling 0: a retried operation is traced regardless
    async with traced(
        genesys_config(genesys_sim.urls, 1, conversations=[genesys_sim.create_conversation().id]),
        tmp_path,
        receiver,
        clock=clock,
        ratio=0.0,
    ) as h:
        cid = await active(h)
        h.supervisor.wiring.executor._sleep = backoff
        genesys_sim.faults.inject(
            Fault(kind=FaultKind.RATE_LIMIT_STORM, count=2, params={"retry_after": "7"}, endpoint="GET *")
        )
        url = genesys_sim.urls["api"] + f"/api/v2/conversations/{cid}"
        response = await h.supervisor.request("wm-0", "GET", url, route=CONVERSATION)
        assert response.status_code == 200
        assert await h.flush()

        op = operation_span(receiver, CONVERSATION)
        assert op.name == f"GET {CONVERSATION}"  # the template, never the id-bearing path
        assert op.parent_id == ""  # a root: the session's active segment is a link, not its parent
        assert op.attr("session_supervisor.operation.attempts") == 3
        assert op.status == "UNSET"  # it succeeded in the end
        assert op.attr("session.id") == "wm-0"
        assert op.attr("session_supervisor.agent.id") == "a-0"
        assert op.attr("session_supervisor.conversation.id") == cid
        api = httpx.URL(genesys_sim.urls["api"])
        assert (op.attr("server.address"), op.attr("server.port")) == (api.host, api.port)
        assert op.attr("http.request.method") == "GET"

        retries = [attrs for name, attrs, _ in op.events if name == "retry.scheduled"]
        assert len(retries) == 2
        for scheduled in retries:
            assert scheduled["session_supervisor.retry.from_retry_after"] is True
            assert scheduled["session_supervisor.retry.delay_ms"] >= 7000.0
            assert scheduled["session_supervisor.retry.reason"] == "retry"
            assert scheduled["error.type"] == "RATE_LIMITED"

        fetch, *attempts = receiver.children(op)
        # the first call of the credential fetched its token first: a nested operation
        assert (fetch.kind, fetch.name) == ("INTERNAL", "oauth.token")
        assert [a.kind for a in attempts] == ["CLIENT"] * 3
        assert [resend(a) for a in attempts] == [0, 1, 2]
        assert [a.attr("session_supervisor.resend.reason") for a in attempts] == [None, "retry", "retry"]
        # every attempt that got a response says its status, the success's too (semantic conventions)
        assert [a.attr("http.response.status_code") for a in attempts] == [429, 429, 200]
        (token_request,) = receiver.children(fetch)
        assert (token_request.kind, token_request.name) == ("CLIENT", "POST /oauth/token")
        assert token_request.attr("http.response.status_code") == 200
        for failed in attempts[:2]:
            assert failed.status == "ERROR"
            assert failed.attr("error.type") == "RATE_LIMITED"
            assert failed.attr("session_supervisor.error.class") == "TRANSIENT"
        assert attempts[2].status == "UNSET" and attempts[2].attr("error.type") is None
        for attempt in attempts:
            assert attempt.name == f"GET {CONVERSATION}"
            assert attempt.attr("url.template") == CONVERSATION
            assert attempt.trace_id == op.trace_id
        # the retry events happen between the attempts they separate
        times = sorted(at for name, _, at in op.events if name == "retry.scheduled")
        assert attempts[0].end <= times[0] <= attempts[1].start <= times[1] <= attempts[2].start

        # the JSON lines lead to the trace: RETRY_ATTEMPT names the operation's span
        lines = [e for e in h.recorded.named("RETRY_ATTEMPT") if e["kind"] == "operation"]
        assert len(lines) == 2
        assert {(e["traceId"], e["spanId"]) for e in lines} == {(op.trace_id, op.span_id)}
        # ... and each classified failure names the attempt it failed
        classified = [e for e in h.recorded.named("SDK_ERROR_CLASSIFIED") if e["code"] == "RATE_LIMITED"]
        assert [e["spanId"] for e in classified] == [a.span_id for a in attempts[:2]]


async def test_retries_the_retry_budget_refused_are_told_on_the_span_and_not_sent(
    genesys_sim: GenesysSimulator, clock: FakeClock, tmp_path: Path, receiver: OtlpReceiver
) -> None:
    """One retry per 10 s and backoffs that take no time: a call failing with 503 sends two
    attempts; its third and last scheduled retry says the second was refused, and the span ends
    with give-up RETRY_BUDGET_EXHAUSTED (docs/runtime.md, "Admission")."""

    async def backoff(seconds: float) -> None:  # the clock stands still: the budget's window never moves
        pass

    config = genesys_config(
        genesys_sim.urls,
        1,
        conversations=[genesys_sim.create_conversation().id],
        adaptive=False,
        retry_budget_ratio=0.0,
        retry_budget_min=0.1,
    )
    async with traced(config, tmp_path, receiver, clock=clock, ratio=0.0) as h:
        cid = await active(h)
        h.supervisor.wiring.executor._sleep = backoff
        genesys_sim.faults.inject(
            Fault(kind=FaultKind.SERVER_ERROR_BURST, endpoint="GET /api/v2/conversations/*")
        )
        url = genesys_sim.urls["api"] + f"/api/v2/conversations/{cid}"
        with pytest.raises(OperationError):
            await h.supervisor.request("wm-0", "GET", url, route=CONVERSATION)
        assert await h.flush()

        op = operation_span(receiver, CONVERSATION)
        assert op.attr("session_supervisor.operation.attempts") == 2
        assert op.attr("session_supervisor.retry.give_up") == "RETRY_BUDGET_EXHAUSTED"
        scheduled = [attrs for name, attrs, _ in op.events if name == "retry.scheduled"]
        assert [
            (s["session_supervisor.retry.attempt"], s["session_supervisor.retry.budget_refused"])
            for s in scheduled
        ] == [
            (1, False),
            (2, False),
            (3, True),
        ]
        clients = [s for s in receiver.spans if s.kind == "CLIENT" and s.parent_id == op.span_id]
        assert sorted(resend(s) for s in clients) == [0, 1]


async def test_a_sampled_out_success_records_nothing_and_a_sampled_one_is_whole(
    genesys_sim: GenesysSimulator, clock: FakeClock, tmp_path: Path, receiver: OtlpReceiver
) -> None:
    for ratio, expected in ((0.0, 0), (1.0, 1)):
        receiver.spans.clear()
        async with traced(
            genesys_config(genesys_sim.urls, 1, conversations=[genesys_sim.create_conversation().id]),
            tmp_path,
            receiver,
            clock=clock,
            ratio=ratio,
        ) as h:
            cid = await active(h)
            url = genesys_sim.urls["api"] + f"/api/v2/conversations/{cid}"
            await h.supervisor.request("wm-0", "GET", url)  # the token is cached after this one
            await h.supervisor.request("wm-0", "GET", url, route=CONVERSATION)
            assert await h.flush()
            ops = [
                s for s in receiver.spans if s.kind == "INTERNAL" and s.attr("url.template") == CONVERSATION
            ]
            assert len(ops) == expected, ratio
            if ops:
                (attempt,) = receiver.children(ops[0])
                assert attempt.kind == "CLIENT" and resend(attempt) == 0
                assert attempt.attr("http.response.status_code") == 200  # a success says its status too


async def test_a_token_rotation_replays_once_with_resend_count_1(
    genesys_sim: GenesysSimulator, clock: FakeClock, tmp_path: Path, receiver: OtlpReceiver
) -> None:
    """Seed edge case 3: a 401 on a token expired by our clock; refreshed; the replay is resend 1."""
    async with traced(
        genesys_config(genesys_sim.urls, 1, conversations=[genesys_sim.create_conversation().id]),
        tmp_path,
        receiver,
        clock=clock,
        ratio=0.0,
    ) as h:
        cid = await active(h)
        tokens = h.supervisor.wiring.tokens[Platform.GENESYS]
        await h.supervisor.request("wm-0", "GET", genesys_sim.urls["api"] + f"/api/v2/conversations/{cid}")
        old = tokens.current
        assert old is not None
        clock.set(old.expires_at - 1.0)  # still valid when the call takes it
        armed = [True]

        async def expire_in_flight(request: httpx.Request) -> None:
            # the token expires while the request is on its way, by our clock and the server's
            if armed[0] and request.method == "GET":
                armed[0] = False
                clock.advance(2.0)

        client = h.supervisor.wiring.pipelines[Platform.GENESYS].client
        client.event_hooks = {"request": [expire_in_flight], "response": []}
        url = genesys_sim.urls["api"] + f"/api/v2/conversations/{cid}"
        response = await h.supervisor.request("wm-0", "GET", url, route=CONVERSATION)
        assert response.status_code == 200
        assert tokens.refreshes == 1
        assert await h.flush()

        op = operation_span(receiver, CONVERSATION)
        children = receiver.children(op)
        assert [(c.kind, c.name) for c in children] == [
            ("CLIENT", f"GET {CONVERSATION}"),
            ("INTERNAL", "oauth.token"),
            ("CLIENT", f"GET {CONVERSATION}"),
        ]
        first, fetch, replay = children
        assert first.attr("http.response.status_code") == 401
        assert first.attr("error.type") == "TOKEN_EXPIRED" and first.status == "ERROR"
        assert resend(first) == 0
        assert resend(replay) == 1
        assert replay.attr("session_supervisor.resend.reason") == "token_replay"
        assert replay.status == "UNSET"
        (scheduled,) = [attrs for name, attrs, _ in op.events if name == "retry.scheduled"]
        assert scheduled["session_supervisor.retry.reason"] == "token_replay"
        assert scheduled["session_supervisor.retry.delay_ms"] == 0.0
        # the token fetch is an operation of its own, nested: one CLIENT attempt to the token endpoint
        (post,) = receiver.children(fetch)
        assert post.kind == "CLIENT" and post.name == "POST /oauth/token"
        assert post.attr("url.template") == "/oauth/token"
        assert fetch.trace_id == op.trace_id and post.trace_id == op.trace_id
        assert first.end <= fetch.start and fetch.end <= replay.start


async def test_a_fail_fast_termination_is_on_the_operation_and_the_last_segment(
    genesys_sim: GenesysSimulator, clock: FakeClock, tmp_path: Path, receiver: OtlpReceiver
) -> None:
    """QUEUE_FULL on an attribute update: the call's span, and the session's last segment with reason and trigger."""
    async with traced(
        genesys_config(genesys_sim.urls, 1, conversations=[genesys_sim.create_conversation().id]),
        tmp_path,
        receiver,
        clock=clock,
        ratio=0.0,
    ) as h:
        cid = await active(h)
        genesys_sim.faults.inject(Fault(kind=FaultKind.QUEUE_FULL, endpoint="PATCH */attributes"))
        route = "/api/v2/conversations/{conversationId}/participants/{participantId}/attributes"
        url = genesys_sim.urls["api"] + f"/api/v2/conversations/{cid}/participants/p-1/attributes"
        with pytest.raises(OperationError):
            await h.supervisor.request("wm-0", "PATCH", url, json={"attributes": {"a": "b"}}, route=route)
        await h.wait(lambda: h.all_in("terminated"))
        assert await h.flush()

        op = operation_span(receiver, route)
        assert op.status == "ERROR" and op.attr("error.type") == "QUEUE_FULL"
        assert op.attr("session_supervisor.error.class") == "PERMANENT"
        (attempt,) = [c for c in receiver.children(op) if c.kind == "CLIENT"]
        assert attempt.attr("http.response.status_code") == 429 and attempt.attr("error.type") == "QUEUE_FULL"

        segments = sorted(receiver.named("session.active"), key=lambda s: s.start)
        last = segments[-1]
        assert last.attr("session.id") == "wm-0"
        assert last.attr("session_supervisor.termination.reason") == "FAIL_FAST_TRIGGER"
        assert last.attr("session_supervisor.termination.trigger") == "QUEUE_FULL"
        assert last.attr("session_supervisor.session.next_state") == "terminated"
        assert last.attr("error.type") == "QUEUE_FULL" and last.status == "ERROR"
        assert last.attr("network.transport") == "tcp"
        assert last.attr("network.protocol.name") == "websocket"
        # the operation links to the segment it was made in
        assert (
            last.trace_id,
            last.span_id,
            {"session_supervisor.link.relation": "session_segment"},
        ) in op.links
        # SESSION_TERMINATED's JSON line leads to that segment
        (line,) = h.recorded.named("SESSION_TERMINATED")
        assert (line["traceId"], line["spanId"]) == (last.trace_id, last.span_id)
        # the session start was healthy and the ratio is 0: it was not traced
        assert receiver.named("session.connecting") == []
