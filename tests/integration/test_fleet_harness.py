"""The fleet harness's database side (tests/harness/fleet_run.py) on the real PostgreSQL (``-m postgres``):
the write audit records every write of a fenced row with its epoch on the database's clock, the lease
audit and ``shard_leases`` read back as the checks need them, and reads work again after a restart.
The fleet itself runs in the acceptance scenario (tests/harness/fleet_scenario.py; its full form is
tests/bench/bench_fleet.py)."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from supervisor.config import load_config
from supervisor.store.pg import PgStore
from supervisor.store.shards import shard_of
from tests.harness.fleet_invariants import LeaseTimeline, stale_fenced_writes
from tests.harness.fleet_run import FleetDatabase, FleetSpec, member_config
from tests.harness.postgres import PostgresServer, start_embedded

pytestmark = [pytest.mark.integration, pytest.mark.anyio, pytest.mark.postgres]


@pytest.fixture
def fleet_db(pg_server: PostgresServer) -> Iterator[FleetDatabase]:
    db = FleetDatabase.on(pg_server, f"fleet_{secrets.token_hex(4)}")
    try:
        yield db
    finally:
        with psycopg.connect(pg_server.dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {db.schema} CASCADE")
            conn.execute(f"DROP SCHEMA IF EXISTS {db.audit} CASCADE")


async def test_the_write_audit_records_each_fenced_write_with_its_epoch_and_time(
    fleet_db: FleetDatabase,
) -> None:
    assert not fleet_db.install_write_audit()  # no store's tables yet: nothing to audit
    store = await PgStore.open(fleet_db.url)
    await store.aclose()
    assert fleet_db.has_fleet_tables() and fleet_db.install_write_audit()
    shard = shard_of("wm-1")
    with psycopg.connect(fleet_db.dsn, autocommit=True) as conn:
        before = float(conn.execute("SELECT extract(epoch from clock_timestamp())").fetchone()[0])  # type: ignore[index]
        conn.execute(
            "INSERT INTO lease_acquisitions (shard, member, epoch, previous_owner, reason, at) "
            "VALUES (%s, 'm1', 1, NULL, 'free', %s), (%s, 'm2', 2, 'm1', 'expired', %s)",
            (shard, before - 10.0, shard, before - 1.0),
        )
        conn.execute(
            "UPDATE shard_leases SET owner = 'm2', epoch = 2, "
            "expires_at = extract(epoch from clock_timestamp()) + 10 WHERE shard = %s",
            (shard,),
        )
        conn.execute(
            "INSERT INTO server_sessions (session_id, platform, kind, state, guest_token, opened_at, epoch) "
            "VALUES ('wm-1', 'genesys', 'webmessaging', 'open', 'token-1', %s, 1)",
            (before,),
        )
        conn.execute("UPDATE server_sessions SET epoch = 2 WHERE session_id = 'wm-1'")
    writes = fleet_db.row_writes()
    assert [(w.table, w.session, w.epoch) for w in writes] == [
        ("server_sessions", "wm-1", 1),
        ("server_sessions", "wm-1", 2),
    ]
    assert all(w.at >= before for w in writes)
    acquisitions = fleet_db.acquisitions()
    assert [(a.member, a.epoch, a.previous_owner) for a in acquisitions] == [("m1", 1, None), ("m2", 2, "m1")]
    # the write at epoch 1 came after m2 took the shard at epoch 2: the check sees it
    stale = stale_fenced_writes(writes, LeaseTimeline(acquisitions))
    assert stale.violations == 1 and "epoch 1" in stale.examples[0]
    leases = fleet_db.leases()
    assert leases[shard][:2] == ("m2", 2) and leases[(shard + 1) % 256][0] is None
    assert fleet_db.guest_tokens() == [("wm-1", "token-1")]


def test_reads_work_again_after_the_database_restarts() -> None:
    server = start_embedded()
    try:
        db = FleetDatabase.on(server, "fleet")
        assert db.now() > 0
        db.stop()
        with pytest.raises(psycopg.OperationalError):
            db.now()
        db.start_again()
        assert db.now() > 0
    finally:
        server.remove()


def test_each_member_is_configured_with_the_fleets_admission_rate_which_its_share_divides(
    tmp_path: Path,
) -> None:
    # the daemon paces at owned/256 of the configured rates (supervisor/fleet/admission.py): the
    # configuration carries the fleet's rate, not a member's part of it (divided twice otherwise)
    spec = FleetSpec(members=3, web_messaging=2, cxone=1, notifications=1, admission_rate=100.0)
    genesys = {k: f"http://127.0.0.1:9/{k}" for k in ("login", "api")}
    genesys |= {k: f"ws://127.0.0.1:9/{k}" for k in ("webmessaging", "streaming")}
    path = member_config(
        spec,
        "m2",
        tmp_path / "m2",
        genesys=genesys,
        cxone={"auth": "http://127.0.0.1:9/auth"},
        store_url="postgresql://fleet@localhost/fleet",
    )
    assert load_config(path).admission.initial_rate == 100.0
