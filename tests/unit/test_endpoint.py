"""One endpoint's admission (docs/runtime.md, "One attempt path"; machines/endpoint.py), synchronous, on a fake clock.

Each attempt is asked, leaves and is answered through one :class:`Endpoint`: the echo rule, the
cut once per episode, the Retry-After hold, places in flight and the respacing of waiters, the
retry budget. Seeded randomness (the circuit's jitter) and no I/O.
"""

from __future__ import annotations

import random

import pytest

from machines.circuit import CircuitConfig
from machines.effects import CircuitHalfOpened, CircuitOpened
from machines.endpoint import GO, QUIET, Endpoint, EndpointKind, Refused, Ticket, Wait, throttles
from machines.pacing import PacingConfig
from machines.registry import CircuitRegistry, Endpoints
from supervisor.clock import FakeClock
from supervisor.taxonomy.model import RetryPolicy, Scope, SdkErrorEvent, TaxonomyClass
from supervisor.vocabulary import CircuitState, EndpointId, Platform

#: the endpoint these tests admit attempts to
EP = EndpointId(Platform.GENESYS, "ep")

RATE_LIMIT = RetryPolicy(
    name="rate_limit", max_retries=2, base_delay_ms=2000, max_delay_ms=8000, honors_retry_after=True
)
SERVER_ERROR = RetryPolicy(
    name="server_error", max_retries=3, base_delay_ms=1000, max_delay_ms=12_000, honors_retry_after=True
)


def failure(
    status: int = 429, retry_after_s: float | None = 2.0, code: str = "RATE_LIMITED"
) -> SdkErrorEvent:
    return SdkErrorEvent(
        timestamp="2024-05-14T09:32:11.004Z",
        source="GENESYS_PLATFORM_API",
        raw_status=status,
        raw_code=code,
        taxonomy_class=TaxonomyClass.TRANSIENT,
        retryable=True,
        max_retry_budget=2,
        context={},
        code=code,
        scope=Scope.OPERATION,
        taxonomy_version="test",
        policy=RATE_LIMIT if status == 429 else SERVER_ERROR,
        retry_after_ms=None if retry_after_s is None else int(retry_after_s * 1000),
    )


THROTTLE = failure()
BROWNOUT = failure(503, None, "SERVICE_UNAVAILABLE")  # a 5xx without Retry-After: not a throttle


def endpoints(clock: FakeClock, **config: object) -> Endpoints:
    circuits = CircuitRegistry(clock, CircuitConfig(), random.Random(7))
    return Endpoints(clock, circuits, **config)  # type: ignore[arg-type]


def connect(clock: FakeClock, rate: float = 1000.0, floor: int | None = 2, **pacing: object) -> Endpoint:
    config = PacingConfig(initial_rate=rate, in_flight_floor=floor, **pacing)  # type: ignore[arg-type]
    return endpoints(clock, connect=config, budget=(0.1, 5.0)).connect(EP)


def asked(endpoint: Endpoint, clock: FakeClock) -> Ticket | Refused:
    """Ask, moving the clock through every wait (the pace's slots), as a shell does."""
    answer = endpoint.ask()
    while isinstance(answer, Wait):
        clock.advance(answer.seconds)
        answer = endpoint.ask(answer.booking)
    return answer


def go(endpoint: Endpoint, clock: FakeClock) -> Ticket:
    answer = asked(endpoint, clock)
    assert isinstance(answer, Ticket), answer
    return answer


def test_the_hot_path_allocates_nothing_it_answers_shared_constants(clock: FakeClock) -> None:
    """A closed circuit on an unpaced endpoint: GO to ask, QUIET to a success (no transition)."""
    endpoint = endpoints(clock, rest=PacingConfig(initial_rate=None)).get(EndpointId(Platform.GENESYS, "api"))
    assert endpoint.ask() is GO
    assert endpoint.place() is None  # a REST endpoint keeps no places
    assert endpoint.answered(GO, None, clock.monotonic()) is QUIET


def test_a_throttle_cuts_the_pace_once_per_episode_and_holds_the_endpoint_for_its_retry_after(
    clock: FakeClock,
) -> None:

    endpoint = connect(clock, rate=100.0)
    sent = clock.monotonic()
    first = endpoint.answered(go(endpoint, clock), THROTTLE, sent)
    assert first.report is not None and first.report.reason == "throttled" and first.report.kind == "connect"
    assert first.report.paused_for_s == 2.0 and endpoint.held_for() == 2.0
    cut = endpoint.rate
    # a second throttle in the same episode: no second cut; it holds no longer, so no report at all
    clock.advance(0.5)
    again = endpoint.answered(GO, failure(retry_after_s=1.0), clock.monotonic())
    assert again.report is None and endpoint.rate == cut
    # nobody is admitted before the Retry-After has passed
    answer = endpoint.ask()
    assert isinstance(answer, Wait) and answer.slot
    assert clock.monotonic() + answer.seconds <= 1002.0 + 1e-9
    assert go(endpoint, clock) and clock.monotonic() >= 1002.0
    # past the episode, a further throttle is a new cut
    later = endpoint.answered(GO, THROTTLE, clock.monotonic())
    assert later.report is not None and later.report.reason == "throttled"
    assert endpoint.rate is not None and cut is not None and endpoint.rate < cut


def test_a_5xx_without_retry_after_is_a_failure_not_a_throttle(clock: FakeClock) -> None:
    endpoint = connect(clock, rate=100.0)
    assert not throttles(BROWNOUT) and throttles(THROTTLE)
    moves = endpoint.answered(go(endpoint, clock), BROWNOUT, clock.monotonic())
    assert moves.report is None and endpoint.held_for() == 0.0


def test_refusals_of_attempts_in_flight_at_the_cut_are_its_echoes_and_count_once(clock: FakeClock) -> None:
    """Six attempts leave together; the first refusal cuts the pace, the five in flight with it
    echo it (RFC 6582 section 3.2): the circuit counts one failure. Attempts sent after the cut
    count again, five of them open the circuit."""
    endpoint = connect(clock, rate=1000.0, floor=None)
    tickets = [go(endpoint, clock) for _ in range(6)]
    sent = clock.monotonic()
    clock.advance(0.3)
    opened = []
    for ticket in tickets:
        opened += [
            e for e in endpoint.answered(ticket, THROTTLE, sent).effects if isinstance(e, CircuitOpened)
        ]
    assert opened == []
    # the circuit heard one failure: four more (sent after the cut, each its own episode) open it
    for _ in range(4):
        clock.advance(1.5)
        ticket = go(endpoint, clock)
        sent = clock.monotonic()
        opened += [
            e for e in endpoint.answered(ticket, THROTTLE, sent).effects if isinstance(e, CircuitOpened)
        ]
    assert [e.consecutive_failures for e in opened] == [5]
    assert isinstance(asked(endpoint, clock), Refused)


def test_a_refused_half_open_probe_is_never_an_echo(clock: FakeClock) -> None:
    endpoint = connect(clock, rate=1000.0, floor=None)
    for _ in range(5):
        clock.advance(1.1)
        endpoint.answered(go(endpoint, clock), BROWNOUT, clock.monotonic())
    refused = asked(endpoint, clock)
    assert isinstance(refused, Refused) and refused.circuit_id == "circuit:genesys:ep"
    assert refused.retry_in_s == pytest.approx(30.0, abs=0.01)
    clock.advance(refused.retry_in_s)
    probe = go(endpoint, clock)
    assert probe.probe_id == 1 and any(isinstance(e, CircuitHalfOpened) for e in probe.effects)
    assert isinstance(asked(endpoint, clock), Refused)  # one probe at a time
    # the probe, sent before the endpoint's last cut, is refused for load: it reopens the circuit
    endpoint.answered(GO, THROTTLE, clock.monotonic())  # a cut right now
    moves = endpoint.answered(probe, THROTTLE, clock.monotonic() - 0.5)
    assert any(isinstance(e, CircuitOpened) for e in moves.effects)


def test_a_slot_booked_before_a_throttle_is_void_and_the_attempt_waits_for_the_hold(clock: FakeClock) -> None:
    endpoint = connect(clock, rate=2.0, floor=None)
    go(endpoint, clock)
    answer = endpoint.ask()  # the next slot, half a second away
    assert isinstance(answer, Wait) and answer.booking.booked and answer.seconds == pytest.approx(0.5)
    endpoint.answered(GO, failure(retry_after_s=5.0), clock.monotonic())  # meanwhile: hold 5 s
    clock.advance(answer.seconds)
    again = endpoint.ask(answer.booking)
    assert isinstance(again, Wait) and again.slot  # reserved anew, after the hold
    go(endpoint, clock)
    assert clock.monotonic() >= 1005.0


def test_a_slot_past_the_caller_deadline_is_said_before_anyone_waits_for_it(clock: FakeClock) -> None:
    endpoint = connect(clock, rate=1.0, floor=None)
    go(endpoint, clock)
    answer = endpoint.ask()
    assert isinstance(answer, Wait) and answer.slot and answer.booking.due == pytest.approx(1001.0)


def test_places_in_flight_are_capped_and_handed_over_first_come_first_served(clock: FakeClock) -> None:
    endpoint = connect(clock, floor=2)
    assert endpoint.keeps_places and endpoint.cap() == 2
    assert [endpoint.place(), endpoint.place()] == [True, True]
    assert endpoint.place() is False and endpoint.place() is False  # both wait
    assert (endpoint.in_flight, endpoint.waiting) == (2, 2)
    assert not endpoint.hand_over()  # full
    endpoint.release()
    # a newcomer queues behind the waiters even though a place is free: the first waiter gets it
    assert endpoint.place() is False
    assert endpoint.hand_over() and not endpoint.hand_over()
    assert (endpoint.in_flight, endpoint.waiting) == (2, 2)
    endpoint.withdraw()  # one waiter gave up
    endpoint.release()
    endpoint.release()
    assert endpoint.hand_over() and not endpoint.hand_over()
    assert (endpoint.in_flight, endpoint.waiting) == (1, 0)


def test_waiters_released_together_leave_a_send_slot_apart(clock: FakeClock) -> None:
    """Two waiters get their places in one batch after a 1 s stall: one goes, the other is spaced
    a send slot after it (Pacer.respace); one that got its place at once is not respaced."""
    endpoint = connect(clock, rate=10.0, floor=1, growth=1.0001)
    assert endpoint.respace(clock.monotonic()) == 0.0  # did not wait
    queued_at = clock.monotonic()
    clock.advance(1.0)
    assert endpoint.respace(queued_at) == 0.0
    assert endpoint.respace(queued_at) == pytest.approx(0.1 - PacingConfig().send_burst_s, abs=1e-3)


def test_a_success_probes_the_pace_up_with_its_round_trip(clock: FakeClock) -> None:
    endpoint = connect(clock, rate=10.0, floor=2)
    for _ in range(10):
        ticket = go(endpoint, clock)
        endpoint.answered(ticket, None, clock.monotonic() - 0.05)
    assert endpoint.rate == pytest.approx(20.0)  # slow start: one rate's worth doubles it
    # the shortest round trip (50 ms) and what it admits set the cap: never below the floor
    assert endpoint.cap() == 2


def test_without_adaptive_pacing_a_retry_after_is_kept_for_readers_but_holds_no_attempt(
    clock: FakeClock,
) -> None:
    endpoint = endpoints(clock, budget=(0.1, 5.0)).get(EndpointId(Platform.GENESYS, "api"))
    endpoint.answered(GO, failure(retry_after_s=3.0), clock.monotonic())
    assert endpoint.held_for() == 3.0  # what the attribute tenant waits on
    assert endpoint.ask() is GO  # admission not adaptive: the endpoint itself is not held


def test_the_retry_budget_counts_calls_and_refuses_retries_past_its_share(clock: FakeClock) -> None:
    endpoint = endpoints(clock, budget=(0.5, 0.0)).get(EP)
    for _ in range(4):
        endpoint.called()
    assert [endpoint.may_retry() for _ in range(3)] == [True, True, False]  # half of 4 calls
    token = endpoints(clock, budget=(0.0, 0.0)).token(EndpointId(Platform.GENESYS, "oauth"))
    assert all(token.may_retry() for _ in range(5))  # a token endpoint has no budget
    assert token.rate is None and not token.keeps_places


def test_each_endpoint_is_one_kind_and_each_kind_holds_what_it_admits(clock: FakeClock) -> None:
    made = endpoints(
        clock,
        connect=PacingConfig(initial_rate=20.0, in_flight_floor=128),
        rest=PacingConfig(initial_rate=None),
    )
    wm = made.connect(EndpointId(Platform.GENESYS, "webmessaging"))
    assert (wm.kind, wm.rate, wm.cap()) == (EndpointKind.CONNECT, 20.0, 128)
    api = made.get(EndpointId(Platform.GENESYS, "api"))
    assert (api.kind, api.rate, api.cap(), api.keeps_places) == (EndpointKind.REST, None, None, False)
    assert made.get(EndpointId(Platform.GENESYS, "webmessaging")) is wm  # asked by name: the endpoint as made
    with pytest.raises(ValueError, match="connect endpoint, not token"):
        made.token(EndpointId(Platform.GENESYS, "webmessaging"))
    assert made.circuits.get(EndpointId(Platform.GENESYS, "api")).state is CircuitState.CLOSED
    assert {str(name): endpoint for name, endpoint in made.all().items()} == {
        "genesys:webmessaging": wm,
        "genesys:api": api,
    }


def test_a_lost_connection_restarts_the_pace_from_its_initial_rate(clock: FakeClock) -> None:
    endpoint = connect(clock, rate=10.0, floor=None)
    for _ in range(10):
        endpoint.answered(go(endpoint, clock), None, clock.monotonic())
    clock.advance(5.0)  # quiet
    report = endpoint.lost()
    assert report is not None and report.reason == "restart" and report.rate == 10.0


def test_the_pace_does_not_grow_while_attempts_wait_for_a_place_in_flight(clock: FakeClock) -> None:
    """Callers queue at the pace, but attempts also wait for a place (the cap of 2 is full: answers
    come back slower than the pace sends): the cap is the bound, and admissions do not grow the pace.
    Once nobody waits for a place, they grow it again (slow start)."""
    endpoint = connect(clock, rate=10.0, floor=2)
    tickets = [go(endpoint, clock) for _ in range(2)]
    assert [endpoint.place(), endpoint.place(), endpoint.place()] == [True, True, False]
    endpoint.ask()  # a caller queued at the pace: the pace would be the bound
    for ticket in tickets:
        endpoint.release()
        endpoint.answered(ticket, None, clock.monotonic() - 0.05)
    assert endpoint.rate == 10.0
    assert endpoint.hand_over()
    endpoint.release()
    endpoint.release()
    assert endpoint.waiting == 0
    ticket = go(endpoint, clock)
    endpoint.ask()
    endpoint.answered(ticket, None, clock.monotonic() - 0.05)
    assert endpoint.rate == pytest.approx(11.0)


def test_connect_endpoints_keep_and_take_a_learned_limit_rest_endpoints_neither(clock: FakeClock) -> None:
    """A throttle teaches both kinds a limit; only the connect endpoint's is told for the next start
    (Endpoints.learned), and a seed paces a connect endpoint made before or after it, never a REST one."""
    made = endpoints(
        clock,
        connect=PacingConfig(initial_rate=100.0, in_flight_floor=2),
        rest=PacingConfig(initial_rate=None),
    )
    handshakes, api = made.connect(EP), made.get(EndpointId(Platform.GENESYS, "api"))
    handshakes.answered(go(handshakes, clock), THROTTLE, clock.monotonic())
    api.answered(go(api, clock), THROTTLE, clock.monotonic())
    assert handshakes.learned() == pytest.approx(100.0) and api.learned() is not None
    assert made.learned() == {EP: pytest.approx(100.0)}

    later = endpoints(
        clock,
        connect=PacingConfig(initial_rate=100.0, in_flight_floor=2),
        rest=PacingConfig(initial_rate=None),
    )
    before = later.connect(EndpointId(Platform.CXONE, "agent-sessions"))
    limits = {
        EP: 40.0,
        EndpointId(Platform.CXONE, "agent-sessions"): 60.0,
        EndpointId(Platform.GENESYS, "api"): 5.0,
    }
    later.seed(limits)
    assert before.rate == pytest.approx(51.0) and before.learned() == pytest.approx(60.0)
    assert later.connect(EP).rate == pytest.approx(34.0)
    assert later.get(EndpointId(Platform.GENESYS, "api")).rate is None
