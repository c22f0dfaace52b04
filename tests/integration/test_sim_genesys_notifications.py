"""Genesys simulator, Notifications API (docs/platforms.md, "Genesys Cloud notifications"): channel REST and the channel WebSocket."""

from __future__ import annotations

import json
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from supervisor.sim.faults import Fault, FaultKind
from supervisor.sim.genesys.config import GenesysSimConfig
from tests.harness.simulators import Genesys

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

CHANNELS = "/api/v2/notifications/channels"


async def new_channel(g: Genesys) -> dict[str, Any]:
    r = await g.http.post(g.api(CHANNELS), headers=g.auth)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


async def ask(ws: ClientConnection, frame: dict[str, Any]) -> dict[str, Any]:
    await ws.send(json.dumps(frame))
    reply: dict[str, Any] = json.loads(await ws.recv())
    return reply


async def test_channel_shape_head_and_subscriptions(genesys: Genesys) -> None:
    await genesys.login()
    chan = await new_channel(genesys)
    assert set(chan) == {"connectUri", "id", "expires"}
    assert chan["connectUri"] == f"{genesys.sim.urls['streaming']}/channels/{chan['id']}"
    assert chan["expires"].endswith("Z")
    head = await genesys.http.head(genesys.api(f"{CHANNELS}/{chan['id']}"), headers=genesys.auth)
    assert head.status_code == 200
    missing = await genesys.http.head(genesys.api(f"{CHANNELS}/nope"), headers=genesys.auth)
    assert missing.status_code == 404
    subs = genesys.api(f"{CHANNELS}/{chan['id']}/subscriptions")
    r = await genesys.http.post(subs, json=[{"id": "v2.users.u1.presence"}], headers=genesys.auth)
    assert r.status_code == 200
    assert r.json() == {"entities": [{"id": "v2.users.u1.presence", "state": "Permitted"}]}
    a, b = "v2.users.a.conversations", "v2.routing.queues.b.conversations"
    r = await genesys.http.put(subs, json=[{"id": a}, {"id": b}], headers=genesys.auth)
    assert [e["id"] for e in r.json()["entities"]] == [a, b]
    assert (await genesys.http.get(subs, headers=genesys.auth)).json()["entities"][0]["id"] == a
    assert (await genesys.http.delete(subs, headers=genesys.auth)).status_code == 204
    bad = await genesys.http.post(subs, json={"id": "x"}, headers=genesys.auth)
    assert bad.status_code == 400 and bad.json()["code"] == "invalid.value"


async def test_socket_ping_subscribe_and_events(genesys: Genesys) -> None:
    await genesys.login()
    chan = await new_channel(genesys)
    async with connect(chan["connectUri"]) as ws:
        assert await ask(ws, {"message": "ping"}) == {
            "topicName": "channel.metadata",
            "eventBody": {"message": "pong"},
        }
        ok = await ask(
            ws, {"message": "subscribe", "topics": ["v2.users.u1.conversations"], "correlationId": "c1"}
        )
        assert ok == {"result": "200", "status": "subscribed", "correlationId": "c1"}
        bad = await ask(ws, {"message": "subscribe"})
        assert bad == {
            "result": "400",
            "status": "error",
            "message": "Required data missing from subscribe request.",
        }
        assert genesys.sim.publish("v2.users.u1.conversations", {"id": "conv-1"}, "corr-9") == 1
        event = json.loads(await ws.recv())
        assert event == {
            "topicName": "v2.users.u1.conversations",
            "version": "2",
            "eventBody": {"id": "conv-1"},
            "metadata": {"CorrelationId": "corr-9"},
        }
        assert genesys.sim.heartbeat() == 1
        assert json.loads(await ws.recv()) == {
            "topicName": "channel.metadata",
            "eventBody": {"message": "WebSocket Heartbeat"},
        }
    assert genesys.sim.recorder.ws_messages("streaming", "in", "ping") == 1


@pytest.mark.genesys_sim(GenesysSimConfig(heartbeat_interval_s=0.05))
async def test_periodic_heartbeat(genesys: Genesys) -> None:
    await genesys.login()
    chan = await new_channel(genesys)
    async with connect(chan["connectUri"]) as ws:
        frame = json.loads(await ws.recv())  # arrives on its own (short configured interval)
    assert frame["eventBody"] == {"message": "WebSocket Heartbeat"}


async def test_socket_closing_then_close(genesys: Genesys) -> None:
    await genesys.login()
    chan = await new_channel(genesys)
    async with connect(chan["connectUri"]) as ws:
        genesys.sim.faults.inject(Fault(kind=FaultKind.SOCKET_CLOSING, params={"lead_s": 0.01}))
        warning = json.loads(await ws.recv())
        assert warning["topicName"] == "v2.system.socket_closing"
        body = warning["eventBody"]
        assert body["channelId"] == chan["id"]
        assert {"systemTopicType", "correlationId", "reason", "message", "data"} <= set(body)
        with pytest.raises(ConnectionClosed):
            await ws.recv()
        assert ws.close_code == 1001


@pytest.mark.genesys_sim(GenesysSimConfig(max_channels=2))
async def test_over_the_limit_evicts_unconnected_channels_first(genesys: Genesys) -> None:
    await genesys.login()
    older = await new_channel(genesys)
    newer = await new_channel(genesys)
    async with connect(older["connectUri"]) as ws:
        assert (await ask(ws, {"message": "ping"}))["eventBody"]["message"] == "pong"
        third = await new_channel(genesys)  # evicts `newer`: unconnected goes before oldest
        listing = (await genesys.http.get(genesys.api(CHANNELS), headers=genesys.auth)).json()
        assert {c["id"] for c in listing["entities"]} == {older["id"], third["id"]}
    head = await genesys.http.head(genesys.api(f"{CHANNELS}/{newer['id']}"), headers=genesys.auth)
    assert head.status_code == 404
    assert genesys.sim.recorder.events("channel_evicted") == 1


@pytest.mark.genesys_sim(GenesysSimConfig(max_channels=1))
async def test_evicted_connected_channel_gets_404_message_and_close(genesys: Genesys) -> None:
    await genesys.login()
    first = await new_channel(genesys)
    async with connect(first["connectUri"]) as ws:
        await new_channel(genesys)
        gone = json.loads(await ws.recv())
        assert gone["result"] == "404"
        with pytest.raises(ConnectionClosed):
            await ws.recv()
        assert ws.close_code == 1001
    with pytest.raises(InvalidStatus) as unknown:
        async with connect(first["connectUri"]):
            pass
    assert unknown.value.response.status_code == 404


@pytest.mark.genesys_sim(GenesysSimConfig(channel_ttl_s=100))
async def test_channel_expires_by_the_clock_with_a_404_and_subscribe_extends_it(genesys: Genesys) -> None:
    """GN3P channel.py: {"result":"404"} on the socket means the channel expired; then it closes."""
    await genesys.login()
    chan = await new_channel(genesys)
    async with connect(chan["connectUri"]) as ws:
        genesys.clock.advance(90)
        # extends to now + 100
        await ask(ws, {"message": "subscribe", "topics": ["v2.users.x.presence"]})
        genesys.clock.advance(90)
        genesys.sim.tick()
        assert (await ask(ws, {"message": "ping"}))["eventBody"]["message"] == "pong"
        genesys.clock.advance(10)
        genesys.sim.tick()
        gone = json.loads(await ws.recv())
        assert gone["result"] == "404" and "expired" in gone["message"]
        with pytest.raises(ConnectionClosed):
            await ws.recv()
        assert ws.close_code == 1001


@pytest.mark.genesys_sim(GenesysSimConfig(token_ttl_s=300))
async def test_channel_whose_token_expires_gets_a_404_then_closes(genesys: Genesys) -> None:
    """GN3P channel.py: a 404 also means "auth token used for the channel has expired"."""
    await genesys.login()
    chan = await new_channel(genesys)
    async with connect(chan["connectUri"]) as ws:
        genesys.clock.advance(299)
        genesys.sim.tick()
        assert (await ask(ws, {"message": "ping"}))["eventBody"]["message"] == "pong"
        genesys.clock.advance(1)
        genesys.sim.tick()
        gone = json.loads(await ws.recv())
        assert gone["result"] == "404" and "token" in gone["message"]
        with pytest.raises(ConnectionClosed):
            await ws.recv()
        assert ws.close_code == 1001
    assert genesys.sim.recorder.events("channel_expired") == 1


async def test_a_revoked_token_sends_token_revoked_on_its_channels_then_closes_them(genesys: Genesys) -> None:
    """PY269 SystemMessageSystemMessage, systemTopicType token_revoked: the platform tells the channel
    at once (it does not wait for the token's next use), then drops it [I: the close]."""
    body = await genesys.login()
    chans = [await new_channel(genesys), await new_channel(genesys)]
    async with connect(chans[0]["connectUri"]) as ws0, connect(chans[1]["connectUri"]) as ws1:
        genesys.sim.faults.inject(Fault(kind=FaultKind.TOKEN_REVOKE))
        genesys.sim.tick()
        for ws, chan in ((ws0, chans[0]), (ws1, chans[1])):
            message = json.loads(await ws.recv())
            assert message["topicName"] == "v2.system.token_revoked"
            assert message["eventBody"]["channelId"] == chan["id"]
            assert message["eventBody"]["systemTopicType"] == "token_revoked"
            assert message["eventBody"]["reason"] == "user_tokens_revoked"
            assert set(message["eventBody"]) <= {
                "channelId",
                "systemTopicType",
                "correlationId",
                "organizationId",
                "userId",
                "oauthClientId",
                "oauthClientOrgId",
                "reason",
                "message",
                "data",
            }
            with pytest.raises(ConnectionClosed):
                await ws.recv()
            assert ws.close_code == 1001
    r = await genesys.http.head(genesys.api(f"{CHANNELS}/{chans[0]['id']}"), headers=genesys.auth)
    assert r.status_code == 401  # the token itself is revoked too
    assert "access_token" in body
    genesys.clock.advance(1)  # TOKEN_REVOKE hits the tokens issued before it started
    fresh = await genesys.login()  # a new grant is not revoked: it may create channels again
    assert fresh["access_token"] != body["access_token"]
    assert (await genesys.http.post(genesys.api(CHANNELS), headers=genesys.auth)).status_code == 200


async def test_system_topic_no_longer_subscribed_takes_the_channels_topics(genesys: Genesys) -> None:
    """PY269 systemTopicType no_longer_subscribed, reason another_channel_subscribed: the channel no
    longer gets its topics (extension: a fault says when, docs/simulators.md)."""
    await genesys.login()
    chan = await new_channel(genesys)
    subs = genesys.api(f"{CHANNELS}/{chan['id']}/subscriptions")
    topic = "v2.users.u1.conversations"
    await genesys.http.put(subs, json=[{"id": topic}], headers=genesys.auth)
    async with connect(chan["connectUri"]) as ws:
        genesys.sim.faults.inject(Fault(kind=FaultKind.SYSTEM_TOPIC, params={"type": "no_longer_subscribed"}))
        message = json.loads(await ws.recv())
        assert message["topicName"] == "v2.system.no_longer_subscribed"
        assert message["eventBody"]["systemTopicType"] == "no_longer_subscribed"
        assert message["eventBody"]["reason"] == "another_channel_subscribed"
        assert message["eventBody"]["channelId"] == chan["id"]
        assert genesys.sim.publish(topic, {"id": "conv-1"}) == 0
        assert (await ask(ws, {"message": "ping"}))["eventBody"]["message"] == "pong"  # still open
    listing = (await genesys.http.get(subs, headers=genesys.auth)).json()
    assert listing == {"entities": []}


async def test_system_topic_subscription_changed_replaces_the_list(genesys: Genesys) -> None:
    await genesys.login()
    chan = await new_channel(genesys)
    subs = genesys.api(f"{CHANNELS}/{chan['id']}/subscriptions")
    await genesys.http.put(subs, json=[{"id": "v2.users.a.conversations"}], headers=genesys.auth)
    async with connect(chan["connectUri"]) as ws:
        topics = ["v2.users.b.presence"]
        assert genesys.sim.system_message(chan["id"], "subscription_changed", topics=topics)
        message = json.loads(await ws.recv())
        assert message["topicName"] == "v2.system.subscription_changed"
        assert message["eventBody"]["systemTopicType"] == "subscription_changed"
    listing = (await genesys.http.get(subs, headers=genesys.auth)).json()
    assert [e["id"] for e in listing["entities"]] == topics
    assert not genesys.sim.system_message("nope", "subscription_changed")


def test_system_topic_fault_params_are_checked() -> None:
    from supervisor.errors import SimulatorError
    from supervisor.sim.faults import decode_fault

    assert decode_fault({"kind": "system_topic", "params": {"type": "token_revoked"}}).params["type"] == (
        "token_revoked"
    )
    with pytest.raises(SimulatorError, match=r"fault.params.type: required for system_topic"):
        decode_fault({"kind": "system_topic"})
    with pytest.raises(SimulatorError, match=r"fault.params.type: must be one of"):
        decode_fault({"kind": "system_topic", "params": {"type": "socket_closing"}})
    with pytest.raises(SimulatorError, match=r"fault.params.topics"):
        decode_fault({"kind": "system_topic", "params": {"type": "subscription_changed", "topics": "x"}})


@pytest.mark.genesys_sim(GenesysSimConfig(max_topics=3))
async def test_a_channel_holds_at_most_max_topics_across_adds_and_replaces(genesys: Genesys) -> None:
    """POST adds to the list, PUT replaces it; past ``max_topics`` (the platform's 1,000) the
    request fails whole and nothing is stored."""
    await genesys.login()
    chan = await new_channel(genesys)
    subs = genesys.api(f"{CHANNELS}/{chan['id']}/subscriptions")
    users = [{"id": f"v2.users.u{i}.conversations"} for i in range(4)]
    assert (await genesys.http.post(subs, json=users[:2], headers=genesys.auth)).status_code == 200
    over = await genesys.http.post(subs, json=users[2:], headers=genesys.auth)
    assert over.status_code == 400 and over.json()["code"] == "invalid.value"
    assert genesys.sim.state.channels[chan["id"]].topics == [u["id"] for u in users[:2]]
    added = await genesys.http.post(subs, json=users[2:3], headers=genesys.auth)
    assert [e["id"] for e in added.json()["entities"]] == [u["id"] for u in users[:3]]
    assert (await genesys.http.put(subs, json=users, headers=genesys.auth)).status_code == 400
    kept = await genesys.http.put(subs, json=users[1:2], headers=genesys.auth)
    assert [e["id"] for e in kept.json()["entities"]] == [users[1]["id"]]
