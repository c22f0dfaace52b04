"""The daemon on a PostgreSQL store (``[store] url``, ``passwordFile``), in process against the Genesys
simulator (``-m postgres``): the session ledger is written there, the stamp carries its epoch, and a
database that cannot be reached is a degraded store, not a failed start."""

from __future__ import annotations

from pathlib import Path

import pytest

from supervisor.sim.genesys import GenesysSimulator
from supervisor.store import ServerState
from supervisor.store.pg import PgStore
from tests.harness.config import genesys_config, with_daemon
from tests.harness.in_process import supervised

pytestmark = [pytest.mark.integration, pytest.mark.anyio, pytest.mark.postgres]


def with_store(text: str, url: str) -> str:
    return text + f'[store]\nurl = "{url}"\npasswordFile = "pg-password"\n'


async def test_the_session_ledger_is_in_postgresql(
    genesys_sim: GenesysSimulator, tmp_path: Path, pg_url: str
) -> None:
    (tmp_path / "pg-password").write_text("not-used-by-a-trust-server\n")
    config = with_store(with_daemon(genesys_config(genesys_sim.urls, 1), stampMember="m1"), pg_url)
    async with supervised(config, tmp_path, durable=True) as h:
        await h.wait_active(1)
        assert h.durable is not None and h.durable.degraded is None
        token = h.runners["wm-0"].transport.guest_token
        store = await PgStore.open(pg_url)  # a second reader, as another member would be
        try:
            row = (await store.server_sessions())["wm-0"]
            assert row.state is ServerState.OPEN and row.guest_token == token
            epoch = store.epoch - 1  # the daemon's open took the one before this reader's
        finally:
            await store.aclose()
    stamps = {(e["member"], e["epoch"]) for e in genesys_sim.activity.since(0).entries}
    assert stamps == {("m1", epoch)}


async def test_an_unreachable_database_is_a_degraded_store(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    (tmp_path / "pg-password").write_text("s3cret-password\n")
    url = "postgresql:///store?host=/nonexistent-dir&user=supervisor"
    async with supervised(with_store(genesys_config(genesys_sim.urls, 1), url), tmp_path, durable=True) as h:
        await h.wait_active(1)  # the sessions run all the same
        assert h.durable is not None
        problem = h.durable.degraded
        assert problem is not None and problem.startswith(url) and "cannot reach the database" in problem
        assert "s3cret" not in problem
        degraded = h.recorded.named("STORE_DEGRADED")
        assert degraded and all("s3cret" not in str(e) for e in degraded)
