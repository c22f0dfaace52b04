"""The session machine's rules (docs/machines.md), each on a fake clock with a seeded RNG."""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest
from statemachine.exceptions import TransitionNotAllowed

from machines.effects import (
    REVOKE_AND_REAUTHENTICATE,
    Effect,
    InputRejected,
    MachineError,
    Reconnect,
    ReconnectionThrottled,
    RetryAttempt,
    RetryExhausted,
    RetrySuccess,
    ScheduleReconnect,
    SessionHandedOver,
    SessionTerminated,
    SessionTransition,
    TerminationReason,
    iso_utc,
)
from machines.session import MOVES, SessionConfig, SessionCore, SessionMachine
from supervisor.clock import FakeClock
from supervisor.errors import SupervisorError
from supervisor.retry.backoff import backoff_delay_ms
from supervisor.taxonomy.model import Jitter, RetryPolicy, Scope, SdkErrorEvent, TaxonomyClass, Trigger
from supervisor.vocabulary import SessionState

T = TaxonomyClass
RECONNECT = RetryPolicy(name="websocket-reconnect", max_retries=5, base_delay_ms=1000, max_delay_ms=16_000)
RATE = RetryPolicy(
    name="rate-limit", max_retries=2, base_delay_ms=2000, max_delay_ms=8000, honors_retry_after=True
)
NO_RETRY = RetryPolicy(name="none", max_retries=0)


def make_event(
    code: str = "ABNORMAL_CLOSURE",
    cls: TaxonomyClass = T.TRANSIENT,
    *,
    scope: Scope = Scope.SESSION,
    trigger: Trigger | None = None,
    reconnect: bool = False,
    raw_status: int | None = None,
    raw_code: str | None = None,
    policy: RetryPolicy = RECONNECT,
    retry_after_ms: int | None = None,
    context: dict[str, Any] | None = None,
    graceful: bool = False,
) -> SdkErrorEvent:
    return SdkErrorEvent(
        timestamp="2024-05-14T09:32:11.004Z",
        source="GENESYS_WEB_MESSAGING_V4",
        raw_status=raw_status,
        raw_code=raw_code,
        taxonomy_class=cls,
        retryable=cls is T.TRANSIENT and policy.max_retries > 0,
        max_retry_budget=policy.max_retries,
        context=context if context is not None else {"conversationId": "conv-1", "agentId": "agent-1"},
        code=code,
        scope=scope,
        taxonomy_version="test",
        policy=policy,
        trigger=trigger,
        retry_after_ms=retry_after_ms,
        reconnect=reconnect,
        graceful=graceful,
    )


def drop(code: str = "ABNORMAL_CLOSURE", raw_code: str | None = "1006", **kw: Any) -> SdkErrorEvent:
    return make_event(code, T.TRANSIENT, reconnect=True, raw_code=raw_code, **kw)


GRACEFUL = make_event("GRACEFUL_CLOSE", T.NONE, raw_code="1000", graceful=True)
EMPTY_POLL = make_event("EMPTY_POLL", T.NONE, scope=Scope.OPERATION, raw_status=304)
INCOMPLETE = make_event(
    "INCOMPLETE_RESPONSE",
    T.STATE_CORRUPTING,
    trigger=Trigger.INCOMPLETE_RESPONSE,
    raw_status=200,
    policy=NO_RETRY,
)


def of(effects: list[Effect], kind: type[Any]) -> list[Any]:
    return [e for e in effects if isinstance(e, kind)]


def telemetry(effects: list[Effect], kind: type[Any]) -> list[Any]:
    return of(effects, kind)


def new_core(clock: FakeClock, seed: int = 1, config: SessionConfig | None = None) -> SessionCore:
    return SessionCore("s-1", clock, random.Random(seed), config)


def active_core(clock: FakeClock, seed: int = 1, config: SessionConfig | None = None) -> SessionCore:
    core = new_core(clock, seed, config)
    core.session_response(None)
    return core


# -- activation: seed section 3, validateSessionResponse ------------------------------------------


def test_starts_connecting_and_activates_only_on_a_validated_response(clock: FakeClock) -> None:
    core = new_core(clock)
    assert core.state is SessionState.CONNECTING
    effects = core.session_response(None)
    assert core.state is SessionState.ACTIVE
    assert effects == [
        SessionTransition(
            "s-1",
            SessionState.CONNECTING,
            SessionState.ACTIVE,
            "validated",
            "VALIDATED",
            iso_utc(clock.time()),
        )
    ]


def test_missing_required_field_terminates_with_incomplete_response(clock: FakeClock) -> None:
    core = new_core(clock)
    effects = core.session_response(INCOMPLETE)
    assert core.state is SessionState.TERMINATED
    (terminated,) = of(effects, SessionTerminated)
    assert terminated.reason is TerminationReason.FAIL_FAST_TRIGGER
    assert terminated.trigger is Trigger.INCOMPLETE_RESPONSE
    assert terminated.raw_status == 200
    assert not of(effects, ScheduleReconnect)


def test_a_validation_error_that_is_not_fail_fast_is_a_caller_bug(clock: FakeClock) -> None:
    core = new_core(clock)
    with pytest.raises(ValueError, match="must be fail-fast"):
        core.session_response(drop())
    assert core.state is SessionState.CONNECTING


def test_session_response_is_accepted_only_while_connecting(clock: FakeClock) -> None:
    core = active_core(clock)
    with pytest.raises(InputRejected):
        core.session_response(None)


# -- reconnection: seed edge case 1 and section 2 -------------------------------------------------


@pytest.mark.parametrize(("code", "raw_code"), [("ABNORMAL_CLOSURE", "1006"), ("SERVICE_RESTART", "1012")])
def test_abnormal_drop_moves_to_reconnecting_and_schedules_the_first_attempt(
    clock: FakeClock, code: str, raw_code: str
) -> None:
    core = active_core(clock)
    effects = core.failure(drop(code, raw_code))
    assert core.state is SessionState.RECONNECTING
    (schedule,) = of(effects, ScheduleReconnect)
    assert schedule.first is True
    assert schedule.attempt == 1
    assert 2.0 <= schedule.delay_s <= 8.0
    assert schedule.at == pytest.approx(clock.monotonic() + schedule.delay_s)
    (attempt,) = telemetry(effects, RetryAttempt)
    assert attempt.fields()["attempt"] == 1
    assert attempt.fields()["kind"] == "reconnect"
    # correlation ids are the runner's to add (supervisor/boundary.py builds them in one place)
    assert "conversationId" not in attempt.fields()


def test_first_reconnection_delay_is_always_within_2_and_8_seconds(clock: FakeClock) -> None:
    delays = []
    for seed in range(2000):
        core = active_core(clock, seed)
        (schedule,) = of(core.failure(drop()), ScheduleReconnect)
        delays.append(schedule.delay_s)
    assert all(2.0 <= d <= 8.0 for d in delays)
    # spread over the window, not clustered (seed edge case 1's purpose)
    assert min(delays) < 2.1
    assert max(delays) > 7.9


class _FixedRng:
    def __init__(self, value: float) -> None:
        self.value = value

    def random(self) -> float:
        return self.value


@pytest.mark.parametrize(("u", "expected"), [(0.0, 2.0), (0.5, 5.0), (0.999999, 8.0)])
def test_first_delay_is_uniform_over_the_configured_window(
    clock: FakeClock, u: float, expected: float
) -> None:
    core = SessionCore("s-1", clock, _FixedRng(u))
    core.session_response(None)
    (schedule,) = of(core.failure(drop()), ScheduleReconnect)
    assert schedule.delay_s == pytest.approx(expected, abs=1e-5)


def test_a_transient_session_failure_without_a_close_code_also_reconnects(clock: FakeClock) -> None:
    core = active_core(clock)
    core.failure(make_event("SERVER_ERROR", T.TRANSIENT, scope=Scope.SESSION, raw_status=503))
    assert core.state is SessionState.RECONNECTING


def test_a_failed_initial_connect_reconnects_too(clock: FakeClock) -> None:
    core = new_core(clock)
    effects = core.failure(drop())
    assert core.state is SessionState.RECONNECTING
    assert of(effects, ScheduleReconnect)[0].first is True


def test_due_reconnection_connects_and_later_attempts_back_off_per_class_policy(clock: FakeClock) -> None:
    rng = random.Random(42)
    core = SessionCore("s-1", clock, rng)
    core.session_response(None)
    core.failure(drop())
    clock.advance(8.0)
    effects = core.reconnect_due(None)
    assert core.state is SessionState.CONNECTING
    assert of(effects, Reconnect) == [Reconnect("s-1", 1)]
    # the reconnection fails: attempt 2 backs off with the seed formula (attempt index 1)
    twin = copy.deepcopy(rng)
    expected_ms = backoff_delay_ms(RECONNECT, 1, twin)
    (schedule,) = of(core.failure(drop()), ScheduleReconnect)
    assert schedule.first is False
    assert schedule.attempt == 2
    assert schedule.delay_s == pytest.approx(expected_ms / 1000.0)
    assert 2.0 <= schedule.delay_s <= 3.0  # 1 s * 2^1 + U(0, 1 s)


def test_backoff_follows_the_failures_policy_jitter(clock: FakeClock) -> None:
    full = RetryPolicy(name="full", max_retries=9, base_delay_ms=1000, max_delay_ms=4000, jitter=Jitter.FULL)
    core = active_core(clock)
    core.failure(drop(policy=full))
    for _ in range(6):
        core.reconnect_due(None)
        (schedule,) = of(core.failure(drop(policy=full)), ScheduleReconnect)
        assert 0.0 <= schedule.delay_s <= 4.0


def test_success_resets_the_attempt_count(clock: FakeClock) -> None:
    core = active_core(clock)
    for _ in range(3):
        core.failure(drop())
        core.reconnect_due(None)
    assert core.attempts == 3
    effects = core.session_response(None)
    (success,) = telemetry(effects, RetrySuccess)
    assert success.fields()["attempts"] == 3
    assert core.attempts == 0
    (schedule,) = of(core.failure(drop()), ScheduleReconnect)
    assert schedule.first is True
    assert schedule.attempt == 1
    assert 2.0 <= schedule.delay_s <= 8.0


def test_retry_after_is_a_minimum_for_the_first_reconnection(clock: FakeClock) -> None:
    core = active_core(clock)
    event = drop("RATE_LIMITED", raw_code=None, raw_status=429, policy=RATE, retry_after_ms=20_000)
    (schedule,) = of(core.failure(event), ScheduleReconnect)
    assert schedule.delay_s == 20.0


def test_retry_after_past_the_ceiling_gives_up(clock: FakeClock) -> None:
    core = active_core(clock)
    event = drop("RATE_LIMITED", raw_code=None, raw_status=429, policy=RATE, retry_after_ms=600_000)
    effects = core.failure(event)
    assert core.state is SessionState.TERMINATED
    assert of(effects, SessionTerminated)[0].reason is TerminationReason.RETRY_EXHAUSTED


def test_late_failures_while_reconnecting_do_not_schedule_twice(clock: FakeClock) -> None:
    core = active_core(clock)
    core.failure(drop())
    assert core.failure(drop()) == []
    assert core.attempts == 1
    assert core.state is SessionState.RECONNECTING


# -- graceful close: seed section 2 ---------------------------------------------------------------


@pytest.mark.parametrize("where", ["connecting", "active", "reconnecting"])
def test_graceful_close_terminates_without_reconnecting(clock: FakeClock, where: str) -> None:
    core = new_core(clock)
    if where != "connecting":
        core.session_response(None)
    if where == "reconnecting":
        core.failure(drop())
    effects = core.failure(GRACEFUL)
    assert core.state is SessionState.TERMINATED
    assert not of(effects, ScheduleReconnect)
    assert not of(effects, Reconnect)
    (terminated,) = of(effects, SessionTerminated)
    assert terminated.reason is TerminationReason.GRACEFUL_CLOSE
    assert terminated.trigger is None


def test_empty_poll_is_not_a_failure(clock: FakeClock) -> None:
    core = active_core(clock)
    assert core.failure(EMPTY_POLL) == []
    assert core.state is SessionState.ACTIVE


# -- fail fast: seed section 3 --------------------------------------------------------------------


def test_fail_fast_reproduces_the_seed_session_terminated_event(clock: FakeClock) -> None:
    core = active_core(clock)
    clock.set(clock.monotonic() + (22.118 - 11.004) + 13 * 60)  # 09:32:11.004 -> 09:45:22.118
    event = make_event(
        "OAUTH_TOKEN_INVALID",
        T.PERMANENT,
        trigger=Trigger.OAUTH_TOKEN_INVALID,
        raw_status=401,
        raw_code="invalid_token",
        policy=NO_RETRY,
    )
    effects = core.failure(event)
    (terminated,) = of(effects, SessionTerminated)
    assert terminated.as_json() == {
        "event": "SESSION_TERMINATED",
        "reason": "FAIL_FAST_TRIGGER",
        "trigger": "OAUTH_TOKEN_INVALID",
        "rawStatus": 401,
        "rawCode": "invalid_token",
        "timestamp": "2024-05-14T09:45:22.118Z",
        "action": "REVOKE_LOCAL_STORAGE_AND_REAUTHENTICATE",
    }
    (published,) = telemetry(effects, SessionTerminated)
    assert published.fields()["reason"] == "FAIL_FAST_TRIGGER"
    assert published.fields()["sessionId"] == "s-1"


@pytest.mark.parametrize("trigger", list(Trigger))
@pytest.mark.parametrize("where", ["connecting", "active", "reconnecting"])
def test_every_trigger_terminates_at_once_from_every_live_state(
    clock: FakeClock, trigger: Trigger, where: str
) -> None:
    core = new_core(clock)
    if where != "connecting":
        core.session_response(None)
    if where == "reconnecting":
        core.failure(drop())
    # a trigger wins even over a TRANSIENT-looking class (QUEUE_FULL is a 429)
    effects = core.failure(make_event(trigger.value, T.PERMANENT, trigger=trigger, raw_status=429))
    assert core.state is SessionState.TERMINATED
    assert [type(e) for e in effects] == [SessionTransition, SessionTerminated]
    terminated = effects[1]
    assert isinstance(terminated, SessionTerminated)
    assert terminated.reason is TerminationReason.FAIL_FAST_TRIGGER
    assert terminated.trigger is trigger
    assert terminated.action == REVOKE_AND_REAUTHENTICATE
    assert terminated.timestamp == iso_utc(clock.time())


def test_state_corrupting_without_trigger_terminates(clock: FakeClock) -> None:
    core = active_core(clock)
    effects = core.failure(make_event("SESSION_ID_MISMATCH", T.STATE_CORRUPTING, policy=NO_RETRY))
    assert of(effects, SessionTerminated)[0].reason is TerminationReason.STATE_CORRUPTING


def test_session_scoped_permanent_terminates(clock: FakeClock) -> None:
    core = active_core(clock)
    effects = core.failure(make_event("FORBIDDEN", T.PERMANENT, scope=Scope.SESSION, raw_status=403))
    assert of(effects, SessionTerminated)[0].reason is TerminationReason.PERMANENT_SESSION_ERROR


def test_operation_scoped_permanent_fails_only_that_operation(clock: FakeClock) -> None:
    core = active_core(clock)
    event = make_event("NOT_FOUND", T.PERMANENT, scope=Scope.OPERATION, raw_status=404, policy=NO_RETRY)
    assert core.failure(event) == []
    assert core.state is SessionState.ACTIVE


def test_a_permanent_failure_that_lost_the_link_ends_the_session(clock: FakeClock) -> None:
    core = active_core(clock)
    event = make_event(
        "POLICY_VIOLATION", T.PERMANENT, scope=Scope.OPERATION, reconnect=True, raw_code="1008"
    )
    effects = core.failure(event)
    assert of(effects, SessionTerminated)[0].reason is TerminationReason.PERMANENT_SESSION_ERROR


def test_operation_scoped_transient_leaves_the_session_to_the_retry_executor(clock: FakeClock) -> None:
    """The machine only answers whether a failure ends or moves the session."""
    core = active_core(clock)
    event = make_event("RATE_LIMITED", T.TRANSIENT, scope=Scope.OPERATION, policy=RATE, retry_after_ms=5000)
    assert core.failure(event) == []
    assert core.state is SessionState.ACTIVE
    assert core.attempts == 0


# -- budget: seed section 2 -----------------------------------------------------------------------


def test_reconnection_outlives_the_class_budget_within_the_horizon(clock: FakeClock) -> None:
    """The class budget bounds an operation; a session keeps reconnecting until the horizon."""
    two = RetryPolicy(name="two", max_retries=2, base_delay_ms=1000, max_delay_ms=16_000)
    core = active_core(clock, config=SessionConfig(horizon_s=600.0))
    for attempt in range(1, 11):
        effects = core.failure(drop(policy=two))
        (schedule,) = of(effects, ScheduleReconnect)
        assert schedule.attempt == attempt
        assert schedule.delay_s <= 16.0  # capped by the policy's maximum, however many attempts
        clock.set(schedule.at)
        core.reconnect_due(None)
    assert core.state is SessionState.CONNECTING and core.attempts == 10


def test_past_the_horizon_the_session_ends_retry_exhausted_with_give_up_horizon(clock: FakeClock) -> None:
    core = active_core(clock, config=SessionConfig(horizon_s=30.0))
    lost_at = clock.monotonic()
    effects: list[Effect] = core.failure(drop())
    while not of(effects, SessionTerminated):
        (schedule,) = of(effects, ScheduleReconnect)
        assert schedule.at - lost_at <= 30.0  # never scheduled past the horizon
        clock.set(schedule.at)
        core.reconnect_due(None)
        effects = core.failure(drop())
    assert core.state is SessionState.TERMINATED
    (terminated,) = of(effects, SessionTerminated)
    assert terminated.reason is TerminationReason.RETRY_EXHAUSTED
    (exhausted,) = telemetry(effects, RetryExhausted)
    assert exhausted.fields()["giveUp"] == "HORIZON" and exhausted.fields()["kind"] == "reconnect"


def test_a_circuit_open_past_the_horizon_ends_the_session(clock: FakeClock) -> None:
    """Deferred reconnections are not counted, but they do not outlive the horizon either."""
    core = active_core(clock, config=SessionConfig(horizon_s=60.0))
    (schedule,) = of(core.failure(drop()), ScheduleReconnect)
    clock.set(schedule.at)
    effects = core.reconnect_due(30.0)  # still within: deferred
    assert core.state is SessionState.RECONNECTING and of(effects, ReconnectionThrottled)
    clock.advance(30.0)
    effects = core.reconnect_due(30.0)  # would come back past the horizon
    assert core.state is SessionState.TERMINATED
    assert telemetry(effects, RetryExhausted)[0].fields()["giveUp"] == "HORIZON"


def test_an_isolation_longer_than_the_horizon_ends_no_session(clock: FakeClock) -> None:
    """An operator's isolation holds the session: its horizon stands still (docs/runtime.md,
    "Manual circuit control"), and runs again, moved by the time held, once the isolation lets go."""
    core = active_core(clock, config=SessionConfig(horizon_s=60.0))
    (schedule,) = of(core.failure(drop()), ScheduleReconnect)
    lost_at = clock.monotonic()
    clock.set(schedule.at)
    held_at = clock.monotonic()
    for _ in range(20):  # 20 x 30 s of isolation: ten horizons
        effects = core.reconnect_due(30.0, held=True)
        assert core.state is SessionState.RECONNECTING and core.attempts == 1
        assert of(effects, ReconnectionThrottled) and core.held
        assert core.horizon_deadline is None  # nothing runs out while held
        clock.advance(30.0)
    held_for = clock.monotonic() - held_at
    effects = core.reconnect_due(None)  # the isolation ended: the attempt goes
    assert of(effects, Reconnect) and not core.held
    # the horizon runs again from where it stood: the time held is added to it
    assert core.horizon_deadline == pytest.approx(lost_at + 60.0 + held_for)
    # and it still ends a session that does not come back within what is left of it
    effects = core.failure(drop())
    (schedule,) = of(effects, ScheduleReconnect)
    clock.set(schedule.at)
    effects = core.reconnect_due(60.0)  # an ordinary open circuit past what is left: HORIZON
    assert core.state is SessionState.TERMINATED
    assert telemetry(effects, RetryExhausted)[0].fields()["giveUp"] == "HORIZON"


def test_a_live_connection_an_isolation_refuses_waits_with_its_horizon_held(clock: FakeClock) -> None:
    core = active_core(clock, config=SessionConfig(horizon_s=10.0))
    effects = core.connect_refused(30.0, held=True)  # a CXone poll refused by an isolated cxone:api
    assert core.state is SessionState.RECONNECTING and core.held and core.horizon_deadline is None
    assert of(effects, ReconnectionThrottled)
    clock.advance(30.0)
    core.reconnect_due(None)
    assert core.state is SessionState.CONNECTING
    # 30 s after the refusal, with a horizon of 10 s: the horizon starts only now
    assert core.horizon_deadline == pytest.approx(clock.monotonic() + 10.0)


def test_a_success_restarts_the_horizon(clock: FakeClock) -> None:
    core = active_core(clock, config=SessionConfig(horizon_s=20.0))
    (schedule,) = of(core.failure(drop()), ScheduleReconnect)
    clock.set(schedule.at)
    core.reconnect_due(None)
    core.session_response(None)
    clock.advance(60.0)  # long after the first loss: a new loss starts a new horizon
    assert of(core.failure(drop()), ScheduleReconnect)


def test_a_retry_after_past_the_ceiling_gives_up_the_reconnection(clock: FakeClock) -> None:
    core = active_core(clock)
    effects = core.failure(drop(policy=RATE, retry_after_ms=RATE.retry_after_ceiling_ms + 1000))
    assert core.state is SessionState.TERMINATED
    assert telemetry(effects, RetryExhausted)[0].fields()["giveUp"] == "RETRY_AFTER_EXCEEDS_CEILING"


# -- circuit open: seed edge case 1 ---------------------------------------------------------------


def test_due_reconnection_is_deferred_while_the_circuit_is_open(clock: FakeClock) -> None:
    core = active_core(clock)
    core.failure(drop())
    clock.advance(8.0)
    effects = core.reconnect_due(12.5)
    assert core.state is SessionState.RECONNECTING
    assert not of(effects, SessionTransition)
    assert of(effects, ScheduleReconnect) == [
        ScheduleReconnect("s-1", clock.monotonic() + 12.5, 1, 12.5, True)
    ]
    (throttled,) = telemetry(effects, ReconnectionThrottled)
    assert throttled.fields()["retryInS"] == 12.5
    assert core.attempts == 1  # not counted as an attempt


def test_deferrals_never_spend_the_budget(clock: FakeClock) -> None:
    one = RetryPolicy(name="one", max_retries=1, base_delay_ms=1000, max_delay_ms=1000)
    core = active_core(clock)
    core.failure(drop(policy=one))
    for _ in range(50):
        core.reconnect_due(30.0)
    assert core.attempts == 1
    assert of(core.reconnect_due(None), Reconnect) == [Reconnect("s-1", 1)]
    assert core.session_response(None)


def test_throttle_jitter_spreads_deferred_reconnections(clock: FakeClock) -> None:
    core = active_core(clock, config=SessionConfig(throttle_jitter_s=4.0))
    core.failure(drop())
    (schedule,) = of(core.reconnect_due(10.0), ScheduleReconnect)
    assert 10.0 <= schedule.delay_s <= 14.0


# -- strictness: nothing is silently ignored -------------------------------------------------------


def _inputs() -> list[tuple[str, Any]]:
    return [
        ("session_response(None)", lambda c: c.session_response(None)),
        ("session_response(incomplete)", lambda c: c.session_response(INCOMPLETE)),
        ("failure(drop)", lambda c: c.failure(drop())),
        ("failure(graceful)", lambda c: c.failure(GRACEFUL)),
        ("failure(empty poll)", lambda c: c.failure(EMPTY_POLL)),
        ("failure(incomplete)", lambda c: c.failure(INCOMPLETE)),
        ("reconnect_due(None)", lambda c: c.reconnect_due(None)),
        ("reconnect_due(5)", lambda c: c.reconnect_due(5.0)),
        ("stop()", lambda c: c.stop()),
    ]


@pytest.mark.parametrize(("name", "feed"), _inputs())
def test_a_terminated_session_accepts_nothing(clock: FakeClock, name: str, feed: Any) -> None:
    core = active_core(clock)
    core.failure(GRACEFUL)
    with pytest.raises(InputRejected) as info:
        feed(core)
    assert isinstance(info.value, MachineError)
    assert isinstance(info.value, SupervisorError)
    assert info.value.state == SessionState.TERMINATED
    assert core.state is SessionState.TERMINATED


def test_reconnect_due_outside_reconnecting_is_rejected(clock: FakeClock) -> None:
    core = active_core(clock)
    with pytest.raises(InputRejected):
        core.reconnect_due(None)
    core.failure(drop())
    core.reconnect_due(None)
    with pytest.raises(InputRejected):  # a second timer for the same attempt
        core.reconnect_due(None)


def test_stop_terminates_with_stopped(clock: FakeClock) -> None:
    core = active_core(clock)
    effects = core.stop()
    (terminated,) = of(effects, SessionTerminated)
    assert terminated.reason is TerminationReason.STOPPED
    assert (terminated.trigger, terminated.raw_status, terminated.raw_code) == (None, None, None)


@pytest.mark.parametrize("state", [SessionState.CONNECTING, SessionState.ACTIVE, SessionState.RECONNECTING])
def test_a_handover_leaves_the_session_alive_without_terminating_it(
    clock: FakeClock, state: SessionState
) -> None:
    """A stop with a store: SESSION_HANDED_OVER from whatever state the session was in, never
    SESSION_TERMINATED (nothing ended: nothing is to be revoked or re-authenticated)."""
    core = new_core(clock) if state is SessionState.CONNECTING else active_core(clock)
    if state is SessionState.RECONNECTING:
        core.failure(drop())
    assert core.state is state
    effects = core.hand_over()
    (transition,) = of(effects, SessionTransition)
    assert (transition.source, transition.target, transition.trigger) == (
        state,
        SessionState.HANDED_OVER,
        "hand_over",
    )
    (handed,) = of(effects, SessionHandedOver)
    assert handed.previous is state and handed.timestamp == iso_utc(clock.time())
    assert "action" not in handed.fields()
    assert not of(effects, SessionTerminated)
    assert core.state is SessionState.HANDED_OVER and core.handed_over and core.terminated
    # final: nothing leaves it, a second hand-over or a stop included
    for act in (core.hand_over, core.stop, lambda: core.failure(drop()), lambda: core.session_response(None)):
        with pytest.raises(InputRejected):
            act()


def test_a_terminated_session_cannot_be_handed_over(clock: FakeClock) -> None:
    core = active_core(clock)
    core.stop()
    with pytest.raises(InputRejected):
        core.hand_over()
    assert not core.handed_over


def test_the_machine_class_is_strict_and_terminated_is_final() -> None:
    sm = SessionMachine()
    with pytest.raises(TransitionNotAllowed):
        sm.send("reconnect")
    sm.send("stop")
    assert sm.current_state_value is SessionState.TERMINATED
    for event in ("validated", "connection_lost", "reconnect", "throttled", "fail_fast", "stop"):
        with pytest.raises(TransitionNotAllowed):
            sm.send(event)


def test_timestamps_come_from_the_injected_clock() -> None:
    clock = FakeClock(start=0.0, epoch=1_700_000_000.0)
    core = SessionCore("s-1", clock, random.Random(0))
    clock.advance(1.2346)
    (transition,) = core.session_response(None)
    assert isinstance(transition, SessionTransition)
    assert transition.timestamp == "2023-11-14T22:13:21.235Z"


def test_iso_utc_rounds_to_the_millisecond() -> None:
    assert iso_utc(1_715_679_131.004) == "2024-05-14T09:32:11.004Z"
    assert iso_utc(1_715_679_131.9996) == "2024-05-14T09:32:12.000Z"


@pytest.mark.parametrize(
    "kwargs", [{"first_delay_s": (8.0, 2.0)}, {"first_delay_s": (-1.0, 2.0)}, {"throttle_jitter_s": -1.0}]
)
def test_session_config_rejects_nonsense(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="must"):
        SessionConfig(**kwargs)


def test_a_connect_refused_by_an_open_circuit_waits_uncounted_within_the_horizon(clock: FakeClock) -> None:
    """The token endpoint or REST API is down: no attempt is made, the session waits."""
    core = new_core(clock, config=SessionConfig(horizon_s=100.0))
    effects = core.connect_refused(30.0)
    assert core.state is SessionState.RECONNECTING and core.attempts == 0
    (schedule,) = of(effects, ScheduleReconnect)
    assert schedule.delay_s == 30.0 and not schedule.first
    assert of(effects, ReconnectionThrottled)
    clock.set(schedule.at)
    core.reconnect_due(None)
    assert core.state is SessionState.CONNECTING
    core.connect_refused(30.0)  # still within the horizon (60 s since the first refusal)
    clock.advance(45.0)
    core.reconnect_due(None)
    effects = core.connect_refused(30.0)  # 75 + 30 > 100: past the horizon
    assert core.state is SessionState.TERMINATED
    assert telemetry(effects, RetryExhausted)[0].fields()["giveUp"] == "HORIZON"


def test_a_live_connection_refused_by_an_open_circuit_waits_uncounted_from_now(clock: FakeClock) -> None:
    """Its own next request (a CXone poll) met the open circuit: nothing failed."""
    core = active_core(clock, config=SessionConfig(horizon_s=100.0))
    effects = core.connect_refused(30.0)
    assert core.state is SessionState.RECONNECTING and core.attempts == 0
    (schedule,) = of(effects, ScheduleReconnect)
    assert schedule.delay_s == 30.0 and schedule.at == clock.monotonic() + 30.0
    assert of(effects, ReconnectionThrottled)
    assert core.horizon_deadline == clock.monotonic() + 100.0  # the horizon runs from the refusal


def test_connect_refused_is_accepted_only_while_connecting_or_active(clock: FakeClock) -> None:
    core = active_core(clock)
    core.connect_refused(1.0)
    with pytest.raises(InputRejected):  # reconnecting: the pending reconnection covers it
        core.connect_refused(1.0)
    core.stop()
    with pytest.raises(InputRejected):
        core.connect_refused(1.0)


def test_the_driver_moves_exactly_as_an_instance_of_the_machine_does() -> None:
    """SessionCore moves by MOVES, read once from SessionMachine's class (no instance per session):
    from every state, every event the machine names goes where an instance goes, and an event an
    instance refuses (TransitionNotAllowed) is one MOVES lacks."""
    events = sorted({event for _, event in MOVES} | {"unknown"})
    for state in SessionMachine.states:
        for event in events:
            sm = SessionMachine(start_value=state.value)
            try:
                sm.send(event)
            except TransitionNotAllowed:
                assert (state.value, event) not in MOVES, (state.value, event)
                continue
            assert MOVES[(state.value, event)] is sm.current_state_value, (state.value, event)
    assert len(MOVES) == sum(len(state.transitions) for state in SessionMachine.states)


def test_the_driver_refuses_what_the_machine_refuses(clock: FakeClock) -> None:
    """A handed-over session accepts nothing (a final state: no declared move leaves it)."""
    core = active_core(clock)
    core.hand_over()
    for move in (core.stop, lambda: core.session_response(None)):
        with pytest.raises(InputRejected):
            move()
    assert core.state is SessionState.HANDED_OVER
