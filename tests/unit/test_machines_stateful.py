"""Stateful property tests (hypothesis RuleBasedStateMachine) over random input sequences.

Invariants (docs/machines.md): terminated is absorbing; no reconnection is ever scheduled
after a fail-fast; every termination carries a reason; at most one half-open probe in flight.
"""

from __future__ import annotations

import random
from typing import Any

import hypothesis.strategies as st
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from machines.circuit import Admission, Circuit, CircuitConfig
from machines.effects import (
    REVOKE_AND_REAUTHENTICATE,
    CircuitEffect,
    CircuitTransition,
    Effect,
    InputRejected,
    Reconnect,
    ReconnectionThrottled,
    ScheduleReconnect,
    SessionHandedOver,
    SessionTerminated,
    SessionTransition,
    TerminationReason,
)
from machines.session import SessionConfig, SessionCore
from supervisor.clock import FakeClock
from supervisor.taxonomy.model import Jitter, RetryPolicy, Scope, SdkErrorEvent, TaxonomyClass, Trigger
from supervisor.vocabulary import CircuitState, SessionState

T = TaxonomyClass
# short, so that random runs reach it
HORIZON_S = 90.0
# the suite's profile (tests/conftest.py) with this test's own step count
SETTINGS = settings(stateful_step_count=40)

POLICIES = [
    RetryPolicy(name="reconnect", max_retries=4, base_delay_ms=1000, max_delay_ms=16_000),
    RetryPolicy(name="full", max_retries=2, base_delay_ms=500, max_delay_ms=4000, jitter=Jitter.FULL),
    RetryPolicy(name="rate", max_retries=2, base_delay_ms=2000, max_delay_ms=8000, honors_retry_after=True),
    RetryPolicy(name="none", max_retries=0),
]


def make_event(
    code: str,
    cls: TaxonomyClass,
    *,
    scope: Scope = Scope.SESSION,
    trigger: Trigger | None = None,
    reconnect: bool = False,
    policy: RetryPolicy = POLICIES[0],
    retry_after_ms: int | None = None,
    graceful: bool = False,
) -> SdkErrorEvent:
    return SdkErrorEvent(
        timestamp="2024-05-14T09:32:11.004Z",
        source="test",
        raw_status=None,
        raw_code=code,
        taxonomy_class=cls,
        retryable=cls is T.TRANSIENT,
        max_retry_budget=policy.max_retries,
        context={"conversationId": "c", "agentId": "a"},
        code=code,
        scope=scope,
        taxonomy_version="test",
        policy=policy,
        trigger=trigger,
        retry_after_ms=retry_after_ms,
        reconnect=reconnect,
        graceful=graceful,
    )


EVENTS: list[SdkErrorEvent] = [
    *(make_event("ABNORMAL_CLOSURE", T.TRANSIENT, reconnect=True, policy=p) for p in POLICIES[:3]),
    make_event("SERVICE_RESTART", T.TRANSIENT, reconnect=True),
    make_event("SERVER_ERROR", T.TRANSIENT, scope=Scope.SESSION),
    make_event("RATE_LIMITED", T.TRANSIENT, reconnect=True, policy=POLICIES[2], retry_after_ms=9000),
    make_event("RATE_LIMITED", T.TRANSIENT, scope=Scope.OPERATION, policy=POLICIES[2], retry_after_ms=3000),
    make_event("GATEWAY_TIMEOUT", T.TRANSIENT, scope=Scope.OPERATION),
    make_event("NOT_FOUND", T.PERMANENT, scope=Scope.OPERATION, policy=POLICIES[3]),
    make_event("POLICY_VIOLATION", T.PERMANENT, scope=Scope.OPERATION, reconnect=True, policy=POLICIES[3]),
    make_event("FORBIDDEN", T.PERMANENT, scope=Scope.SESSION, policy=POLICIES[3]),
    make_event("SESSION_ID_MISMATCH", T.STATE_CORRUPTING, policy=POLICIES[3]),
    make_event("GRACEFUL_CLOSE", T.NONE, graceful=True),
    make_event("EMPTY_POLL", T.NONE, scope=Scope.OPERATION),
    *(make_event(t.value, T.PERMANENT, trigger=t, policy=POLICIES[3]) for t in Trigger),
]
VALIDATION_ERRORS = [e for e in EVENTS if e.fail_fast]
# inputs that end a session at once, and those a live session survives (or may exhaust on)
FATAL = [*VALIDATION_ERRORS, *(e for e in EVENTS if e.code in ("GRACEFUL_CLOSE", "POLICY_VIOLATION"))]
FATAL.append(make_event("ABNORMAL_CLOSURE", T.TRANSIENT, reconnect=True, policy=POLICIES[3]))
BENIGN = [e for e in EVENTS if e not in FATAL]


class SessionProperties(RuleBasedStateMachine):
    """Random inputs to one SessionCore; every input a terminated session gets must raise."""

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock(start=50.0)
        self.core: SessionCore | None = None
        self.terminations: list[SessionTerminated] = []
        self.fail_fast_seen = False
        self.steps = 0
        self.fatal_after = 0
        # when the current connection was lost (the horizon runs from there)
        self.lost_at: float | None = None

    @rule(seed=st.integers(0, 2**32 - 1), lifetime=st.integers(0, 40))
    @precondition(lambda self: self.core is None)
    def start(self, seed: int, lifetime: int) -> None:
        self.core = SessionCore("s", self.clock, random.Random(seed), SessionConfig(horizon_s=HORIZON_S))
        # fatal inputs are enabled only after `lifetime` inputs, so runs explore long lives too
        self.fatal_after = lifetime

    def _feed(self, name: str, call: Any) -> list[Effect]:
        core = self.core
        assert core is not None
        self.steps += 1
        was = core.state
        try:
            effects: list[Effect] = call(core)
        except InputRejected:
            # strict: rejected inputs change nothing; after termination everything is rejected
            assert core.state is was
            return []
        assert was is not SessionState.TERMINATED, f"{name} accepted by a terminated session"
        assert was is not SessionState.HANDED_OVER, f"{name} accepted by a handed-over session"
        self._check(was, effects)
        return effects

    def _check(self, was: SessionState, effects: list[Effect]) -> None:
        core = self.core
        assert core is not None
        transitions = [e for e in effects if isinstance(e, SessionTransition)]
        terminated = [e for e in effects if isinstance(e, SessionTerminated)]
        # transitions chain from the state before to the state after
        state: str = was
        for t in transitions:
            assert t.source == state
            state = t.target
        assert state == core.state
        if core.state is SessionState.TERMINATED:
            # every termination carries a reason, and is published once
            assert len(terminated) == 1
            assert isinstance(terminated[0].reason, TerminationReason)
            assert terminated[0].action == REVOKE_AND_REAUTHENTICATE
            # the effect is itself the published event
            assert terminated[0].fields()["reason"] == terminated[0].reason.value
            # no reconnection in the same breath as a termination
            assert not any(isinstance(e, ScheduleReconnect | Reconnect) for e in effects)
            self.terminations.extend(terminated)
        else:
            assert not terminated
        if core.state is SessionState.HANDED_OVER:
            # a handover ends nothing: one SESSION_HANDED_OVER, no termination, no reconnection
            assert [type(e) for e in effects] == [SessionTransition, SessionHandedOver]
        for e in effects:
            if isinstance(e, ScheduleReconnect):
                assert not self.fail_fast_seen
                assert e.delay_s >= 0.0
                assert e.at == self.clock.monotonic() + e.delay_s
                assert e.attempt >= 1
                assert e.first is (e.attempt == 1)

    @rule()
    @precondition(lambda self: self.core is not None)
    def session_ok(self) -> None:
        self._feed("session_response", lambda c: c.session_response(None))

    @rule(error=st.sampled_from(VALIDATION_ERRORS))
    @precondition(lambda self: self.core is not None and self.steps >= self.fatal_after)
    def session_invalid(self, error: SdkErrorEvent) -> None:
        assert self.core is not None
        was = self.core.state
        effects = self._feed("session_response", lambda c: c.session_response(error))
        if was is SessionState.CONNECTING:
            self.fail_fast_seen = True
            assert any(isinstance(e, SessionTerminated) for e in effects)

    @rule()
    @precondition(lambda self: self.core is not None and self.steps >= self.fatal_after)
    def hand_over(self) -> None:
        self._feed("hand_over", lambda c: c.hand_over())

    @rule(event=st.sampled_from(FATAL))
    @precondition(lambda self: self.core is not None and self.steps >= self.fatal_after)
    def fatal_failure(self, event: SdkErrorEvent) -> None:
        self.failure(event)

    @rule(event=st.sampled_from(BENIGN))
    @precondition(lambda self: self.core is not None)
    def benign_failure(self, event: SdkErrorEvent) -> None:
        self.failure(event)

    def failure(self, event: SdkErrorEvent) -> None:
        core = self.core
        assert core is not None
        was = core.state
        attempts = core.attempts
        effects = self._feed("failure", lambda c: c.failure(event))
        if was in (SessionState.TERMINATED, SessionState.HANDED_OVER):
            return
        if event.fail_fast:
            self.fail_fast_seen = True
            assert core.state is SessionState.TERMINATED
        for e in effects:
            if isinstance(e, ScheduleReconnect) and e.first:
                lo = 2.0
                hi = max(8.0, (event.retry_after_ms or 0) / 1000.0)
                assert lo <= e.delay_s <= hi
            if isinstance(e, ScheduleReconnect):
                assert e.attempt == attempts + 1
                if e.first:
                    self.lost_at = self.clock.monotonic()
                # never a reconnection scheduled past the horizon since the connection was lost
                assert self.lost_at is not None and e.at - self.lost_at <= HORIZON_S + 1e-9

    @rule(remaining=st.none() | st.floats(0.0, 120.0, allow_nan=False))
    @precondition(lambda self: self.core is not None)
    def reconnect_due(self, remaining: float | None) -> None:
        core = self.core
        assert core is not None
        attempts = core.attempts
        was = core.state
        effects = self._feed("reconnect_due", lambda c: c.reconnect_due(remaining))
        if was is not SessionState.RECONNECTING:
            return
        if remaining is not None and remaining > 0 and core.state is SessionState.RECONNECTING:
            # deferred: not counted as an attempt, and throttling is reported
            assert core.attempts == attempts
            assert any(isinstance(e, ReconnectionThrottled) for e in effects)
            for e in effects:
                if isinstance(e, ScheduleReconnect):
                    assert self.lost_at is not None and e.at - self.lost_at <= HORIZON_S + 1e-9
        elif remaining is not None and remaining > 0 and core.state is SessionState.TERMINATED:
            # the circuit stayed open past the horizon: the only way a deferral ends a session
            assert self.lost_at is not None
            assert self.clock.monotonic() + remaining - self.lost_at > HORIZON_S

    @rule()
    @precondition(lambda self: self.core is not None and self.steps >= self.fatal_after)
    def stop(self) -> None:
        self._feed("stop", lambda c: c.stop())

    @rule(seconds=st.floats(0.0, 60.0, allow_nan=False))
    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @invariant()
    def terminated_is_absorbing(self) -> None:
        if self.terminations:
            assert self.core is not None
            assert self.core.state is SessionState.TERMINATED
            assert len(self.terminations) == 1


TRANSIENT_FAILURE = make_event("SERVICE_UNAVAILABLE", T.TRANSIENT, scope=Scope.OPERATION)
CIRCUIT_CONFIG = CircuitConfig(failure_threshold=2, window_s=2.0, open_s=5.0, probe_timeout_s=2.0)


class CircuitProperties(RuleBasedStateMachine):
    """Random admissions and outcomes on one Circuit; at most one probe is ever in flight."""

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock(start=0.0)
        # small numbers so that short random sequences reach every state
        self.circuit = Circuit("ep", self.clock, random.Random(0), CIRCUIT_CONFIG)
        self.state: str = CircuitState.CLOSED
        self.probes_out: list[int] = []
        self.last_probe = 0

    def _apply(self, effects: tuple[CircuitEffect, ...]) -> None:
        for e in effects:
            if isinstance(e, CircuitTransition):
                assert e.source == self.state
                self.state = e.target
                if e.source == CircuitState.HALF_OPEN:
                    self.probes_out.clear()  # the probe was answered or timed out
        assert self.state == self.circuit.state

    @rule()
    def admit(self) -> None:
        was = self.circuit.state
        admission: Admission = self.circuit.admit()
        self._apply(admission.effects)
        if was is CircuitState.CLOSED:
            assert admission.allowed
            assert not admission.probe
        if was is CircuitState.HALF_OPEN and admission.allowed:
            # only possible after the circuit timed the hung probe out by itself
            assert admission.probe
        if admission.probe:
            assert admission.allowed
            assert self.circuit.state is CircuitState.HALF_OPEN
            self.probes_out.append(admission.probe_id)
            self.last_probe = admission.probe_id
        if not admission.allowed:
            assert admission.retry_in_s > 0.0

    @rule(answer_probe=st.booleans())
    def success(self, answer_probe: bool) -> None:
        self._apply(self.circuit.record_success(self.last_probe if answer_probe else 0))

    @rule(
        cls=st.sampled_from([T.TRANSIENT, T.TRANSIENT, T.PERMANENT, T.NONE]),
        answer_probe=st.booleans(),
    )
    def failure(self, cls: TaxonomyClass, answer_probe: bool) -> None:
        event = make_event("X", cls, scope=Scope.OPERATION)
        self._apply(self.circuit.record_failure(event, self.last_probe if answer_probe else 0))

    @rule()
    def burst(self) -> None:
        """A burst of TRANSIENT failures at one instant: trips a closed circuit."""
        for _ in range(CIRCUIT_CONFIG.failure_threshold):
            self._apply(self.circuit.record_failure(TRANSIENT_FAILURE))

    @rule()
    @precondition(lambda self: self.last_probe > 0)
    def probe_timeout(self) -> None:
        self._apply(self.circuit.probe_timed_out(self.last_probe))

    @rule(seconds=st.sampled_from([0.0, 0.5, 1.0, 1.9, 2.0, 2.1, 4.9, 5.0, 7.5]))
    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @invariant()
    def at_most_one_probe_in_flight(self) -> None:
        assert len(self.probes_out) <= 1
        assert self.circuit.probe_in_flight is (self.circuit.state is CircuitState.HALF_OPEN)
        if self.circuit.state is CircuitState.HALF_OPEN:
            assert len(self.probes_out) == 1

    @invariant()
    def open_never_admits_early(self) -> None:
        remaining = self.circuit.retry_in_s()
        if self.circuit.state is CircuitState.OPEN and remaining is not None:
            assert 0.0 < remaining <= CIRCUIT_CONFIG.open_s + 1e-9


TestSessionProperties = SessionProperties.TestCase
TestSessionProperties.settings = SETTINGS
TestCircuitProperties = CircuitProperties.TestCase
TestCircuitProperties.settings = SETTINGS
