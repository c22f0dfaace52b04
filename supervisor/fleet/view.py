"""The fleet as ``ctl status`` shows it: its members and who holds each shard, at which epoch.

:class:`FleetView` is what a fleet member's leases answer (``fleet_view()``: the tables as the member's
last renewal read them, ``at`` the database's clock then: supervisor/fleet/shares.py); :func:`fleet_wire`
is its shape in the control socket's ``Status`` (docs/socket-api.md, "A fleet"); :func:`read_fleet_view`
reads it from the tables (``fleet_members``, ``shard_leases``: docs/store.md, "The fleet") in one
transaction, on the database's clock.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, Protocol, TypeAlias, runtime_checkable

# one definition of the view: PgLeases' (its pure part), which this module renders and reads
from supervisor.fleet.shares import FleetView, MemberView, ShardView

if TYPE_CHECKING:
    # the postgres extra's: a member has it; ``ctl status`` and a one-host daemon import this module without
    from psycopg import AsyncConnection

__all__ = ["FleetView", "FleetViews", "MemberView", "ShardView", "fleet_wire", "read_fleet_view"]

Conn: TypeAlias = "AsyncConnection[tuple[Any, ...]]"

# the database's clock (every lease time is the server's, never a member's)
_NOW: Final = "extract(epoch from clock_timestamp())"
_MEMBERS_SQL: Final = (
    "SELECT m.member, m.host, m.state, m.heartbeat_at, "
    f"(SELECT count(*) FROM shard_leases l WHERE l.owner = m.member AND l.expires_at > {_NOW}) "
    "FROM fleet_members m ORDER BY m.member"
)
_SHARDS_SQL: Final = f"SELECT shard, owner, epoch, expires_at > {_NOW} FROM shard_leases ORDER BY shard"


@runtime_checkable
class FleetViews(Protocol):
    """What says the fleet: a member's leases (PgLeases)."""

    def fleet_view(self) -> FleetView: ...


def fleet_wire(view: FleetView) -> dict[str, Any]:
    """``Status``'s ``fleet`` (docs/socket-api.md, "A fleet")."""
    at = view.at
    return {
        "member": view.member,
        "problem": view.problem,
        "members": [
            {
                "member": m.member,
                "host": m.host,
                "state": m.state,
                "live": m.live,
                "shards": m.shards,
                "heartbeatAgeSeconds": None if at is None else round(max(0.0, at - m.heartbeat_at), 3),
                "mine": m.member == view.member,
            }
            for m in view.members
        ],
        "shards": [
            {"shard": s.shard, "owner": s.owner, "epoch": s.epoch, "mine": s.mine} for s in view.shards
        ],
    }


async def read_fleet_view(conn: Conn, member: str, ttl: float = 10.0) -> FleetView:
    """The fleet as ``member`` sees it, read from the tables (one transaction of the caller's); a
    member is live when its heartbeat is within ``ttl`` seconds and it is not leaving."""
    async with conn.cursor() as cur:
        await cur.execute(_MEMBERS_SQL)
        rows = await cur.fetchall()
        await cur.execute(_SHARDS_SQL)
        leases = await cur.fetchall()
        await cur.execute(f"SELECT {_NOW}")
        now_row = await cur.fetchone()
    now = float(now_row[0]) if now_row is not None else 0.0
    members = tuple(
        MemberView(
            str(r[0]),
            str(r[1]),
            str(r[2]),
            r[2] != "leaving" and float(r[3]) > now - ttl,
            int(r[4]),
            float(r[3]),
        )
        for r in rows
    )
    shards = []
    for shard, owner, epoch, valid in leases:
        held = owner if valid else None
        shards.append(ShardView(int(shard), held, int(epoch), held is not None and held == member))
    return FleetView(member, now, members, tuple(shards))
