"""SQL of the desired sessions and the session ledger (runs in the store's writer, inside its transaction)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Collection

from supervisor.store.model import DesiredSession, DesiredState, ServerSession, ServerState
from supervisor.store.shards import every_shard, shard_of

__all__ = [
    "add_sessions",
    "desired_sessions",
    "forget_desired",
    "server_sessions",
    "session_closed",
    "session_left",
    "session_opened",
    "session_opening",
    "set_desired",
    "shard_filter",
]


def shard_filter(shards: Collection[int] | None, *, where: bool = True) -> tuple[str, tuple[str, ...]]:
    """The SQL condition (and its parameter) reading only rows of ``shards``; none for every shard
    (None, or all 256: the one host's reads stay the plain scans they were)."""
    if shards is None or every_shard(shards):
        return "", ()
    keyword = "WHERE" if where else "AND"
    # one parameter whatever the count: the shards as a JSON array (https://sqlite.org/json1.html#jeach)
    return f" {keyword} shard IN (SELECT value FROM json_each(?))", (json.dumps(sorted(set(shards))),)


def desired_sessions(
    conn: sqlite3.Connection, shards: Collection[int] | None = None
) -> dict[str, DesiredSession]:
    """The desired sessions of ``shards`` (None: every shard)."""
    where, parameters = shard_filter(shards)
    # rowid order: sessions added over the control socket come back in the order they were added
    rows = conn.execute(
        "SELECT session_id, platform, state, reason, updated_at, origin, spec FROM desired_sessions"
        f"{where} ORDER BY rowid",
        parameters,
    ).fetchall()
    return {
        r[0]: DesiredSession(
            session_id=r[0],
            platform=r[1],
            state=DesiredState(r[2]),
            reason=r[3],
            updated_at=r[4],
            origin=r[5],
            spec=r[6],
        )
        for r in rows
    }


def set_desired(conn: sqlite3.Connection, desired: DesiredSession) -> None:
    conn.execute(
        "INSERT INTO desired_sessions (session_id, platform, state, reason, updated_at, shard) "
        "VALUES (?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (session_id) DO UPDATE SET platform = excluded.platform, state = excluded.state, "
        "reason = excluded.reason, updated_at = excluded.updated_at",
        (
            desired.session_id,
            desired.platform,
            desired.state.value,
            desired.reason,
            desired.updated_at,
            shard_of(desired.session_id),
        ),
    )


def add_sessions(conn: sqlite3.Connection, added: list[DesiredSession]) -> None:
    """Sessions added over the control socket: their row with origin and spec, in one transaction
    (a row an earlier session of the same id left is replaced)."""
    conn.executemany(
        "INSERT INTO desired_sessions (session_id, platform, state, reason, updated_at, origin, spec, shard) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (session_id) DO UPDATE SET platform = excluded.platform, state = excluded.state, "
        "reason = excluded.reason, updated_at = excluded.updated_at, origin = excluded.origin, spec = excluded.spec",
        [
            (
                d.session_id,
                d.platform,
                d.state.value,
                d.reason,
                d.updated_at,
                d.origin,
                d.spec,
                shard_of(d.session_id),
            )
            for d in added
        ],
    )


def forget_desired(conn: sqlite3.Connection, session_id: str) -> None:
    conn.execute("DELETE FROM desired_sessions WHERE session_id = ?", (session_id,))


_SERVER_COLUMNS = (
    "session_id, platform, kind, state, opened_at, agent_id, conversation_id, platform_session_id, "
    "guest_token, closed_at, outcome"
)


def server_sessions(
    conn: sqlite3.Connection, shards: Collection[int] | None = None, *, left_at: bool = True
) -> dict[str, ServerSession]:
    """The session ledger's rows of ``shards`` (None: every shard); ``left_at`` False reads a file of
    schema version 1 (no such column, and no shard either: read whole)."""
    columns = _SERVER_COLUMNS + (", left_at" if left_at else ", NULL")
    where, parameters = shard_filter(shards if left_at else None)
    rows = conn.execute(f"SELECT {columns} FROM server_sessions{where}", parameters).fetchall()
    return {
        r[0]: ServerSession(
            session_id=r[0],
            platform=r[1],
            kind=r[2],
            state=ServerState(r[3]),
            opened_at=r[4],
            agent_id=r[5],
            conversation_id=r[6],
            platform_session_id=r[7],
            guest_token=r[8],
            closed_at=r[9],
            outcome=r[10],
            left_at=r[11],
        )
        for r in rows
    }


def session_opening(conn: sqlite3.Connection, session: ServerSession) -> None:
    """A session's server side is about to be opened: its row, before the first connection attempt
    (``opening``; ``open`` when it resumes a server session known to be open).

    A resumed session keeps what it had (a guest token is replaced only by a new one; a CXone
    anchor only by a new one): a crash between this write and the connection leaves what a
    restart needs to take the server session over, or to end it.
    """
    conn.execute(
        f"INSERT INTO server_sessions ({_SERVER_COLUMNS}, shard) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, NULL, ?) "
        "ON CONFLICT (session_id) DO UPDATE SET platform = excluded.platform, kind = excluded.kind, "
        "state = excluded.state, opened_at = excluded.opened_at, agent_id = excluded.agent_id, "
        "conversation_id = COALESCE(excluded.conversation_id, server_sessions.conversation_id), "
        "platform_session_id = COALESCE(excluded.platform_session_id, server_sessions.platform_session_id), "
        "guest_token = excluded.guest_token, closed_at = NULL, outcome = NULL, left_at = NULL",
        (
            session.session_id,
            session.platform,
            session.kind,
            session.state.value,
            session.opened_at,
            session.agent_id,
            session.conversation_id,
            session.platform_session_id,
            session.guest_token,
            shard_of(session.session_id),
        ),
    )


def session_opened(
    conn: sqlite3.Connection, session_id: str, conversation_id: str | None, platform_session_id: str | None
) -> None:
    conn.execute(
        "UPDATE server_sessions SET state = ?, "
        "conversation_id = COALESCE(?, conversation_id), "
        "platform_session_id = COALESCE(?, platform_session_id) "
        "WHERE session_id = ? AND state != ?",
        (ServerState.OPEN.value, conversation_id, platform_session_id, session_id, ServerState.CLOSED.value),
    )


def session_closed(conn: sqlite3.Connection, session_id: str, outcome: str, closed_at: float) -> None:
    """The server session is over: the resume credential is wiped (seed section 3: revoke local storage)."""
    conn.execute(
        "UPDATE server_sessions SET state = ?, guest_token = NULL, closed_at = ?, outcome = ? "
        "WHERE session_id = ?",
        (ServerState.CLOSED.value, closed_at, outcome, session_id),
    )


def session_left(
    conn: sqlite3.Connection, session_id: str, left_at: float, platform_session_id: str | None
) -> None:
    """A stop handed the session over: still open on the platform, with what the next start polls
    (CXone's rolling sessionId, kept over the anchor when known) and when it was left."""
    conn.execute(
        "UPDATE server_sessions SET left_at = ?, "
        "platform_session_id = COALESCE(?, platform_session_id) "
        "WHERE session_id = ? AND state != ?",
        (left_at, platform_session_id, session_id, ServerState.CLOSED.value),
    )
