"""A fenced shard never ends the daemon (docs/runtime.md, "The fence at the write"):

* sessions stopped past their shard's deadline (their close, their DELETE refused at the write) end
  alone; the other shards' sessions run on and the daemon keeps serving;
* a shared notifications channel whose last members leave past its shards' deadline, before the
  watchdog reset its socket, closes without ending the daemon.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from supervisor.runtime.fence import EarliestGuard, WriteFence
from supervisor.sim.cxone import CxoneSimulator
from supervisor.sim.genesys import GenesysSimConfig, GenesysSimulator
from supervisor.store.shards import shard_of
from supervisor.vocabulary import SessionState
from tests.harness.config import daemon_config, genesys_config
from tests.harness.in_process import supervised
from tests.harness.leases import DeadlineLeases, ManualBoottime
from tests.harness.simulators import StartGenesys

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


def _shared(urls: dict[str, str], agents: int) -> str:
    base = genesys_config(urls, 0, notifications=agents)
    shared = "sharedChannels = true\ntopicsPerChannel = 100\n"
    return base.replace("[platforms.genesys.keepalive]\n", shared + "[platforms.genesys.keepalive]\n", 1)


async def test_a_shared_channel_closed_past_its_deadline_does_not_end_the_daemon(
    workdir: Path, start_genesys: StartGenesys
) -> None:
    sim = await start_genesys(GenesysSimConfig(max_topics=100), seed=6)
    sessions = ["nt-0", "nt-1"]
    now = ManualBoottime()
    leases = DeadlineLeases({shard_of(s) for s in sessions}, now, margin=100.0)
    # the watchdog sleeps through the test: the deadline is met by the channel's own close frame
    fence = WriteFence(now=now, tick_s=600.0, loop_lag_s=600.0)
    async with supervised(_shared(sim.urls, len(sessions)), workdir, leases=leases, fence=fence) as h:
        await h.wait(lambda: len(h.runners) == len(sessions) and h.all_in("active"))
        pool = h.supervisor.wiring.channel_pools.pools["demo-client"]
        (channel,) = pool.channels
        guard = channel.wire.guard
        assert isinstance(guard, EarliestGuard)
        now.advance(200.0)  # every deadline passed, nothing aborted yet
        runners = [h.runners[s] for s in sessions]
        assert channel.link is not None and guard.sockets >= 1  # its socket still open
        for sid in sessions:
            await h.supervisor.stop(sid)  # the last member leaves: the channel closes
        await h.wait(lambda: all(h.supervisor.finished(r) for r in runners) and not pool.channels)
        assert guard.passed()
    # (a Fenced escaping a channel's close would have ended the daemon's task group: raised here)
