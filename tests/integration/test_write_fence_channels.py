"""A fleet member's shared notification channels under the write fence (docs/runtime.md, "The fence
at the write"), against the Genesys simulator over loopback, the leases' deadlines set by the test:

* a shard lost unsubscribes that shard's topics (one PUT of the topics that stay) and the channel
  carries the other shards' sessions on;
* the channel's own socket stops at the **earliest** deadline of the shards it carries: when one of
  them passes, the socket is reset and nothing more is sent on it, though the other shards are held;
* the client's channel limit is the member's share: ``ceil(20 × owned / 256)``.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from supervisor.errors import Fenced
from supervisor.runtime.fence import EarliestGuard, WriteFence
from supervisor.sim.genesys import GenesysSimConfig, GenesysSimulator
from supervisor.store.shards import shard_of
from supervisor.transports.channel_quota import fleet_share
from supervisor.vocabulary import SessionState
from tests.harness.config import genesys_config
from tests.harness.in_process import supervised
from tests.harness.leases import DeadlineLeases, ManualBoottime
from tests.harness.simulators import StartGenesys

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

CLIENT = "demo-client"
AGENTS = 4


@pytest.fixture
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="ss-wfc-", dir="/tmp") as d:
        yield Path(d)


def _config(urls: dict[str, str]) -> str:
    base = genesys_config(urls, 0, notifications=AGENTS)
    shared = "sharedChannels = true\ntopicsPerChannel = 100\n"
    return base.replace("[platforms.genesys.keepalive]\n", shared + "[platforms.genesys.keepalive]\n", 1)


def _topics(sim: GenesysSimulator) -> list[list[str]]:
    return [sorted(c.topics) for c in sim.state.channels.values() if c.owner == CLIENT and c.connected]


def test_the_share_of_a_clients_channels_follows_the_shards_owned() -> None:
    assert [fleet_share(20, owned, 256) for owned in (0, 1, 12, 13, 85, 86, 128, 256)] == [
        1,
        1,
        1,
        2,
        7,
        7,
        10,
        20,
    ]


async def test_a_lost_shard_leaves_the_channel_and_the_channel_stops_at_its_earliest_deadline(
    workdir: Path, start_genesys: StartGenesys
) -> None:
    sim = await start_genesys(GenesysSimConfig(max_topics=100), seed=5)
    sessions = [f"nt-{i}" for i in range(AGENTS)]
    shards = {sid: shard_of(sid) for sid in sessions}
    assert len(set(shards.values())) == AGENTS  # one shard each
    now = ManualBoottime()
    leases = DeadlineLeases(set(shards.values()), now, margin=100.0)
    fence = WriteFence(now=now, tick_s=0.02, loop_lag_s=2.0)
    async with supervised(_config(sim.urls), workdir, leases=leases, fence=fence) as h:
        await h.wait(lambda: len(h.runners) == AGENTS and h.all_in("active"))
        assert _topics(sim) == [sorted(f"v2.users.n-{i}.conversations" for i in range(AGENTS))]
        pool = h.supervisor.wiring.channel_pools.pools[CLIENT]
        # 4 shards of 256 owned: one channel is this member's share of the client's 20
        assert pool.channel_limit == 1 and pool.quota.limit == 1
        (channel,) = pool.channels
        guard = channel.wire.guard
        # its socket and its REST connection, adopted by the guard of the shards it carries
        assert isinstance(guard, EarliestGuard) and guard.sockets >= 1

        # -- nt-0's shard is lost: its topic leaves the channel, the others stay on it
        await leases.lose({shards["nt-0"]})
        await h.wait(lambda: _topics(sim) == [sorted(f"v2.users.n-{i}.conversations" for i in (1, 2, 3))])
        assert all(h.runners[s].state is SessionState.ACTIVE for s in sessions[1:])
        assert channel.shards() == {shards[s] for s in sessions[1:]}

        # -- nt-1's shard's deadline passes (the others' are 98 s away): the channel's socket is reset
        leases.set_deadline(shards["nt-1"], now() + 1.0)
        now.advance(1.5)
        await h.wait(lambda: guard.sockets == 0)
        assert guard.passed() and fence.aborted >= 1
        mark = sim.activity.last_seq
        # the channel waits for the leases, attempting nothing (no new channel, no socket)
        await h.wait(lambda: channel.fenced)
        # nothing more is sent on the channel's socket, nor on a new one (its attempts are fenced)
        sent = [
            e
            for e in sim.activity.since(mark).entries
            if e["kind"] in ("frame", "connect") or (e["kind"] == "request" and e.get("status") != 499)
        ]
        assert sent == []
        with pytest.raises(Fenced):
            guard.check()

        # -- the renewal lifts it: the channel comes back with the three topics
        leases.renew()
        await h.wait(lambda: guard.sockets >= 1 and len(_topics(sim)) == 1)
        await h.wait(lambda: all(h.runners[s].state is SessionState.ACTIVE for s in sessions[1:]))
