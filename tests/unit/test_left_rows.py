"""The rows of the sessions a stop hands over, group-committed (supervisor/runtime/left_rows.py), on
the real PostgreSQL with the store's lease fence (``-m postgres``): the rows that arrive while one
transaction is being written go together in the next, every caller returns once its row is
committed, and a shard lost meanwhile costs only its own rows."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest

from supervisor.runtime.left_rows import LeftRows
from supervisor.store import ServerSession, ServerState
from supervisor.store.model import Fence, LeftSession
from supervisor.store.pg import PgStore
from supervisor.store.shards import shard_of
from tests.harness.postgres import Raw

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

#: sessions of two shards
SESSIONS = [f"wm-{i}" for i in range(40)]
KEPT = shard_of(SESSIONS[0])
LOST = next(shard_of(s) for s in SESSIONS if shard_of(s) != KEPT)
MINE = [s for s in SESSIONS if shard_of(s) in (KEPT, LOST)]


class Held:
    """The leases member m1 believes it holds: every shard at epoch 3."""

    def fence_for(self, shard: int) -> Fence | None:
        return Fence("m1", 3)


@pytest.fixture
async def store(pg_url: str, pg_raw: Raw) -> AsyncIterator[PgStore]:
    made = await PgStore.open(pg_url)  # the schema
    await made.aclose()
    await pg_raw.execute(
        "UPDATE shard_leases SET owner = 'm1', epoch = 3, "
        "expires_at = extract(epoch from clock_timestamp()) + 60 WHERE shard = ANY(%s)",
        ([KEPT, LOST],),
    )
    opened = await PgStore.open(pg_url, fences=Held())
    for session in MINE:
        await opened.session_opening(
            ServerSession(session, "genesys", "webmessaging", ServerState.OPEN, 1.0, guest_token="t")
        )
    try:
        yield opened
    finally:
        await opened.aclose()


async def left_rows(pg_raw: Raw) -> dict[str, tuple[object, ...]]:
    cur = await pg_raw.execute("SELECT session_id, left_at, epoch FROM server_sessions")
    return {str(r[0]): (r[1], r[2]) for r in await cur.fetchall()}


async def write_all(rows: LeftRows, sessions: list[str]) -> None:
    async with anyio.create_task_group() as tg:
        for i, session in enumerate(sessions):
            tg.start_soon(rows.write, LeftSession(session, 100.0 + i, None))


async def test_rows_arriving_together_are_written_in_one_transaction_and_each_caller_sees_its_own(
    store: PgStore, pg_raw: Raw
) -> None:
    rows = LeftRows(store)
    await write_all(rows, MINE)
    # every row joined the group of the first caller, which lets the loop turn once before it commits
    # (supervisor/runtime/group_commit.py): one transaction for all
    assert rows.transactions == 1
    written = await left_rows(pg_raw)
    assert written == {session: (100.0 + i, 3) for i, session in enumerate(MINE)}


async def test_a_shard_lost_meanwhile_costs_only_its_own_rows(store: PgStore, pg_raw: Raw) -> None:
    # another member took LOST over (its acquisition: a new owner and epoch)
    await pg_raw.execute("UPDATE shard_leases SET owner = 'm2', epoch = 4 WHERE shard = %s", (LOST,))
    rows = LeftRows(store)
    await write_all(rows, MINE)
    written = await left_rows(pg_raw)
    assert {s for s, (left, _) in written.items() if left is not None} == {
        s for s in MINE if shard_of(s) == KEPT
    }
    assert all(epoch == 3 for s, (_, epoch) in written.items() if shard_of(s) == KEPT)
    # the batch with LOST's rows refused, written again without them
    assert rows.transactions == 2
