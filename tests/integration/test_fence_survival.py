"""A fenced shard never ends the daemon: a session stopped while its shard is fenced (its close, its
DELETE refused at the write) ends alone, quietly, as an abandoned one; the other shards' sessions run
on and the daemon keeps serving (docs/runtime.md, "The fence at the write").
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from supervisor.runtime.fence import WriteFence
from supervisor.sim.cxone import CxoneSimulator
from supervisor.sim.genesys import GenesysSimConfig, GenesysSimulator
from supervisor.store.shards import shard_of
from supervisor.vocabulary import SessionState
from tests.harness.config import daemon_config
from tests.harness.in_process import supervised
from tests.harness.leases import DeadlineLeases, ManualBoottime

pytestmark = [
    pytest.mark.integration,
    pytest.mark.anyio,
    pytest.mark.genesys_sim(GenesysSimConfig(rate_limit=1_000_000), seed=43),
    pytest.mark.cxone_sim(seed=43),
]

AGENTS = ("100001", "100002")
KEPT, FENCED = ("wm-0", "cx-0"), ("wm-1", "cx-1")


def test_the_sessions_of_this_test_lie_in_the_shards_it_means() -> None:
    assert {shard_of(s) for s in FENCED}.isdisjoint({shard_of(s) for s in KEPT})


@pytest.fixture
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="ss-fs-", dir="/tmp") as d:
        yield Path(d)


async def test_sessions_stopped_on_a_fenced_shard_end_alone_and_the_daemon_runs_on(
    genesys_sim: GenesysSimulator, cxone_sim: CxoneSimulator, workdir: Path
) -> None:
    conversation = genesys_sim.create_conversation()
    config = daemon_config(
        genesys_sim.urls,
        workdir,
        [("wm-0", None), ("wm-1", conversation.id)],
        cxone=cxone_sim.urls,
        cxone_sessions=[("cx-0", AGENTS[0]), ("cx-1", AGENTS[1])],
    )
    now = ManualBoottime()
    fenced_shards = {shard_of(s) for s in FENCED}
    leases = DeadlineLeases(fenced_shards | {shard_of(s) for s in KEPT}, now, margin=100.0)
    # the watchdog sleeps through the test: the deadline is met by the stop's own writes
    fence = WriteFence(now=now, tick_s=600.0, loop_lag_s=600.0)
    async with supervised(config.read_text(), workdir, leases=leases, fence=fence) as daemon:
        await daemon.wait_active(4)
        for shard in fenced_shards:
            leases.set_deadline(shard, now() + 1.0)
        now.advance(1.5)
        # stopped past the deadline: the close frame, the DELETE, closeSession are refused at the write
        runners = [daemon.runners[s] for s in FENCED]
        for sid in FENCED:
            await daemon.supervisor.stop(sid)
        await daemon.wait(lambda: all(daemon.supervisor.finished(r) for r in runners))
        # the daemon runs on: the kept shard's sessions are active and still send
        await daemon.runners["wm-0"].send_message("still here")
        assert all(daemon.runners[s].state is SessionState.ACTIVE for s in KEPT)
