"""The daemon in the test's own process, built from its parts as the composition root builds them.

:func:`supervised` is the one place the tests build an in-process daemon: the event bus (with
:class:`Recorded` on it), telemetry when asked for, the wiring, the session table, the durable store
when asked for, the supervisor, the socket API when asked for, in the order of
``supervisor/runtime/assembly.py`` (docs/runtime.md, "The composition root"); then it serves the
sessions and, when the block ends, drains them (``shutdown``) and closes what it opened. The other
in-process harnesses are thin layers over it: the socket API's (``tests/integration/api_harness.py``:
sockets in a short directory), the durable store's (``tests/integration/attributes_harness.py``),
telemetry's (``tests/integration/telemetry_harness.py``: the OTLP export to a loopback receiver) and
the benchmarks' (``tests/bench/runtime_harness.py``).

Everything runs over real sockets against the simulators: no transport is mocked. Waits are for
outcomes (a state reached, a request recorded), bounded by a deadline; no test sleeps for a timer.
The composition root itself (``Daemon.serve``: lock, signals, stdout, systemd) is what a daemon run
as a child process exercises (:mod:`tests.harness.process`).
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import TaskGroup

from supervisor.bus import EventBus
from supervisor.clock import Clock, FakeClock, SystemClock
from supervisor.config import Config, SocketsConfig, parse_config
from supervisor.events import Published, wire
from supervisor.fleet.sharing import FleetSharing, fleet_sharing
from supervisor.rest.executor import Sleep
from supervisor.runtime.durable import Durable
from supervisor.runtime.hooks import BusHooks
from supervisor.runtime.supervisor import Supervisor, session_table
from supervisor.runtime.wiring import NotificationSink, Wiring
from supervisor.store import UpdateOutcome
from tests.harness.config import Credentials
from tests.harness.waits import wait_until

if TYPE_CHECKING:
    from supervisor.api.control import Reload
    from supervisor.api.server import SocketApi
    from supervisor.attributes import AttributeService
    from supervisor.runtime.fence import WriteFence
    from supervisor.runtime.leases import Leases
    from supervisor.telemetry import ExportSettings, Telemetry

__all__ = ["ApiSockets", "Harness", "Recorded", "TelemetryExport", "supervised"]

#: the drain's bound when a test's block ends (the configurations' ``shutdownGrace``)
DRAIN_S = 2.0


@dataclass
class Recorded:
    """Every bus event in its wire form, with the monotonic time it was published."""

    clock: Clock
    events: list[tuple[float, str, dict[str, Any]]] = field(default_factory=list)
    published: list[Published] = field(default_factory=list)

    def __call__(self, published: Published) -> None:
        self.published.append(published)
        self.events.append((self.clock.monotonic(), published.event.name, wire(published)))

    def named(self, name: str) -> list[dict[str, Any]]:
        return [p for _, n, p in self.events if n == name]

    def timed(self, name: str) -> list[tuple[float, dict[str, Any]]]:
        return [(t, p) for t, n, p in self.events if n == name]


@dataclass(frozen=True)
class ApiSockets:
    """The socket API at ``paths`` (subscribe, control), as the composition root's ``socket_api``
    builds it; ``clock`` is the API's own (its timers), else the daemon's."""

    paths: tuple[Path, Path]
    config: SocketsConfig = field(default_factory=SocketsConfig)
    stop: anyio.Event | None = None
    reload: Reload | None = None
    clock: Clock | None = None


@dataclass(frozen=True)
class TelemetryExport:
    """Telemetry exporting with ``settings``; ``secrets`` are the values its scrubber removes."""

    settings: ExportSettings
    secrets: Sequence[str]


@dataclass
class Harness:
    """An in-process daemon: its supervisor and what was built around it."""

    supervisor: Supervisor
    recorded: Recorded
    tg: TaskGroup
    clock: Clock
    config: Config
    durable: Durable | None = None
    api: SocketApi | None = None
    sockets: ApiSockets | None = None
    telemetry: Telemetry | None = None
    fleet: FleetSharing | None = None

    @property
    def runners(self) -> dict[str, Any]:
        return self.supervisor.runners

    def states(self) -> dict[str, int]:
        return self.supervisor.states()

    def all_in(self, state: str) -> bool:
        return all(r.state.value == state for r in self.runners.values())

    async def wait(self, predicate: Callable[[], bool], limit_s: float = 10.0) -> None:
        """Wait for an outcome (a state reached, a request recorded), bounded by ``limit_s``."""
        await wait_until(predicate, limit_s)

    async def wait_active(self, n: int, limit_s: float = 20.0) -> None:
        """Until ``n`` sessions are active."""
        await wait_until(lambda: self.supervisor.states().get("active", 0) == n, limit_s)

    def terminations(self) -> dict[str, Any]:
        return {sid: r.termination for sid, r in self.runners.items() if r.termination is not None}

    # -- the socket API (``sockets=``) --------------------------------------------------------------

    @property
    def subscribe(self) -> Path:
        assert self.sockets is not None, "built without the socket API"
        return self.sockets.paths[0]

    @property
    def control(self) -> Path:
        assert self.sockets is not None, "built without the socket API"
        return self.sockets.paths[1]

    @property
    def bus_transitions(self) -> list[dict[str, Any]]:
        return self.recorded.named("SESSION_TRANSITION")

    # -- the durable store (``durable=True``) -------------------------------------------------------

    @property
    def service(self) -> AttributeService:
        assert self.durable is not None, "built without the durable store"
        return self.durable.attributes

    async def settle(self, *, limit: int = 5000) -> dict[str, UpdateOutcome]:
        """Run the attribute service's work, moving the fake clock to each next due time, until every
        acknowledged update is verified, repaired or flagged."""
        clock = self.clock
        assert isinstance(clock, FakeClock)
        service = self.service
        for _ in range(limit):
            await service.run_due()
            outcomes = await service.outcomes()
            if all(o is not UpdateOutcome.PENDING for o in outcomes.values()):
                return outcomes
            due = service.scheduler.next_due()
            assert due is not None, "updates are pending and nothing is scheduled"
            if due > clock.monotonic():
                clock.set(due)
        raise AssertionError("the attribute updates did not settle")

    # -- telemetry (``telemetry=``) -----------------------------------------------------------------

    async def flush(self, limit_s: float = 10.0) -> bool:
        """Export what telemetry holds now (instead of waiting for the batch delay)."""
        assert self.telemetry is not None, "built without telemetry"
        return await self.telemetry.flush(limit_s)


@contextlib.asynccontextmanager
async def supervised(
    config: str | Config,
    directory: Path | None,
    *,
    clock: Clock | None = None,
    sleep: Sleep | None = None,
    notification_sink: NotificationSink | None = None,
    credentials: Credentials | None = None,
    durable: bool = False,
    sockets: ApiSockets | None = None,
    telemetry: TelemetryExport | None = None,
    bus: EventBus | None = None,
    rng_seed: int | None = None,
    drain_s: float | None = DRAIN_S,
    record: bool = True,
    leases: Leases | None = None,
    fleet: bool = False,
    fence: WriteFence | None = None,
) -> AsyncIterator[Harness]:
    """A daemon serving ``config`` (a TOML text, or parsed), its relative credential files in
    ``directory`` (written there from ``credentials``; None: no directory, nothing written).

    ``durable``: the store and the attribute service (``[store]``), whose work runs when the test
    calls ``run_due`` or :meth:`Harness.settle`; ``sockets``: the socket API; ``telemetry``: the
    executor hooks, the bus sink and the exporter. ``rng_seed`` overrides ``daemon.seed`` for the
    wiring's randomness; ``drain_s`` None ends the block by cancelling, without a drain; ``record``
    False leaves :attr:`Harness.recorded` empty (a benchmark's thousands of sessions: its cost is not
    the daemon's). ``leases``: the shards the daemon owns (None: SoloLeases, every shard).
    ``fleet``: on a PostgreSQL store, the fleet bus and admission across members
    (supervisor/fleet/sharing.py), started before the sessions. ``fence``: a fleet member's write
    fence (a test's CLOCK_BOOTTIME source; None: the supervisor's own when ``leases`` are a fleet's).
    """
    if directory is not None:
        (credentials or Credentials()).write(directory)
    parsed = parse_config(config, "test.toml") if isinstance(config, str) else config
    clock = clock or SystemClock()
    bus = bus if bus is not None else EventBus()
    recorded = Recorded(clock)
    if record:
        bus.subscribe(recorded)
    exporter = _telemetry(telemetry, parsed, bus)
    seed = rng_seed if rng_seed is not None else parsed.daemon.seed or 0
    async with Wiring(
        parsed,
        bus=bus,
        clock=clock,
        rng=random.Random(seed),
        config_dir=directory,
        environ={},
        sleep=sleep or anyio.sleep,
        hooks=exporter.hooks if exporter is not None else (),
        notification_sink=notification_sink,
    ) as wiring:
        if exporter is not None:
            exporter.observe(tokens=wiring.tokens, sink_failures=bus)
        sessions = session_table(wiring)
        store = None
        if durable:
            store = await Durable.open(
                parsed, sessions=sessions, wiring=wiring, environ={}, bus=bus, clock=clock, background=False
            )
        try:
            supervisor = Supervisor(wiring, store, sessions=sessions, leases=leases, fence=fence)
            api = None if sockets is None else _socket_api(supervisor, sockets, store)
            member = None
            if fleet:
                member = fleet_sharing(
                    parsed,
                    attempts=wiring.attempts,
                    events=bus,
                    leases=supervisor.leases,
                    clock=clock,
                    reports=BusHooks(bus, clock),
                    config_dir=directory,
                    environ={},
                )
                assert member is not None, "fleet=True needs a [store] url"
            async with anyio.create_task_group() as tg:
                if member is not None:
                    await tg.start(member.serve)
                await tg.start(supervisor.serve)
                if api is not None:
                    await tg.start(api.serve)
                try:
                    yield Harness(
                        supervisor, recorded, tg, clock, parsed, store, api, sockets, exporter, member
                    )
                finally:
                    if drain_s is not None:
                        await supervisor.shutdown(drain_s)
                    if exporter is not None:
                        await exporter.close(5.0)
                    tg.cancel_scope.cancel()
        finally:
            if store is not None:
                await store.aclose()


def _telemetry(export: TelemetryExport | None, config: Config, bus: EventBus) -> Telemetry | None:
    """Telemetry on the bus, its trace context stamped on every event (assembly.py, step 1)."""
    if export is None:
        return None
    # imported only when asked for, as the composition root does: the OpenTelemetry SDK is not free
    from supervisor.telemetry import Telemetry, shapes_of

    telemetry = Telemetry(
        export.settings, boot_id=bus.boot_id, shapes=shapes_of(config), secrets=list(export.secrets)
    )
    bus.trace_context = telemetry.trace_context
    bus.subscribe(telemetry)
    return telemetry


def _socket_api(supervisor: Supervisor, sockets: ApiSockets, durable: Durable | None) -> SocketApi:
    from supervisor.runtime.assembly import socket_api

    return socket_api(
        supervisor,
        sockets.config,
        environ={},
        paths=sockets.paths,
        stop=sockets.stop,
        reload=sockets.reload,
        durable=durable,
        clock=sockets.clock,
    )
