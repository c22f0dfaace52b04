"""The store's lease fence on a real PostgreSQL (``-m postgres``; supervisor/store/sql.py, ``fence``).

A fleet member's own-state writes begin with ``SELECT ... FOR SHARE`` on the shard's lease row and carry
its epoch; after another member's acquisition (an UPDATE of ``shard_leases`` in a second connection, as
the fleet's leases make it) the write raises ``LeaseLost`` and writes nothing; a write past its fence
keeps an acquisition (``FOR UPDATE SKIP LOCKED``) off the shard until it commits; and a connection
left idle inside such a transaction (a stopped member) is ended by the server, which frees the shard.
The race is made deterministic by driving one write's body statement by statement in an explicit
transaction, with the acquisition run between two of its statements.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import psycopg
import pytest

from supervisor.errors import LeaseLost
from supervisor.runtime.opened_rows import OpenedRows
from supervisor.store import (
    DesiredSession,
    DesiredState,
    LedgerChange,
    OpenedSession,
    Outcome,
    RowChange,
    RowStatus,
    ServerSession,
    ServerState,
    Submission,
    pg_sql,
)
from supervisor.store.pg import PgStore, connect, execute
from supervisor.store.shards import shard_of
from supervisor.store.sql import FENCE_SQL, POSTGRES, Body, Tx, one
from supervisor.store.sql_sessions import session_closed
from tests.harness.postgres import Raw
from tests.harness.shard_leases import HeldShards

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

SESSION = "wm-fenced"
SHARD = shard_of(SESSION)
#: another shard, free, that an acquisition takes meanwhile
OTHER = (SHARD + 1) % 256
#: what the acquisition of a fleet member runs: the shards it may take, skipping those a write holds
ACQUIRE = "SELECT shard FROM shard_leases WHERE shard = ANY(%s) ORDER BY shard FOR UPDATE SKIP LOCKED"


@pytest.fixture
async def held(pg_url: str, pg_raw: Raw) -> HeldShards:
    """Member m1 holds SHARD at epoch 3 (in the table and in its own leases); the schema made."""
    store = await PgStore.open(pg_url)
    await store.aclose()
    await grant(pg_raw, SHARD, "m1", 3)
    member = HeldShards("m1")
    member.epochs[SHARD] = 3
    return member


@pytest.fixture
async def store(pg_url: str, held: HeldShards) -> AsyncIterator[PgStore]:
    opened = await PgStore.open(pg_url, fences=held)
    try:
        yield opened
    finally:
        await opened.aclose()


async def grant(pg_raw: Raw, shard: int, owner: str, epoch: int, seconds: float = 60.0) -> None:
    """An acquisition (or renewal) as the fleet's leases write it: owner, epoch, expiry by the database's clock."""
    await pg_raw.execute(
        "UPDATE shard_leases SET owner = %s, epoch = %s, expires_at = extract(epoch from clock_timestamp()) + %s "
        "WHERE shard = %s",
        (owner, epoch, seconds, shard),
    )


async def fetch(pg_raw: Raw, query: str, *params: object) -> list[tuple[object, ...]]:
    cur = await pg_raw.execute(query.encode(), params)
    return await cur.fetchall()


async def finish(conn: Raw, body: Body[None], answer: object) -> None:
    """The rest of a body whose last statement was answered ``answer`` (``run_async``'s loop, resumed)."""
    try:
        while True:
            answer = await execute(conn, body.send(answer))
    except StopIteration:
        return


def opening() -> ServerSession:
    return ServerSession(SESSION, "genesys", "webmessaging", ServerState.OPENING, 1.0, guest_token="tok")


def submission(update: str, **values: str) -> Submission:
    return Submission(update, "genesys:c", SESSION, "conv-1", values or {"a": "1"}, frozenset(), 2.0)


async def claim(store: PgStore, key: str) -> object:
    return await store.claim(
        "conv-1", {}, idempotency_key=key, participant_id="p", endpoint="PATCH x", sent_at=10.0, limit=50
    )


async def test_a_write_with_the_lease_held_commits_and_stamps_the_epoch(
    store: PgStore, held: HeldShards, pg_raw: Raw
) -> None:
    await store.session_opening(opening())
    await store.session_opened(SESSION, "conv-1", None)
    assert await fetch(pg_raw, "SELECT state, epoch FROM server_sessions") == [("open", 3)]
    # a submission is a command (any member takes it): its row carries no epoch until the owner sends it
    await store.submit(submission("u1"), max_depth=10)
    assert await fetch(pg_raw, "SELECT status, epoch FROM outbox") == [("pending", None)]
    taken = await claim(store, "k1")
    assert taken is not None
    assert await fetch(pg_raw, "SELECT status, epoch FROM outbox") == [("sending", 3)]
    assert await store.count_attempt(1) == 2
    await store.record([RowChange(1, RowStatus.ACCEPTED, accepted_at=11.0)])
    await store.record(
        ledger=LedgerChange(1, Outcome.OK, answered_at=11.0)
    )  # the entry alone: its rows' shard
    assert await fetch(pg_raw, "SELECT status, epoch FROM outbox") == [("accepted", 3)]
    assert await fetch(pg_raw, "SELECT outcome FROM ledger") == [("ok",)]
    # lost and acquired again by the same member at a later epoch: the next write carries that one
    await grant(pg_raw, SHARD, "m1", 5)
    held.epochs[SHARD] = 5
    await store.session_left(SESSION, 20.0, None)
    assert await fetch(pg_raw, "SELECT state, left_at, epoch FROM server_sessions") == [("open", 20.0, 5)]


async def test_after_another_members_acquisition_a_write_raises_lease_lost_and_writes_nothing(
    store: PgStore, pg_raw: Raw
) -> None:
    await store.session_opening(opening())
    await store.submit(submission("u1"), max_depth=10)
    assert await claim(store, "k1") is not None  # row 1 is being sent, at epoch 3
    await store.submit(submission("u2", b="2"), max_depth=10)  # row 2 queued
    # m2 takes the shard over (its acquisition bumps the epoch), in another connection
    await grant(pg_raw, SHARD, "m2", 4)
    with pytest.raises(LeaseLost) as lost:
        await store.session_closed(SESSION, "closed", 5.0)
    assert (lost.value.shard, lost.value.epoch) == (SHARD, 3)
    assert f"shard {SHARD}" in str(lost.value) and "m1 at epoch 3" in str(lost.value)
    assert await fetch(pg_raw, "SELECT state, guest_token, epoch FROM server_sessions") == [
        ("opening", "tok", 3)
    ]
    # a send's and a verification's moves: refused, the rows as they were
    with pytest.raises(LeaseLost):
        await claim(store, "k2")
    with pytest.raises(LeaseLost):
        await store.record([RowChange(1, RowStatus.ACCEPTED, accepted_at=11.0)])
    with pytest.raises(LeaseLost):
        await store.record(ledger=LedgerChange(1, Outcome.OK, answered_at=11.0))
    with pytest.raises(LeaseLost):
        await store.count_attempt(1)
    assert await fetch(pg_raw, "SELECT id, status, epoch FROM outbox ORDER BY id") == [
        (1, "sending", 3),
        (2, "pending", None),
    ]
    assert await fetch(pg_raw, "SELECT request_id, outcome, attempts FROM ledger") == [(1, "unknown", 1)]
    desired = DesiredSession(SESSION, "genesys", DesiredState.TERMINATED, "x", 6.0)
    with pytest.raises(LeaseLost):
        await store.set_desired(desired)
    assert await fetch(pg_raw, "SELECT COUNT(*) FROM desired_sessions") == [(0,)]
    # commands any member carries out are not fenced: ctl stop, a submission
    await store.set_desired(desired, fenced=False)
    await store.submit(submission("u3", c="3"), max_depth=10)
    assert await fetch(pg_raw, "SELECT state FROM desired_sessions") == [("terminated",)]
    assert await fetch(pg_raw, "SELECT COUNT(*) FROM outbox") == [(3,)]
    # a lost lease is not the database's health
    assert store.degraded is None


async def test_an_expired_lease_or_a_shard_not_held_here_refuses_the_write(
    store: PgStore, held: HeldShards, pg_raw: Raw
) -> None:
    await store.session_opening(opening())
    # still m1's at epoch 3 in the table, but expired by the database's clock
    await grant(pg_raw, SHARD, "m1", 3, seconds=-1.0)
    with pytest.raises(LeaseLost):
        await store.session_opened(SESSION, "conv-1", None)
    # valid in the table, but this member's leases no longer hold it (it self-fenced): refused before any SQL
    await grant(pg_raw, SHARD, "m1", 3)
    del held.epochs[SHARD]
    with pytest.raises(LeaseLost) as lost:
        await store.session_opened(SESSION, "conv-1", None)
    assert (lost.value.shard, lost.value.epoch) == (SHARD, 0)
    assert await fetch(pg_raw, "SELECT state FROM server_sessions") == [("opening",)]


async def test_without_a_fence_source_the_writes_are_not_fenced_and_carry_no_epoch(
    pg_url: str, held: HeldShards, pg_raw: Raw
) -> None:
    # one host, or store copy: PgStore(fences=None); the shard is m2's in the table
    await grant(pg_raw, SHARD, "m2", 9)
    store = await PgStore.open(pg_url)
    try:
        await store.session_opening(opening())
        await store.session_closed(SESSION, "closed", 5.0)
    finally:
        await store.aclose()
    assert await fetch(pg_raw, "SELECT state, epoch FROM server_sessions") == [("closed", None)]


async def test_a_write_past_its_fence_keeps_an_acquisition_off_the_shard_until_it_commits(
    pg_dsn: str, store: PgStore, held: HeldShards, pg_raw: Raw
) -> None:
    await store.session_opening(opening())
    writer = await connect(pg_dsn)
    try:
        body = session_closed(Tx(POSTGRES, held, store.epoch), SESSION, "closed", 5.0)
        async with writer.transaction():
            query = next(body)
            assert query.sql == FENCE_SQL
            answer = await execute(writer, query)  # past its fence: the lease row is held FOR SHARE
            assert answer == (3,)
            async with pg_raw.transaction():
                # another member's acquisition skips the shard the write holds, takes the free one
                assert await fetch(pg_raw, ACQUIRE, [SHARD, OTHER]) == [(OTHER,)]
            await finish(writer, body, answer)
        # committed: the row carries the epoch it was written at, and the shard can be acquired now
        assert await fetch(pg_raw, "SELECT state, epoch FROM server_sessions") == [("closed", 3)]
        async with pg_raw.transaction():
            assert await fetch(pg_raw, ACQUIRE, [SHARD, OTHER]) == [(SHARD,), (OTHER,)]
    finally:
        await writer.close()


async def test_the_stores_connection_ends_a_transaction_left_idle_and_frees_its_shard(
    pg_dsn: str, store: PgStore, pg_raw: Raw
) -> None:
    setting = await store._call(lambda tx: one("SHOW idle_in_transaction_session_timeout"))
    assert setting == ("5s",)
    # a member stopped (SIGSTOP) inside a fenced write: its transaction idles holding the lease row
    stopped = await connect(pg_dsn, idle_in_transaction_s=0.2)
    try:
        await stopped.execute("BEGIN")
        cur = await stopped.execute(POSTGRES.text(FENCE_SQL).encode(), (SHARD, "m1", 3))
        assert await cur.fetchone() == (3,)
        with anyio.fail_after(30):
            async with pg_raw.transaction():
                # waits on the row lock until the server ends the idle transaction, then takes the shard
                assert await fetch(
                    pg_raw, "SELECT shard FROM shard_leases WHERE shard = %s FOR UPDATE", SHARD
                ) == [(SHARD,)]
                await grant(pg_raw, SHARD, "m2", 4)
        with pytest.raises(psycopg.errors.IdleInTransactionSessionTimeout):
            await stopped.execute("SELECT 1")
    finally:
        await stopped.close()
    assert await fetch(pg_raw, "SELECT owner, epoch FROM shard_leases WHERE shard = %s", SHARD) == [("m2", 4)]


async def test_a_command_run_in_the_callers_transaction_is_not_fenced(
    pg_dsn: str, held: HeldShards, pg_raw: Raw
) -> None:
    # another member's shard: a ctl stop, an AddSession and a RemoveSession forwarded from here, each
    # committed with what the caller runs beside it (pg_sql: the store's own bodies, no fence)
    await grant(pg_raw, SHARD, "m2", 4)
    conn = await connect(pg_dsn)

    async def forget_then_fail() -> None:
        async with conn.transaction():
            await pg_sql.forget_desired(conn, SESSION)
            await conn.execute(b"SELECT 1/0")  # the caller's own statement fails

    try:
        added = DesiredSession(SESSION, "genesys", DesiredState.RUNNING, None, 1.0, origin="api", spec="{}")
        stopped = DesiredSession(SESSION, "genesys", DesiredState.STOPPED, "ctl stop", 2.0)
        async with conn.transaction():
            await pg_sql.add_sessions(conn, [added])
            await pg_sql.set_desired(conn, stopped)
        assert await fetch(pg_raw, "SELECT state, reason, origin FROM desired_sessions") == [
            ("stopped", "ctl stop", "api")
        ]
        with pytest.raises(psycopg.errors.DivisionByZero):
            await forget_then_fail()
        # the whole transaction undone: the row is still there
        assert await fetch(pg_raw, "SELECT COUNT(*) FROM desired_sessions") == [(1,)]
    finally:
        await conn.close()


async def test_sessions_opened_together_are_one_fenced_write_and_a_lost_shard_costs_only_its_rows(
    store: PgStore, held: HeldShards, pg_raw: Raw
) -> None:
    """``sessions_opened``: every row stamped with its shard's epoch in one transaction; a shard among
    them lost refuses the whole write (LeaseLost, nothing written), and OpenedRows, the runtime's group
    commit of them (supervisor/runtime/opened_rows.py), then writes the others row by row."""
    other = next(f"wm-{i}" for i in range(1000) if shard_of(f"wm-{i}") == OTHER)
    await grant(pg_raw, OTHER, "m1", 7)
    held.epochs[OTHER] = 7
    for session_id in (SESSION, other):
        await store.session_opening(
            ServerSession(session_id, "genesys", "webmessaging", ServerState.OPENING, 1.0, guest_token="t")
        )
    await store.sessions_opened([OpenedSession(SESSION, "conv-1"), OpenedSession(other, "conv-2")])
    assert await fetch(
        pg_raw, "SELECT session_id, state, conversation_id, epoch FROM server_sessions ORDER BY epoch"
    ) == [(SESSION, "open", "conv-1", 3), (other, "open", "conv-2", 7)]
    await pg_raw.execute("UPDATE server_sessions SET state = 'opening', conversation_id = NULL")
    await grant(pg_raw, OTHER, "m2", 8)  # another member took the second shard
    with pytest.raises(LeaseLost):
        await store.sessions_opened([OpenedSession(SESSION, "conv-1"), OpenedSession(other, "conv-2")])
    assert await fetch(pg_raw, "SELECT DISTINCT state FROM server_sessions") == [("opening",)]
    # a group of both (writes started in one turn of the loop go together): refused whole, then written
    # row by row
    rows = OpenedRows(store)
    async with anyio.create_task_group() as tg:
        for session_id in (SESSION, other):
            tg.start_soon(rows.write, OpenedSession(session_id))
    assert rows.groups == 1 and rows.split == 1
    assert await fetch(pg_raw, "SELECT session_id, state FROM server_sessions ORDER BY session_id") == sorted(
        [(SESSION, "open"), (other, "opening")]
    )
