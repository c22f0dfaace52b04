"""A fleet member ends only the orphans of shards it holds when it acts (docs/runtime.md, "Shards and
leases"): an orphan of a shard whose lease deadline has passed is left alone, nothing sent and nothing
written (its shard's next owner decides), while the orphan of a held shard is ended; the daemon runs
on. The daemon runs in the test's process with a real SQLite store, its leases' deadlines set by the
test on an injected CLOCK_BOOTTIME source.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from supervisor.runtime.fence import WriteFence
from supervisor.sim.genesys import GenesysSimConfig, GenesysSimulator
from supervisor.store import ServerSession, ServerState, SqliteStore
from supervisor.store.shards import shard_of
from tests.harness.config import daemon_config
from tests.harness.in_process import supervised
from tests.harness.leases import DeadlineLeases, ManualBoottime
from tests.harness.process import server_sessions

pytestmark = [
    pytest.mark.integration,
    pytest.mark.anyio,
    pytest.mark.genesys_sim(GenesysSimConfig(rate_limit=1_000_000), seed=44),
]

SESSION = "wm-0"
#: orphans: one of a held shard, one of a shard acquired with its deadline already passed
HELD, FENCED = "orphan-a", "orphan-b"


def test_the_sessions_of_this_test_lie_in_the_shards_it_means() -> None:
    assert shard_of(FENCED) not in {shard_of(SESSION), shard_of(HELD)}


@pytest.fixture
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="ss-fr-", dir="/tmp") as d:
        yield Path(d)


async def test_reconcile_leaves_the_orphans_of_a_shard_no_longer_held(
    genesys_sim: GenesysSimulator, workdir: Path
) -> None:
    store = workdir / "store.sqlite3"
    config = daemon_config(genesys_sim.urls, workdir, [(SESSION, None)], store=store)
    opened = await SqliteStore.open(store, synchronous="normal")
    try:
        for session_id in (HELD, FENCED):
            # a guest whose token was never confirmed: ended as not_cleanable, no request made
            await opened.session_opening(
                ServerSession(session_id, "genesys", "webmessaging", ServerState.OPENING, 1000.0)
            )
    finally:
        await opened.aclose()
    now = ManualBoottime()
    leases = DeadlineLeases({shard_of(s) for s in (SESSION, HELD, FENCED)}, now, margin=100.0)
    leases.set_deadline(shard_of(FENCED), now() - 1.0)  # acquired, but its deadline has passed
    fence = WriteFence(now=now, tick_s=0.02, loop_lag_s=2.0)
    async with supervised(config.read_text(), workdir, durable=True, leases=leases, fence=fence) as daemon:
        await daemon.wait_active(1)
        await daemon.wait(lambda: bool(daemon.recorded.named("SESSION_RECONCILED")))
        await daemon.wait(lambda: server_sessions(store)[HELD]["state"] == "closed")
        assert [e["sessionId"] for e in daemon.recorded.named("SESSION_RECONCILED")] == [HELD]
        assert server_sessions(store)[FENCED]["state"] == "opening"  # nothing written for it
        await daemon.runners[SESSION].send_message("still here")
