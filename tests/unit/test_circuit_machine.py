"""The circuit machine's rules (docs/machines.md), on a fake clock: seed section 2's breaker."""

from __future__ import annotations

import random
from typing import Any

import msgspec
import pytest
from statemachine.exceptions import TransitionNotAllowed

from machines.circuit import ADMITTED, Circuit, CircuitConfig, CircuitMachine
from machines.effects import (
    CircuitClosed,
    CircuitEffect,
    CircuitHalfOpened,
    CircuitManual,
    CircuitOpened,
    CircuitTransition,
    InputRejected,
)
from supervisor.clock import FakeClock, iso_utc
from supervisor.events import ManualAction
from supervisor.taxonomy.model import RetryPolicy, Scope, SdkErrorEvent, TaxonomyClass
from supervisor.vocabulary import CircuitState

T = TaxonomyClass
POLICY = RetryPolicy(name="server-error", max_retries=3, base_delay_ms=1000, max_delay_ms=12_000)


def make_event(cls: TaxonomyClass = T.TRANSIENT, code: str = "SERVICE_UNAVAILABLE") -> SdkErrorEvent:
    return SdkErrorEvent(
        timestamp="2024-05-14T09:32:11.004Z",
        source="GENESYS_PLATFORM_API",
        raw_status=503,
        raw_code=code,
        taxonomy_class=cls,
        retryable=cls is T.TRANSIENT,
        max_retry_budget=3,
        context={},
        code=code,
        scope=Scope.OPERATION,
        taxonomy_version="test",
        policy=POLICY,
    )


FAIL = make_event()
PERMANENT = make_event(T.PERMANENT, "NOT_FOUND")
EMPTY_POLL = make_event(T.NONE, "EMPTY_POLL")
# a 401 on a token our clock let lapse (taxonomy v2's TOKEN_EXPIRED): TRANSIENT, but no sign of
# the endpoint's health (docs/taxonomy.md, "The 401 rule")
LAPSED = msgspec.structs.replace(make_event(T.TRANSIENT, "TOKEN_EXPIRED"), circuit_neutral=True)


def telemetry(effects: tuple[CircuitEffect, ...], kind: type[Any]) -> list[Any]:
    return [e for e in effects if isinstance(e, kind)]


def new_circuit(clock: FakeClock, seed: int = 3, **config: Any) -> Circuit:
    return Circuit("GET /api/v2/conversations", clock, random.Random(seed), CircuitConfig(**config))


def trip(circuit: Circuit, clock: FakeClock, n: int = 5, every_s: float = 1.0) -> tuple[CircuitEffect, ...]:
    effects: tuple[CircuitEffect, ...] = ()
    for i in range(n):
        if i:
            clock.advance(every_s)
        effects = circuit.record_failure(FAIL)
    return effects


# -- closed -> open -------------------------------------------------------------------------------


def test_closed_admits_everyone_without_allocating(clock: FakeClock) -> None:
    circuit = new_circuit(clock)
    assert circuit.state is CircuitState.CLOSED
    assert circuit.admit() is ADMITTED
    assert ADMITTED.allowed
    assert not ADMITTED.probe
    assert circuit.record_success() == ()


def test_five_consecutive_transient_failures_within_ten_seconds_open_it(clock: FakeClock) -> None:
    circuit = new_circuit(clock)
    assert trip(circuit, clock, n=4, every_s=2.0) == ()
    assert circuit.state is CircuitState.CLOSED
    clock.advance(2.0)  # the fifth, 8 s after the first
    effects = circuit.record_failure(FAIL)
    assert circuit.state is CircuitState.OPEN
    transition = effects[0]
    assert isinstance(transition, CircuitTransition)
    assert (transition.source, transition.target, transition.trigger) == ("closed", "open", "trip")
    (opened,) = telemetry(effects, CircuitOpened)
    assert opened.fields()["consecutiveFailures"] == 5
    assert opened.fields()["openS"] == 30.0
    assert opened.fields()["circuitId"] == "GET /api/v2/conversations"


def test_five_failures_spread_over_more_than_ten_seconds_do_not_open_it(clock: FakeClock) -> None:
    circuit = new_circuit(clock)
    assert trip(circuit, clock, n=5, every_s=2.6) == ()  # 10.4 s from first to fifth
    assert circuit.state is CircuitState.CLOSED
    # the window slides: the last five now span 2.6 s .. 11 s, 8.4 s, so the sixth opens it
    clock.advance(0.6)
    circuit.record_failure(FAIL)
    assert circuit.state is CircuitState.OPEN


def test_five_failures_exactly_ten_seconds_apart_end_to_end_open_it(clock: FakeClock) -> None:
    circuit = new_circuit(clock)
    trip(circuit, clock, n=5, every_s=2.5)
    assert circuit.state is CircuitState.OPEN


def test_a_success_while_closed_resets_the_count(clock: FakeClock) -> None:
    circuit = new_circuit(clock)
    trip(circuit, clock, n=4, every_s=0.1)
    assert circuit.consecutive_failures == 4
    circuit.record_success()
    assert circuit.consecutive_failures == 0
    trip(circuit, clock, n=4, every_s=0.1)
    assert circuit.state is CircuitState.CLOSED


def test_none_never_counts_and_is_a_success(clock: FakeClock) -> None:
    circuit = new_circuit(clock)
    for _ in range(10):
        circuit.record_failure(EMPTY_POLL)
    assert circuit.consecutive_failures == 0
    trip(circuit, clock, n=4, every_s=0.1)
    circuit.record_failure(EMPTY_POLL)
    circuit.record_failure(FAIL)
    assert circuit.state is CircuitState.CLOSED


def test_permanent_failures_neither_count_nor_reset(clock: FakeClock) -> None:
    circuit = new_circuit(clock)
    for _ in range(10):
        assert circuit.record_failure(PERMANENT) == ()
    assert circuit.state is CircuitState.CLOSED
    trip(circuit, clock, n=4, every_s=0.1)
    circuit.record_failure(PERMANENT)
    circuit.record_failure(FAIL)
    assert circuit.state is CircuitState.OPEN


def test_circuit_neutral_transient_failures_neither_count_nor_reset(clock: FakeClock) -> None:
    circuit = new_circuit(clock)
    for _ in range(10):
        assert circuit.record_failure(LAPSED) == ()
    assert circuit.state is CircuitState.CLOSED and circuit.consecutive_failures == 0
    trip(circuit, clock, n=4, every_s=0.1)
    circuit.record_failure(LAPSED)
    assert circuit.consecutive_failures == 4  # not a success either: the count stays
    circuit.record_failure(FAIL)
    assert circuit.state is CircuitState.OPEN


# -- open -> half_open: one probe -----------------------------------------------------------------


def test_open_refuses_and_says_how_long_remains(clock: FakeClock) -> None:
    circuit = new_circuit(clock)
    trip(circuit, clock, every_s=0.0)
    clock.advance(12.0)
    admission = circuit.admit()
    assert not admission.allowed
    assert admission.retry_in_s == pytest.approx(18.0)
    assert circuit.retry_in_s() == pytest.approx(18.0)


def test_after_the_open_period_exactly_one_probe_is_admitted(clock: FakeClock) -> None:
    circuit = new_circuit(clock)
    trip(circuit, clock, every_s=0.0)
    clock.advance(30.0)
    probe = circuit.admit()
    assert probe.allowed
    assert probe.probe
    assert probe.probe_id == 1
    assert circuit.state is CircuitState.HALF_OPEN
    assert circuit.probe_in_flight
    assert telemetry(probe.effects, CircuitHalfOpened)
    # a second, concurrent caller is refused at once and told how long the probe may take
    clock.advance(4.0)
    second = circuit.admit()
    assert not second.allowed
    assert not second.probe
    assert second.retry_in_s == pytest.approx(6.0)  # probe_timeout_s 10 - 4


def test_probe_success_closes_it(clock: FakeClock) -> None:
    circuit = new_circuit(clock)
    trip(circuit, clock, every_s=0.0)
    clock.advance(30.0)
    probe = circuit.admit()
    effects = circuit.record_success(probe.probe_id)
    assert circuit.state is CircuitState.CLOSED
    assert telemetry(effects, CircuitClosed)
    assert circuit.admit() is ADMITTED
    assert circuit.consecutive_failures == 0


def test_probe_failure_reopens_it(clock: FakeClock) -> None:
    circuit = new_circuit(clock)
    trip(circuit, clock, every_s=0.0)
    clock.advance(30.0)
    probe = circuit.admit()
    effects = circuit.record_failure(FAIL, probe.probe_id)
    assert circuit.state is CircuitState.OPEN
    (opened,) = telemetry(effects, CircuitOpened)
    assert opened.fields()["reason"] == "PROBE_FAILED"
    assert circuit.admit().retry_in_s == pytest.approx(30.0)


def test_a_probe_answered_with_a_non_transient_failure_closes_it(clock: FakeClock) -> None:
    circuit = new_circuit(clock)
    trip(circuit, clock, every_s=0.0)
    clock.advance(30.0)
    probe = circuit.admit()
    circuit.record_failure(PERMANENT, probe.probe_id)  # the endpoint answered
    assert circuit.state is CircuitState.CLOSED


def test_a_probe_answered_with_a_circuit_neutral_failure_closes_it(clock: FakeClock) -> None:
    circuit = new_circuit(clock)
    trip(circuit, clock, every_s=0.0)
    clock.advance(30.0)
    probe = circuit.admit()
    circuit.record_failure(LAPSED, probe.probe_id)  # the endpoint answered; our token had lapsed
    assert circuit.state is CircuitState.CLOSED
    # so the replay with a fresh token is admitted, not refused behind a probe nobody will report
    assert circuit.admit() is ADMITTED


def test_probe_timeout_reopens_it(clock: FakeClock) -> None:
    circuit = new_circuit(clock)
    trip(circuit, clock, every_s=0.0)
    clock.advance(30.0)
    probe = circuit.admit()
    clock.advance(10.0)
    effects = circuit.probe_timed_out(probe.probe_id)
    assert circuit.state is CircuitState.OPEN
    assert telemetry(effects, CircuitOpened)[0].fields()["reason"] == "PROBE_TIMEOUT"
    # its answer, arriving later, is stale and changes nothing
    assert circuit.record_success(probe.probe_id) == ()
    assert circuit.state is CircuitState.OPEN


def test_a_hung_probe_is_timed_out_by_admit_when_nobody_reports_it(clock: FakeClock) -> None:
    circuit = new_circuit(clock)
    trip(circuit, clock, every_s=0.0)
    clock.advance(30.0)
    circuit.admit()
    clock.advance(10.0)
    admission = circuit.admit()
    assert not admission.allowed
    assert circuit.state is CircuitState.OPEN
    assert admission.retry_in_s == pytest.approx(30.0)
    assert telemetry(admission.effects, CircuitOpened)


def test_late_outcomes_of_calls_admitted_before_the_trip_do_not_move_it(clock: FakeClock) -> None:
    circuit = new_circuit(clock)
    trip(circuit, clock, every_s=0.0)
    assert circuit.record_success() == ()
    assert circuit.record_failure(FAIL) == ()
    assert circuit.state is CircuitState.OPEN
    clock.advance(30.0)
    circuit.admit()
    assert circuit.record_success() == ()  # not the probe
    assert circuit.record_failure(FAIL) == ()
    assert circuit.state is CircuitState.HALF_OPEN


def test_a_probe_id_never_issued_is_rejected(clock: FakeClock) -> None:
    circuit = new_circuit(clock)
    with pytest.raises(InputRejected):
        circuit.record_success(probe_id=1)
    with pytest.raises(InputRejected):
        circuit.probe_timed_out(7)


# -- configuration --------------------------------------------------------------------------------


def test_all_numbers_come_from_config(clock: FakeClock) -> None:
    circuit = new_circuit(clock, failure_threshold=3, window_s=1.0, open_s=5.0, probe_timeout_s=2.0)
    trip(circuit, clock, n=3, every_s=0.6)  # 1.2 s: outside the 1 s window
    assert circuit.state is CircuitState.CLOSED
    trip(circuit, clock, n=2, every_s=0.3)
    assert circuit.state is CircuitState.OPEN
    clock.advance(5.0)
    probe = circuit.admit()
    assert probe.probe
    assert circuit.admit().retry_in_s == pytest.approx(2.0)


def test_open_period_is_constant_by_default(clock: FakeClock) -> None:
    circuit = new_circuit(clock)
    trip(circuit, clock, every_s=0.0)
    for _ in range(4):
        clock.advance(30.0)
        probe = circuit.admit()
        effects = circuit.record_failure(FAIL, probe.probe_id)
        assert telemetry(effects, CircuitOpened)[0].fields()["openS"] == 30.0


def test_optional_growth_lengthens_repeated_trips_with_a_cap_and_resets_on_recovery(clock: FakeClock) -> None:
    circuit = new_circuit(clock, growth=True, growth_factor=2.0, max_open_s=100.0)
    opened = telemetry(trip(circuit, clock, every_s=0.0), CircuitOpened)
    periods = [opened[0].fields()["openS"]]
    for _ in range(3):
        clock.advance(periods[-1])
        probe = circuit.admit()
        assert probe.probe
        effects = circuit.record_failure(FAIL, probe.probe_id)
        periods.append(telemetry(effects, CircuitOpened)[0].fields()["openS"])
    assert periods == [30.0, 60.0, 100.0, 100.0]
    clock.advance(100.0)
    circuit.record_success(circuit.admit().probe_id)
    opened = telemetry(trip(circuit, clock, every_s=0.0), CircuitOpened)
    assert opened[0].fields()["openS"] == 30.0


def test_optional_growth_jitter_stays_within_bounds(clock: FakeClock) -> None:
    for seed in range(50):
        circuit = new_circuit(clock, seed, growth=True, jitter_s=5.0)
        (opened,) = telemetry(trip(circuit, clock, every_s=0.0), CircuitOpened)
        assert 30.0 <= opened.fields()["openS"] <= 35.0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"failure_threshold": 0},
        {"window_s": -1.0},
        {"open_s": -1.0},
        {"growth_factor": 0.5},
        {"jitter_s": -1},
    ],
)
def test_circuit_config_rejects_nonsense(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="must"):
        CircuitConfig(**kwargs)


def test_the_machine_class_is_strict() -> None:
    sm = CircuitMachine()
    for event in ("probe", "probe_succeeded", "probe_failed"):
        with pytest.raises(TransitionNotAllowed):
            sm.send(event)
    sm.send("trip")
    with pytest.raises(TransitionNotAllowed):
        sm.send("trip")


# -- manual control: isolated, close, reset (docs/runtime.md, "Manual circuit control") ------------


def manual(effects: tuple[CircuitEffect, ...]) -> CircuitManual:
    (found,) = telemetry(effects, CircuitManual)
    return found


@pytest.mark.parametrize("start", ["closed", "open", "half_open"])
def test_isolate_from_any_state_refuses_everyone_as_isolated(clock: FakeClock, start: str) -> None:
    circuit = new_circuit(clock)
    if start != "closed":
        trip(circuit, clock)
    if start == "half_open":
        clock.advance(30.0)
        assert circuit.admit().probe
    previous = circuit.state
    effects = circuit.isolate()
    assert circuit.state is CircuitState.ISOLATED
    (moved,) = telemetry(effects, CircuitTransition)
    assert (moved.source, moved.target, moved.trigger) == (previous, CircuitState.ISOLATED, "isolate")
    event = manual(effects)
    assert (event.action, event.previous, event.state) == (
        ManualAction.ISOLATE,
        previous,
        CircuitState.ISOLATED,
    )
    assert event.for_s is None and event.until is None
    # nobody gets in, however long it lasts, and the refusal says it is an isolation
    for _ in range(3):
        clock.advance(3600.0)
        admission = circuit.admit()
        assert not admission.allowed and admission.isolated and not admission.probe
        # an isolation without an end is asked again every open period, as an open circuit is
        assert admission.retry_in_s == pytest.approx(30.0)
    assert not telemetry(effects, CircuitOpened)  # nobody's failure: no CIRCUIT_BREAKER_OPEN


def test_an_isolated_circuit_counts_no_failure_and_ignores_a_late_probe(clock: FakeClock) -> None:
    circuit = new_circuit(clock)
    trip(circuit, clock)
    clock.advance(30.0)
    probe = circuit.admit()
    circuit.isolate()
    # the probe handed out before the isolation answers late: nothing moves
    assert circuit.record_failure(FAIL, probe.probe_id) == ()
    assert circuit.record_success(probe.probe_id) == ()
    for _ in range(10):
        assert circuit.record_failure(FAIL) == ()
    assert circuit.state is CircuitState.ISOLATED


def test_close_ends_an_isolation_and_keeps_the_counters(clock: FakeClock) -> None:
    circuit = new_circuit(clock, growth=True)
    trip(circuit, clock)
    circuit.isolate()
    effects = circuit.close()
    assert circuit.state is CircuitState.CLOSED
    event = manual(effects)
    assert (event.action, event.previous, event.state) == (
        ManualAction.CLOSE,
        CircuitState.ISOLATED,
        CircuitState.CLOSED,
    )
    assert circuit.admit() is ADMITTED
    # the trips counted before the isolation still lengthen the next open period (growth)
    assert circuit.trips == 1
    opened = telemetry(trip(circuit, clock), CircuitOpened)
    assert opened[0].trips == 2 and opened[0].open_s == pytest.approx(60.0)


@pytest.mark.parametrize("start", ["closed", "open", "half_open"])
def test_close_is_refused_unless_isolated(clock: FakeClock, start: str) -> None:
    circuit = new_circuit(clock)
    if start != "closed":
        trip(circuit, clock)
    if start == "half_open":
        clock.advance(30.0)
        circuit.admit()
    with pytest.raises(InputRejected):
        circuit.close()


def test_reset_closes_from_any_state_and_clears_the_counters(clock: FakeClock) -> None:
    circuit = new_circuit(clock, growth=True)
    trip(circuit, clock)
    assert circuit.trips == 1
    effects = circuit.reset()
    event = manual(effects)
    assert (event.action, event.previous, event.state) == (
        ManualAction.RESET,
        CircuitState.OPEN,
        CircuitState.CLOSED,
    )
    assert circuit.state is CircuitState.CLOSED and circuit.admit() is ADMITTED
    assert circuit.trips == 0
    # the next trip is a first trip again: its open period is the base one
    opened = telemetry(trip(circuit, clock), CircuitOpened)
    assert opened[0].trips == 1 and opened[0].open_s == pytest.approx(30.0)
    # and from closed, the run of failures is cleared
    circuit.reset()
    for _ in range(4):
        circuit.record_failure(FAIL)
    circuit.reset()
    assert circuit.consecutive_failures == 0
    assert circuit.record_failure(FAIL) == ()
    # and from isolated
    circuit.isolate(60.0)
    assert manual(circuit.reset()).previous is CircuitState.ISOLATED
    assert circuit.state is CircuitState.CLOSED and circuit.isolated_until is None


def test_an_isolation_for_a_period_ends_by_itself(clock: FakeClock) -> None:
    circuit = new_circuit(clock)
    effects = circuit.isolate(600.0)
    event = manual(effects)
    assert event.for_s == 600.0 and event.until == iso_utc(clock.time() + 600.0)
    assert circuit.isolated_until == pytest.approx(clock.monotonic() + 600.0)
    clock.advance(590.0)
    admission = circuit.admit()
    assert not admission.allowed and admission.isolated
    assert admission.retry_in_s == pytest.approx(10.0)  # the end comes before an open period
    assert circuit.expire() == ()  # not yet
    clock.advance(10.0)
    ended = circuit.expire()
    assert manual(ended).action is ManualAction.EXPIRE
    (moved,) = telemetry(ended, CircuitTransition)
    assert moved.trigger == "isolation_ended"
    assert circuit.state is CircuitState.CLOSED and circuit.admit() is ADMITTED


def test_the_first_admit_after_the_period_ends_the_isolation_and_is_admitted(clock: FakeClock) -> None:
    circuit = new_circuit(clock)
    circuit.isolate(5.0)
    clock.advance(5.0)
    admission = circuit.admit()
    assert admission.allowed and not admission.isolated
    assert manual(admission.effects).action is ManualAction.EXPIRE
    assert circuit.state is CircuitState.CLOSED


def test_isolating_again_moves_only_the_end(clock: FakeClock) -> None:
    circuit = new_circuit(clock)
    circuit.isolate(5.0)
    effects = circuit.isolate()  # until closed now
    assert telemetry(effects, CircuitTransition) == []
    assert manual(effects).previous is CircuitState.ISOLATED
    clock.advance(60.0)
    assert circuit.expire() == () and circuit.state is CircuitState.ISOLATED
    assert circuit.isolated_until is None


@pytest.mark.parametrize("for_s", [0.0, -1.0, float("inf"), float("nan")])
def test_an_isolation_lasts_a_positive_finite_time(clock: FakeClock, for_s: float) -> None:
    circuit = new_circuit(clock)
    with pytest.raises(ValueError, match="positive"):
        circuit.isolate(for_s)
    assert circuit.state is CircuitState.CLOSED


def test_the_machine_has_no_always_closed_state() -> None:
    # isolated is the one manual state, and every state leads back to closed by reset
    assert {s.value for s in CircuitMachine.states} == set(CircuitState)
    sm = CircuitMachine()
    sm.send("isolate")
    with pytest.raises(TransitionNotAllowed):
        sm.send("trip")
    sm.send("close")
    assert sm.current_state_value is CircuitState.CLOSED
