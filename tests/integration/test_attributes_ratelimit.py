"""Slowing down before the 429: the daemon reads Genesys' ``inin-ratelimit-*`` and stays inside the window.

The Genesys simulator counts every REST call in its per-token fixed window and answers past it with
429 (no fault injected: its own limit); every answer carries ``inin-ratelimit-allowed``, ``-count``
and ``-reset`` (docs/platforms.md, "Genesys Cloud Platform REST"). The same stream of attribute
updates goes through a daemon reading those headers and through one ignoring them
(``[admission] rateLimitHeaders = false``): the first provokes far fewer 429s, and both get every
update verified. Counts, not times: the daemon and the simulator share a fake clock that the
executor's waits and the attribute scheduler move (docs/benchmarks.md, "Slowing down before the 429",
has the times).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from supervisor.attributes import Backpressured
from supervisor.clock import FakeClock
from supervisor.sim.genesys import GenesysSimConfig, GenesysSimulator
from supervisor.store import UpdateOutcome
from tests.harness.clocks import advancing
from tests.harness.config import attributes_config
from tests.integration.attributes_harness import durable_daemon

LIMIT = 12
WINDOW_S = 10.0
CONVERSATIONS = 4
UPDATES = 40

pytestmark = [
    pytest.mark.integration,
    pytest.mark.anyio,
    pytest.mark.genesys_sim(
        GenesysSimConfig(rate_limit=LIMIT, rate_window_s=WINDOW_S), seed=41, fake_clock=True
    ),
]


async def refusals_for_a_stream(
    sim: GenesysSimulator, clock: FakeClock, directory: Path, *, headers: bool
) -> int:
    """The 429s the simulator answered while one daemon carried ``UPDATES`` updates through."""
    conversations = [sim.create_conversation().id for _ in range(CONVERSATIONS)]
    text = attributes_config(sim.urls, conversations, store=directory / "store.sqlite3")
    text = text.replace("[admission]\n", f"[admission]\nrateLimitHeaders = {str(headers).lower()}\n", 1)
    before = sim.recorder.request_count(status=429)
    async with durable_daemon(text, directory, clock=clock) as h:
        await h.wait_active(CONVERSATIONS)
        h.supervisor.wiring.executor._sleep = advancing(
            clock
        )  # waits for a slot or a Retry-After move the clock
        service = h.service
        k = 0
        while k < UPDATES:
            try:
                await service.submit(f"wm-{k % CONVERSATIONS}", {f"k{k}": "v"})
            except Backpressured as full:
                clock.advance(full.retry_after_s)
            else:
                k += 1
            if k % CONVERSATIONS == 0:
                # the updates of one round go out before the next is submitted (a steady stream)
                await service.run_due()
                clock.advance(1.0)
        outcomes = await h.settle()
        assert len(outcomes) == UPDATES and set(outcomes.values()) == {UpdateOutcome.VERIFIED}
        readings = [e for e in h.recorded.named("PACING_CHANGED") if e["reason"] == "ratelimit"]
        assert bool(readings) is headers  # the ceiling came on only when the headers were read
    return sim.recorder.request_count(status=429) - before


async def test_reading_the_ratelimit_headers_provokes_far_fewer_429s(
    genesys_sim: GenesysSimulator, clock: FakeClock, tmp_path: Path
) -> None:
    (tmp_path / "blind").mkdir()
    (tmp_path / "read").mkdir()
    blind = await refusals_for_a_stream(genesys_sim, clock, tmp_path / "blind", headers=False)
    clock.advance(2 * WINDOW_S)  # a fresh window for the next daemon's token too
    read = await refusals_for_a_stream(genesys_sim, clock, tmp_path / "read", headers=True)
    assert blind >= 3  # the limit binds: each window spent ends in a 429 without the headers
    assert read <= 0.2 * blind, (read, blind)
