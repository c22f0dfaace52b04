"""A loopback Genesys that answers from fixtures restating the vendors' own wire shapes, and records
what it was sent, so a test can compare the daemon's requests with a vendor client's.

Not a simulator: it models nothing but the shapes below, answers what a test scripts, and never
decides anything the vendor sources do not show. Sources, restated in our own words (never copied):

* PY269 = ``PureCloudPlatformClientV2`` 269.0.0 (the test extra installs it): ``api_client.py``
  ``get_client_credentials_token`` (``POST {login}/oauth/token``, form ``grant_type=client_credentials``,
  ``Authorization: Basic``, the answer's ``access_token``), ``apis/conversations_api.py``
  ``get_conversation`` and ``patch_conversation_participant_attributes`` (``ParticipantAttributes``
  body, 202 without one), ``models/conversation.py`` (``state``: "When reading conversations, this
  field will never have a value present"), ``models/participant.py``, ``models/message.py``.
* GMT = genesys-messenger-transport-mobile-sdk 2.14.0, ``transport/src/androidUnitTest/kotlin/
  transport/util/Response.kt`` (the server frames: ``configureSuccess``,
  ``configureSuccessWithNewSessionFalse``, ``messageTooLong``, ``customAttributeSizeTooLarge``,
  ``tooManyRequests``, ``sessionExpired``, ``sessionNotFound``, ``cannotDowngradeToUnauthenticated``,
  ``unknownErrorEvent``, ``onMessage``, ``healthCheckResponse``) and
  ``transport/src/commonTest/.../network/SerializationTest.kt`` (the client frames GMT encodes).
"""

from __future__ import annotations

import base64
import itertools
import json
import time
from collections import deque
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

from aiohttp import web
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

__all__ = [
    "ACCESS_TOKEN",
    "CANNOT_DOWNGRADE",
    "CUSTOM_ATTRIBUTE_SIZE_TOO_LARGE",
    "GMT_CLOSE_SESSION",
    "GMT_CONFIGURE_SESSION",
    "GMT_ECHO",
    "GMT_ON_MESSAGE",
    "GUEST_JWT",
    "HEALTH_CHECK_ANSWER",
    "HEALTH_CHECK_ID",
    "MESSAGE_TOO_LONG",
    "SESSION_EXPIRED",
    "SESSION_NOT_FOUND",
    "SESSION_RESUMED",
    "TOO_MANY_REQUESTS",
    "UNKNOWN_ERROR",
    "GenesysWire",
    "Seen",
    "conversation_read",
    "genesys_wire",
    "message_echo",
    "session_response",
]

ACCESS_TOKEN = "wire-access-token"
#: the guest JWT getJwt gives (its REST credential for the guest history)
GUEST_JWT = "wire-guest-jwt"
#: GMT EchoRequest.kt HealthCheckID (base64 of "HealthCheckMessageId")
HEALTH_CHECK_ID = "SGVhbHRoQ2hlY2tNZXNzYWdlSWQ="

# -- client frames: the keys GMT encodes (SerializationTest.kt; null and default fields are not encoded)
GMT_CONFIGURE_SESSION = {"token", "deploymentId", "startNew", "journeyContext", "tracingId", "action"}
GMT_ON_MESSAGE = {"token", "message", "time", "tracingId", "action"}
GMT_ECHO = {"token", "tracingId", "action", "message"}
GMT_CLOSE_SESSION = {"token", "closeAllConnections", "tracingId", "action"}


# -- server frames (GMT Response.kt, restated) ----------------------------------------------------------


def session_response(
    *, connected: bool = True, new_session: bool = True, read_only: bool = False
) -> dict[str, Any]:
    """GMT ``configureSuccess(connected, readOnly)``: the full body of a configured session."""
    body = {
        "connected": connected,
        "newSession": new_session,
        "readOnly": read_only,
        "maxCustomDataBytes": 100,
        "clearedExistingSession": False,
    }
    return {"type": "response", "class": "SessionResponse", "code": 200, "body": body}


#: GMT ``configureSuccessWithNewSessionFalse``: a resumed session, and nothing else
SESSION_RESUMED: dict[str, Any] = {
    "type": "response",
    "class": "SessionResponse",
    "code": 200,
    "body": {"connected": True, "newSession": False},
}


def _string_error(code: int, text: str) -> dict[str, Any]:
    return {"type": "response", "class": "string", "code": code, "body": text}


MESSAGE_TOO_LONG = _string_error(4011, "message too long")
CUSTOM_ATTRIBUTE_SIZE_TOO_LARGE = _string_error(
    4013, "Custom Attributes in channel metadata is larger than 2048 bytes"
)
SESSION_EXPIRED = _string_error(4006, "session expired error message")
SESSION_NOT_FOUND = _string_error(4007, "session not found error message")
CANNOT_DOWNGRADE = _string_error(4017, "cannot downgrade to an unauthenticated session")
UNKNOWN_ERROR = _string_error(5000, "Request failed.")
TOO_MANY_REQUESTS: dict[str, Any] = {
    "type": "response",
    "class": "TooManyRequestsErrorMessage",
    "code": 429,
    "body": {"retryAfter": 3, "errorCode": 4029, "errorMessage": "Message rate too high for this session"},
}
HEALTH_CHECK_ANSWER: dict[str, Any] = {
    "type": "response",
    "class": "StructuredMessage",
    "code": 200,
    "body": {"text": "ping", "type": "Text", "direction": "Inbound", "id": "echo_id"},
    "tracingId": HEALTH_CHECK_ID,
}


def message_echo(tracing_id: str, text: str, message_id: str = "test_id") -> dict[str, Any]:
    """GMT ``onMessage()``: the guest's message echoed back, Inbound, with the request's tracingId."""
    body = {
        "text": text,
        "direction": "Inbound",
        "id": message_id,
        "channel": {"time": "2022-08-22T19:24:26.704Z", "messageId": message_id},
        "type": "Text",
    }
    return {
        "type": "message",
        "class": "StructuredMessage",
        "code": 200,
        "body": body,
        "tracingId": tracing_id,
    }


# -- REST bodies (PY269 models, restated) ---------------------------------------------------------------


def conversation_read(
    conversation_id: str, customer_id: str, agent_id: str, attributes: Mapping[str, str]
) -> dict[str, Any]:
    """PY269 ``Conversation`` as ``get_conversation`` reads it: no top-level ``state``; each
    ``Participant`` carries its communication in ``messages`` (PY269 ``Message``)."""

    def communication(cid: str, direction: str) -> dict[str, Any]:
        return {"id": cid, "state": "connected", "direction": direction, "type": "webmessaging"}

    return {
        "id": conversation_id,
        "startTime": "2026-01-05T10:00:00.000Z",
        "participants": [
            {
                "id": customer_id,
                "startTime": "2026-01-05T10:00:00.000Z",
                "purpose": "customer",
                "participantType": "External",
                "attributes": dict(attributes),
                "messages": [communication("7c0f3f57-0000-4000-8000-00000000c001", "inbound")],
            },
            {
                "id": agent_id,
                "startTime": "2026-01-05T10:00:01.000Z",
                "purpose": "agent",
                "participantType": "Internal",
                "userId": "3a9e2b1c-0000-4000-8000-0000000000a1",
                "attributes": {},
                "messages": [communication("7c0f3f57-0000-4000-8000-00000000c002", "outbound")],
            },
        ],
        "selfUri": f"/api/v2/conversations/{conversation_id}",
    }


# -- what was sent ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Seen:
    """One HTTP request, as the conformance tests compare it: method, path and query, the content
    type of a body (a request without one has none to compare), the form or JSON fields, and the
    Authorization scheme and principal (Basic: the client id; Bearer: the token). Header order,
    User-Agent and telemetry headers are not compared."""

    method: str
    path: str
    query: dict[str, list[str]]
    content_type: str | None
    form: dict[str, list[str]] | None
    json: Any
    auth_scheme: str | None
    auth_principal: str | None


def _authorization(value: str | None) -> tuple[str | None, str | None]:
    if not value:
        return None, None
    scheme, _, credentials = value.partition(" ")
    if scheme.lower() == "basic":
        user = base64.b64decode(credentials).decode().partition(":")[0]
        return "basic", user
    return scheme.lower(), credentials


async def _seen(request: web.Request) -> Seen:
    raw = await request.read()
    content_type = request.content_type if raw else None
    form = parse_qs(raw.decode()) if content_type == "application/x-www-form-urlencoded" else None
    body = json.loads(raw) if raw and content_type == "application/json" else None
    scheme, principal = _authorization(request.headers.get("Authorization"))
    return Seen(
        request.method,
        request.path,
        {k: request.query.getall(k) for k in request.query},
        content_type,
        form,
        body,
        scheme,
        principal,
    )


@dataclass
class GenesysWire:
    """The login and API hosts (one aiohttp app) and the Web Messaging socket, on loopback.

    HTTP: ``POST /oauth/token``, ``GET /api/v2/conversations/{cid}`` (from :attr:`conversations`,
    else 404), ``PATCH .../participants/{pid}/attributes`` (202, merged into the stored read).
    Web Messaging: every frame is recorded in :attr:`frames`; ``configureSession`` is answered from
    :attr:`session_answers` (else a new session), ``onMessage`` with its echo and ``echo`` with
    the health check's answer, unless :meth:`hold` says to leave an action unanswered (the test
    then answers with :meth:`push`). :attr:`scripted` queues the next answers of an action.
    """

    conversations: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: list[Seen] = field(default_factory=list)
    frames: list[dict[str, Any]] = field(default_factory=list)
    session_answers: deque[dict[str, Any]] = field(default_factory=deque)
    scripted: dict[str, deque[list[dict[str, Any]]]] = field(default_factory=dict)
    held: set[str] = field(default_factory=set)
    #: the guest history (``GET /api/v2/webmessaging/messages``), newest first
    history: list[dict[str, Any]] = field(default_factory=list)
    #: a held ``onMessage`` is still stored in :attr:`history` (its answer lost, not the message)
    store_held: bool = False
    #: the guest history answers this error status instead (None: it answers)
    history_status: int | None = None
    urls: dict[str, str] = field(default_factory=dict)
    _sockets: list[ServerConnection] = field(default_factory=list)
    _ids: itertools.count[int] = field(default_factory=itertools.count)

    # -- scripting -------------------------------------------------------------------------------

    def hold(self, action: str) -> None:
        """Leave ``action`` unanswered: the test answers with :meth:`push`."""
        self.held.add(action)

    def answer_next(self, action: str, *frames: dict[str, Any]) -> None:
        """Answer the next ``action`` with ``frames`` (in order) instead of the default."""
        self.scripted.setdefault(action, deque()).append(list(frames))

    async def push(self, frame: dict[str, Any]) -> None:
        """Send ``frame`` on every open Web Messaging connection."""
        for ws in list(self._sockets):
            with suppress(ConnectionClosed):
                await ws.send(json.dumps(frame))

    def sent(self, action: str) -> list[dict[str, Any]]:
        """The frames of ``action`` the daemon sent, in order."""
        return [f for f in self.frames if f.get("action") == action]

    def seen(self, method: str, prefix: str = "/api/") -> list[Seen]:
        return [r for r in self.requests if r.method == method and r.path.startswith(prefix)]

    # -- HTTP ------------------------------------------------------------------------------------

    async def _token(self, request: web.Request) -> web.Response:
        self.requests.append(await _seen(request))
        body = {"access_token": ACCESS_TOKEN, "token_type": "bearer", "expires_in": 86400}
        return web.json_response(body)

    async def _get_conversation(self, request: web.Request) -> web.Response:
        self.requests.append(await _seen(request))
        body = self.conversations.get(request.match_info["cid"])
        if body is None:
            error = {"message": "The requested resource was not found.", "code": "not.found", "status": 404}
            return web.json_response(error, status=404)
        return web.json_response(body)

    async def _patch_attributes(self, request: web.Request) -> web.Response:
        seen = await _seen(request)
        self.requests.append(seen)
        conversation = self.conversations.get(request.match_info["cid"])
        pid = request.match_info["pid"]
        for participant in conversation["participants"] if conversation else ():
            if participant["id"] == pid and isinstance(seen.json, dict):
                participant["attributes"].update(seen.json.get("attributes") or {})
        return web.Response(status=202)

    # -- Web Messaging ---------------------------------------------------------------------------

    async def _socket(self, ws: ServerConnection) -> None:
        self._sockets.append(ws)
        try:
            async for text in ws:
                frame = json.loads(text)
                self.frames.append(frame)
                for reply in self._answers(frame):
                    await ws.send(json.dumps(reply))
        except ConnectionClosed:
            pass
        finally:
            self._sockets.remove(ws)

    def _answers(self, frame: dict[str, Any]) -> list[dict[str, Any]]:
        action = frame.get("action")
        queue = self.scripted.get(str(action))
        if queue:
            return queue.popleft()
        if action in self.held:
            if action == "onMessage" and self.store_held:
                message = frame.get("message", {})
                stored = message_echo(frame["tracingId"], message.get("text", ""), f"m-{next(self._ids)}")
                body = stored["body"]
                if "metadata" in message:
                    body["metadata"] = message["metadata"]
                self.history.insert(0, body)
            return []
        if action == "configureSession":
            return [self.session_answers.popleft() if self.session_answers else session_response()]
        if action == "onMessage":
            text = frame.get("message", {}).get("text", "")
            return [message_echo(frame["tracingId"], text, f"m-{next(self._ids)}")]
        if action == "echo":
            return [HEALTH_CHECK_ANSWER]
        if action == "getJwt":
            # GMT JwtResponse.kt {jwt, exp}: exp in epoch seconds, an hour on
            body = {"jwt": GUEST_JWT, "exp": int(time.time()) + 3600}
            return [
                {
                    "type": "response",
                    "class": "JwtResponse",
                    "code": 200,
                    "body": body,
                    "tracingId": frame["tracingId"],
                }
            ]
        return []

    async def _history(self, request: web.Request) -> web.Response:
        """GMT ``messageEntityResponseWith3Messages``'s shape: ``{entities, pageSize, pageNumber,
        total, pageCount}``, newest first; 401 without the guest JWT."""
        seen = await _seen(request)
        self.requests.append(seen)
        if self.history_status is not None:
            body = {"message": "refused", "code": "bad.request", "status": self.history_status}
            return web.json_response(body, status=self.history_status)
        if (seen.auth_scheme, seen.auth_principal) != ("bearer", GUEST_JWT):
            return web.json_response({"message": "no", "code": "bad.credentials", "status": 401}, status=401)
        size = int(request.query.get("pageSize", "25"))
        number = int(request.query.get("pageNumber", "1"))
        page = self.history[(number - 1) * size : number * size]
        pages = max(1, -(-len(self.history) // size))
        body = {
            "entities": page,
            "pageSize": size,
            "pageNumber": number,
            "total": len(self.history),
            "pageCount": pages,
        }
        return web.json_response(body)


@asynccontextmanager
async def genesys_wire() -> AsyncIterator[GenesysWire]:
    wire = GenesysWire()
    app = web.Application()
    app.router.add_post("/oauth/token", wire._token)
    app.router.add_get("/api/v2/conversations/{cid}", wire._get_conversation)
    app.router.add_patch("/api/v2/conversations/{cid}/participants/{pid}/attributes", wire._patch_attributes)
    app.router.add_get("/api/v2/webmessaging/messages", wire._history)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    server = site._server
    assert server is not None
    http_port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        async with serve(wire._socket, "127.0.0.1", 0) as ws_server:
            ws_port = next(iter(ws_server.sockets)).getsockname()[1]
            base = f"http://127.0.0.1:{http_port}"
            wire.urls = {
                "login": base,
                "api": base,
                "webmessaging": f"ws://127.0.0.1:{ws_port}",
                "streaming": "ws://127.0.0.1:9",  # no notifications session is configured
            }
            yield wire
    finally:
        await runner.cleanup()
