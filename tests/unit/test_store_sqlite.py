"""The store on real files and a real PostgreSQL: outbox, ledger, mismatches, sessions, schema, file safety, health.

The tests of the store's interface run on both implementations (``store``, parametrized: ``sqlite``,
a real SQLite file in a temporary directory with the daemon's settings; ``postgres``, a schema of
the test's own on the session's PostgreSQL server, under the ``postgres`` marker:
tests/harness/postgres.py); the tests of the file (its mode, corruption, a full disk, group commit)
run on SQLite alone. Nothing is mocked. The store's promises checked here are the ones the daemon's
answers rely on: what ``submit`` acknowledges is committed, a full queue refuses and writes nothing,
a send is in the ledger (``unknown``, one attempt) before it leaves, a newer schema is refused untouched.
"""

from __future__ import annotations

import os
import sqlite3
import stat
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest

from supervisor.errors import StoreError
from supervisor.store import (
    DesiredSession,
    DesiredState,
    LedgerChange,
    NewMismatch,
    OpenedSession,
    Outcome,
    Resolution,
    ResolveRefused,
    RowChange,
    RowStatus,
    ServerSession,
    ServerState,
    SqliteStore,
    Submission,
    UpdateOutcome,
    value_hash,
)
from supervisor.store.model import Store
from supervisor.store.pg import PgStore
from supervisor.store.pg_schema import SHARD_KEYS
from supervisor.store.schema import SCHEMA_VERSION
from supervisor.store.shards import ALL_SHARDS, shard_of
from supervisor.store.testhooks import FULL_ENV

pytestmark = pytest.mark.anyio


@dataclass
class Backend:
    """One implementation of the store: opens it (again: a restart), reads its tables raw."""

    name: str
    where: str

    async def open(self) -> SqliteStore | PgStore:
        if self.name == "sqlite":
            return await SqliteStore.open(self.where, synchronous="normal")
        return await PgStore.open(self.where)

    async def raw(self, query: str) -> list[tuple[Any, ...]]:
        if self.name == "sqlite":
            conn = sqlite3.connect(self.where)
            try:
                return [tuple(r) for r in conn.execute(query)]
            finally:
                conn.close()
        async with await psycopg.AsyncConnection.connect(self.where) as pg:
            cur = await pg.execute(query.encode())
            return await cur.fetchall()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "sqlite":
        return Backend("sqlite", str(tmp_path / "store.sqlite3"))
    return Backend("postgres", request.getfixturevalue("pg_url"))


@pytest.fixture
async def store(backend: Backend) -> AsyncIterator[SqliteStore | PgStore]:
    opened = await backend.open()
    try:
        yield opened
    finally:
        await opened.aclose()


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    opened = await SqliteStore.open(tmp_path / "store.sqlite3", synchronous="normal")
    try:
        yield opened
    finally:
        await opened.aclose()


def test_both_implementations_have_every_method_of_the_interface() -> None:
    # mypy holds their signatures to the protocol where the daemon opens them (runtime/durable.py)
    wanted = {n for n in dir(Store) if not n.startswith("_")}
    assert wanted <= set(dir(PgStore)) and wanted <= set(dir(SqliteStore))


def sub(
    update: str, conversation: str, at: float = 1.0, sensitive: frozenset[str] = frozenset(), **values: str
) -> Submission:
    return Submission(update, "genesys:c", "wm-0", conversation, values, sensitive, at)


async def claim(
    store: SqliteStore | PgStore,
    conversation: str,
    key: str,
    before: dict[str, str] | None = None,
    at: float = 10.0,
):  # type: ignore[no-untyped-def]
    return await store.claim(
        conversation,
        before or {},
        idempotency_key=key,
        participant_id="p",
        endpoint="PATCH x",
        sent_at=at,
        limit=50,
    )


async def test_submit_coalesces_a_queued_attribute_and_refuses_past_the_depth(
    store: SqliteStore | PgStore,
) -> None:
    first = await store.submit(sub("u1", "c1", a="1", b="2"), max_depth=3)
    assert (first.accepted, first.coalesced, first.depth) == (True, (), 2)
    # same (conversation, attribute) not yet sent: last write wins, the depth does not grow
    second = await store.submit(sub("u2", "c1", a="3"), max_depth=3)
    assert (second.accepted, second.coalesced, second.depth) == (True, ("a",), 2)
    third = await store.submit(sub("u3", "c2", x="1", y="2"), max_depth=3)
    assert (third.accepted, third.coalesced, third.depth) == (False, (), 2)
    assert await store.depth("genesys:c") == 2
    # the refused submission wrote nothing: a later claim carries only what was acknowledged
    carried = await claim(store, "c1", "k1")
    assert carried is not None and {r.attribute: r.value for r in carried.rows} == {"a": "3", "b": "2"}
    assert await claim(store, "c2", "k2") is None
    outcomes = await store.update_outcomes()
    assert set(outcomes) == {"u1", "u2"}


async def test_a_send_is_in_the_ledger_unknown_with_one_attempt_before_it_leaves(
    store: SqliteStore | PgStore, backend: Backend
) -> None:
    await store.submit(sub("u1", "c1", a="1"), max_depth=50)
    before = {"a": value_hash("a", "0")}
    carried = await claim(store, "c1", "key-1", before)
    assert carried is not None and carried.entry is not None
    entry = carried.entry
    assert (entry.idempotency_key, entry.outcome, entry.attempts) == ("key-1", Outcome.UNKNOWN, 1)
    (row,) = carried.rows
    assert (row.status, row.sends, row.before_hash) == (RowStatus.SENDING, 1, value_hash("a", "0"))
    assert await store.count_attempt(entry.request_id) == 2
    # the claim is durable: a second store on the file (a restart) sees the same
    await store.aclose()
    reopened = await backend.open()
    try:
        ledger = await reopened.ledger()
        assert [(e.idempotency_key, e.outcome, e.attempts) for e in ledger.values()] == [
            ("key-1", Outcome.UNKNOWN, 2)
        ]
        assert reopened.epoch == store.epoch + 1
    finally:
        await reopened.aclose()


async def test_a_newer_write_supersedes_one_in_flight_and_answers_for_its_update(
    store: SqliteStore | PgStore, backend: Backend
) -> None:
    await store.submit(sub("u1", "c1", a="1"), max_depth=50)
    carried = await claim(store, "c1", "k1")
    assert carried is not None and carried.entry is not None
    newer = await store.submit(sub("u2", "c1", a="2"), max_depth=50)
    assert newer.coalesced == ()  # the first is sent already: nothing to coalesce with
    # the late answer of the first send does not resurrect it
    await store.record([RowChange(carried.rows[0].id, RowStatus.ACCEPTED, accepted_at=11.0)])
    live = await store.live_rows()
    assert [(r.value, r.status) for r in live] == [("2", RowStatus.PENDING)]
    second = await claim(store, "c1", "k2")
    assert second is not None and second.entry is not None
    await store.record(
        [RowChange(second.rows[0].id, RowStatus.VERIFIED)], LedgerChange(second.entry.request_id, Outcome.OK)
    )
    assert await store.update_outcomes() == {"u1": UpdateOutcome.VERIFIED, "u2": UpdateOutcome.VERIFIED}
    # settled rows keep no value
    rows = await backend.raw("SELECT value, status FROM outbox ORDER BY id")
    assert rows and all(value is None for value, _ in rows)


async def test_mismatches_are_listed_and_resolved_without_sensitive_values(
    store: SqliteStore | PgStore,
) -> None:
    await store.submit(sub("u1", "c1", sensitive=frozenset({"ssn"}), ssn="123", note="hi"), max_depth=50)
    carried = await claim(store, "c1", "k1")
    assert carried is not None and carried.entry is not None
    by_key = {r.attribute: r for r in carried.rows}
    ids = await store.record(
        [RowChange(r.id, RowStatus.FLAGGED) for r in carried.rows],
        LedgerChange(carried.entry.request_id, Outcome.PARTIAL),
        [
            NewMismatch(by_key["ssn"].id, "newer-value", None, 12.0),
            NewMismatch(by_key["note"].id, "newer-value", "other", 12.0),
        ],
    )
    listed = {m.attribute: m for m in await store.mismatches()}
    assert listed["ssn"].sensitive and listed["ssn"].expected is None and listed["ssn"].server_value is None
    assert (listed["note"].expected, listed["note"].server_value) == ("hi", "other")
    assert await store.update_outcomes() == {"u1": UpdateOutcome.FLAGGED}
    resent = await store.resolve(ids[1], Resolution.RESEND, 13.0)
    assert resent.resolution == "resend"
    assert [r.attribute for r in await store.live_rows()] == ["note"]
    kept = await store.resolve(ids[0], Resolution.ACCEPT_SERVER, 13.0)
    assert kept.resolution == "accept-server"
    assert await store.mismatches() == []
    assert len(await store.mismatches(include_resolved=True)) == 2
    with pytest.raises(ResolveRefused) as again:
        await store.resolve(ids[0], Resolution.RESEND, 14.0)
    assert again.value.kind == "resolved"
    with pytest.raises(ResolveRefused) as unknown:
        await store.resolve(999, Resolution.RESEND, 14.0)
    assert unknown.value.kind == "unknown"


async def test_resend_is_refused_when_a_newer_value_was_submitted_since(store: SqliteStore | PgStore) -> None:
    await store.submit(sub("u1", "c1", a="1"), max_depth=50)
    carried = await claim(store, "c1", "k1")
    assert carried is not None and carried.entry is not None
    (mid,) = await store.record(
        [RowChange(carried.rows[0].id, RowStatus.FLAGGED)],
        None,
        [NewMismatch(carried.rows[0].id, "newer-value", "x", 1.0)],
    )
    await store.submit(sub("u2", "c1", a="2"), max_depth=50)
    with pytest.raises(ResolveRefused) as refused:
        await store.resolve(mid, Resolution.RESEND, 2.0)
    assert refused.value.kind == "superseded"


async def test_sessions_opened_together_set_each_row_as_session_opened_does(
    store: SqliteStore | PgStore,
) -> None:
    """One transaction for several sessions gone active: each row open with its conversation and its
    platform session id (None keeps the stored one), a closed row left closed."""
    for session_id, kind in (("wm-0", "webmessaging"), ("cx-0", "agent-session"), ("wm-9", "webmessaging")):
        await store.session_opening(
            ServerSession(session_id, "genesys", kind, ServerState.OPENING, 1.0, platform_session_id="kept")
        )
    await store.session_closed("wm-9", "closed", 2.0)
    await store.sessions_opened(
        [
            OpenedSession("wm-0", "conv-0"),
            OpenedSession("cx-0", None, "rolling-1"),
            OpenedSession("wm-9", "x"),
        ]
    )
    rows = await store.server_sessions()
    assert [
        (rows[s].state, rows[s].conversation_id, rows[s].platform_session_id)
        for s in ("wm-0", "cx-0", "wm-9")
    ] == [
        (ServerState.OPEN, "conv-0", "kept"),
        (ServerState.OPEN, None, "rolling-1"),
        (ServerState.CLOSED, None, "kept"),
    ]
    await store.sessions_opened([])  # nothing to write: no transaction needed, nothing raised


async def test_desired_and_server_sessions_survive_a_reopen_and_close_wipes_the_guest_token(
    store: SqliteStore | PgStore, backend: Backend
) -> None:
    await store.set_desired(
        DesiredSession("wm-0", "genesys", DesiredState.TERMINATED, "FAIL_FAST_TRIGGER/X", 1.0)
    )
    await store.set_desired(DesiredSession("wm-1", "genesys", DesiredState.RUNNING, None, 1.0))
    await store.forget_desired("wm-1")
    opening = ServerSession("wm-0", "genesys", "webmessaging", ServerState.OPENING, 1.0, guest_token="tok")
    await store.session_opening(opening)
    await store.session_opened("wm-0", "conv-1", None)
    assert (await store.server_sessions())["wm-0"].state is ServerState.OPEN
    await store.session_closed("wm-0", "closed", 2.0)
    await store.aclose()
    reopened = await backend.open()
    try:
        desired = await reopened.desired_sessions()
        assert list(desired) == ["wm-0"] and desired["wm-0"].state is DesiredState.TERMINATED
        row = (await reopened.server_sessions())["wm-0"]
        assert (row.state, row.guest_token, row.conversation_id, row.outcome) == (
            ServerState.CLOSED,
            None,
            "conv-1",
            "closed",
        )
    finally:
        await reopened.aclose()


async def test_every_write_stores_the_shard_and_reads_take_the_shards_they_read(
    store: SqliteStore | PgStore, backend: Backend
) -> None:
    """Each write of a session's row stores ``shard_of(session id)`` (a row with no session, its
    conversation's; a coalesced row, the newest update's), and the reads by shard return exactly the
    rows of those shards, desired sessions still in the order they were added (docs/store.md, "Shards")."""
    await store.set_desired(DesiredSession("agent-4711", "cxone", DesiredState.RUNNING, None, 1.0))
    await store.add_sessions(
        [
            DesiredSession("wm-0", "genesys", DesiredState.RUNNING, None, 2.0, "api", '{"id":"wm-0"}'),
            DesiredSession("cx-1", "cxone", DesiredState.RUNNING, None, 2.0, "api", '{"id":"cx-1"}'),
        ]
    )
    for session_id in ("wm-0", "cx-1"):
        await store.session_opening(
            ServerSession(session_id, "genesys", "webmessaging", ServerState.OPENING, 3.0)
        )
    await store.submit(Submission("u1", "genesys:c", "wm-0", "conv-1", {"a": "1"}, frozenset(), 4.0), 50)
    both = {"a": "1", "b": "2"}
    await store.submit(Submission("u2", "genesys:c", None, "conv-2", both, frozenset(), 4.0), 50)
    # coalesced onto conv-2's pending 'a': the row now belongs to cx-1, and so does its shard
    await store.submit(Submission("u3", "genesys:c", "cx-1", "conv-2", {"a": "2"}, frozenset(), 5.0), 50)
    for table, key in SHARD_KEYS:
        rows = await backend.raw(f"SELECT {key}, shard FROM {table}")
        assert rows and [shard for _, shard in rows] == [shard_of(k) for k, _ in rows], table
    desired, server, live = (
        list(await store.desired_sessions()),
        await store.server_sessions(),
        await store.live_rows(),
    )
    assert desired == ["agent-4711", "wm-0", "cx-1"] and len(live) == 3
    assert {r.session_id or r.conversation_id for r in live} == {"wm-0", "cx-1", "conv-2"}
    for wanted in ({shard_of("wm-0")}, {shard_of("agent-4711"), shard_of("cx-1")}, {shard_of("conv-2")}):
        assert list(await store.desired_sessions(wanted)) == [k for k in desired if shard_of(k) in wanted]
        assert set(await store.server_sessions(wanted)) == {k for k in server if shard_of(k) in wanted}
        assert [r.id for r in await store.live_rows(wanted)] == [
            r.id for r in live if shard_of(r.session_id or r.conversation_id) in wanted
        ]
    assert await store.desired_sessions(set()) == {} and await store.server_sessions(set()) == {}
    assert await store.live_rows(frozenset()) == []
    assert list(await store.desired_sessions(ALL_SHARDS)) == desired
    assert len(await store.live_rows(ALL_SHARDS)) == 3


async def test_concurrent_acknowledgements_share_commits(sqlite_store: SqliteStore) -> None:
    store = sqlite_store
    before = store.commits
    async with anyio.create_task_group() as tg:
        for i in range(40):
            tg.start_soon(store.submit, sub(f"u{i}", f"c{i}", a="1"), 100)
    assert await store.depth("genesys:c") == 40
    assert store.commits - before < 40  # group commit: several acknowledgements per fsync


async def test_the_file_is_owner_only_and_a_wider_one_is_narrowed(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    opened = await SqliteStore.open(path, synchronous="normal")
    await opened.aclose()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    path.chmod(0o644)
    opened = await SqliteStore.open(path, synchronous="normal")
    await opened.aclose()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


async def test_a_newer_schema_is_refused_untouched_with_the_file_named(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    opened = await SqliteStore.open(path, synchronous="normal")
    await opened.aclose()
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    before = path.read_bytes()
    with pytest.raises(StoreError) as refused:
        await SqliteStore.open(path, synchronous="normal")
    assert str(path) in str(refused.value) and "newer than this session-supervisor knows" in str(
        refused.value
    )
    assert path.read_bytes() == before


async def test_a_corrupt_file_is_refused_with_one_clear_line_and_left_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    path.write_bytes(b"this is not a database, it is a shopping list\n" * 200)
    before = path.read_bytes()
    with pytest.raises(StoreError) as refused:
        await SqliteStore.open(path, synchronous="normal")
    message = str(refused.value)
    assert message.startswith(f"{path}: corrupt or not a SQLite database") and "\n" not in message
    assert path.read_bytes() == before


@pytest.mark.parametrize("make", ["directory", "missing-parent"])
async def test_an_unusable_path_is_refused_naming_it(tmp_path: Path, make: str) -> None:
    path = tmp_path / "s.sqlite3"
    if make == "directory":
        path.mkdir()
    else:
        path = tmp_path / "nowhere" / "s.sqlite3"
    with pytest.raises(StoreError) as refused:
        await SqliteStore.open(path, synchronous="normal")
    assert str(refused.value).startswith(f"{path}: ")


async def test_a_full_disk_fails_the_batch_then_recovers(tmp_path: Path) -> None:
    flag = tmp_path / "full"
    moves: list[str | None] = []
    opened = await SqliteStore.open(
        tmp_path / "s.sqlite3", synchronous="normal", environ={FULL_ENV: str(flag)}, on_health=moves.append
    )
    try:
        await opened.submit(sub("u1", "c1", a="1"), 50)
        flag.touch()
        with pytest.raises(StoreError) as full:
            await opened.submit(sub("u2", "c2", a="1"), 50)
        assert "the disk is full" in str(full.value) and opened.path in str(full.value)
        assert opened.degraded is not None
        # reads still answer; nothing of the refused submission was kept
        assert await opened.depth("genesys:c") == 1
        flag.unlink()
        await opened.submit(sub("u3", "c3", a="1"), 50)
        assert opened.degraded is None
        assert moves == [moves[0], None] and moves[0] is not None and "disk is full" in moves[0]
        assert set(await opened.update_outcomes()) == {"u1", "u3"}
    finally:
        await opened.aclose()


async def test_integrity_check_is_ok_after_use(store: SqliteStore | PgStore) -> None:
    await store.submit(sub("u1", "c1", a="1"), 50)
    assert await store.integrity_check() == "ok"


async def test_meta_records_by_plain_prefix_and_the_stores_own_keys_refused(
    store: SqliteStore | PgStore, backend: Backend
) -> None:
    await store.write_meta({"pacer.a_b": "1", "pacer.axb": "2", "other": "3"})
    await store.write_meta({"pacer.a_b": "4"})  # replaced
    assert await store.read_meta("pacer.a_") == {"pacer.a_b": "4"}  # "_" is no wildcard
    assert await store.read_meta("pacer.") == {"pacer.a_b": "4", "pacer.axb": "2"}
    with pytest.raises(ValueError, match="store's own"):
        await store.write_meta({"epoch": "99"})
    await store.aclose()
    reopened = await backend.open()
    try:
        assert await reopened.read_meta("pacer.") == {"pacer.a_b": "4", "pacer.axb": "2"}
    finally:
        await reopened.aclose()
