"""Leases behind an interface: SoloLeases owns every shard at the store's epoch; the one owner lookup;
the fleet identity (supervisor/runtime/leases.py; docs/runtime.md, "Shards and leases")."""

from __future__ import annotations

import uuid
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path

import anyio
import pytest
from anyio.abc import TaskStatus

from supervisor.errors import NotOwner, SupervisorError
from supervisor.runtime.leases import Lease, LeaseHolder, LeaseOwners, SoloLeases, fleet_identity
from supervisor.store.shards import ALL_SHARDS, SHARDS, shard_of

pytestmark = pytest.mark.anyio


class Holder:
    def __init__(self) -> None:
        self.acquired_leases: list[Lease] = []
        self.lost_shards: list[int] = []
        self.calls = 0

    async def acquired(self, leases: Sequence[Lease]) -> None:
        self.calls += 1
        self.acquired_leases.extend(leases)

    async def lost(self, shards: Collection[int]) -> None:
        self.lost_shards.extend(shards)


async def test_solo_leases_own_every_shard_at_the_stores_epoch_told_once_before_started() -> None:
    leases = SoloLeases(epoch=42, identity="host-a")
    holder = Holder()
    assert leases.owned() == {}  # nothing is owned before serve acquires it
    async with anyio.create_task_group() as tg:
        await tg.start(leases.serve, holder)
        # started only once the holder was told: the daemon is ready with its sessions handed over
        assert holder.calls == 1
        assert [lease.shard for lease in holder.acquired_leases] == list(range(SHARDS))
        assert {(lease.epoch, lease.deadline) for lease in holder.acquired_leases} == {(42, None)}
        assert set(leases.owned()) == ALL_SHARDS and leases.identity == "host-a"
        tg.cancel_scope.cancel()
    assert holder.lost_shards == []


async def test_on_one_host_every_session_is_answered_here() -> None:
    leases = SoloLeases(epoch=1, identity="host-a")
    owners = LeaseOwners(leases)
    async with anyio.create_task_group() as tg:
        await tg.start(leases.serve, Holder())
        for session_id in ("wm-0", "cx-1", "never-configured", "é"):
            owner = owners.owner_of(session_id)
            assert (owner.here, owner.shard, owner.identity) == (True, shard_of(session_id), "host-a")
            owners.require(session_id)  # never raises
        tg.cancel_scope.cancel()


class Static:
    """Leases that hold a fixed set of shards (a fleet member's share)."""

    identity = "host-b"

    def __init__(self, shards: Collection[int]) -> None:
        self._owned = {s: Lease(s, 3, deadline=100.0) for s in shards}

    def owned(self) -> Mapping[int, Lease]:
        return self._owned

    async def serve(
        self, holder: LeaseHolder, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        raise AssertionError("not served here")


def test_a_session_whose_shard_is_not_owned_raises_not_owner() -> None:
    owners = LeaseOwners(Static(ALL_SHARDS - {shard_of("wm-1")}))
    assert owners.owner_of("wm-1").here is False and owners.owner_of("wm-1").identity is None
    with pytest.raises(NotOwner) as refused:
        owners.require("wm-1")
    assert isinstance(refused.value, SupervisorError)
    assert (refused.value.session_id, refused.value.shard) == ("wm-1", shard_of("wm-1"))
    assert f"shard {shard_of('wm-1')}" in str(refused.value)
    owners.require("wm-0")


def test_the_fleet_identity_is_the_kernels_boot_id_else_one_uuid_per_process(tmp_path: Path) -> None:
    boot = tmp_path / "boot_id"
    boot.write_text("6f1c0ab4-1f3e-4d55-9d0e-2b0b4a6d6c11\n")
    assert fleet_identity(boot) == "6f1c0ab4-1f3e-4d55-9d0e-2b0b4a6d6c11"
    # no such file (not Linux): a UUID drawn once for this process, the same at every call
    absent = tmp_path / "absent"
    assert fleet_identity(absent) == fleet_identity(absent)
    assert uuid.UUID(fleet_identity(absent)).version == 4
    empty = tmp_path / "empty"
    empty.write_text("")
    assert fleet_identity(empty) == fleet_identity(absent)
