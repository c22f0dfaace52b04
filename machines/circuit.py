"""The circuit machine: closed → open → half_open, one per endpoint, pure and clock-driven.

Seed section 2: "Set the failure threshold to 5 consecutive transient errors within a
10-second window. Transition to Open for 30 seconds. Allow a single probe request in
Half-Open. Success returns to Closed. Failure returns to Open."

* :class:`CircuitMachine` declares the moves (strict python-statemachine ``StateMachine``).
* :class:`Circuit` is the driver the runtime calls: ``admit()`` before a call or a
  reconnection, then ``record_success()`` / ``record_failure(event)`` /
  ``probe_timed_out()``. Open → half_open happens lazily inside ``admit()`` once the open
  period has passed: machines hold no timers.

Choices beyond the seed, each taken from a library that made it:

* half-open admits exactly one probe (Polly v8); everyone else is refused at once and told
  how long remains (``retry_in_s``, Polly's ``BrokenCircuitException.RetryAfter``);
* the probe has its own timeout (Resilience4j ``maxWaitDurationInHalfOpenState``, #903):
  a hung probe reopens the circuit, whether the runtime reports it or ``admit()`` notices;
* optional, off by default: an open period that grows on consecutive trips, with jitter
  (Envoy outlier ejection: base × factor^(trips-1), capped, plus U(0, jitter)).

Only TRANSIENT failures count; a NONE outcome (an empty poll) is a success; PERMANENT and
STATE_CORRUPTING are the caller's business, not the endpoint's health, and so is a TRANSIENT
failure the taxonomy flags ``circuitNeutral`` (a 401 on a token our clock let lapse: 1,000 sessions
sharing a credential whose token just ran out would otherwise open the circuit for everyone, and
refuse the very replays that recover them; docs/taxonomy.md, "The 401 rule").

Manual control, beyond the seed (Polly's ``CircuitBreakerManualControl``, Resilience4j's
``FORCED_OPEN``: operators isolate an endpoint for a maintenance window and reset one after a false
trip): :meth:`Circuit.isolate` moves any state to ``isolated``, which admits nothing until
:meth:`Circuit.close` (or, with ``for_s``, the end of that period, noticed by the first ``admit()``
after it or by :meth:`Circuit.expire`) leads back to ``closed``; :meth:`Circuit.reset` leads any
state to ``closed`` with its counters cleared (the run of failures, the trips the optional growth
counts). There is no always-closed state. An isolated circuit refuses as an open one does, saying
``isolated`` so that its callers can tell a hand from a failure (docs/runtime.md, "Manual circuit
control"); it is told when it may admit at the earliest: the end of ``for_s``, or ``open_s`` for an
isolation without an end (the caller asks again, as it would of an open circuit).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Final

from statemachine import State, StateMachine
from statemachine.exceptions import TransitionNotAllowed

from machines.effects import (
    CircuitClosed,
    CircuitEffect,
    CircuitHalfOpened,
    CircuitManual,
    CircuitOpened,
    CircuitTransition,
    InputRejected,
)
from supervisor.clock import Clock, Rng, iso_utc
from supervisor.events import ManualAction
from supervisor.taxonomy.model import SdkErrorEvent, TaxonomyClass
from supervisor.vocabulary.states import CircuitState


class CircuitMachine(StateMachine):
    """Legal moves of one endpoint's circuit breaker; strict: an unaccepted event raises."""

    closed = State(initial=True, value=CircuitState.CLOSED)
    open = State(value=CircuitState.OPEN)
    half_open = State(value=CircuitState.HALF_OPEN)

    # seed section 2: 5 consecutive TRANSIENT failures within 10 s
    trip = closed.to(open)
    # seed section 2: after the open period, a single probe is let through
    probe = open.to(half_open)
    # seed section 2: "Success returns to Closed"
    probe_succeeded = half_open.to(closed)
    # seed section 2: "Failure returns to Open" (a probe timeout counts as a failure)
    probe_failed = half_open.to(open)

    # manual control (Polly's Isolate(), Resilience4j's FORCED_OPEN): a maintenance window; an
    # isolation given again only moves its end
    isolated = State(value=CircuitState.ISOLATED)
    isolate = (
        closed.to(isolated) | open.to(isolated) | half_open.to(isolated) | isolated.to.itself(internal=True)  # type: ignore[no-untyped-call,unused-ignore]
    )
    # the operator ends the isolation (Polly's Close())
    close = isolated.to(closed)
    # the isolation's period ran out
    isolation_ended = isolated.to(closed)
    # closed with every counter cleared, from any state (Polly's Reset(): a false trip)
    reset = (
        closed.to.itself(internal=True)  # type: ignore[no-untyped-call,unused-ignore]
        | open.to(closed)
        | half_open.to(closed)
        | isolated.to(closed)
    )


@dataclass(frozen=True, slots=True)
class CircuitConfig:
    """The breaker's numbers; defaults are the seed's (they equal Envoy's outlier defaults)."""

    failure_threshold: int = 5
    window_s: float = 10.0
    open_s: float = 30.0
    # a probe that has not answered by then counts as failed (Resilience4j #903)
    probe_timeout_s: float = 10.0
    # beyond the seed, off by default: open period = open_s * growth_factor**(trips-1),
    # capped at max_open_s, plus U(0, jitter_s)
    growth: bool = False
    growth_factor: float = 2.0
    max_open_s: float = 300.0
    jitter_s: float = 0.0

    def __post_init__(self) -> None:
        if self.failure_threshold < 1:
            raise ValueError(f"failure_threshold must be >= 1, got {self.failure_threshold!r}")
        for name in ("window_s", "open_s", "probe_timeout_s", "max_open_s", "jitter_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)!r}")
        if self.growth_factor < 1.0:
            raise ValueError(f"growth_factor must be >= 1, got {self.growth_factor!r}")


@dataclass(frozen=True, slots=True)
class Admission:
    """The answer of :meth:`Circuit.admit`.

    ``allowed`` with ``probe`` means "you carry the half-open probe": report its outcome
    with ``probe_id``. Refused callers get ``retry_in_s``, the time until the circuit can
    admit again at the earliest (the rest of the open period, or of the probe's timeout).
    """

    allowed: bool
    probe: bool = False
    retry_in_s: float = 0.0
    probe_id: int = 0
    effects: tuple[CircuitEffect, ...] = field(default=())
    # refused because an operator isolated the endpoint (not because it failed)
    isolated: bool = False


# the hot path (closed circuit) allocates nothing
ADMITTED: Final = Admission(True)
_NO_EFFECTS: Final[tuple[CircuitEffect, ...]] = ()
#: the reason of an opening a peer of the fleet made (:meth:`Circuit.open_for_peer`): it is not sent on again
PEER_OPENED: Final = "FLEET"


class Circuit:
    """Pure driver of one endpoint's circuit breaker.

    Outcomes of calls admitted before a trip may arrive late; they do not move an open or
    half-open circuit (only the probe's outcome does, matched by ``probe_id``). Reporting
    a probe id that was never issued raises :class:`~machines.effects.InputRejected`.
    """

    __slots__ = (
        "_clock",
        "_config",
        "_failures",
        "_isolated_until",
        "_open_until",
        "_probe_deadline",
        "_probe_id",
        "_rng",
        "_sm",
        "_state",
        "_trips",
        "circuit_id",
    )

    def __init__(self, circuit_id: str, clock: Clock, rng: Rng, config: CircuitConfig | None = None) -> None:
        self.circuit_id = circuit_id
        self._clock = clock
        self._rng = rng
        self._config = config if config is not None else _DEFAULT_CONFIG
        self._sm = CircuitMachine()
        # a copy of the machine's state, refreshed after every send: admit() reads it on the hot path
        self._state: CircuitState = self._sm.current_state_value
        # monotonic times of the current run of consecutive TRANSIENT failures (newest last)
        self._failures: deque[float] = deque(maxlen=self._config.failure_threshold)
        self._open_until = 0.0
        self._probe_deadline = 0.0
        # the id of the last probe handed out (0: none yet); the in-flight one while half-open
        self._probe_id = 0
        # consecutive openings without a successful probe, for the optional growth
        self._trips = 0
        # while isolated: the monotonic end of the isolation (inf: until closed or reset)
        self._isolated_until = math.inf

    # -- inspection -----------------------------------------------------------------------

    @property
    def state(self) -> CircuitState:
        return self._state

    @property
    def probe_in_flight(self) -> bool:
        """Half-open always has exactly one probe out (it is entered by handing one out)."""
        return self.state is CircuitState.HALF_OPEN

    @property
    def consecutive_failures(self) -> int:
        return len(self._failures)

    @property
    def trips(self) -> int:
        """Consecutive openings without a successful probe (what the optional growth counts)."""
        return self._trips

    @property
    def isolated_until(self) -> float | None:
        """While isolated with an end: its monotonic time; None otherwise (or isolated until closed)."""
        if self._state is not CircuitState.ISOLATED or math.isinf(self._isolated_until):
            return None
        return self._isolated_until

    def retry_in_s(self) -> float | None:
        """Seconds until the circuit may admit again; None while it admits (closed, or open and due)."""
        state = self.state
        now = self._clock.monotonic()
        if state is CircuitState.CLOSED:
            return None
        if state is CircuitState.OPEN:
            return None if now >= self._open_until else self._open_until - now
        if state is CircuitState.ISOLATED:
            return None if now >= self._isolated_until else self._isolation_retry_in(now)
        return max(self._probe_deadline - now, 0.0)

    # -- inputs ---------------------------------------------------------------------------

    def admit(self) -> Admission:
        """May a call (or a reconnection) go to this endpoint now?"""
        state = self._state
        if state is CircuitState.CLOSED:
            return ADMITTED
        now = self._clock.monotonic()
        effects: tuple[CircuitEffect, ...] = ()
        if state is CircuitState.ISOLATED:
            if now < self._isolated_until:
                return Admission(False, retry_in_s=self._isolation_retry_in(now), isolated=True)
            # the isolation's period is over: closed again, and this call is admitted
            return Admission(True, effects=self._end_isolation("isolation_ended", ManualAction.EXPIRE))
        if state is CircuitState.HALF_OPEN:
            if now < self._probe_deadline:
                # seed section 2: a single probe; concurrent callers are refused at once
                return Admission(False, retry_in_s=self._probe_deadline - now)
            # the probe hung past its timeout and nobody said so: it failed
            effects = self._reopen("PROBE_TIMEOUT", now)
        if now < self._open_until:
            return Admission(False, retry_in_s=self._open_until - now, effects=effects)
        self._probe_id += 1
        self._probe_deadline = now + self._config.probe_timeout_s
        now_iso = iso_utc(self._clock.time())
        effects = (
            *effects,
            self._move("probe", "OPEN_PERIOD_ELAPSED", now_iso),
            CircuitHalfOpened(self.circuit_id, self._probe_id, timestamp=now_iso),
        )
        return Admission(True, probe=True, probe_id=self._probe_id, effects=effects)

    def record_success(self, probe_id: int = 0) -> tuple[CircuitEffect, ...]:
        """A call succeeded; ``probe_id`` is the Admission's when the call was the probe."""
        state = self.state
        if probe_id:
            if self._is_current_probe(probe_id, "record_success"):
                self._trips = 0
                self._failures.clear()
                now_iso = iso_utc(self._clock.time())
                return (
                    self._move("probe_succeeded", "PROBE_SUCCEEDED", now_iso),
                    CircuitClosed(self.circuit_id, probe_id, timestamp=now_iso),
                )
            return _NO_EFFECTS
        if state is CircuitState.CLOSED and self._failures:
            # seed section 2: the failures must be consecutive; a success breaks the run
            self._failures.clear()
        return _NO_EFFECTS

    def record_failure(self, event: SdkErrorEvent, probe_id: int = 0) -> tuple[CircuitEffect, ...]:
        """A call failed with ``event``; only TRANSIENT failures not flagged circuitNeutral count."""
        cls = event.taxonomy_class
        counts = cls is TaxonomyClass.TRANSIENT and not event.circuit_neutral
        if probe_id:
            if not self._is_current_probe(probe_id, "record_failure"):
                return _NO_EFFECTS
            if counts:
                return self._reopen("PROBE_FAILED", self._clock.monotonic())
            # the endpoint answered: its health is fine, the failure is the caller's to handle
            return self.record_success(probe_id)
        if cls is TaxonomyClass.NONE:
            return self.record_success()
        if not counts or self.state is not CircuitState.CLOSED:
            return _NO_EFFECTS
        now = self._clock.monotonic()
        failures = self._failures
        failures.append(now)  # the deque keeps only the newest `failure_threshold`
        if len(failures) < self._config.failure_threshold or now - failures[0] > self._config.window_s:
            return _NO_EFFECTS
        return self._open("trip", event.code, now, len(failures))

    def probe_timed_out(self, probe_id: int) -> tuple[CircuitEffect, ...]:
        """The probe ``probe_id`` has not answered within ``probe_timeout_s``: reopen."""
        if not self._is_current_probe(probe_id, "probe_timed_out"):
            return _NO_EFFECTS
        return self._reopen("PROBE_TIMEOUT", self._clock.monotonic())

    def open_for_peer(self, for_s: float) -> tuple[CircuitEffect, ...]:
        """Another member of the fleet opened its circuit of this endpoint, for ``for_s`` more
        seconds: a closed circuit opens for that long (reason ``FLEET``; its own failures are not
        counted again, its trips neither), an open one stays open at least that long. A half-open
        circuit waits for its own probe's answer, an isolated one for its operator: unchanged."""
        if not (for_s > 0.0 and math.isfinite(for_s)):
            return _NO_EFFECTS
        now = self._clock.monotonic()
        if self._state is CircuitState.OPEN:
            self._open_until = max(self._open_until, now + for_s)
            return _NO_EFFECTS
        if self._state is not CircuitState.CLOSED:
            return _NO_EFFECTS
        self._open_until = now + for_s
        self._failures.clear()
        now_iso = iso_utc(self._clock.time())
        return (
            self._move("trip", PEER_OPENED, now_iso),
            CircuitOpened(self.circuit_id, PEER_OPENED, 0, for_s, self._trips, timestamp=now_iso),
        )

    # -- manual control (docs/runtime.md, "Manual circuit control") -------------------------

    def isolate(self, for_s: float | None = None) -> tuple[CircuitEffect, ...]:
        """Admit nothing until :meth:`close`, :meth:`reset` or, with ``for_s``, that many seconds.

        From any state; an isolation given again replaces the end of the one in force. A
        half-open probe still out is a late answer from now on (it moves nothing).
        """
        if for_s is not None and not (for_s > 0.0 and math.isfinite(for_s)):
            raise ValueError(f"an isolation lasts a positive number of seconds, got {for_s!r}")
        source = self._state
        now = self._clock.monotonic()
        self._isolated_until = math.inf if for_s is None else now + for_s
        now_iso = iso_utc(self._clock.time())
        until = None if for_s is None else iso_utc(self._clock.time() + for_s)
        manual = CircuitManual(
            self.circuit_id,
            ManualAction.ISOLATE,
            source,
            CircuitState.ISOLATED,
            for_s,
            until,
            timestamp=now_iso,
        )
        if source is CircuitState.ISOLATED:
            return (manual,)  # (an internal move: only its end changed)
        return (self._move("isolate", "MANUAL", now_iso), manual)

    def close(self) -> tuple[CircuitEffect, ...]:
        """End an isolation: ``closed``, its counters as they were. Only an isolated circuit closes
        by hand (an open one is :meth:`reset`); any other state raises InputRejected."""
        if self._state is not CircuitState.ISOLATED:
            raise InputRejected(self.circuit_id, self._state, "close")
        return self._end_isolation("close", ManualAction.CLOSE)

    def expire(self) -> tuple[CircuitEffect, ...]:
        """The isolation's period is over by now: ``closed`` (nothing when it is not, or there is none)."""
        if self._state is not CircuitState.ISOLATED or self._clock.monotonic() < self._isolated_until:
            return _NO_EFFECTS
        return self._end_isolation("isolation_ended", ManualAction.EXPIRE)

    def reset(self) -> tuple[CircuitEffect, ...]:
        """From any state to ``closed`` with its counters cleared: the run of failures, the trips
        the optional growth counts, the open period. A probe still out is a late answer from now on."""
        source = self._state
        self._failures.clear()
        self._trips = 0
        self._open_until = 0.0
        self._isolated_until = math.inf
        now_iso = iso_utc(self._clock.time())
        manual = CircuitManual(
            self.circuit_id, ManualAction.RESET, source, CircuitState.CLOSED, timestamp=now_iso
        )
        return (self._move("reset", "MANUAL", now_iso), manual)

    # -- internals ------------------------------------------------------------------------

    def _isolation_retry_in(self, now: float) -> float:
        # the end of the isolation, or, without one, an open period (the caller asks again then,
        # as it would of an open circuit; the runtime wakes its waiting sessions when it ends), at
        # least a second: an open period of 0 must not make its callers ask in a loop
        return min(self._isolated_until - now, max(self._config.open_s, 1.0))

    def _end_isolation(self, machine_event: str, action: ManualAction) -> tuple[CircuitEffect, ...]:
        self._isolated_until = math.inf
        now_iso = iso_utc(self._clock.time())
        return (
            self._move(
                machine_event, "MANUAL" if action is ManualAction.CLOSE else "ISOLATION_ENDED", now_iso
            ),
            CircuitManual(
                self.circuit_id, action, CircuitState.ISOLATED, CircuitState.CLOSED, timestamp=now_iso
            ),
        )

    def _is_current_probe(self, probe_id: int, input_name: str) -> bool:
        if probe_id < 0 or probe_id > self._probe_id:
            raise InputRejected(self.circuit_id, self.state, f"{input_name}(probe_id={probe_id})")
        # an older probe, or one the circuit already timed out, is a late answer
        return probe_id == self._probe_id and self.state is CircuitState.HALF_OPEN

    def _reopen(self, reason: str, now: float) -> tuple[CircuitEffect, ...]:
        return self._open("probe_failed", reason, now, 1)

    def _open(self, machine_event: str, reason: str, now: float, failures: int) -> tuple[CircuitEffect, ...]:
        self._trips += 1
        open_s = self._open_period()
        self._open_until = now + open_s
        self._failures.clear()
        now_iso = iso_utc(self._clock.time())
        return (
            self._move(machine_event, reason, now_iso),
            CircuitOpened(self.circuit_id, reason, failures, open_s, self._trips, timestamp=now_iso),
        )

    def _open_period(self) -> float:
        cfg = self._config
        if not cfg.growth:
            return cfg.open_s
        # Envoy outlier ejection: the period grows with repeated trips, capped, plus jitter
        grown = min(cfg.open_s * cfg.growth_factor ** min(self._trips - 1, 64), cfg.max_open_s)
        return grown + self._rng.random() * cfg.jitter_s if cfg.jitter_s > 0.0 else grown

    def _move(self, machine_event: str, reason: str, now_iso: str) -> CircuitTransition:
        source = self.state
        try:
            self._sm.send(machine_event)
        except TransitionNotAllowed as exc:  # pragma: no cover - the driver checks states first
            raise InputRejected(self.circuit_id, source, machine_event) from exc
        self._state = self._sm.current_state_value
        return CircuitTransition(self.circuit_id, source, self._state, machine_event, reason, now_iso)


_DEFAULT_CONFIG: Final = CircuitConfig()
