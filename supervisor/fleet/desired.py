"""The desired state of a session another member owns: written for it, and its owner told.

``ctl start``, ``ctl stop``, ``AddSession`` and ``RemoveSession`` are accepted by any member of a fleet
(docs/socket-api.md, "A fleet"): for a session whose shard is not owned here, the member writes the
session's desired row (``desired_sessions``, the store's own statements, unfenced: a command is not
the owner's own state) and ``pg_notify('ss_desired', …)`` **in the same transaction**. PostgreSQL
delivers a notification when its transaction commits and not at all when it rolls back (PostgreSQL
docs, "NOTIFY": "if a NOTIFY is executed inside a transaction, the notify events are not delivered
until and unless the transaction is committed"), so the owner is never told of a write that did not
happen, and the caller is answered once the write is durable (the commit returned). The owner re-reads
the row and acts on it (:mod:`supervisor.fleet.follow`); a notice lost (the owner's LISTEN connection
was down) is made up for when its bus listens again (the owner re-reads every row of its shards) and at
the next acquisition of the shard, which reads the rows anyway.

Accepted attribute updates are already a store write (the outbox); the owner is told on
``ss_attributes`` so it schedules the send at once (:meth:`FleetDesk.attributes_submitted`).

Every payload is JSON carrying ``member`` (the sender: a member ignores its own notices), well under
PostgreSQL's 8000-byte limit (session ids are at most 200 characters).
"""

from __future__ import annotations

import enum
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeAlias, TypeVar, runtime_checkable

from supervisor.fleet.owners import ShardOwner, shard_owner
from supervisor.store.model import DesiredSession, DesiredState
from supervisor.store.shards import shard_of

if TYPE_CHECKING:
    from psycopg import AsyncConnection

__all__ = [
    "ATTRIBUTES_CHANNEL",
    "DESIRED_CHANNEL",
    "REQUESTED",
    "Change",
    "FleetDesk",
    "Forwarded",
    "Transactions",
]

Conn: TypeAlias = "AsyncConnection[tuple[Any, ...]]"
T = TypeVar("T")

#: the desired row of a session changed: its owner re-reads it
DESIRED_CHANNEL: Final = "ss_desired"
#: an attribute update of a session was accepted elsewhere: its owner schedules the send
ATTRIBUTES_CHANNEL: Final = "ss_attributes"
#: what a verb accepted for another member's session answers as its ``state``: recorded for the owner
REQUESTED: Final = "requested"


class Change(enum.StrEnum):
    """What a notice on ``ss_desired`` says was asked (the owner re-reads the row whatever it says)."""

    START = "start"
    STOP = "stop"
    ADD = "add"
    REMOVE = "remove"


@runtime_checkable
class Transactions(Protocol):
    """One transaction on the store's connection (PgStore.run_in_transaction)."""

    async def run_in_transaction(self, fn: Callable[[Conn], Awaitable[T]]) -> T: ...


@dataclass(frozen=True, slots=True)
class Forwarded:
    """A command written for a session's owner: who owns it now (as the same transaction read it),
    and what its desired row said before (None: there was none)."""

    owner: ShardOwner
    previous: DesiredSession | None

    def as_wire(self) -> dict[str, Any]:
        o = self.owner
        return {"owner": o.owner, "host": o.host, "shard": o.shard, "epoch": o.epoch}


_ROW_SQL: Final = (
    "SELECT session_id, platform, state, reason, updated_at, origin, spec FROM desired_sessions "
    "WHERE session_id = %s FOR UPDATE"
)


async def _row(conn: Conn, session_id: str) -> DesiredSession | None:
    # FOR UPDATE: two members writing one session's row take turns (the second reads the first's)
    async with conn.cursor() as cur:
        await cur.execute(_ROW_SQL, (session_id,))
        r = await cur.fetchone()
    if r is None:
        return None
    return DesiredSession(r[0], r[1], DesiredState(r[2]), r[3], r[4], origin=r[5], spec=r[6])


class FleetDesk:
    """A member's commands for sessions other members own (module docstring)."""

    def __init__(self, store: Transactions, member: str, clock: Callable[[], float]) -> None:
        self._store = store
        self.member = member
        self._clock = clock

    def _payload(self, session_id: str, **more: Any) -> str:
        return json.dumps(
            {"member": self.member, "sessionId": session_id, "shard": shard_of(session_id), **more},
            separators=(",", ":"),
        )

    async def _notify(self, conn: Conn, channel: str, payload: str) -> None:
        # the bus's statement, in this transaction: delivered at its commit, never for a rollback
        from supervisor.fleet.bus import NOTIFY_SQL, check_payload

        await conn.execute(NOTIFY_SQL, (channel, check_payload(channel, payload)))

    async def locate(self, session_id: str) -> ShardOwner:
        """Who owns ``session_id``'s shard now (one short query)."""
        shard = shard_of(session_id)
        return await self._store.run_in_transaction(lambda conn: shard_owner(conn, shard))

    async def row(self, session_id: str) -> DesiredSession | None:
        """The session's desired row as the store holds it (None: none)."""
        return await self._store.run_in_transaction(lambda conn: _row(conn, session_id))

    async def desire(
        self, session_id: str, platform: str | None, state: DesiredState, reason: str | None
    ) -> Forwarded | None:
        """``ctl start`` / ``ctl stop`` of a session owned elsewhere: its row set to ``state`` and its
        owner told, in one transaction. ``platform`` None: the row's own (a session added over a
        control socket, unknown to this member's configuration); None when there is no such row."""
        from supervisor.store import pg_sql

        change = Change.START if state is DesiredState.RUNNING else Change.STOP

        async def write(conn: Conn) -> Forwarded | None:
            owner = await shard_owner(conn, shard_of(session_id))
            previous = await _row(conn, session_id)
            scope = platform if platform is not None else None if previous is None else previous.platform
            if scope is None:
                return None
            desired = DesiredSession(session_id, scope, state, reason, self._clock())
            await pg_sql.set_desired(conn, desired)
            await self._notify(conn, DESIRED_CHANNEL, self._payload(session_id, change=change.value))
            return Forwarded(owner, previous)

        return await self._store.run_in_transaction(write)

    async def add(self, rows: Sequence[DesiredSession]) -> list[Forwarded | None]:
        """``AddSession`` entries whose shards are owned elsewhere: kept (origin ``api``, as the owner
        keeps its own) and each owner told, in one transaction; None for an entry whose id has a row
        already (added elsewhere first: nothing written for it)."""
        from supervisor.store import pg_sql

        stamped = [replace(row, updated_at=self._clock()) for row in rows]

        async def write(conn: Conn) -> list[Forwarded | None]:
            out: list[Forwarded | None] = []
            new = []
            for row in stamped:
                if await _row(conn, row.session_id) is not None:
                    out.append(None)
                    continue
                out.append(Forwarded(await shard_owner(conn, shard_of(row.session_id)), None))
                new.append(row)
            if new:
                await pg_sql.add_sessions(conn, new)
            for row in new:
                payload = self._payload(row.session_id, change=Change.ADD.value)
                await self._notify(conn, DESIRED_CHANNEL, payload)
            return out

        return await self._store.run_in_transaction(write)

    async def remove(self, session_id: str) -> Forwarded | None:
        """``RemoveSession`` of a session owned elsewhere: its row forgotten and its owner told, in one
        transaction; None (nothing written) unless the row is one added over a control socket."""
        from supervisor.store import pg_sql

        async def write(conn: Conn) -> Forwarded | None:
            previous = await _row(conn, session_id)
            if previous is None or previous.origin != "api":
                return None  # a session of a configuration file is removed by editing the file
            owner = await shard_owner(conn, shard_of(session_id))
            await pg_sql.forget_desired(conn, session_id)
            await self._notify(conn, DESIRED_CHANNEL, self._payload(session_id, change=Change.REMOVE.value))
            return Forwarded(owner, previous)

        return await self._store.run_in_transaction(write)

    async def conversation_of(self, session_id: str) -> str | None:
        """The conversation the session ledger holds for ``session_id`` (its owner wrote it), or None."""

        async def read(conn: Conn) -> str | None:
            async with conn.cursor() as cur:
                await cur.execute(
                    "SELECT conversation_id FROM server_sessions WHERE session_id = %s", (session_id,)
                )
                row = await cur.fetchone()
            return None if row is None or row[0] is None else str(row[0])

        return await self._store.run_in_transaction(read)

    async def attributes_submitted(self, session_id: str, tenant: str, conversation_id: str) -> None:
        """An attribute update of ``session_id`` was accepted here (committed to the outbox): its owner
        is told on ``ss_attributes`` to schedule the send."""
        payload = self._payload(session_id, tenant=tenant, conversationId=conversation_id)

        async def notify(conn: Conn) -> None:
            await self._notify(conn, ATTRIBUTES_CHANNEL, payload)

        await self._store.run_in_transaction(notify)
