"""Gaps told and closed where the platform allows (supervisor/runtime/resync.py; docs/platforms.md, "Gaps").

An in-process daemon against the simulators over loopback sockets, wired as the composition root wires it:
the transports' sinks feed the platform-event hub (supervisor/api/platform_events.py), the resyncer is its gap
handler. What a subscriber of the platform stream receives is read from the hub's records, in their order.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from supervisor.api.platform_events import PlatformRecord
from supervisor.runtime.resync import Resyncer
from supervisor.sim.cxone import CxoneSimulator
from supervisor.sim.faults import Fault, FaultKind
from supervisor.sim.genesys import GenesysSimConfig, GenesysSimulator
from tests.harness.config import cxone_config, genesys_config
from tests.harness.in_process import Harness, supervised
from tests.integration.api_harness import Watcher, api_daemon

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
    """The in-process daemon as the composition root wires it: its hub (``wiring.platform_events``) and the
    resyncer the supervisor serves; what the hub hands out is kept, in order."""
    async with supervised(config, tmp_path) as h:
        wiring = h.supervisor.wiring
        records: list[dict[str, Any]] = []
        wiring.platform_events.listen(lambda record: records.append(parsed(record)))
        yield h, records, wiring.resyncer


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
        for session_id in sessions:
            # the message heard live before the drop went out once, and was not replayed
            live = [r for r in records if r.get("body", {}).get("text") == f"{session_id} before"]
            assert len(live) == 1 and "replayed" not in live[0]
        assert resyncer.replayed == 3 * n and resyncer.failed == 0
        # one history read per session, each through the executor on genesys:api
        assert genesys_sim.recorder.request_count("GET", "/api/v2/webmessaging/messages", 200) == n


async def test_a_cxone_session_is_told_its_gap_as_the_snapshot_the_platform_sends(
    cxone_sim: CxoneSimulator, tmp_path: Path
) -> None:
    """CXone's agent API has no history; after a start the first poll carries the platform's snapshot
    (AgentSessionStart, the agent's state): the gap is told ``snapshot`` and that batch follows flagged
    ``snapshot``; what comes later (an agent state change) is news, unflagged."""
    async with daemon(cxone_config(cxone_sim.urls, 1), tmp_path) as (h, records, _):
        await h.wait_active(1)
        await h.wait(lambda: bool(records))
        gap, *snapshot = [r for r in records if r["sessionId"] == "cx-0"]
        assert (gap["type"], gap["reason"], gap["resync"], gap["fromSeq"]) == (
            "gap",
            "started",
            "snapshot",
            1,
        )
        assert snapshot and snapshot[0]["eventType"] == "AgentSessionStart"
        assert all(r["snapshot"] is True for r in snapshot)
        told = len(records)
        session = cxone_sim.session_of("100001")
        assert session is not None
        cxone_sim.push_event({"Type": "AgentState", "CurrentState": "Available"}, agent_id="100001")
        await h.wait(lambda: len(records) > told)
        (news,) = records[told:]
        assert news["eventType"] == "AgentState" and "snapshot" not in news


async def test_a_notifications_gap_reads_each_conversation_heard_of_once_flagged_snapshot(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    """Notifications have no replay: after a drop, the conversation the session's topic named is read
    once over REST (GET /api/v2/conversations/{id}) and delivered flagged ``snapshot``."""
    config = genesys_config(genesys_sim.urls, 0, notifications=1)
    topic = "v2.users.n-0.conversations"
    conversation = genesys_sim.create_conversation()
    async with daemon(config, tmp_path) as (h, records, resyncer):
        await h.wait_active(1)
        assert genesys_sim.publish(topic, {"id": conversation.id, "participants": []}) == 1
        await h.wait(lambda: any(r.get("eventType") == topic for r in records))
        told = len(records)
        genesys_sim.faults.inject(Fault(kind=FaultKind.DROP))
        await h.wait(lambda: len([r for r in records[told:] if r["sessionId"] == "nt-0"]) >= 2, limit_s=20)
        gap, state = [r for r in records[told:] if r["sessionId"] == "nt-0"][:2]
        assert (gap["type"], gap["reason"], gap["resync"]) == ("gap", "reconnected", "snapshot")
        assert state["snapshot"] is True and state["eventType"] == topic
        assert state["conversationId"] == conversation.id and state["body"]["id"] == conversation.id
        assert resyncer.snapshots == 1
        # read once, through the executor on genesys:api (the simulator counts by route template)
        assert genesys_sim.recorder.request_count("GET", "/api/v2/conversations/{conversationId}", 200) == 1


async def test_a_subscriber_of_the_platform_stream_sees_the_gap_then_the_three_missed_none_twice(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    """The same mass drop, seen as a script sees it: a subscriber of the ``platform`` stream on the real
    subscribe socket gets, per session, the live message, then the gap, then exactly the three messages
    the agent sent while the session was away, flagged ``replayed``; no message id twice on the stream."""
    n = 3
    config = genesys_config(genesys_sim.urls, n, first_min=0.2, first_max=0.6)
    async with api_daemon(config, tmp_path) as h:
        await h.wait_active(n)
        sessions = sorted(h.runners)
        watcher = await Watcher.subscribe(h.subscribe, {"streams": ["platform"]})
        async with anyio.create_task_group() as tg:
            tg.start_soon(watcher.run)
            for session_id in sessions:
                url = agent_url(genesys_sim, h, session_id)
                await h.supervisor.request(session_id, "POST", url, json={"textBody": f"{session_id} live"})
            await h.wait(lambda: len(watcher.of("platform")) == n)
            genesys_sim.faults.inject(Fault(kind=FaultKind.ADMISSION_LIMIT, params={"rate_per_s": 0}))
            genesys_sim.faults.inject(Fault(kind=FaultKind.DROP))
            await h.wait(lambda: not any(r.state.value == "active" for r in h.runners.values()))
            for session_id in sessions:
                url = agent_url(genesys_sim, h, session_id)
                for i in range(3):
                    body = {"textBody": f"{session_id} away {i}"}
                    await h.supervisor.request(session_id, "POST", url, json=body)
            genesys_sim.faults.clear()
            await h.wait_active(n, limit_s=30)
            await h.wait(lambda: len(watcher.of("platform")) == 4 * n, limit_s=10)
            tg.cancel_scope.cancel()
    for session_id in sessions:
        stream = [
            m for m in watcher.messages if m["type"] in ("platform", "gap") and m["sessionId"] == session_id
        ]
        live, gap, *replayed = stream
        assert live["body"]["text"] == f"{session_id} live" and "replayed" not in live
        assert (gap["type"], gap["reason"], gap["resync"], gap["fromSeq"]) == (
            "gap",
            "reconnected",
            "replayed",
            live["sessionSeq"] + 1,
        )
        assert [m["body"]["text"] for m in replayed] == [f"{session_id} away {i}" for i in range(3)]
        assert all(m["replayed"] is True for m in replayed)
    ids = [m["messageId"] for m in watcher.of("platform")]
    assert len(ids) == len(set(ids)) == 4 * n
