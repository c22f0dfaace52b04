"""Web Messaging, held against the guest SDKs: no Python guest SDK exists, so the frames below are
the request shapes of GMT (genesys-messenger-transport-mobile-sdk ``androidUnitTest/.../util/Request.kt``)
and WMJ (web-messaging-sdk-java ``WebMessagingClient.java``), paraphrased, and every answer is checked
against the fields their models read (GMT ``shyrka/receive/*.kt``, WMJ ``model/*.java``). Both
decoders ignore unknown keys, so what breaks them is a missing or misnamed field: that is what is
asserted. The guest history goes through PY269's own ``WebMessagingApi``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect

from supervisor.sim.genesys.config import GenesysSimConfig
from tests.conformance.conftest import G, sdk
from tests.harness.simulators import Genesys

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

# GMT SessionResponse.kt + WMJ SessionResponse.java (autoStarted)
SESSION_RESPONSE = {
    "connected",
    "newSession",
    "readOnly",
    "maxCustomDataBytes",
    "allowedMedia",
    "blockedExtensions",
    "clearedExistingSession",
    "durationSeconds",
    "expirationDate",
    "autoStarted",
}
# GMT StructuredMessage.kt
STRUCTURED_MESSAGE = {
    "id",
    "type",
    "text",
    "direction",
    "channel",
    "content",
    "metadata",
    "events",
    "originatingEntity",
    "originatingMessageId",
}
# GMT MessageClassName.kt
CLASSES = {
    "string",
    "SessionResponse",
    "StructuredMessage",
    "PresignedUrlResponse",
    "AttachmentDeletedResponse",
    "UploadSuccessEvent",
    "UploadFailureEvent",
    "JwtResponse",
    "GenerateUrlError",
    "SessionExpiredEvent",
    "TooManyRequestsErrorMessage",
    "ConnectionClosedEvent",
    "LogoutEvent",
    "SessionClearedEvent",
}
HEALTH_CHECK = "SGVhbHRoQ2hlY2tNZXNzYWdlSWQ="  # GMT HealthCheckProvider's tracingId


async def ask(ws: ClientConnection, frame: dict[str, Any]) -> dict[str, Any]:
    await ws.send(json.dumps(frame))
    reply: dict[str, Any] = json.loads(await ws.recv())
    assert reply["class"] in CLASSES
    return reply


async def configure(ws: ClientConnection, token: str) -> dict[str, Any]:
    # GMT Request.kt configureRequest (with journeyContext)
    frame = {
        "action": "configureSession",
        "token": token,
        "deploymentId": "dep-1",
        "startNew": False,
        "journeyContext": {"customer": {"id": "c", "idType": "cookie"}},
    }
    return await ask(ws, frame)


async def test_session_response_carries_only_what_the_platform_sends(genesys: Genesys) -> None:
    async with connect(genesys.wm_url()) as ws:
        reply = await configure(ws, "tok-1")
    assert reply["type"] == "response" and reply["class"] == "SessionResponse"
    assert set(reply["body"]) <= SESSION_RESPONSE
    assert {"connected", "newSession", "readOnly", "maxCustomDataBytes", "clearedExistingSession"} <= set(
        reply["body"]
    )


async def test_custom_attributes_where_each_sdk_puts_them(genesys: Genesys) -> None:
    async with connect(genesys.wm_url()) as ws:
        await configure(ws, "tok-2")
        # GMT Request.kt autostart: a Presence Join whose message.channel carries them
        gmt = {
            "action": "onMessage",
            "token": "tok-2",
            "message": {
                "events": [{"eventType": "Presence", "presence": {"type": "Join"}}],
                "channel": {"metadata": {"customAttributes": {"A": "B"}}},
                "type": "Event",
            },
        }
        echoed = await ask(ws, gmt)
        assert set(echoed["body"]) <= STRUCTURED_MESSAGE
        # WMJ SendMessageRequest: channel.metadata.customAttributes at the frame's top level
        wmj = {
            "action": "onMessage",
            "token": "tok-2",
            "tracingId": "wmj-1",
            "message": {"type": "Text", "text": "hi"},
            "channel": {"metadata": {"customAttributes": {"k": "v"}}},
        }
        echoed = await ask(ws, wmj)
        assert echoed["tracingId"] == "wmj-1" and echoed["body"]["text"] == "hi"
        too_big = {
            **wmj,
            "tracingId": "wmj-2",
            "channel": {"metadata": {"customAttributes": {"x": "y" * 3000}}},
        }
        refused = await ask(ws, too_big)
    # GMT Response.kt customAttributeSizeTooLarge: no tracingId
    assert (refused["class"], refused["code"], refused.get("tracingId")) == ("string", 4013, None)
    conv = genesys.sim.conversation_of("tok-2")
    assert conv is not None and conv.customer().attributes == {"A": "B", "k": "v"}


@pytest.mark.parametrize(
    "frame",
    [
        {"action": "onMessage", "token": "unknown", "message": {"type": "Text", "text": "x"}},
        {"action": "getJwt", "token": "unknown"},
        {"action": "closeSession", "token": "unknown", "closeAllConnections": True},
        {"token": "no-action"},
    ],
)
async def test_error_replies_carry_no_tracing_id(genesys: Genesys, frame: dict[str, Any]) -> None:
    """As every error fixture of GMT (Response.kt: 4006, 4007, 4011, 4013, 4017, 5000, 400, 403):
    a guest SDK matches an error to its request by code (MessagingClientImpl.handleError)."""
    async with connect(genesys.wm_url()) as ws:
        reply = await ask(ws, {**frame, "tracingId": "t-1"})
    assert reply["type"] == "response" and reply["class"] == "string" and "tracingId" not in reply


@pytest.mark.genesys_sim(GenesysSimConfig(wm_error_tracing_id=True))
async def test_error_replies_carry_the_tracing_id_as_an_extension(genesys: Genesys) -> None:
    async with connect(genesys.wm_url()) as ws:
        reply = await ask(ws, {"action": "getJwt", "token": "unknown", "tracingId": "t-1"})
    assert reply["class"] == "string" and reply["tracingId"] == "t-1"


async def test_a_resumed_session_is_answered_as_the_vendor_fixture(genesys: Genesys) -> None:
    """GMT Response.kt: configureSuccess (new: every field) and configureSuccessWithNewSessionFalse
    (resumed: {"connected":true,"newSession":false})."""
    async with connect(genesys.wm_url()) as ws:
        new = await configure(ws, "tok-r")
        resumed = await configure(ws, "tok-r")
    assert {"connected", "newSession", "readOnly", "maxCustomDataBytes", "clearedExistingSession"} <= set(
        new["body"]
    )
    assert resumed["body"] == {"connected": True, "newSession": False}


@pytest.mark.genesys_sim(GenesysSimConfig(wm_full_session_response=True))
async def test_a_full_resumed_session_response_is_an_option(genesys: Genesys) -> None:
    async with connect(genesys.wm_url()) as ws:
        await configure(ws, "tok-f")
        resumed = await configure(ws, "tok-f")
    assert resumed["body"]["newSession"] is False and resumed["body"]["readOnly"] is False
    assert set(resumed["body"]) <= SESSION_RESPONSE and "maxCustomDataBytes" in resumed["body"]


async def test_health_check_echo_keeps_the_request_metadata(genesys: Genesys) -> None:
    async with connect(genesys.wm_url()) as ws:
        await configure(ws, "tok-3")
        # GMT Request.kt echo: the mobile SDK keys its health check on customMessageId
        echo = {
            "action": "echo",
            "token": "tok-3",
            "tracingId": HEALTH_CHECK,
            "message": {"type": "Text", "text": "ping", "metadata": {"customMessageId": HEALTH_CHECK}},
        }
        reply = await ask(ws, echo)
    assert reply["tracingId"] == HEALTH_CHECK and reply["class"] == "StructuredMessage"
    assert reply["body"]["metadata"]["customMessageId"] == HEALTH_CHECK
    assert set(reply["body"]) <= STRUCTURED_MESSAGE


async def test_presence_clear_clears_the_conversation(genesys: Genesys) -> None:
    async with connect(genesys.wm_url()) as ws:
        await configure(ws, "tok-4")
        # GMT ClearConversationRequest.kt
        clear = {
            "action": "onMessage",
            "token": "tok-4",
            "message": {
                "type": "Event",
                "events": [{"eventType": "Presence", "presence": {"type": "Clear"}}],
            },
        }
        cleared = await ask(ws, clear)
        closed = json.loads(await ws.recv())
    assert cleared["class"] == "SessionClearedEvent" and closed["class"] == "ConnectionClosedEvent"
    assert genesys.sim.conversation_of("tok-4") is None  # the session is gone


async def test_guest_history_through_the_sdk_web_messaging_api(genesys: Genesys) -> None:
    async with connect(genesys.wm_url()) as ws:
        await configure(ws, "tok-5")
        await ask(ws, {"action": "onMessage", "token": "tok-5", "message": {"type": "Text", "text": "hello"}})
        jwt = (await ask(ws, {"action": "getJwt", "token": "tok-5"}))["body"]["jwt"]
    # WebMessagingApi methods have auth_settings = []: the guest JWT goes in a default header
    client = G.ApiClient(
        host=genesys.sim.urls["api"], header_name="Authorization", header_value="bearer " + jwt
    )
    page = await sdk(G.WebMessagingApi(client).get_webmessaging_messages, page_size=25, page_number=1)
    assert isinstance(page, G.WebMessagingMessageEntityList)
    assert [m.text for m in page.entities] == ["hello"] and page.entities[0].direction == "Inbound"
