"""Reloading the configuration while the daemon runs (SIGHUP, and the control socket's ``reload``).

systemd's convention (``ExecReload=kill -HUP $MAINPID``): re-read the configuration file and
the credential files, validate everything first, and only then apply the difference:

* sessions added to the file are started; sessions removed are stopped (close 1000, CXone
  DELETE) and forgotten; sessions whose settings changed are restarted (a new runner, a full
  authentication cycle); unchanged sessions are not touched;
* a session's settings are its own ``[[sessions]]`` entry and its platform's table, credentials
  included (a rotated client secret restarts that platform's sessions on a new token cache);
* the global tables (``reconnect``, ``circuit``, ``tokens``, ``daemon.requestTimeout``) apply to
  sessions and circuits created from then on: a reload never restarts every session for them;
* the taxonomy version is switched only when the file names another one than it did: a version
  switched at run time (``ctl taxonomy use``) stays until the configuration names another.

Any error (the file, a credential, the taxonomy) leaves the daemon running on the old
configuration and publishes ``CONFIG_RELOAD_FAILED`` with the located one-line error.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import msgspec

from supervisor.config import Config, Secret, SessionSpec
from supervisor.errors import SupervisorError
from supervisor.events import Event
from supervisor.runtime.supervisor import Supervisor
from supervisor.taxonomy import load_taxonomy, resolve_version

__all__ = ["ConfigReloadFailed", "ConfigReloaded", "ReloadOutcome", "Reloader"]


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

    def fields(self) -> dict[str, Any]:
        return {
            "added": list(self.added),
            "removed": list(self.removed),
            "restarted": list(self.restarted),
            "unchanged": self.unchanged,
            "taxonomyVersion": self.taxonomy_version,
        }


@dataclass(frozen=True, slots=True)
class ConfigReloadFailed(Event):
    """A reload was refused: the daemon keeps running on the old configuration."""

    name: ClassVar[str] = "CONFIG_RELOAD_FAILED"
    error: str

    def fields(self) -> dict[str, Any]:
        return {"error": self.error}


@dataclass(frozen=True, slots=True)
class ReloadResult:
    outcome: ReloadOutcome
    error: str | None = None
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    restarted: tuple[str, ...] = ()
    unchanged: tuple[str, ...] = field(default=())


def _settings(config: Config, spec: SessionSpec, secrets: Mapping[str, tuple[Secret | None, ...]]) -> bytes:
    """What a session depends on: its entry, its platform's table and that platform's credentials.

    The credentials enter as a digest: the values never leave :class:`Secret` in a printable form.
    """
    platform = getattr(config.platforms, spec.platform)
    digest = hashlib.sha256()
    for secret in secrets.get(spec.platform, ()):
        digest.update(b"\0" if secret is None else secret.reveal().encode() + b"\1")
    return msgspec.json.encode([spec, platform]) + digest.digest()


class Reloader:
    """Applies a new configuration to a running supervisor (see the module docstring)."""

    def __init__(self, supervisor: Supervisor, load: Callable[[], Config]) -> None:
        self._supervisor = supervisor
        self._load = load
        # the taxonomy version the configuration named at the last load (not what is active now)
        self._configured_taxonomy = supervisor.config.daemon.taxonomy_version

    async def reload(self) -> ReloadResult:
        supervisor = self._supervisor
        wiring = supervisor.wiring
        bus = supervisor.bus
        old = supervisor.config
        try:
            new = self._load()
            secrets = wiring.read_secrets(new)  # every credential readable, before anything changes
            taxonomy = None
            if new.daemon.taxonomy_version != self._configured_taxonomy:
                taxonomy = load_taxonomy(resolve_version(new.daemon.taxonomy_version, wiring.environ))
        except SupervisorError as exc:
            bus.publish(ConfigReloadFailed(str(exc)))
            return ReloadResult(ReloadOutcome.FAILED, error=str(exc))
        old_secrets = wiring.secrets
        before = {s.id: _settings(old, s, old_secrets) for s in old.sessions}
        after = {s.id: _settings(new, s, secrets) for s in new.sessions}
        specs = {s.id: s for s in new.sessions}
        added = tuple(i for i in after if i not in before)
        removed = tuple(i for i in before if i not in after)
        restarted = tuple(i for i in after if i in before and after[i] != before[i])
        unchanged = tuple(i for i in after if i in before and after[i] == before[i])
        retired = wiring.reconfigure(new, secrets)
        supervisor.config = new
        for session_id in removed:
            await supervisor.remove(session_id)
        for session_id in restarted:
            await supervisor.restart(specs[session_id])
        for session_id in added:
            supervisor.start(specs[session_id])
        await wiring.close_clients(retired)
        if taxonomy is not None:
            wiring.use_taxonomy(taxonomy)
            self._configured_taxonomy = new.daemon.taxonomy_version
        bus.publish(
            ConfigReloaded(added, removed, restarted, len(unchanged), wiring.classifier.taxonomy.version)
        )
        return ReloadResult(ReloadOutcome.APPLIED, None, added, removed, restarted, unchanged)
