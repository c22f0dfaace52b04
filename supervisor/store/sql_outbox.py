"""The bodies of the outbox's, the ledger's and the mismatches' transactions, for both stores.

Each function is one call of the :class:`~supervisor.store.model.Store` protocol, written once
against :mod:`supervisor.store.sql` (it yields its statements; SQLite's and PostgreSQL's drivers run
them in the transaction the store opened for the call): a submission's depth check, coalescing and
inserts happen together, so the acknowledgement the caller hears is exactly what was committed
(docs/robustness.md, "Durability": inserted in the same transaction as the acknowledgement;
docs/attributes.md: depth ≤ 50, one update per session and key).

The moves of a send and of its verification (``claim``, ``count_attempt``, ``record``) are the
owner's own writes: they start with the lease fence of the rows' shards and stamp ``outbox.epoch``.
``submit`` (any member accepts a submission) and ``resolve`` (an operator's command) are not fenced.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from typing import Any

from supervisor.store.model import (
    QUEUED,
    Claim,
    LedgerChange,
    LedgerEntry,
    Mismatch,
    NewMismatch,
    OutboxRow,
    Outcome,
    Resolution,
    ResolveRefused,
    RowChange,
    RowStatus,
    Submission,
    SubmitResult,
    UpdateOutcome,
    payload_hash,
    value_hash,
)
from supervisor.store.shards import shard_of
from supervisor.store.sql import Body, Tx, do, fence, insert_id, many, one, rows

__all__ = [
    "claim",
    "count_attempt",
    "counts",
    "depth",
    "ledger",
    "live_rows",
    "mismatches",
    "record",
    "resolve",
    "submit",
    "update_outcomes",
]

_ROW = (
    "id, tenant, session_id, conversation_id, attribute, value, sensitive, status, created_at, sends, "
    "repairs, not_before, before_hash, ledger_id, accepted_at"
)
_LEDGER = (
    "request_id, idempotency_key, tenant, conversation_id, participant_id, endpoint, payload_hash, "
    "attempts, sent_at, outcome, owner_epoch, answered_at, status, error_code"
)
_QUEUED = tuple(s.value for s in QUEUED)
_IN_QUEUED = f"status IN ({', '.join('?' * len(_QUEUED))})"
#: a settled row keeps no value: payloads are limited to what reconciliation needs (docs/robustness.md, "Security checklist")
_WIPED = frozenset({RowStatus.VERIFIED, RowStatus.REPAIRED, RowStatus.SUPERSEDED, RowStatus.RESOLVED})


def _row(r: Sequence[Any]) -> OutboxRow:
    return OutboxRow(
        id=r[0],
        tenant=r[1],
        session_id=r[2],
        conversation_id=r[3],
        attribute=r[4],
        value=r[5],
        sensitive=bool(r[6]),
        status=RowStatus(r[7]),
        created_at=r[8],
        sends=r[9],
        repairs=r[10],
        not_before=r[11],
        before_hash=r[12],
        ledger_id=r[13],
        accepted_at=r[14],
    )


def _entry(r: Sequence[Any]) -> LedgerEntry:
    return LedgerEntry(
        request_id=r[0],
        idempotency_key=r[1],
        tenant=r[2],
        conversation_id=r[3],
        participant_id=r[4],
        endpoint=r[5],
        payload_hash=r[6],
        attempts=r[7],
        sent_at=r[8],
        outcome=Outcome(r[9]),
        owner_epoch=r[10],
        answered_at=r[11],
        status=r[12],
        error_code=r[13],
    )


def depth(tx: Tx, tenant: str) -> Body[int]:
    """Writes of ``tenant`` the platform has not answered yet (queued or being sent)."""
    row = yield from one(f"SELECT COUNT(*) FROM outbox WHERE tenant = ? AND {_IN_QUEUED}", (tenant, *_QUEUED))
    assert row is not None
    return int(row[0])


def submit(tx: Tx, sub: Submission, max_depth: int) -> Body[SubmitResult]:
    """Queue ``sub``'s attributes, coalescing onto writes not yet sent; refuse past ``max_depth``."""
    queued = yield from depth(tx, sub.tenant)
    plan: list[tuple[str, str, int | None]] = []
    for key, value in sub.attributes.items():
        queued_row = yield from one(
            "SELECT id FROM outbox WHERE conversation_id = ? AND attribute = ? AND status = 'pending'",
            (sub.conversation_id, key),
        )
        plan.append((key, value, None if queued_row is None else int(queued_row[0])))
    new_rows = sum(1 for _, _, pending in plan if pending is None)
    if new_rows and queued + new_rows > max_depth:
        # seed edge case 2: a full queue refuses (the caller hears "try later"); nothing is written
        return SubmitResult(False, sub.update_id, (), queued)
    coalesced: list[str] = []
    # the session's shard; an update with no session takes its conversation's (docs/store.md, "Shards")
    shard = shard_of(sub.session_id if sub.session_id is not None else sub.conversation_id)
    yield from do(
        "INSERT INTO updates (update_id, tenant, session_id, conversation_id, submitted_at, keys, coalesced, "
        "shard) VALUES (?, ?, ?, ?, ?, ?, 0, ?)",
        (sub.update_id, sub.tenant, sub.session_id, sub.conversation_id, sub.submitted_at, len(plan), shard),
    )
    for key, value, pending in plan:
        sensitive = int(key in sub.sensitive)
        if pending is not None:
            # last write wins on a value not yet sent
            yield from do(
                "UPDATE outbox SET value = ?, sensitive = ?, session_id = ?, shard = ? WHERE id = ?",
                (value, sensitive, sub.session_id, shard, pending),
            )
            row_id = pending
            coalesced.append(key)
        else:
            row_id = yield from insert_id(
                "INSERT INTO outbox (tenant, session_id, conversation_id, attribute, value, sensitive, status, "
                "created_at, shard) VALUES (?, ?, ?, ?, ?, ?, 'pending', ?, ?)",
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
                "id",
            )
            yield from _supersede(tx, sub.conversation_id, key, row_id)
        yield from do(
            "INSERT INTO update_rows (update_id, row_id) VALUES (?, ?) ON CONFLICT DO NOTHING",
            (sub.update_id, row_id),
        )
    if coalesced:
        yield from do("UPDATE updates SET coalesced = ? WHERE update_id = ?", (len(coalesced), sub.update_id))
    return SubmitResult(True, sub.update_id, tuple(coalesced), queued + new_rows)


def _supersede(tx: Tx, conversation_id: str, attribute: str, newer: int) -> Body[None]:
    """Earlier writes of ours to the attribute, sent and not yet verified, are carried by ``newer`` now.

    Their verification must not mistake our own newer value for someone else's; the updates they
    belonged to are answered for by the newer write (last write wins).
    """
    older = yield from rows(
        "SELECT id FROM outbox WHERE conversation_id = ? AND attribute = ? AND status IN ('sending', 'accepted') "
        "AND id != ?",
        (conversation_id, attribute, newer),
    )
    for (old,) in older:
        yield from do("UPDATE outbox SET status = 'superseded', value = NULL WHERE id = ?", (old,))
        yield from do(
            "INSERT INTO update_rows (update_id, row_id) SELECT update_id, ? FROM update_rows "
            "WHERE row_id = ? ON CONFLICT DO NOTHING",
            (newer, old),
        )


def live_rows(tx: Tx, shards: Collection[int] | None = None) -> Body[list[OutboxRow]]:
    """The rows still in the daemon's hands, of ``shards`` (None: every shard)."""
    where, parameters = tx.dialect.shard_filter(shards, where=False)
    found = yield from rows(
        f"SELECT {_ROW} FROM outbox WHERE status IN ('pending', 'sending', 'accepted'){where} ORDER BY id",
        parameters,
    )
    return [_row(r) for r in found]


def ledger(tx: Tx, request_ids: Sequence[int] | None) -> Body[dict[int, LedgerEntry]]:
    """The ledger's entries (``request_ids``: only those)."""
    if request_ids is None:
        found = yield from rows(f"SELECT {_LEDGER} FROM ledger ORDER BY request_id")
    else:
        condition, parameters = tx.dialect.in_list("request_id", request_ids)
        found = yield from rows(
            f"SELECT {_LEDGER} FROM ledger WHERE {condition} ORDER BY request_id", parameters
        )
    return {int(r[0]): _entry(r) for r in found}


def claim(
    tx: Tx,
    conversation_id: str,
    before: Mapping[str, str],
    *,
    idempotency_key: str,
    participant_id: str | None,
    endpoint: str,
    sent_at: float,
    limit: int,
    attempts: int = 1,
) -> Body[Claim | None]:
    """Take the conversation's queued writes into one send: its ledger entry is written *before* it goes.

    The entry starts ``unknown`` with one attempt: if the daemon dies after the request left, a
    restart finds it unknown and reads the conversation back instead of sending again. ``before``
    maps attribute -> value_hash of what the server held just before (absent ones hash as None).
    ``attempts`` is 0 for rows taken only to be flagged (nothing is sent). The entry carries the
    store's owner epoch (``tx.epoch``); the rows taken, the lease epoch of their shard (fenced: a send
    is the owner's own write).
    """
    found = yield from rows(
        f"SELECT {_ROW}, shard FROM outbox WHERE conversation_id = ? AND status = 'pending' "
        "AND (not_before IS NULL OR not_before <= ?) ORDER BY id LIMIT ?",
        (conversation_id, sent_at, limit),
    )
    taken = [_row(r) for r in found]
    shard_of_row = {int(r[0]): int(r[15]) for r in found}
    later_row = yield from one(
        "SELECT MIN(not_before) FROM outbox WHERE conversation_id = ? AND status = 'pending' AND not_before > ?",
        (conversation_id, sent_at),
    )
    later = None if later_row is None or later_row[0] is None else float(later_row[0])
    if not taken:
        return None if later is None else Claim(None, (), later)
    epochs = yield from fence(tx, shard_of_row.values())
    payload = {row.attribute: row.value for row in taken}
    request_id = yield from insert_id(
        "INSERT INTO ledger (idempotency_key, tenant, conversation_id, participant_id, endpoint, payload_hash, "
        "attempts, sent_at, outcome, owner_epoch) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'unknown', ?)",
        (
            idempotency_key,
            taken[0].tenant,
            conversation_id,
            participant_id,
            endpoint,
            payload_hash(payload),
            attempts,
            sent_at,
            tx.epoch,
        ),
        "request_id",
    )
    claimed: list[OutboxRow] = []
    for row in taken:
        hashed = before.get(row.attribute) or value_hash(row.attribute, None)
        yield from do(
            "UPDATE outbox SET status = 'sending', ledger_id = ?, sends = sends + 1, before_hash = ?, "
            "not_before = NULL, epoch = ? WHERE id = ?",
            (request_id, hashed, epochs[shard_of_row[row.id]], row.id),
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
    entries = yield from ledger(tx, [request_id])
    return Claim(entries[request_id], tuple(claimed), later)


def count_attempt(tx: Tx, request_id: int) -> Body[int]:
    """One more request with this entry's key is about to leave (committed before it does); fenced on
    the shards of the rows the entry sends."""
    if tx.fenced:
        sent = yield from rows("SELECT DISTINCT shard FROM outbox WHERE ledger_id = ?", (request_id,))
        yield from fence(tx, (int(r[0]) for r in sent))
    yield from do("UPDATE ledger SET attempts = attempts + 1 WHERE request_id = ?", (request_id,))
    row = yield from one("SELECT attempts FROM ledger WHERE request_id = ?", (request_id,))
    assert row is not None
    return int(row[0])


def record(
    tx: Tx,
    changes: Sequence[RowChange],
    change: LedgerChange | None,
    found: Sequence[NewMismatch],
) -> Body[list[int]]:
    """Apply a send's or a verification's outcome; returns the ids of the new mismatches.

    Fenced on the shards of every row it touches (the rows moved, the ones the ledger entry sent, the
    ones flagged); each row moved carries its shard's lease epoch.
    """
    shard_of_row: dict[int, int] = {}
    if tx.fenced:
        # the shards it writes (one, as a rule: a send's rows are one conversation's)
        touched = [ch.row_id for ch in changes] + [m.row_id for m in found]
        condition, parameters = tx.dialect.in_list("id", touched)
        shard_rows = yield from rows(
            f"SELECT id, shard FROM outbox WHERE {condition} OR ledger_id = ?",
            (*parameters, None if change is None else change.request_id),
        )
        shard_of_row = {int(r[0]): int(r[1]) for r in shard_rows}
    epochs = yield from fence(tx, shard_of_row.values())
    for ch in changes:
        sets = ["status = ?", "epoch = ?"]
        shard = shard_of_row.get(ch.row_id)
        params: list[Any] = [ch.status.value, None if shard is None else epochs[shard]]
        if ch.status is RowStatus.PENDING or ch.not_before is not None:
            sets.append("not_before = ?")
            params.append(ch.not_before)
        if ch.accepted_at is not None:
            sets.append("accepted_at = ?")
            params.append(ch.accepted_at)
        if ch.repair:
            sets.append("repairs = repairs + 1")
        if ch.unsent:
            # SQLite's two-argument MAX is PostgreSQL's GREATEST: CASE is both's
            sets.append("sends = CASE WHEN sends > 0 THEN sends - 1 ELSE 0 END")
        if ch.error is not None:
            sets.append("last_error = ?")
            params.append(ch.error)
        if ch.status in _WIPED:
            sets.append("value = NULL")
        # a row a newer write superseded stays superseded, whatever its late answer says; the SET
        # list is built from the fixed fragments above, never from input
        yield from do(
            f"UPDATE outbox SET {', '.join(sets)} WHERE id = ? AND status != 'superseded'",
            (*params, ch.row_id),
        )
    if change is not None:
        yield from do(
            "UPDATE ledger SET outcome = ?, answered_at = COALESCE(?, answered_at), status = COALESCE(?, status), "
            "error_code = COALESCE(?, error_code) WHERE request_id = ?",
            (change.outcome.value, change.answered_at, change.status, change.error_code, change.request_id),
        )
    ids: list[int] = []
    for m in found:
        new_id = yield from insert_id(
            "INSERT INTO mismatches (row_id, reason, server_value, flagged_at) VALUES (?, ?, ?, ?)",
            (m.row_id, m.reason, m.server_value, m.flagged_at),
            "id",
        )
        ids.append(new_id)
    return ids


_MISMATCH = (
    "m.id, m.row_id, o.tenant, o.session_id, o.conversation_id, o.attribute, o.sensitive, m.reason, m.flagged_at, "
    "o.value, m.server_value, m.resolved_at, m.resolution"
)


def _mismatch(r: Sequence[Any]) -> Mismatch:
    sensitive = bool(r[6])
    return Mismatch(
        id=r[0],
        row_id=r[1],
        tenant=r[2],
        session_id=r[3],
        conversation_id=r[4],
        attribute=r[5],
        sensitive=sensitive,
        reason=r[7],
        flagged_at=r[8],
        expected=None if sensitive else r[9],
        server_value=None if sensitive else r[10],
        resolved_at=r[11],
        resolution=r[12],
    )


def mismatches(tx: Tx, include_resolved: bool) -> Body[list[Mismatch]]:
    where = "" if include_resolved else "WHERE m.resolved_at IS NULL"
    found = yield from rows(
        f"SELECT {_MISMATCH} FROM mismatches m JOIN outbox o ON o.id = m.row_id {where} ORDER BY m.id"
    )
    return [_mismatch(r) for r in found]


def _mismatch_by_id(mismatch_id: int) -> Body[tuple[Any, ...] | None]:
    found = yield from one(
        f"SELECT {_MISMATCH} FROM mismatches m JOIN outbox o ON o.id = m.row_id WHERE m.id = ?",
        (mismatch_id,),
    )
    return found


def resolve(tx: Tx, mismatch_id: int, resolution: Resolution, at: float) -> Body[Mismatch]:
    """Settle a mismatch: re-send our value (it queues again) or accept the server's (the row is done)."""
    found = yield from _mismatch_by_id(mismatch_id)
    if found is None:
        raise ResolveRefused("unknown", f"no mismatch {mismatch_id}")
    current = _mismatch(found)
    if current.resolved_at is not None:
        raise ResolveRefused("resolved", f"mismatch {mismatch_id} is already resolved ({current.resolution})")
    row_id = current.row_id
    if resolution is Resolution.RESEND:
        newer = yield from one(
            "SELECT id FROM outbox WHERE conversation_id = ? AND attribute = ? AND id > ? "
            "AND status NOT IN ('flagged', 'resolved')",
            (current.conversation_id, current.attribute, row_id),
        )
        value = yield from one("SELECT value FROM outbox WHERE id = ?", (row_id,))
        if newer is not None or value is None or value[0] is None:
            raise ResolveRefused(
                "superseded",
                f"mismatch {mismatch_id}: a newer value of '{current.attribute}' was submitted since; "
                "re-sending this one would overwrite it (accept the server's value instead)",
            )
        # a fresh repair budget: someone looked at it and wants our value there
        yield from do(
            "UPDATE outbox SET status = 'pending', repairs = 0, not_before = NULL WHERE id = ?", (row_id,)
        )
    else:
        yield from do("UPDATE outbox SET status = 'resolved', value = NULL WHERE id = ?", (row_id,))
    yield from do(
        "UPDATE mismatches SET resolved_at = ?, resolution = ? WHERE id = ?",
        (at, resolution.value, mismatch_id),
    )
    row = yield from _mismatch_by_id(mismatch_id)
    assert row is not None
    return _mismatch(row)


def update_outcomes(tx: Tx) -> Body[dict[str, UpdateOutcome]]:
    """Each acknowledged update's outcome, from the rows that carry its attributes now."""
    statuses: dict[str, list[RowStatus]] = {}
    found = yield from rows(
        "SELECT u.update_id, o.status FROM updates u LEFT JOIN update_rows ur ON ur.update_id = u.update_id "
        "LEFT JOIN outbox o ON o.id = ur.row_id"
    )
    for update_id, status in found:
        bucket = statuses.setdefault(update_id, [])
        if status is not None:
            bucket.append(RowStatus(status))
    return {update_id: _outcome(got) for update_id, got in statuses.items()}


def _outcome(statuses: list[RowStatus]) -> UpdateOutcome:
    carried = [s for s in statuses if s is not RowStatus.SUPERSEDED]
    if any(s in (RowStatus.FLAGGED, RowStatus.RESOLVED) for s in carried):
        return UpdateOutcome.FLAGGED
    if not carried or any(s in (RowStatus.PENDING, RowStatus.SENDING, RowStatus.ACCEPTED) for s in carried):
        return UpdateOutcome.PENDING
    if any(s is RowStatus.REPAIRED for s in carried):
        return UpdateOutcome.REPAIRED
    return UpdateOutcome.VERIFIED


def counts(tx: Tx) -> Body[dict[str, int]]:
    out = {status.value: 0 for status in RowStatus}
    by_status = yield from rows("SELECT status, COUNT(*) FROM outbox GROUP BY status")
    for status, n in by_status:
        out[status] = int(n)
    totals = yield from one(
        "SELECT (SELECT COUNT(*) FROM ledger), (SELECT COALESCE(SUM(attempts), 0) FROM ledger), "
        "(SELECT COUNT(*) FROM ledger WHERE outcome = 'unknown'), "
        "(SELECT COUNT(*) FROM mismatches WHERE resolved_at IS NULL), (SELECT COUNT(*) FROM updates)"
    )
    assert totals is not None
    for name, value in zip(
        ("sends", "attempts", "unknownSends", "openMismatches", "updates"), totals, strict=True
    ):
        out[name] = int(value)
    return out


# -- meta records ---------------------------------------------------------------------------------------


def read_meta(tx: Tx, prefix: str) -> Body[dict[str, str]]:
    """The ``meta`` rows whose key starts with ``prefix`` (a plain prefix: no LIKE pattern)."""
    found = yield from rows("SELECT key, value FROM meta WHERE substr(key, 1, ?) = ?", (len(prefix), prefix))
    return {str(key): str(value) for key, value in found}


def write_meta(tx: Tx, values: Sequence[tuple[str, str]]) -> Body[None]:
    """Insert or replace ``meta`` rows."""
    yield from many(
        "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        values,
    )
