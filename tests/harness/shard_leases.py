"""Leases a test gives: some shards, moved by the test, told to the holder and to the deadline subscribers as a
fleet's lease table would (supervisor/runtime/leases.py's ``Leases``, plus ``subscribe_deadlines``)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from types import MappingProxyType

import anyio
from anyio.abc import TaskStatus

from supervisor.runtime.leases import Lease, LeaseHolder
from supervisor.store.model import Fence

__all__ = ["HeldShards", "ShardLeases"]


class ShardLeases:
    """The shards ``shards`` for member ``identity``; :meth:`give` and :meth:`lose` move them."""

    def __init__(self, identity: str, shards: Collection[int], epoch: int = 1) -> None:
        self._identity = identity
        self._epoch = epoch
        self._owned = {s: Lease(s, epoch) for s in shards}
        self._holder: LeaseHolder | None = None
        self._subscribers: list[Callable[[Mapping[int, Lease]], None]] = []

    @property
    def identity(self) -> str:
        return self._identity

    def owned(self) -> Mapping[int, Lease]:
        return MappingProxyType(self._owned)

    def subscribe_deadlines(self, callback: Callable[[Mapping[int, Lease]], None]) -> None:
        self._subscribers.append(callback)

    async def serve(
        self, holder: LeaseHolder, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        self._holder = holder
        await holder.acquired(sorted(self._owned.values(), key=lambda lease: lease.shard))
        self._told()
        task_status.started()
        await anyio.sleep_forever()

    async def give(self, shards: Collection[int]) -> None:
        assert self._holder is not None
        self._epoch += 1
        leases = [Lease(s, self._epoch) for s in sorted(shards)]
        self._owned.update((lease.shard, lease) for lease in leases)
        await self._holder.acquired(leases)
        self._told()

    async def lose(self, shards: Collection[int]) -> None:
        assert self._holder is not None
        for shard in shards:
            del self._owned[shard]
        await self._holder.lost(frozenset(shards))
        self._told()

    def _told(self) -> None:
        for callback in self._subscribers:
            callback(self.owned())


class HeldShards:
    """The leases member ``member`` believes it holds (shard -> epoch, set by the test): a store's
    :class:`~supervisor.store.model.FenceSource`, as the fleet's leases are."""

    def __init__(self, member: str = "m1") -> None:
        self.member = member
        self.epochs: dict[int, int] = {}

    def fence_for(self, shard: int) -> Fence | None:
        epoch = self.epochs.get(shard)
        return None if epoch is None else Fence(self.member, epoch)
