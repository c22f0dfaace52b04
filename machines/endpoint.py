"""One endpoint's admission, decided once (docs/runtime.md, "One attempt path"): circuit, pacer, retry budget, places.

Pure, synchronous and clock-driven, like the machines it holds. Every attempt to an endpoint (a
WebSocket handshake, a CXone session start, a REST call, a token fetch) is decided by the
endpoint's :class:`Endpoint`, through the one async shell that waits on its answers
(supervisor/attempts/shell.py); nothing else calls a circuit's ``admit``/``record_*`` or a pacer
(tests/unit/test_import_rules.py). Before, the session runner, the retry executor and the
attribute sender each ran their own copy of this, and where one wrapped the other the same refusal
was counted twice (a CXone start refused for load was told to two circuits and cut two pacers).

Per attempt::

    answer = endpoint.ask()            # Wait (sleep, ask again with its booking) | Refused | Ticket
    placed = endpoint.place()          # connect endpoints: a place in flight (False: wait for one)
    ...                                # held_for() / respace(): the waiting a place may need
    moves = endpoint.answered(ticket, failure_or_None, sent_at)
    endpoint.release()                 # the place, whatever the answer (or none came)

* :meth:`Endpoint.ask`: a slot of the endpoint's pacer (when paced), then the circuit's admission.
  A slot reserved before a throttle is void (the pace was cut and the endpoint may be paused): the
  caller reserves again. Refused: the circuit is open (or its one probe is out).
* :meth:`Endpoint.place`: connect endpoints cap the attempts in flight (``Pacer.in_flight_cap``);
  waiters are served first come, first served by :meth:`hand_over` as places come back; one that
  waited for its place waits out a Retry-After that came back meanwhile (:meth:`held_for`) and is
  spaced again at the rate (:meth:`respace`), so places freed in one batch do not let a burst go.
  REST endpoints keep no cap and no respacing (docs/runtime.md, "Admission").
* :meth:`Endpoint.answered`: the echo rule (a refusal for load of an attempt sent before the
  endpoint's last cut is that cut's echo and is not counted again toward the circuit: RFC 6582
  section 3.2), success or failure on the circuit, the pacer probed up or cut once per episode,
  and a Retry-After held for the whole endpoint.
* the retry budget across calls (:meth:`called`, :meth:`may_retry`), asked when a retry comes due.

On the hot path (a closed circuit, the pace not holding anyone) a successful attempt makes no
machine transition and no object of the endpoint's own: :meth:`ask` answers the shared :data:`GO`
ticket and :meth:`answered` the shared :data:`QUIET` moves (tests/unit/test_endpoint.py).
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Final

from machines.circuit import Circuit
from machines.effects import CircuitEffect
from machines.pacing import Pacer, PacerReport, PacingConfig, echo_of_throttle
from machines.retry_budget import RetryBudget
from supervisor.clock import Clock
from supervisor.taxonomy.headers import RateLimitReading
from supervisor.taxonomy.model import SdkErrorEvent, TaxonomyClass
from supervisor.vocabulary import CircuitState, EndpointId

__all__ = [
    "GO",
    "QUIET",
    "Booking",
    "Endpoint",
    "EndpointKind",
    "Moves",
    "Refused",
    "Ticket",
    "Wait",
    "throttles",
]


class EndpointKind(enum.StrEnum):
    """What an endpoint admits, which decides what it holds."""

    # WebSocket handshakes and CXone session starts: paced from the start (a start-up is a storm
    # too), with places in flight; PACING_CHANGED says kind "connect"
    CONNECT = "connect"
    # REST calls: paced from the first throttle, no places in flight, no respacing
    REST = "rest"
    # a token endpoint: its circuit only (one fetch serves every session of the credential)
    TOKEN = "token"


@dataclass(frozen=True, slots=True)
class Ticket:
    """Leave to make one attempt: ``probe_id`` when it carries the circuit's half-open probe
    (report its answer with the ticket), and the circuit's moves that admitting it made."""

    probe_id: int = 0
    effects: tuple[CircuitEffect, ...] = ()


#: the ticket of an attempt a closed circuit admitted at once (the hot path: nothing allocated)
GO: Final = Ticket()


@dataclass(frozen=True, slots=True)
class Refused:
    """The circuit refused the attempt: it may admit again in ``retry_in_s`` at the earliest.
    ``isolated``: an operator isolated the endpoint (``ctl circuit isolate``), nothing failed."""

    circuit_id: str
    retry_in_s: float
    effects: tuple[CircuitEffect, ...] = ()
    isolated: bool = False


class Booking:
    """One attempt's place in the pacer's schedule, carried from one :meth:`Endpoint.ask` to the next."""

    __slots__ = ("booked", "due", "generation")

    def __init__(self, due: float, generation: int, booked: bool) -> None:
        # monotonic time of the slot; the pacer's generation when it was reserved; False: the next
        # slot was too far ahead to book (ask again after the wait)
        self.due = due
        self.generation = generation
        self.booked = booked


@dataclass(frozen=True, slots=True)
class Wait:
    """Sleep ``seconds``, then ask again with ``booking``. ``slot``: waiting for the slot itself
    (a caller with a deadline gives up when ``seconds`` take it past it), not a send check."""

    seconds: float
    booking: Booking
    slot: bool


@dataclass(frozen=True, slots=True)
class Moves:
    """What answering an attempt moved: the circuit's effects and the pacer's report (for the bus)."""

    effects: tuple[CircuitEffect, ...] = ()
    report: PacerReport | None = None


#: an answer that moved nothing worth a report (the hot path)
QUIET: Final = Moves()
_NO_EFFECTS: Final[tuple[CircuitEffect, ...]] = ()


def throttles(event: SdkErrorEvent) -> bool:
    """The platform refused for load: a 429, or a 5xx that says when to come back (Retry-After).

    In the taxonomy's terms (a TRANSIENT code whose policy honours Retry-After, never a code's
    name), and the answer either carried a Retry-After or is the rate-limit status itself
    (429, RFC 6585 section 4). A 5xx without Retry-After is a back end failing (a brownout), not
    a request to slow down: retries, their budget and the circuit answer it. Cutting the whole
    endpoint's pace for it starved the healthy calls (docs/benchmarks.md, "Brownout", measured it).
    """
    if event.taxonomy_class is not TaxonomyClass.TRANSIENT or not event.policy.honors_retry_after:
        return False
    return event.retry_after_ms is not None or event.raw_status == 429


class Endpoint:
    """Admission of attempts to one endpoint; see the module docstring."""

    __slots__ = (
        "_budget",
        "_circuit",
        "_clock",
        "_held_until",
        "_in_flight",
        "_pacer",
        "_waiting",
        "endpoint_id",
        "keeps_places",
        "kind",
    )

    def __init__(
        self,
        endpoint_id: EndpointId,
        kind: EndpointKind,
        clock: Clock,
        circuit: Circuit,
        *,
        pacer: Pacer | None = None,
        budget: RetryBudget | None = None,
    ) -> None:
        self.endpoint_id = endpoint_id
        self.kind = kind
        self._clock = clock
        self._circuit = circuit
        self._pacer = pacer
        self._budget = budget
        #: whether attempts may ever wait for a place in flight (a connect endpoint's pacer caps them)
        self.keeps_places = pacer is not None and pacer.caps_in_flight
        # attempts holding a place in flight, and attempts waiting for one
        self._in_flight = 0
        self._waiting = 0
        # the Retry-After window when no pacer holds it (admission not adaptive): read by those
        # who hold their own work back for it (the attribute tenant), never waited on by ask()
        self._held_until = -math.inf

    # -- inspection -------------------------------------------------------------------------

    @property
    def circuit_id(self) -> str:
        return self._circuit.circuit_id

    @property
    def rate(self) -> float | None:
        """The pacer's rate (attempts per second); None while unpaced or without a pacer."""
        return None if self._pacer is None else self._pacer.rate

    def seed(self, limit: float) -> None:
        """Seed the pacer with a limit learned before (:meth:`machines.pacing.Pacer.seed`); nothing without one."""
        if self._pacer is not None:
            self._pacer.seed(limit)

    def learned(self) -> float | None:
        """The limit the pacer knows this endpoint by (:meth:`machines.pacing.Pacer.learned`); None
        without a pacer or before it learned one."""
        return None if self._pacer is None else self._pacer.learned()

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @property
    def waiting(self) -> int:
        return self._waiting

    def cap(self) -> int | None:
        """Attempts that may be in flight at once now; None: no cap (REST and token endpoints)."""
        return None if self._pacer is None else self._pacer.in_flight_cap()

    def held_for(self) -> float:
        """Seconds the endpoint is still held by a Retry-After (0 when it is not)."""
        if self._pacer is not None:
            return self._pacer.paused_for()
        return max(0.0, self._held_until - self._clock.monotonic())

    # -- an attempt -------------------------------------------------------------------------

    def ask(self, booking: Booking | None = None) -> Ticket | Wait | Refused:
        """May an attempt go now? Its slot of the pace first (when paced), then the circuit.

        ``booking``: the one a :class:`Wait` answered, when asking again after it.
        """
        pacer = self._pacer
        if pacer is not None:
            wait = self._paced(pacer, booking)
            if wait is not None:
                return wait
        admission = self._circuit.admit()
        if not admission.allowed:
            return Refused(
                self._circuit.circuit_id, admission.retry_in_s, admission.effects, admission.isolated
            )
        if admission.probe_id or admission.effects:
            return Ticket(admission.probe_id, admission.effects)
        return GO

    def _paced(self, pacer: Pacer, booking: Booking | None) -> Wait | None:
        """The slot: a wait for it, or None once the attempt may go (the send check passed)."""
        if booking is not None and booking.booked and pacer.generation == booking.generation:
            # booked: spaced again at the rate if a stall left many slots due at once
            extra = pacer.send(booking.due)
            return Wait(extra, booking, slot=False) if extra > 0 else None
        # (no booking yet, none could be made, or a throttle voided it meanwhile)
        generation = pacer.generation
        wait, booked = pacer.reserve()
        now = self._clock.monotonic()
        if wait > 0:
            return Wait(wait, Booking(now + wait, generation, booked), slot=True)
        # due now (so booked): the send check, as for any booked slot
        extra = pacer.send(now)
        return Wait(extra, Booking(now, generation, True), slot=False) if extra > 0 else None

    def place(self) -> bool | None:
        """A place in flight for an attempt about to leave: True taken, False queued (wait for
        :meth:`hand_over`), None when the endpoint keeps no cap."""
        cap = self.cap()
        if cap is None:
            return None
        if self._waiting == 0 and self._in_flight < cap:
            self._in_flight += 1
            return True
        self._waiting += 1
        return False

    def hand_over(self) -> bool:
        """Is there a place now for the first attempt waiting? (Taken on its behalf when True.)

        The cap moves with what the platform admits; a lower cap only holds back new attempts.
        """
        if not self._waiting:
            return False
        cap = self.cap()
        if cap is not None and self._in_flight >= cap:
            return False
        self._waiting -= 1
        self._in_flight += 1
        return True

    def withdraw(self) -> None:
        """An attempt waiting for a place gave up (cancelled)."""
        self._waiting = max(0, self._waiting - 1)

    def release(self) -> None:
        """An attempt gives its place back: its answer came (or none will)."""
        self._in_flight = max(0, self._in_flight - 1)

    def respace(self, queued_at: float) -> float:
        """An attempt that waited since ``queued_at`` for its place is about to go: 0 when it may
        go now, else the seconds to wait before asking again (``Pacer.respace``)."""
        return 0.0 if self._pacer is None else self._pacer.respace(queued_at)

    def answered(
        self,
        ticket: Ticket,
        failure: SdkErrorEvent | None,
        sent_at: float,
        reading: RateLimitReading | None = None,
    ) -> Moves:
        """The attempt that left at ``sent_at`` (monotonic) was answered: ``failure`` None when
        the endpoint answered it (a success, or a success the caller then judged incomplete: the
        endpoint is healthy), else its classified failure. Each is told once, here. ``reading``:
        what the answer said of the platform's rate window (``Pacer.reading``: the pace slows
        before the window is spent)."""
        circuit, pacer = self._circuit, self._pacer
        if failure is None:
            effects = circuit.record_success(ticket.probe_id)
            report = None
            if pacer is not None:
                # attempts waiting for a place in flight: the cap, not the pace, holds them (the
                # daemon's own answers queue up), so the pace is not grown past what is sent
                report = pacer.admitted(self._clock.monotonic() - sent_at, capped=self._waiting > 0)
            if reading is not None and pacer is not None:
                report = pacer.reading(reading) or report
            return QUIET if not effects and report is None else Moves(effects, report)
        throttled = throttles(failure)
        effects = _NO_EFFECTS
        if not echo_of_throttle(pacer, throttled, ticket.probe_id, sent_at):
            # (a refusal of an attempt in flight when the endpoint's throttle came back is that
            # throttle's echo: counted once toward the circuit)
            effects = circuit.record_failure(failure, ticket.probe_id)
        report = None
        if throttled:
            retry_after = None if failure.retry_after_ms is None else failure.retry_after_ms / 1000.0
            if pacer is not None:
                # the platform said "slower" for the endpoint: everyone waits its Retry-After
                report = pacer.throttled(retry_after)
            elif retry_after is not None:
                self._held_until = max(self._held_until, self._clock.monotonic() + retry_after)
        return QUIET if not effects and report is None else Moves(effects, report)

    def hold(self, until: float) -> bool:
        """A peer of the fleet was told Retry-After for this endpoint: nothing leaves here before
        ``until`` (monotonic) either (:meth:`machines.pacing.Pacer.hold`; without a pacer, the same
        window :meth:`held_for` reports). True when it lengthened the hold."""
        if self._pacer is not None:
            return self._pacer.hold(until)
        if until <= self._held_until + 1e-9:
            return False
        self._held_until = until
        return True

    def rescale(self, config: PacingConfig, factor: float) -> None:
        """The pacer goes on with ``config``, its rates moved by ``factor``
        (:meth:`machines.pacing.Pacer.rescale`); nothing without one."""
        if self._pacer is not None:
            self._pacer.rescale(config, factor)

    def open_for_peer(self, for_s: float) -> tuple[CircuitEffect, ...]:
        """A peer's circuit of this endpoint opened for ``for_s`` more seconds
        (:meth:`machines.circuit.Circuit.open_for_peer`)."""
        return self._circuit.open_for_peer(for_s)

    def lost(self) -> PacerReport | None:
        """The platform dropped a connection of this endpoint: the pace learned before is stale
        (``Pacer.lost``: restart from the initial rate unless attempts are going through)."""
        return None if self._pacer is None else self._pacer.lost()

    # -- manual control of the circuit (docs/runtime.md, "Manual circuit control") -------------

    @property
    def circuit_state(self) -> CircuitState:
        return self._circuit.state

    @property
    def isolated_until(self) -> float | None:
        """The monotonic end of the circuit's isolation, when it has one (``Circuit.isolated_until``)."""
        return self._circuit.isolated_until

    def isolate(self, for_s: float | None = None) -> tuple[CircuitEffect, ...]:
        """Admit nothing until closed, reset or ``for_s`` seconds from now (``Circuit.isolate``)."""
        return self._circuit.isolate(for_s)

    def close(self) -> tuple[CircuitEffect, ...]:
        """End the circuit's isolation (``Circuit.close``: only an isolated circuit closes by hand)."""
        return self._circuit.close()

    def expire(self) -> tuple[CircuitEffect, ...]:
        """The isolation's period is over by now: closed (``Circuit.expire``; nothing otherwise)."""
        return self._circuit.expire()

    def reset(self) -> tuple[CircuitEffect, ...]:
        """Closed with the circuit's counters cleared, from any state (``Circuit.reset``)."""
        return self._circuit.reset()

    # -- the retry budget across calls ---------------------------------------------------------

    def called(self) -> None:
        """An operation's first attempt is going out (the budget counts calls)."""
        if self._budget is not None:
            self._budget.call()

    def may_retry(self) -> bool:
        """May a retry that came due go out now? Counted when it may."""
        return self._budget is None or self._budget.allow_retry()

    @property
    def retries_refused(self) -> int | None:
        """Retries the retry budget refused so far (a metric); None when the endpoint has no budget."""
        return None if self._budget is None else self._budget.refused
