"""The hard tenant quota (supervisor/fleet/quota.py) on a real PostgreSQL server (``-m postgres``): a burst, then
the rate, shared by every member deciding on the same store; tenants apart; the table unlogged and the decision's
commit asynchronous; a database away admits (and says so)."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from supervisor.fleet.quota import DECIDE_SQL, TenantQuota
from supervisor.store.pg import PgStore
from tests.harness.postgres import url_of

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


@pytest.fixture
async def store_dsn(pg_dsn: str) -> str:
    """A schema the store has migrated (migration 7 makes ``tenant_quota``)."""
    store = await PgStore.open(url_of(pg_dsn))
    await store.aclose()
    return pg_dsn


async def test_a_burst_then_the_rate_shared_by_every_member(store_dsn: str) -> None:
    # one attempt every 10 s, 3 at once (slow enough that the test's own pace never matters)
    member_a = TenantQuota(store_dsn, rate=0.1, burst=3)
    member_b = TenantQuota(store_dsn, rate=0.1, burst=3)
    try:
        assert [await member_a.take("acme"), await member_b.take("acme"), await member_a.take("acme")] == [
            0.0,
            0.0,
            0.0,
        ]
        # the burst is the tenant's, not each member's: the fourth is refused on both
        wait_b = await member_b.take("acme")
        wait_a = await member_a.take("acme")
        assert 9.0 < wait_b <= 10.0 and 9.0 < wait_a <= wait_b
        # another tenant has its own
        assert await member_b.take("globex") == 0.0
        assert member_a.decisions + member_b.decisions == 6
    finally:
        await member_a.aclose()
        await member_b.aclose()


async def test_the_table_is_unlogged_and_the_decision_commits_without_waiting_for_the_wal(
    store_dsn: str,
) -> None:
    async with await psycopg.AsyncConnection.connect(store_dsn) as conn:
        cur = await conn.execute("SELECT relpersistence FROM pg_class WHERE relname = 'tenant_quota'")
        assert await cur.fetchone() == ("u",)  # UNLOGGED
        params = {"tenant": "acme", "interval": 0.5, "tolerance": 0.0}
        await conn.execute(DECIDE_SQL, params)
        cur = await conn.execute("SHOW synchronous_commit")
        assert await cur.fetchone() == ("off",)  # for this transaction only (SET LOCAL)
        await conn.commit()
        cur = await conn.execute("SHOW synchronous_commit")
        assert await cur.fetchone() == ("on",)


async def test_a_database_away_admits_and_says_so_once(tmp_path: Path) -> None:
    said: list[str] = []
    quota = TenantQuota(
        f"host={tmp_path} dbname=x user=u connect_timeout=2",
        rate=1.0,
        burst=1,
        password="pw-s3cret",
        warn=said.append,
    )
    assert [await quota.take("acme"), await quota.take("acme")] == [0.0, 0.0]
    assert quota.unchecked == 2 and quota.decisions == 0
    assert quota.degraded is not None and "cannot reach the database" in quota.degraded
    assert len(said) == 1 and "admitted unchecked" in said[0] and "pw-s3cret" not in said[0]


@pytest.mark.parametrize(("rate", "burst"), [(0.0, 1), (-1.0, 1), (float("inf"), 1), (1.0, 0)])
def test_a_quota_needs_a_rate_and_a_burst(rate: float, burst: int) -> None:
    with pytest.raises(ValueError, match="rate > 0 and a burst >= 1"):
        TenantQuota("host=/nowhere", rate=rate, burst=burst)
