"""Acceptance: the queue-full test (seed edge case 2: "a request queue with a maximum depth of 50").

Submissions past depth 50 are refused with a typed "try later" (never dropped silently), the
``RATE_LIMIT_BACKPRESSURE`` event is emitted once per episode, and sending resumes when drained:
once the sender has drained the queue to its resume mark (25), submissions are accepted again
(``RATE_LIMIT_BACKPRESSURE_RELEASED``). The sender runs when the test says (``run_due``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from supervisor.attributes import Backpressured
from supervisor.clock import FakeClock
from supervisor.sim.genesys import GenesysSimConfig, GenesysSimulator
from supervisor.store import UpdateOutcome
from tests.harness.config import attributes_config
from tests.integration.attributes_harness import customer_attributes, durable_daemon

pytestmark = [
    pytest.mark.integration,
    pytest.mark.anyio,
    pytest.mark.genesys_sim(GenesysSimConfig(rate_limit=1_000_000), seed=17, fake_clock=True),
]


async def test_past_depth_50_submissions_are_refused_once_per_episode_and_accepted_once_drained(
    genesys_sim: GenesysSimulator, clock: FakeClock, tmp_path: Path
) -> None:
    conversations = [genesys_sim.create_conversation().id for _ in range(2)]
    text = attributes_config(genesys_sim.urls, conversations, store=tmp_path / "store.sqlite3")
    async with durable_daemon(text, tmp_path, clock=clock) as h:
        await h.wait_active(2)
        service = h.service
        for episode in (1, 2):
            for k in range(50):
                answer = await service.submit(f"wm-{k % 2}", {f"e{episode}k{k}": "v"})
                assert answer.queue_depth == k + 1
            for attempt in range(3):
                with pytest.raises(Backpressured) as full:
                    # even an update that would coalesce waits: intake is paused for the episode
                    await service.submit("wm-0", {f"e{episode}k0" if attempt else "new": "w"})
                assert (full.value.depth, full.value.limit) == (50, 50)
                assert full.value.retry_after_s >= 1.0
            assert len(h.recorded.named("RATE_LIMIT_BACKPRESSURE")) == episode
            # sending resumes: the sender drains the queue (one request per conversation)
            await service.run_due()
            (*_, released) = h.recorded.named("RATE_LIMIT_BACKPRESSURE_RELEASED")
            # released at the resume mark (25), not only once empty
            assert released["refused"] == 3 and released["queueDepth"] <= 25
            accepted = await service.submit("wm-0", {f"e{episode}after": "x"})
            assert accepted.queue_depth <= 26
            await h.settle()
        assert len(h.recorded.named("RATE_LIMIT_BACKPRESSURE")) == 2
        outcomes = await service.outcomes()
        assert len(outcomes) == 102 and set(outcomes.values()) == {UpdateOutcome.VERIFIED}
        held = customer_attributes(genesys_sim, conversations[0]) | customer_attributes(
            genesys_sim, conversations[1]
        )
        assert len(held) == 102 and "new" not in held  # refused means not taken: the caller was told
        assert service.counters == {"submitted": 108, "acknowledged": 102, "refused": 6, "rejected": 0}
