"""The request pipeline's decisions, with a fake HTTP server (httpx.MockTransport) and a fake clock.

The integration tests run the same pipeline against the simulators; here the server is a
function so each rule of seed edge case 3 and the single retry layer can be pinned exactly.
"""

from __future__ import annotations

import random
from typing import Any

import anyio
import anyio.lowlevel
import httpx
import pytest

from machines.circuit import CircuitConfig
from machines.registry import CircuitRegistry, Endpoints
from supervisor.attempts import Attempts
from supervisor.boundary import SessionContext
from supervisor.clock import FakeClock
from supervisor.config import Secret
from supervisor.errors import CircuitOpenError, OperationError, TransportFailure
from supervisor.rest.executor import RetryExecutor
from supervisor.rest.pipeline import RequestPipeline, ResponseCheck
from supervisor.rest.tokens import TokenCache
from supervisor.runtime.fence import WriteFence
from supervisor.runtime.leases import Lease
from supervisor.taxonomy import Channel, Classifier, Platform, RawError, load_taxonomy
from supervisor.vocabulary import EndpointId
from tests.harness.clocks import advancing

pytestmark = pytest.mark.anyio

URL = "http://api.test/api/v2/conversations/c-1"


class Source:
    """A token endpoint: hands out tok-1, tok-2, ... with a lifetime, or fails as told."""

    def __init__(self, lifetime: float = 3600.0) -> None:
        self.lifetime = lifetime
        self.fetches = 0
        self.fail_with: RawError | None = None
        self.gate: anyio.Event | None = None

    async def fetch(self, refresh: Secret | None) -> tuple[Secret, float, Secret | None, dict[str, Any]]:
        if self.gate is not None:
            await self.gate.wait()
        if self.fail_with is not None:
            raise TransportFailure(self.fail_with)
        self.fetches += 1
        return Secret(f"tok-{self.fetches}"), self.lifetime, None, {}


class Rig:
    def __init__(
        self, handler: Any, *, lifetime: float = 3600.0, early: float = 0.0, fence: WriteFence | None = None
    ) -> None:
        self.clock = FakeClock(start=100.0)
        self.source = Source(lifetime)
        self.tokens = TokenCache(self.source, self.clock, early_refresh_s=early)
        self.sleeps: list[float] = []
        self.circuits = CircuitRegistry(self.clock, CircuitConfig(), random.Random(1))
        sleep = advancing(self.clock, self.sleeps)

        self.client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
        self.executor = RetryExecutor(
            Classifier(load_taxonomy("v1"), self.clock),
            Attempts(Endpoints(self.clock, self.circuits)),
            self.clock,
            rng=random.Random(3),
            sleep=sleep,
        )
        guard = None if fence is None else fence.guard(7)
        self.pipeline = RequestPipeline(self.client, self.executor, tokens=self.tokens, guard=guard)
        self.ctx = SessionContext("s-1", Platform.GENESYS, Channel.REST, agent_id="a-1")

    async def get(self, **kwargs: Any) -> httpx.Response:
        return await self.pipeline.request(
            "GET", URL, ctx=self.ctx, circuit=EndpointId(Platform.GENESYS, "api"), **kwargs
        )


def error(status: int, code: str, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.Response(status, json={"message": code, "code": code, "status": status}, headers=headers)


async def test_401_on_a_token_expired_by_our_clock_is_replayed_once_with_a_fresh_token() -> None:
    seen: list[str] = []
    rig: Rig

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers["Authorization"])
        if len(seen) == 1:
            rig.clock.advance(120.0)  # the token ran out while the request was in flight
            return error(401, "bad.credentials")
        return httpx.Response(200, json={"ok": True})

    rig = Rig(handler, lifetime=60.0)
    response = await rig.get()
    assert response.status_code == 200
    assert seen == ["Bearer tok-1", "Bearer tok-2"]
    assert rig.tokens.refreshes == 1 and rig.sleeps == []


async def test_401_on_a_token_valid_by_our_clock_fails_fast() -> None:
    rig = Rig(lambda request: error(401, "bad.credentials"))
    with pytest.raises(OperationError) as info:
        await rig.get()
    assert info.value.event.code == "OAUTH_TOKEN_INVALID"  # type: ignore[attr-defined]
    assert rig.source.fetches == 1  # no refresh storm on a revoked token


async def test_a_second_401_after_the_replay_is_not_replayed_again() -> None:
    calls: list[str] = []
    rig: Rig

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.headers["Authorization"])
        rig.clock.advance(120.0)
        return error(401, "bad.credentials")

    rig = Rig(handler, lifetime=60.0)
    with pytest.raises(OperationError):
        await rig.get()
    assert len(calls) == 2  # one replay, never more


async def test_before_each_retry_a_token_expiring_within_60_s_is_refreshed_and_the_clone_re_signed() -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers["Authorization"])
        if len(seen) < 3:
            return error(503, "service.unavailable", {"Retry-After": "30"})
        return httpx.Response(200)

    rig = Rig(handler, lifetime=80.0)
    await rig.get()
    # 30 s of backoff leaves 50 s on tok-1 (< 60): refreshed; 30 s more leaves 50 s on tok-2: refreshed
    assert seen == ["Bearer tok-1", "Bearer tok-2", "Bearer tok-3"]
    assert rig.sleeps == [30.0, 30.0]


async def test_many_concurrent_callers_share_one_refresh() -> None:
    """Reliability matrix row 11: one refresh per expiry, however many callers wait."""
    rig = Rig(lambda request: httpx.Response(200), lifetime=3600.0)
    gate = rig.source.gate = anyio.Event()
    results: list[int] = []

    async def call() -> None:
        results.append((await rig.get()).status_code)

    async with anyio.create_task_group() as tg:
        for _ in range(200):
            tg.start_soon(call)
        await anyio.lowlevel.checkpoint()
        gate.set()
    assert results == [200] * 200
    assert rig.source.fetches == 1


async def test_a_refused_refresh_is_token_refresh_failed() -> None:
    rig = Rig(lambda request: httpx.Response(200))
    rig.source.fail_with = RawError(
        platform=Platform.GENESYS,
        channel=Channel.REST,
        method="POST",
        endpoint="/oauth/token",
        status=400,
        body={"error": "invalid_grant"},
    )
    with pytest.raises(OperationError) as info:
        await rig.get()
    event = info.value.event
    assert (event.code, event.trigger.value) == ("TOKEN_REFRESH_FAILED", "TOKEN_REFRESH_FAILED")  # type: ignore[attr-defined]


async def test_a_token_endpoint_outage_is_retried_then_given_up() -> None:
    rig = Rig(lambda request: httpx.Response(200))
    rig.source.fail_with = RawError(
        platform=Platform.GENESYS, channel=Channel.REST, method="POST", endpoint="/oauth/token", status=503
    )
    with pytest.raises(OperationError) as info:
        await rig.get()
    assert info.value.event.code == "SERVER_ERROR" and info.value.exhausted  # type: ignore[attr-defined]
    assert len(rig.sleeps) == 3  # the server_error budget


async def test_permanent_operation_errors_are_not_retried() -> None:
    calls = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        return error(404, "not.found")

    rig = Rig(handler)
    with pytest.raises(OperationError) as info:
        await rig.pipeline.request(
            "GET",
            "http://api.test/api/v2/users/u",
            ctx=rig.ctx,
            circuit=EndpointId(Platform.GENESYS, "api"),
            channel=Channel.REST,
        )
    assert info.value.event.code == "RESOURCE_NOT_FOUND"  # type: ignore[attr-defined]
    assert calls == 1 and rig.sleeps == []


async def test_transient_budget_then_exhausted() -> None:
    rig = Rig(lambda request: error(502, "bad.gateway"))
    with pytest.raises(OperationError) as info:
        await rig.get()
    assert info.value.exhausted
    assert len(rig.sleeps) == 3
    assert all(1.0 <= s <= 12.0 for s in rig.sleeps)


async def test_five_transient_failures_open_the_circuit_and_calls_are_refused() -> None:
    calls = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        return error(503, "service.unavailable")

    rig = Rig(handler)
    with pytest.raises(OperationError):
        await rig.get()  # 4 failed attempts
    with pytest.raises(CircuitOpenError) as info:
        await rig.get()  # its first attempt is the 5th failure: open; its retry is refused locally
    assert calls == 5
    assert 0 < info.value.retry_in_s <= 30.0
    assert rig.circuits.get(EndpointId(Platform.GENESYS, "api")).state.value == "open"


async def test_requests_the_fence_aborted_end_unretried_and_never_reach_the_circuit() -> None:
    # a fleet member's shard pool: shard 7 held until boot time 50, then given back (its polls aborted)
    boot = [10.0]
    fence = WriteFence(now=lambda: boot[0])
    fence.follow({7: Lease(7, 3, deadline=50.0)})

    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.RemoteProtocolError("Server disconnected without sending a response.", request=request)

    rig = Rig(handler, fence=fence)
    circuit = rig.circuits.get(EndpointId(Platform.GENESYS, "api"))
    with pytest.raises(OperationError) as info:
        await rig.get()  # held: the platform's failure, classified and counted as ever
    assert info.value.event.code == "CONNECTION_FAILED"  # type: ignore[attr-defined]
    counted = circuit.consecutive_failures
    assert counted > 0
    fence.follow({})  # the shard given back: its sockets aborted, each request in flight fails
    for _ in range(6):
        calls = len(rig.sleeps)
        with pytest.raises(OperationError):
            await rig.get()
        assert len(rig.sleeps) == calls  # over at once: no retry on a socket the fence reset
    assert circuit.consecutive_failures == counted
    assert circuit.state.value == "closed"
    boot[0] = 60.0  # past a deadline (a member woken from SIGSTOP) fences all the same
    fence.follow({7: Lease(7, 3, deadline=50.0)})
    with pytest.raises(OperationError):
        await rig.get()
    assert circuit.consecutive_failures == counted


async def test_304_is_an_answer_and_its_empty_body_is_not_validated() -> None:
    rig = Rig(lambda request: httpx.Response(304))
    response = await rig.get(ok_statuses=frozenset({304}), check=ResponseCheck(required=("sessionId",)))
    assert response.status_code == 304


async def test_a_success_missing_required_fields_is_incomplete_response() -> None:
    rig = Rig(lambda request: httpx.Response(200, json={"agentId": "a"}))
    with pytest.raises(OperationError) as info:
        await rig.get(check=ResponseCheck(required=("conversationId", "agentId", "status")))
    event = info.value.event
    assert event.code == "INCOMPLETE_RESPONSE"  # type: ignore[attr-defined]
    assert event.details == "Missing required fields: conversationId, status"  # type: ignore[attr-defined]


async def test_transport_exceptions_are_classified_never_raised() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    rig = Rig(handler)
    with pytest.raises(OperationError) as info:
        await rig.get()
    assert info.value.event.code == "CONNECTION_FAILED"  # type: ignore[attr-defined]


async def test_an_invalid_url_is_classified_not_raised() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.InvalidURL("bad port")

    rig = Rig(handler)
    with pytest.raises(OperationError) as info:
        await rig.get()
    assert info.value.event.code == "CONFIGURATION_ERROR"  # type: ignore[attr-defined]


async def test_an_absurdly_nested_error_body_is_kept_as_text() -> None:
    rig = Rig(lambda request: httpx.Response(500, content=b"[" * 100_000))
    with pytest.raises(OperationError) as info:
        await rig.get()
    assert info.value.event.code == "SERVER_ERROR"  # type: ignore[attr-defined]
