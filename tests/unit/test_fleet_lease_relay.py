"""PgLeases tells its holder off the renewal loop (supervisor/fleet/leases.py, ``serve``): a holder
busy with what it was told (after a database restart, a store that answers slowly) never holds a
renewal back, so this member's own leases do not expire for a peer to take. On the real PostgreSQL
server (``-m postgres``), the member's boot-time clock and its sleeps driven by the test.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import anyio
import pytest

from supervisor.fleet.leases import PgLeases
from supervisor.runtime.leases import Lease
from supervisor.store.pg_schema import prepare
from tests.harness.postgres import Raw
from tests.harness.waits import wait_until

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

RENEW_S = 2.0


@pytest.fixture
async def raw(pg_raw: Raw) -> Raw:
    """The second connection, the fleet's tables made."""
    await prepare(pg_raw)
    return pg_raw


class SlowHolder:
    """Told at once until ``busy``; then every word waits for ``done``."""

    def __init__(self) -> None:
        self.busy = False
        self.done = anyio.Event()
        self.acquired_: list[list[int]] = []
        self.lost_: list[list[int]] = []

    async def acquired(self, leases: Sequence[Lease]) -> None:
        if self.busy:
            await self.done.wait()
        self.acquired_.append([lease.shard for lease in leases])

    async def lost(self, shards: Collection[int]) -> None:
        if self.busy:
            await self.done.wait()
        self.lost_.append(sorted(shards))


async def test_a_busy_holder_never_holds_the_renewals_back(raw: Raw, pg_dsn: str) -> None:
    now = [1000.0]
    steps = anyio.Event()

    async def sleep(seconds: float) -> None:
        # the loop's sleep: returns once the test lets the clock move on by it
        await steps.wait()
        now[0] += seconds

    leases = PgLeases(
        pg_dsn,
        member="a",
        host="a.example",
        digest="d" * 64,
        lease_s=60.0,
        renew_s=RENEW_S,
        clock=lambda: now[0],
        sleep=sleep,
    )
    holder = SlowHolder()
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(leases.serve, holder)
            assert len(leases.owned()) == 256 and holder.acquired_ == [list(range(256))]
            # an operator frees shard 7: the next renewal loses it and takes it back, and the
            # holder, busy now, is told neither for the rest of the test
            await raw.execute("UPDATE shard_leases SET owner = NULL, expires_at = NULL WHERE shard = 7")
            holder.busy = True
            renewals = leases.renewals
            steps.set()
            await wait_until(lambda: leases.renewals >= renewals + 5)
            # the renewals went on past the words the holder has not heard yet: every lease held
            # here, each one's local deadline moved on with the clock
            assert holder.lost_ == [] and holder.acquired_ == [list(range(256))]
            assert len(leases.owned()) == 256
            assert all(
                lease.deadline is not None and lease.deadline > now[0] for lease in leases.owned().values()
            )
            cur = await raw.execute("SELECT count(*) FROM shard_leases WHERE owner = 'a'")
            assert await cur.fetchone() == (256,)
            # the holder free again: told both, in order
            holder.done.set()
            await wait_until(lambda: len(holder.acquired_) == 2)
            assert holder.lost_ == [[7]] and holder.acquired_[1] == [7]
            tg.cancel_scope.cancel()
    finally:
        await leases.aclose()
