"""The bodies of the desired sessions' and the session ledger's transactions, for both stores.

Each function is one call of the :class:`~supervisor.store.model.Store` protocol, written once
against :mod:`supervisor.store.sql` (it yields its statements; SQLite's and PostgreSQL's drivers run
them in the transaction the store opened for the call). The owner's own writes (the session ledger,
the owner's desired state) start with the lease fence (:func:`~supervisor.store.sql.fence`) of the
session's shard and stamp its epoch; ``add_sessions`` and ``forget_desired`` are commands any member
may carry out (AddSession, RemoveSession, a configuration reload), not fenced.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any, TypeVar

from supervisor.store.model import (
    DesiredSession,
    DesiredState,
    LeftSession,
    OpenedSession,
    ServerSession,
    ServerState,
)
from supervisor.store.shards import shard_of
from supervisor.store.sql import Body, Tx, do, fence, many, rows

__all__ = [
    "add_sessions",
    "desired_sessions",
    "forget_desired",
    "server_sessions",
    "session_closed",
    "session_left",
    "session_opened",
    "session_opening",
    "sessions_left",
    "sessions_opening",
    "set_desired",
]


def desired_sessions(tx: Tx, shards: Collection[int] | None = None) -> Body[dict[str, DesiredSession]]:
    """The desired sessions of ``shards`` (None: every shard), in the order they were added (sessions
    added over the control socket come back in that order)."""
    where, parameters = tx.dialect.shard_filter(shards)
    found = yield from rows(
        "SELECT session_id, platform, state, reason, updated_at, origin, spec FROM desired_sessions"
        f"{where} ORDER BY {tx.dialect.insertion_order}",
        parameters,
    )
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
        for r in found
    }


_SET_DESIRED = (
    "INSERT INTO desired_sessions (session_id, platform, state, reason, updated_at, shard) "
    "VALUES (?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (session_id) DO UPDATE SET platform = excluded.platform, state = excluded.state, "
    "reason = excluded.reason, updated_at = excluded.updated_at"
)


def _desired_row(desired: DesiredSession) -> tuple[Any, ...]:
    return (
        desired.session_id,
        desired.platform,
        desired.state.value,
        desired.reason,
        desired.updated_at,
        shard_of(desired.session_id),
    )


def set_desired(tx: Tx, desired: DesiredSession, *, fenced: bool = True) -> Body[None]:
    """The session's desired state: the owner's (fenced), or a command's (``ctl start``/``stop``,
    ``fenced`` False: any member may carry it out)."""
    if fenced:
        yield from fence(tx, [shard_of(desired.session_id)])
    yield from do(_SET_DESIRED, _desired_row(desired))


def add_sessions(tx: Tx, added: Sequence[DesiredSession]) -> Body[None]:
    """Sessions added over the control socket: their row with origin and spec, in one transaction
    (a row an earlier session of the same id left is replaced)."""
    yield from many(
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


def forget_desired(tx: Tx, session_id: str) -> Body[None]:
    yield from do("DELETE FROM desired_sessions WHERE session_id = ?", (session_id,))


_SERVER_COLUMNS = (
    "session_id, platform, kind, state, opened_at, agent_id, conversation_id, platform_session_id, "
    "guest_token, closed_at, outcome"
)


def server_sessions(
    tx: Tx, shards: Collection[int] | None = None, *, left_at: bool = True
) -> Body[dict[str, ServerSession]]:
    """The session ledger's rows of ``shards`` (None: every shard); ``left_at`` False reads a SQLite
    file of schema version 1 (no such column, and no shard either: read whole)."""
    columns = _SERVER_COLUMNS + (", left_at" if left_at else ", NULL")
    where, parameters = tx.dialect.shard_filter(shards if left_at else None)
    found = yield from rows(f"SELECT {columns} FROM server_sessions{where}", parameters)
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
        for r in found
    }


_SESSION_OPENING = (
    f"INSERT INTO server_sessions ({_SERVER_COLUMNS}, shard, epoch) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, NULL, ?, ?) "
    "ON CONFLICT (session_id) DO UPDATE SET platform = excluded.platform, kind = excluded.kind, "
    "state = excluded.state, opened_at = excluded.opened_at, agent_id = excluded.agent_id, "
    "conversation_id = COALESCE(excluded.conversation_id, server_sessions.conversation_id), "
    "platform_session_id = COALESCE(excluded.platform_session_id, server_sessions.platform_session_id), "
    "guest_token = excluded.guest_token, closed_at = NULL, outcome = NULL, left_at = NULL, "
    "epoch = excluded.epoch"
)


def _opening_row(session: ServerSession, epoch: int | None) -> tuple[Any, ...]:
    return (
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
        epoch,
    )


def session_opening(tx: Tx, session: ServerSession) -> Body[None]:
    """A session's server side is about to be opened: its row, before the first connection attempt
    (``opening``; ``open`` when it resumes a server session known to be open).

    A resumed session keeps what it had (a guest token is replaced only by a new one; a CXone
    anchor only by a new one): a crash between this write and the connection leaves what a
    restart needs to take the server session over, or to end it.
    """
    shard = shard_of(session.session_id)
    epochs = yield from fence(tx, [shard])
    yield from do(_SESSION_OPENING, _opening_row(session, epochs[shard]))


def sessions_opening(
    tx: Tx, desired: Sequence[DesiredSession], sessions: Sequence[ServerSession]
) -> Body[None]:
    """Several sessions about to open, in one transaction: each one's desired row (the owner's) and
    its server row (:func:`session_opening`), their shards fenced once each. What a fleet member
    writes ahead of the sessions of the shards it just acquired, which start together."""
    shards = {shard_of(d.session_id) for d in desired} | {shard_of(s.session_id) for s in sessions}
    epochs = yield from fence(tx, shards)
    if desired:
        yield from many(_SET_DESIRED, [_desired_row(d) for d in desired])
    if sessions:
        yield from many(_SESSION_OPENING, [_opening_row(s, epochs[shard_of(s.session_id)]) for s in sessions])


_OPENED_SQL = (
    "UPDATE server_sessions SET state = ?, "
    "conversation_id = COALESCE(?, conversation_id), "
    "platform_session_id = COALESCE(?, platform_session_id), epoch = ? "
    "WHERE session_id = ? AND state != ?"
)


def session_opened(
    tx: Tx, session_id: str, conversation_id: str | None, platform_session_id: str | None
) -> Body[None]:
    epoch = yield from _fence_session(tx, session_id)
    yield from do(
        _OPENED_SQL,
        (
            ServerState.OPEN.value,
            conversation_id,
            platform_session_id,
            epoch,
            session_id,
            ServerState.CLOSED.value,
        ),
    )


def sessions_opened(tx: Tx, opened: Sequence[OpenedSession]) -> Body[None]:
    """:func:`session_opened` for each of ``opened`` in this one transaction: each shard fenced once (a
    shard no longer held refuses the whole write: LeaseLost names it), one UPDATE per session. A
    takeover's sessions go active together; written one transaction each, they held a fleet member's one
    store connection for a second and more, and the write-ahead of the sessions still to start waited
    behind them (docs/runtime.md, "Shards and leases")."""
    yield from _fenced_rows(
        tx,
        _OPENED_SQL,
        opened,
        lambda one, epoch: (
            ServerState.OPEN.value,
            one.conversation_id,
            one.platform_session_id,
            epoch,
            one.session_id,
            ServerState.CLOSED.value,
        ),
    )


def session_closed(tx: Tx, session_id: str, outcome: str, closed_at: float) -> Body[None]:
    """The server session is over: the resume credential is wiped (seed section 3: revoke local storage)."""
    epoch = yield from _fence_session(tx, session_id)
    yield from do(
        "UPDATE server_sessions SET state = ?, guest_token = NULL, closed_at = ?, outcome = ?, epoch = ? "
        "WHERE session_id = ?",
        (ServerState.CLOSED.value, closed_at, outcome, epoch, session_id),
    )


#: a handed-over session's row: left at, its rolling id when known, the epoch; a closed row stays closed
_LEFT_SQL = (
    "UPDATE server_sessions SET left_at = ?, "
    "platform_session_id = COALESCE(?, platform_session_id), epoch = ? "
    "WHERE session_id = ? AND state != ?"
)


def session_left(tx: Tx, session_id: str, left_at: float, platform_session_id: str | None) -> Body[None]:
    """A stop handed the session over: still open on the platform, with what the next start polls
    (CXone's rolling sessionId, kept over the anchor when known) and when it was left."""
    epoch = yield from _fence_session(tx, session_id)
    yield from do(_LEFT_SQL, (left_at, platform_session_id, epoch, session_id, ServerState.CLOSED.value))


def sessions_left(tx: Tx, left: Sequence[LeftSession]) -> Body[None]:
    """:func:`session_left` for each of ``left`` in this one transaction: each shard fenced once (a shard
    no longer held refuses the whole write: LeaseLost names it), one UPDATE per session. A drain hands
    hundreds of sessions over at once; written one by one they queued on the store's one connection for
    most of a second before the shards could be freed for the peers (docs/runtime.md, "a stop")."""
    yield from _fenced_rows(
        tx,
        _LEFT_SQL,
        left,
        lambda one, epoch: (
            one.left_at,
            one.platform_session_id,
            epoch,
            one.session_id,
            ServerState.CLOSED.value,
        ),
    )


_Row = TypeVar("_Row", OpenedSession, LeftSession)


def _fenced_rows(
    tx: Tx, sql: str, items: Sequence[_Row], params: Callable[[_Row, int | None], tuple[object, ...]]
) -> Body[None]:
    """``sql`` once per one of ``items`` (``params`` of it and its shard's epoch), every shard they are
    of fenced once first, in this one transaction; nothing for no items."""
    if not items:
        return
    epochs = yield from fence(tx, {shard_of(item.session_id) for item in items})
    yield from many(sql, [params(item, epochs[shard_of(item.session_id)]) for item in items])


def _fence_session(tx: Tx, session_id: str) -> Body[int | None]:
    """The fence of the session's shard; the epoch its ledger row carries."""
    shard = shard_of(session_id)
    epochs = yield from fence(tx, [shard])
    return epochs[shard]
