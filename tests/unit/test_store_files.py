"""Which files the store may take, and which it must leave exactly as it found them.

The store's files carry SQLite's ``application_id`` (:data:`APPLICATION_ID`). A file without one is
the project's only when it is what the release before the stamp wrote: ``user_version`` 1 and
exactly schema 1's tables; it is stamped on open and keeps everything (the fixture
``tests/fixtures/store/v1-6e20883.sqlite3`` was written by that release). Any other file (another
application's database, a negative or an unknown version, a version without its tables, a newer
schema in any journal mode) is refused with one line naming it, and left byte for byte, mode and
journal mode included, as it was. The schema changes only by numbered migrations: a file of every
version migrates (a fixture per version), and a version's tables are pinned by its fixture.

Every test works on real SQLite files in a temporary directory; nothing is mocked.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import stat
import sys
from pathlib import Path

import anyio
import pytest

from supervisor.errors import StoreError
from supervisor.store import (
    DesiredSession,
    DesiredState,
    RowStatus,
    ServerSession,
    ServerState,
    SqliteStore,
    Submission,
    UpdateOutcome,
)
from supervisor.store.schema import APPLICATION_ID, MIGRATIONS, SCHEMA_VERSION, expected_schema, migrate
from supervisor.store.shards import ALL_SHARDS, shard_of

pytestmark = pytest.mark.anyio


def file_size(path: str) -> int:
    return os.stat(path).st_size


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "store"
#: a file written by the release of each schema version (before the stamp: 6e20883)
RELEASED = {
    1: FIXTURES / "v1-6e20883.sqlite3",
    2: FIXTURES / "v2-handover.sqlite3",
    3: FIXTURES / "v3-sessions.sqlite3",
    4: FIXTURES / "v4-byconv.sqlite3",
    5: FIXTURES / "v5-shards.sqlite3",
    6: FIXTURES / "v6-fleet.sqlite3",
}
REFUSED = "refusing to open it"


def fingerprint(path: Path) -> tuple[str, int, list[str]]:
    """What "untouched" means: the bytes, the mode, and which files lie beside it."""
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    siblings = sorted(p.name for p in path.parent.iterdir() if p.name.startswith(path.name + "-"))
    return digest, stat.S_IMODE(path.stat().st_mode), siblings


def header(path: Path) -> dict[str, int]:
    """The database header's fields the store decides on (https://sqlite.org/fileformat.html)."""
    raw = path.read_bytes()[:100]
    return {
        "write_version": raw[18],  # 1 rollback journal, 2 WAL
        "user_version": int.from_bytes(raw[60:64], "big", signed=True),
        "application_id": int.from_bytes(raw[68:72], "big", signed=True),
    }


def plain(path: Path, script: str, *, wal: bool = False) -> None:
    """A database written by something else than the store (sqlite3 itself)."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        if wal:
            conn.execute("PRAGMA journal_mode = WAL")
        conn.executescript(script)
    finally:
        conn.close()


async def refused(path: Path) -> str:
    before = fingerprint(path)
    with pytest.raises(StoreError) as caught:
        await SqliteStore.open(path, synchronous="normal")
    message = str(caught.value)
    assert message.startswith(f"{path}: ") and "\n" not in message
    assert fingerprint(path) == before, "a refused file was changed"
    return message


# -- the stamp -------------------------------------------------------------------------------------


async def test_a_new_store_is_stamped_with_the_application_id_and_the_schema_version(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite3"
    opened = await SqliteStore.open(path, synchronous="normal")
    await opened.aclose()
    assert header(path) == {
        "write_version": 2,
        "user_version": SCHEMA_VERSION,
        "application_id": APPLICATION_ID,
    }


async def test_a_store_written_by_the_release_before_the_stamp_is_stamped_and_keeps_everything(
    tmp_path: Path,
) -> None:
    path = tmp_path / "store.sqlite3"
    shutil.copyfile(RELEASED[1], path)
    assert header(path)["application_id"] == 0 and header(path)["user_version"] == 1
    opened = await SqliteStore.open(path, synchronous="normal")
    try:
        live = {(r.conversation_id, r.attribute): (r.status, r.value) for r in await opened.live_rows()}
        assert live == {
            ("conv-0", "survey"): (RowStatus.PENDING, "no"),  # the second update coalesced onto it
            ("conv-0", "tier"): (RowStatus.PENDING, "gold"),
            ("conv-1", "ssn"): (RowStatus.SENDING, "000-00-0000"),
        }
        outcomes = await opened.update_outcomes()
        assert outcomes == {
            "u-1": UpdateOutcome.PENDING,
            "u-2": UpdateOutcome.PENDING,
            "u-3": UpdateOutcome.PENDING,
            "u-4": UpdateOutcome.FLAGGED,
        }
        (entry,) = [e for e in (await opened.ledger()).values() if e.idempotency_key == "idem-1"]
        assert entry.outcome.value == "unknown" and entry.attempts == 1  # read back, never re-sent blindly
        assert [m.reason for m in await opened.mismatches()] == ["still-wrong"]
        desired = await opened.desired_sessions()
        assert {k: v.state for k, v in desired.items()} == {
            "wm-0": DesiredState.RUNNING,
            "wm-1": DesiredState.STOPPED,
            "cx-0": DesiredState.TERMINATED,
        }
        # migrated: every session of that release was the file's (origin config, no spec kept)
        assert {(v.origin, v.spec) for v in desired.values()} == {("config", None)}
        server = (await opened.server_sessions())["wm-0"]
        assert (server.state, server.guest_token, server.conversation_id) == (
            ServerState.OPEN,
            "guest-tok-0",
            "conv-0",
        )
        assert opened.epoch == 2  # the release's open was the first
        assert await opened.integrity_check() == "ok"
    finally:
        await opened.aclose()
    assert header(path)["application_id"] == APPLICATION_ID
    assert header(path)["user_version"] == SCHEMA_VERSION


# -- numbered migrations ------------------------------------------------------------------------------


def test_the_schema_changes_only_by_numbered_migrations_and_each_released_version_has_a_fixture() -> None:
    """A migration is added, never edited: each one's number is its target version, and a file the
    release of each version wrote is kept (a new version needs its fixture, written by its release)."""
    assert [m.version for m in MIGRATIONS] == list(range(1, SCHEMA_VERSION + 1))
    assert all(m.summary and m.script.strip() for m in MIGRATIONS)
    assert set(RELEASED) == set(range(1, SCHEMA_VERSION + 1))


@pytest.mark.parametrize("version", sorted(RELEASED))
def test_each_released_file_holds_exactly_the_tables_its_migrations_make(version: int) -> None:
    """Editing a released migration in place (instead of adding one) changes what the migrations make
    of that version, and this fails: the released file is the record of what was shipped."""
    # immutable: read as it is, nothing created beside the fixture (no -wal, no -shm)
    conn = sqlite3.connect(f"file:{RELEASED[version]}?immutable=1", uri=True)
    try:
        found = sorted(
            (t, n, " ".join(str(s).split()) if s else "")
            for t, n, s in conn.execute(
                "SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'"
            )
        )
    finally:
        conn.close()
    assert found == sorted(expected_schema(version))


@pytest.mark.parametrize("version", [0, *sorted(RELEASED)])
async def test_a_file_of_every_earlier_version_migrates_to_the_current_one(
    tmp_path: Path, version: int
) -> None:
    path = tmp_path / "store.sqlite3"
    if version == 0:
        path.touch()  # what the store creates before its first migration: an empty file
    else:
        shutil.copyfile(RELEASED[version], path)
    opened = await SqliteStore.open(path, synchronous="normal")
    try:
        assert await opened.integrity_check() == "ok"
        await opened.counts()  # every table the current code reads is there
    finally:
        await opened.aclose()
    assert header(path)["user_version"] == SCHEMA_VERSION
    assert header(path)["application_id"] == APPLICATION_ID


async def test_a_store_of_version_3_keeps_the_sessions_added_over_the_control_socket(tmp_path: Path) -> None:
    """Version 3's desired sessions say their origin, and an added session's entry comes back as it was
    kept (the daemon starts it again from that entry)."""
    path = tmp_path / "store.sqlite3"
    shutil.copyfile(RELEASED[3], path)
    opened = await SqliteStore.open(path, synchronous="normal")
    try:
        desired = await opened.desired_sessions()
        assert {k: v.origin for k, v in desired.items()} == {
            "wm-0": "config",
            "wm-1": "config",
            "cx-0": "config",
            "cx-1": "config",
            "agent-4711": "api",
            "wm-api-1": "api",
        }
        assert list(desired)[-2:] == ["agent-4711", "wm-api-1"]  # in the order they were added
        assert desired["agent-4711"].spec is not None and '"agentId":"4711"' in desired["agent-4711"].spec
        assert desired["wm-api-1"].state is DesiredState.TERMINATED
        # a later write of its desired state (ctl stop, a fail-fast) keeps its origin and entry
        await opened.set_desired(
            DesiredSession("agent-4711", "cxone", DesiredState.STOPPED, "ctl stop", 1040.0)
        )
        again = (await opened.desired_sessions())["agent-4711"]
        assert (again.state, again.origin, again.spec) == (
            DesiredState.STOPPED,
            "api",
            desired["agent-4711"].spec,
        )
        assert len(await opened.live_rows()) == 3  # its pending updates are there too
    finally:
        await opened.aclose()


async def test_a_store_of_version_3_migrates_with_its_pending_updates_and_takes_updates_with_no_session(
    tmp_path: Path,
) -> None:
    """Migration 4 rebuilds ``updates`` and ``outbox`` (session_id becomes optional): every row of the
    previous release comes through as it was, references from update_rows and mismatches included,
    and an update by conversation id with no session is kept and read back."""
    path = tmp_path / "store.sqlite3"
    shutil.copyfile(RELEASED[3], path)
    conn = sqlite3.connect(f"file:{RELEASED[3]}?immutable=1", uri=True)
    try:
        before = {
            table: sorted(conn.execute(f"SELECT * FROM {table}").fetchall())
            for table in ("updates", "outbox", "update_rows", "mismatches")
        }
    finally:
        conn.close()
    assert before["outbox"] and before["updates"] and before["mismatches"]
    opened = await SqliteStore.open(path, synchronous="normal")
    try:
        live = await opened.live_rows()
        assert len(live) == 3 and {row.session_id for row in live} == {"wm-0"}
        assert [m.session_id for m in await opened.mismatches()] == ["wm-0"]
        result = await opened.submit(
            Submission(
                "u-conv", "genesys:https://api.example.test", None, "conv-9", {"k": "v"}, frozenset(), 2000.0
            ),
            50,
        )
        assert result.accepted
        mine = [row for row in await opened.live_rows() if row.conversation_id == "conv-9"]
        assert [(row.session_id, row.attribute, row.value) for row in mine] == [(None, "k", "v")]
    finally:
        await opened.aclose()
    conn = sqlite3.connect(path)
    try:
        for table, rows in before.items():
            # the columns version 4 has (later migrations add columns after them: migration 5's shard)
            after = sorted(row[: len(rows[0])] for row in conn.execute(f"SELECT * FROM {table}").fetchall())
            assert all(r in after for r in rows), f"{table} lost rows in migration 4"
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        assert int(conn.execute("PRAGMA foreign_keys").fetchone()[0]) == 0  # a fresh connection's default
    finally:
        conn.close()


async def test_a_version_4_store_keeps_an_update_with_no_session(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite3"
    shutil.copyfile(RELEASED[4], path)
    opened = await SqliteStore.open(path, synchronous="normal")
    try:
        mine = [row for row in await opened.live_rows() if row.conversation_id == "conv-9"]
        assert [(row.session_id, row.attribute, row.value) for row in mine] == [(None, "wrapup", "sale")]
    finally:
        await opened.aclose()


SESSION_TABLES = ("desired_sessions", "server_sessions", "updates", "outbox")


@pytest.mark.parametrize("version", [1, 4, 5])
async def test_migration_5_gives_every_row_of_a_session_its_shard(tmp_path: Path, version: int) -> None:
    """Every row that belongs to a session carries ``shard_of(session id)`` (a row with no session,
    its conversation's), whether migration 5 filled it in (versions 1 and 4) or the store wrote it
    (version 5's own rows), and the store's reads by shard return exactly the rows of those shards."""
    path = tmp_path / "store.sqlite3"
    shutil.copyfile(RELEASED[version], path)
    opened = await SqliteStore.open(path, synchronous="normal")
    try:
        desired = await opened.desired_sessions()
        server = await opened.server_sessions()
        live = await opened.live_rows()
        wanted = {shard_of("wm-0")}
        assert set(await opened.desired_sessions(wanted)) == {k for k in desired if shard_of(k) in wanted}
        assert set(await opened.server_sessions(wanted)) == {k for k in server if shard_of(k) in wanted}
        assert {r.id for r in await opened.live_rows(wanted)} == {
            r.id for r in live if shard_of(r.session_id or r.conversation_id) in wanted
        }
        assert await opened.desired_sessions(set()) == {} and await opened.live_rows(set()) == []
        assert len(await opened.desired_sessions(ALL_SHARDS)) == len(desired)
    finally:
        await opened.aclose()
    conn = sqlite3.connect(path)
    try:
        for table in SESSION_TABLES:
            rows = (
                conn.execute(f"SELECT COALESCE(session_id, conversation_id), shard FROM {table}").fetchall()
                if (table in ("updates", "outbox"))
                else conn.execute(f"SELECT session_id, shard FROM {table}").fetchall()
            )
            assert rows, table
            assert [shard for _, shard in rows] == [shard_of(key) for key, _ in rows], table
    finally:
        conn.close()


@pytest.mark.parametrize("version", [1, 5])
async def test_migration_6_makes_the_fleets_tables_and_keeps_every_row(tmp_path: Path, version: int) -> None:
    """A store of version 5 (and 1) gains the fleet's tables: 256 free leases at epoch 0, no member, no
    acquisition (a one-host store keeps them so); its sessions and outbox rows are kept, with no epoch."""
    path = tmp_path / "store.sqlite3"
    shutil.copyfile(RELEASED[version], path)
    before = sqlite3.connect(f"file:{RELEASED[version]}?immutable=1", uri=True)
    try:
        sessions = before.execute(
            "SELECT session_id, state FROM server_sessions ORDER BY session_id"
        ).fetchall()
        outbox = before.execute("SELECT id, status FROM outbox ORDER BY id").fetchall()
    finally:
        before.close()
    opened = await SqliteStore.open(path, synchronous="normal")
    await opened.aclose()
    conn = sqlite3.connect(path)
    try:
        leases = conn.execute(
            "SELECT shard, owner, epoch, expires_at FROM shard_leases ORDER BY shard"
        ).fetchall()
        assert leases == [(shard, None, 0, None) for shard in range(256)]
        assert conn.execute("SELECT count(*) FROM fleet_members").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM lease_acquisitions").fetchone() == (0,)
        kept = conn.execute("SELECT session_id, state FROM server_sessions ORDER BY session_id").fetchall()
        assert sessions and kept == sessions
        assert conn.execute("SELECT id, status FROM outbox ORDER BY id").fetchall() == outbox
        assert conn.execute("SELECT count(*) FROM server_sessions WHERE epoch IS NOT NULL").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM outbox WHERE epoch IS NOT NULL").fetchone() == (0,)
        # the checks hold: no 257th shard, no state outside the three
        with pytest.raises(sqlite3.IntegrityError):
            conn.execute("INSERT INTO shard_leases (shard) VALUES (256)")
        with pytest.raises(sqlite3.IntegrityError):
            conn.execute("INSERT INTO fleet_members VALUES ('m', 'h', 'd', 'gone', 1.0, 1.0)")
    finally:
        conn.close()


def test_the_shard_of_a_session_id_is_pinned() -> None:
    """BLAKE2b with an 8-byte digest, read big-endian, mod 256 (docs/store.md, "Shards"): a fleet
    member in another language computes these same numbers."""
    assert [shard_of(i) for i in ("wm-0", "cx-1", "agent-4711", "", "é-session")] == [50, 2, 221, 180, 170]
    assert hashlib.blake2b(b"wm-0", digest_size=8).hexdigest() == "a3385545c994ef32"  # 0x32 = 50


def test_a_migration_that_leaves_a_dangling_reference_is_rolled_back(tmp_path: Path) -> None:
    """migrate() turns foreign keys off to rebuild tables, so it checks them itself before committing."""
    path = tmp_path / "store.sqlite3"
    shutil.copyfile(RELEASED[3], path)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA foreign_keys = ON")
        # a row of update_rows pointing at an outbox row that is not there (foreign keys off to make it)
        conn.execute("PRAGMA foreign_keys = OFF")
        conn.execute("INSERT INTO update_rows (update_id, row_id) VALUES ('u-1', 999999)")
        conn.execute("PRAGMA foreign_keys = ON")
        with pytest.raises(sqlite3.IntegrityError, match="migration 4: 1 dangling reference"):
            migrate(conn, 3)
        assert int(conn.execute("PRAGMA user_version").fetchone()[0]) == 3
        assert int(conn.execute("PRAGMA foreign_keys").fetchone()[0]) == 1  # switched back on
        assert not conn.execute("SELECT 1 FROM sqlite_master WHERE name LIKE '%_v4'").fetchall()
    finally:
        conn.close()


async def test_a_handover_recorded_in_version_2_is_read_and_a_version_1_file_has_none(tmp_path: Path) -> None:
    """Schema version 2 adds ``left_at``: the release's file keeps the handover it recorded (the agent
    session's last rolling id, when it was left); a migrated version 1 file has no session left."""
    path = tmp_path / "v2.sqlite3"
    shutil.copyfile(RELEASED[2], path)
    opened = await SqliteStore.open(path, synchronous="normal")
    try:
        server = await opened.server_sessions()
        left = server["cx-1"]
        assert (left.state, left.left_at, left.platform_session_id) == (ServerState.OPEN, 1040.0, "rolling-7")
        assert (server["wm-0"].left_at, server["wm-0"].guest_token) == (1040.0, "guest-tok-0")
        # a new opening of the session clears it: it is no longer left
        await opened.session_opening(
            ServerSession("cx-1", "cxone", "agent-session", ServerState.OPEN, 1050.0)
        )
        assert (await opened.server_sessions())["cx-1"].left_at is None
    finally:
        await opened.aclose()
    old = tmp_path / "v1.sqlite3"
    shutil.copyfile(RELEASED[1], old)
    opened = await SqliteStore.open(old, synchronous="normal")
    try:
        assert all(row.left_at is None for row in (await opened.server_sessions()).values())
    finally:
        await opened.aclose()


# -- files that are not the store's ------------------------------------------------------------------------


@pytest.mark.parametrize("journal", ["rollback", "wal"])
async def test_another_applications_sqlite_database_is_refused_untouched(
    tmp_path: Path, journal: str
) -> None:
    path = tmp_path / "store.sqlite3"
    plain(
        path,
        "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT); INSERT INTO notes (body) VALUES ('mine');",
        wal=journal == "wal",
    )
    path.chmod(0o644)  # not narrowed either: the file is not ours
    message = await refused(path)
    assert "not a session-supervisor store" in message and REFUSED in message
    assert "notes" in message  # what it holds instead


async def test_a_database_with_another_application_id_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite3"
    plain(path, "PRAGMA application_id = 1179861572; CREATE TABLE t (x);")  # another program's stamp
    message = await refused(path)
    assert "application_id 0x46534244" in message and REFUSED in message


@pytest.mark.parametrize("stamped", [False, True])
async def test_a_negative_schema_version_is_refused_untouched(tmp_path: Path, stamped: bool) -> None:
    """Formerly a negative user_version ran the migrations in place, then every start refused it."""
    path = tmp_path / "store.sqlite3"
    stamp = f"PRAGMA application_id = {APPLICATION_ID};" if stamped else ""
    plain(path, f"{stamp} PRAGMA user_version = -1; CREATE TABLE t (x);")
    message = await refused(path)
    assert "schema version -1" in message and REFUSED in message


@pytest.mark.parametrize("stamped", [False, True])
async def test_a_file_claiming_schema_1_without_its_tables_is_refused_untouched(
    tmp_path: Path, stamped: bool
) -> None:
    """Formerly such a file opened, was never reported, and refused every update."""
    path = tmp_path / "store.sqlite3"
    stamp = f"PRAGMA application_id = {APPLICATION_ID};" if stamped else ""
    plain(
        path,
        f"{stamp} PRAGMA user_version = 1; CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);",
    )
    message = await refused(path)
    assert "schema version 1" in message and "missing" in message and "outbox" in message
    assert REFUSED in message


async def test_a_newer_schema_in_rollback_journal_mode_is_refused_untouched(tmp_path: Path) -> None:
    """Formerly the store switched the file to WAL (its header changed) before refusing it."""
    path = tmp_path / "store.sqlite3"
    opened = await SqliteStore.open(path, synchronous="normal")
    await opened.aclose()
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = DELETE")
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    assert header(path)["write_version"] == 1
    message = await refused(path)
    assert f"schema version {SCHEMA_VERSION + 1} is newer than this session-supervisor knows" in message
    assert header(path)["write_version"] == 1  # still a rollback-journal file


async def test_a_file_that_is_not_a_database_at_all_keeps_its_mode(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite3"
    path.write_bytes(b"shopping list: eggs, flour\n" * 100)
    path.chmod(0o644)
    assert "corrupt or not a SQLite database" in await refused(path)


# -- what a hand-truncated WAL loses (docs/store.md) ------------------------------------------------------

WRITER = """
import os, sqlite3, sys, anyio
from supervisor.store import DesiredSession, DesiredState, SqliteStore

async def main(path: str) -> None:
    store = await SqliteStore.open(path, synchronous="full")
    for i in range(5):
        await store.set_desired(DesiredSession(f"s{i}", "genesys", DesiredState.RUNNING, None, float(i)))
    # everything so far moved into the file; what follows is only in the WAL
    other = sqlite3.connect(path)
    other.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    other.close()
    for i in range(5, 25):
        await store.set_desired(DesiredSession(f"s{i}", "genesys", DesiredState.RUNNING, None, float(i)))
    os._exit(0)  # like kill -9: no checkpoint, the WAL stays

anyio.run(main, sys.argv[1])
"""


@pytest.mark.parametrize("cut", ["emptied", "halved"])
async def test_a_hand_truncated_wal_loses_the_commits_past_the_cut_and_nothing_before(
    tmp_path: Path, cut: str
) -> None:
    path = tmp_path / "store.sqlite3"
    await anyio.run_process([sys.executable, "-c", WRITER, str(path)], check=True)
    wal = f"{path}-wal"
    assert file_size(wal) > 0
    os.truncate(wal, 0 if cut == "emptied" else file_size(wal) // 2)
    opened = await SqliteStore.open(path, synchronous="normal")
    try:
        kept = sorted(int(s[1:]) for s in await opened.desired_sessions())
        assert await opened.integrity_check() == "ok"
    finally:
        await opened.aclose()
    # a prefix survives: everything up to the last checkpoint, then whole commits up to the cut
    assert kept == list(range(len(kept)))
    if cut == "emptied":
        assert kept == list(range(5))
    else:
        assert 5 < len(kept) < 25
