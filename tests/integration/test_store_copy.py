"""``session-supervisor store copy --from PATH --to URL``, run as a script runs it (``-m postgres``):
every row and the epoch moved, refused in one line while a daemon holds the store, into a new store only."""

from __future__ import annotations

import fcntl
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from supervisor.errors import StoreError
from supervisor.store import (
    DesiredSession,
    DesiredState,
    LedgerChange,
    NewMismatch,
    Outcome,
    RowChange,
    RowStatus,
    ServerSession,
    ServerState,
    SqliteStore,
    Submission,
)
from supervisor.store.copy import COPIED, NOT_COPIED
from supervisor.store.pg import PgStore
from supervisor.store.pg_schema import SHARD_KEYS
from supervisor.store.schema import MIGRATIONS, SCHEMA_VERSION, shard_function
from supervisor.store.shards import shard_of

pytestmark = [pytest.mark.integration, pytest.mark.anyio]
CLI = [sys.executable, "-m", "supervisor", "store", "copy"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=60, check=False)


async def filled(path: Path) -> SqliteStore:
    """A store as a daemon leaves it: sessions, a guest token, a send in the ledger, a mismatch, queued writes."""
    store = await SqliteStore.open(path, synchronous="normal")
    await store.add_sessions(
        [DesiredSession("api-1", "genesys", DesiredState.RUNNING, None, 1.0, "api", '{"id":"api-1"}')]
    )
    await store.set_desired(DesiredSession("wm-0", "genesys", DesiredState.STOPPED, "ctl stop", 2.0))
    await store.session_opening(
        ServerSession("wm-0", "genesys", "webmessaging", ServerState.OPENING, 3.0, guest_token="g-tok")
    )
    await store.session_opened("wm-0", "conv-1", None)
    await store.submit(
        Submission("u1", "genesys:c", "wm-0", "conv-1", {"a": "1", "b": "2"}, frozenset(), 4.0), 50
    )
    claimed = await store.claim(
        "conv-1", {}, idempotency_key="k1", participant_id="p", endpoint="PATCH x", sent_at=5.0, limit=1
    )
    assert claimed is not None and claimed.entry is not None
    await store.record(
        [RowChange(claimed.rows[0].id, RowStatus.FLAGGED)],
        LedgerChange(claimed.entry.request_id, Outcome.PARTIAL, answered_at=6.0, status=202),
        [NewMismatch(claimed.rows[0].id, "newer-value", "other", 7.0)],
    )
    await store.write_meta({"pacer.genesys:webmessaging": '{"limit": 200.0, "at": 1.0}'})
    return store


async def snapshot(store: SqliteStore | PgStore) -> tuple[object, ...]:
    return (
        list((await store.desired_sessions()).items()),
        await store.server_sessions(),
        await store.ledger(),
        await store.live_rows(),
        await store.mismatches(include_resolved=True),
        await store.update_outcomes(),
        await store.counts(),
    )


def source_shards(path: Path) -> dict[str, list[tuple[object, ...]]]:
    """Each session table's (key, shard) rows in the SQLite file."""
    conn = sqlite3.connect(path)
    try:
        return {
            table: conn.execute(f"SELECT {key}, shard FROM {table} ORDER BY 1, 2").fetchall()
            for table, key in SHARD_KEYS
        }
    finally:
        conn.close()


async def copied_shards(url: str) -> dict[str, list[tuple[object, ...]]]:
    """Each session table's (key, shard) rows in the PostgreSQL store."""
    out = {}
    async with await psycopg.AsyncConnection.connect(url) as pg:
        for table, key in SHARD_KEYS:
            cur = await pg.execute(f"SELECT {key}, shard FROM {table} ORDER BY 1, 2".encode())
            out[table] = await cur.fetchall()
    return out


@pytest.mark.postgres
async def test_every_row_and_the_epoch_are_copied(tmp_path: Path, pg_url: str) -> None:
    path = tmp_path / "store.sqlite3"
    source = await filled(path)
    before, epoch = await snapshot(source), source.epoch
    shards = source_shards(path)
    assert all(rows and all(shard == shard_of(k) for k, shard in rows) for rows in shards.values())
    await source.aclose()
    done = run("--from", str(path), "--to", pg_url, "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["rows"] == {
        "desired_sessions": 2,
        "server_sessions": 1,
        "updates": 1,
        "outbox": 2,
        "update_rows": 2,
        "ledger": 1,
        "mismatches": 1,
        "meta": 1,
    }
    assert report["epoch"] == epoch and report["from"] == str(path)
    copied = await PgStore.open(pg_url)
    try:
        assert copied.epoch == epoch + 1  # epochs never go back
        assert await snapshot(copied) == before
        # the shards come along: the reads by shard find the same rows
        assert list(await copied.desired_sessions({shard_of("api-1")})) == ["api-1"]
        live = await copied.live_rows()
        assert live and await copied.live_rows({shard_of("wm-0")}) == live
        assert await copied.live_rows({shard_of("api-1")}) == []
        assert await copied_shards(pg_url) == shards
        assert await copied.read_meta("pacer.") == {
            "pacer.genesys:webmessaging": '{"limit": 200.0, "at": 1.0}'
        }
        # new rows are numbered after the copied ones
        await copied.submit(Submission("u2", "genesys:c", None, "conv-2", {"z": "1"}, frozenset(), 8.0), 50)
        assert max(r.id for r in await copied.live_rows()) == 3
    finally:
        await copied.aclose()
    # a second copy into the same store is refused: a copy never merges two stores
    again = run("--from", str(path), "--to", pg_url)
    assert again.returncode == 1
    assert again.stderr.strip().endswith(
        "it already holds desired sessions: a copy goes into a new store only"
    )
    assert len(again.stderr.strip().splitlines()) == 1


async def test_refused_in_one_line_while_a_daemon_holds_the_store(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite3"
    store = await SqliteStore.open(path, synchronous="normal")  # what a running daemon holds
    try:
        done = run("--from", str(path), "--to", "postgresql:///never-reached?host=/nonexistent")
    finally:
        await store.aclose()
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.strip() == (
        f"session-supervisor: error: {path}: a daemon has this store open (its lock is held): stop it before copying"
    )


async def test_a_daemon_does_not_open_a_store_being_copied(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite3"
    await (await SqliteStore.open(path, synchronous="normal")).aclose()
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # what store copy holds while it copies
        with pytest.raises(StoreError, match="store copy` is copying it"):
            await SqliteStore.open(path, synchronous="normal")
    finally:
        os.close(fd)
    await (await SqliteStore.open(path, synchronous="normal")).aclose()  # and opens once it is done


@pytest.mark.parametrize(
    ("args", "code", "line"),
    [
        (["--from", "x.sqlite3"], 2, "Missing option '--to'"),
        (
            ["--from", "/nonexistent/store.sqlite3", "--to", "postgresql:///s"],
            1,
            "/nonexistent/store.sqlite3: no such file",
        ),
        (
            ["--from", "x", "--to", "postgresql://u:hunter2@db.example.com/s"],
            1,
            "postgresql://u:***@db.example.com/s: the URL holds a password: put it in passwordFile instead",
        ),
    ],
)
def test_bad_input_is_one_line(args: list[str], code: int, line: str) -> None:
    done = run(*args)
    assert done.returncode == code
    assert line in done.stderr and "Traceback" not in done.stderr and "hunter2" not in done.stderr


def test_the_copy_takes_every_column_of_the_sqlite_tables() -> None:
    """COPIED names every column SQLite's schema has (a column a migration adds is copied, or the
    copy would fill it with NULL): the shards of migration 5 included."""
    conn = sqlite3.connect(":memory:")
    try:
        shard_function(conn)
        for migration in MIGRATIONS[:SCHEMA_VERSION]:
            conn.executescript(migration.script)
        for table, columns, _ in COPIED:
            found = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
            assert sorted(columns) == sorted(found), table
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert tables == {table for table, _, _ in COPIED} | {"meta", *NOT_COPIED}
    finally:
        conn.close()
