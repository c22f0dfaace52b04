"""The session machine: connecting → active ⇄ reconnecting → terminated, driven by classified events.

Two layers, both pure and synchronous:

* :class:`SessionMachine`, a strict python-statemachine ``StateMachine``: it declares which
  moves exist, and raises on any event the current state does not accept. Its event names
  say *why* a session moves (``connection_lost``, ``fail_fast``, ``exhausted``, ...), so
  the generated diagram (docs/machines.md) reads as the rules below.
* :class:`SessionCore`, the driver the runtime calls. It moves by the machine's declared
  transitions, read once from the class (:data:`MOVES`), not by an instance of it per session:
  building a python-statemachine instance registers its callbacks per instance, about 0.85 ms,
  which a restart of 7,000 sessions paid 7,000 times on its one event loop (and an AddSession
  of 200 entries, 200 times); the moves and their strictness are the class's, unchanged.
  It routes one classified
  :class:`~supervisor.taxonomy.model.SdkErrorEvent` to one machine event, counts
  reconnection attempts, draws delays from the injected RNG, stamps times from the
  injected clock, and returns effects (machines/effects.py) for the runtime to execute.

Rules (seed sections in brackets):

* activation only after a validated session response [section 3, validateSessionResponse];
* an abnormal drop (1006, 1012, ...) or a TRANSIENT session failure reconnects; the first
  reconnection waits U(2 s, 8 s), later ones back off per the failure's class policy;
  success resets the count [edge case 1; section 2];
* a session's reconnection is bounded by a *horizon* of time since the connection was lost
  (``SessionConfig.horizon_s``, default 600 s), not by the class policy's retry count: the
  seed's per-class budgets bound each *operation*, while an endpoint that is down is the
  circuit's business, which pauses reconnection and probes it back. Past the horizon the
  session ends RETRY_EXHAUSTED, give-up reason HORIZON (beyond the seed; the vendors' own SDKs
  keep trying for 5 and 10 minutes, websockets' reconnect loop forever);
* a graceful end (close 1000) terminates without reconnecting [section 2, "graceful closes"];
* a trigger, STATE_CORRUPTING, or a session-scoped PERMANENT terminates at once with
  SESSION_TERMINATED and never reconnects [section 3]; a failure scoped to one operation
  leaves the session as it is [docs/architecture.md, "Scope"]: retrying that operation is the one retry
  executor's job (supervisor/rest/executor.py), not the machine's;
* a Retry-After past the policy's ceiling on a reconnection gives up at once with
  RETRY_EXHAUSTED (the platform said "not today", the Genesys Java SDK's 180 s rule);
* while the endpoint's circuit is open a due reconnection is deferred, not counted, and
  RECONNECTION_THROTTLED is emitted [edge case 1];
* while an operator holds the endpoint isolated (``held``: ``ctl circuit isolate``, beyond the
  seed) the session waits the same way and its horizon does not run: the time spent held is
  added to the horizon when the isolation lets it try again (docs/runtime.md, "Manual circuit
  control"). A maintenance window is nobody's failure, and must not end a session;
* nothing leaves ``terminated``: a full re-authentication builds a new SessionCore [section 3];
* a daemon that stops with a store hands its sessions over (beyond the seed): the session moves to
  ``handed-over``, a final state of its own, with SESSION_HANDED_OVER and no SESSION_TERMINATED: it
  did not end, the platform keeps it (a guest socket closed with 1001 and no ``closeSession``, a
  CXone poll stopped with no DELETE) and the next start takes it over. Nothing leaves
  ``handed-over`` either: this process supervises the session no more.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from statemachine import State, StateMachine

from machines.effects import (
    Effect,
    InputRejected,
    Reconnect,
    ReconnectionThrottled,
    RetryAttempt,
    RetryExhausted,
    RetryKind,
    RetrySuccess,
    ScheduleReconnect,
    SessionHandedOver,
    SessionTerminated,
    SessionTransition,
    TerminationReason,
)
from machines.routing import Route, route, termination_reason
from supervisor.clock import Clock, Rng, iso_utc
from supervisor.retry.backoff import GiveUpReason, backoff_delay_ms
from supervisor.taxonomy.model import RetryPolicy, SdkErrorEvent
from supervisor.vocabulary.states import SessionState


class SessionMachine(StateMachine):
    """Legal moves of one supervised session; strict: an unaccepted event raises."""

    connecting = State(initial=True, value=SessionState.CONNECTING)
    active = State(value=SessionState.ACTIVE)
    reconnecting = State(value=SessionState.RECONNECTING)
    terminated = State(final=True, value=SessionState.TERMINATED)
    handed_over = State(final=True, value=SessionState.HANDED_OVER)

    # seed section 3: only a response with conversationId, agentId and status activates
    validated = connecting.to(active)
    # seed section 2 / edge case 1: abnormal close or TRANSIENT session failure
    connection_lost = connecting.to(reconnecting) | active.to(reconnecting)
    # an endpoint the connection needs (the token endpoint, the REST API) has its circuit open:
    # no attempt was made; wait for it, not counted (edge case 1, RECONNECTION_THROTTLED); also
    # when a live connection's own next request (a CXone poll) finds it open: nothing failed
    refused = connecting.to(reconnecting) | active.to(reconnecting)
    # the reconnection timer fired and the circuit admits: connect again
    reconnect = reconnecting.to(connecting)
    # seed edge case 1: the circuit is open, defer without counting (RECONNECTION_THROTTLED)
    throttled = reconnecting.to.itself(internal=True)  # type: ignore[no-untyped-call,unused-ignore]
    # seed section 3: trigger / STATE_CORRUPTING / session-scoped PERMANENT
    fail_fast = connecting.to(terminated) | active.to(terminated) | reconnecting.to(terminated)
    # seed section 2: RETRY_EXHAUSTED (past the reconnection horizon, or a Retry-After past the ceiling)
    exhausted = connecting.to(terminated) | active.to(terminated) | reconnecting.to(terminated)
    # seed section 2: close 1000 is not reconnected
    graceful_close = connecting.to(terminated) | active.to(terminated) | reconnecting.to(terminated)
    # explicit stop or daemon shutdown
    stop = connecting.to(terminated) | active.to(terminated) | reconnecting.to(terminated)
    # daemon shutdown with a store: left alive on the platform for the next start (docs/runtime.md)
    hand_over = connecting.to(handed_over) | active.to(handed_over) | reconnecting.to(handed_over)


@dataclass(frozen=True, slots=True)
class SessionConfig:
    """Numbers of the session rules; defaults are the seed's."""

    # seed edge case 1: "a randomized initial delay between 2 and 8 seconds"
    first_delay_s: tuple[float, float] = (2.0, 8.0)
    # beyond the seed, off by default: spread deferred reconnections over U(0, this) seconds
    # past the circuit's remaining open time, so a throttled herd does not return in one instant
    throttle_jitter_s: float = 0.0
    # how long a session keeps reconnecting after its connection was lost (beyond the seed)
    horizon_s: float = 600.0

    def __post_init__(self) -> None:
        lo, hi = self.first_delay_s
        if not 0.0 <= lo <= hi:
            raise ValueError(f"first_delay_s must satisfy 0 <= low <= high, got {self.first_delay_s!r}")
        if self.throttle_jitter_s < 0.0:
            raise ValueError(f"throttle_jitter_s must be >= 0, got {self.throttle_jitter_s!r}")
        if not self.horizon_s > 0.0:
            raise ValueError(f"horizon_s must be > 0, got {self.horizon_s!r}")


def declared_moves(machine: type[StateMachine]) -> dict[tuple[object, str], object]:
    """``(state value, event) -> target state value`` for every transition ``machine`` declares.

    The machines here have no guards, conditions or callbacks (the drivers compute what happens),
    so a declared transition is all a ``send`` does: an event the table lacks is one the library's
    strict machine raises ``TransitionNotAllowed`` for (tests/unit/test_session_machine.py checks
    every state and event against an instance).
    """
    moves: dict[tuple[object, str], object] = {}
    for state in machine.states:
        for transition in state.transitions:
            for event in transition.events:
                moves[(state.value, str(event))] = transition.target.value
    return moves


#: the session machine's moves, read once from its class (the module docstring)
MOVES: Final = declared_moves(SessionMachine)
#: the state a new session starts in
_INITIAL: Final = next(state.value for state in SessionMachine.states if state.initial)


class SessionCore:
    """Pure driver of one session: classified inputs in, effects out.

    Every method raises :class:`~machines.effects.InputRejected` for an input the current
    state does not accept; a terminated session accepts nothing.
    """

    __slots__ = (
        "_attempts",
        "_clock",
        "_config",
        "_held_since",
        "_last_delay_ms",
        "_lost_at",
        "_rng",
        "_state",
        "session_id",
    )

    def __init__(self, session_id: str, clock: Clock, rng: Rng, config: SessionConfig | None = None) -> None:
        self.session_id = session_id
        self._clock = clock
        self._rng = rng
        self._config = config if config is not None else _DEFAULT_CONFIG
        # where the session is in SessionMachine (moved by MOVES)
        self._state: SessionState = _INITIAL
        # reconnection attempts scheduled since the last activation (the pending one included)
        self._attempts = 0
        # the previous reconnection delay, for decorrelated jitter
        self._last_delay_ms: float | None = None
        # monotonic time the connection was lost (the horizon runs from there); None while up
        self._lost_at: float | None = None
        # monotonic time an isolation of the endpoint began holding the session (the horizon
        # stands still meanwhile); None when nothing holds it
        self._held_since: float | None = None

    # -- inspection -----------------------------------------------------------------------

    @property
    def state(self) -> SessionState:
        return self._state

    @property
    def attempts(self) -> int:
        """Reconnection attempts since the last activation."""
        return self._attempts

    @property
    def terminated(self) -> bool:
        """The machine accepts nothing more: the session ended, or was handed over."""
        return self.state in _FINAL

    @property
    def handed_over(self) -> bool:
        return self.state is SessionState.HANDED_OVER

    def configure(self, config: SessionConfig) -> None:
        """Take reloaded reconnection settings: the next delay and horizon check use them (a
        reconnection already scheduled keeps its delay)."""
        self._config = config

    @property
    def horizon_deadline(self) -> float | None:
        """Monotonic time past which the current reconnection gives up; None while connected, and
        while an isolation holds the session (its horizon does not run)."""
        if self._lost_at is None or self._held_since is not None:
            return None
        return self._lost_at + self._config.horizon_s

    @property
    def held(self) -> bool:
        """An isolation of its endpoint holds the session (its horizon stands still)."""
        return self._held_since is not None

    # -- inputs ---------------------------------------------------------------------------

    def session_response(self, validation_error: SdkErrorEvent | None) -> list[Effect]:
        """The (re)connection's session response arrived, validated by the taxonomy.

        ``None`` when conversationId, agentId and status are present: the session becomes
        active and the attempt count resets (RETRY_SUCCESS after a reconnection). Otherwise
        the INCOMPLETE_RESPONSE / CONVERSATION_STATE_DRIFT event, which must be a fail-fast:
        the session terminates (seed section 3: "treat missing mandatory fields as
        state-corrupting errors and execute fail-fast logic"). Accepted only while connecting.
        """
        self._require(SessionState.CONNECTING, "session_response")
        if validation_error is not None:
            if not validation_error.fail_fast:
                raise ValueError(
                    f"a session-response validation error must be fail-fast, got {validation_error.code!r}"
                )
            return self._terminate(
                "fail_fast", termination_reason(validation_error), validation_error, validation_error.code
            )
        now_iso = iso_utc(self._clock.time())
        effects: list[Effect] = [self._move("validated", "VALIDATED", now_iso)]
        if self._attempts:
            effects.append(
                RetrySuccess(self.session_id, RetryKind.RECONNECT, self._attempts, timestamp=now_iso)
            )
        self._attempts = 0
        self._last_delay_ms = None
        self._lost_at = None
        self._held_since = None
        return effects

    def failure(self, event: SdkErrorEvent) -> list[Effect]:
        """A classified failure of this session or of one of its operations.

        Returns the effects of ending or moving the session, or nothing when the failure is
        the operation's alone (its retries belong to the retry executor).
        """
        state = self.state
        if state in _FINAL:
            raise InputRejected(self.session_id, state, f"failure({event.code})")
        rule = route(event)
        if rule is Route.FAIL_FAST:
            return self._terminate("fail_fast", termination_reason(event), event, event.code)
        if rule is Route.GRACEFUL:
            return self._terminate("graceful_close", TerminationReason.GRACEFUL_CLOSE, event, event.code)
        if rule is Route.DROP:
            if state is SessionState.RECONNECTING:
                # a late failure of the connection already lost: the pending reconnection covers it
                return []
            return self._drop(event)
        if rule is Route.LOST_PERMANENT:
            # the link is gone and the failure is not retryable: nothing can carry the session on
            return self._terminate("fail_fast", TerminationReason.PERMANENT_SESSION_ERROR, event, event.code)
        return []

    def reconnect_due(self, circuit_open_remaining_s: float | None, *, held: bool = False) -> list[Effect]:
        """The reconnection timer fired; ``circuit_open_remaining_s`` is None when the circuit admits.

        Admitted: move to connecting and emit :class:`Reconnect`. Refused: defer to
        ``now + remaining`` without counting an attempt, emit RECONNECTION_THROTTLED
        (seed edge case 1). ``held``: refused by an operator's isolation, the horizon stands
        still until it lets the session try again. Accepted only while reconnecting, so a
        second timer is caught.
        """
        self._require(SessionState.RECONNECTING, "reconnect_due")
        now_iso = iso_utc(self._clock.time())
        refused = circuit_open_remaining_s is not None and circuit_open_remaining_s > 0.0
        if refused and held:
            self._hold()
        else:
            self._release()
        if circuit_open_remaining_s is not None and circuit_open_remaining_s > 0.0:
            delay = circuit_open_remaining_s
            if not held and self._past_horizon(delay):
                # the endpoint stays closed past the horizon: the session gives up (RETRY_EXHAUSTED)
                return self._give_up(None, GiveUpReason.HORIZON)
            if self._config.throttle_jitter_s > 0.0:
                delay += self._rng.random() * self._config.throttle_jitter_s
            self._send("throttled")
            attempt = self._attempts
            return [
                ScheduleReconnect(
                    self.session_id, self._clock.monotonic() + delay, attempt, delay, attempt == 1
                ),
                ReconnectionThrottled(
                    self.session_id, attempt, circuit_open_remaining_s, delay, timestamp=now_iso
                ),
            ]
        return [self._move("reconnect", "RECONNECT_DUE", now_iso), Reconnect(self.session_id, self._attempts)]

    def connect_refused(self, circuit_open_remaining_s: float, *, held: bool = False) -> list[Effect]:
        """An attempt could not even start: a circuit it needs is open for ``remaining`` s.

        Not counted as an attempt (seed edge case 1); the session waits in ``reconnecting``
        and the horizon runs from now if it was not already running (``held``: an operator's
        isolation refused it, the horizon stands still meanwhile). Accepted while connecting,
        and while active: a live connection whose own next request (a CXone poll) the circuit
        refused has not failed either, it cannot go on (no failure is made up for it).
        """
        if self.state is not SessionState.ACTIVE:
            self._require(SessionState.CONNECTING, "connect_refused")
        if self._lost_at is None:
            self._lost_at = self._clock.monotonic()
        if held:
            self._hold()
        else:
            self._release()
        delay = max(circuit_open_remaining_s, 0.0)
        if self._config.throttle_jitter_s > 0.0:
            delay += self._rng.random() * self._config.throttle_jitter_s
        if not held and self._past_horizon(delay):
            return self._give_up(None, GiveUpReason.HORIZON)
        now_iso = iso_utc(self._clock.time())
        attempt = self._attempts
        return [
            self._move("refused", "CIRCUIT_OPEN", now_iso),
            ScheduleReconnect(self.session_id, self._clock.monotonic() + delay, attempt, delay, False),
            ReconnectionThrottled(
                self.session_id, attempt, circuit_open_remaining_s, delay, timestamp=now_iso
            ),
        ]

    def stop(self) -> list[Effect]:
        """Explicit stop or daemon shutdown: terminate with STOPPED."""
        if self.terminated:
            raise InputRejected(self.session_id, self.state, "stop")
        return self._terminate("stop", TerminationReason.STOPPED, None, None)

    def hand_over(self) -> list[Effect]:
        """Daemon shutdown with a store: the session is left alive for the next start to take over.

        SESSION_HANDED_OVER, never SESSION_TERMINATED: nothing ended, so nothing is to be revoked
        or re-authenticated (the event carries no ``action``).
        """
        if self.terminated:
            raise InputRejected(self.session_id, self.state, "hand_over")
        source = self.state
        now_iso = iso_utc(self._clock.time())
        transition = self._move("hand_over", "HANDED_OVER", now_iso)
        return [transition, SessionHandedOver(self.session_id, source, timestamp=now_iso)]

    # -- internals ------------------------------------------------------------------------

    def _require(self, expected: SessionState, input_name: str) -> None:
        state = self.state
        if state is not expected:
            raise InputRejected(self.session_id, state, input_name)

    def _send(self, machine_event: str) -> None:
        target = MOVES.get((self._state, machine_event))
        if target is None:
            # SessionMachine declares no such move from here (its instance would raise TransitionNotAllowed)
            raise InputRejected(self.session_id, self._state, machine_event)
        self._state = target  # type: ignore[assignment]

    def _move(self, machine_event: str, reason: str, now_iso: str) -> SessionTransition:
        source = self.state
        self._send(machine_event)
        return SessionTransition(self.session_id, source, self.state, machine_event, reason, now_iso)

    def _hold(self) -> None:
        """An isolation holds the session: its horizon stands still from now (if it ran)."""
        if self._held_since is None and self._lost_at is not None:
            self._held_since = self._clock.monotonic()

    def _release(self) -> None:
        """Nothing holds the session any more: the horizon runs again, moved by the time held."""
        held_since = self._held_since
        if held_since is not None:
            self._held_since = None
            if self._lost_at is not None:
                self._lost_at += self._clock.monotonic() - held_since

    def _drop(self, event: SdkErrorEvent) -> list[Effect]:
        """Connection lost: schedule the next reconnection, or give up past the horizon."""
        self._release()
        policy: RetryPolicy = event.policy
        index = self._attempts  # 0-based: reconnections already scheduled since the last success
        if index == 0:
            self._lost_at = self._clock.monotonic()
        retry_after = event.retry_after_ms if policy.honors_retry_after else None
        if retry_after is not None and retry_after > policy.retry_after_ceiling_ms:
            # a Retry-After past the ceiling is a quota breach, not an outage (Java SDK: > 180 s)
            return self._give_up(event, GiveUpReason.RETRY_AFTER_EXCEEDS_CEILING)
        if index == 0:
            # seed edge case 1: the first reconnection waits U(2 s, 8 s) so a fleet dropped
            # at once does not come back in the same millisecond
            lo, hi = self._config.first_delay_s
            delay_ms = (lo + self._rng.random() * (hi - lo)) * 1000.0
        else:
            # seed section 2: later attempts back off per the class policy (capped at its maximum;
            # the count is not a budget here: the horizon is)
            delay_ms = backoff_delay_ms(policy, index, self._rng, self._last_delay_ms)
        if retry_after is not None and retry_after >= 0:
            # seed edge case 2: a server's Retry-After is a minimum delay
            delay_ms = max(delay_ms, float(retry_after))
        delay_s = delay_ms / 1000.0
        if self._past_horizon(delay_s):
            return self._give_up(event, GiveUpReason.HORIZON)
        attempt = index + 1
        self._attempts = attempt
        self._last_delay_ms = delay_ms
        now_iso = iso_utc(self._clock.time())
        return [
            self._move("connection_lost", event.code, now_iso),
            ScheduleReconnect(
                self.session_id, self._clock.monotonic() + delay_s, attempt, delay_s, index == 0
            ),
            RetryAttempt(
                self.session_id, RetryKind.RECONNECT, attempt, delay_s, event.code, policy.name, now_iso
            ),
        ]

    def _past_horizon(self, delay_s: float) -> bool:
        """Would a reconnection ``delay_s`` from now fall past the horizon since the loss?"""
        lost_at = self._lost_at
        if lost_at is None:
            return False
        return self._clock.monotonic() + delay_s - lost_at > self._config.horizon_s

    def _give_up(self, event: SdkErrorEvent | None, reason: GiveUpReason) -> list[Effect]:
        """RETRY_EXHAUSTED: the reconnection gives up (``event`` is the failure that was last)."""
        now_iso = iso_utc(self._clock.time())
        exhausted = RetryExhausted(
            self.session_id,
            RetryKind.RECONNECT,
            self._attempts,
            event.code if event is not None else "CIRCUIT_OPEN",
            event.policy.name if event is not None else "circuit",
            reason.value,
            timestamp=now_iso,
        )
        code = event.code if event is not None else None
        return [exhausted, *self._terminate("exhausted", TerminationReason.RETRY_EXHAUSTED, event, code)]

    def _terminate(
        self,
        machine_event: str,
        reason: TerminationReason,
        event: SdkErrorEvent | None,
        code: str | None,
    ) -> list[Effect]:
        now_iso = iso_utc(self._clock.time())
        transition = self._move(machine_event, reason.value, now_iso)
        terminated = SessionTerminated(
            self.session_id,
            reason,
            None if event is None else event.trigger,
            None if event is None else event.raw_status,
            None if event is None else event.raw_code,
            now_iso,
            code,
            revokes_credential=event is not None and event.revokes_credential,
        )
        return [transition, terminated]


_DEFAULT_CONFIG: Final = SessionConfig()
#: the states nothing leaves
_FINAL: Final = frozenset({SessionState.TERMINATED, SessionState.HANDED_OVER})
