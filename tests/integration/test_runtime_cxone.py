"""CXone agent sessions through the runtime, against the CXone simulator (issue 5)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from supervisor.sim.cxone import CxoneSimulator
from supervisor.sim.faults import Fault, FaultKind
from tests.integration.runtime_harness import cxone_config, supervised

pytestmark = [pytest.mark.integration, pytest.mark.anyio]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def sim() -> AsyncIterator[CxoneSimulator]:
    async with CxoneSimulator(seed=4) as simulator:
        yield simulator


async def test_rolling_session_id_is_followed_across_polls(sim: CxoneSimulator, tmp_path: Path) -> None:
    """platforms.md section 6: every get-next-event answer carries the id the next poll must use."""
    async with supervised(cxone_config(sim.urls, 1, poll_timeout=0), tmp_path, cxone=sim) as h:
        await h.wait(lambda: len(h.runners) == 1 and h.all_in("active"))
        runner = h.runners["cx-0"]
        seen = [runner.context.platform_session_id]
        for _ in range(3):
            # an event makes the next poll a 200, which carries the next sessionId
            sim.push_event(
                {"Type": "AgentState", "CurrentState": "Available"}, agent_id=runner.context.agent_id
            )
            await h.wait(lambda: runner.context.platform_session_id != seen[-1])
            seen.append(runner.context.platform_session_id)
        assert len(set(seen)) == len(seen)  # a new id every time
        # the simulator never replayed AgentSessionStart for a stale id, and nothing failed
        assert not [e for e in h.recorded.named("SDK_ERROR_CLASSIFIED") if e["code"] == "SESSION_ID_MISMATCH"]
        assert runner.state.value == "active"
        assert h.terminations() == {}


async def test_session_ended_by_the_platform_terminates(sim: CxoneSimulator, tmp_path: Path) -> None:
    """A 409 on get-next-event means the platform ended the session: no reconnection."""
    async with supervised(cxone_config(sim.urls, 1, poll_timeout=0), tmp_path, cxone=sim) as h:
        await h.wait(lambda: len(h.runners) == 1 and h.all_in("active"))
        sim.faults.inject(Fault(kind=FaultKind.SESSION_ENDED))
        await h.wait(lambda: h.all_in("terminated"))
        termination = h.runners["cx-0"].termination
        assert termination is not None
        assert (termination.reason.value, termination.code, termination.raw_status) == (
            "PERMANENT_SESSION_ERROR",
            "AGENT_SESSION_ENDED",
            409,
        )
        assert not [e for e in h.recorded.named("RETRY_ATTEMPT") if e.get("kind") == "reconnect"]


async def test_queue_full_on_a_poll_terminates_with_its_trigger(sim: CxoneSimulator, tmp_path: Path) -> None:
    async with supervised(cxone_config(sim.urls, 2, poll_timeout=0), tmp_path, cxone=sim) as h:
        await h.wait(lambda: len(h.runners) == 2 and h.all_in("active"))
        sim.faults.inject(Fault(kind=FaultKind.QUEUE_FULL, endpoint="GET *get-next-event"))
        await h.wait(lambda: h.all_in("terminated"))
        for termination in h.terminations().values():
            assert (termination.reason.value, termination.trigger) == ("FAIL_FAST_TRIGGER", "QUEUE_FULL")
