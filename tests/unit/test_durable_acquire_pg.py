"""A fleet member's shard is run only with its rows (supervisor/runtime/durable.py, ``acquire``), on a
real PostgreSQL (``-m postgres``).

The store's connection killed (``pg_terminate_backend``, as a failover or an administrator does) just
as a shard is acquired: the read is retried on a new connection, so a Web Messaging guest resumes by
its kept token instead of starting a new conversation. A shard whose lease ended while its rows
could not be read is not run here at all; one host (no fences) runs from the configuration.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from psycopg.conninfo import make_conninfo

from supervisor.config import parse_config
from supervisor.runtime import learned_limits
from supervisor.runtime.durable import Durable
from supervisor.runtime.supervisor import session_table
from supervisor.runtime.wiring import Wiring
from supervisor.store import ServerSession, ServerState
from supervisor.store.pg import PgStore
from supervisor.store.shards import shard_of
from supervisor.vocabulary import GENESYS_WEBMESSAGING
from tests.harness.postgres import Raw, url_of
from tests.harness.shard_leases import HeldShards

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

SESSION = "wm-acquired"
SHARD = shard_of(SESSION)
#: the store's connections carry this name, so the test kills theirs and no other
APP = "durable-acquire"


@pytest.fixture
async def held(pg_dsn: str, pg_raw: Raw) -> HeldShards:
    """Member m1 holds SHARD at epoch 3 (in the table and in its leases); the schema made."""
    store = await PgStore.open(url_of(pg_dsn))
    await store.aclose()
    await pg_raw.execute(
        "UPDATE shard_leases SET owner = 'm1', epoch = 3, "
        "expires_at = extract(epoch from clock_timestamp()) + 60 WHERE shard = %s",
        (SHARD,),
    )
    member = HeldShards("m1")
    member.epochs[SHARD] = 3
    return member


async def open_durable(wiring: Wiring, fences: HeldShards | None) -> Durable:
    return await Durable.open(
        wiring.config,
        sessions=session_table(wiring),
        wiring=wiring,
        environ={},
        bus=wiring.bus,
        clock=wiring.clock,
        background=False,
        fences=fences,
    )


def config_text(pg_dsn: str) -> str:
    return f'[store]\nurl = "{url_of(make_conninfo(pg_dsn, application_name=APP))}"\n'


async def kill_store_connection(pg_raw: Raw) -> int:
    cur = await pg_raw.execute(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = %s", (APP,)
    )
    row = await cur.fetchone()
    assert row is not None
    return int(str(row[0]))


async def test_a_killed_store_connection_at_acquisition_is_read_again_and_the_guest_resumes(
    pg_dsn: str, pg_raw: Raw, held: HeldShards, tmp_path: Path
) -> None:
    config = parse_config(config_text(pg_dsn), str(tmp_path / "c.toml"))
    async with Wiring(config, config_dir=tmp_path, environ={}) as wiring:
        durable = await open_durable(wiring, held)
        try:
            assert durable.store is not None
            await durable.store.session_opening(
                ServerSession(SESSION, "genesys", "webmessaging", ServerState.OPENING, 1.0, guest_token="tok")
            )
            assert await kill_store_connection(pg_raw) == 1
            assert await durable.acquire({SHARD}) == {SHARD}
            assert durable.server[SESSION].guest_token == "tok"
        finally:
            await durable.aclose()


async def test_a_shard_whose_lease_ended_before_its_rows_were_read_is_not_run(
    pg_dsn: str, held: HeldShards, tmp_path: Path
) -> None:
    config = parse_config(config_text(pg_dsn), str(tmp_path / "c.toml"))
    async with Wiring(config, config_dir=tmp_path, environ={}) as wiring:
        durable = await open_durable(wiring, held)
        assert durable.store is not None
        await durable.store.aclose()  # every read fails from now on
        held.epochs.clear()  # and the lease is gone (its deadline passed)
        try:
            assert await durable.acquire({SHARD}) == frozenset()
        finally:
            await durable.aclose()


async def test_one_host_runs_its_shards_from_the_configuration_when_the_store_cannot_be_read(
    pg_dsn: str, held: HeldShards, tmp_path: Path
) -> None:
    config = parse_config(config_text(pg_dsn), str(tmp_path / "c.toml"))
    async with Wiring(config, config_dir=tmp_path, environ={}) as wiring:
        durable = await open_durable(wiring, None)
        assert durable.store is not None
        await durable.store.aclose()
        try:
            assert await durable.acquire({SHARD}) == {SHARD}
            assert durable.server == {}
        finally:
            await durable.aclose()


@pytest.mark.parametrize("member", [True, False])
async def test_a_member_seeds_its_pacers_with_the_limit_a_peer_learned_when_it_acquires_shards(
    pg_dsn: str, held: HeldShards, tmp_path: Path, member: bool
) -> None:
    config = parse_config(config_text(pg_dsn), str(tmp_path / "c.toml"))
    async with Wiring(config, config_dir=tmp_path, environ={}) as wiring:
        durable = await open_durable(wiring, held if member else None)
        endpoint = wiring.attempts.endpoints.connect(GENESYS_WEBMESSAGING)
        assert endpoint.learned() is None
        try:
            assert durable.store is not None
            # a peer refused at 90 handshakes a second after this member opened the store
            await learned_limits.save(durable.store, {GENESYS_WEBMESSAGING: 90.0}, wiring.clock.time())
            assert await durable.acquire({SHARD}) == {SHARD}
            # a fleet member starts the shard's sessions with the fleet's limit; one host, the only
            # sender, learned it at its start (nobody else writes it meanwhile)
            assert endpoint.learned() == (pytest.approx(90.0) if member else None)
        finally:
            await durable.aclose()
