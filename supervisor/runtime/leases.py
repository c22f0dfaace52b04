"""Which shards this process owns: leases behind one interface, and who answers for a session.

Sessions are grouped in 256 shards (``shard = blake2b(session id) mod 256``: supervisor/store/shards.py).
A process runs the sessions of the shards it holds a lease on, and no others (docs/runtime.md, "Shards
and leases"):

* :class:`Leases` is what the supervisor is given: the shards owned, each with its epoch and
  deadline, and two callbacks on a :class:`LeaseHolder`: ``acquired`` (the supervisor loads the
  shards from the store, ends the orphans of those shards only, and starts their sessions) and
  ``lost`` (it abandons their sessions: no DELETE, no ``closeSession``, no store write, since the
  next owner takes them over from what the store holds).
* :class:`SoloLeases` is one host's: every shard, at the epoch the store took when it opened
  (``meta.epoch``, bumped at every open), never lost. It is the same code path a fleet member takes
  with leases kept in a shared store; only the :class:`Leases` differs.
* :class:`LeaseOwners` is the one lookup (session → owner) the socket API and so the CLI go through:
  on one host always "here"; a session whose shard is not owned raises
  :class:`~supervisor.errors.NotOwner`.

The fleet identity of a process is its **boot id** (:func:`fleet_identity`): Linux's
``/proc/sys/kernel/random/boot_id``, a random UUID the kernel draws at every boot. Elsewhere (no such
file: macOS, the BSDs) a random UUID drawn once per process stands in: unique as well, but a restart
of the daemon is then a new member rather than the same boot's. The lock file (supervisor/runtime/lock.py)
stays one per host and configuration: two daemons of one configuration on one host are still refused.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Final, Protocol

import anyio
from anyio.abc import TaskStatus

from supervisor.errors import NotOwner
from supervisor.runtime.sessions import Owner
from supervisor.store.shards import ALL_SHARDS, shard_of

__all__ = [
    "BOOT_ID",
    "Lease",
    "LeaseHolder",
    "LeaseOwners",
    "Leases",
    "SoloLeases",
    "fleet_identity",
]

#: where Linux keeps the id of the current boot (proc(5), "/proc/sys/kernel/random/boot_id")
BOOT_ID: Final = Path("/proc/sys/kernel/random/boot_id")
_PROCESS_ID: Final = str(uuid.uuid4())


def fleet_identity(path: Path = BOOT_ID) -> str:
    """This process's identity in a fleet: the kernel's boot id, else a UUID drawn once per process."""
    try:
        text = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return _PROCESS_ID
    return text or _PROCESS_ID


@dataclass(frozen=True, slots=True)
class Lease:
    """One shard held: since which owner epoch, and until when (the leases' clock; None: for as
    long as the process runs, SoloLeases' leases)."""

    shard: int
    epoch: int
    deadline: float | None = None


class LeaseHolder(Protocol):
    """Told when shards are acquired or lost (the supervisor)."""

    async def acquired(self, leases: Sequence[Lease]) -> None:
        """``leases`` are now this process's: load their shards, end their orphans, start their sessions."""

    async def lost(self, shards: Collection[int]) -> None:
        """``shards`` are no longer this process's: abandon their sessions (nothing ended, nothing written)."""


class Leases(Protocol):
    """The shards this process owns (module docstring)."""

    @property
    def identity(self) -> str:
        """The process's fleet identity (:func:`fleet_identity`)."""

    def owned(self) -> Mapping[int, Lease]:
        """Every shard held now, with its lease."""

    def subscribe_deadlines(self, callback: Callable[[Mapping[int, Lease]], None]) -> None:
        """Call ``callback`` on the loop after every renewal or loss with the new owned map (what the
        write fence follows: supervisor/runtime/fence.py). Leases without deadlines never call it."""

    async def serve(
        self, holder: LeaseHolder, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Acquire, renew and lose leases, telling ``holder``; started once the first shards it could
        acquire were told (``acquired`` returned), so the daemon is ready with its sessions handed over."""


class SoloLeases:
    """One host alone: every shard at the store's open epoch, never lost (module docstring)."""

    def __init__(self, epoch: int, identity: str | None = None) -> None:
        self._identity = identity if identity is not None else fleet_identity()
        self._owned: dict[int, Lease] = {}
        self._epoch = epoch
        self._view: Mapping[int, Lease] = MappingProxyType(self._owned)

    @property
    def identity(self) -> str:
        return self._identity

    def owned(self) -> Mapping[int, Lease]:
        return self._view

    def subscribe_deadlines(self, callback: Callable[[Mapping[int, Lease]], None]) -> None:
        """One host's leases never end: nothing to follow, the callback is never called."""

    async def serve(
        self, holder: LeaseHolder, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        leases = [Lease(shard, self._epoch) for shard in sorted(ALL_SHARDS)]
        self._owned.update((lease.shard, lease) for lease in leases)
        await holder.acquired(leases)
        task_status.started()
        await anyio.sleep_forever()


class LeaseOwners:
    """The one lookup (session → owner) over ``leases``: "here" when its shard is owned."""

    def __init__(self, leases: Leases) -> None:
        self._leases = leases

    def owner_of(self, session_id: str) -> Owner:
        shard = shard_of(session_id)
        if shard in self._leases.owned():
            return Owner(shard, here=True, identity=self._leases.identity)
        # who holds it is a fleet's lease table's to say; one host's leases know only their own
        return Owner(shard, here=False)

    def require(self, session_id: str) -> None:
        """Raise :class:`NotOwner` unless this process owns the session's shard."""
        owner = self.owner_of(session_id)
        if not owner.here:
            raise NotOwner(session_id, owner.shard, owner.identity)
