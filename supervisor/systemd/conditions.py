"""The degraded conditions the daemon detects itself (:mod:`supervisor.systemd.degraded`).

* ``circuit:<endpoint>`` while an endpoint's breaker is open or half-open: the platform (or that
  part of it) is down or refusing; or isolated by an operator (``CIRCUIT_MANUAL``), until closed. A restart would only repeat the handshakes the breaker is
  holding back (docs/architecture.md: no reconnection storms), so this is degraded, never unhealthy.
* ``state-directory`` while ``$STATE_DIRECTORY`` (systemd's ``StateDirectory=``, where the durable
  store keeps its file) is read-only, or has less than :data:`MIN_FREE_BYTES` or no inode left:
  test matrix row 21 ("state dir full or read-only: STATUS= degraded; no crash loop"). Checked
  with ``statvfs`` and ``access`` every :data:`PROBE_INTERVAL_S`, which read metadata only.

* ``store`` while the durable store (docs/store.md) refuses writes (``STORE_DEGRADED`` until
  ``STORE_RECOVERED``; :class:`StoreConditions`): acknowledgements are refused, sessions run. The
  state-directory probe tells the operator before the first write fails.
* ``fleet`` while this fleet member (``[store] url``: docs/runtime.md, "The fleet") cannot reach the
  database or runs another configuration than the fleet's (``FLEET_DEGRADED`` until
  ``FLEET_RECOVERED``; :class:`FleetConditions`): it takes no shard meanwhile, and a restart would
  cure neither.
* ``credentials`` while a rotated credential the platform refused waits for a good one
  (``CREDENTIAL_REFUSED`` until ``CREDENTIAL_ACCEPTED`` for every platform refused;
  :class:`CredentialConditions`): the credential in use serves the sessions until it is revoked at
  the platform, which a restart would not cure either.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Mapping
from pathlib import Path

import anyio
from anyio.abc import TaskStatus

from supervisor.events import (
    CircuitClosed,
    CircuitManual,
    CircuitOpened,
    CredentialAccepted,
    CredentialRefused,
    Published,
)
from supervisor.fleet.events import FleetDegraded, FleetRecovered
from supervisor.store.events import StoreDegraded, StoreRecovered
from supervisor.systemd.degraded import Degraded
from supervisor.vocabulary import CircuitState

__all__ = [
    "MIN_FREE_BYTES",
    "PROBE_INTERVAL_S",
    "CircuitConditions",
    "CredentialConditions",
    "FleetConditions",
    "StateDirectoryProbe",
    "StoreConditions",
    "state_directory",
]

#: below this much free space for the daemon's user, the state directory counts as full
MIN_FREE_BYTES = 1024 * 1024
#: how often the state directory is probed
PROBE_INTERVAL_S = 1.0


class CircuitConditions:
    """A bus sink: ``circuit:<endpoint>`` raised when a breaker opens, cleared when it closes."""

    def __init__(self, degraded: Degraded) -> None:
        self._degraded = degraded

    def __call__(self, published: Published) -> None:
        event = published.event
        if isinstance(event, CircuitOpened):
            self._degraded.raise_condition(
                _condition(event.circuit_id), f"open after {event.consecutive_failures} failures"
            )
        elif isinstance(event, CircuitClosed):
            self._degraded.clear(_condition(event.circuit_id))
        elif isinstance(event, CircuitManual):
            # an isolation holds the endpoint's sessions as an open circuit does; a close, a reset
            # or the end of --for leads to closed, which a CIRCUIT_BREAKER_CLOSED never follows
            if event.state is CircuitState.CLOSED:
                self._degraded.clear(_condition(event.circuit_id))
            else:
                self._degraded.raise_condition(_condition(event.circuit_id), "isolated by an operator")


class StoreConditions:
    """A bus sink: ``store`` raised while the durable store refuses writes, cleared when one succeeds."""

    CONDITION = "store"

    def __init__(self, degraded: Degraded) -> None:
        self._degraded = degraded

    def __call__(self, published: Published) -> None:
        event = published.event
        if isinstance(event, StoreDegraded):
            self._degraded.raise_condition(self.CONDITION, f"{event.problem}: acknowledgements refused")
        elif isinstance(event, StoreRecovered):
            self._degraded.clear(self.CONDITION)


class FleetConditions:
    """A bus sink: ``fleet`` raised while the fleet member is degraded, cleared when it recovers."""

    CONDITION = "fleet"

    def __init__(self, degraded: Degraded) -> None:
        self._degraded = degraded

    def __call__(self, published: Published) -> None:
        event = published.event
        if isinstance(event, FleetDegraded):
            self._degraded.raise_condition(self.CONDITION, f"{event.problem}: no shard taken")
        elif isinstance(event, FleetRecovered):
            self._degraded.clear(self.CONDITION)


class CredentialConditions:
    """A bus sink: ``credentials`` raised while a platform's rotated credential stays refused,
    cleared once every refused platform's configured credential is in use."""

    CONDITION = "credentials"

    def __init__(self, degraded: Degraded) -> None:
        self._degraded = degraded
        self._refused: dict[str, str] = {}

    def __call__(self, published: Published) -> None:
        event = published.event
        if isinstance(event, CredentialRefused):
            self._refused[event.platform] = event.problem
        elif isinstance(event, CredentialAccepted):
            if self._refused.pop(event.platform, None) is None:
                return
        else:
            return
        if not self._refused:
            self._degraded.clear(self.CONDITION)
            return
        # the platforms, then the first key the problem names: a status line, not the whole error
        platforms = ", ".join(sorted(self._refused))
        first = next(iter(self._refused.values())).split(":")[0]
        self._degraded.raise_condition(
            self.CONDITION, f"rotated credential refused ({platforms}: {first}); the one in use stays"
        )


def _condition(circuit_id: str) -> str:
    # the machines name a circuit "circuit:<endpoint>" already (machines/registry.py)
    return circuit_id if circuit_id.startswith("circuit:") else f"circuit:{circuit_id}"


def state_directory(environ: Mapping[str, str]) -> Path | None:
    """The first entry of ``$STATE_DIRECTORY`` (systemd.exec(5): colon-separated), or None."""
    first = environ.get("STATE_DIRECTORY", "").split(":")[0].strip()
    return Path(first) if first.startswith("/") else None


def _problem(path: Path, min_free_bytes: int) -> str | None:
    """Why ``path`` cannot take the store's writes, or None."""
    try:
        info = os.statvfs(path)
    except OSError as exc:
        return f"{path}: {exc.strerror or exc}"
    if info.f_flag & os.ST_RDONLY:
        return f"{path} is on a read-only filesystem"
    if not os.access(path, os.W_OK):
        return f"{path} is not writable by the daemon ({errno.errorcode[errno.EACCES]})"
    free = info.f_bavail * info.f_frsize
    if free < min_free_bytes:
        return f"{path} is full ({free // 1024} KiB free)"
    if info.f_files and info.f_favail == 0:
        return f"{path} has no free inode"
    return None


class StateDirectoryProbe:
    """Raises and clears ``state-directory`` from ``statvfs`` of the state directory."""

    CONDITION = "state-directory"

    def __init__(
        self,
        path: Path,
        degraded: Degraded,
        *,
        min_free_bytes: int = MIN_FREE_BYTES,
        interval_s: float = PROBE_INTERVAL_S,
    ) -> None:
        self.path = path
        self._degraded = degraded
        self._min_free = min_free_bytes
        self._interval = interval_s

    def probe(self) -> str | None:
        problem = _problem(self.path, self._min_free)
        if problem is None:
            self._degraded.clear(self.CONDITION)
        else:
            self._degraded.raise_condition(self.CONDITION, problem)
        return problem

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        self.probe()  # before READY=1: a daemon that starts degraded says so at once
        task_status.started()
        while True:
            await anyio.sleep(self._interval)
            self.probe()
