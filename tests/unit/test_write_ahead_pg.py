"""A fleet member's write-ahead of the sessions it starts together, committed in groups
(supervisor/runtime/write_ahead.py), on a real PostgreSQL (``-m postgres``): a burst of sessions costs a
few transactions, not two each, every row carries its shard's epoch, and a group one of whose shards
was lost meanwhile is written row by row so the others' rows are kept."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import psycopg
import pytest

from supervisor.runtime.write_ahead import WriteAhead
from supervisor.store import DesiredSession, DesiredState, ServerSession, ServerState
from supervisor.store.pg import PgStore
from supervisor.store.shards import shard_of
from tests.harness.postgres import url_of
from tests.harness.shard_leases import HeldShards

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

SESSIONS = [f"wm-{i}" for i in range(60)]


@pytest.fixture
async def store(pg_dsn: str) -> AsyncIterator[tuple[PgStore, HeldShards]]:
    held = HeldShards()
    made = await PgStore.open(url_of(pg_dsn))
    await made.aclose()
    shards = sorted({shard_of(s) for s in SESSIONS})
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as pg_raw:
        await pg_raw.execute(
            "UPDATE shard_leases SET owner = 'm1', epoch = 4, "
            "expires_at = extract(epoch from clock_timestamp()) + 60 WHERE shard = ANY(%s)",
            (shards,),
        )
    held.epochs.update(dict.fromkeys(shards, 4))
    opened = await PgStore.open(url_of(pg_dsn), fences=held)
    try:
        yield opened, held
    finally:
        await opened.aclose()


def rows_of(session_id: str) -> tuple[DesiredSession, ServerSession]:
    return (
        DesiredSession(session_id, "genesys", DesiredState.RUNNING, None, 1.0),
        ServerSession(
            session_id, "genesys", "webmessaging", ServerState.OPEN, 1.0, guest_token=f"tok-{session_id}"
        ),
    )


async def test_sessions_started_together_are_written_ahead_in_a_few_transactions(
    store: tuple[PgStore, HeldShards],
) -> None:
    pg, _held = store
    write_ahead = WriteAhead(pg)
    before = pg.commits
    async with anyio.create_task_group() as tg:
        for session_id in SESSIONS:
            tg.start_soon(write_ahead.write, *rows_of(session_id))
    # the first alone, then everyone who arrived while it was written (one by one: 120 transactions)
    assert pg.commits - before <= 3
    assert write_ahead.split == 0
    server = await pg.server_sessions()
    desired = await pg.desired_sessions()
    assert {s: server[s].guest_token for s in SESSIONS} == {s: f"tok-{s}" for s in SESSIONS}
    assert all(desired[s].state is DesiredState.RUNNING for s in SESSIONS)


async def test_a_group_with_a_lost_shard_keeps_the_other_shards_rows(
    store: tuple[PgStore, HeldShards],
) -> None:
    pg, held = store
    lost = shard_of(SESSIONS[0])
    del held.epochs[lost]  # given back meanwhile: its rows are refused (LeaseLost)
    write_ahead = WriteAhead(pg)
    async with anyio.create_task_group() as tg:
        for session_id in SESSIONS:
            tg.start_soon(write_ahead.write, *rows_of(session_id))
    assert write_ahead.split >= 1
    server = await pg.server_sessions()
    kept = {s for s in SESSIONS if shard_of(s) != lost}
    assert kept <= server.keys()
    assert not {s for s in SESSIONS if shard_of(s) == lost} & server.keys()
