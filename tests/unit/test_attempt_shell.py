"""The async attempt shell (docs/runtime.md, "One attempt path"; supervisor/attempts/shell.py): it waits on the
endpoint's answers and never loses a place in flight, whichever way an attempt ends."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest

from machines.circuit import CircuitConfig
from machines.effects import CircuitEffect
from machines.endpoint import Endpoint, Refused
from machines.pacing import PacerReport, PacingConfig
from machines.registry import CircuitRegistry, Endpoints
from supervisor.attempts import Attempts, Flight, Gate, Late, Sleep
from supervisor.clock import FakeClock
from supervisor.errors import CircuitOpenError
from supervisor.vocabulary import EndpointId, Platform
from tests.harness import clocks
from tests.unit.test_endpoint import BROWNOUT

#: the endpoint these tests admit attempts to
EP = EndpointId(Platform.GENESYS, "ep")

pytestmark = pytest.mark.anyio


class Seen:
    def __init__(self) -> None:
        self.effects: list[CircuitEffect] = []
        self.reports: list[PacerReport] = []

    def circuit(self, effects: tuple[CircuitEffect, ...]) -> None:
        self.effects.extend(effects)

    def pacing(self, report: PacerReport) -> None:
        self.reports.append(report)


def gate_and_endpoint(
    clock: FakeClock, *, rate: float = 1000.0, floor: int | None = 1, threshold: int = 5
) -> tuple[Gate, Endpoint]:
    """The shell's gate of the connect endpoint "ep", and that endpoint (to look at its counts)."""
    circuits = CircuitRegistry(clock, CircuitConfig(failure_threshold=threshold))
    endpoints = Endpoints(clock, circuits, connect=PacingConfig(initial_rate=rate, in_flight_floor=floor))
    return Attempts(endpoints).connect(EP), endpoints.connect(EP)


def gate_of(clock: FakeClock, *, rate: float = 1000.0, floor: int | None = 1, threshold: int = 5) -> Gate:
    return gate_and_endpoint(clock, rate=rate, floor=floor, threshold=threshold)[0]


def advancing(clock: FakeClock, slept: list[float] | None = None) -> Sleep:
    """The shared advancing sleep, the other tasks first (as they would run while this one slept)."""
    return clocks.advancing(clock, slept, others_first=True)


async def admitted(gate: Gate, clock: FakeClock) -> Flight:
    flight = await gate.ask(Seen(), advancing(clock))
    assert isinstance(flight, Flight)
    return flight


async def test_a_waiter_cancelled_before_its_place_came_gives_its_turn_up(clock: FakeClock) -> None:
    gate, endpoint = gate_and_endpoint(clock)
    first, second = await admitted(gate, clock), await admitted(gate, clock)
    await first.leave()
    async with anyio.create_task_group() as tg:
        tg.start_soon(second.leave)
        await anyio.wait_all_tasks_blocked()
        assert (endpoint.in_flight, endpoint.waiting) == (1, 1)
        tg.cancel_scope.cancel()
    assert (endpoint.in_flight, endpoint.waiting) == (1, 0)
    first.answered(None)
    assert (endpoint.in_flight, endpoint.waiting) == (0, 0)


async def test_a_place_handed_to_a_waiter_stopped_before_it_ran_goes_to_the_next(clock: FakeClock) -> None:
    gate, endpoint = gate_and_endpoint(clock)
    first, second, third = [await admitted(gate, clock) for _ in range(3)]
    await first.leave()
    left: list[Flight] = []
    scopes: dict[int, anyio.CancelScope] = {}

    async def leave(flight: Flight) -> None:
        with anyio.CancelScope() as scope:
            scopes[id(flight)] = scope
            await flight.leave()
            left.append(flight)

    async with anyio.create_task_group() as tg:
        tg.start_soon(leave, second)
        await anyio.wait_all_tasks_blocked()
        tg.start_soon(leave, third)
        await anyio.wait_all_tasks_blocked()
        assert endpoint.waiting == 2
        # the second waiter is stopped, and before it runs again the first gives its place back
        # (no answer will come): the place is handed to the second, which passes it on
        scopes[id(second)].cancel()
        first.abandon()
        assert endpoint.waiting == 1  # (handed to the second, on its behalf)
    assert left == [third] and (endpoint.in_flight, endpoint.waiting) == (1, 0)
    third.answered(None)
    assert (endpoint.in_flight, endpoint.waiting) == (0, 0)


async def test_an_attempt_answered_or_abandoned_twice_is_told_once(clock: FakeClock) -> None:
    gate = gate_of(clock, floor=None, threshold=1)
    seen = Seen()
    flight = await gate.ask(seen, advancing(clock))
    assert isinstance(flight, Flight)
    await flight.leave()
    flight.answered(BROWNOUT)
    flight.answered(BROWNOUT)
    flight.settle(BROWNOUT)
    assert [type(e).__name__ for e in seen.effects].count("CircuitOpened") == 1
    other = gate_of(clock, floor=None, threshold=1)
    quiet = Seen()
    never_left = await other.ask(quiet, advancing(clock))
    assert isinstance(never_left, Flight)
    never_left.answered(BROWNOUT)  # it never left: nothing to tell
    never_left.settle(BROWNOUT)  # ...so it is abandoned, and its circuit heard nothing
    assert quiet.effects == [] and isinstance(await other.ask(Seen(), advancing(clock)), Flight)


async def test_a_slot_past_the_deadline_is_late_and_nothing_is_waited_for(clock: FakeClock) -> None:
    gate = gate_of(clock, rate=1.0, floor=None)
    await admitted(gate, clock)
    slept: list[float] = []
    answer = await gate.ask(Seen(), advancing(clock, slept), deadline=clock.monotonic() + 0.5)
    assert isinstance(answer, Late) and answer.wait_s == pytest.approx(1.0) and slept == []
    stopped = await gate.ask(Seen(), advancing(clock, slept), stopped=lambda: True)
    assert stopped is None and slept == [pytest.approx(1.0)]


async def test_an_operations_attempt_refused_by_the_circuit_raises_with_its_wait(clock: FakeClock) -> None:
    gate = gate_of(clock, floor=None, threshold=1)
    flight = await admitted(gate, clock)
    await flight.leave()
    flight.answered(BROWNOUT)
    answer = await gate.ask(Seen(), advancing(clock))
    assert isinstance(answer, Refused)
    with pytest.raises(CircuitOpenError) as refused:
        await gate.flight(Seen(), advancing(clock))
    assert refused.value.circuit_id == "circuit:genesys:ep" and refused.value.retry_in_s == pytest.approx(
        30.0, abs=0.01
    )


async def test_callers_the_pace_has_no_slot_for_wait_in_line_behind_one_sleep_and_go_in_order(
    clock: FakeClock,
) -> None:
    timers = clocks.FakeTimers(clock)
    # 10/s, slots booked at most a second ahead (the pacer's lookahead): the first ten callers get
    # slots (0.0 to 0.9 s), the 20 after them none yet
    gate = gate_of(clock, rate=10.0, floor=None)
    admitted_in: list[int] = []

    async def caller(number: int) -> None:
        answer = await gate.ask(Seen(), timers.sleep)
        assert isinstance(answer, Flight)
        admitted_in.append(number)

    async with anyio.create_task_group() as tg:
        for number in range(30):
            tg.start_soon(caller, number)
            await anyio.wait_all_tasks_blocked()
        # the nine with later slots sleep until them; of the 20 without, one sleeps and asks again for all
        assert timers.sleeping == 9 + 1
        while len(admitted_in) < 30:
            timers.advance(0.05)
            await anyio.wait_all_tasks_blocked()
            assert timers.sleeping <= 9 + 1  # never a timer per caller in line
    assert admitted_in == list(range(30))  # first come, first served


async def test_a_caller_in_line_that_stops_gives_its_turn_to_the_next(clock: FakeClock) -> None:
    timers = clocks.FakeTimers(clock)
    gate = gate_of(clock, rate=10.0, floor=None)
    admitted_in: list[str] = []
    scopes: dict[str, anyio.CancelScope] = {}

    async def caller(name: str) -> None:
        with anyio.CancelScope() as scope:
            scopes[name] = scope
            answer = await gate.ask(Seen(), timers.sleep)
            assert isinstance(answer, Flight)
            admitted_in.append(name)

    booked = [f"booked-{n}" for n in range(10)]  # the next second's slots
    async with anyio.create_task_group() as tg:
        for name in [*booked, "leader", "second", "third", "fourth"]:
            tg.start_soon(caller, name)
            await anyio.wait_all_tasks_blocked()
        assert timers.sleeping == 9 + 1  # (the first slot went at once) and the leader
        scopes["leader"].cancel()  # the one asking for the line stops: the next in line leads
        await anyio.wait_all_tasks_blocked()
        assert timers.sleeping == 9 + 1
        scopes["third"].cancel()  # one waiting in line stops: it only leaves the line
        await anyio.wait_all_tasks_blocked()
        while len(admitted_in) < 12:
            timers.advance(0.05)
            await anyio.wait_all_tasks_blocked()
    assert admitted_in == [*booked, "second", "fourth"]


async def test_callers_a_stall_woke_late_go_out_spaced_at_the_rate_asking_in_line(clock: FakeClock) -> None:
    timers = clocks.FakeTimers(clock)
    gate = gate_and_endpoint(clock, rate=200.0, floor=None)[0]
    sleeps: list[float] = []
    left: list[float] = []

    async def counted(seconds: float) -> None:
        sleeps.append(seconds)
        await timers.sleep(seconds)

    async def caller() -> None:
        assert isinstance(await gate.ask(Seen(), counted), Flight)
        left.append(clock.monotonic())

    async with anyio.create_task_group() as tg:
        for _ in range(200):
            tg.start_soon(caller)
        await anyio.wait_all_tasks_blocked()
        timers.advance(0.5)  # the loop stalled: 100 slots fell due at once, their callers all late
        while len(left) < 200:
            for _ in range(10):  # (the callers woken run, in a few turns of the loop)
                await anyio.lowlevel.checkpoint()
            timers.advance(0.002)
    stalled = 1000.5  # the clock when the stall ended
    per_window = [sum(1 for t in left if stalled + k * 0.1 <= t < stalled + (k + 1) * 0.1) for k in range(10)]
    # spaced again at the rate after the stall: 20 a 100 ms (the first window more: the callers
    # within the send check's 20 ms burst, and those whose slot came as the stall ended)
    assert sum(per_window) == 200 - 1 and max(per_window[1:]) <= 20 and per_window[0] <= 30
    # each late caller asked again a few times, not every few milliseconds until its turn: about
    # 2 sleeps a caller (its slot, its turn), where each asking again on its own took 25
    assert len(sleeps) < 3 * 200
