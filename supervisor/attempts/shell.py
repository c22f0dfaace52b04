"""The runtime's async attempt shell: every attempt to an endpoint goes through a :class:`Gate`.

The decisions are :class:`machines.endpoint.Endpoint`'s (pure, one per endpoint); this module only
waits on its answers and tells it what happened, once (docs/runtime.md, "One attempt path"). It is the one caller of
``Endpoint`` (tests/unit/test_import_rules.py names the shell modules allowed to call it). Its
callers, each for its own attempts:

* the session runner (supervisor/runtime/session_runner.py): a connection attempt is admitted on
  the session's connect endpoint while the session waits to reconnect (the slot of its pace, the
  circuit: a refusal defers the reconnection without counting it), and the :class:`Flight` goes
  with ``transport.open`` to where the attempt is made: a WebSocket handshake leaves
  (:meth:`Flight.leave`) right before it is made, a CXone session start through the retry executor;
* the retry executor (supervisor/rest/executor.py): every attempt of an operation, each asked anew
  (and a connect attempt the runner admitted, for its first);
* the attribute sender (supervisor/attributes/): its calls go through the executor, and its tenant
  waits on the endpoint's Retry-After hold (:meth:`Gate.held_for`) instead of keeping one itself.

The waiting is here, decided by the endpoint's answers: sleeping until a slot (a deadline may
cut it short, a stop end it; callers the pace has no slot for yet, and callers spaced again after
waking late for theirs, wait in line behind one of them that asks for all: :class:`_Line`),
waiting first come, first served for a place in flight (a place is
never lost: cancelled waiters and attempts give theirs back), then waiting out a Retry-After that
came back meanwhile and the respacing of waiters released together. Circuit and pacing moves go
to the caller's :class:`Reports` (the executor's hooks, or the bus).

The library's sync and async shells (supervisor/library/) drive the same core for applications that
call the platforms themselves (docs/library.md).
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Final, Protocol

import anyio

from machines.effects import CircuitEffect, CircuitManual
from machines.endpoint import QUIET, Endpoint, EndpointKind, Refused, Ticket, Wait
from machines.pacing import PacerReport
from machines.registry import Endpoints
from supervisor.clock import Clock
from supervisor.errors import CircuitOpenError
from supervisor.taxonomy import SdkErrorEvent
from supervisor.taxonomy.headers import RateLimitReading
from supervisor.vocabulary import CircuitState, EndpointId

__all__ = [
    "SILENT",
    "Attempts",
    "Flight",
    "Gate",
    "Late",
    "Pending",
    "Refused",
    "Reports",
    "Sleep",
    "TenantQuota",
]

Sleep = Callable[[float], Awaitable[None]]
#: what the endpoint answered an attempt that may not go at once (to wait on, or a refusal)
Pending = Wait | Refused


class Reports(Protocol):
    """Where an attempt's circuit and pacing moves go (the executor's hooks have this shape)."""

    def circuit(self, effects: tuple[CircuitEffect, ...]) -> None: ...

    def pacing(self, report: PacerReport) -> None: ...


class _Silent:
    def circuit(self, effects: tuple[CircuitEffect, ...]) -> None:
        pass

    def pacing(self, report: PacerReport) -> None:
        pass


#: moves nobody listens to (an executor without hooks)
SILENT: Final[Reports] = _Silent()


@dataclass(frozen=True, slots=True)
class Late:
    """The endpoint's next slot falls past the caller's deadline: it would have waited ``wait_s``."""

    wait_s: float


#: the hard tenant quota's question for one attempt of a tenant: 0 admitted, else seconds to wait
#: before asking again (supervisor/fleet/quota.py)
TenantQuota = Callable[[str], Awaitable[float]]


class Attempts:
    """The gates of every endpoint, over one :class:`~machines.registry.Endpoints`."""

    __slots__ = ("_gates", "_quota", "endpoints")

    def __init__(self, endpoints: Endpoints) -> None:
        self.endpoints = endpoints
        self._gates: dict[EndpointId, Gate] = {}
        self._quota: TenantQuota | None = None

    def limit_tenants(self, quota: TenantQuota | None) -> None:
        """Ask ``quota`` for every attempt of a connect or REST endpoint (its tenant's), right before
        it leaves: the hard tenant quota of a fleet (docs/runtime.md, "Admission across a fleet");
        None: no quota. The gates made already and those made from now on."""
        self._quota = quota
        for gate in self._gates.values():
            gate.limit(quota)

    def connect(self, name: EndpointId) -> Gate:
        """The gate of a session's connection attempts (paced from the start, places in flight)."""
        return self._gate(name, self.endpoints.connect)

    def token(self, name: EndpointId) -> Gate:
        """The gate of a credential's token endpoint (its circuit only)."""
        return self._gate(name, self.endpoints.token)

    def get(self, name: EndpointId) -> Gate:
        """The gate of ``name`` as made before, else of a REST endpoint."""
        gate = self._gates.get(name)
        return gate if gate is not None else self._gate(name, self.endpoints.get)

    def _gate(self, name: EndpointId, made: Callable[[EndpointId], Endpoint]) -> Gate:
        gate = self._gates.get(name)
        endpoint = made(name)  # (checks the kind of an endpoint made before)
        if gate is None:
            gate = self._gates[name] = Gate(endpoint, self.endpoints.clock)
            if self._quota is not None:
                gate.limit(self._quota)
        return gate


class _Waiter:
    """One attempt waiting for a place in flight."""

    __slots__ = ("event", "handed")

    def __init__(self) -> None:
        self.event = anyio.Event()
        # a place was taken on its behalf (it must give it back if it is cancelled before it runs)
        self.handed = False


class _Line:
    """Callers of one endpoint waiting for the same thing from its pace (a slot to book, or their
    turn to go out at the rate): one of them, the leader, sleeps the pace's wait and asks again;
    the others wait in line, first come, first served, woken as those before them get through.

    A caller woken (or the leader, awake) holds the line's turn: when it gets through it wakes the
    next two (:meth:`pass_turn`: the ones after them woken in a few turns of the event loop, not
    one turn each: a loop busy with thousands of sessions turns a few times a second), and when it
    does not it waits again at the head of the line (``front``).
    """

    __slots__ = ("_back", "_leading", "_queue")

    def __init__(self) -> None:
        self._queue: deque[anyio.Event] = deque()
        # those woken who did not get through, back in line before the rest, in the order they had
        self._back: deque[anyio.Event] = deque()
        self._leading = False

    async def wait(self, sleep: Sleep, seconds: float, *, front: bool) -> None:
        """Until this caller is to ask the pace again (it then holds the turn)."""
        if not self._leading:
            self._leading = True
            try:
                await sleep(seconds)
            except BaseException:
                self._leading = False
                self.pass_turn()  # nobody else asks for the line: the next in line leads now
                raise
            self._leading = False
            return
        woken = anyio.Event()
        queue = self._back if front else self._queue
        queue.append(woken)
        try:
            await woken.wait()
        except BaseException:
            if woken.is_set():
                self.pass_turn()  # woken, then cancelled before it asked: the next ask instead
            else:
                queue.remove(woken)
            raise

    def pass_turn(self) -> None:
        """Wake the first two callers in line (they ask the pace now)."""
        for _ in range(2):
            queue = self._back if self._back else self._queue
            if not queue:
                return
            queue.popleft().set()


class Gate:
    """One endpoint's attempts: admission, places in flight, answers (the module docstring)."""

    __slots__ = (
        "_clock",
        "_endpoint",
        "_held",
        "_quota",
        "_sending",
        "_unbooked",
        "_waiters",
        "endpoint_id",
    )

    def __init__(self, endpoint: Endpoint, clock: Clock) -> None:
        self.endpoint_id = endpoint.endpoint_id
        self._endpoint = endpoint
        self._clock = clock
        self._waiters: deque[_Waiter] = deque()
        # callers whose slot could not be booked yet (the pace's schedule is full a lookahead ahead),
        # and callers that woke late for their slot and are spaced again at the rate (the send
        # check): each kind waits in its own line (:class:`_Line`)
        self._unbooked = _Line()
        self._sending = _Line()
        # the waits of callers the isolation refused, woken when it ends (:meth:`woken_on_release`)
        self._held: set[anyio.CancelScope] = set()
        # the hard tenant quota's question for this endpoint's tenant (:meth:`limit`); None: none
        self._quota: Callable[[], Awaitable[float]] | None = None

    def limit(self, quota: TenantQuota | None) -> None:
        """Every attempt asks ``quota`` for its tenant right before it leaves (token endpoints: never,
        a token serves every session of its credential)."""
        if quota is None or self._endpoint.kind is EndpointKind.TOKEN:
            self._quota = None
            return
        tenant = self.endpoint_id.tenant

        async def ask() -> float:
            return await quota(tenant)

        self._quota = ask

    @property
    def circuit_id(self) -> str:
        return self._endpoint.circuit_id

    @property
    def circuit_state(self) -> CircuitState:
        """Where the endpoint's circuit is now (read only: the endpoint decides)."""
        return self._endpoint.circuit_state

    @property
    def isolated_until(self) -> float | None:
        """The monotonic end of the circuit's isolation, when it has one."""
        return self._endpoint.isolated_until

    # -- admission --------------------------------------------------------------------------

    def at_once(self, reports: Reports, sleep: Sleep) -> Flight | Pending:
        """The attempt's :class:`Flight` when the endpoint admits it now (the hot path: nothing
        awaited), else what to hand :meth:`flight` (a wait or a refusal, already decided)."""
        answer = self._endpoint.ask()
        if isinstance(answer, Ticket):
            if answer.effects:
                self._moved(answer.effects, reports)
            return Flight(self, answer, reports, sleep)
        return answer

    async def ask(
        self,
        reports: Reports,
        sleep: Sleep,
        *,
        deadline: float | None = None,
        stopped: Callable[[], bool] | None = None,
        pending: Pending | None = None,
    ) -> Flight | Refused | Late | None:
        """Wait for the endpoint's next slot (when paced), then ask its circuit.

        A :class:`Flight` when admitted; :class:`Refused` when the circuit is open; :class:`Late`
        when the slot falls past ``deadline`` (monotonic; nothing waited for); None when
        ``stopped()`` turned true during a wait (``sleep`` returns early on a stop). ``pending``:
        what :meth:`at_once` answered, to go on from.
        """
        endpoint = self._endpoint
        answer = endpoint.ask() if pending is None else pending
        # the line whose turn this caller holds (woken to ask for it): it wakes the next when it leaves
        turn: _Line | None = None
        try:
            while isinstance(answer, Wait):
                if answer.slot and deadline is not None and answer.booking.due > deadline:
                    return Late(answer.seconds)
                # No slot yet (the pace will not book one for seconds), or woken late for its slot
                # and spaced again at the rate (the send check): thousands of callers each sleeping
                # and asking again (a take-over's guests, 25 s of them queued at 200/s; those a stall
                # of the loop woke late, every few ms) cost the loop a timer and an ask each, over
                # and over; in line, one asks for all. (A caller with a deadline asks on its own.)
                line = None
                if deadline is None:
                    if not answer.slot:
                        line = self._sending
                    elif not answer.booking.booked:
                        line = self._unbooked
                if line is not None:
                    front = turn is line
                    if turn is not None and not front:
                        turn.pass_turn()
                    turn = None
                    await line.wait(sleep, answer.seconds, front=front)
                    turn = line
                else:
                    if turn is not None:
                        turn.pass_turn()  # booked: the next in line asks now
                        turn = None
                    await sleep(answer.seconds)
                if stopped is not None and stopped():
                    return None
                answer = endpoint.ask(answer.booking)
        finally:
            if turn is not None:
                turn.pass_turn()
        if answer.effects:
            self._moved(answer.effects, reports)
        if isinstance(answer, Refused):
            return answer
        return Flight(self, answer, reports, sleep)

    async def flight(self, reports: Reports, sleep: Sleep, pending: Pending | None = None) -> Flight:
        """:meth:`ask` for an operation's attempt: raises :class:`CircuitOpenError` when refused."""
        answer = await self.ask(reports, sleep, pending=pending)
        if isinstance(answer, Flight):
            return answer
        assert isinstance(answer, Refused)  # no deadline and no stop: admitted or refused
        raise CircuitOpenError(answer.circuit_id, answer.retry_in_s, isolated=answer.isolated)

    # -- manual control of the circuit (docs/runtime.md, "Manual circuit control") -----------------

    def isolate(self, reports: Reports, for_s: float | None = None) -> tuple[CircuitEffect, ...]:
        """Isolate the endpoint's circuit (``Circuit.isolate``); its moves go to ``reports``."""
        return self._moved(self._endpoint.isolate(for_s), reports)

    def close(self, reports: Reports) -> tuple[CircuitEffect, ...]:
        """End the isolation (``Circuit.close``); the callers it held are woken."""
        return self._moved(self._endpoint.close(), reports)

    def expire(self, reports: Reports) -> tuple[CircuitEffect, ...]:
        """The isolation's period is over by now: closed, the callers it held woken (else nothing)."""
        return self._moved(self._endpoint.expire(), reports)

    def reset(self, reports: Reports) -> tuple[CircuitEffect, ...]:
        """Closed with the circuit's counters cleared (``Circuit.reset``); held callers are woken."""
        return self._moved(self._endpoint.reset(), reports)

    @contextlib.contextmanager
    def woken_on_release(self, scope: anyio.CancelScope) -> Iterator[None]:
        """While the block runs, ``scope`` is cancelled when the circuit's isolation ends (closed,
        reset, or its period over): a session the isolation refused waits for that, not for a timer."""
        self._held.add(scope)
        try:
            yield
        finally:
            self._held.discard(scope)

    def _moved(self, effects: tuple[CircuitEffect, ...], reports: Reports) -> tuple[CircuitEffect, ...]:
        if effects:
            reports.circuit(effects)
        if any(isinstance(e, CircuitManual) and e.state is CircuitState.CLOSED for e in effects):
            held, self._held = self._held, set()
            for scope in held:
                scope.cancel()
        return effects

    # -- a peer of the fleet (docs/runtime.md, "Admission across a fleet") ------------------------

    def hold(self, until: float) -> bool:
        """A peer was told Retry-After for this endpoint: nothing leaves before ``until`` (monotonic)
        here either (``Endpoint.hold``). True when it lengthened the hold."""
        return self._endpoint.hold(until)

    def open_for_peer(self, for_s: float, reports: Reports) -> tuple[CircuitEffect, ...]:
        """A peer's circuit of this endpoint opened for ``for_s`` more seconds: so does this one."""
        return self._moved(self._endpoint.open_for_peer(for_s), reports)

    # -- the endpoint's other inputs -----------------------------------------------------------

    def lost(self, reports: Reports) -> None:
        """The platform dropped an established connection of this endpoint (the pace is stale)."""
        report = self._endpoint.lost()
        if report is not None:
            reports.pacing(report)

    def called(self) -> None:
        """An operation's first attempt is going out (the retry budget counts calls)."""
        self._endpoint.called()

    def may_retry(self) -> bool:
        """May a retry that came due go out now (the endpoint's retry budget)? Counted when it may."""
        return self._endpoint.may_retry()

    def held_for(self) -> float:
        """Seconds the endpoint is still held by a Retry-After (0 when it is not)."""
        return self._endpoint.held_for()

    # -- places in flight ---------------------------------------------------------------------

    async def _place(self) -> bool:
        """Hold one of the endpoint's places (waiting first come, first served); False: no cap."""
        endpoint = self._endpoint
        taken = endpoint.place()
        if taken is None:
            return False
        if taken:
            return True
        waiter = _Waiter()
        self._waiters.append(waiter)
        self._hand_over()  # (the cap may have grown since the last place came back)
        try:
            await waiter.event.wait()
        except BaseException:
            if waiter.handed:
                self._release()
            else:
                self._waiters.remove(waiter)
                endpoint.withdraw()
            raise
        return True

    def _release(self) -> None:
        self._endpoint.release()
        self._hand_over()

    def _hand_over(self) -> None:
        waiters = self._waiters
        while waiters and self._endpoint.hand_over():
            waiter = waiters.popleft()
            waiter.handed = True
            waiter.event.set()


# a Flight's stages (plain ints: they are compared on every call's hot path)
_ADMITTED: Final = 0
_LEFT: Final = 1
_DONE: Final = 2


class Flight:
    """One attempt the endpoint admitted: it leaves, then its answer is told to the endpoint once.

    :meth:`leave` right before the attempt is made (a place in flight is taken when the endpoint
    keeps them, and held until the answer); :meth:`answered` with its outcome, or :meth:`abandon`
    when no answer will come (cancelled, or the attempt was never made). Either gives the place back.
    """

    __slots__ = ("_gate", "_placed", "_reports", "_sleep", "_stage", "sent_at", "ticket")

    def __init__(self, gate: Gate, ticket: Ticket, reports: Reports, sleep: Sleep) -> None:
        self._gate = gate
        self.ticket = ticket
        self._reports = reports
        self._sleep = sleep
        self._stage = _ADMITTED
        self._placed = False
        #: when the attempt left (monotonic); its round trip runs from here
        self.sent_at = 0.0

    @property
    def gate(self) -> Gate:
        return self._gate

    @property
    def admitted(self) -> bool:
        """Admitted and not yet left: the attempt it stands for is still to be made."""
        return self._stage == _ADMITTED

    @property
    def left(self) -> bool:
        """Left and not yet answered (nor abandoned)."""
        return self._stage == _LEFT

    def leave_at_once(self) -> bool:
        """The attempt leaves now when its endpoint keeps no places in flight (the hot path: nothing
        awaited); False: :meth:`leave` it."""
        gate = self._gate
        if self._stage != _ADMITTED or gate._endpoint.keeps_places or gate._quota is not None:
            return False
        self.sent_at = self._gate._clock.monotonic()
        self._stage = _LEFT
        return True

    async def leave(self) -> None:
        """The attempt is about to be made: take a place in flight (waiting for one when the
        endpoint is full), wait out a Retry-After that came back meanwhile (nobody may go), and
        be spaced again at the rate when the place took 20 ms or more to come (``respace``)."""
        if self._stage != _ADMITTED:
            raise RuntimeError(f"an attempt on '{self._gate.endpoint_id}' left twice")
        gate = self._gate
        endpoint, clock = gate._endpoint, gate._clock
        queued_at = clock.monotonic()
        placed = self._placed = await gate._place()
        try:
            if placed:
                while (held := endpoint.held_for()) > 0:
                    await self._sleep(held)
                while (extra := endpoint.respace(queued_at)) > 0:
                    await self._sleep(extra)
            quota = gate._quota
            if quota is not None:
                # the hard tenant quota: the fleet's one decision for this attempt, last
                while (wait := await quota()) > 0:
                    await self._sleep(wait)
        except BaseException:
            self.abandon()
            raise
        self.sent_at = clock.monotonic()
        self._stage = _LEFT

    def answered(
        self,
        failure: SdkErrorEvent | None,
        reports: Reports | None = None,
        reading: RateLimitReading | None = None,
    ) -> None:
        """The attempt was answered: ``failure`` None when the endpoint answered it (success, or a
        success judged incomplete), else its classified failure; ``reading``: what the answer said
        of the platform's rate window (its pace slows before the window is spent). Told once; later
        calls do nothing."""
        if self._stage != _LEFT:
            return
        self._stage = _DONE
        if self._placed:
            self._placed = False
            self._gate._release()
        moves = self._gate._endpoint.answered(self.ticket, failure, self.sent_at, reading)
        if moves is QUIET:
            return
        out = reports if reports is not None else self._reports
        if moves.effects:
            out.circuit(moves.effects)
        if moves.report is not None:
            out.pacing(moves.report)

    def abandon(self) -> None:
        """No answer will be told (cancelled, stopped, or never made): the place goes back, nothing
        is recorded (a half-open probe abandoned times out by itself)."""
        self._give_place_back()

    def settle(self, failure: SdkErrorEvent | None) -> None:
        """What the caller that admitted it knows at the end: answered when it left and nobody told
        its answer yet, abandoned when it never left, nothing when it was answered already."""
        if self._stage == _LEFT:
            self.answered(failure)
        else:
            self.abandon()

    def _give_place_back(self) -> None:
        self._stage = _DONE
        if self._placed:
            self._placed = False
            self._gate._release()
