"""The fleet as ``ctl status`` shows it: its members and who holds each shard, at which epoch.

:class:`FleetView` is what a fleet member's leases answer (``fleet_view()``, a snapshot of the lease
table as the member last read it); :func:`fleet_wire` is its shape in the control socket's
``Status`` (docs/socket-api.md, "Status"); :func:`read_fleet_view` reads it from the tables
(``fleet_members``, ``shard_leases``: docs/store.md, "The fleet") in one transaction, on the
database's clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeAlias, runtime_checkable

if TYPE_CHECKING:
    # the postgres extra's: a member has it; ``ctl status`` and a one-host daemon import this module without
    from psycopg import AsyncConnection

__all__ = ["FleetView", "FleetViews", "MemberView", "ShardView", "fleet_wire", "read_fleet_view"]

Conn: TypeAlias = "AsyncConnection[tuple[Any, ...]]"

# the database's clock (fleet.md's agreement: every lease time is the server's, never a member's)
_NOW: Final = "extract(epoch from clock_timestamp())"
_MEMBERS_SQL: Final = (
    f"SELECT m.member, m.host, m.state, m.heartbeat_at, {_NOW}, "
    f"(SELECT count(*) FROM shard_leases l WHERE l.owner = m.member AND l.expires_at > {_NOW}) "
    "FROM fleet_members m ORDER BY m.member"
)
_SHARDS_SQL: Final = f"SELECT shard, owner, epoch, expires_at > {_NOW} FROM shard_leases ORDER BY shard"


@dataclass(frozen=True, slots=True)
class MemberView:
    """One member: its id, the host it is reached on, its state (active, degraded, leaving), how many
    shards it holds, and how long ago its last heartbeat was (seconds)."""

    member: str
    host: str
    state: str
    shards: int
    heartbeat_age_s: float


@dataclass(frozen=True, slots=True)
class ShardView:
    """One shard: who holds its lease (None: free, or its lease expired), its owner epoch, and
    whether the member asked holds it."""

    shard: int
    owner: str | None
    epoch: int
    mine: bool


@dataclass(frozen=True, slots=True)
class FleetView:
    """The fleet as ``member`` sees it."""

    member: str
    members: tuple[MemberView, ...]
    shards: tuple[ShardView, ...]


@runtime_checkable
class FleetViews(Protocol):
    """What says the fleet: a member's leases (PgLeases)."""

    def fleet_view(self) -> FleetView: ...


def fleet_wire(view: FleetView) -> dict[str, Any]:
    """``Status``'s ``fleet`` (docs/socket-api.md, "Status")."""
    return {
        "member": view.member,
        "members": [
            {
                "member": m.member,
                "host": m.host,
                "state": m.state,
                "shards": m.shards,
                "heartbeatAgeSeconds": round(m.heartbeat_age_s, 3),
                "mine": m.member == view.member,
            }
            for m in view.members
        ],
        "shards": [
            {"shard": s.shard, "owner": s.owner, "epoch": s.epoch, "mine": s.mine} for s in view.shards
        ],
    }


async def read_fleet_view(conn: Conn, member: str) -> FleetView:
    """The fleet as ``member`` sees it, read from the tables (one transaction of the caller's)."""
    async with conn.cursor() as cur:
        await cur.execute(_MEMBERS_SQL)
        members = tuple(
            MemberView(str(r[0]), str(r[1]), str(r[2]), int(r[5]), max(0.0, float(r[4]) - float(r[3])))
            for r in await cur.fetchall()
        )
        await cur.execute(_SHARDS_SQL)
        shards = []
        for shard, owner, epoch, valid in await cur.fetchall():
            held = owner if valid else None
            shards.append(ShardView(int(shard), held, int(epoch), held is not None and held == member))
    return FleetView(member, members, tuple(shards))
