"""The session runner's races with stop(), with an in-memory transport (a unit test: the
integration tests drive the runner over real sockets against the simulators)."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

import anyio
import pytest

from machines.pacing import PacingConfig
from machines.registry import Endpoints
from machines.session import SessionConfig
from supervisor.attempts import SILENT, Attempts, Flight
from supervisor.boundary import Learned, Reporter, SessionContext
from supervisor.bus import EventBus
from supervisor.clock import SystemClock
from supervisor.config import Secret
from supervisor.errors import ChannelLimit, CircuitOpenError, TransportFailure
from supervisor.events import Published, ReconnectionThrottled, SessionTransition
from supervisor.rest.tokens import TokenCache
from supervisor.runtime.session_runner import CHANNEL_LIMIT_WAIT_S, SessionRunner
from supervisor.taxonomy import Channel, Classifier, Platform, RawError, load_taxonomy
from supervisor.vocabulary import CloseCode, EndpointId
from tests.harness.clocks import FakeClock, FakeTimers

#: the endpoint these tests admit attempts to
EP = EndpointId(Platform.GENESYS, "ep")


pytestmark = pytest.mark.anyio


class GatedConnection:
    # a conversation resource as Genesys sends it (taxonomy v1 responses."genesys.rest.Conversation")
    session_response: Mapping[str, Any] = {"id": "c", "state": "connected", "participants": [{"id": "p"}]}
    learned = Learned(conversation_id="c")

    def __init__(self) -> None:
        self.closed_with: int | None = None
        self.served = False
        self.serving = anyio.Event()
        self.abandoned = False

    async def serve(self, report: Reporter) -> RawError:
        self.served = True
        self.serving.set()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    async def close(self, code: int = 1000, reason: str = "") -> None:
        self.closed_with = code

    async def abandon(self) -> None:
        self.abandoned = True


class GatedTransport:
    """open() waits for the test, then fails or succeeds as told."""

    response_kind = "genesys.rest.Conversation"

    def __init__(self, *, fail: bool) -> None:
        self.context = SessionContext("s-1", Platform.GENESYS, Channel.WEBMESSAGING, agent_id="a")
        self.gate = anyio.Event()
        self.entered = anyio.Event()
        self.fail = fail
        self.connection = GatedConnection()

    async def open(self, flight: Flight | None = None) -> GatedConnection:
        if flight is not None:
            await flight.leave()  # the attempt is made here
        self.entered.set()
        with anyio.CancelScope(shield=True):  # a transport that finishes its attempt regardless
            await self.gate.wait()
        if self.fail:
            raise TransportFailure(
                RawError(platform=Platform.GENESYS, channel=Channel.WEBMESSAGING, close_code=1006)
            )
        return self.connection

    async def aclose(self) -> None:
        pass


def runner_for(transport: GatedTransport, bus: EventBus | None = None) -> SessionRunner:
    clock = SystemClock()
    return SessionRunner(
        transport,
        classifier=Classifier(load_taxonomy("v1"), clock),
        gate=Attempts(Endpoints(clock)).connect(EP),
        bus=bus if bus is not None else EventBus(),
        clock=clock,
        rng=random.Random(1),
        config=SessionConfig(first_delay_s=(0.01, 0.02)),
    )


@pytest.mark.parametrize("fail", [True, False])
async def test_an_attempt_that_ends_after_stop_is_ignored_and_closed(fail: bool) -> None:
    """stop() while open() is in flight: whatever open() then returns, the session stays stopped."""
    transport = GatedTransport(fail=fail)
    runner = runner_for(transport)
    async with anyio.create_task_group() as tg:
        tg.start_soon(runner.run)
        await transport.entered.wait()
        await runner.stop(CloseCode.GOING_AWAY)
        transport.gate.set()
    assert runner.state.value == "terminated"
    assert runner.termination is not None and runner.termination.reason.value == "STOPPED"
    if not fail:
        assert transport.connection.closed_with == 1001
        assert not transport.connection.served


@pytest.mark.parametrize("while_opening", [True, False])
async def test_a_handover_abandons_the_connection_and_never_closes_it(while_opening: bool) -> None:
    """hand_over() while serving (or while open() is in flight): the connection is abandoned (left
    alive on the platform), never closed; SESSION_HANDED_OVER, no SESSION_TERMINATED."""
    transport = GatedTransport(fail=False)
    bus = EventBus()
    seen: list[str] = []
    bus.subscribe(lambda published: seen.append(published.event.name))
    runner = runner_for(transport, bus)
    async with anyio.create_task_group() as tg:
        tg.start_soon(runner.run)
        await transport.entered.wait()
        if while_opening:
            runner.hand_over()
            transport.gate.set()
        else:
            transport.gate.set()
            with anyio.fail_after(5):
                await transport.connection.serving.wait()
            runner.hand_over()
    assert runner.state.value == "handed-over" and runner.core.handed_over
    assert runner.termination is None
    assert transport.connection.abandoned and transport.connection.closed_with is None
    assert "SESSION_HANDED_OVER" in seen and "SESSION_TERMINATED" not in seen
    runner.hand_over()  # a second one changes nothing
    await runner.stop()
    assert runner.state.value == "handed-over"


class CountingSource:
    def __init__(self, lifetime: float) -> None:
        self.lifetime = lifetime
        self.fetches = 0

    async def fetch(self, refresh: Secret | None) -> tuple[Secret, float, Secret | None, dict[str, Any]]:
        self.fetches += 1
        return Secret(f"t{self.fetches}"), self.lifetime, None, {}


async def test_a_short_lived_token_is_not_refetched_on_every_call() -> None:
    """A 300 s token (Genesys' minimum) with the 300 s early refresh: the window is capped at half its life."""
    source = CountingSource(lifetime=300.0)
    cache = TokenCache(source, SystemClock(), early_refresh_s=300.0)
    for _ in range(5):
        await cache.get()
    assert source.fetches == 1


class SlowSource:
    """The first fetch hangs until cancelled; later ones answer at once."""

    def __init__(self) -> None:
        self.fetches = 0
        self.started = anyio.Event()

    async def fetch(self, refresh: Secret | None) -> tuple[Secret, float, Secret | None, dict[str, Any]]:
        self.fetches += 1
        if self.fetches == 1:
            self.started.set()
            await anyio.sleep_forever()
        return Secret(f"t{self.fetches}"), 3600.0, None, {}


async def test_a_cancelled_fetch_does_not_cancel_the_callers_waiting_for_it() -> None:
    """One session stopped mid-refresh must not take the other sessions' token requests with it."""
    source = SlowSource()
    cache = TokenCache(source, SystemClock())
    got: list[str] = []

    async def waiter() -> None:
        got.append((await cache.get()).access.reveal())

    async def doomed_fetcher(scope_box: list[anyio.CancelScope]) -> None:
        with anyio.CancelScope() as scope:
            scope_box.append(scope)
            await cache.get()

    box: list[anyio.CancelScope] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(doomed_fetcher, box)
        await source.started.wait()
        tg.start_soon(waiter)  # joins the in-flight fetch
        await anyio.wait_all_tasks_blocked()
        box[0].cancel()  # the first caller is stopped mid-fetch
    assert got == ["t2"]  # the waiter fetched on its own instead of inheriting the cancellation


class RefusedConnection(GatedConnection):
    """A live connection whose next request finds its endpoint's circuit open (a CXone poll)."""

    async def serve(self, report: Reporter) -> RawError:
        self.served = True
        raise CircuitOpenError("cxone:api", 7.0)


class OpenTransport(GatedTransport):
    def __init__(self) -> None:
        super().__init__(fail=False)
        self.gate.set()
        self.opens = 0
        self.connection = RefusedConnection()

    async def open(self, flight: Flight | None = None) -> GatedConnection:
        self.opens += 1
        return await super().open(flight)


async def test_a_connection_whose_circuit_is_open_waits_for_it_and_publishes_no_failure() -> None:
    """The 401 rule (docs/taxonomy.md): nothing failed on this session, so nothing is classified.

    A CXone session's poll refused by the open ``cxone:api`` circuit used to be published as
    SDK_ERROR_CLASSIFIED CONNECTION_FAILED / OSError / endpoint null, a failure that never
    happened (28-45 of them per demo run). The session waits for the circuit instead, as a
    refused reconnection does: RECONNECTION_THROTTLED, not counted as an attempt.
    """
    transport = OpenTransport()
    clock = SystemClock()
    bus = EventBus()
    seen: list[Published] = []
    bus.subscribe(seen.append)
    waits: list[float] = []
    waiting = anyio.Event()

    async def sleep(seconds: float) -> None:
        waits.append(seconds)
        waiting.set()
        await anyio.sleep_forever()

    runner = SessionRunner(
        transport,
        classifier=Classifier(load_taxonomy("v2"), clock),
        gate=Attempts(Endpoints(clock)).connect(EP),
        bus=bus,
        clock=clock,
        rng=random.Random(1),
        config=SessionConfig(first_delay_s=(0.01, 0.02)),
        sleep=sleep,
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(runner.run)
        await waiting.wait()
        assert runner.state.value == "reconnecting"
        await runner.stop(CloseCode.GOING_AWAY)
    names = [p.event.name for p in seen]
    assert "SDK_ERROR_CLASSIFIED" not in names
    (throttled,) = [p.event for p in seen if isinstance(p.event, ReconnectionThrottled)]
    assert throttled.retry_in_s == 7.0 and throttled.attempt == 0  # not counted as an attempt
    assert waits and waits[0] == pytest.approx(7.0, abs=0.1)  # it waits the circuit out
    moves = [
        (p.event.source, p.event.target, p.event.reason)
        for p in seen
        if isinstance(p.event, SessionTransition)
    ]
    assert ("active", "reconnecting", "CIRCUIT_OPEN") in moves
    assert transport.connection.closed_with == 1001 and transport.opens == 1


class TakingOverTransport(GatedTransport):
    """A transport whose first open takes over a handed-over session (no connection attempt)."""

    def __init__(self) -> None:
        super().__init__(fail=False)
        self.gate.set()
        self.flights: list[Flight | None] = []

    @property
    def takes_over(self) -> bool:
        return not self.flights

    async def open(self, flight: Flight | None = None) -> GatedConnection:
        self.flights.append(flight)
        return await super().open(flight)


async def test_a_take_over_waits_for_no_slot_of_the_connect_endpoint(clock: FakeClock) -> None:
    """Take-overs make no connection attempt: they book none of the connect endpoint's slots. 100
    of them open at once on a frozen clock at a 20/s pace (a start would wait for its slot after
    the 21st), with no admitted flight; the endpoint's next start is still admitted at once."""
    timers = FakeTimers(clock)
    gate = Attempts(Endpoints(clock, connect=PacingConfig(initial_rate=20.0))).connect(EP)
    transports = [TakingOverTransport() for _ in range(100)]
    runners = [
        SessionRunner(
            t,
            classifier=Classifier(load_taxonomy("v1"), clock),
            gate=gate,
            bus=EventBus(),
            clock=clock,
            rng=random.Random(1),
            sleep=timers.sleep,
        )
        for t in transports
    ]
    async with anyio.create_task_group() as tg:
        for runner in runners:
            tg.start_soon(runner.run)
        await anyio.wait_all_tasks_blocked()
        assert timers.sleeping == 0  # nobody waits for a slot
        assert [t.flights for t in transports] == [[None]] * 100
        assert all(t.connection.served for t in transports)
        assert isinstance(gate.at_once(SILENT, timers.sleep), Flight)
        for runner in runners:
            await runner.stop()


async def test_sessions_waiting_in_the_gates_line_for_a_slot_end_at_once_when_stopped(
    clock: FakeClock,
) -> None:
    """40 starts at a 20/s pace on a frozen clock: those with a slot sleep until it, those the
    pace has none for yet wait in the gate's line (one of them sleeping for all). A stop ends each
    at once, the ones in line included: nobody waits for a timer that will never fire."""
    timers = FakeTimers(clock)
    gate = Attempts(Endpoints(clock, connect=PacingConfig(initial_rate=20.0))).connect(EP)
    transports = [GatedTransport(fail=False) for _ in range(40)]
    runners = [
        SessionRunner(
            t,
            classifier=Classifier(load_taxonomy("v1"), clock),
            gate=gate,
            bus=EventBus(),
            clock=clock,
            rng=random.Random(1),
            sleep=timers.sleep,
        )
        for t in transports
    ]
    ended: list[int] = []

    async def run(number: int) -> None:
        await runners[number].run()
        ended.append(number)

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            for number in range(40):
                tg.start_soon(run, number)
            try:
                await anyio.wait_all_tasks_blocked()
                entered = sum(t.entered.is_set() for t in transports)
                assert entered >= 1 and timers.sleeping < 40 - entered  # not a timer per session
                # the last to come is in line, behind the one asking for all: it ends on its own
                await runners[-1].stop()
                await anyio.wait_all_tasks_blocked()
                assert ended == [39]
                for runner in runners:
                    await runner.stop()
            finally:
                for transport in transports:
                    transport.gate.set()  # the attempts already made finish (shielded)
    assert all(runner.state.value == "terminated" for runner in runners)


class FullTransport(GatedTransport):
    """A shared notifications channel pool with no room: open() is refused ChannelLimit."""

    def __init__(self) -> None:
        super().__init__(fail=False)
        self.opens = 0

    async def open(self, flight: Flight | None = None) -> GatedConnection:
        self.opens += 1
        raise ChannelLimit("client-a", 20, 1000)


async def test_a_session_refused_channel_limit_waits_for_a_place_and_is_not_ended() -> None:
    """The pool found no channel with room (docs/runtime.md, "Shared notification channels"): the
    session waits in reconnecting, not counted, nothing classified; it is not ended for it."""
    transport = FullTransport()
    clock = SystemClock()
    bus = EventBus()
    seen: list[Published] = []
    bus.subscribe(seen.append)
    waits: list[float] = []
    waiting = anyio.Event()

    async def sleep(seconds: float) -> None:
        waits.append(seconds)
        waiting.set()
        await anyio.sleep_forever()

    runner = SessionRunner(
        transport,
        classifier=Classifier(load_taxonomy("v2"), clock),
        gate=Attempts(Endpoints(clock)).connect(EP),
        bus=bus,
        clock=clock,
        rng=random.Random(1),
        config=SessionConfig(first_delay_s=(0.01, 0.02)),
        sleep=sleep,
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(runner.run)
        await waiting.wait()
        assert runner.state.value == "reconnecting" and runner.termination is None
        await runner.stop(CloseCode.GOING_AWAY)
    assert "SDK_ERROR_CLASSIFIED" not in [p.event.name for p in seen]
    (throttled,) = [p.event for p in seen if isinstance(p.event, ReconnectionThrottled)]
    assert throttled.attempt == 0 and waits[0] == pytest.approx(CHANNEL_LIMIT_WAIT_S, abs=0.1)
    assert transport.opens == 1
