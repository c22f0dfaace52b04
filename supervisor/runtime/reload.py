"""Reloading the configuration while the daemon runs (SIGHUP, and the control socket's ``reload``).

systemd's convention (``ExecReload=kill -HUP $MAINPID``): re-read the configuration file and
the credential files, validate everything first, and only then apply the difference:

* sessions added to the file are started; sessions removed are stopped (close 1000, CXone
  DELETE) and forgotten; sessions whose settings changed are restarted (a new runner, a full
  authentication cycle), unless they are down (``ctl stop``, a fail-fast): those stay down and
  ``ctl start`` brings them back on the new settings; unchanged sessions are not touched.
  Removals and restarts run concurrently (at most ``admission.connectsInFlight`` stops at
  once), and the new runners' connection attempts are paced by admission like any others;
* a session's settings are its own ``[[sessions]]`` entry and what it uses of its platform's
  table (:func:`settings`): a Web Messaging guest the Web Messaging keys (it never uses the
  OAuth client), a notifications or CXone session the whole table. Never the credentials:
* **a rotated credential swaps the token source** (Wiring.trial_rotation): a token is fetched
  with the new credential first, before anything changes; granted, the platform's token cache
  takes the new source and no session is restarted; refused (or not verifiable), the reload is
  refused in one located line, the credential in use stays, and ``CREDENTIAL_REFUSED`` raises
  the ``credentials`` degraded condition until a reload brings a good one (``CREDENTIAL_ACCEPTED``);
* the global tables a running daemon can take are applied: ``circuit``, ``reconnect`` (every
  session's next reconnection), ``tokens``, ``daemon.requestTimeout``, ``daemon.taxonomyVersion``,
  and the socket API's access lists, roles and limits (``apply_sockets``). What it cannot take
  (:data:`RESTART_FIELDS`: ``store``, ``fleet``, ``attributes``, ``telemetry``, ``admission``, ``taxonomy``, the sockets'
  paths and modes, the daemon's grace, seed, lock and buffer) is named in the answer and in
  ``CONFIG_RELOADED`` as ``restartRequired`` (compared with the configuration the daemon started
  with: every reload until the restart names it), never acknowledged as applied;
* the taxonomy version is switched only when the file names another one than it did: a version
  switched at run time (``ctl taxonomy use``) stays until the configuration names another.

Any error (the file, a credential, the taxonomy) leaves the daemon running on the old
configuration and publishes ``CONFIG_RELOAD_FAILED`` with the located one-line error.

**One at a time.** A ``ctl reload`` and a SIGHUP at once used to interleave: the second
re-added a session the first was removing, the first's removal then took the new runner out of
the table, and the session ran unsupervised. Reloads are serialised (:class:`Reloader` holds one
lock for the whole read-compare-apply), each in the order it asked; SIGHUP's run in a task of
their own (:class:`ReloadRequests`), so the signal loop never waits for one and a SIGTERM during a
reload starts the drain at once. The drain stops a reload where it is (docs/runtime.md,
"Lifecycle": what it leaves), and nothing a reload does escapes it: a failure is published as
``CONFIG_RELOAD_FAILED``, never raised into the signal task.

**Reading never blocks the loop.** The files are read in a worker thread, each opened
``O_NONBLOCK`` and refused unless it is a regular file (``read_capped``): a FIFO put where the
configuration or a credential was is one ``CONFIG_RELOAD_FAILED`` line, and the daemon goes on
answering and keeping its sessions alive meanwhile.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

import anyio
import msgspec
from anyio import to_thread
from anyio.abc import TaskStatus

from supervisor.clock import iso_utc
from supervisor.config import (
    Config,
    GenesysConfig,
    Secret,
    SessionKind,
    SessionSpec,
    SocketsConfig,
    session_table,
)
from supervisor.errors import ConfigError, OperationError, SupervisorError
from supervisor.events import CredentialAccepted, CredentialRefused, Event, WireEvent
from supervisor.runtime.supervisor import Supervisor
from supervisor.runtime.tenancy import credential_keys, spec_scope
from supervisor.runtime.testhooks import block_loop_on_reload
from supervisor.runtime.wiring import Rotation, platform_table
from supervisor.taxonomy import Taxonomy, load_taxonomy, resolve_version
from supervisor.vocabulary import Scope

__all__ = [
    "APPLIED_TABLES",
    "RESTART_FIELDS",
    "ConfigReloadFailed",
    "ConfigReloaded",
    "ReloadOutcome",
    "ReloadRequests",
    "ReloadResult",
    "Reloader",
    "answer",
    "restart_required",
    "settings",
]

#: the refusal of a reload asked for (or still queued) once the drain began
DRAINING = "the daemon is draining: the configuration is not reloaded"
#: what a reload the drain interrupted publishes (docs/runtime.md, "Lifecycle")
INTERRUPTED = (
    "the reload was interrupted by the drain: sessions it had not yet changed are drained as they were"
)


#: per table of the configuration, the fields a running daemon cannot take (None: the whole
#: table); a reload that changes one names the table in ``restartRequired`` (docs/configuration.md,
#: "Reload"). Every other table and field is applied.
RESTART_FIELDS: Final[Mapping[str, tuple[str, ...] | None]] = {
    # the drain's bound is handed to the lifecycle and systemd's stop timeout at start; the seed
    # feeds the jitter source every machine holds; the lock and the stdout buffer exist once; the
    # test-only stamp is read by the HTTP clients and transports built at start
    "daemon": ("shutdown_grace", "seed", "lock_file", "event_buffer_bytes", "stamp_member"),
    # every endpoint's pacer, in-flight cap and retry budget are built once, with their state
    "admission": None,
    # the exporter, the executor's tracing hooks and the bus's trace context are built at start
    # (and the collector's headers file is read then): a new exporter mid-span would split traces
    "telemetry": None,
    # the sockets are bound (or handed over by systemd) once; the access lists, roles and limits apply
    "sockets": ("enabled", "subscribe", "control", "mode", "group"),
    # the store's file is open and its outbox served; the attribute service is built over it
    "store": None,
    # the member's id, its leases' timing and its lease connection are taken at start, and so are its
    # write fence and source address (the HTTP pools bind their address when they are made)
    "fleet": None,
    "attributes": None,
    # capture and shadow: the capture file's writer and the shadow classifier are built at start
    "taxonomy": None,
    # the platform events' windows are applied; the resync reads' limiter is built at start
    "events": ("resync_in_flight",),
}
#: the tables a reload applies in full (every other table is in RESTART_FIELDS, at least in part;
#: tests/unit/test_reload_decisions.py fails on a table in neither)
#: (``handover``: the drain reads ``onStop`` from the configuration in force when it starts, and
#: ``maxAgeSeconds`` is read by the next start, which reads the file anew; ``tenants``: each tenant's
#: table as a platform's, rebuilt when changed, built when added, its sessions stopped when removed)
APPLIED_TABLES: Final = frozenset(
    {"platforms", "tenants", "sessions", "reconnect", "circuit", "tokens", "handover"}
)


def restart_required(old: Config, new: Config, *, sockets_applied: bool = True) -> tuple[str, ...]:
    """The tables whose change ``new`` makes that a running daemon cannot take (RESTART_FIELDS).

    ``sockets_applied``: the daemon has a socket API to give the new access lists to; without one,
    any change of ``[sockets]`` waits for a restart.
    """
    out = []
    for table, fields in RESTART_FIELDS.items():
        before, after = getattr(old, table), getattr(new, table)
        if fields is None or (table == "sockets" and not sockets_applied):
            changed = before != after
        else:
            changed = any(getattr(before, f) != getattr(after, f) for f in fields)
        if changed:
            out.append(table)
    return tuple(out)


class ReloadOutcome(enum.StrEnum):
    APPLIED = "applied"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class ConfigReloaded(Event):
    """A reload was applied: what it changed."""

    name: ClassVar[str] = "CONFIG_RELOADED"
    added: tuple[str, ...]
    removed: tuple[str, ...]
    restarted: tuple[str, ...]
    unchanged: int
    taxonomy_version: str
    # changed, but down (ctl stop, a fail-fast): not restarted; `ctl start` uses the new settings
    kept_down: tuple[str, ...] = ()
    # tables changed that only a restart applies (RESTART_FIELDS); always on the line, [] when none
    restart_required: tuple[str, ...] = ()

    def fields(self) -> dict[str, Any]:
        return {
            "added": list(self.added),
            "removed": list(self.removed),
            "restarted": list(self.restarted),
            "keptDown": list(self.kept_down),
            "unchanged": self.unchanged,
            "taxonomyVersion": self.taxonomy_version,
            "restartRequired": list(self.restart_required),
        }


class ConfigReloadFailed(WireEvent, frozen=True):
    """A reload was refused: the daemon keeps running on the old configuration."""

    name: ClassVar[str] = "CONFIG_RELOAD_FAILED"
    error: str


@dataclass(frozen=True, slots=True)
class ReloadResult:
    outcome: ReloadOutcome
    error: str | None = None
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    restarted: tuple[str, ...] = ()
    unchanged: tuple[str, ...] = field(default=())
    kept_down: tuple[str, ...] = ()
    restart_required: tuple[str, ...] = ()
    #: platforms whose token source now uses a rotated credential
    rotated: tuple[Scope, ...] = ()


def answer(result: ReloadResult) -> Mapping[str, Any]:
    """The control socket's ``reload`` answer; a refused reload raises its one-line error."""
    if result.error is not None:
        raise ConfigError(result.error)
    return {
        "added": list(result.added),
        "removed": list(result.removed),
        "restarted": list(result.restarted),
        "keptDown": list(result.kept_down),
        "unchanged": len(result.unchanged),
        "restartRequired": list(result.restart_required),
        "credentialsRotated": [p.value for p in result.rotated],
    }


def settings(config: Config, spec: SessionSpec) -> bytes:
    """What a session depends on, so that a change of it restarts the session.

    Its own entry, and what it uses of its platform's table: a Web Messaging guest connects with
    the deployment id alone (docs/platforms.md, "Genesys Cloud Web Messaging": no OAuth), so the
    Web Messaging URL, the deployment and the keepalive; a notifications or CXone session the whole
    table, which builds its pipeline, token cache and (CXone) API location. Never a credential's
    value: a rotated credential swaps the token source (the module docstring).
    """
    uses: object = platform_table(config, spec_scope(spec))
    if spec.kind is SessionKind.WEBMESSAGING:
        gen = session_table(config, spec)
        # config.py: a genesys session needs its tenant's table ([platforms.genesys], [tenants.NAME])
        assert isinstance(gen, GenesysConfig)
        uses = [gen.webmessaging_url, gen.deployment_id, gen.keepalive]
    return msgspec.json.encode([spec, uses])


@dataclass(frozen=True, slots=True)
class _Read:
    """Everything a reload reads, validated, before anything changes."""

    config: Config
    secrets: dict[Scope, tuple[Secret | None, ...]]
    taxonomy: Taxonomy | None


class Reloader:
    """Applies a new configuration to a running supervisor, one reload at a time (module docstring)."""

    def __init__(
        self,
        supervisor: Supervisor,
        load: Callable[[], Config],
        *,
        apply_sockets: Callable[[SocketsConfig], object] | None = None,
        restarts_in_flight: int | None = None,
    ) -> None:
        self._supervisor = supervisor
        self._load = load
        #: gives the socket API its reloaded access lists, roles and limits (None: no API to give
        #: them to, and a change of [sockets] waits for a restart)
        self.apply_sockets = apply_sockets
        # sessions stopped at once by one reload; None: admission.connectsInFlight (1: one by one)
        self._restarts_in_flight = restarts_in_flight
        # the configuration the daemon started with: what a restart-only table still runs on, so
        # each reload names every such table changed since the start (not since the last reload)
        self._started = supervisor.config
        # the taxonomy version the configuration named at the last load (not what is active now)
        self._configured_taxonomy = supervisor.config.daemon.taxonomy_version
        # platforms whose rotated credential was refused, until the configured one is in use again
        self._refused: set[Scope] = set()
        # anyio's Lock is fair: waiting reloads run in the order they asked
        self._lock = anyio.Lock()

    @property
    def busy(self) -> bool:
        """A reload is running (or waiting for the one that is)."""
        return self._lock.locked()

    async def reload(self) -> ReloadResult:
        """Read, validate and apply the configuration; never raises (but for the caller's cancellation)."""
        supervisor = self._supervisor
        async with self._lock:
            if supervisor.draining.is_set():
                return self._failed(DRAINING)
            block_loop_on_reload(supervisor.wiring.environ)  # a test's wedge (runtime/testhooks.py)
            outcome: list[ReloadResult] = []
            # shielded from whoever awaits it: a caller's cancellation must not cut a reload in half
            # (the configuration switched, half of its sessions changed); only the drain stops one
            with anyio.CancelScope(shield=True):
                async with anyio.create_task_group() as tg:

                    async def stop_when_draining() -> None:
                        await supervisor.draining.wait()
                        tg.cancel_scope.cancel()

                    async def reload_once() -> None:
                        outcome.append(await self._reload())
                        tg.cancel_scope.cancel()

                    tg.start_soon(stop_when_draining)
                    tg.start_soon(reload_once)
            return outcome[0] if outcome else self._failed(INTERRUPTED)

    def _failed(self, error: str) -> ReloadResult:
        self._supervisor.bus.publish(ConfigReloadFailed(error))
        return ReloadResult(ReloadOutcome.FAILED, error=error)

    def _read(self, configured_taxonomy: str | None) -> _Read:
        """The file, every credential it names and a newly named taxonomy (in a worker thread)."""
        wiring = self._supervisor.wiring
        new = self._load()
        secrets = wiring.read_secrets(new)  # every credential readable, before anything changes
        taxonomy = None
        if new.daemon.taxonomy_version != configured_taxonomy:
            taxonomy = load_taxonomy(resolve_version(new.daemon.taxonomy_version, wiring.environ))
        return _Read(new, secrets, taxonomy)

    async def _reload(self) -> ReloadResult:
        try:
            # off the loop: sessions are served while the files are read; a read the drain
            # interrupts is abandoned (its thread ends on its own), never waited for
            read = await to_thread.run_sync(self._read, self._configured_taxonomy, abandon_on_cancel=True)
        except SupervisorError as exc:
            return self._failed(str(exc))
        # ids are unique across origins: the file may not take over a session added over the
        # control socket (which would then be two sessions, or one silently changing hands)
        added = self._supervisor.sessions.added
        clash = next((i for i, s in enumerate(read.config.sessions) if s.id in added), None)
        if clash is not None:
            session_id = read.config.sessions[clash].id
            return self._failed(
                f"sessions[{clash}].id: session '{session_id}' was added over the control socket; "
                "remove it there first (ctl sessions remove) or give the file's entry another id"
            )
        # a rotated credential is tried before anything changes: refused, the whole reload is
        rotations = await self._rotations(read)
        if isinstance(rotations, str):
            return self._failed(rotations)
        try:
            return await self._apply(read, rotations)
        except Exception as exc:  # no step of a reload may end the daemon
            # the concurrent stops raise as a group: name the first failure, not the group
            while isinstance(exc, ExceptionGroup) and exc.exceptions:
                exc = exc.exceptions[0]
            return self._failed(
                f"the reload failed while applying the configuration: {type(exc).__name__}: {exc}"
            )

    async def _rotations(self, read: _Read) -> list[Rotation] | str:
        """A token from each rotated credential (Wiring.trial_rotation), or the located one-line
        errors of those refused, joined (each refusal published as CREDENTIAL_REFUSED)."""
        wiring = self._supervisor.wiring
        rotations: list[Rotation] = []
        problems: list[str] = []
        for platform in wiring.rotated(read.config, read.secrets):
            try:
                rotations.append(await wiring.trial_rotation(platform, read.config, read.secrets))
            except SupervisorError as exc:
                problem = _refusal(platform, wiring.secrets[platform], read.secrets[platform], exc)
                self._refused.add(platform)
                self._supervisor.bus.publish(
                    CredentialRefused(platform.value, problem, timestamp=self._now())
                )
                problems.append(problem)
        return "; ".join(problems) if problems else rotations

    def _now(self) -> str:
        return iso_utc(self._supervisor.wiring.clock.time())

    async def _apply(self, read: _Read, rotations: list[Rotation]) -> ReloadResult:
        supervisor = self._supervisor
        wiring = supervisor.wiring
        old, new = supervisor.config, read.config
        before = {s.id: settings(old, s) for s in old.sessions}
        after = {s.id: settings(new, s) for s in new.sessions}
        specs = {s.id: s for s in new.sessions}
        added = tuple(i for i in after if i not in before)
        removed = tuple(i for i in before if i not in after)
        changed = tuple(i for i in after if i in before and after[i] != before[i])
        unchanged = tuple(i for i in after if i in before and after[i] == before[i])
        restart = restart_required(self._started, new, sockets_applied=self.apply_sockets is not None)
        retired = supervisor.reconfigure(new, read.secrets, rotations)
        if self.apply_sockets is not None:
            self.apply_sockets(new.sockets)
        outcome: dict[str, bool] = {}
        try:
            await self._stop_and_restart(removed, [specs[i] for i in changed], outcome, new)
            for session_id in added:
                supervisor.add(specs[session_id])
        finally:
            with anyio.CancelScope(shield=True):
                await wiring.close_clients(retired)
        if read.taxonomy is not None:
            wiring.use_taxonomy(read.taxonomy)
        self._configured_taxonomy = new.daemon.taxonomy_version
        restarted = tuple(i for i in changed if outcome.get(i))
        kept_down = tuple(i for i in changed if not outcome.get(i))
        self._credentials_settled(rotations, read.secrets)
        supervisor.bus.publish(
            ConfigReloaded(
                added,
                removed,
                restarted,
                len(unchanged),
                wiring.classifier.taxonomy.version,
                kept_down,
                restart,
            )
        )
        rotated = tuple(r.platform for r in rotations)
        return ReloadResult(
            ReloadOutcome.APPLIED, None, added, removed, restarted, unchanged, kept_down, restart, rotated
        )

    async def _stop_and_restart(
        self, removed: tuple[str, ...], changed: list[SessionSpec], outcome: dict[str, bool], new: Config
    ) -> None:
        """Removals and restarts at once, at most ``restarts_in_flight`` stops in flight: each waits
        for its session's close (a WebSocket close, a CXone DELETE), and one after the other that
        was seconds per session; the new runners' connection attempts are paced by admission."""
        supervisor = self._supervisor
        limit = self._restarts_in_flight or new.admission.connects_in_flight
        limiter = anyio.CapacityLimiter(limit)

        async def remove(session_id: str) -> None:
            async with limiter:
                await supervisor.remove(session_id)

        async def restart(spec: SessionSpec) -> None:
            async with limiter:
                outcome[spec.id] = await supervisor.restart(spec) is not None

        async with anyio.create_task_group() as tg:
            for session_id in removed:
                tg.start_soon(remove, session_id)
            for spec in changed:
                tg.start_soon(restart, spec)

    def _credentials_settled(
        self, rotations: list[Rotation], configured: Mapping[Scope, tuple[Secret | None, ...]]
    ) -> None:
        """CREDENTIAL_ACCEPTED for each rotation, and for each platform refused before whose
        configured credential is the one in use again (the file put back, the platform rebuilt or
        gone): each clears its part of the ``credentials`` condition."""
        wiring = self._supervisor.wiring
        bus = self._supervisor.bus
        for rotation in rotations:
            self._refused.discard(rotation.platform)
            bus.publish(CredentialAccepted(rotation.platform.value, True, timestamp=self._now()))
        for platform in sorted(self._refused, key=lambda scope: scope.value):
            if wiring.secrets.get(platform) == configured.get(platform):
                self._refused.discard(platform)
                bus.publish(CredentialAccepted(platform.value, False, timestamp=self._now()))


def _refusal(
    platform: Scope,
    in_use: tuple[Secret | None, ...],
    rotated: tuple[Secret | None, ...],
    exc: SupervisorError,
) -> str:
    """The located line of a rotated credential that was not granted a token: the keys whose file
    changed, what the platform answered (its code, never the secret), and that nothing changed."""
    keys = " and ".join(
        k for k, a, b in zip(credential_keys(platform), in_use, rotated, strict=True) if a != b
    )
    if isinstance(exc, OperationError):
        event = exc.event
        status = "" if event.raw_status is None else f"HTTP {event.raw_status} "
        refused = event.raw_status is not None and 400 <= event.raw_status < 500
        what = "refused the new credential" if refused else "could not verify the new credential"
        cause = f"{status}{event.code}"
    else:
        what, cause = "could not verify the new credential", str(exc)
    return (
        f"{keys}: the {platform.value} token endpoint {what} ({cause}): "
        "the credential in use stays, nothing is reloaded"
    )


class ReloadRequests:
    """SIGHUP's reloads, run one after another in a task of their own (a service of ``run_daemon``).

    :meth:`request` returns at once, so the lifecycle's signal loop is free to take a SIGTERM while
    a reload runs. Requests that arrive while one waits are one reload: it reads the file when it
    starts, so it already sees whatever the later requests were sent for.
    """

    def __init__(self, reload: Callable[[], Awaitable[object]]) -> None:
        self._reload = reload
        self._wake = anyio.Event()
        self._running = False

    @property
    def idle(self) -> bool:
        """No reload asked for and none running."""
        return not self._wake.is_set() and not self._running

    async def request(self) -> None:
        self._wake.set()

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            await self._wake.wait()
            self._wake = anyio.Event()
            self._running = True
            try:
                await self._reload()
            finally:
                self._running = False
