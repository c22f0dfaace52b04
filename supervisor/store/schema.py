"""The SQLite schema, versioned with ``PRAGMA user_version`` and migrated forward one step at a time.

:data:`MIGRATIONS` ``[n]`` takes a store from version ``n`` to ``n + 1``; each runs in the
transaction that also sets the new version, so a crash mid-migration leaves the old version
whole. A store whose version is newer than :data:`SCHEMA_VERSION` was written by a newer
session-supervisor: it is refused with a clear error and never touched (an older daemon
cannot know what a newer schema means; reliability.md §6).

Tables (docs/store.md has the full description): ``desired_sessions``, ``server_sessions`` (the
session ledger), ``updates`` and ``update_rows`` (acknowledged submissions and the rows that carry
their attributes), ``outbox`` (one attribute write each), ``ledger`` (one send each), ``mismatches``,
and ``meta`` (the owner epoch, bumped at every open and stamped on ledger entries).
"""

from __future__ import annotations

import sqlite3
from typing import Final

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "NewerSchema", "migrate"]

_V1: Final = """
CREATE TABLE meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE desired_sessions (
    session_id TEXT PRIMARY KEY,
    platform TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('running', 'stopped', 'terminated')),
    reason TEXT,
    updated_at REAL NOT NULL
);

CREATE TABLE server_sessions (
    session_id TEXT PRIMARY KEY,
    platform TEXT NOT NULL,
    kind TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('opening', 'open', 'closed')),
    agent_id TEXT,
    conversation_id TEXT,
    platform_session_id TEXT,
    guest_token TEXT,
    opened_at REAL NOT NULL,
    closed_at REAL,
    outcome TEXT
);

CREATE TABLE updates (
    update_id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    session_id TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    submitted_at REAL NOT NULL,
    keys INTEGER NOT NULL,
    coalesced INTEGER NOT NULL
);

CREATE TABLE outbox (
    id INTEGER PRIMARY KEY,
    tenant TEXT NOT NULL,
    session_id TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    attribute TEXT NOT NULL,
    value TEXT,
    sensitive INTEGER NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('pending', 'sending', 'accepted', 'verified', 'repaired',
                                           'flagged', 'superseded', 'resolved')),
    created_at REAL NOT NULL,
    sends INTEGER NOT NULL DEFAULT 0,
    repairs INTEGER NOT NULL DEFAULT 0,
    not_before REAL,
    before_hash TEXT,
    ledger_id INTEGER,
    accepted_at REAL,
    last_error TEXT
);
-- at most one queued (not yet sent) write per (conversation, attribute): the next one coalesces
CREATE UNIQUE INDEX outbox_one_pending ON outbox (conversation_id, attribute) WHERE status = 'pending';
CREATE INDEX outbox_by_status ON outbox (status, tenant);
CREATE INDEX outbox_by_attribute ON outbox (conversation_id, attribute);

CREATE TABLE update_rows (
    update_id TEXT NOT NULL REFERENCES updates (update_id),
    row_id INTEGER NOT NULL REFERENCES outbox (id),
    PRIMARY KEY (update_id, row_id)
) WITHOUT ROWID;
CREATE INDEX update_rows_by_row ON update_rows (row_id);

CREATE TABLE ledger (
    request_id INTEGER PRIMARY KEY,
    idempotency_key TEXT NOT NULL UNIQUE,
    tenant TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    participant_id TEXT,
    endpoint TEXT NOT NULL,
    payload_hash TEXT NOT NULL,
    attempts INTEGER NOT NULL,
    sent_at REAL NOT NULL,
    answered_at REAL,
    outcome TEXT NOT NULL CHECK (outcome IN ('ok', 'partial', 'failed', 'unknown')),
    status INTEGER,
    error_code TEXT,
    owner_epoch INTEGER NOT NULL
);

CREATE TABLE mismatches (
    id INTEGER PRIMARY KEY,
    row_id INTEGER NOT NULL REFERENCES outbox (id),
    reason TEXT NOT NULL,
    server_value TEXT,
    flagged_at REAL NOT NULL,
    resolved_at REAL,
    resolution TEXT
);
CREATE INDEX mismatches_open ON mismatches (resolved_at);
"""

#: MIGRATIONS[n] moves a store from version n to n + 1
MIGRATIONS: Final[tuple[str, ...]] = (_V1,)
SCHEMA_VERSION: Final = len(MIGRATIONS)


class NewerSchema(Exception):
    """The file was written by a newer session-supervisor (its schema version is higher than ours)."""

    def __init__(self, found: int) -> None:
        self.found = found
        super().__init__(
            f"schema version {found} is newer than this session-supervisor knows ({SCHEMA_VERSION}); "
            "refusing to open it (upgrade session-supervisor, or move the file aside)"
        )


def migrate(conn: sqlite3.Connection) -> int:
    """Bring the schema to :data:`SCHEMA_VERSION`; returns the version found. Raises :class:`NewerSchema`.

    ``conn`` is in autocommit mode (``isolation_level=None``): each step is its own transaction.
    """
    found = int(conn.execute("PRAGMA user_version").fetchone()[0])
    if found > SCHEMA_VERSION:
        raise NewerSchema(found)
    for version in range(found, SCHEMA_VERSION):
        conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in _statements(MIGRATIONS[version]):
                conn.execute(statement)
            # PRAGMA takes no parameters; the value is our own integer
            conn.execute(f"PRAGMA user_version = {version + 1:d}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    return found


def _statements(script: str) -> list[str]:
    """Split a migration into statements (executescript would commit on its own)."""
    out: list[str] = []
    buffer = ""
    for line in script.splitlines(keepends=True):
        if line.lstrip().startswith("--"):
            continue
        buffer += line
        if sqlite3.complete_statement(buffer):
            out.append(buffer.strip())
            buffer = ""
    if buffer.strip():
        out.append(buffer.strip())
    return out
