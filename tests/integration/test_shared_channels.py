"""Notifications sessions as subscriptions on channels their OAuth client shares (docs/runtime.md,
"Shared notification channels"), supervised end to end against the Genesys simulator over loopback.

The simulator enforces what the platform does: at most ``max_topics`` topics per channel, 20
channels per OAuth client (a 21st removes the oldest, unconnected first), the subscription verbs
with their bodies. Smaller limits than the platform's keep these tests fast; the acceptance test with
2,000 agents on two channels runs the platform's own numbers.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect

from supervisor.sim.genesys import GenesysSimConfig, GenesysSimulator
from supervisor.transports.channel_pool import ChannelPool
from supervisor.vocabulary.states import ChannelState
from tests.harness.config import genesys_config
from tests.harness.in_process import Harness, supervised
from tests.harness.simulators import StartGenesys

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

CLIENT = "demo-client"


def shared_config(urls: dict[str, str], agents: int, topics: int = 1000, **overrides: Any) -> str:
    base = genesys_config(urls, 0, notifications=agents, **overrides)
    shared = f"sharedChannels = true\ntopicsPerChannel = {topics}\n"
    return base.replace("[platforms.genesys.keepalive]\n", shared + "[platforms.genesys.keepalive]\n", 1)


def topic(i: int) -> str:
    return f"v2.users.n-{i}.conversations"


class Delivered:
    """The notification sink: the events each session was handed."""

    def __init__(self) -> None:
        self.by_session: dict[str, list[Mapping[str, Any]]] = {}

    def __call__(self, session_id: str, event: Mapping[str, Any]) -> None:
        self.by_session.setdefault(session_id, []).append(event)

    def count(self) -> int:
        return sum(len(v) for v in self.by_session.values())


def pool_of(h: Harness) -> ChannelPool:
    return h.supervisor.wiring.channel_pools.pools[CLIENT]


def sim_channels(sim: GenesysSimulator) -> dict[str, list[str]]:
    """The platform's channels of our client and the topics each holds."""
    return {c.id: list(c.topics) for c in sim.state.channels.values() if c.owner == CLIENT}


async def test_agents_share_channels_up_to_the_topic_limit_and_each_gets_its_own_events(
    tmp_path: Path, start_genesys: StartGenesys
) -> None:
    sim = await start_genesys(GenesysSimConfig(max_topics=4), seed=3)
    sink = Delivered()
    async with supervised(shared_config(sim.urls, 10, topics=4), tmp_path, notification_sink=sink) as h:
        await h.wait(lambda: len(h.runners) == 10 and h.all_in("active"))
        channels = sim_channels(sim)
        # 10 agents of 4 topics a channel: 3 channels, every agent's topic held by exactly one
        assert len(channels) == 3
        held = sorted(t for topics in channels.values() for t in topics)
        assert held == sorted(topic(i) for i in range(10))
        assert all(len(topics) <= 4 for topics in channels.values())
        for i in range(10):
            assert sim.publish(topic(i), {"for": i}) == 1
        await h.wait(lambda: sink.count() == 10)
        assert {sid: [e["eventBody"] for e in evs] for sid, evs in sink.by_session.items()} == {
            f"nt-{i}": [{"for": i}] for i in range(10)
        }
        assert h.terminations() == {}
