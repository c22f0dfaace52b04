"""Reloading the configuration while the daemon runs (SIGHUP, and the control socket's ``reload``).

systemd's convention (``ExecReload=kill -HUP $MAINPID``): re-read the configuration file and
the credential files, validate everything first, and only then apply the difference:

* sessions added to the file are started; sessions removed are stopped (close 1000, CXone
  DELETE) and forgotten; sessions whose settings changed are restarted (a new runner, a full
  authentication cycle), unless they are down (``ctl stop``, a fail-fast): those stay down and
  ``ctl start`` brings them back on the new settings; unchanged sessions are not touched;
* a session's settings are its own ``[[sessions]]`` entry and its platform's table, credentials
  included (a rotated client secret restarts that platform's sessions on a new token cache);
* the global tables (``reconnect``, ``circuit``, ``tokens``, ``daemon.requestTimeout``) apply to
  sessions and circuits created from then on: a reload never restarts every session for them;
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
import hashlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import anyio
import msgspec
from anyio import to_thread
from anyio.abc import TaskStatus

from supervisor.config import Config, Secret, SessionSpec
from supervisor.errors import ConfigError, SupervisorError
from supervisor.events import Event, WireEvent
from supervisor.runtime.supervisor import Supervisor
from supervisor.runtime.testhooks import block_loop_on_reload
from supervisor.taxonomy import Taxonomy, load_taxonomy, resolve_version
from supervisor.vocabulary import Platform

__all__ = [
    "ConfigReloadFailed",
    "ConfigReloaded",
    "ReloadOutcome",
    "ReloadRequests",
    "ReloadResult",
    "Reloader",
    "answer",
]

#: the refusal of a reload asked for (or still queued) once the drain began
DRAINING = "the daemon is draining: the configuration is not reloaded"
#: what a reload the drain interrupted publishes (docs/runtime.md, "Lifecycle")
INTERRUPTED = (
    "the reload was interrupted by the drain: sessions it had not yet changed are drained as they were"
)


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

    def fields(self) -> dict[str, Any]:
        return {
            "added": list(self.added),
            "removed": list(self.removed),
            "restarted": list(self.restarted),
            "keptDown": list(self.kept_down),
            "unchanged": self.unchanged,
            "taxonomyVersion": self.taxonomy_version,
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


def answer(result: ReloadResult) -> Mapping[str, Any]:
    """The control socket's ``reload`` answer; a refused reload raises its one-line error."""
    if result.error is not None:
        raise ConfigError(result.error)
    return {
        "added": list(result.added),
        "removed": list(result.removed),
        "restarted": list(result.restarted),
        "unchanged": len(result.unchanged),
    }


def _settings(
    config: Config, spec: SessionSpec, secrets: Mapping[Platform, tuple[Secret | None, ...]]
) -> bytes:
    """What a session depends on: its entry, its platform's table and that platform's credentials.

    The credentials enter as a digest: the values never leave :class:`Secret` in a printable form.
    """
    platform = getattr(config.platforms, spec.platform.value)
    digest = hashlib.sha256()
    for secret in secrets.get(spec.platform, ()):
        digest.update(b"\0" if secret is None else secret.reveal().encode() + b"\1")
    return msgspec.json.encode([spec, platform]) + digest.digest()


@dataclass(frozen=True, slots=True)
class _Read:
    """Everything a reload reads, validated, before anything changes."""

    config: Config
    secrets: dict[Platform, tuple[Secret | None, ...]]
    taxonomy: Taxonomy | None


class Reloader:
    """Applies a new configuration to a running supervisor, one reload at a time (module docstring)."""

    def __init__(self, supervisor: Supervisor, load: Callable[[], Config]) -> None:
        self._supervisor = supervisor
        self._load = load
        # the taxonomy version the configuration named at the last load (not what is active now)
        self._configured_taxonomy = supervisor.config.daemon.taxonomy_version
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
        try:
            return await self._apply(read)
        except Exception as exc:  # no step of a reload may end the daemon
            return self._failed(
                f"the reload failed while applying the configuration: {type(exc).__name__}: {exc}"
            )

    async def _apply(self, read: _Read) -> ReloadResult:
        supervisor = self._supervisor
        wiring = supervisor.wiring
        old, new = supervisor.config, read.config
        before = {s.id: _settings(old, s, wiring.secrets) for s in old.sessions}
        after = {s.id: _settings(new, s, read.secrets) for s in new.sessions}
        specs = {s.id: s for s in new.sessions}
        added = tuple(i for i in after if i not in before)
        removed = tuple(i for i in before if i not in after)
        changed = tuple(i for i in after if i in before and after[i] != before[i])
        unchanged = tuple(i for i in after if i in before and after[i] == before[i])
        retired = supervisor.reconfigure(new, read.secrets)
        restarted: list[str] = []
        kept_down: list[str] = []
        try:
            for session_id in removed:
                await supervisor.remove(session_id)
            for session_id in changed:
                runner = await supervisor.restart(specs[session_id])
                (restarted if runner is not None else kept_down).append(session_id)
            for session_id in added:
                supervisor.add(specs[session_id])
        finally:
            with anyio.CancelScope(shield=True):
                await wiring.close_clients(retired)
        if read.taxonomy is not None:
            wiring.use_taxonomy(read.taxonomy)
        self._configured_taxonomy = new.daemon.taxonomy_version
        supervisor.bus.publish(
            ConfigReloaded(
                added,
                removed,
                tuple(restarted),
                len(unchanged),
                wiring.classifier.taxonomy.version,
                tuple(kept_down),
            )
        )
        return ReloadResult(
            ReloadOutcome.APPLIED, None, added, removed, tuple(restarted), unchanged, tuple(kept_down)
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
