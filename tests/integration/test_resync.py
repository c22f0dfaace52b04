"""Gaps told and closed where the platform allows (supervisor/runtime/resync.py; docs/platforms.md, "Gaps").

An in-process daemon against the simulators over loopback sockets, its bus feeding the platform-event hub
(supervisor/api/platform_events.py), the resyncer its gap handler. What a subscriber would receive is read
from the hub's records, in the order the hub hands them out.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from supervisor.api.platform_events import PlatformEvents, PlatformRecord
from supervisor.bus import EventBus
from supervisor.clock import SystemClock
from supervisor.runtime.resync import Resyncer
from supervisor.sim.faults import Fault, FaultKind
from supervisor.sim.genesys import GenesysSimConfig, GenesysSimulator
from tests.harness.config import genesys_config
from tests.harness.in_process import Harness, supervised

pytestmark = [
    pytest.mark.integration,
    pytest.mark.anyio,
    pytest.mark.genesys_sim(GenesysSimConfig(rate_limit=1_000_000), seed=71),
]


def parsed(record: PlatformRecord) -> dict[str, Any]:
    """A record's parameters as a subscriber reads them (the frame is ``{"parameters": ..., "continues"}``)."""
    frame = json.loads(bytes(record.frame).rstrip(b"\0"))
    out: dict[str, Any] = frame["parameters"]
    return out


@asynccontextmanager
async def daemon(
    config: str, tmp_path: Path
) -> AsyncIterator[tuple[Harness, list[dict[str, Any]], Resyncer]]:
    bus = EventBus()
    hub = PlatformEvents(boot_id=bus.boot_id, clock=SystemClock())
    records: list[dict[str, Any]] = []
    hub.listen(lambda record: records.append(parsed(record)))
    bus.subscribe(hub)
    async with supervised(config, tmp_path, bus=bus) as h:
        resyncer = Resyncer(
            hub, h.supervisor.sessions, read_conversation=h.supervisor.wiring.read_conversation
        )
        await h.tg.start(resyncer.serve)
        yield h, records, resyncer


def agent_url(sim: GenesysSimulator, h: Harness, session_id: str) -> str:
    conversation = sim.conversation_of(h.runners[session_id].transport.guest_token)
    assert conversation is not None
    comm = conversation.agent().communication.id
    return f"{sim.urls['api']}/api/v2/conversations/messages/{conversation.id}/communications/{comm}/messages"


async def test_a_mass_drop_yields_per_session_a_gap_then_exactly_the_three_messages_missed(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    n = 3
    config = genesys_config(genesys_sim.urls, n, first_min=0.2, first_max=0.6)
    async with daemon(config, tmp_path) as (h, records, resyncer):
        await h.wait_active(n)
        sessions = sorted(h.runners)
        # before the drop: each session heard one agent message live (it is not replayed later)
        for session_id in sessions:
            url = agent_url(genesys_sim, h, session_id)
            await h.supervisor.request(session_id, "POST", url, json={"textBody": f"{session_id} before"})
        await h.wait(lambda: all(len(h.runners[s].transport.seen_ids) == 1 for s in sessions))
        told = len(records)
        # every socket dropped at once; nobody gets back in until the agent has written
        genesys_sim.faults.inject(Fault(kind=FaultKind.ADMISSION_LIMIT, params={"rate_per_s": 0}))
        genesys_sim.faults.inject(Fault(kind=FaultKind.DROP))
        await h.wait(lambda: not any(r.state.value == "active" for r in h.runners.values()))
        for session_id in sessions:
            url = agent_url(genesys_sim, h, session_id)
            for i in range(3):
                await h.supervisor.request(
                    session_id, "POST", url, json={"textBody": f"{session_id} gap {i}"}
                )
        genesys_sim.faults.clear()
        await h.wait_active(n, limit_s=30)

        def after(session_id: str) -> list[dict[str, Any]]:
            return [r for r in records[told:] if r["sessionId"] == session_id]

        await h.wait(lambda: all(len(after(s)) >= 4 for s in sessions), limit_s=10)
        for session_id in sessions:
            gap, *replayed = after(session_id)
            assert (gap["type"], gap["reason"], gap["resync"]) == ("gap", "reconnected", "replayed")
            assert gap["seconds"] is not None and gap["seconds"] > 0
            assert [r["body"]["text"] for r in replayed] == [f"{session_id} gap {i}" for i in range(3)]
            assert all(r["replayed"] is True and r["eventType"] == "StructuredMessage" for r in replayed)
            assert [r["sessionSeq"] for r in replayed] == list(range(gap["fromSeq"], gap["fromSeq"] + 3))
            ids = [r["messageId"] for r in replayed]
            assert len(set(ids)) == 3  # none twice
        assert resyncer.replayed == 3 * n and resyncer.failed == 0
        # one history read per session, each through the executor on genesys:api
        assert genesys_sim.recorder.request_count("GET", "/api/v2/webmessaging/messages", 200) == n
