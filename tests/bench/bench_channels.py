"""Notification agents on shared channels: how many channels, how long until every agent's topic is
subscribed, and how many events a second reach their sessions (docs/runtime.md, "Shared notification
channels"). An in-process daemon against the Genesys simulator over loopback, the platform's limits
(1,000 topics a channel, 20 channels a client).

    ./dev bench -k channels                          # 5,000 agents; asserts at most 5 channels
    .venv/bin/python tests/bench/bench_channels.py --agents 500 --events 5000   # the table alone

Figures: ``channels`` the simulator holds for the client, ``subscribed_s`` from the daemon's start
until every agent's topic is on a channel and every session is active, ``requests`` the subscription
requests that took (creations' PUTs and the batches' POSTs), ``events_per_s`` events published by the
simulator and handed to their sessions' sinks, per second of the whole run (publish to last delivery).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import anyio.lowlevel

from supervisor.sim.genesys import GenesysSimulator
from tests.harness.config import genesys_config
from tests.harness.in_process import supervised
from tests.harness.waits import wait_until

pytestmark = [pytest.mark.bench, pytest.mark.anyio, pytest.mark.timeout(600)]

AGENTS = 5_000
EVENTS = 20_000
CLIENT = "demo-client"


class Counted:
    """The notification sink: how many events reached a session, and when the last did."""

    def __init__(self) -> None:
        self.count = 0
        self.last = 0.0

    def __call__(self, session_id: str, event: Mapping[str, Any]) -> None:
        self.count += 1
        self.last = time.monotonic()


def shared_config(urls: Mapping[str, str], agents: int) -> str:
    base = genesys_config(urls, 0, notifications=agents, adaptive=False)
    return base.replace(
        "[platforms.genesys.keepalive]\n", "sharedChannels = true\n[platforms.genesys.keepalive]\n", 1
    )


async def measure(agents: int, events: int) -> dict[str, float]:
    sink = Counted()
    with tempfile.TemporaryDirectory(prefix="ss-bench-channels-") as d:
        async with GenesysSimulator(seed=8) as sim:
            started = time.monotonic()
            async with supervised(
                shared_config(sim.urls, agents), Path(d), notification_sink=sink, record=False
            ) as h:
                runners = h.supervisor.runners
                await wait_until(
                    lambda: (
                        len(runners) == agents and all(r.state.value == "active" for r in runners.values())
                    ),
                    300.0,
                )
                subscribed_s = time.monotonic() - started
                held = [c for c in sim.state.channels.values() if c.owner == CLIENT and c.topics]
                pool = h.supervisor.wiring.channel_pools.pools[CLIENT]
                requests = sum(c.batches + c.connections for c in pool.channels)
                begin = time.monotonic()
                for i in range(events):
                    sim.publish(f"v2.users.n-{i % agents}.conversations", {"n": i})
                    if i % 500 == 499:
                        await anyio.lowlevel.checkpoint()  # let the sockets drain
                await wait_until(lambda: sink.count >= events, 300.0)
                spent = max(sink.last - begin, 1e-9)
    return {
        "agents": agents,
        "channels": len(held),
        "subscribed_s": subscribed_s,
        "requests": requests,
        "events": events,
        "events_per_s": events / spent,
    }


def report(r: Mapping[str, float]) -> str:
    return (
        f"agents {r['agents']:.0f}: {r['channels']:.0f} channels, all subscribed in {r['subscribed_s']:.2f} s "
        f"({r['requests']:.0f} subscription requests), {r['events']:.0f} events at {r['events_per_s']:.0f}/s delivered"
    )


async def test_five_thousand_agents_on_shared_channels() -> None:
    results = await measure(AGENTS, EVENTS)
    print(report(results))
    assert results["channels"] == 5  # 1,000 topics a channel
    assert results["requests"] < AGENTS // 100


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=AGENTS)
    parser.add_argument("--events", type=int, default=EVENTS)
    args = parser.parse_args()
    print(report(anyio.run(measure, args.agents, args.events)))


if __name__ == "__main__":
    main()
