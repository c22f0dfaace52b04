"""Places in flight per endpoint (docs/runtime.md, "Admission"; machines/endpoint.py decides, the attempt shell
supervisor/attempts/shell.py waits), through the session runner with in-memory
transports (a unit test: tests/bench/bench_storm.py measures the effect over real sockets)."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from machines.pacing import PacingConfig
from machines.registry import Endpoints
from machines.session import SessionConfig
from supervisor.attempts import Attempts, Flight, Gate
from supervisor.boundary import SessionContext
from supervisor.bus import EventBus
from supervisor.clock import Clock, FakeClock
from supervisor.errors import TransportFailure
from supervisor.runtime.session_runner import SessionRunner
from supervisor.taxonomy import Channel, Classifier, Platform, RawError, load_taxonomy
from supervisor.vocabulary import CloseCode, EndpointId
from tests.harness.clocks import advancing
from tests.unit.test_session_runner import GatedConnection

#: the endpoint these tests admit attempts to
EP = EndpointId(Platform.GENESYS, "ep")

pytestmark = pytest.mark.anyio


class Endpoint:
    """What the platform sees: attempts inside at once, the most ever, and who came in last."""

    def __init__(self) -> None:
        self.inside = 0
        self.most = 0
        self.now_inside: list[PlaceTransport] = []
        self.entered = anyio.Event()
        self.last: PlaceTransport | None = None

    async def next_in(self) -> PlaceTransport:
        await self.entered.wait()
        self.entered = anyio.Event()
        assert self.last is not None
        return self.last


class PlaceTransport:
    """open() stays in flight until the test says how it ends: "ok", "fail" (a dropped
    handshake), "throttle" (429 with Retry-After: 1); cancellable (stop() interrupts it)."""

    response_kind = "genesys.rest.Conversation"

    def __init__(self, session_id: str, endpoint: Endpoint) -> None:
        self.context = SessionContext(session_id, Platform.GENESYS, Channel.WEBMESSAGING, agent_id="a")
        self.endpoint = endpoint
        self.gate = anyio.Event()
        self.outcome = "ok"

    def end(self, outcome: str) -> None:
        self.outcome = outcome
        self.gate.set()

    async def open(self, flight: Flight | None = None) -> GatedConnection:
        if flight is not None:
            await flight.leave()  # a place in flight, waiting for one when the endpoint is full
        ep = self.endpoint
        ep.inside += 1
        ep.most = max(ep.most, ep.inside)
        ep.now_inside.append(self)
        self.gate = anyio.Event()
        ep.last = self
        ep.entered.set()
        try:
            await self.gate.wait()
        finally:
            ep.inside -= 1
            ep.now_inside.remove(self)
        if self.outcome == "fail":
            raise TransportFailure(
                RawError(platform=Platform.GENESYS, channel=Channel.WEBMESSAGING, close_code=1006)
            )
        if self.outcome == "throttle":
            raise TransportFailure(
                RawError(
                    platform=Platform.GENESYS,
                    channel=Channel.WEBMESSAGING,
                    status=429,
                    headers={"Retry-After": "1"},
                )
            )
        return GatedConnection()

    async def aclose(self) -> None:
        pass


def connect_gate(clock: Clock, pacing: PacingConfig) -> Gate:
    """The connect endpoint "ep", paced by ``pacing``, behind the attempt shell."""
    return Attempts(Endpoints(clock, connect=pacing)).connect(EP)


def runners(
    n: int, clock: Clock, gate: Gate, sleeps: list[Callable[[float], Awaitable[None]]] | None = None
) -> tuple[Endpoint, list[SessionRunner]]:

    endpoint = Endpoint()
    classifier = Classifier(load_taxonomy("v1"), clock)
    out = []
    for i in range(n):
        extra: dict[str, Any] = {} if sleeps is None else {"sleep": sleeps[i]}
        out.append(
            SessionRunner(
                PlaceTransport(f"s-{i}", endpoint),
                classifier=classifier,
                gate=gate,
                bus=EventBus(),
                clock=clock,
                rng=random.Random(i),
                config=SessionConfig(first_delay_s=(0.01, 0.02)),
                **extra,
            )
        )
    return endpoint, out


def fake_sleep(clock: FakeClock, slept: list[float] | None = None) -> Callable[[float], Awaitable[None]]:
    """A sleep on the fake clock: the others run first, as they would while this one sleeps."""
    return advancing(clock, slept, others_first=True)


async def test_an_endpoint_holds_its_cap_in_flight_and_every_outcome_gives_the_place_back() -> None:
    """One place: a failed attempt, a cancelled one (stop() mid-handshake) and a successful one
    each give it back, so the next session gets in; never two at once. A place lost on any of
    these paths would leave the others waiting for ever (the test's timeout)."""
    clock = FakeClock()
    gate = connect_gate(clock, PacingConfig(initial_rate=1000.0, in_flight_floor=1))
    endpoint, sessions = runners(3, clock, gate, [fake_sleep(clock)] * 3)
    by_transport = {id(r.transport): r for r in sessions}
    async with anyio.create_task_group() as tg:
        for runner in sessions:
            tg.start_soon(runner.run)
        await anyio.wait_all_tasks_blocked()  # every session has asked by now
        assert (endpoint.inside, endpoint.most) == (1, 1)
        (await endpoint.next_in()).end("fail")
        await anyio.wait_all_tasks_blocked()
        stopped = by_transport[id(await endpoint.next_in())]
        await stopped.stop(CloseCode.NORMAL_CLOSURE)
        while not all(r.state.value in ("active", "terminated") for r in sessions):
            await anyio.wait_all_tasks_blocked()
            (await endpoint.next_in()).end("ok")
            await anyio.wait_all_tasks_blocked()
        assert endpoint.most == 1
        assert stopped.termination is not None and stopped.termination.reason.value == "STOPPED"
        assert sorted(r.state.value for r in sessions) == ["active", "active", "terminated"]
        for runner in sessions:
            await runner.stop(CloseCode.NORMAL_CLOSURE)


async def test_an_attempt_that_waited_for_a_place_waits_out_a_retry_after_that_came_back_meanwhile() -> None:
    """Session 1 waits for the one place while session 0's attempt is in flight; that attempt is
    refused with 429 + Retry-After: 1, which pauses the whole endpoint. Session 1 gets the place
    and waits the pause out before it leaves (the platform said when it will be ready)."""
    clock = FakeClock()
    slept: list[list[float]] = [[], []]
    gate = connect_gate(clock, PacingConfig(initial_rate=1000.0, in_flight_floor=1))
    endpoint, sessions = runners(2, clock, gate, [fake_sleep(clock, slept[0]), fake_sleep(clock, slept[1])])
    async with anyio.create_task_group() as tg:
        for runner in sessions:
            tg.start_soon(runner.run)
        first = await endpoint.next_in()
        await anyio.wait_all_tasks_blocked()  # the other session now waits for the place
        waiting = 1 if first is sessions[0].transport else 0
        before = len(slept[waiting])
        first.end("throttle")
        second = await endpoint.next_in()
        assert second is sessions[waiting].transport
        assert gate.held_for() == 0
        assert slept[waiting][before:] == [pytest.approx(1.0)]  # the Retry-After, nothing else
        second.end("ok")
        for runner in sessions:
            await runner.stop(CloseCode.NORMAL_CLOSURE)


async def test_waiters_released_together_by_one_batch_of_answers_leave_a_send_slot_apart() -> None:
    """Two places, four sessions at 10/s: two attempts in flight, two waiting for places. The
    process stalls a second, then both answers are handled in one batch and both places free at
    once. One waiter leaves at once; the other is spaced a send slot (0.1 s at 10/s) after it
    (Pacer.respace) instead of leaving in the same instant. Without the respacing neither waits."""
    clock = FakeClock()
    slept: list[list[float]] = [[] for _ in range(4)]
    gate = connect_gate(clock, PacingConfig(initial_rate=10.0, growth=1.0001, in_flight_floor=2))
    endpoint, sessions = runners(4, clock, gate, [fake_sleep(clock, slept[i]) for i in range(4)])
    async with anyio.create_task_group() as tg:
        for runner in sessions:
            tg.start_soon(runner.run)
        await anyio.wait_all_tasks_blocked()
        assert len(endpoint.now_inside) == 2  # the other two wait for places
        answered = list(endpoint.now_inside)
        waiters = [i for i, r in enumerate(sessions) if r.transport not in answered]
        before = [len(slept[i]) for i in waiters]
        clock.advance(1.0)  # the stall
        for transport in answered:  # one batch: both places free before anyone runs
            transport.end("ok")
        await anyio.wait_all_tasks_blocked()
        assert len(endpoint.now_inside) == 2 and endpoint.most == 2
        after = sorted(slept[i][n:] for i, n in zip(waiters, before, strict=True))
        # a send slot, less the burst the send check tolerates (and the admissions' tiny growth)
        assert after == [[], [pytest.approx(0.1 - PacingConfig().send_burst_s, abs=1e-3)]]
        for transport in list(endpoint.now_inside):
            transport.end("ok")
        await anyio.wait_all_tasks_blocked()
        for runner in sessions:
            await runner.stop(CloseCode.NORMAL_CLOSURE)
