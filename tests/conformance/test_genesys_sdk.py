"""Genesys Platform REST and notifications, driven by Genesys' own Python SDK (PY269 = PureCloudPlatformClientV2
269.0.0): real SDK methods, answers deserialised into the SDK's models, errors as its ``ApiException``.

Each test names the behaviour it holds the simulator to: GR-n for Genesys REST, GN-n for notifications.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect

from supervisor.sim.genesys.config import GenesysSimConfig
from tests.conformance.conftest import G, sdk
from tests.harness.simulators import Genesys

pytestmark = [pytest.mark.integration, pytest.mark.anyio]


def error_of(exc: Any) -> dict[str, Any]:
    """The ErrorBody of an ``ApiException`` (PY269 models/error_body.py fields)."""
    body: dict[str, Any] = json.loads(exc.body)
    assert {"message", "code", "status"} <= set(body)
    return body


async def guest(genesys: Genesys, token: str) -> ClientConnection:
    """A Web Messaging guest with a configured session (what makes a conversation exist)."""
    ws = await connect(genesys.wm_url())
    await ws.send(json.dumps({"action": "configureSession", "token": token, "deploymentId": "dep-1"}))
    assert json.loads(await ws.recv())["class"] == "SessionResponse"
    return ws


def conversation_of(genesys: Genesys, token: str) -> str:
    conv = genesys.sim.conversation_of(token)
    assert conv is not None
    return conv.id


# -- GR-1, GR-2, GR-3: nothing is invented ---------------------------------------------------------------


async def test_unknown_conversation_is_404_not_found(genesys: Genesys, api_client: Any) -> None:
    conv = G.ConversationsApi(api_client)
    with pytest.raises(G.rest.ApiException) as unknown:
        await sdk(conv.get_conversation, str(uuid.uuid4()))
    assert unknown.value.status == 404 and error_of(unknown.value)["code"] == "not.found"
    with pytest.raises(G.rest.ApiException) as malformed:
        await sdk(conv.get_conversation, "not-a-uuid")
    assert malformed.value.status == 400
    listing = await sdk(conv.get_conversations_messages)
    assert isinstance(listing, G.MessageConversationEntityListing)
    assert listing.entities == []  # and never a conversation whose id is "messages"
    assert len(genesys.sim.state.conversations) == 0


async def test_active_conversations_are_a_conversation_entity_listing(
    genesys: Genesys, api_client: Any
) -> None:
    """PY269 ``ConversationsApi.get_conversations`` (``GET /api/v2/conversations``, "active
    conversations for the logged in user"): a ``ConversationEntityListing`` of ``Conversation``s,
    each without ``state`` (a read never carries it). The simulator has no users: every live one."""
    conv_api = G.ConversationsApi(api_client)
    live = genesys.sim.create_conversation()
    ended = genesys.sim.create_conversation()
    for participant in ended.participants.values():  # everyone left: no longer active
        assert genesys.sim.state.conversations.disconnect(ended, participant, "client")
    listing = await sdk(conv_api.get_conversations)
    assert isinstance(listing, G.ConversationEntityListing)
    assert [c.id for c in listing.entities] == [live.id] and listing.total == 1
    (entity,) = listing.entities
    assert isinstance(entity, G.Conversation) and entity.state is None
    assert {p.purpose for p in entity.participants} == {"customer", "agent"}
    calls = await sdk(conv_api.get_conversations, communication_type="Call")
    assert calls.entities == [] and calls.total == 0  # the simulator's conversations are messaging


async def test_unknown_participant_and_communication_are_404(genesys: Genesys, api_client: Any) -> None:
    conv_api = G.ConversationsApi(api_client)
    cid = genesys.sim.create_conversation().id
    attrs = G.ParticipantAttributes()
    attrs.attributes = {"k": "v"}
    with pytest.raises(G.rest.ApiException) as participant:
        await sdk(conv_api.patch_conversation_participant_attributes, cid, str(uuid.uuid4()), attrs)
    assert participant.value.status == 404
    message = G.AdditionalMessage()
    message.text_body = "hi"
    with pytest.raises(G.rest.ApiException) as communication:
        await sdk(conv_api.post_conversations_message_communication_messages, cid, str(uuid.uuid4()), message)
    assert communication.value.status == 404 and error_of(communication.value)["code"] == "not.found"
    stored = genesys.sim.state.conversations.get(cid)
    assert stored is not None and len(stored.participants) == 2  # nobody was added


# -- GR-4, GR-5, GR-6: the SDK's Participant, MessageConversation and MessageData ---------------------------


async def test_participants_carry_their_communications(genesys: Genesys, api_client: Any) -> None:
    ws = await guest(genesys, "tok-1")
    try:
        cid = conversation_of(genesys, "tok-1")
        conv = await sdk(G.ConversationsApi(api_client).get_conversation, cid)
        # PY269 Conversation.state: "When reading conversations, this field will never have a value present"
        assert isinstance(conv, G.Conversation) and conv.id == cid and conv.state is None
        for participant in conv.participants:
            assert isinstance(participant, G.Participant)
            (communication,) = participant.messages  # PY269 Participant.messages: list[Message]
            assert isinstance(communication, G.Message)
            assert communication.state == "connected" and communication.id
            assert communication.type == "webmessaging"
        agent = next(p for p in conv.participants if p.purpose == "agent")
        assert agent.user_id
        media = await sdk(G.ConversationsApi(api_client).get_conversations_message, cid)
        assert isinstance(media, G.MessageConversation)
        assert {p.state for p in media.participants} == {"connected"}  # a media participant has a state
    finally:
        await ws.close()


async def test_agent_message_is_message_data_and_reaches_the_guest(genesys: Genesys, api_client: Any) -> None:
    ws = await guest(genesys, "tok-2")
    try:
        conv_api = G.ConversationsApi(api_client)
        cid = conversation_of(genesys, "tok-2")
        conv = await sdk(conv_api.get_conversation, cid)
        agent = next(p for p in conv.participants if p.purpose == "agent")  # GMT's UI helper does this
        message = G.AdditionalMessage()
        message.text_body = "hi from the agent"
        data = await sdk(
            conv_api.post_conversations_message_communication_messages, cid, agent.messages[0].id, message
        )
        assert isinstance(data, G.MessageData)
        assert data.normalized_message.text == "hi from the agent"  # PY269 269: normalizedMessage
        assert data.status == "sent" and data.messenger_type == "webmessaging"
        assert data.conversation_id == cid
        pushed = json.loads(await ws.recv())
        assert pushed["class"] == "StructuredMessage" and pushed["body"]["direction"] == "Outbound"
        assert pushed["body"]["text"] == "hi from the agent"
        again = await sdk(conv_api.get_conversations_message_message, cid, data.id)
        assert again.id == data.id and again.normalized_message.text == "hi from the agent"
        customer = next(p for p in conv.participants if p.purpose == "customer")
        with pytest.raises(G.rest.ApiException) as theirs:
            await sdk(
                conv_api.post_conversations_message_communication_messages,
                cid,
                customer.messages[0].id,
                message,
            )
        assert theirs.value.status == 404
    finally:
        await ws.close()


# -- GR-7: the messaging attributes PATCH answers ParticipantAttributes --------------------------------------


async def test_messaging_attributes_patch_answers_participant_attributes(
    genesys: Genesys, api_client: Any
) -> None:
    conv_api = G.ConversationsApi(api_client)
    created = genesys.sim.create_conversation()
    attrs = G.ParticipantAttributes()
    attrs.attributes = {"k": "v"}
    answer = await sdk(
        conv_api.patch_conversations_message_participant_attributes,
        created.id,
        created.customer().id,
        body=attrs,
    )
    assert isinstance(answer, G.ParticipantAttributes) and answer.attributes == {"k": "v"}
    plain = await sdk(
        conv_api.patch_conversation_participant_attributes, created.id, created.customer().id, attrs
    )
    assert plain is None  # the generic route's response_type is None
    conv = await sdk(conv_api.get_conversation, created.id)
    customer = next(p for p in conv.participants if p.purpose == "customer")
    assert customer.attributes == {"k": "v"}


# -- GR-8: ending a conversation over the wire, and what the guest sees ---------------------------------------


async def test_agent_disconnect_over_the_wire_makes_the_guest_read_only(
    genesys: Genesys, api_client: Any
) -> None:
    ws = await guest(genesys, "tok-3")
    try:
        conv_api = G.ConversationsApi(api_client)
        cid = conversation_of(genesys, "tok-3")
        conv = await sdk(conv_api.get_conversation, cid)
        agent = next(p for p in conv.participants if p.purpose == "agent")
        request = G.MediaParticipantRequest()
        request.state = "disconnected"
        await sdk(conv_api.patch_conversations_message_participant, cid, agent.id, body=request)
        presence = json.loads(await ws.recv())
        assert presence["body"]["events"] == [{"eventType": "Presence", "presence": {"type": "Disconnect"}}]
        assert presence["body"]["metadata"]["readOnly"] == "true"  # GMT: only "true" means ReadOnly
        await ws.send(json.dumps({"action": "configureSession", "token": "tok-3", "deploymentId": "dep-1"}))
        assert json.loads(await ws.recv())["body"]["readOnly"] is True
        after = await sdk(conv_api.get_conversation, cid)
        agent_after = next(p for p in after.participants if p.purpose == "agent")
        assert agent_after.messages[0].state == "disconnected" and agent_after.end_time is not None
    finally:
        await ws.close()


# -- GN-1, GN-3: topics the platform does not have are rejected ----------------------------------------------


def topics(*names: str) -> list[Any]:
    out = []
    for name in names:
        topic = G.ChannelTopic()
        topic.id = name
        out.append(topic)
    return out


@pytest.mark.genesys_sim(GenesysSimConfig(denied_topics=("v2.routing.*",)))
async def test_unknown_and_unpermitted_topics_are_rejected(genesys: Genesys, api_client: Any) -> None:
    notifications = G.NotificationsApi(api_client)
    channel = await sdk(notifications.post_notifications_channels)
    assert isinstance(channel, G.Channel) and channel.connect_uri and channel.id
    good = "v2.users.u-1.conversations"
    with pytest.raises(G.rest.ApiException) as unknown:
        await sdk(notifications.put_notifications_channel_subscriptions, channel.id, topics(good, "v2.bogus"))
    assert unknown.value.status == 400
    with pytest.raises(G.rest.ApiException) as denied:
        await sdk(
            notifications.put_notifications_channel_subscriptions,
            channel.id,
            topics("v2.routing.queues.q.conversations"),
        )
    assert denied.value.status == 403 and error_of(denied.value)["code"] == "missing.permissions"
    listing = await sdk(
        notifications.put_notifications_channel_subscriptions,
        channel.id,
        topics(good, "v2.bogus", "v2.routing.queues.q.conversations"),
        ignore_errors=True,
    )
    states = {t.id: (t.state, t.rejection_reason, t.missing_permissions) for t in listing.entities}
    assert states[good][0] == "Permitted"
    assert states["v2.bogus"][0] == "Rejected" and states["v2.bogus"][1]
    assert states["v2.routing.queues.q.conversations"][0] == "Rejected"
    assert states["v2.routing.queues.q.conversations"][2]  # missingPermissions
    kept = await sdk(notifications.get_notifications_channel_subscriptions, channel.id)
    assert [t.id for t in kept.entities] == [good]
    available = await sdk(notifications.get_notifications_availabletopics)
    assert "v2.users.{id}.conversations" in {t.id for t in available.entities}


# -- GN-2: conversation activity publishes on the subscribed topics ------------------------------------------


async def next_event(ws: ClientConnection, topic: str) -> dict[str, Any]:
    while True:
        frame = json.loads(await ws.recv())
        if frame.get("topicName") == topic:
            event: dict[str, Any] = frame["eventBody"]
            return event


async def test_activity_publishes_snapshots_and_detail_events(genesys: Genesys, api_client: Any) -> None:
    conv_api = G.ConversationsApi(api_client)
    created = genesys.sim.create_conversation(agent_user_id="agent-user-1")
    snapshot = "v2.users.agent-user-1.conversations.messages"
    detail = f"v2.detail.events.conversation.{created.id}"
    channel = await sdk(G.NotificationsApi(api_client).post_notifications_channels)
    async with connect(channel.connect_uri) as ws:
        # the socket subscribe as koodaamo/genesys-notifications sends it
        wanted = [snapshot, detail + ".attributes", detail + ".customer.end", detail + ".user.end"]
        await ws.send(json.dumps({"message": "subscribe", "topics": wanted, "correlationId": "c" * 16}))
        assert json.loads(await ws.recv())["result"] == "200"
        attrs = G.ParticipantAttributes()
        attrs.attributes = {"survey": "yes"}
        customer = created.customer()
        await sdk(
            conv_api.patch_conversations_message_participant_attributes, created.id, customer.id, body=attrs
        )
        body = await next_event(ws, snapshot)
        wire_customer = next(p for p in body["participants"] if p["id"] == customer.id)
        assert wire_customer["attributes"] == {"survey": "yes"} and wire_customer["state"] == "connected"
        update = await next_event(ws, detail + ".attributes")
        assert update["conversationId"] == created.id and update["attributes"] == {"survey": "yes"}
        message = G.AdditionalMessage()
        message.text_body = "hello"
        await sdk(
            conv_api.post_conversations_message_communication_messages,
            created.id,
            created.agent().communication.id,
            message,
        )
        body = await next_event(ws, snapshot)
        agent_wire = next(p for p in body["participants"] if p["purpose"] == "agent")
        assert len(agent_wire["messages"]) == 1
        request = G.MediaParticipantRequest()
        request.state = "disconnected"
        await sdk(conv_api.patch_conversations_message_participant, created.id, customer.id, body=request)
        ended = await next_event(ws, detail + ".customer.end")
        assert ended["participantId"] == customer.id and ended["disconnectType"] == "client"
