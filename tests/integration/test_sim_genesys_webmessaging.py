"""Genesys simulator, Web Messaging guest WebSocket (docs/platforms.md, "Genesys Cloud Web Messaging"), driven by a plain websockets client."""

from __future__ import annotations

import json
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from supervisor.sim.faults import Fault, FaultKind
from supervisor.sim.genesys.config import GenesysSimConfig
from tests.harness.simulators import Genesys
from tests.harness.waits import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

ENVELOPE = {"type", "class", "code", "body"}
# GMT SessionResponse.kt (+ WMJ autoStarted)
SESSION_RESPONSE_FIELDS = {
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


def conversation_id(g: Genesys, token: str) -> str:
    conv = g.sim.conversation_of(token)
    assert conv is not None
    return conv.id


async def ask(ws: ClientConnection, frame: dict[str, Any]) -> dict[str, Any]:
    await ws.send(json.dumps(frame))
    reply: dict[str, Any] = json.loads(await ws.recv())
    return reply


async def configure(ws: ClientConnection, token: str, **extra: Any) -> dict[str, Any]:
    return await ask(ws, {"action": "configureSession", "token": token, "deploymentId": "dep-1", **extra})


async def test_configure_new_then_resume(genesys: Genesys) -> None:
    async with connect(genesys.wm_url()) as ws:
        first = await configure(ws, "tok-a")
    assert set(first) == ENVELOPE
    assert first["type"] == "response" and first["class"] == "SessionResponse" and first["code"] == 200
    body = first["body"]
    assert body["connected"] is True and body["newSession"] is True and body["readOnly"] is False
    assert body["maxCustomDataBytes"] == 2048 and body["clearedExistingSession"] is False
    # only what the platform sends (GMT SessionResponse.kt): no conversation reaches a guest
    assert set(body) <= SESSION_RESPONSE_FIELDS
    conversation = genesys.sim.conversation_of("tok-a")
    assert conversation is not None
    async with connect(genesys.wm_url()) as ws:
        again = await configure(ws, "tok-a")
    assert again["body"]["newSession"] is False
    assert genesys.sim.conversation_of("tok-a") is conversation
    rec = genesys.sim.recorder
    assert rec.attempts_total("webmessaging") == {"accepted": 2, "refused": 0}
    assert rec.ws_messages("webmessaging", "in", "configureSession") == 2
    # each answer counted as new or resumed (the handover benchmark reads these)
    assert rec.events("session_configured", newSession=True) == 1
    assert rec.events("session_configured", newSession=False) == 1


async def test_on_message_echo_and_custom_attributes(genesys: Genesys) -> None:
    async with connect(genesys.wm_url()) as ws:
        await configure(ws, "tok-b")
        conv = conversation_id(genesys, "tok-b")
        msg = await ask(
            ws,
            {
                "action": "onMessage",
                "token": "tok-b",
                "message": {
                    "type": "Text",
                    "text": "hi",
                    "channel": {"metadata": {"customAttributes": {"plan": "gold"}}},
                },
            },
        )
        assert msg["type"] == "message" and msg["class"] == "StructuredMessage" and msg["code"] == 200
        assert msg["body"]["direction"] == "Inbound" and msg["body"]["text"] == "hi"
        assert {"time", "messageId"} <= set(msg["body"]["channel"])
        echo = await ask(
            ws,
            {
                "action": "echo",
                "token": "tok-b",
                "tracingId": "SGVhbHRoQ2hlY2tNZXNzYWdlSWQ=",
                "message": {"type": "Text", "text": "ping"},
            },
        )
        assert echo["type"] == "response" and echo["class"] == "StructuredMessage"
        assert echo["tracingId"] == "SGVhbHRoQ2hlY2tNZXNzYWdlSWQ="
        assert echo["body"]["text"] == "ping"
        jwt = await ask(ws, {"action": "getJwt", "token": "tok-b"})
        assert jwt["class"] == "JwtResponse" and {"jwt", "exp"} <= set(jwt["body"])
    assert genesys.sim.recorder.attributes(conv) == {"plan": "gold"}


@pytest.mark.parametrize(
    ("frame", "code"),
    [
        (
            {"action": "onMessage", "token": "never-configured", "message": {"type": "Text", "text": "x"}},
            4007,
        ),
        ({"action": "configureSession"}, 400),
        ({"action": "teleport", "token": "t"}, 400),
        ({"token": "t"}, 400),
    ],
)
async def test_error_responses_are_class_string(genesys: Genesys, frame: dict[str, Any], code: int) -> None:
    async with connect(genesys.wm_url()) as ws:
        reply = await ask(ws, frame)
    assert reply["type"] == "response" and reply["class"] == "string" and reply["code"] == code
    assert isinstance(reply["body"], str)


async def test_garbage_frame_is_request_failed(genesys: Genesys) -> None:
    async with connect(genesys.wm_url()) as ws:
        await ws.send("not json at all")
        reply = json.loads(await ws.recv())
    assert reply == {"type": "response", "class": "string", "code": 400, "body": "Request failed."}


@pytest.mark.genesys_sim(GenesysSimConfig(max_message_chars=10, max_custom_data_bytes=30))
async def test_4011_and_4013(genesys: Genesys) -> None:
    async with connect(genesys.wm_url()) as ws:
        await configure(ws, "tok-c")
        long = await ask(
            ws, {"action": "onMessage", "token": "tok-c", "message": {"type": "Text", "text": "x" * 11}}
        )
        assert long["code"] == 4011 and long["class"] == "string"
        big = {"channel": {"metadata": {"customAttributes": {"k": "v" * 40}}}}
        large = await ask(
            ws, {"action": "onMessage", "token": "tok-c", "message": {"type": "Text", "text": "ok", **big}}
        )
        assert large["code"] == 4013
        assert large["body"] == "Custom Attributes in channel metadata is larger than 30 bytes"


@pytest.mark.genesys_sim(GenesysSimConfig(wm_rate_limit=2, wm_rate_window_s=10))
async def test_4029_too_many_requests_per_session(genesys: Genesys) -> None:
    frame = {"action": "onMessage", "token": "tok-d", "message": {"type": "Text", "text": "m"}}
    async with connect(genesys.wm_url()) as ws:
        await configure(ws, "tok-d")
        assert (await ask(ws, frame))["code"] == 200
        assert (await ask(ws, frame))["code"] == 200
        limited = await ask(ws, frame)
        assert limited == {
            "type": "response",
            "class": "TooManyRequestsErrorMessage",
            "code": 429,
            "body": {
                "retryAfter": 10,
                "errorCode": 4029,
                "errorMessage": "Message rate too high for this session",
            },
        }
        genesys.clock.advance(10)
        assert (await ask(ws, frame))["code"] == 200


async def test_4029_storm_fault(genesys: Genesys) -> None:
    genesys.sim.faults.inject(Fault(kind=FaultKind.RATE_LIMIT_STORM, params={"retry_after": "3"}))
    async with connect(genesys.wm_url()) as ws:
        reply = await ask(ws, {"action": "echo", "token": "t", "message": {"type": "Text", "text": "ping"}})
    assert reply["class"] == "TooManyRequestsErrorMessage"
    assert reply["body"]["retryAfter"] == 3 and reply["body"]["errorCode"] == 4029


@pytest.mark.genesys_sim(GenesysSimConfig(wm_session_ttl_s=100))
async def test_session_expiry_by_clock_gives_event_then_4006(genesys: Genesys) -> None:
    async with connect(genesys.wm_url()) as ws:
        await configure(ws, "tok-e")
        genesys.clock.advance(100)
        genesys.sim.tick()
        event = json.loads(await ws.recv())
        assert event["class"] == "SessionExpiredEvent" and event["body"] == {}
        reply = await ask(
            ws, {"action": "onMessage", "token": "tok-e", "message": {"type": "Text", "text": "x"}}
        )
        assert reply["code"] == 4006
        assert (await configure(ws, "tok-e"))["code"] == 4006
        fresh = await configure(ws, "tok-e", startNew=True)
        assert fresh["body"]["newSession"] is True


async def test_session_expired_fault_code_mode(genesys: Genesys) -> None:
    async with connect(genesys.wm_url()) as ws:
        await configure(ws, "tok-f")
        genesys.sim.faults.inject(Fault(kind=FaultKind.SESSION_EXPIRED, params={"mode": "code"}))
        reply = await ask(
            ws, {"action": "onMessage", "token": "tok-f", "message": {"type": "Text", "text": "x"}}
        )
        assert reply["code"] == 4006 and reply["class"] == "string"


async def test_session_expired_fault_event_mode(genesys: Genesys) -> None:
    async with connect(genesys.wm_url()) as ws:
        await configure(ws, "tok-g")
        genesys.sim.faults.inject(Fault(kind=FaultKind.SESSION_EXPIRED))
        event = json.loads(await ws.recv())
        assert event["type"] == "message" and event["class"] == "SessionExpiredEvent"


async def test_same_token_elsewhere_gets_connection_closed_event(genesys: Genesys) -> None:
    async with connect(genesys.wm_url()) as old, connect(genesys.wm_url()) as new:
        await configure(old, "tok-h")
        await configure(new, "tok-h")
        event = json.loads(await old.recv())
        assert event == {"type": "message", "class": "ConnectionClosedEvent", "code": 200, "body": {}}
        with pytest.raises(ConnectionClosed):
            await old.recv()
        assert old.close_code == 1000


async def test_close_session_closes_all_connections(genesys: Genesys) -> None:
    """GMT MessagingClientImpl.closeAllConnectionsForTheSession: the other connections of the session
    get a ConnectionClosedEvent; the requester "a SessionResponse with connected=false"."""
    async with connect(genesys.wm_url()) as ws, connect(genesys.wm_url()) as other:
        await configure(ws, "tok-i")
        await configure(other, "tok-i")  # opened elsewhere: the first connection is told and closed
        assert json.loads(await ws.recv())["class"] == "ConnectionClosedEvent"
        answer = await ask(
            other,
            {"action": "closeSession", "token": "tok-i", "closeAllConnections": True, "tracingId": "c-1"},
        )
        assert answer["class"] == "SessionResponse" and answer["body"]["connected"] is False
        assert "tok-i" not in genesys.sim.state.sessions
        # the socket stays open: a new chat may be configured on it (GMT startNewChat)
        assert (await configure(other, "tok-i", startNew=True))["body"]["newSession"] is True


async def test_connection_closed_event_fault_with_reason(genesys: Genesys) -> None:
    async with connect(genesys.wm_url()) as ws:
        await configure(ws, "tok-j")
        genesys.sim.faults.inject(
            Fault(kind=FaultKind.CONNECTION_CLOSED_EVENT, params={"reason": "signedIn"})
        )
        event = json.loads(await ws.recv())
        assert event["class"] == "ConnectionClosedEvent" and event["body"] == {"reason": "signedIn"}


async def test_agent_message_is_pushed_and_disconnect_makes_read_only(genesys: Genesys) -> None:
    await genesys.login()
    async with connect(genesys.wm_url()) as ws:
        await configure(ws, "tok-k")
        conv = genesys.sim.conversation_of("tok-k")
        assert conv is not None
        comm = conv.agent().communication.id
        r = await genesys.http.post(
            genesys.api(f"/api/v2/conversations/messages/{conv.id}/communications/{comm}/messages"),
            json={"textBody": "agent here"},
            headers=genesys.auth,
        )
        assert r.status_code == 200
        pushed = json.loads(await ws.recv())
        assert pushed["type"] == "message" and pushed["body"]["direction"] == "Outbound"
        assert pushed["body"]["text"] == "agent here"
        assert pushed["body"] == r.json()["normalizedMessage"]  # what the agent side sent
        assert await genesys.sim.end_conversation(conv.id) is True
        presence = json.loads(await ws.recv())
        assert presence["body"]["events"] == [{"eventType": "Presence", "presence": {"type": "Disconnect"}}]
        assert presence["body"]["metadata"] == {"readOnly": "true"}  # GMT goes ReadOnly only on "true"
        assert (await configure(ws, "tok-k"))["body"]["readOnly"] is True
        refused = await ask(
            ws,
            {
                "action": "onMessage",
                "token": "tok-k",
                "tracingId": "t-ro",
                "message": {"type": "Text", "text": "x"},
            },
        )
        # no tracingId on an error reply: none of the vendor's error fixtures has one (GMT Response.kt)
        assert refused["class"] == "string" and refused["code"] == 400 and "tracingId" not in refused
        renewed = await configure(ws, "tok-k", startNew=True)
        assert renewed["body"]["readOnly"] is False and renewed["body"]["newSession"] is True
        assert conversation_id(genesys, "tok-k") != conv.id


@pytest.mark.genesys_sim(GenesysSimConfig(wm_disconnect_read_only=False))
async def test_disconnect_for_display_only_keeps_the_guest_writable(genesys: Genesys) -> None:
    async with connect(genesys.wm_url()) as ws:
        await configure(ws, "tok-d")
        assert await genesys.sim.end_conversation(conversation_id(genesys, "tok-d")) is True
        presence = json.loads(await ws.recv())
        assert presence["body"]["metadata"] == {"readOnly": "false"}
        # resumed and still writable: GMT's resumed-session fixture, readOnly left to its default (false)
        assert (await configure(ws, "tok-d"))["body"] == {"connected": True, "newSession": False}


async def test_missing_fields_and_malformed_body_on_session_response(genesys: Genesys) -> None:
    genesys.sim.faults.inject(
        Fault(kind=FaultKind.MISSING_FIELDS, params={"fields": ["connected", "readOnly"]}, count=1)
    )
    async with connect(genesys.wm_url()) as ws:
        first = (await configure(ws, "tok-l"))["body"]
        second = (await configure(ws, "tok-l"))["body"]
    assert "connected" not in first and "readOnly" not in first
    assert second == {"connected": True, "newSession": False}  # a resume (GMT Response.kt)


async def test_handshake_errors(genesys: Genesys) -> None:
    with pytest.raises(InvalidStatus) as missing:
        async with connect(genesys.sim.urls["webmessaging"] + "/v1"):
            pass
    assert missing.value.response.status_code == 400
    with pytest.raises(InvalidStatus) as wrong_path:
        async with connect(genesys.sim.urls["webmessaging"] + "/v2?deploymentId=x"):
            pass
    assert wrong_path.value.response.status_code == 404
    await wait_until(lambda: genesys.sim.recorder.attempts_total("webmessaging")["refused"] == 2)


@pytest.mark.genesys_sim(GenesysSimConfig(deployments=("allowed",)))
async def test_restricted_deployments_answer_403(genesys: Genesys) -> None:
    with pytest.raises(InvalidStatus) as denied:
        async with connect(genesys.wm_url("other")):
            pass
    assert denied.value.response.status_code == 403
    async with connect(genesys.wm_url("allowed")) as ws:
        await ws.send(json.dumps({"action": "configureSession", "token": "t", "deploymentId": "allowed"}))
        assert json.loads(await ws.recv())["code"] == 200


@pytest.mark.genesys_sim(GenesysSimConfig(wm_idle_timeout_s=300, wm_max_connection_s=3600))
async def test_idle_and_lifetime_limits_close_with_1001(genesys: Genesys) -> None:
    async with connect(genesys.wm_url()) as idle, connect(genesys.wm_url()) as busy:
        await configure(idle, "tok-idle")
        await configure(busy, "tok-busy")
        genesys.clock.advance(299)
        await ask(busy, {"action": "echo", "token": "tok-busy", "message": {"type": "Text", "text": "ping"}})
        genesys.clock.advance(1)
        genesys.sim.tick()
        with pytest.raises(ConnectionClosed):
            await idle.recv()
        assert idle.close_code == 1001
        for _ in range(12):  # busy stays alive by talking, until its lifetime runs out
            genesys.clock.advance(299)
            await ask(
                busy, {"action": "echo", "token": "tok-busy", "message": {"type": "Text", "text": "ping"}}
            )
            genesys.sim.tick()
        with pytest.raises(ConnectionClosed):
            await busy.recv()
        assert busy.close_code == 1001
    assert genesys.sim.recorder.events("limit_close", reason="idle") == 1
    assert genesys.sim.recorder.events("limit_close", reason="lifetime") == 1


async def test_guest_rest_messages_with_the_jwt(genesys: Genesys) -> None:
    url = genesys.api("/api/v2/webmessaging/messages")
    async with connect(genesys.wm_url()) as ws:
        await configure(ws, "tok-m")
        for text in ("one", "two", "three"):
            await ask(
                ws, {"action": "onMessage", "token": "tok-m", "message": {"type": "Text", "text": text}}
            )
        jwt = (await ask(ws, {"action": "getJwt", "token": "tok-m"}))["body"]["jwt"]
    r = await genesys.http.get(url, params={"pageSize": 2}, headers={"Authorization": f"Bearer {jwt}"})
    assert r.status_code == 200
    body = r.json()
    assert [m["text"] for m in body["entities"]] == ["three", "two"]
    assert (body["pageSize"], body["pageNumber"], body["total"], body["pageCount"]) == (2, 1, 3, 2)
    assert (await genesys.http.get(url)).json()["code"] == "authentication.required"
    stale = await genesys.http.get(url, headers={"Authorization": "Bearer nope"})
    assert stale.status_code == 401 and stale.json()["code"] == "bad.credentials"
    bad = await genesys.http.get(url, params={"pageSize": 0}, headers={"Authorization": f"Bearer {jwt}"})
    assert bad.status_code == 400 and bad.json()["code"] == "bad.request"
    genesys.clock.advance(3600)  # the JWT's lifetime
    assert (await genesys.http.get(url, headers={"Authorization": f"Bearer {jwt}"})).status_code == 401
    assert genesys.sim.recorder.request_count("GET", "/api/v2/webmessaging/messages", 200) == 1
