"""The library's httpx transport (docs/library.md; supervisor/http.py): each rule, decided by the core
the daemon uses, seen from what the inner transport was sent and what the caller got.

The inner transport is ``httpx.MockTransport`` (what reaches the wire is what it is handed); the
clock is a FakeClock the shells' sleep advances, so every wait is measured, none is slept.
"""

from __future__ import annotations

import email.utils
import itertools
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import anyio
import anyio.lowlevel
import httpx
import pytest

import supervisor
from supervisor.clock import FakeClock
from supervisor.errors import CircuitOpenError, SdkError
from supervisor.http import EVENT_EXTENSION, ResilientTransport
from supervisor.library.core import route_template
from supervisor.library.hooks import RetryDetails
from supervisor.library.tokens import Tokens
from supervisor.taxonomy import TaxonomyClass, Trigger
from tests.harness.clocks import SlowClock, advancing

API = "https://api.mypurecloud.com"
ATTRS = API + "/api/v2/conversations/5b0f4c4e-1111-2222-3333-444455556666/participants/p1/attributes"
CREATE = API + "/api/v2/conversations/messages/c1/communications/k1/messages"
USER = API + "/api/v2/users/2f8a3b9e-0000-4000-8000-000000000001"


class Wire:
    """The inner transport: answers in order (the last repeats); what was sent, and when."""

    def __init__(
        self, clock: FakeClock, *answers: httpx.Response | Exception | Callable[[], httpx.Response]
    ) -> None:
        self.clock = clock
        self.answers = list(answers)
        self.sent: list[tuple[float, str, str | None]] = []
        self._lock = threading.Lock()

    def __call__(self, request: httpx.Request) -> httpx.Response:
        with self._lock:
            self.sent.append((self.clock.monotonic(), request.method, request.headers.get("authorization")))
            answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        if callable(answer):
            return answer()
        return httpx.Response(answer.status_code, headers=answer.headers, content=answer.content)

    @property
    def times(self) -> list[float]:
        return [t for t, _m, _a in self.sent]


def transport(clock: FakeClock, wire: Wire, **kwargs: object) -> ResilientTransport:
    def sleep(seconds: float) -> None:
        clock.advance(seconds)

    kwargs.setdefault("platform", "genesys")
    return ResilientTransport(
        transport=httpx.MockTransport(wire),
        clock=clock,
        sleep=sleep,
        async_sleep=advancing(clock),
        **kwargs,  # type: ignore[arg-type]
    )


def too_many(retry_after: str | None = None) -> httpx.Response:
    headers = {} if retry_after is None else {"Retry-After": retry_after}
    return httpx.Response(429, headers=headers, json={"code": "too.many.requests", "status": 429})


# -- TRANSIENT: the class's budget, never before Retry-After -------------------------------------------


def test_a_429_storm_is_waited_out_never_earlier_than_retry_after_in_seconds_or_as_a_date(
    clock: FakeClock,
) -> None:
    start = clock.time()
    date = email.utils.formatdate(start + 3 + 20, usegmt=True)  # 20 s after the second answer
    due = email.utils.parsedate_to_datetime(date).timestamp() - start  # (whole seconds)
    wire = Wire(clock, too_many("3"), too_many(date), httpx.Response(200, json={"ok": True}))
    with httpx.Client(transport=transport(clock, wire)) as client:
        response = client.patch(ATTRS, json={"attributes": {"a": "1"}})
    assert response.status_code == 200
    first, second, third = wire.times
    assert second - first >= 3.0
    assert third - first >= due > 22
    assert EVENT_EXTENSION not in response.extensions  # a success carries no event


def test_a_retry_budget_spent_returns_the_last_answer_with_its_event(clock: FakeClock) -> None:
    wire = Wire(clock, httpx.Response(503, headers={"Retry-After": "1"}))
    with httpx.Client(transport=transport(clock, wire)) as client:
        response = client.get(USER)
    assert response.status_code == 503
    event = response.extensions[EVENT_EXTENSION]
    assert event.taxonomy_class is TaxonomyClass.TRANSIENT
    assert len(wire.sent) == 1 + event.max_retry_budget
    with pytest.raises(httpx.HTTPStatusError):
        response.raise_for_status()  # the caller's, as without the library


def test_a_permanent_answer_is_returned_at_once_with_its_event_and_the_caller_s_context(
    clock: FakeClock,
) -> None:
    wire = Wire(clock, httpx.Response(404, json={"code": "not.found", "status": 404}))
    context = {"conversationId": "conv-1", "agentId": "agent-1"}
    with httpx.Client(transport=transport(clock, wire, context=context)) as client:
        response = client.get(USER)
    assert response.status_code == 404
    event = response.extensions[EVENT_EXTENSION]
    assert event.code == "RESOURCE_NOT_FOUND"
    assert event.as_json()["context"] == {
        "conversationId": "conv-1",
        "agentId": "agent-1",
        "endpoint": "GET /api/v2/users/2f8a3b9e-0000-4000-8000-000000000001",
    }
    assert len(wire.sent) == 1


# -- POST and PATCH: sent again only when the failure shows nothing was done ---------------------------


def test_a_patch_is_not_sent_again_after_a_503_without_retry_after(clock: FakeClock) -> None:
    wire = Wire(clock, httpx.Response(503), httpx.Response(200))
    with httpx.Client(transport=transport(clock, wire)) as client:
        response = client.patch(ATTRS, json={})
    assert response.status_code == 503
    assert len(wire.sent) == 1


def test_a_patch_with_an_idempotency_key_is_sent_again_after_a_503(clock: FakeClock) -> None:
    wire = Wire(clock, httpx.Response(503), httpx.Response(200))
    with httpx.Client(transport=transport(clock, wire)) as client:
        response = client.patch(ATTRS, json={}, headers={"Idempotency-Key": "k-1"})
    assert response.status_code == 200
    assert len(wire.sent) == 2


@pytest.mark.parametrize(
    "first",
    [httpx.Response(503, headers={"Retry-After": "2"}), too_many("2"), httpx.ConnectError("refused")],
    ids=["503 with Retry-After", "429", "connect error"],
)
def test_a_post_is_sent_again_when_it_was_not_processed(clock: FakeClock, first: object) -> None:
    wire = Wire(clock, first, httpx.Response(200))  # type: ignore[arg-type]
    with httpx.Client(transport=transport(clock, wire)) as client:
        response = client.post(CREATE, json={"text": "hi"})
    assert response.status_code == 200
    assert len(wire.sent) == 2


def test_a_504_on_a_create_raises_outcome_unknown_and_is_sent_once(clock: FakeClock) -> None:
    wire = Wire(clock, httpx.Response(504), httpx.Response(200))
    with httpx.Client(transport=transport(clock, wire)) as client, pytest.raises(SdkError) as raised:
        client.post(CREATE, json={"text": "hi"})
    assert raised.value.outcome_unknown is True
    assert raised.value.event.reconcile_before_retry
    assert raised.value.event.as_json()["rawStatus"] == 504
    assert len(wire.sent) == 1


def test_a_read_timeout_on_a_post_raises_outcome_unknown(clock: FakeClock) -> None:
    wire = Wire(clock, httpx.ReadTimeout("no answer"), httpx.Response(200))
    with httpx.Client(transport=transport(clock, wire)) as client, pytest.raises(SdkError) as raised:
        client.post(CREATE, json={"text": "hi"})
    assert raised.value.outcome_unknown is True
    assert isinstance(raised.value.__cause__, httpx.ReadTimeout)
    assert len(wire.sent) == 1


def test_a_body_that_cannot_be_replayed_is_sent_once(clock: FakeClock) -> None:
    wire = Wire(clock, httpx.Response(503, headers={"Retry-After": "1"}), httpx.Response(200))

    def chunks() -> Iterator[bytes]:
        yield b'{"a": 1}'

    with httpx.Client(transport=transport(clock, wire)) as client:
        response = client.put(USER, content=chunks())
    assert response.status_code == 503
    assert len(wire.sent) == 1


# -- tokens: a 401 at the end of a token's life is replayed once, freshly signed --------------------------


def test_a_401_on_a_token_at_the_end_of_its_life_is_replayed_once_with_a_fresh_token(
    clock: FakeClock,
) -> None:
    issued: list[str] = []

    def fetch() -> tuple[str, float]:
        issued.append(f"t{len(issued) + 1}")
        return issued[-1], clock.time() + 3600

    def slow_401() -> httpx.Response:
        clock.advance(3600 - 200 - 1)  # the request took long enough for the token to near its end
        return httpx.Response(401, json={"code": "bad.credentials", "status": 401})

    wire = Wire(clock, slow_401, httpx.Response(200))
    with httpx.Client(transport=transport(clock, wire, token=fetch)) as client:
        response = client.get(USER)
    assert response.status_code == 200
    assert [a for _t, _m, a in wire.sent] == ["Bearer t1", "Bearer t2"]
    assert wire.times[1] == wire.times[0] + 3600 - 200 - 1  # at once, no backoff


def test_a_401_on_a_token_with_its_life_ahead_raises_the_fail_fast_trigger(clock: FakeClock) -> None:
    wire = Wire(clock, httpx.Response(401, json={"code": "bad.credentials", "status": 401}))
    tokens = transport(clock, wire, token=lambda: ("t", clock.time() + 3600))
    with httpx.Client(transport=tokens) as client, pytest.raises(SdkError) as raised:
        client.get(USER)
    assert raised.value.event.trigger is Trigger.OAUTH_TOKEN_INVALID
    assert len(wire.sent) == 1
    assert "Bearer" not in str(raised.value) and "Bearer" not in str(raised.value.event.as_json())


def test_raise_on_empty_returns_even_a_fail_fast_answer(clock: FakeClock) -> None:
    wire = Wire(clock, httpx.Response(401, json={"code": "bad.credentials", "status": 401}))
    t = transport(clock, wire, token=lambda: ("t", clock.time() + 3600), raise_on=())
    with httpx.Client(transport=t) as client:
        response = client.get(USER)
    assert response.extensions[EVENT_EXTENSION].trigger is Trigger.OAUTH_TOKEN_INVALID


def test_the_token_is_refreshed_early_and_once_for_sixteen_threads(clock: FakeClock) -> None:
    fetched = threading.Event()
    calls: list[float] = []

    def fetch() -> tuple[str, float]:
        calls.append(clock.monotonic())
        fetched.wait(0.05)  # long enough for the other threads to pile up behind the single flight
        return f"t{len(calls)}", clock.time() + 600

    tokens = Tokens(fetch, clock=clock)
    barrier = threading.Barrier(16)

    def one() -> str:
        barrier.wait()
        return tokens.get().access.reveal()

    with _threads(16, one) as results:
        pass
    assert calls == [1000.0] and set(results) == {"t1"}
    clock.advance(600 - 300 + 0.001)  # inside the 5 minutes before its end: refreshed before use
    assert tokens.get().access.reveal() == "t2"


# -- circuits per endpoint ----------------------------------------------------------------------------


def test_routes_name_the_endpoint_else_ids_become_id() -> None:
    assert route_template("/api/v2/users/2f8a3b9e-0000-4000-8000-000000000001/presence") == (
        "/api/v2/users/{id}/presence"
    )
    assert route_template("/incontactapi/services/v31.0/agent-sessions/123456/get-next-event") == (
        "/incontactapi/services/v31.0/agent-sessions/{id}/get-next-event"
    )


def test_five_failures_in_ten_seconds_open_the_endpoint_s_circuit_and_no_other(clock: FakeClock) -> None:
    wire = Wire(clock, httpx.Response(500))
    t = transport(clock, wire, routes=["/api/v2/users/{userId}"])
    with httpx.Client(transport=t) as client:
        assert client.get(USER).status_code == 500  # 1 + 3 retries: four failures
        with pytest.raises(CircuitOpenError):
            client.get(USER)  # the fifth opens it: its retry is refused
        assert len(wire.sent) == 5
        with pytest.raises(CircuitOpenError):
            client.get(API + "/api/v2/users/another")  # the same route template: refused
        assert len(wire.sent) == 5
        wire.answers = [httpx.Response(200)]
        assert client.get(API + "/api/v2/routing/queues").status_code == 200  # another endpoint
    assert [str(e) for e in t.core.endpoints.all()] == [
        "genesys:GET api.mypurecloud.com/api/v2/users/{userId}",
        "genesys:GET api.mypurecloud.com/api/v2/routing/queues",
    ]


def test_at_most_a_thousand_endpoints_are_kept_least_recently_used_first(clock: FakeClock) -> None:
    wire = Wire(clock, httpx.Response(200))
    t = transport(clock, wire)
    with httpx.Client(transport=t) as client:
        client.get(API + "/first")
        for n in range(1000):
            client.get(API + f"/route{n}")
            if n == 500:
                client.get(API + "/first")  # used again: kept
    names = {e.name for e in t.core.endpoints.all()}
    assert len(names) == 1000
    assert "GET api.mypurecloud.com/first" in names
    assert "GET api.mypurecloud.com/route0" not in names


@contextmanager
def _threads(n: int, fn: Callable[[], object]) -> Iterator[list[object]]:
    results: list[object] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            results.append(fn())
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    yield results + errors


@pytest.fixture
def switch_often() -> Iterator[None]:
    """Threads switched every microsecond (5 ms by default): a decision taken without its lock races."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


@pytest.mark.usefixtures("switch_often")
def test_sixteen_threads_see_one_probe_per_half_open_period() -> None:
    clock = SlowClock(start=1000.0)
    release = threading.Event()
    probes: list[float] = []

    def held() -> httpx.Response:
        probes.append(clock.monotonic())
        release.wait(5)  # the probe is out while the other fifteen ask
        return httpx.Response(500)

    wire = Wire(clock, httpx.Response(500))
    t = transport(clock, wire, raise_on=(TaxonomyClass.TRANSIENT,))
    with httpx.Client(transport=t) as client:
        with pytest.raises(SdkError):
            client.get(USER)  # four failures
        with pytest.raises(CircuitOpenError):
            client.get(USER)  # the fifth opens the circuit
        for period in range(2):
            clock.advance(30.0)  # the open period (the seed's 30 s): half-open, one probe
            wire.answers = [held]
            release.clear()
            barrier = threading.Barrier(16)

            def one(barrier: threading.Barrier = barrier) -> object:
                barrier.wait()
                return client.get(USER)

            with _threads_released(16, one, release) as outcomes:
                pass
            assert len(probes) == period + 1, f"period {period}: {len(probes)} probes"
            # fifteen refused at once; the probe failed, and its retry found the circuit open again
            assert [type(o) for o in outcomes] == [CircuitOpenError] * 16


@contextmanager
def _threads_released(n: int, fn: Callable[[], object], release: threading.Event) -> Iterator[list[object]]:
    """Run ``fn`` in ``n`` threads; once ``n - 1`` have ended (refused), release the one held."""
    results: list[object] = []
    lock = threading.Lock()

    def run() -> None:
        try:
            out: object = fn()
        except BaseException as exc:
            out = exc
        with lock:
            results.append(out)
            if len(results) == n - 1:
                release.set()

    threads = [threading.Thread(target=run) for _ in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    yield results


# -- hooks in stamina's shape -----------------------------------------------------------------------


def test_hooks_get_frozen_details_before_each_retry_and_scope_the_attempt(clock: FakeClock) -> None:
    seen: list[RetryDetails] = []
    scoped: list[str] = []

    @contextmanager
    def scope(details: RetryDetails) -> Iterator[None]:
        scoped.append(f"enter {details.retry_num}")
        yield
        scoped.append(f"exit {details.retry_num}")

    def hook(details: RetryDetails) -> object:
        seen.append(details)
        return scope(details)

    wire = Wire(clock, too_many("4"), httpx.Response(500), httpx.Response(200))
    with httpx.Client(transport=transport(clock, wire, hooks=[hook])) as client:
        assert client.get(USER).status_code == 200
    assert [d.retry_num for d in seen] == [1, 2]
    assert seen[0].wait_for >= 4.0 and seen[0].from_retry_after in (True, False)
    assert seen[0].caused_by.code == "RATE_LIMITED" and seen[1].caused_by.code == "SERVER_ERROR"
    assert seen[1].waited_so_far == seen[0].wait_for
    assert scoped == ["enter 1", "exit 1", "enter 2", "exit 2"]
    with pytest.raises(AttributeError):
        seen[0].retry_num = 9  # type: ignore[misc]


# -- the async client ---------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_the_async_client_gets_the_same_rules(clock: FakeClock) -> None:
    wire = Wire(clock, too_many("3"), httpx.Response(504), httpx.Response(200))
    async with httpx.AsyncClient(transport=transport(clock, wire)) as client:
        assert (await client.get(USER)).status_code == 200
        assert wire.times[1] - wire.times[0] >= 3.0
        wire.answers = [httpx.Response(504)]
        with pytest.raises(SdkError) as raised:
            await client.post(CREATE, json={})
        assert raised.value.outcome_unknown


def test_classify_is_public_and_reads_a_response_an_exception_or_an_envelope() -> None:
    request = httpx.Request("GET", USER)
    assert (
        supervisor.classify(httpx.Response(429, request=request), platform="genesys").code == "RATE_LIMITED"
    )
    assert (
        supervisor.classify(httpx.ConnectTimeout("slow"), platform="cxone").taxonomy_class
        is TaxonomyClass.TRANSIENT
    )
    event = supervisor.classify(
        {"platform": "genesys", "channel": "rest", "status": 404}, context={"conversationId": "c-1"}
    )
    assert event.code == "RESOURCE_NOT_FOUND" and event.as_json()["context"]["conversationId"] == "c-1"


def test_anyio_is_what_the_async_shell_sleeps_with() -> None:
    assert ResilientTransport("genesys")._async_sleep is anyio.sleep


@pytest.mark.anyio
async def test_twenty_callers_meeting_one_429_storm_do_not_open_the_circuit_and_wait_out_retry_after(
    clock: FakeClock,
) -> None:
    in_flight = anyio.Event()
    storm_answered = anyio.Event()
    sent: list[float] = []
    answered: list[float] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        sent.append(clock.monotonic())
        if len(sent) > 20:
            return httpx.Response(200)
        if len(sent) == 20:
            in_flight.set()
        await in_flight.wait()  # all twenty in flight when the storm answers, at one moment
        if not answered:
            clock.advance(0.05)  # the round trip
        answered.append(clock.monotonic())
        if len(answered) == 20:
            storm_answered.set()
        return too_many("1")

    async def async_sleep(seconds: float) -> None:
        # nobody's time moves before every caller has its 429; then each wakes at its own time
        wake = clock.monotonic() + seconds
        await storm_answered.wait()
        if clock.monotonic() < wake:
            clock.set(wake)
        await anyio.lowlevel.checkpoint()

    t = ResilientTransport(
        "genesys", transport=httpx.MockTransport(handler), clock=clock, async_sleep=async_sleep
    )
    statuses: list[int] = []
    async with httpx.AsyncClient(transport=t) as client:

        async def one() -> None:
            statuses.append((await client.get(USER)).status_code)

        async with anyio.create_task_group() as group:
            for _ in range(20):
                group.start_soon(one)
    assert set(answered) == {1000.05}
    # the twenty 429s of calls in flight together were one throttle for the circuit (its echo), not twenty
    assert statuses == [200] * 20
    assert min(sent[20:]) >= max(answered) + 1.0  # nobody went back before the Retry-After ended


def test_a_rate_window_spent_to_its_last_call_holds_the_next_call_until_it_starts_again(
    clock: FakeClock,
) -> None:
    spent = {"inin-ratelimit-count": "300", "inin-ratelimit-allowed": "300", "inin-ratelimit-reset": "7"}
    wire = Wire(clock, httpx.Response(200, headers=spent), httpx.Response(200))
    with httpx.Client(transport=transport(clock, wire)) as client:
        client.get(USER)
        client.get(USER)
    assert len(wire.sent) == 2
    # Genesys said the window is spent and starts again in 7 s: the second call waited for it, unrefused
    assert wire.times[1] - wire.times[0] >= 7.0


# -- the pace after a throttle: the caller's floor and recovery ------------------------------------------------


def paced_gaps(clock: FakeClock, calls: int, **options: object) -> list[float]:
    """Seconds between the calls that follow one throttle of a fresh endpoint (nothing admitted in the second
    before it, so the pace starts again from its floor), each call made as soon as the last one returned."""
    wire = Wire(clock, too_many("1"), httpx.Response(200))
    with httpx.Client(transport=transport(clock, wire, **options)) as client:
        for _ in range(calls):
            assert client.get(USER).status_code == 200
    times = wire.times
    assert times[1] - times[0] >= 1.0  # the Retry-After first, whatever the pace
    return [later - earlier for earlier, later in itertools.pairwise(times[1:])]


def test_the_pace_after_a_storm_starts_from_the_caller_s_floor(clock: FakeClock) -> None:
    assert paced_gaps(clock, 6, pace_floor=4.0, pace_recovery=0.0) == pytest.approx([0.25] * 5)


def test_the_pace_grows_back_by_the_caller_s_recovery(clock: FakeClock) -> None:
    # each admitted call adds half a call a second once the pace is in use: the first call after the hold grows
    # nothing (less than half the pace admitted in the second before it: RFC 7661's application-limited rule, the
    # pacer's, docs/runtime.md "Admission"), then 4, 4.5, 5 calls a second
    assert paced_gaps(clock, 5, pace_floor=4.0, pace_recovery=0.5) == pytest.approx(
        [1 / 4, 1 / 4, 1 / 4.5, 1 / 5]
    )


def test_the_library_s_default_floor_is_five_calls_a_second_growing_two_percent(clock: FakeClock) -> None:
    assert supervisor.http.PACE_FLOOR == 5.0
    # the pace grows once half of it (2.5 calls) was admitted in the second before: from the fourth call on
    assert paced_gaps(clock, 7) == pytest.approx([1 / 5.0, 1 / 5.0, 1 / 5.0, 1 / 5.02, 1 / 5.04, 1 / 5.06])


def test_a_decorated_function_s_pace_starts_from_the_caller_s_floor(clock: FakeClock) -> None:
    sent: list[float] = []
    throttled = too_many("1")
    throttled.request = httpx.Request("PATCH", ATTRS)  # (what raise_for_status and the envelope read)
    answers = [throttled]

    @supervisor.resilient(
        platform="genesys",
        operation="attributes",
        pace_floor=2.0,
        pace_recovery=0.0,
        clock=clock,
        sleep=clock.advance,
    )
    def call() -> httpx.Response:
        sent.append(clock.monotonic())
        return answers.pop() if answers else httpx.Response(200)

    for _ in range(4):
        assert call().status_code == 200
    assert sent[1] - sent[0] >= 1.0
    assert [b - a for a, b in itertools.pairwise(sent[1:])] == pytest.approx([0.5, 0.5, 0.5])


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"pace_floor": 0}, ValueError, "pace_floor must be within (0, 10000] (calls a second), got 0"),
        ({"pace_floor": -2.5}, ValueError, "pace_floor must be within (0, 10000] (calls a second), got -2.5"),
        (
            {"pace_floor": float("inf")},
            ValueError,
            "pace_floor must be within (0, 10000] (calls a second), got inf",
        ),
        (
            {"pace_floor": float("nan")},
            ValueError,
            "pace_floor must be within (0, 10000] (calls a second), got nan",
        ),
        (
            {"pace_floor": 20_000},
            ValueError,
            "pace_floor must be within (0, 10000] (calls a second), got 20000",
        ),
        ({"pace_floor": "5"}, TypeError, "pace_floor must be a number (calls a second), got '5'"),
        ({"pace_floor": True}, TypeError, "pace_floor must be a number (calls a second), got True"),
        (
            {"pace_recovery": -0.1},
            ValueError,
            "pace_recovery must be within [0, 1] (share of the pace added per second of admitted calls), got -0.1",
        ),
        (
            {"pace_recovery": None},
            TypeError,
            "pace_recovery must be a number (share of the pace added per second of admitted calls), got None",
        ),
    ],
)
def test_a_pace_option_out_of_range_is_a_one_line_error_naming_it(
    options: dict[str, object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as raised:
        ResilientTransport("genesys", **options)  # type: ignore[arg-type]
    assert str(raised.value) == message
    with pytest.raises(error) as raised:
        supervisor.resilient(platform="genesys", operation="x", **options)  # type: ignore[arg-type]
    assert str(raised.value) == message


class ShortTokens:
    """Tokens that live 200 s, named t1, t2, ... in the order fetched."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.issued: list[str] = []

    def __call__(self) -> tuple[str, float]:
        self.issued.append(f"t{len(self.issued) + 1}")
        return self.issued[-1], self.clock.time() + 200

    async def afetch(self) -> tuple[str, float]:
        return self()


def test_a_retry_is_signed_with_a_token_refreshed_when_less_than_a_minute_is_left(clock: FakeClock) -> None:
    # the Retry-After (150 s) leaves the first token 50 s of its 200: the retry needs one with a minute or more
    wire = Wire(clock, too_many("150"), httpx.Response(200))
    with httpx.Client(transport=transport(clock, wire, token=ShortTokens(clock))) as client:
        assert client.get(USER).status_code == 200
    assert [a for _t, _m, a in wire.sent] == ["Bearer t1", "Bearer t2"]
    assert wire.times[1] - wire.times[0] >= 150.0


@pytest.mark.anyio
async def test_an_async_retry_is_signed_with_a_token_refreshed_when_less_than_a_minute_is_left(
    clock: FakeClock,
) -> None:
    wire = Wire(clock, too_many("150"), httpx.Response(200))
    async with httpx.AsyncClient(transport=transport(clock, wire, token=ShortTokens(clock).afetch)) as client:
        assert (await client.get(USER)).status_code == 200
    assert [a for _t, _m, a in wire.sent] == ["Bearer t1", "Bearer t2"]
    assert wire.times[1] - wire.times[0] >= 150.0
