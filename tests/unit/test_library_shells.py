"""One core, three shells (docs/library.md, "One core"): the library's sync and async shells decide as
the daemon's retry executor does, and ``@supervisor.resilient`` as the transport does."""

from __future__ import annotations

import random
from collections.abc import Sequence

import httpx
import pytest
import websockets.exceptions
from websockets.frames import Close

import supervisor
from machines.pacing import PacingConfig
from machines.registry import CircuitRegistry, Endpoints
from supervisor.attempts import Attempts
from supervisor.boundary import SessionContext, raw_from_response
from supervisor.clock import FakeClock
from supervisor.errors import CircuitOpenError, OperationError, SdkError
from supervisor.http import EVENT_EXTENSION, ResilientTransport
from supervisor.rest.executor import RetryExecutor
from supervisor.taxonomy import Channel, Classifier, Platform, RawError, load_taxonomy
from supervisor.vocabulary import EndpointId
from tests.harness.clocks import advancing

URL = "https://api.mypurecloud.com/api/v2/users/2f8a3b9e-0000-4000-8000-000000000001"

#: fault sequences, each answer as (status, Retry-After)
SEQUENCES = {
    "a storm then success": [(429, "2"), (429, "7"), (500, None), (200, None)],
    "a brownout that outlasts the budget": [(503, None)] * 6,
    "a permanent answer": [(500, None), (404, None)],
    "retry-after past the ceiling": [(429, "600")],
}


def answers(sequence: Sequence[tuple[int, str | None]]) -> list[httpx.Response]:
    return [httpx.Response(s, headers={} if ra is None else {"Retry-After": ra}) for s, ra in sequence]


class Seen:
    """What a shell did: the waits before each retry, the attempts sent, the end."""

    def __init__(self) -> None:
        self.waits: list[float] = []
        self.sent = 0
        self.end: tuple[str, object] = ("", None)


def through_the_library(sequence: list[tuple[int, str | None]], *, use_async: bool) -> tuple[Seen, object]:
    clock = FakeClock(start=1000.0)
    seen = Seen()
    queue = answers(sequence)

    def handler(request: httpx.Request) -> httpx.Response:
        seen.sent += 1
        return queue.pop(0) if len(queue) > 1 else queue[0]

    def sleep(s: float) -> None:
        seen.waits.append(s)
        clock.advance(s)

    async def async_sleep(s: float) -> None:
        sleep(s)

    t = ResilientTransport(
        "genesys",
        transport=httpx.MockTransport(handler),
        clock=clock,
        rng=random.Random(7),
        sleep=sleep,
        async_sleep=async_sleep,
        raise_on=(),
    )
    if use_async:
        import anyio

        async def main() -> httpx.Response:
            async with httpx.AsyncClient(transport=t) as client:
                return await client.get(URL)

        response = anyio.run(main)
    else:
        with httpx.Client(transport=t) as client:
            response = client.get(URL)
    event = response.extensions.get(EVENT_EXTENSION)
    seen.end = (str(response.status_code), None if event is None else event.code)
    (endpoint,) = t.core.endpoints.all().values()
    return seen, endpoint.circuit_id and t.core.endpoints.circuits.all()[
        next(iter(t.core.endpoints.all()))
    ].state


def through_the_daemon(sequence: list[tuple[int, str | None]]) -> tuple[Seen, object]:
    import anyio

    clock = FakeClock(start=1000.0)
    seen = Seen()
    queue = answers(sequence)
    rng = random.Random(7)
    ctx = SessionContext("s", Platform.GENESYS, Channel.REST)
    # the daemon's REST endpoints (supervisor/runtime/wiring.py, admission adaptive)
    endpoints = Endpoints(
        clock,
        CircuitRegistry(clock, None, rng),
        rest=PacingConfig(initial_rate=None, headroom=0.5),
        budget=(0.1, 5.0),
    )

    sleep = advancing(clock, seen.waits)

    executor = RetryExecutor(
        Classifier(load_taxonomy("v2"), clock), Attempts(endpoints), clock, rng=rng, sleep=sleep
    )
    name = EndpointId(Platform.GENESYS, "users")

    async def once(token: object) -> httpx.Response | RawError:
        seen.sent += 1
        response = queue.pop(0) if len(queue) > 1 else queue[0]
        response.request = httpx.Request("GET", URL)
        if response.status_code < 400:
            return response
        return raw_from_response(response, ctx=ctx)

    async def main() -> None:
        try:
            response = await executor.call(once, ctx=ctx, operation="users.get", circuit=name)
            seen.end = (str(response.status_code), None)
        except OperationError as failed:
            seen.end = (str(failed.event.raw_status), failed.event.code)

    anyio.run(main)
    return seen, endpoints.circuits.all()[name].state


@pytest.mark.parametrize("name", list(SEQUENCES))
def test_one_fault_sequence_gets_the_same_decisions_from_both_shells_and_the_daemon(name: str) -> None:
    sequence = SEQUENCES[name]
    sync_seen, sync_circuit = through_the_library(sequence, use_async=False)
    async_seen, async_circuit = through_the_library(sequence, use_async=True)
    daemon_seen, daemon_circuit = through_the_daemon(sequence)
    assert sync_seen.waits == async_seen.waits == daemon_seen.waits
    assert sync_seen.sent == async_seen.sent == daemon_seen.sent
    assert sync_seen.end == async_seen.end
    assert sync_seen.end[1] == daemon_seen.end[1]  # the code that ended it (the daemon raises it)
    assert sync_circuit == async_circuit == daemon_circuit
    assert daemon_seen.sent >= 1 and (name != "a storm then success" or sync_seen.waits[1] >= 7.0)


# -- @supervisor.resilient ---------------------------------------------------------------------------


def decorated_clock() -> tuple[FakeClock, list[float], object, object]:
    clock = FakeClock(start=1000.0)
    waits: list[float] = []

    def sleep(s: float) -> None:
        waits.append(s)
        clock.advance(s)

    async def async_sleep(s: float) -> None:
        sleep(s)

    return clock, waits, sleep, async_sleep


def test_a_sync_function_raising_httpx_errors_is_called_again_and_a_returned_failure_carries_its_event() -> (
    None
):
    clock, waits, sleep, _ = decorated_clock()
    raised = [httpx.ConnectError("refused"), httpx.ConnectTimeout("slow")]

    @supervisor.resilient(platform="cxone", operation="agent-state", clock=clock, sleep=sleep)  # type: ignore[arg-type]
    def call(x: int) -> httpx.Response:
        if raised:
            raise raised.pop(0)
        return httpx.Response(404, request=httpx.Request("GET", "https://api.example/x"))

    response = call(1)
    assert len(waits) == 2 and not raised
    assert response.extensions[EVENT_EXTENSION].code == "RESOURCE_NOT_FOUND"
    assert call.__name__ == "call"


def test_an_async_function_raising_a_websocket_close_is_retried_then_raises_sdk_error_from_it() -> None:
    import anyio

    clock, waits, _, async_sleep = decorated_clock()
    attempts: list[int] = []

    @supervisor.resilient(platform="genesys", operation="wm.send", clock=clock, async_sleep=async_sleep)  # type: ignore[arg-type]
    async def send() -> None:
        attempts.append(1)
        raise websockets.exceptions.ConnectionClosedError(Close(1011, "server error"), None)

    with pytest.raises(SdkError) as failed:
        anyio.run(send)
    assert isinstance(failed.value.__cause__, websockets.exceptions.ConnectionClosedError)
    assert failed.value.event.raw_status == 1011
    assert len(attempts) == 1 + len(waits) and len(attempts) > 1


def test_a_non_idempotent_function_is_called_again_only_when_nothing_was_done() -> None:
    clock, waits, sleep, _ = decorated_clock()
    raised: list[Exception] = [httpx.ConnectError("refused"), httpx.ReadTimeout("no answer")]

    @supervisor.resilient(platform="genesys", operation="create", idempotent=False, clock=clock, sleep=sleep)  # type: ignore[arg-type]
    def create() -> None:
        raise raised.pop(0)

    with pytest.raises(SdkError) as failed:
        create()
    assert failed.value.outcome_unknown and not raised and len(waits) == 1


def test_a_decorated_function_s_circuit_opens_and_refuses() -> None:
    clock, _, sleep, _ = decorated_clock()
    calls: list[int] = []

    @supervisor.resilient(platform="genesys", operation="flaky", clock=clock, sleep=sleep)  # type: ignore[arg-type]
    def flaky() -> httpx.Response:
        calls.append(1)
        return httpx.Response(500, request=httpx.Request("GET", "https://api.example/x"))

    flaky()  # 1 + 3 retries
    with pytest.raises(CircuitOpenError):
        flaky()
    assert len(calls) == 5


def test_a_decorated_function_s_hooks_get_stamina_s_details_and_scope_each_retry() -> None:
    from collections.abc import Iterator
    from contextlib import contextmanager

    clock, _, sleep, _ = decorated_clock()
    seen: list[supervisor.RetryDetails] = []
    inside: list[int] = []
    scoped = [False]

    @contextmanager
    def scope() -> Iterator[None]:
        scoped[0] = True
        yield
        scoped[0] = False

    def hook(details: supervisor.RetryDetails) -> object:
        seen.append(details)
        return scope()

    raised = [httpx.ConnectError("refused")]

    @supervisor.resilient(platform="cxone", operation="agent-state", clock=clock, sleep=sleep, hooks=[hook])  # type: ignore[arg-type, list-item]
    def call() -> str:
        inside.append(scoped[0])
        if raised:
            raise raised.pop(0)
        return "ok"

    assert call() == "ok"
    assert inside == [False, True]  # the retry ran inside the hook's context manager
    (details,) = seen
    assert (details.name, details.retry_num, details.caused_by.code) == (
        "cxone:agent-state",
        1,
        "CONNECTION_FAILED",
    )
