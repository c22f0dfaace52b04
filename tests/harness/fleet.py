"""A fleet in the tables, for tests of what members tell each other (``-m postgres``).

:class:`TableLeases` is a :class:`~supervisor.runtime.leases.Leases` whose shards the test names: at
``serve`` it writes itself into ``fleet_members`` and takes its shards in ``shard_leases`` (the next
epoch of each, expiring in an hour: nothing renews them in a test), as a fleet member's leases would,
and answers ``fleet_view()`` from the tables as they were at its last :meth:`TableLeases.refresh`.
:func:`seat` puts another member (a peer with no daemon) in the tables the same way.
:func:`notices` LISTENs on a dedicated connection, as the fleet bus does, and yields what arrives.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Callable, Collection, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import anyio
import psycopg
from anyio.abc import ObjectReceiveStream, TaskStatus
from psycopg import sql

from supervisor.fleet.view import FleetView, read_fleet_view
from supervisor.runtime.leases import Lease, LeaseHolder

__all__ = ["Received", "TableLeases", "notices", "seat"]

_NOW = "extract(epoch from clock_timestamp())"


async def seat(dsn: str, member: str, host: str, shards: Collection[int]) -> dict[int, int]:
    """``member`` (on ``host``) active in ``fleet_members`` and holding ``shards`` for an hour, each at
    its next epoch; returns shard -> epoch."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(
            "INSERT INTO fleet_members (member, host, digest, state, started_at, heartbeat_at) "
            f"VALUES (%s, %s, 'test', 'active', {_NOW}, {_NOW}) ON CONFLICT (member) DO UPDATE "
            "SET host = excluded.host, state = 'active', heartbeat_at = excluded.heartbeat_at",
            (member, host),
        )
        cur = await conn.execute(
            f"UPDATE shard_leases SET owner = %s, epoch = epoch + 1, expires_at = {_NOW} + 3600 "
            "WHERE shard = ANY(%s) RETURNING shard, epoch",
            (member, sorted(shards)),
        )
        return {int(s): int(e) for s, e in await cur.fetchall()}


class TableLeases:
    """Leases on the shards the test names, written in the tables (module docstring)."""

    def __init__(self, dsn: str, identity: str, host: str, shards: Collection[int]) -> None:
        self._dsn = dsn
        self.identity = identity
        self.host = host
        self._shards = frozenset(shards)
        self._owned: dict[int, Lease] = {}
        self._view = FleetView(identity, (), ())

    def owned(self) -> Mapping[int, Lease]:
        return MappingProxyType(self._owned)

    def fleet_view(self) -> FleetView:
        return self._view

    def subscribe_deadlines(self, callback: Callable[[Mapping[int, Lease]], None]) -> None:
        """Its leases have no deadline (the test holds them for the daemon's life): nothing to tell."""

    async def refresh(self) -> FleetView:
        """Read the fleet from the tables again (what ``fleet_view`` answers from now on)."""
        async with await psycopg.AsyncConnection.connect(self._dsn) as conn:
            self._view = await read_fleet_view(conn, self.identity)
        return self._view

    async def serve(
        self, holder: LeaseHolder, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        epochs = await seat(self._dsn, self.identity, self.host, self._shards)
        leases = [Lease(shard, epoch) for shard, epoch in sorted(epochs.items())]
        self._owned.update((lease.shard, lease) for lease in leases)
        await self.refresh()
        await holder.acquired(leases)
        task_status.started()
        await anyio.sleep_forever()


@dataclass(frozen=True)
class Received:
    """A notice as the fleet bus hands it to a handler."""

    channel: str
    payload: str
    sender_pid: int

    @property
    def body(self) -> dict[str, Any]:
        value = json.loads(self.payload)
        assert isinstance(value, dict)
        return value


@contextlib.asynccontextmanager
async def notices(dsn: str, *channels: str) -> AsyncIterator[ObjectReceiveStream[Received]]:
    """LISTEN on ``channels`` (one connection of its own); the notices, in the order they arrive."""
    send, receive = anyio.create_memory_object_stream[Received](100)
    async with send, receive, await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        for channel in channels:
            await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))

        async def pump() -> None:
            async for n in conn.notifies():
                await send.send(Received(n.channel, n.payload, n.pid))

        async with anyio.create_task_group() as tg:
            tg.start_soon(pump)
            try:
                yield receive
            finally:
                tg.cancel_scope.cancel()
