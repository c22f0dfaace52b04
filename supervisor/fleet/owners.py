"""Who owns a shard, as the fleet's lease table says: the one short query behind ``NotOwner``.

A member answers a verb on a session it does not own with ``NotOwner {owner, host, shard, epoch}``
(docs/socket-api.md, "NotOwner"): the member holding the shard's lease, the host that member tells
clients to reach it on (``[fleet] host``), and the shard's owner epoch. Read in one statement from
``shard_leases`` joined with ``fleet_members`` (docs/store.md, "The fleet"), on the database's clock: a
lease whose ``expires_at`` has passed is nobody's (``owner`` null: a takeover is under way), while its
epoch is still said (the next owner's will be higher).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, TypeAlias

if TYPE_CHECKING:
    from psycopg import AsyncConnection

__all__ = ["OWNER_SQL", "ShardOwner", "shard_owner"]

Conn: TypeAlias = "AsyncConnection[tuple[Any, ...]]"

OWNER_SQL: Final = (
    "SELECT l.owner, m.host, l.epoch, l.expires_at > extract(epoch from clock_timestamp()) "
    "FROM shard_leases l LEFT JOIN fleet_members m ON m.member = l.owner WHERE l.shard = %s"
)


@dataclass(frozen=True, slots=True)
class ShardOwner:
    """A shard's lease as the table says now: its holder (None: free, or expired), the holder's host,
    the owner epoch."""

    shard: int
    owner: str | None
    host: str | None
    epoch: int


async def shard_owner(conn: Conn, shard: int) -> ShardOwner:
    """``shard``'s owner (module docstring), in the caller's transaction."""
    async with conn.cursor() as cur:
        await cur.execute(OWNER_SQL, (shard,))
        row = await cur.fetchone()
    if row is None:  # the 256 rows are there from the migration on: a table without is not a fleet's
        return ShardOwner(shard, None, None, 0)
    owner, host, epoch, valid = row
    if not valid:
        return ShardOwner(shard, None, None, int(epoch))
    return ShardOwner(shard, str(owner), None if host is None else str(host), int(epoch))
