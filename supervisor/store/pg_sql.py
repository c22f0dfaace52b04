"""The store's SQL in PostgreSQL's dialect (runs inside :class:`~supervisor.store.pg.PgStore`'s transaction).

Each function does what its namesake in ``sql_sessions.py`` / ``sql_outbox.py`` does, statement for
statement (the store tests run both on the same cases); only the dialect differs: ``%s``
placeholders, ``RETURNING id`` for SQLite's ``lastrowid``, ``= ANY(%s)`` for an ``IN`` list,
``ON CONFLICT DO NOTHING`` for ``INSERT OR IGNORE``, ``GREATEST`` for the two-argument ``MAX``,
``shard = ANY(%s)`` for SQLite's ``json_each`` list of shards, and the ``added`` column for SQLite's
rowid order. The shard every write stores is ``shard_of``'s, computed here as in SQLite's writes.
The decisions (coalescing, superseding, the outcomes) are shared: :func:`~supervisor.store.sql_outbox.outcome_of` and the row mappers are SQLite's own.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from typing import Any

from psycopg import AsyncConnection

from supervisor.store.model import (
    QUEUED,
    Claim,
    DesiredSession,
    DesiredState,
    LedgerChange,
    LedgerEntry,
    Mismatch,
    NewMismatch,
    OutboxRow,
    Resolution,
    ResolveRefused,
    RowChange,
    RowStatus,
    ServerSession,
    ServerState,
    Submission,
    SubmitResult,
    UpdateOutcome,
    payload_hash,
    value_hash,
)
from supervisor.store.shards import every_shard, shard_of
from supervisor.store.sql_outbox import WIPED, entry_of, mismatch_of, outcome_of, row_of

Conn = AsyncConnection[tuple[Any, ...]]

_QUEUED = [s.value for s in QUEUED]
_LIVE = ["pending", "sending", "accepted"]


async def _one(conn: Conn, query: bytes | str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
    cur = await conn.execute(query.encode() if isinstance(query, str) else query, params)
    return await cur.fetchone()


async def _all(conn: Conn, query: bytes | str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    cur = await conn.execute(query.encode() if isinstance(query, str) else query, params)
    return await cur.fetchall()


async def _do(conn: Conn, query: bytes | str, params: Sequence[Any] = ()) -> None:
    await conn.execute(query.encode() if isinstance(query, str) else query, params)


def shard_filter(shards: Collection[int] | None, *, where: bool = True) -> tuple[str, tuple[Any, ...]]:
    """As ``sql_sessions.shard_filter``: the condition reading only rows of ``shards``, none for every
    shard (None, or all of them)."""
    if shards is None or every_shard(shards):
        return "", ()
    keyword = "WHERE" if where else "AND"
    return f" {keyword} shard = ANY(%s)", (sorted(set(shards)),)


# -- desired sessions and the session ledger ------------------------------------------------------------


async def desired_sessions(conn: Conn, shards: Collection[int] | None = None) -> dict[str, DesiredSession]:
    """The desired sessions of ``shards`` (None: every shard), in the order they were added."""
    where, parameters = shard_filter(shards)
    rows = await _all(
        conn,
        "SELECT session_id, platform, state, reason, updated_at, origin, spec FROM desired_sessions"
        f"{where} ORDER BY added",
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
        for r in rows
    }


async def set_desired(conn: Conn, desired: DesiredSession) -> None:
    await _do(
        conn,
        "INSERT INTO desired_sessions (session_id, platform, state, reason, updated_at, shard) "
        "VALUES (%s, %s, %s, %s, %s, %s) "
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


async def add_sessions(conn: Conn, added: Sequence[DesiredSession]) -> None:
    async with conn.cursor() as cur:
        await cur.executemany(
            b"INSERT INTO desired_sessions (session_id, platform, state, reason, updated_at, origin, spec, "
            b"shard) VALUES (%s, %s, %s, %s, %s, %s, %s, %s) "
            b"ON CONFLICT (session_id) DO UPDATE SET platform = excluded.platform, state = excluded.state, "
            b"reason = excluded.reason, updated_at = excluded.updated_at, origin = excluded.origin, "
            b"spec = excluded.spec",
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


async def forget_desired(conn: Conn, session_id: str) -> None:
    await _do(conn, "DELETE FROM desired_sessions WHERE session_id = %s", (session_id,))


_SERVER_COLUMNS = (
    "session_id, platform, kind, state, opened_at, agent_id, conversation_id, platform_session_id, "
    "guest_token, closed_at, outcome"
)


async def server_sessions(conn: Conn, shards: Collection[int] | None = None) -> dict[str, ServerSession]:
    """The session ledger's rows of ``shards`` (None: every shard)."""
    where, parameters = shard_filter(shards)
    rows = await _all(conn, f"SELECT {_SERVER_COLUMNS}, left_at FROM server_sessions{where}", parameters)
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


async def session_opening(conn: Conn, session: ServerSession) -> None:
    """As ``sql_sessions.session_opening``: a resumed session keeps what it had."""
    await _do(
        conn,
        f"INSERT INTO server_sessions ({_SERVER_COLUMNS}, shard) "
        "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, NULL, NULL, %s) "
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


async def session_opened(
    conn: Conn, session_id: str, conversation_id: str | None, platform_session_id: str | None
) -> None:
    await _do(
        conn,
        "UPDATE server_sessions SET state = %s, conversation_id = COALESCE(%s, conversation_id), "
        "platform_session_id = COALESCE(%s, platform_session_id) WHERE session_id = %s AND state != %s",
        (ServerState.OPEN.value, conversation_id, platform_session_id, session_id, ServerState.CLOSED.value),
    )


async def session_closed(conn: Conn, session_id: str, outcome: str, closed_at: float) -> None:
    """The server session is over: the resume credential is wiped."""
    await _do(
        conn,
        "UPDATE server_sessions SET state = %s, guest_token = NULL, closed_at = %s, outcome = %s "
        "WHERE session_id = %s",
        (ServerState.CLOSED.value, closed_at, outcome, session_id),
    )


async def session_left(conn: Conn, session_id: str, left_at: float, platform_session_id: str | None) -> None:
    await _do(
        conn,
        "UPDATE server_sessions SET left_at = %s, platform_session_id = COALESCE(%s, platform_session_id) "
        "WHERE session_id = %s AND state != %s",
        (left_at, platform_session_id, session_id, ServerState.CLOSED.value),
    )


# -- outbox, ledger, mismatches ---------------------------------------------------------------------------

_ROW = (
    "id, tenant, session_id, conversation_id, attribute, value, sensitive, status, created_at, sends, "
    "repairs, not_before, before_hash, ledger_id, accepted_at"
)
_LEDGER = (
    "request_id, idempotency_key, tenant, conversation_id, participant_id, endpoint, payload_hash, "
    "attempts, sent_at, outcome, owner_epoch, answered_at, status, error_code"
)
_MISMATCH = (
    "m.id, m.row_id, o.tenant, o.session_id, o.conversation_id, o.attribute, o.sensitive, m.reason, m.flagged_at, "
    "o.value, m.server_value, m.resolved_at, m.resolution"
)


async def depth(conn: Conn, tenant: str) -> int:
    row = await _one(
        conn, "SELECT COUNT(*) FROM outbox WHERE tenant = %s AND status = ANY(%s)", (tenant, _QUEUED)
    )
    assert row is not None
    return int(row[0])


async def submit(conn: Conn, sub: Submission, max_depth: int) -> SubmitResult:
    """As ``sql_outbox.submit``: coalesce onto queued writes, refuse past ``max_depth`` writing nothing."""
    queued = await depth(conn, sub.tenant)
    plan: list[tuple[str, str, int | None]] = []
    for key, value in sub.attributes.items():
        found = await _one(
            conn,
            "SELECT id FROM outbox WHERE conversation_id = %s AND attribute = %s AND status = 'pending'",
            (sub.conversation_id, key),
        )
        plan.append((key, value, None if found is None else int(found[0])))
    new_rows = sum(1 for _, _, pending in plan if pending is None)
    if new_rows and queued + new_rows > max_depth:
        return SubmitResult(False, sub.update_id, (), queued)
    coalesced: list[str] = []
    # the session's shard; an update with no session takes its conversation's (docs/store.md, "Shards")
    shard = shard_of(sub.session_id if sub.session_id is not None else sub.conversation_id)
    await _do(
        conn,
        "INSERT INTO updates (update_id, tenant, session_id, conversation_id, submitted_at, keys, coalesced, "
        "shard) VALUES (%s, %s, %s, %s, %s, %s, 0, %s)",
        (sub.update_id, sub.tenant, sub.session_id, sub.conversation_id, sub.submitted_at, len(plan), shard),
    )
    for key, value, pending in plan:
        sensitive = int(key in sub.sensitive)
        if pending is not None:
            await _do(
                conn,
                "UPDATE outbox SET value = %s, sensitive = %s, session_id = %s, shard = %s WHERE id = %s",
                (value, sensitive, sub.session_id, shard, pending),
            )
            row_id = pending
            coalesced.append(key)
        else:
            inserted = await _one(
                conn,
                "INSERT INTO outbox (tenant, session_id, conversation_id, attribute, value, sensitive, status, "
                "created_at, shard) VALUES (%s, %s, %s, %s, %s, %s, 'pending', %s, %s) RETURNING id",
                (
                    sub.tenant,
                    sub.session_id,
                    sub.conversation_id,
                    key,
                    value,
                    sensitive,
                    sub.submitted_at,
                    shard,
                ),
            )
            assert inserted is not None
            row_id = int(inserted[0])
            await _supersede(conn, sub.conversation_id, key, row_id)
        await _do(
            conn,
            "INSERT INTO update_rows (update_id, row_id) VALUES (%s, %s) ON CONFLICT DO NOTHING",
            (sub.update_id, row_id),
        )
    if coalesced:
        await _do(
            conn, "UPDATE updates SET coalesced = %s WHERE update_id = %s", (len(coalesced), sub.update_id)
        )
    return SubmitResult(True, sub.update_id, tuple(coalesced), queued + new_rows)


async def _supersede(conn: Conn, conversation_id: str, attribute: str, newer: int) -> None:
    older = await _all(
        conn,
        "SELECT id FROM outbox WHERE conversation_id = %s AND attribute = %s AND status IN ('sending', 'accepted') "
        "AND id != %s",
        (conversation_id, attribute, newer),
    )
    for (old,) in older:
        await _do(conn, "UPDATE outbox SET status = 'superseded', value = NULL WHERE id = %s", (old,))
        await _do(
            conn,
            "INSERT INTO update_rows (update_id, row_id) SELECT update_id, %s FROM update_rows WHERE row_id = %s "
            "ON CONFLICT DO NOTHING",
            (newer, old),
        )


async def live_rows(conn: Conn, shards: Collection[int] | None = None) -> list[OutboxRow]:
    """The rows still in the daemon's hands, of ``shards`` (None: every shard)."""
    where, parameters = shard_filter(shards, where=False)
    rows = await _all(
        conn, f"SELECT {_ROW} FROM outbox WHERE status = ANY(%s){where} ORDER BY id", (_LIVE, *parameters)
    )
    return [row_of(r) for r in rows]


async def ledger(conn: Conn, request_ids: Sequence[int] | None) -> dict[int, LedgerEntry]:
    if request_ids is None:
        rows = await _all(conn, f"SELECT {_LEDGER} FROM ledger ORDER BY request_id")
    else:
        rows = await _all(
            conn,
            f"SELECT {_LEDGER} FROM ledger WHERE request_id = ANY(%s) ORDER BY request_id",
            (list(request_ids),),
        )
    return {int(r[0]): entry_of(r) for r in rows}


async def claim(
    conn: Conn,
    conversation_id: str,
    before: Mapping[str, str],
    *,
    idempotency_key: str,
    participant_id: str | None,
    endpoint: str,
    sent_at: float,
    limit: int,
    epoch: int,
    attempts: int = 1,
) -> Claim | None:
    """As ``sql_outbox.claim``: the ledger entry is written before the send leaves."""
    rows = [
        row_of(r)
        for r in await _all(
            conn,
            f"SELECT {_ROW} FROM outbox WHERE conversation_id = %s AND status = 'pending' "
            "AND (not_before IS NULL OR not_before <= %s) ORDER BY id LIMIT %s",
            (conversation_id, sent_at, limit),
        )
    ]
    later_row = await _one(
        conn,
        "SELECT MIN(not_before) FROM outbox WHERE conversation_id = %s AND status = 'pending' AND not_before > %s",
        (conversation_id, sent_at),
    )
    later = None if later_row is None or later_row[0] is None else float(later_row[0])
    if not rows:
        return None if later is None else Claim(None, (), later)
    payload = {row.attribute: row.value for row in rows}
    inserted = await _one(
        conn,
        "INSERT INTO ledger (idempotency_key, tenant, conversation_id, participant_id, endpoint, payload_hash, "
        "attempts, sent_at, outcome, owner_epoch) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, 'unknown', %s) "
        "RETURNING request_id",
        (
            idempotency_key,
            rows[0].tenant,
            conversation_id,
            participant_id,
            endpoint,
            payload_hash(payload),
            attempts,
            sent_at,
            epoch,
        ),
    )
    assert inserted is not None
    request_id = int(inserted[0])
    claimed: list[OutboxRow] = []
    for row in rows:
        hashed = before.get(row.attribute) or value_hash(row.attribute, None)
        await _do(
            conn,
            "UPDATE outbox SET status = 'sending', ledger_id = %s, sends = sends + 1, before_hash = %s, "
            "not_before = NULL WHERE id = %s",
            (request_id, hashed, row.id),
        )
        claimed.append(
            replace(
                row,
                status=RowStatus.SENDING,
                ledger_id=request_id,
                sends=row.sends + 1,
                before_hash=hashed,
                not_before=None,
            )
        )
    entry = (await ledger(conn, [request_id]))[request_id]
    return Claim(entry, tuple(claimed), later)


async def count_attempt(conn: Conn, request_id: int) -> int:
    row = await _one(
        conn,
        "UPDATE ledger SET attempts = attempts + 1 WHERE request_id = %s RETURNING attempts",
        (request_id,),
    )
    assert row is not None
    return int(row[0])


async def record(
    conn: Conn, rows: Sequence[RowChange], change: LedgerChange | None, found: Sequence[NewMismatch]
) -> list[int]:
    """As ``sql_outbox.record``: a send's or a verification's outcome; the new mismatches' ids."""
    for ch in rows:
        sets = ["status = %s"]
        params: list[Any] = [ch.status.value]
        if ch.status is RowStatus.PENDING or ch.not_before is not None:
            sets.append("not_before = %s")
            params.append(ch.not_before)
        if ch.accepted_at is not None:
            sets.append("accepted_at = %s")
            params.append(ch.accepted_at)
        if ch.repair:
            sets.append("repairs = repairs + 1")
        if ch.unsent:
            sets.append("sends = GREATEST(sends - 1, 0)")
        if ch.error is not None:
            sets.append("last_error = %s")
            params.append(ch.error)
        if ch.status in WIPED:
            sets.append("value = NULL")
        # the SET list is built from the fixed fragments above, never from input
        await _do(
            conn,
            f"UPDATE outbox SET {', '.join(sets)} WHERE id = %s AND status != 'superseded'",
            (*params, ch.row_id),
        )
    if change is not None:
        await _do(
            conn,
            "UPDATE ledger SET outcome = %s, answered_at = COALESCE(%s, answered_at), status = COALESCE(%s, status), "
            "error_code = COALESCE(%s, error_code) WHERE request_id = %s",
            (change.outcome.value, change.answered_at, change.status, change.error_code, change.request_id),
        )
    ids: list[int] = []
    for m in found:
        inserted = await _one(
            conn,
            "INSERT INTO mismatches (row_id, reason, server_value, flagged_at) VALUES (%s, %s, %s, %s) RETURNING id",
            (m.row_id, m.reason, m.server_value, m.flagged_at),
        )
        assert inserted is not None
        ids.append(int(inserted[0]))
    return ids


async def mismatches(conn: Conn, include_resolved: bool) -> list[Mismatch]:
    where = "" if include_resolved else "WHERE m.resolved_at IS NULL"
    rows = await _all(
        conn, f"SELECT {_MISMATCH} FROM mismatches m JOIN outbox o ON o.id = m.row_id {where} ORDER BY m.id"
    )
    return [mismatch_of(r) for r in rows]


async def _mismatch_by_id(conn: Conn, mismatch_id: int) -> tuple[Any, ...] | None:
    return await _one(
        conn,
        f"SELECT {_MISMATCH} FROM mismatches m JOIN outbox o ON o.id = m.row_id WHERE m.id = %s",
        (mismatch_id,),
    )


async def resolve(conn: Conn, mismatch_id: int, resolution: Resolution, at: float) -> Mismatch:
    """As ``sql_outbox.resolve``."""
    found = await _mismatch_by_id(conn, mismatch_id)
    if found is None:
        raise ResolveRefused("unknown", f"no mismatch {mismatch_id}")
    current = mismatch_of(found)
    if current.resolved_at is not None:
        raise ResolveRefused("resolved", f"mismatch {mismatch_id} is already resolved ({current.resolution})")
    row_id = current.row_id
    if resolution is Resolution.RESEND:
        newer = await _one(
            conn,
            "SELECT id FROM outbox WHERE conversation_id = %s AND attribute = %s AND id > %s "
            "AND status NOT IN ('flagged', 'resolved')",
            (current.conversation_id, current.attribute, row_id),
        )
        value = await _one(conn, "SELECT value FROM outbox WHERE id = %s", (row_id,))
        if newer is not None or value is None or value[0] is None:
            raise ResolveRefused(
                "superseded",
                f"mismatch {mismatch_id}: a newer value of '{current.attribute}' was submitted since; "
                "re-sending this one would overwrite it (accept the server's value instead)",
            )
        await _do(
            conn,
            "UPDATE outbox SET status = 'pending', repairs = 0, not_before = NULL WHERE id = %s",
            (row_id,),
        )
    else:
        await _do(conn, "UPDATE outbox SET status = 'resolved', value = NULL WHERE id = %s", (row_id,))
    await _do(
        conn,
        "UPDATE mismatches SET resolved_at = %s, resolution = %s WHERE id = %s",
        (at, resolution.value, mismatch_id),
    )
    row = await _mismatch_by_id(conn, mismatch_id)
    assert row is not None
    return mismatch_of(row)


async def update_outcomes(conn: Conn) -> dict[str, UpdateOutcome]:
    statuses: dict[str, list[RowStatus]] = {}
    for update_id, status in await _all(
        conn,
        "SELECT u.update_id, o.status FROM updates u LEFT JOIN update_rows ur ON ur.update_id = u.update_id "
        "LEFT JOIN outbox o ON o.id = ur.row_id",
    ):
        bucket = statuses.setdefault(update_id, [])
        if status is not None:
            bucket.append(RowStatus(status))
    return {update_id: outcome_of(found) for update_id, found in statuses.items()}


async def counts(conn: Conn) -> dict[str, int]:
    out = {status.value: 0 for status in RowStatus}
    for status, n in await _all(conn, "SELECT status, COUNT(*) FROM outbox GROUP BY status"):
        out[status] = int(n)
    row = await _one(
        conn,
        "SELECT (SELECT COUNT(*) FROM ledger), (SELECT COALESCE(SUM(attempts), 0) FROM ledger), "
        "(SELECT COUNT(*) FROM ledger WHERE outcome = 'unknown'), "
        "(SELECT COUNT(*) FROM mismatches WHERE resolved_at IS NULL), (SELECT COUNT(*) FROM updates)",
    )
    assert row is not None
    for name, value in zip(
        ("sends", "attempts", "unknownSends", "openMismatches", "updates"), row, strict=True
    ):
        out[name] = int(value)
    return out


# -- meta records -------------------------------------------------------------------------------------------


async def read_meta(conn: Conn, prefix: str) -> dict[str, str]:
    """As ``SqliteStore.read_meta``: the rows whose key starts with ``prefix`` (a plain prefix, no pattern)."""
    rows = await _all(conn, "SELECT key, value FROM meta WHERE left(key, %s) = %s", (len(prefix), prefix))
    return {str(key): str(value) for key, value in rows}


async def write_meta(conn: Conn, rows: Sequence[tuple[str, str]]) -> None:
    async with conn.cursor() as cur:
        await cur.executemany(
            b"INSERT INTO meta (key, value) VALUES (%s, %s) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            list(rows),
        )
