"""``session-supervisor store copy --from PATH --to URL``: a one-host SQLite store into a new PostgreSQL store.

With the daemons stopped: the copy takes the SQLite file's ``flock`` exclusively
(:func:`~supervisor.store.sqlite.hold_shared` is what every open store holds), so a daemon that has
the file open makes it refuse with one line, and a daemon starting meanwhile refuses to open it. The
file is read without a write (it must be at this release's schema version: a daemon of this release
migrates it at its next start). The PostgreSQL schema is made (or migrated) as a daemon would, and
must hold no session, outbox row or ledger entry yet: a copy never merges two stores.

Everything is copied in one transaction, row for row (their shards with them), ids kept (the
ledger's request ids, outbox and mismatch ids that other rows refer to), desired sessions in the
order they were added, and the ``meta`` records (the pacers' learned limits); the identity columns
then continue after the highest id copied. The epoch becomes the larger of the two stores' (epochs
never go back: the next daemon's open takes the one after it).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import psycopg
from psycopg import AsyncConnection

from supervisor.errors import StoreError
from supervisor.store.pg import RESERVED_META, connection_string, describe
from supervisor.store.pg_schema import prepare
from supervisor.store.schema import SCHEMA_VERSION, NewerSchema, NotOurs, identify
from supervisor.store.sqlite import describe as describe_sqlite

__all__ = ["COPIED", "NOT_COPIED", "CopyReport", "copy_store"]

#: the fleet's tables (migration 6) are not copied: a one-host SQLite store keeps them as the migration
#: made them (SoloLeases holds every shard in memory), and the PostgreSQL store's own 256 free leases
#: are what its first fleet member acquires
NOT_COPIED: Final = ("fleet_members", "shard_leases", "lease_acquisitions")

#: the tables copied, in an order that satisfies every reference; (table, columns, SQLite's order)
COPIED: Final[tuple[tuple[str, tuple[str, ...], str], ...]] = (
    (
        "desired_sessions",
        ("session_id", "platform", "state", "reason", "updated_at", "origin", "spec", "shard"),
        "rowid",
    ),
    (
        "server_sessions",
        (
            "session_id",
            "platform",
            "kind",
            "state",
            "agent_id",
            "conversation_id",
            "platform_session_id",
            "guest_token",
            "opened_at",
            "closed_at",
            "outcome",
            "left_at",
            "shard",
            "epoch",
        ),
        "session_id",
    ),
    (
        "updates",
        (
            "update_id",
            "tenant",
            "session_id",
            "conversation_id",
            "submitted_at",
            "keys",
            "coalesced",
            "shard",
        ),
        "rowid",
    ),
    (
        "outbox",
        (
            "id",
            "tenant",
            "session_id",
            "conversation_id",
            "attribute",
            "value",
            "sensitive",
            "status",
            "created_at",
            "sends",
            "repairs",
            "not_before",
            "before_hash",
            "ledger_id",
            "accepted_at",
            "last_error",
            "shard",
            "epoch",
        ),
        "id",
    ),
    ("update_rows", ("update_id", "row_id"), "update_id, row_id"),
    (
        "ledger",
        (
            "request_id",
            "idempotency_key",
            "tenant",
            "conversation_id",
            "participant_id",
            "endpoint",
            "payload_hash",
            "attempts",
            "sent_at",
            "answered_at",
            "outcome",
            "status",
            "error_code",
            "owner_epoch",
        ),
        "request_id",
    ),
    (
        "mismatches",
        ("id", "row_id", "reason", "server_value", "flagged_at", "resolved_at", "resolution"),
        "id",
    ),
)
#: identity columns that continue after the copied ids
_IDENTITIES: Final = (("outbox", "id"), ("ledger", "request_id"), ("mismatches", "id"))


@dataclass(frozen=True, slots=True)
class CopyReport:
    """What was copied: rows per table, and the epoch the PostgreSQL store now holds."""

    source: str
    target: str
    rows: dict[str, int]
    epoch: int


@contextlib.contextmanager
def _exclusive(path: Path) -> Iterator[None]:
    """The store file's flock, exclusively: refused at once when a daemon has the store open."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise StoreError(str(path), "no such file") from None
    except OSError as exc:
        raise StoreError(str(path), f"cannot open it ({exc.strerror})") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StoreError(
                str(path), "a daemon has this store open (its lock is held): stop it before copying"
            ) from None
        yield
    finally:
        os.close(fd)


def _read(path: Path) -> tuple[dict[str, list[tuple[Any, ...]]], int]:
    """Every copied table's rows and the epoch, read without writing (WAL replayed when present)."""
    uri = "file:" + urllib.parse.quote(str(path.resolve())) + "?mode=ro"
    try:
        conn = sqlite3.connect(uri, uri=True)
    except sqlite3.Error as exc:
        raise StoreError(str(path), describe_sqlite(exc)) from None
    try:
        _, version = identify(conn)
        if version == 0:
            raise StoreError(str(path), "an empty file: nothing to copy")
        if version != SCHEMA_VERSION:
            raise StoreError(
                str(path),
                f"schema version {version}: start a daemon of this release on it once (it migrates the file "
                f"to version {SCHEMA_VERSION}), stop it, then copy",
            )
        tables = {
            table: conn.execute(f"SELECT {', '.join(columns)} FROM {table} ORDER BY {order}").fetchall()
            for table, columns, order in COPIED
        }
        row = conn.execute("SELECT value FROM meta WHERE key = 'epoch'").fetchone()
        # the other meta records (the pacers' learned limits) go along; the epoch is merged below
        tables["meta"] = conn.execute(
            "SELECT key, value FROM meta WHERE key != 'epoch' ORDER BY key"
        ).fetchall()
        return tables, int(row[0]) if row is not None else 0
    except (NewerSchema, NotOurs) as exc:
        raise StoreError(str(path), str(exc)) from None
    except sqlite3.Error as exc:
        raise StoreError(str(path), describe_sqlite(exc)) from None
    finally:
        conn.close()


async def copy_store(source: Path, url: str, password: str | None = None) -> CopyReport:
    """Copy the SQLite store at ``source`` into the (new or empty) PostgreSQL store at ``url``.

    Raises :class:`StoreError` naming the file or the URL: a daemon holds the file, the file is not
    a store of this schema version, the PostgreSQL store already holds sessions, the database refused.
    Nothing is written to PostgreSQL unless everything is.
    """
    conninfo = connection_string(url, password)
    with _exclusive(source):
        tables, epoch = _read(source)
        try:
            async with await AsyncConnection.connect(conninfo, autocommit=True) as conn:
                await prepare(conn)
                return CopyReport(str(source), url, *await _write(conn, url, tables, epoch))
        except psycopg.Error as exc:
            raise StoreError(url, describe(exc)) from None


async def _write(
    conn: AsyncConnection[tuple[Any, ...]], url: str, tables: dict[str, list[tuple[Any, ...]]], epoch: int
) -> tuple[dict[str, int], int]:
    async with conn.transaction():
        for table in ("desired_sessions", "server_sessions", "outbox", "ledger"):
            cur = await conn.execute(f"SELECT EXISTS (SELECT 1 FROM {table})".encode())
            found = await cur.fetchone()
            if found is not None and found[0]:
                raise StoreError(
                    url, f"it already holds {table.replace('_', ' ')}: a copy goes into a new store only"
                )
        counts: dict[str, int] = {}
        for table, columns, _ in COPIED:
            rows = tables[table]
            if rows:
                marks = ", ".join(["%s"] * len(columns))
                query = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})"
                async with conn.cursor() as cur:
                    await cur.executemany(query.encode(), rows)
            counts[table] = len(rows)
        meta = [(k, v) for k, v in tables["meta"] if k not in RESERVED_META]
        if meta:
            async with conn.cursor() as cur:
                await cur.executemany(
                    b"INSERT INTO meta (key, value) VALUES (%s, %s) "
                    b"ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    meta,
                )
        counts["meta"] = len(meta)
        for table, column in _IDENTITIES:
            # the next row a daemon inserts is numbered after the highest copied id
            await conn.execute(
                f"SELECT setval(pg_get_serial_sequence('{table}', '{column}'), "
                f"GREATEST((SELECT MAX({column}) FROM {table}), 1), (SELECT MAX({column}) FROM {table}) IS NOT NULL)".encode()
            )
        cur = await conn.execute(
            "UPDATE meta SET value = GREATEST(value::bigint, %s)::text WHERE key = 'epoch' RETURNING value",
            (epoch,),
        )
        row = await cur.fetchone()
        assert row is not None
        return counts, int(row[0])
