"""The one composition root: the configuration and a command's options in, a daemon run (docs/runtime.md, "The composition root").

uvicorn's model (``Config`` → ``Server``): :class:`DaemonConfig` says what to run, built from the
parsed configuration and the command's options; :class:`Daemon` builds every part from it in one
place, in one order, and runs the lifecycle (supervisor/runtime/main.py). ``run`` and ``demo`` call
it; a fleet member will pass its shard set (:attr:`DaemonConfig.shard`)::

    outcome = await Daemon(DaemonConfig.from_file(path, environ=os.environ, say=echo)).serve()

Who builds what, in order (docs/runtime.md, "The composition root"):

1. the event bus, and telemetry when configured (its trace context on the bus);
2. the signal receiver: the process's record taken over, so a signal recorded since the imports is
   acted on; a stop already recorded ends the start here, with nothing else built;
3. the lock (one daemon per configuration file), before any socket or session;
4. the wiring: taxonomy and classifier, circuits, the retry executor, HTTP clients, token caches;
5. the event lines on standard output (a service), subscribed before anything can publish;
6. the session table, then the durable store over it (desired sessions, the session ledger,
   attribute updates);
7. the supervisor, given the table and the store as its book: neither holds the other;
8. telemetry on the bus, and its exporter service;
9. the systemd glue (status line, watchdog, state-directory probe; a no-op without $NOTIFY_SOCKET);
10. the reload (a configuration file to read again), between RELOADING=1 and READY=1;
11. the body's sinks and services (the demo's observer and progress display);
12. the socket API (socket activation's descriptors taken), its board on the bus before any
    session moves;
13. the lifecycle: the sockets bound, the sessions handed over, the services started, ready
    (``DAEMON_STARTED``, ``READY=1``), the body or the signals, the drain;
14. the sockets and the store closed, ``DAEMON_STOPPED`` (or ``DAEMON_FORCED_EXIT``), standard
    output flushed.

Each part is given what it uses (supervisor/runtime/sessions.py): the socket API, the systemd glue
and the demo's body get the session table to read, the control operations, the circuits, the store;
never the supervisor or its wiring.
"""

from __future__ import annotations

import signal
import socket
from collections.abc import Awaitable, Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import anyio
import msgspec

from supervisor.attributes import AttributeService
from supervisor.bus import EventBus
from supervisor.clock import Clock, Rng
from supervisor.config import Config, SessionSpec, SocketsConfig, load_config
from supervisor.errors import ConfigError
from supervisor.events import DaemonForcedExit, DaemonStarted, DaemonStopped, DaemonStopping
from supervisor.fleet.sharing import fleet_sharing
from supervisor.rest.tokens import TokenCache
from supervisor.runtime.durable import Durable
from supervisor.runtime.hooks import BusHooks
from supervisor.runtime.leases import Leases
from supervisor.runtime.lock import DaemonLock, default_lock_path
from supervisor.runtime.logrecords import LogRecords
from supervisor.runtime.main import Service, daemon_signals, run_daemon
from supervisor.runtime.reload import Reloader, ReloadRequests, answer
from supervisor.runtime.sessions import CircuitReader, SessionReader
from supervisor.runtime.signals import SignalReceiver
from supervisor.runtime.stdout import StdoutEvents
from supervisor.runtime.supervisor import Supervisor, session_table
from supervisor.runtime.wiring import Wiring
from supervisor.systemd.journal import SD_WARNING, event_priority, journal_descriptors, prefix
from supervisor.vocabulary import Scope

if TYPE_CHECKING:
    from anyio.abc import TaskStatus

    from supervisor.api.control import Reload
    from supervisor.api.server import SocketApi
    from supervisor.fleet.desired import FleetDesk
    from supervisor.fleet.leases import PgLeases
    from supervisor.fleet.view import FleetView
    from supervisor.telemetry import ExportSettings, Telemetry

__all__ = [
    "Body",
    "Daemon",
    "DaemonConfig",
    "DaemonView",
    "Outcome",
    "ShardSet",
    "SocketsAt",
    "socket_api",
]

#: one line for the operator (the CLI prefixes ``session-supervisor: `` and writes it to stderr)
Say = Callable[[str], object]
#: the sessions a fleet member supervises, out of the configured ones (a seam: no fleet builds it yet)
ShardSet = Callable[[SessionSpec], bool]
#: how long the final flush of the event lines may take
STDOUT_FLUSH_S = 2.0


@dataclass(frozen=True, slots=True)
class SocketsAt:
    """The socket API at fixed paths, and the daemon runs without it if they cannot be bound (the
    demo's, in its temporary directory: a ``$TMPDIR`` too long for a socket path)."""

    subscribe: Path
    control: Path
    #: told, before any session starts, where the API listens or (a string) why it does not
    told: Callable[[tuple[Path, Path] | str], object] | None = None


@dataclass(frozen=True, slots=True)
class DaemonView:
    """What a :class:`Body` is given of the daemon built for it: read interfaces and the store's
    attribute service, never the supervisor."""

    sessions: SessionReader
    circuits: CircuitReader
    tokens: Mapping[Scope, TokenCache]
    attributes: AttributeService | None
    bus: EventBus
    clock: Clock


class Body(Protocol):
    """What a daemon runs between its readiness and its drain instead of waiting for a signal
    (the demo's scenario)."""

    def attach(self, daemon: DaemonView) -> Sequence[Service]:
        """Everything is built, nothing started: subscribe to the bus, return services to start
        before the readiness moment."""

    async def __call__(self) -> None:
        """The body; the drain follows when it returns (or a stop signal cuts it short)."""


@dataclass(frozen=True, slots=True)
class DaemonConfig:
    """What to run: the parsed configuration and the command's options (uvicorn's ``Config``)."""

    config: Config
    #: the configuration file: a reload (SIGHUP, ``ctl reload``) reads it again, the lock's default
    #: path is named after it, DAEMON_STARTED names it; None (the demo): nothing to reload or lock
    config_path: Path | None = None
    #: where relative credential files are
    config_dir: Path | None = None
    #: the variables the daemon reads ($CREDENTIALS_DIRECTORY, $STATE_DIRECTORY, $NOTIFY_SOCKET, the
    #: LISTEN_* of socket activation, which it removes once taken)
    environ: MutableMapping[str, str] = field(default_factory=dict)
    clock: Clock | None = None
    rng: Rng | None = None
    #: the drain's bound; None: ``daemon.shutdownGrace``
    grace_s: float | None = None
    #: OpenTelemetry export (None: off)
    telemetry: ExportSettings | None = None
    #: None: the ``[sockets]`` table (socket activation included); a bind failure ends the start
    sockets: SocketsAt | None = None
    #: the durable store (``[store]``, $STATE_DIRECTORY); False: nothing is kept, attribute verbs are
    #: unsupported
    durable: bool = True
    #: a service (``run``, a fleet member): event lines on stdout, the lifecycle announced
    #: (DAEMON_STARTED ... DAEMON_STOPPED), the systemd glue; False (the demo): none of them, the
    #: body shows what it wants
    service: bool = True
    body: Body | None = None
    #: a fleet member's share of the configured sessions (a seam, not built: no fleet exists yet)
    shard: ShardSet | None = None
    #: the shards this process owns, made from the store's open epoch (supervisor/runtime/leases.py);
    #: None: SoloLeases, every shard (one host)
    leases: Callable[[int], Leases] | None = None
    say: Say | None = None

    @classmethod
    def from_file(
        cls, path: Path, *, environ: MutableMapping[str, str], say: Say | None = None
    ) -> DaemonConfig:
        """``run --config PATH``: the file read and validated, the telemetry settings resolved
        (raises ConfigError naming what is wrong; nothing is started)."""
        # imported here: the settings are standard library, the SDK loads only when telemetry is on
        from supervisor.telemetry import resolve_settings

        config = load_config(path)
        config_dir = path.resolve().parent
        # reads telemetry.headersFile like the platforms' credentials and checks the OTEL_* variables
        settings = resolve_settings(
            config.telemetry, environ, config_dir=config_dir, prometheus_key=f"{path}: telemetry.prometheus"
        )
        return cls(config, path, config_dir, environ, telemetry=settings, say=say)

    @property
    def grace(self) -> float:
        return self.config.daemon.shutdown_grace if self.grace_s is None else self.grace_s

    def selected(self, config: Config) -> Config:
        """``config`` with only this daemon's sessions (all of them but for a fleet member)."""
        if self.shard is None:
            return config
        return msgspec.structs.replace(config, sessions=[s for s in config.sessions if self.shard(s)])


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a daemon's run ended."""

    #: the readiness moment was reached (DAEMON_STARTED, READY=1)
    served: bool
    #: a second stop signal cut the drain short
    forced: bool
    #: the stop signal that ended it, if one did
    stopped_by: signal.Signals | None

    @property
    def exit_code(self) -> int:
        return 1 if self.forced else 0


class Daemon:
    """Builds one daemon from a :class:`DaemonConfig` and runs it (module docstring; uvicorn's ``Server``)."""

    def __init__(self, options: DaemonConfig) -> None:
        self.options = options
        #: the readiness moment was reached
        self.served = False

    async def serve(self) -> Outcome:
        """Build, run until stopped (or the body ends), drain; raises ConfigError for what ends the
        start (the lock held, a socket path held, standard output that cannot be written)."""
        options = self.options
        config = options.selected(options.config)
        bus = EventBus()
        telemetry = _telemetry(options, config, bus)
        lock = _lock(options)
        with daemon_signals() as signals:
            try:
                if signals.take_stop() is not None:
                    forced = False  # stopped before anything was built: nothing to drain
                else:
                    if lock is not None:
                        # before any socket is bound or session started: a second daemon changes nothing
                        lock.acquire()
                    forced = await self._build_and_run(config, bus, telemetry, signals)
            finally:
                if lock is not None:
                    lock.release()
            return Outcome(self.served, forced, signals.stopped_by)

    async def _build_and_run(
        self, config: Config, bus: EventBus, telemetry: Telemetry | None, signals: SignalReceiver
    ) -> bool:
        options = self.options
        hooks = telemetry.hooks if telemetry is not None else []
        async with Wiring(
            config,
            bus=bus,
            clock=options.clock,
            rng=options.rng,
            config_dir=options.config_dir,
            environ=options.environ,
            hooks=hooks,
        ) as wiring:
            stop = anyio.Event()
            stdout: StdoutEvents | None = None
            logs: LogRecords | None = None
            if options.service:
                # subscribed first: every event from here on is a line (the store's health included);
                # under journald each line leads with its priority (docs/systemd.md, "The journal")
                journal = journal_descriptors(options.environ)
                stdout = StdoutEvents(
                    bus,
                    max_buffer_bytes=config.daemon.event_buffer_bytes,
                    priority=event_priority if 1 in journal else None,
                    stderr_prefix=prefix(SD_WARNING) if 2 in journal else b"",
                )
                bus.subscribe(stdout)
                stdout.on_broken = stop.set
                # from here to the end, library log records and the daemon's own warnings are event
                # lines too: nothing else goes to stdout or stderr (a fatal error stays one line)
                logs = LogRecords(
                    bus, wiring.clock, redact=None if telemetry is None else telemetry.scrubber.text
                )
                logs.install()
            try:
                return await self._serve_built(config, wiring, bus, telemetry, signals, stop, stdout, logs)
            except Exception:
                if stdout is not None:
                    # the start failed: what was said before the error line is written first
                    await stdout.flush(within_s=STDOUT_FLUSH_S)
                raise
            finally:
                if logs is not None:
                    logs.uninstall()

    async def _serve_built(
        self,
        config: Config,
        wiring: Wiring,
        bus: EventBus,
        telemetry: Telemetry | None,
        signals: SignalReceiver,
        stop: anyio.Event,
        stdout: StdoutEvents | None,
        logs: LogRecords | None,
    ) -> bool:
        options = self.options
        sessions = session_table(wiring)
        durable: Durable | None = None
        say = options.say if logs is None else logs.warning
        # a PostgreSQL store makes the daemon a member of the fleet sharing it (docs/runtime.md, "The
        # fleet"): its shards are leased there, and its store's writes are fenced by those leases
        fleet: PgLeases | None = None
        if options.durable and options.leases is None and config.store.url is not None:
            from supervisor.fleet.member import fleet_leases

            fleet = fleet_leases(
                config,
                config_path=options.config_path,
                config_dir=wiring.config_dir,
                environ=options.environ,
                bus=bus,
                clock=wiring.clock,
                warn=say,
            )
        if options.durable:
            # desired sessions, the session ledger and attribute updates; a store that cannot be
            # opened is said in one line, and the sessions run without it (docs/store.md)
            durable = await Durable.open(
                config,
                sessions=sessions,
                wiring=wiring,
                environ=options.environ,
                bus=bus,
                clock=wiring.clock,
                warn=say,
                fences=fleet,
            )
        if fleet is not None and (durable is None or durable.store is None):
            # a member that could not open its store could neither resume the sessions of the
            # shards it took nor record them for the next owner: it takes none until restarted
            problem = "the store could not be opened" if durable is None else (durable.problem or "no store")
            fleet.stand_aside(f"{problem}; this member takes no shard until it is restarted")
        # the store's book and the session table at construction: neither reaches for the other
        leases: Leases | None = fleet
        if options.leases is not None:
            leases = options.leases(0 if durable is None else durable.epoch)
        supervisor = Supervisor(wiring, durable, sessions=sessions, leases=leases)
        if fleet is not None:
            from supervisor.fleet.member import follow_reloads

            follow_reloads(fleet, bus, lambda: supervisor.config)
        try:
            warn = _warning(options.say) if logs is None else logs.warning
            # on a PostgreSQL store: the fleet bus, throttles and circuit openings shared with the other
            # members, the rates at this member's share (docs/runtime.md, "Admission across a fleet")
            sharing = fleet_sharing(
                config,
                attempts=wiring.attempts,
                events=bus,
                leases=supervisor.leases,
                clock=wiring.clock,
                reports=BusHooks(bus, wiring.clock),
                config_dir=wiring.config_dir,
                environ=options.environ,
                warn=warn,
            )
            if sharing is not None:
                # the commands other members write for this member's sessions, followed (registered
                # before the bus serves: supervisor/fleet/follow.py)
                supervisor.follower.register(sharing.bus)
            shared = () if sharing is None else (sharing.serve,)
            forced = await self._run(
                wiring,
                supervisor,
                durable,
                telemetry,
                stdout,
                stop,
                signals,
                warn,
                shared,
                # once the drain has handed the sessions over (each one's row written): every shard
                # freed for the peers at once, before the services wind down (docs/runtime.md, "a stop")
                None if fleet is None else fleet.release_all,
            )
        finally:
            if fleet is not None:
                # a start that failed, or a drain cut short by a second signal: freed here (a no-op
                # after the drain's; a kill skips both: the leases then expire after leaseSeconds)
                await fleet.release_all()
                await fleet.aclose()
            if durable is not None:
                await durable.aclose()
        # a shadow's divergences held within their minute are lines too, before the last one
        wiring.taxonomy_tap.report_held()
        if stdout is not None:
            bus.publish((DaemonForcedExit if forced else DaemonStopped)(supervisor.snapshot()))
            await stdout.flush(within_s=STDOUT_FLUSH_S)
            if stdout.broken is not None:
                raise ConfigError(f"cannot write events to standard output: {stdout.broken}")
        return forced

    async def _run(
        self,
        wiring: Wiring,
        supervisor: Supervisor,
        durable: Durable | None,
        telemetry: Telemetry | None,
        stdout: StdoutEvents | None,
        stop: anyio.Event,
        signals: SignalReceiver,
        warn: Say,
        fleet: Sequence[Service] = (),
        on_drained: Callable[[], Awaitable[object]] | None = None,
    ) -> bool:
        """The services built around the supervisor, then the lifecycle; True when the exit was forced."""
        options, bus, grace_s = self.options, wiring.bus, self.options.grace
        sessions = supervisor.sessions
        services: list[Service] = [] if stdout is None else [stdout.serve]
        services.extend(fleet)
        tap = wiring.taxonomy_tap
        if tap.shadow is not None:
            # a shadow pair's divergences held past its minute are reported by this service
            services.append(tap.serve)
        if telemetry is not None:
            bus.subscribe(telemetry)
            telemetry.observe(
                tokens=wiring.tokens,
                sink_failures=bus,
                endpoints=wiring.attempts.endpoints,
                outbox=None if durable is None else durable.outbox_depth,
                shadow_divergences=lambda: tap.divergences,
            )
            services.append(telemetry.service(grace_s))
        systemd = None
        if options.service:
            from supervisor.systemd.service import Systemd

            # READY=1, STATUS=, STOPPING=1, RELOADING=1, the watchdog: no-ops without $NOTIFY_SOCKET;
            # a variable systemd never sends is a warning and its feature off (docs/systemd.md)
            systemd = Systemd(
                sessions,
                wiring.circuits,
                bus=bus,
                clock=wiring.clock,
                environ=options.environ,
                grace_s=grace_s,
                outbox=None if durable is None else durable.outbox_depth,
                store_problem=None if durable is None else durable.degraded,
                warn=warn,
            )
        requests: ReloadRequests | None = None
        reload_answer: Reload | None = None
        reloader: Reloader | None = None
        config_path = options.config_path
        if config_path is not None:
            reloader = Reloader(supervisor, lambda: options.selected(load_config(config_path)))
            reload = reloader.reload if systemd is None else systemd.reloading(reloader.reload)
            # SIGHUP's reloads run in a task of their own: the signal loop never waits for one
            requests = ReloadRequests(reload)
            services.append(requests.serve)

            async def reload_for_api() -> Mapping[str, Any]:
                return answer(await reload())

            reload_answer = reload_for_api
        body = options.body
        attributes = None if durable is None else durable.attributes
        view = DaemonView(sessions, wiring.circuits, wiring.tokens, attributes, bus, wiring.clock)
        extra = list(body.attach(view)) if body is not None else []
        api = self._socket_api(wiring, supervisor, durable, stop, reload_answer, warn)
        services.extend(api.services)
        if reloader is not None and options.sockets is None:
            # the [sockets] access lists, roles and limits a reload reads go to the API it serves
            reloader.apply_sockets = api.api.reconfigure
        if telemetry is not None:
            hub = api.api.hub
            telemetry.observe_subscribers(
                subscribers=lambda: len(hub.subscribers),
                lagged=lambda: hub.lagged_notices,
                disconnected=lambda: hub.lag_disconnects,
            )
        if systemd is not None:
            services.extend(systemd.services)
        services.extend(extra)

        def ready() -> None:
            self.served = True
            if options.service:
                bus.publish(DaemonStarted(len(supervisor.config.sessions), str(config_path or "")))
            if systemd is not None:
                systemd.ready()

        def stopping() -> None:
            if options.service:
                bus.publish(DaemonStopping(grace_s))
            if systemd is not None:
                systemd.stopping()

        return await run_daemon(
            supervisor,
            grace_s=grace_s,
            # the Prometheus endpoint's port with the sockets: one held by another process ends the start
            bind=[api, *(telemetry.bindings if telemetry is not None else ())],
            services=services,
            body=body,
            on_ready=ready,
            on_stopping=stopping,
            on_reload=None if requests is None else requests.request,
            stop=stop,
            signals=signals,
            on_drained=on_drained,
        )

    def _socket_api(
        self,
        wiring: Wiring,
        supervisor: Supervisor,
        durable: Durable | None,
        stop: anyio.Event,
        reload: Reload | None,
        warn: Say,
    ) -> _ApiSockets:
        """The socket API at the configured (or handed-over) sockets, or the demo's."""
        options = self.options
        at = options.sockets
        if at is not None:
            api = socket_api(
                supervisor,
                SocketsConfig(),
                environ={},
                paths=(at.subscribe, at.control),
                stop=stop,
                reload=reload,
                durable=durable,
            )
            return _ApiSockets(api, at)
        from supervisor.systemd.activation import activated_paths, listen_fds

        sockets = wiring.config.sockets
        # sockets systemd handed over (socket activation), else {} and the API binds its own
        listeners = listen_fds(options.environ, enabled=sockets.enabled, warn=warn)
        api = socket_api(
            supervisor,
            sockets,
            environ=options.environ,
            paths=activated_paths(listeners),
            listeners=listeners,
            stop=stop,
            reload=reload,
            durable=durable,
        )
        return _ApiSockets(api, None)


def socket_api(
    supervisor: Supervisor,
    sockets: SocketsConfig,
    *,
    environ: Mapping[str, str],
    paths: tuple[Path, Path] | None = None,
    listeners: Mapping[str, socket.socket] | None = None,
    stop: anyio.Event | None = None,
    reload: Reload | None = None,
    durable: Durable | None = None,
    clock: Clock | None = None,
) -> SocketApi:
    """The socket API of a daemon: what it serves is handed over here, in one place, as the typed
    interfaces the API reads (the session table, the control operations, the circuits, the taxonomy
    switch, the store's desired sessions and attribute service); the API never holds the supervisor.
    The control socket's drain verb sets ``stop``: the same drain as SIGTERM."""
    from supervisor.api.server import SocketApi

    wiring = supervisor.wiring
    fleet, fleet_view = fleet_of(supervisor, durable)
    return SocketApi(
        supervisor.sessions,
        supervisor,
        sockets,
        bus=wiring.bus,
        clock=clock if clock is not None else wiring.clock,
        circuits=wiring.circuits,
        taxonomy=wiring,
        environ=environ,
        paths=paths,
        listeners=listeners,
        stop=stop,
        reload=reload,
        desired=durable,
        attributes=None if durable is None else durable.attributes,
        circuit_control=supervisor.manual_circuits,
        messaging=supervisor,
        platform=wiring.platform_events,
        owners=supervisor.owners,
        fleet=fleet,
        fleet_view=fleet_view,
    )


def fleet_of(
    supervisor: Supervisor, durable: Durable | None
) -> tuple[FleetDesk | None, Callable[[], FleetView] | None]:
    """A fleet member's commands for other members' sessions and its view of the fleet (``ctl status``):
    a member is a daemon whose leases say the fleet (``fleet_view``: PgLeases) over a PostgreSQL store;
    one host (SoloLeases, or a SQLite store) has neither."""
    from supervisor.fleet.desired import FleetDesk, Transactions
    from supervisor.fleet.view import FleetViews

    leases = supervisor.leases
    store = None if durable is None else durable.store
    if not isinstance(leases, FleetViews) or not isinstance(store, Transactions):
        return None, None
    clock = supervisor.wiring.clock
    return FleetDesk(store, leases.identity, clock.time), leases.fleet_view


class _ApiSockets:
    """The socket API as the lifecycle binds and serves it (a Binding): a path that cannot be bound
    ends the start, unless the sockets are :class:`SocketsAt` ones, which the daemon runs without."""

    def __init__(self, api: SocketApi, at: SocketsAt | None) -> None:
        self.api = api
        self._at = at
        self._off = False

    def bind(self) -> None:
        at = self._at
        if at is None:
            self.api.bind()
            return
        try:
            self.api.bind()
        except ConfigError as exc:
            # a $TMPDIR too long for a socket path: the daemon runs on without its sockets
            self._off = True
            if at.told is not None:
                at.told(str(exc))
            return
        if at.told is not None:
            at.told((at.subscribe, at.control))

    def close(self) -> None:
        self.api.close()

    @property
    def services(self) -> list[Service]:
        return [self.serve]

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        if self._off:
            task_status.started()
            return
        await self.api.serve(task_status=task_status)


def _lock(options: DaemonConfig) -> DaemonLock | None:
    """One daemon per configuration file (``daemon.lockFile``, else named after the file)."""
    if options.config_path is None:
        return None
    lock_file = options.config.daemon.lock_file
    return DaemonLock(
        Path(lock_file) if lock_file else default_lock_path(options.config_path, options.environ)
    )


def _telemetry(options: DaemonConfig, config: Config, bus: EventBus) -> Telemetry | None:
    """The run's telemetry, or None when it is off; its trace context goes on the bus."""
    if options.telemetry is None:
        return None
    # imported only when asked for: the OpenTelemetry SDK is not free to load
    from supervisor.telemetry import Telemetry, configured_secrets, shapes_of

    telemetry = Telemetry(
        options.telemetry,
        boot_id=bus.boot_id,
        shapes=shapes_of(config),
        secrets=configured_secrets(config, environ=options.environ, config_dir=options.config_dir),
    )
    bus.trace_context = telemetry.trace_context
    return telemetry


def _warning(say: Say | None) -> Say:
    def warn(line: str) -> None:
        if say is not None:
            say(f"warning: {line}")

    return warn
