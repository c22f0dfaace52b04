"""Leases whose deadlines the test sets: a fleet member's leases without the fleet's lease table.

:class:`DeadlineLeases` implements :class:`~supervisor.runtime.leases.Leases` as a fleet's would look
to the member: each shard held with an epoch and a deadline on the test's CLOCK_BOOTTIME source, the
deadline subscribers told after every "renewal" (:meth:`renew`) or loss (:meth:`lose`), the holder
told of acquisitions and losses. The test moves it by hand; nothing in it is a transport.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from types import MappingProxyType

import anyio
from anyio.abc import TaskStatus

from supervisor.runtime.leases import Lease, LeaseHolder

__all__ = ["DeadlineLeases", "ManualBoottime"]


class ManualBoottime:
    """A CLOCK_BOOTTIME source the test moves (``now()``), for the write fence and the leases."""

    def __init__(self, start: float = 10_000.0) -> None:
        self.value = start

    def __call__(self) -> float:
        return self.value

    def advance(self, seconds: float) -> None:
        self.value += seconds


class DeadlineLeases:
    """Leases on ``shards``, each until ``now() + margin`` at every :meth:`renew` (module docstring)."""

    def __init__(
        self,
        shards: Collection[int],
        now: Callable[[], float],
        *,
        margin: float = 6.0,
        epoch: int = 1,
        identity: str = "member-under-test",
    ) -> None:
        self._now = now
        self.margin = margin
        self._epoch = epoch
        self._identity = identity
        self._owned: dict[int, Lease] = {s: Lease(s, epoch, now() + margin) for s in shards}
        self._subscribers: list[Callable[[Mapping[int, Lease]], None]] = []
        self._holder: LeaseHolder | None = None

    @property
    def identity(self) -> str:
        return self._identity

    def owned(self) -> Mapping[int, Lease]:
        return MappingProxyType(self._owned)

    def subscribe_deadlines(self, callback: Callable[[Mapping[int, Lease]], None]) -> None:
        self._subscribers.append(callback)
        callback(self.owned())

    def _tell(self) -> None:
        for callback in self._subscribers:
            callback(self.owned())

    async def serve(
        self, holder: LeaseHolder, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        self._holder = holder
        await holder.acquired(sorted(self._owned.values(), key=lambda lease: lease.shard))
        task_status.started()
        await anyio.sleep_forever()

    def renew(self, shards: Collection[int] | None = None) -> None:
        """A renewal granted now: ``shards`` (every shard held by default) until ``now() + margin``."""
        for shard in self._owned if shards is None else shards:
            lease = self._owned[shard]
            self._owned[shard] = Lease(shard, lease.epoch, self._now() + self.margin)
        self._tell()

    def set_deadline(self, shard: int, deadline: float) -> None:
        lease = self._owned[shard]
        self._owned[shard] = Lease(shard, lease.epoch, deadline)
        self._tell()

    async def lose(self, shards: Collection[int]) -> None:
        for shard in shards:
            del self._owned[shard]
        self._tell()
        if self._holder is not None:
            await self._holder.lost(frozenset(shards))

    async def give(self, shards: Collection[int]) -> None:
        self._epoch += 1
        leases = [Lease(s, self._epoch, self._now() + self.margin) for s in sorted(shards)]
        self._owned.update((lease.shard, lease) for lease in leases)
        self._tell()
        if self._holder is not None:
            await self._holder.acquired(leases)
