"""The SQLite schema: numbered migrations, the file's stamp, and which files are the store's.

**Numbered migrations.** :data:`MIGRATIONS` holds one :class:`Migration` per schema version, in
order: migration ``n`` takes a store from version ``n - 1`` to ``n``. Each runs in the transaction
that also sets the new version (``PRAGMA user_version``), so a crash mid-migration leaves the old
version whole. A released migration is never edited: the schema changes only by adding the next
one (tests/unit/test_store_files.py pins every released version with a file its release wrote).

**The stamp.** Migration 1 also sets SQLite's ``application_id`` header field to
:data:`APPLICATION_ID`, which names a file as session-supervisor's store (``file(1)`` and any tool
reading the header can tell). Files the release before the stamp wrote carry none: a file with no
application id, ``user_version`` 1 and exactly schema 1's tables is such a file, and is stamped on
open (:func:`identify` says :attr:`Identity.LEGACY`).

**What is refused, untouched.** Everything else: another application's database (another id, or
no id and not exactly our tables), a negative version, a version without its tables, a version
newer than :data:`SCHEMA_VERSION` (a newer session-supervisor wrote it: an older daemon cannot know
what it means; docs/store.md, "Schema versions and migrations"). :func:`identify` decides on a connection that has written
nothing (it only reads the header and ``sqlite_master``): the caller refuses before its first write,
the switch to WAL included.

Tables (docs/store.md has the full description): ``desired_sessions``, ``server_sessions`` (the
session ledger), ``updates`` and ``update_rows`` (acknowledged submissions and the rows that carry
their attributes), ``outbox`` (one attribute write each), ``ledger`` (one send each), ``mismatches``,
and ``meta`` (the owner epoch, bumped at every open and stamped on ledger entries). From version 5
every row that belongs to a session carries its shard (supervisor/store/shards.py). From version 6
``fleet_members``, ``shard_leases`` and ``lease_acquisitions`` hold a fleet's leases (PostgreSQL only:
a SQLite store keeps them empty), and ``server_sessions`` and ``outbox`` rows carry the owner ``epoch``.
"""

from __future__ import annotations

import enum
import sqlite3
from dataclasses import dataclass
from typing import Final

from supervisor.store.shards import shard_or_none

__all__ = [
    "APPLICATION_ID",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "Identity",
    "Migration",
    "NewerSchema",
    "NotOurs",
    "expected_schema",
    "identify",
    "migrate",
    "shard_function",
    "stamp",
]

#: SQLite's application_id of a session-supervisor store: "SSUP" in ASCII (https://sqlite.org/pragma.html#pragma_application_id)
APPLICATION_ID: Final = 0x53535550

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


#: a stop that handed the session over (left it alive on the platform for the next start) records
#: when; the next start takes over a session left less than ``handover.maxAgeSeconds`` ago and ends
#: an older one (docs/store.md, "Sessions across a restart")
_V2: Final = """
ALTER TABLE server_sessions ADD COLUMN left_at REAL;
"""

# sessions added over the control socket (AddSession) are desired sessions too: their spec (the
# configuration's session entry, as JSON) and where they came from ('config': the file; 'api': the
# control socket) survive restarts and reloads (docs/store.md, "Tables")
_V3: Final = """
ALTER TABLE desired_sessions ADD COLUMN origin TEXT NOT NULL DEFAULT 'config' CHECK (origin IN ('config', 'api'));
ALTER TABLE desired_sessions ADD COLUMN spec TEXT;
"""

# an attribute update may name a conversation with no supervised session (post-call middleware thinks
# in conversation ids after the agent's session is gone): ``updates.session_id`` and
# ``outbox.session_id`` become optional. SQLite cannot drop a NOT NULL constraint in place, so both
# tables are rebuilt as https://www.sqlite.org/lang_altertable.html ("Making Other Kinds Of Table
# Schema Changes") says: make the new table, copy, drop the old, rename the new, re-make its indexes.
# update_rows and mismatches refer to them by name and keep referring to the rebuilt tables;
# :func:`migrate` switches foreign keys off around the transaction and checks them before it commits.
_V4: Final = """
CREATE TABLE updates_v4 (
    update_id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    session_id TEXT,
    conversation_id TEXT NOT NULL,
    submitted_at REAL NOT NULL,
    keys INTEGER NOT NULL,
    coalesced INTEGER NOT NULL
);
INSERT INTO updates_v4 (update_id, tenant, session_id, conversation_id, submitted_at, keys, coalesced)
    SELECT update_id, tenant, session_id, conversation_id, submitted_at, keys, coalesced FROM updates;
DROP TABLE updates;
ALTER TABLE updates_v4 RENAME TO updates;

CREATE TABLE outbox_v4 (
    id INTEGER PRIMARY KEY,
    tenant TEXT NOT NULL,
    session_id TEXT,
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
INSERT INTO outbox_v4 (id, tenant, session_id, conversation_id, attribute, value, sensitive, status,
                       created_at, sends, repairs, not_before, before_hash, ledger_id, accepted_at, last_error)
    SELECT id, tenant, session_id, conversation_id, attribute, value, sensitive, status,
           created_at, sends, repairs, not_before, before_hash, ledger_id, accepted_at, last_error FROM outbox;
DROP TABLE outbox;
ALTER TABLE outbox_v4 RENAME TO outbox;
CREATE UNIQUE INDEX outbox_one_pending ON outbox (conversation_id, attribute) WHERE status = 'pending';
CREATE INDEX outbox_by_status ON outbox (status, tenant);
CREATE INDEX outbox_by_attribute ON outbox (conversation_id, attribute);
"""


# every row that belongs to a session carries the session's shard (supervisor/store/shards.py), so a
# process reads only the shards it owns (docs/store.md, "Shards"); an outbox row or an update with
# no session takes its conversation's shard. The values are computed by ``session_shard()``, the
# shard function registered on the connection (SQLite has no BLAKE2b): :func:`migrate` and
# :func:`expected_schema` register it before running a migration.
_V5: Final = """
ALTER TABLE desired_sessions ADD COLUMN shard INTEGER;
ALTER TABLE server_sessions ADD COLUMN shard INTEGER;
ALTER TABLE updates ADD COLUMN shard INTEGER;
ALTER TABLE outbox ADD COLUMN shard INTEGER;
UPDATE desired_sessions SET shard = session_shard(session_id);
UPDATE server_sessions SET shard = session_shard(session_id);
UPDATE updates SET shard = session_shard(COALESCE(session_id, conversation_id));
UPDATE outbox SET shard = session_shard(COALESCE(session_id, conversation_id));
CREATE INDEX desired_sessions_by_shard ON desired_sessions (shard);
CREATE INDEX server_sessions_by_shard ON server_sessions (shard);
CREATE INDEX outbox_by_shard ON outbox (shard, status);
"""


# the fleet (docs/runtime.md, "The fleet"): members of a fleet sharing one PostgreSQL store, a lease per
# shard (its owner, its epoch: incremented at every acquisition, never decreased; when it expires, on the
# database's clock; NULL: free) and an audit row per acquisition; ledger and outbox rows carry the owner
# epoch that wrote them. A one-host SQLite store keeps the three tables empty (SoloLeases holds every
# shard in memory); the 256 lease rows exist so both dialects have the same rows at every version.
_V6: Final = """
CREATE TABLE fleet_members (
    member TEXT PRIMARY KEY,
    host TEXT NOT NULL,
    digest TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('active', 'degraded', 'leaving')),
    started_at REAL NOT NULL,
    heartbeat_at REAL NOT NULL
);
CREATE TABLE shard_leases (
    shard INTEGER PRIMARY KEY CHECK (shard >= 0 AND shard < 256),
    owner TEXT,
    epoch INTEGER NOT NULL DEFAULT 0,
    expires_at REAL
);
INSERT INTO shard_leases (shard)
    WITH RECURSIVE n (shard) AS (SELECT 0 UNION ALL SELECT shard + 1 FROM n WHERE shard < 255)
    SELECT shard FROM n;
CREATE TABLE lease_acquisitions (
    id INTEGER PRIMARY KEY,
    shard INTEGER NOT NULL,
    member TEXT NOT NULL,
    epoch INTEGER NOT NULL,
    previous_owner TEXT,
    reason TEXT NOT NULL,
    at REAL NOT NULL
);
ALTER TABLE server_sessions ADD COLUMN epoch INTEGER;
ALTER TABLE outbox ADD COLUMN epoch INTEGER;
"""


@dataclass(frozen=True, slots=True)
class Migration:
    """Takes a store to schema ``version`` (from ``version - 1``)."""

    version: int
    summary: str
    script: str


#: every schema version, in order; add the next one, never edit a released one
MIGRATIONS: Final[tuple[Migration, ...]] = (
    Migration(1, "the first schema (docs/store.md, Tables): sessions, outbox, ledger, mismatches, meta", _V1),
    Migration(2, "server_sessions.left_at: when a stop handed the session over to the next start", _V2),
    Migration(3, "desired sessions say their origin (config or api) and keep an added session's spec", _V3),
    Migration(
        4, "attribute updates without a session: updates and outbox rebuilt with session_id optional", _V4
    ),
    Migration(5, "every row of a session carries its shard (blake2b of the session id, mod 256)", _V5),
    Migration(
        6,
        "the fleet: members, shard leases, their acquisitions; the owner epoch stamped in ledger and outbox rows",
        _V6,
    ),
)
SCHEMA_VERSION: Final = len(MIGRATIONS)


class NewerSchema(Exception):
    """The file was written by a newer session-supervisor (its schema version is higher than ours)."""

    def __init__(self, found: int) -> None:
        self.found = found
        super().__init__(
            f"schema version {found} is newer than this session-supervisor knows ({SCHEMA_VERSION}); "
            "refusing to open it (upgrade session-supervisor, or move the file aside)"
        )


class NotOurs(Exception):
    """The file is not (or no longer looks like) a session-supervisor store: refused untouched."""

    def __init__(self, problem: str) -> None:
        super().__init__(
            f"{problem}; refusing to open it (nothing was changed: move it aside to start an empty store)"
        )


class Identity(enum.Enum):
    NEW = "new"  # an empty file: the store's to create
    OURS = "ours"  # stamped, a known version with exactly its tables
    LEGACY = "legacy"  # no stamp, version 1 and exactly schema 1's tables: written before the stamp


SchemaObject = tuple[str, str, str]


def expected_schema(version: int) -> list[SchemaObject]:
    """The (type, name, sql) of every table and index migrations 1..``version`` make."""
    conn = sqlite3.connect(":memory:", isolation_level=None)
    try:
        shard_function(conn)
        for migration in MIGRATIONS[:version]:
            for statement in _statements(migration.script):
                conn.execute(statement)
        return _schema(conn)
    finally:
        conn.close()


def _schema(conn: sqlite3.Connection) -> list[SchemaObject]:
    # SQLite's own objects (sqlite_autoindex_*, sqlite_sequence, sqlite_stat*) follow from ours
    rows = conn.execute("SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'").fetchall()
    return sorted((str(t), str(n), " ".join(str(sql).split()) if sql else "") for t, n, sql in rows)


def identify(conn: sqlite3.Connection) -> tuple[Identity, int]:
    """Whose file this is, and its schema version; raises :class:`NotOurs` or :class:`NewerSchema`.

    Reads only: the header (``application_id``, ``user_version``, the page count) and ``sqlite_master``.
    """
    application_id = int(conn.execute("PRAGMA application_id").fetchone()[0])
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    if int(conn.execute("PRAGMA page_count").fetchone()[0]) == 0:
        return Identity.NEW, 0
    found = _schema(conn)
    if application_id not in (0, APPLICATION_ID):
        raise NotOurs(
            f"not a session-supervisor store: its application_id 0x{application_id & 0xFFFFFFFF:08x} is another program's"
        )
    if application_id == 0 and not (version == 1 and found == expected_schema(1)):
        # written by the release before the stamp only if it is exactly that release's schema
        if version == 1:
            raise NotOurs(
                f"schema version 1 without its tables ({_difference(expected_schema(1), found)}) and no "
                "application_id: not a file session-supervisor wrote"
            )
        tables = sorted(name for kind, name, _ in found if kind == "table")
        held = ", ".join(tables[:5]) + (", ..." if len(tables) > 5 else "") if tables else "no tables"
        raise NotOurs(
            f"not a session-supervisor store (no application_id, schema version {version}, tables: {held})"
        )
    if version > SCHEMA_VERSION:
        raise NewerSchema(version)
    if version < 1:
        raise NotOurs(f"a session-supervisor store with schema version {version}, which no release wrote")
    expected = expected_schema(version)
    if found != expected:
        raise NotOurs(f"schema version {version} without its tables ({_difference(expected, found)})")
    return (Identity.OURS if application_id == APPLICATION_ID else Identity.LEGACY), version


def _difference(expected: list[SchemaObject], found: list[SchemaObject]) -> str:
    want = {obj[1]: obj for obj in expected}
    have = {obj[1]: obj for obj in found}
    parts = []
    missing = sorted(n for n in want if n not in have)
    if missing:
        parts.append("missing: " + ", ".join(missing))
    unexpected = sorted(n for n in have if n not in want)
    if unexpected:
        parts.append("unexpected: " + ", ".join(unexpected))
    differ = sorted(n for n in want if n in have and want[n] != have[n])
    if differ:
        parts.append("defined otherwise: " + ", ".join(differ))
    return "; ".join(parts)


def migrate(conn: sqlite3.Connection, found: int) -> None:
    """Bring a store of version ``found`` (from :func:`identify`) to :data:`SCHEMA_VERSION`.

    ``conn`` is in autocommit mode (``isolation_level=None``): each step is its own transaction.
    The first step stamps the file (:data:`APPLICATION_ID`) with the tables it makes.

    Foreign keys are off while the steps run (a step may rebuild a table others refer to: dropping
    the old one would otherwise fail or cascade) and on again afterwards if they were on;
    ``PRAGMA foreign_keys`` is a no-op inside a transaction, so it is switched around each one
    (https://www.sqlite.org/foreignkeys.html, section 2). Each step checks every reference
    (``PRAGMA foreign_key_check``) before it commits, and rolls back if one dangles.
    """
    enforced = bool(conn.execute("PRAGMA foreign_keys").fetchone()[0])
    shard_function(conn)
    conn.execute("PRAGMA foreign_keys = OFF")
    try:
        for migration in MIGRATIONS[found:]:
            conn.execute("BEGIN IMMEDIATE")
            try:
                for statement in _statements(migration.script):
                    conn.execute(statement)
                dangling = conn.execute("PRAGMA foreign_key_check").fetchall()
                if dangling:
                    table, rowid, parent, _ = dangling[0]
                    raise sqlite3.IntegrityError(
                        f"migration {migration.version}: {len(dangling)} dangling reference(s), the first "
                        f"from {table} row {rowid} to {parent}"
                    )
                # PRAGMA takes no parameters; the values are our own integers
                if migration.version == 1:
                    conn.execute(f"PRAGMA application_id = {APPLICATION_ID:d}")
                conn.execute(f"PRAGMA user_version = {migration.version:d}")
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
    finally:
        if enforced:
            conn.execute("PRAGMA foreign_keys = ON")


def shard_function(conn: sqlite3.Connection) -> None:
    """``session_shard(key)`` on ``conn``: the shard of a session id (NULL for NULL), for migration 5."""
    conn.create_function("session_shard", 1, shard_or_none, deterministic=True)


def stamp(conn: sqlite3.Connection) -> None:
    """Stamp a file the release before the stamp wrote (:attr:`Identity.LEGACY`), in its own transaction."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID:d}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


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
