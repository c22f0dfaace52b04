"""The PostgreSQL store's own promises (supervisor/store/pg.py, pg_schema.py) on a real server (``-m postgres``):
the schema SQLite's at every version, migrations, whose tables, epochs, health across a server restart,
and errors that name the URL and never the password. The interface's behaviour is in test_store_sqlite.py,
run on both implementations."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import AsyncIterator, Iterator

import anyio
import psycopg
import pytest

from supervisor.errors import StoreError
from supervisor.store import DesiredSession, DesiredState
from supervisor.store.pg import PgStore
from supervisor.store.pg_schema import PG_MIGRATIONS, SHARD_KEYS, prepare
from supervisor.store.schema import MIGRATIONS, SCHEMA_VERSION, shard_function
from supervisor.store.shards import shard_of
from tests.harness.postgres import PostgresServer, url_of

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


@pytest.fixture
async def raw(pg_dsn: str) -> AsyncIterator[psycopg.AsyncConnection[tuple[object, ...]]]:
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        yield conn


def sqlite_schema(version: int) -> tuple[set[tuple[str, str, bool]], set[str]]:
    """SQLite's (table, column, NOT NULL) and the names of the indexes migrations make, at ``version``."""
    conn = sqlite3.connect(":memory:")
    try:
        shard_function(conn)  # migration 5's session_shard()
        for migration in MIGRATIONS[:version]:
            conn.executescript(migration.script)
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        out = set()
        for table in tables:
            for _, name, _, notnull, _, pk in conn.execute(f"PRAGMA table_info({table})"):
                out.add((table, name, bool(notnull) or (bool(pk) and table != "update_rows")))
        # an index with no SQL is SQLite's own, for a key or a UNIQUE column
        made = conn.execute("SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL")
        indexes = {str(r[0]) for r in made}
        return out, indexes
    finally:
        conn.close()


async def pg_columns(conn: psycopg.AsyncConnection[tuple[object, ...]]) -> set[tuple[str, str, bool]]:
    cur = await conn.execute(
        "SELECT table_name, column_name, is_nullable = 'NO' FROM information_schema.columns "
        "WHERE table_schema = current_schema()"
    )
    return {(str(t), str(c), bool(n)) for t, c, n in await cur.fetchall()} - {
        ("desired_sessions", "added", True)
    }


async def pg_indexes(conn: psycopg.AsyncConnection[tuple[object, ...]]) -> set[str]:
    """The indexes migrations made (not those of primary keys and UNIQUE columns: SQLite's have no SQL)."""
    cur = await conn.execute(
        "SELECT c.relname FROM pg_catalog.pg_index x JOIN pg_catalog.pg_class c ON c.oid = x.indexrelid "
        "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = current_schema() "
        "AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_constraint k WHERE k.conindid = x.indexrelid)"
    )
    return {str(r[0]) for r in await cur.fetchall()}


async def test_the_schema_is_sqlites_at_every_version(
    raw: psycopg.AsyncConnection[tuple[object, ...]],
) -> None:
    assert [(m.version, m.summary) for m in PG_MIGRATIONS] == [(m.version, m.summary) for m in MIGRATIONS]
    for version in range(1, SCHEMA_VERSION + 1):
        await prepare(raw, upto=version)
        columns, indexes = sqlite_schema(version)
        # SQLite's INTEGER PRIMARY KEY may hold NULL (it becomes the rowid); the values never are
        expected = {(t, c, n or c in ("id", "request_id")) for t, c, n in columns}
        assert await pg_columns(raw) == expected, f"schema version {version}"
        assert await pg_indexes(raw) == indexes, f"schema version {version}"


async def test_migration_5_gives_every_row_of_a_session_its_shard(
    raw: psycopg.AsyncConnection[tuple[object, ...]], pg_url: str
) -> None:
    """A version 4 store's rows get ``shard_of`` their session id (no session: their conversation's)
    in the migration, and the reads by shard return exactly those rows."""
    await prepare(raw, upto=4)
    for statement in (
        "INSERT INTO desired_sessions (session_id, platform, state, reason, updated_at) VALUES "
        "('wm-0', 'genesys', 'running', NULL, 1.0), ('cx-1', 'cxone', 'running', NULL, 1.0), "
        "('agent-4711', 'cxone', 'stopped', 'ctl stop', 1.0)",
        "INSERT INTO server_sessions (session_id, platform, kind, state, opened_at) VALUES "
        "('wm-0', 'genesys', 'webmessaging', 'open', 1.0), ('cx-1', 'cxone', 'agent', 'open', 1.0)",
        "INSERT INTO updates (update_id, tenant, session_id, conversation_id, submitted_at, keys, coalesced) "
        "VALUES ('u1', 't', 'wm-0', 'conv-1', 1.0, 1, 0), ('u2', 't', NULL, 'conv-9', 1.0, 1, 0)",
        "INSERT INTO outbox (tenant, session_id, conversation_id, attribute, value, sensitive, status, "
        "created_at) VALUES ('t', 'wm-0', 'conv-1', 'a', '1', 0, 'pending', 1.0), "
        "('t', NULL, 'conv-9', 'a', '1', 0, 'pending', 1.0), "
        "('t', 'cx-1', 'conv-2', 'a', '1', 0, 'pending', 1.0)",
    ):
        await raw.execute(statement.encode())
    store = await PgStore.open(pg_url)
    try:
        wanted = {shard_of("wm-0"), shard_of("conv-9")}
        assert list(await store.desired_sessions(wanted)) == ["wm-0"]
        assert list(await store.server_sessions(wanted)) == ["wm-0"]
        assert [(r.session_id, r.conversation_id) for r in await store.live_rows(wanted)] == [
            ("wm-0", "conv-1"),
            (None, "conv-9"),
        ]
        assert list(await store.desired_sessions({shard_of("cx-1")})) == ["cx-1"]
    finally:
        await store.aclose()
    for table, key in SHARD_KEYS:
        cur = await raw.execute(f"SELECT {key}, shard FROM {table}".encode())
        rows = await cur.fetchall()
        assert rows and [shard for _, shard in rows] == [shard_of(str(k)) for k, _ in rows], table


async def test_migration_6_makes_the_fleets_tables_and_keeps_every_row(
    raw: psycopg.AsyncConnection[tuple[object, ...]],
) -> None:
    """A version 5 store gains 256 free leases at epoch 0, no member, no acquisition; its sessions and
    outbox rows are kept with no epoch; an acquisition's id is the database's (an identity)."""
    await prepare(raw, upto=5)
    await raw.execute(
        "INSERT INTO server_sessions (session_id, platform, kind, state, opened_at, shard) "
        "VALUES ('wm-0', 'genesys', 'webmessaging', 'open', 1.0, 50)"
    )
    await raw.execute(
        "INSERT INTO outbox (tenant, session_id, conversation_id, attribute, value, sensitive, status, "
        "created_at, shard) VALUES ('t', 'wm-0', 'conv-1', 'a', '1', 0, 'pending', 1.0, 50)"
    )
    await prepare(raw)
    cur = await raw.execute("SELECT shard, owner, epoch, expires_at FROM shard_leases ORDER BY shard")
    assert await cur.fetchall() == [(shard, None, 0, None) for shard in range(256)]
    for table in ("fleet_members", "lease_acquisitions"):
        cur = await raw.execute(f"SELECT count(*) FROM {table}".encode())
        assert await cur.fetchone() == (0,), table
    cur = await raw.execute("SELECT session_id, epoch FROM server_sessions")
    assert await cur.fetchall() == [("wm-0", None)]
    cur = await raw.execute("SELECT attribute, epoch FROM outbox")
    assert await cur.fetchall() == [("a", None)]
    cur = await raw.execute(
        "INSERT INTO lease_acquisitions (shard, member, epoch, reason, at) VALUES (1, 'm', 1, 'free', 1.0) "
        "RETURNING id"
    )
    assert await cur.fetchone() == (1,)
    with pytest.raises(psycopg.errors.CheckViolation):
        await raw.execute("INSERT INTO shard_leases (shard) VALUES (256)")


async def test_an_older_store_is_migrated_and_keeps_its_rows(
    raw: psycopg.AsyncConnection[tuple[object, ...]], pg_url: str
) -> None:
    await prepare(raw, upto=2)
    await raw.execute(
        "INSERT INTO desired_sessions (session_id, platform, state, reason, updated_at) "
        "VALUES ('wm-0', 'genesys', 'stopped', 'ctl stop', 1.0)"
    )
    store = await PgStore.open(pg_url)
    try:
        desired = await store.desired_sessions()
        assert desired == {"wm-0": DesiredSession("wm-0", "genesys", DesiredState.STOPPED, "ctl stop", 1.0)}
        assert store.epoch == 2  # the migration's open is the second
    finally:
        await store.aclose()
    cur = await raw.execute("SELECT value FROM meta WHERE key = 'schema_version'")
    assert await cur.fetchone() == (str(SCHEMA_VERSION),)


async def test_a_newer_schema_is_refused_untouched(
    raw: psycopg.AsyncConnection[tuple[object, ...]], pg_url: str
) -> None:
    await prepare(raw)
    await raw.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(StoreError) as refused:
        await PgStore.open(pg_url)
    assert "schema version 99 is newer" in str(refused.value) and pg_url in str(refused.value)
    cur = await raw.execute("SELECT value FROM meta WHERE key = 'epoch'")
    assert await cur.fetchone() == ("1",)  # not even the epoch moved


@pytest.mark.parametrize(
    ("setup", "problem"),
    [
        ("CREATE TABLE outbox (id int)", "tables named like the store's (outbox) but no meta table"),
        ("CREATE TABLE meta (key text, value text)", "a meta table that is not session-supervisor's"),
    ],
)
async def test_another_applications_tables_are_refused_untouched(
    raw: psycopg.AsyncConnection[tuple[object, ...]], pg_url: str, setup: str, problem: str
) -> None:
    await raw.execute(setup.encode())
    with pytest.raises(StoreError, match=re.escape(problem)):
        await PgStore.open(pg_url)
    cur = await raw.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() ORDER BY 1"
    )
    assert len(await cur.fetchall()) == 1


async def test_concurrent_opens_of_a_new_store_make_it_once_each_with_its_epoch(pg_url: str) -> None:
    opened: list[PgStore] = []

    async def one() -> None:
        opened.append(await PgStore.open(pg_url))

    async with anyio.create_task_group() as tg:
        for _ in range(3):
            tg.start_soon(one)
    try:
        assert sorted(s.epoch for s in opened) == [1, 2, 3]
    finally:
        for store in opened:
            await store.aclose()


async def test_unreachable_names_the_url_never_the_password(tmp_path: object) -> None:
    url = "postgresql:///store?host=/nonexistent-socket-dir&user=supervisor"
    with pytest.raises(StoreError) as failed:
        await PgStore.open(url, password="pw-s3cret-value")
    text = str(failed.value)
    assert text.startswith(url) and "cannot reach the database" in text
    assert "s3cret" not in text and "\n" not in text


@pytest.fixture
def restarted(pg_server: PostgresServer) -> Iterator[PostgresServer]:
    if not pg_server.embedded:
        pytest.skip("PG_DSN names another server: the test does not stop it")
    try:
        yield pg_server
    finally:
        if not pg_server.running():  # whatever the test did, the next one finds the server up
            pg_server.start()


async def test_a_database_restart_degrades_the_store_until_it_is_back(
    restarted: PostgresServer, pg_dsn: str
) -> None:
    moves: list[str | None] = []
    store = await PgStore.open(url_of(pg_dsn), on_health=moves.append)
    try:
        await store.set_desired(DesiredSession("wm-0", "genesys", DesiredState.RUNNING, None, 1.0))
        restarted.stop()
        with pytest.raises(StoreError) as failed:
            await store.desired_sessions()
        assert "cannot reach the database" in str(failed.value)
        assert store.degraded is not None and moves == [store.degraded]
        restarted.start()
        # a new connection at the next call; what was committed before the restart is there
        assert list(await store.desired_sessions()) == ["wm-0"]
        assert store.degraded is None and moves[-1] is None
    finally:
        await store.aclose()
