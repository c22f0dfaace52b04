"""The subscribe socket's platform stream over real Unix sockets, the daemon against the simulators.

What the sessions carry reaches a subscriber as the platform sent it (docs/socket-api.md, "The
platform stream"): a CXone agent-state change, a Genesys conversation event on the session's topic,
an agent's message to a Web Messaging guest. A subscriber that comes back with ``since`` gets exactly
what it missed; a reconnection is a ``gap``; a peer outside ``platformAllowUids`` is refused.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from supervisor.api.protocol import ApiFault, Method
from supervisor.config import SocketsConfig
from supervisor.sim.cxone import CxoneSimulator
from supervisor.sim.faults import Fault, FaultKind
from supervisor.sim.genesys import GenesysSimulator
from tests.harness.config import cxone_config, daemon_config, genesys_config
from tests.harness.in_process import Harness
from tests.harness.process import Output, running_daemon
from tests.harness.waits import wait_until
from tests.integration.api_harness import Watcher, api_daemon, calls_as, cli_as

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

PLATFORM = {"streams": ["platform"]}


def records(watcher: Watcher, session_id: str | None = None) -> list[dict[str, Any]]:
    return [m for m in watcher.of("platform") if session_id is None or m["sessionId"] == session_id]


def gaps(watcher: Watcher, session_id: str | None = None) -> list[dict[str, Any]]:
    return [m for m in watcher.of("gap") if session_id is None or m["sessionId"] == session_id]


async def genesys_token(http: httpx.AsyncClient, sim: GenesysSimulator) -> dict[str, str]:
    token = await http.post(
        sim.urls["login"] + "/oauth/token",
        data={"grant_type": "client_credentials"},
        auth=("demo-client", "x"),
    )
    return {"Authorization": f"Bearer {token.json()['access_token']}"}


async def agent_says(
    http: httpx.AsyncClient, sim: GenesysSimulator, conversation_id: str, text: str
) -> dict[str, Any]:
    """The agent sends a message on the conversation, over the Platform API as an agent desktop does."""
    conversation = sim.state.conversations.get(conversation_id)
    assert conversation is not None
    agent = conversation.agent()
    assert agent is not None
    r = await http.post(
        sim.urls["api"]
        + f"/api/v2/conversations/messages/{conversation_id}/communications/{agent.communication.id}/messages",
        json={"textBody": text},
        headers=await genesys_token(http, sim),
    )
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def guest_conversation(h: Harness, sim: GenesysSimulator, session_id: str) -> str:
    transport: Any = h.runners[session_id].transport
    conversation = sim.conversation_of(transport.guest_token)
    assert conversation is not None
    return conversation.id


@pytest.mark.cxone_sim(seed=31)
async def test_a_cxone_agent_state_change_reaches_a_subscriber_with_its_body(
    cxone_sim: CxoneSimulator, tmp_path: Path
) -> None:
    async with api_daemon(cxone_config(cxone_sim.urls, 2, poll_timeout=1), tmp_path) as h:
        await h.wait(lambda: len(h.runners) == 2 and h.all_in("active"))
        watcher = await Watcher.subscribe(
            h.subscribe,
            {"streams": ["platform"], "filter": {"sessions": ["cx-1"], "eventTypes": ["AgentState"]}},
        )
        async with anyio.create_task_group() as tg:
            tg.start_soon(watcher.run)
            await h.wait(lambda: bool(watcher.messages))  # the snapshot: subscribed
            async with httpx.AsyncClient() as http:
                # as a supervisor's desktop would: the simulator's admin API drives its state route
                r = await http.post(
                    cxone_sim.urls["admin"] + "/agents/100002/state", json={"state": "Available"}
                )
                assert r.status_code == 200, r.text
            await h.wait(lambda: any(m["body"].get("CurrentState") == "Available" for m in records(watcher)))
            tg.cancel_scope.cancel()
    (record,) = [m for m in records(watcher) if m["body"].get("CurrentState") == "Available"]
    assert (record["sessionId"], record["platform"], record["eventType"], record["agentId"]) == (
        "cx-1",
        "cxone",
        "AgentState",
        "100002",
    )
    # the body is the event as get-next-event carried it (NICE agent-state-event.js reads these keys)
    assert record["body"]["Type"] == "AgentState" and "NextStates" in record["body"]
    assert {"IsAcw", "CurrentOutReason", "StartTimeUTC"} <= set(record["body"])
    assert record["bootId"] == watcher.snapshot["bootId"]
    # the filters held: no other session, no other event type
    assert {m["sessionId"] for m in records(watcher)} == {"cx-1"}
    assert {m["eventType"] for m in records(watcher)} == {"AgentState"}
    # sequence numbers rise by one, per session, with no hole
    seqs = [m["sessionSeq"] for m in records(watcher)]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)


@pytest.mark.genesys_sim(seed=32)
async def test_a_genesys_conversation_event_on_a_subscribed_topic_reaches_a_subscriber(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    config = genesys_config(genesys_sim.urls, 0, notifications=1)
    async with api_daemon(config, tmp_path) as h, httpx.AsyncClient() as http:
        await h.wait(lambda: len(h.runners) == 1 and h.all_in("active"))
        watcher = await Watcher.subscribe(h.subscribe, {**PLATFORM, "filter": {"agents": ["n-0"]}})
        async with anyio.create_task_group() as tg:
            tg.start_soon(watcher.run)
            await h.wait(lambda: bool(watcher.messages))
            created = await http.post(
                genesys_sim.urls["admin"] + "/conversations", json={"agentUserId": "n-0"}
            )
            assert created.status_code == 201
            conversation_id = created.json()["id"]
            await agent_says(http, genesys_sim, conversation_id, "hello from the agent")
            topic = "v2.users.n-0.conversations"
            await h.wait(lambda: any(m["eventType"] == topic for m in records(watcher)))
            tg.cancel_scope.cancel()
    (record,) = [m for m in records(watcher) if m["eventType"] == topic]
    assert (record["sessionId"], record["platform"], record["agentId"]) == ("nt-0", "genesys", "n-0")
    assert record["conversationId"] == conversation_id == record["body"]["id"]
    assert record["body"]["participants"]  # ConversationEventTopicConversation, as published
    assert record["correlationId"]


@pytest.mark.genesys_sim(seed=33)
async def test_an_agents_message_to_a_guest_reaches_a_subscriber(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    async with api_daemon(genesys_config(genesys_sim.urls, 2), tmp_path) as h, httpx.AsyncClient() as http:
        await h.wait(lambda: len(h.runners) == 2 and h.all_in("active"))
        watcher = await Watcher.subscribe(h.subscribe, {**PLATFORM, "filter": {"sessions": ["wm-1"]}})
        async with anyio.create_task_group() as tg:
            tg.start_soon(watcher.run)
            await h.wait(lambda: bool(watcher.messages))
            sent = await agent_says(
                http, genesys_sim, guest_conversation(h, genesys_sim, "wm-1"), "how can I help?"
            )
            await h.wait(lambda: bool(records(watcher)))
            tg.cancel_scope.cancel()
    (record,) = records(watcher)
    assert (record["sessionId"], record["platform"], record["eventType"]) == (
        "wm-1",
        "genesys",
        "StructuredMessage",
    )
    assert record["body"] == sent["normalizedMessage"]  # the Outbound StructuredMessage, as pushed
    assert record["body"]["direction"] == "Outbound" and record["body"]["text"] == "how can I help?"
    assert record["messageId"] == record["body"]["id"]
    # the session's start was told before this subscriber came, which asked for nothing missed (no since)
    assert gaps(watcher) == []


@pytest.mark.genesys_sim(seed=34)
async def test_a_subscriber_killed_and_back_with_since_gets_exactly_what_it_missed(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    async with api_daemon(genesys_config(genesys_sim.urls, 1), tmp_path) as h, httpx.AsyncClient() as http:
        await h.wait(lambda: len(h.runners) == 1 and h.all_in("active"))
        conversation = guest_conversation(h, genesys_sim, "wm-0")
        first = await Watcher.subscribe(h.subscribe, PLATFORM)
        async with anyio.create_task_group() as tg:
            tg.start_soon(first.run)
            for n in range(2):
                await agent_says(http, genesys_sim, conversation, f"before {n}")
            await h.wait(lambda: len(records(first)) == 2)
            tg.cancel_scope.cancel()  # killed: its connection closed
        last = records(first)[-1]
        missed = [(await agent_says(http, genesys_sim, conversation, f"missed {n}"))["id"] for n in range(3)]
        await h.wait(lambda: h.supervisor.wiring.platform_events.next_seq("wm-0") == last["sessionSeq"] + 4)
        again = await Watcher.subscribe(
            h.subscribe,
            {**PLATFORM, "since": {"wm-0": {"bootId": last["bootId"], "seq": last["sessionSeq"]}}},
        )
        async with anyio.create_task_group() as tg:
            tg.start_soon(again.run)
            after = (await agent_says(http, genesys_sim, conversation, "live again"))["id"]
            await h.wait(lambda: len(records(again)) == 4)
            tg.cancel_scope.cancel()
    got = records(again)
    assert [m["messageId"] for m in got] == [*missed, after]  # exactly what it missed, then live, in order
    assert [m["sessionSeq"] for m in got] == [last["sessionSeq"] + n for n in range(1, 5)]
    assert gaps(again) == []  # nothing fell out of the window: no gap
    assert again.messages[0]["type"] == "snapshot"


@pytest.mark.genesys_sim(seed=35)
async def test_a_reconnection_is_told_as_a_gap_with_how_long_it_lasted(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    config = genesys_config(genesys_sim.urls, 0, notifications=1)
    async with api_daemon(config, tmp_path) as h:
        await h.wait(lambda: len(h.runners) == 1 and h.all_in("active"))
        watcher = await Watcher.subscribe(h.subscribe, PLATFORM)
        async with anyio.create_task_group() as tg:
            tg.start_soon(watcher.run)
            await h.wait(lambda: bool(watcher.messages))
            genesys_sim.publish("v2.users.n-0.conversations", {"id": "c-1", "participants": []})
            await h.wait(lambda: len(records(watcher)) == 1)
            connects = h.runners["nt-0"].connects
            genesys_sim.faults.inject(Fault(kind=FaultKind.DROP))
            await h.wait(lambda: h.runners["nt-0"].connects > connects and h.all_in("active"), 20)
            await h.wait(lambda: len(gaps(watcher)) == 1)
            genesys_sim.faults.clear()
            genesys_sim.publish("v2.users.n-0.conversations", {"id": "c-1", "participants": [{"id": "p"}]})
            await h.wait(lambda: len(records(watcher)) == 2)
            tg.cancel_scope.cancel()
    (gap,) = gaps(watcher)
    first, second = records(watcher)
    assert (gap["sessionId"], gap["reason"], gap["resync"], gap["platform"]) == (
        "nt-0",
        "reconnected",
        "none",  # notifications have no replay
        "genesys",
    )
    assert gap["fromSeq"] == first["sessionSeq"] + 1 == second["sessionSeq"]
    assert isinstance(gap["seconds"], float) and gap["seconds"] > 0
    # the stream's order: the record before the drop, the gap, the record after
    order = [m for m in watcher.messages if m["type"] in ("platform", "gap")]
    assert [m["type"] for m in order] == ["platform", "gap", "platform"]


@pytest.mark.skipif(os.geteuid() != 0, reason="switching to another uid needs root")
@pytest.mark.genesys_sim(seed=36)
async def test_a_peer_not_in_platform_allow_uids_is_refused_the_platform_stream(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    files_gid, reader, integration = 4260, 12101, 12102
    sockets = SocketsConfig(
        group=files_gid, allow_uids=[reader, integration], platform_allow_uids=[integration]
    )
    async with api_daemon(genesys_config(genesys_sim.urls, 1), tmp_path, sockets=sockets) as h:
        await h.wait(lambda: len(h.runners) == 1 and h.all_in("active"))
        os.chmod(h.subscribe.parent, 0o711)  # let the other uids reach the socket files

        async def subscribe_as(
            uid: int, parameters: dict[str, Any]
        ) -> list[tuple[str | None, dict[str, Any]]]:
            replies = await calls_as(
                h.subscribe,
                [(Method.SUBSCRIBE, parameters)],
                uid=uid,
                gid=files_gid,
                groups=[files_gid],
                more=True,
            )
            assert not isinstance(replies, str), replies
            return replies

        ((error, parameters),) = await subscribe_as(reader, PLATFORM)
        assert error == ApiFault.PLATFORM_DENIED == "io.sessionsupervisor.state.v1.PermissionDenied"
        assert parameters["stream"] == "platform" and "platformAllowUids" in parameters["problem"]
        # the same peer still has the rest of the socket: only the customer data is refused
        ((error, parameters),) = await subscribe_as(reader, {"streams": ["all"]})
        assert error is None and parameters["type"] == "snapshot"
        ((error, parameters),) = await subscribe_as(integration, PLATFORM)
        assert error is None and parameters["type"] == "snapshot"
        # as a script runs it: one line, exit 1
        code, out, err = await cli_as(
            ["watch", "--socket", str(h.subscribe), "--json", "--events", "platform"],
            uid=reader,
            gid=files_gid,
            groups=[files_gid],
        )
        assert (code, out) == (1, "") and err.count("\n") == 1
        assert "io.sessionsupervisor.state.v1.PermissionDenied" in err and "platformAllowUids" in err


@pytest.mark.genesys_sim(seed=37)
async def test_a_client_that_asks_for_neither_the_stream_nor_since_gets_todays_stream_unchanged(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    """Platform events flowing, a reconnection told as gaps: a subscriber without the platform stream sees the
    same messages as one with it, less the platform records and gaps, and no new field anywhere."""
    async with api_daemon(genesys_config(genesys_sim.urls, 2), tmp_path) as h, httpx.AsyncClient() as http:
        await h.wait(lambda: len(h.runners) == 2 and h.all_in("active"))
        plain = await Watcher.subscribe(h.subscribe, {"streams": ["all"]})
        both = await Watcher.subscribe(h.subscribe, {"streams": ["all", "platform"]})
        async with anyio.create_task_group() as tg:
            tg.start_soon(plain.run)
            tg.start_soon(both.run)
            await h.wait(lambda: bool(plain.messages) and bool(both.messages))
            await agent_says(http, genesys_sim, guest_conversation(h, genesys_sim, "wm-0"), "one")
            genesys_sim.faults.inject(Fault(kind=FaultKind.DROP))
            await h.wait(lambda: len(gaps(both)) == 2, 20)
            await h.wait(lambda: h.all_in("active"), 20)
            await agent_says(http, genesys_sim, guest_conversation(h, genesys_sim, "wm-1"), "two")
            await h.wait(lambda: len(records(both)) == 2)
            await h.wait(lambda: len(plain.messages) == len(both.messages) - 4)
            tg.cancel_scope.cancel()
    assert [m["type"] for m in plain.messages if m["type"] in ("platform", "gap")] == []
    assert plain.messages == [m for m in both.messages if m["type"] not in ("platform", "gap")]
    # the frames' fields are exactly those of the messages before the platform stream existed
    known = {
        "snapshot": {"type", "bootId", "seq", "sessions"},
        "delta": {"type", "seq", "sessionId", "state", "previous", "at", "reason", "platform", "attempts"}
        | {"lastError", "circuit", "agentId", "conversationId", "platformSessionId", "termination"},
    }
    for message in plain.messages:
        if message["type"] in known:
            assert set(message) <= known[message["type"]], message


@pytest.mark.genesys_sim(seed=38)
async def test_watch_streams_platform_content_as_a_script_and_it_never_reaches_stdout_stderr_or_the_store(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    """The daemon and ``watch --json --events platform`` as processes: what the agent wrote is customer data,
    on the platform stream and nowhere else (counts and types may be)."""
    store = tmp_path / "store.sqlite3"
    config = daemon_config(genesys_sim.urls, tmp_path, [("wm-0", None)], store=store)
    marker = "PLATFORM-CONTENT-7f3a9c"
    subscribe = config.parent / "sockets" / "subscribe.sock"
    async with running_daemon(config) as daemon, httpx.AsyncClient() as http:
        await daemon.wait_ready(active=1)
        watch_process = await anyio.open_process(
            [
                sys.executable,
                "-m",
                "supervisor",
                "watch",
                "--socket",
                str(subscribe),
                "--json",
                "--events",
                "platform",
            ]
        )
        watch = Output(watch_process)
        async with anyio.create_task_group() as tg:
            tg.start_soon(watch.pump)
            await wait_until(lambda: bool(watch.records), 20)
            (session,) = genesys_sim.state.sessions.values()
            sent = await agent_says(http, genesys_sim, session.conversation_id, f"your card {marker}")
            await wait_until(lambda: bool(watch.typed("platform")), 20)
            assert await daemon.stop() == 0
            with anyio.fail_after(20):
                assert await watch_process.wait() == 0  # the daemon closed the stream
        stderr = await daemon.stderr()
    (record,) = watch.typed("platform")
    # the names scripts rely on
    assert {"sessionId", "sessionSeq", "platform", "eventType", "body", "receivedAt"} <= set(record)
    assert (record["sessionId"], record["eventType"], record["body"]) == (
        "wm-0",
        "StructuredMessage",
        sent["normalizedMessage"],
    )
    assert watch.err == "" and watch.records[-1] == {"type": "end", "reason": "daemon stopping"}
    # nowhere else: the daemon's event lines (journald's, under systemd), its stderr, the store
    assert daemon.raw and not [line for line in daemon.raw if marker in line]
    assert marker not in stderr
    files = [path async for path in anyio.Path(tmp_path).glob("store.sqlite3*")]
    assert files
    for path in files:
        assert marker.encode() not in await path.read_bytes(), path
