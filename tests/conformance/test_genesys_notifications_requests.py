"""What the daemon sends to roll a notifications session over, held against what PY269 sends (docs/runtime.md,
"Notifications rollover"): create the channel, subscribe every topic in one request, close the old channel.

A loopback recorder answers from ``fixtures/genesys_notifications.json`` (the shapes PY269's
``NotificationsApi`` sends and reads, restated) and records every request: method, path, query,
``Content-Type``, ``Accept``, the ``Authorization`` scheme and the JSON body. PY269 itself is run
against it first, so the fixture is held to the SDK; then the daemon's transport opens a session,
gets ``v2.system.socket_closing`` and rolls over, and each of its requests must match the fixture.
No request outside the fixture is allowed (PY269 has no call that deletes a channel: the old one
is closed, 1000, and is then the first the platform removes).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from aiohttp import WSMsgType, web

from machines.registry import CircuitRegistry, Endpoints
from supervisor.attempts import Attempts
from supervisor.boundary import SessionContext
from supervisor.clock import SystemClock
from supervisor.config import Keepalive, Secret
from supervisor.rest.executor import RetryExecutor
from supervisor.rest.pipeline import RequestPipeline
from supervisor.rest.tokens import GenesysClientCredentials, TokenCache
from supervisor.taxonomy import Channel, Classifier, Platform, RawError, load_taxonomy
from supervisor.transports.base import Rollover
from supervisor.transports.notifications import NotificationsTransport
from supervisor.vocabulary import CloseCode
from tests.conformance.conftest import G, sdk
from tests.harness.waits import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "genesys_notifications.json").read_text())
TOPICS = ["v2.users.agent-7.conversations", "v2.users.agent-7.presence"]
CHANNELS = "/api/v2/notifications/channels"
V2 = Classifier(load_taxonomy("v2"))


@dataclass
class Seen:
    """One thing the recorder saw, in order."""

    kind: str  # "http", "ws-open", "ws-in", "ws-close"
    shape: dict[str, Any] = field(default_factory=dict)
    channel: str = ""
    code: int | None = None


def fill(value: Any, **names: str) -> Any:
    """A fixture answer with its ``{placeholders}`` filled in."""
    if isinstance(value, str):
        for name, text in names.items():
            value = value.replace("{" + name + "}", text)
        return value
    if isinstance(value, list):
        return [fill(v, **names) for v in value]
    if isinstance(value, dict):
        return {k: fill(v, **names) for k, v in value.items()}
    return value


class Recorder:
    """A loopback stand-in for the API and streaming hosts that answers from the fixture."""

    def __init__(self) -> None:
        self.seen: list[Seen] = []
        self.topics: dict[str, list[str]] = {}
        self.sockets: dict[str, web.WebSocketResponse] = {}
        self.url = ""
        app = web.Application()
        app.router.add_post("/oauth/token", self.token)
        app.router.add_post(CHANNELS, self.create)
        app.router.add_route("*", CHANNELS + "/{channelId}/subscriptions", self.subscriptions)
        app.router.add_get("/channels/{channelId}", self.socket)
        self.runner = web.AppRunner(app)

    async def __aenter__(self) -> Recorder:
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        host, port = site._server.sockets[0].getsockname()[:2]  # type: ignore[union-attr]
        self.url = f"http://{host}:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        for ws in list(self.sockets.values()):
            await ws.close()
        await self.runner.cleanup()

    async def record(self, request: web.Request) -> dict[str, Any]:
        raw = await request.read()
        body: Any = "absent" if not raw else json.loads(raw)
        auth = request.headers.get("Authorization", "")
        path = request.path
        channel = request.match_info.get("channelId", "")
        shape = {
            "method": request.method,
            "path": path.replace(channel, "{channelId}") if channel else path,
            "query": dict(request.query),
            "contentType": request.headers.get("Content-Type", "").split(";")[0].strip() or None,
            "accept": request.headers.get("Accept"),
            "authorization": auth.split(" ", 1)[0] if auth else None,
            "body": body,
        }
        self.seen.append(Seen("http", shape, channel))
        return shape

    async def token(self, request: web.Request) -> web.Response:
        await request.read()  # the client-credentials grant, not part of what is compared
        return web.json_response(fill(FIXTURE["answers"]["token"], token=f"tok-{len(self.seen)}"))

    async def create(self, request: web.Request) -> web.Response:
        await self.record(request)
        channel_id = f"streaming-0-conformance{sum(1 for s in self.seen if s.kind == 'http')}"
        expires = (datetime.now(UTC) + timedelta(days=1)).isoformat(timespec="milliseconds")
        answer = fill(
            FIXTURE["answers"]["channel"],
            streaming=self.url.replace("http://", "ws://"),
            channelId=channel_id,
            expires=expires.replace("+00:00", "Z"),
        )
        return web.json_response(answer)

    async def subscriptions(self, request: web.Request) -> web.Response:
        shape = await self.record(request)
        channel_id = request.match_info["channelId"]
        if request.method == "PUT":
            self.topics[channel_id] = [t["id"] for t in shape["body"]]
        template = FIXTURE["answers"]["listing"]["entities"][0]
        entities = [fill(template, topic=t, channelId=channel_id) for t in self.topics.get(channel_id, [])]
        return web.json_response({"entities": entities})

    async def socket(self, request: web.Request) -> web.WebSocketResponse:
        channel_id = request.match_info["channelId"]
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self.sockets[channel_id] = ws
        self.seen.append(Seen("ws-open", channel=channel_id))
        async for msg in ws:
            if msg.type is not WSMsgType.TEXT:
                continue
            frame = json.loads(msg.data)
            self.seen.append(Seen("ws-in", frame, channel_id))
            if frame == {"message": "ping"}:
                await ws.send_json({"topicName": "channel.metadata", "eventBody": {"message": "pong"}})
        self.seen.append(Seen("ws-close", channel=channel_id, code=ws.close_code))
        return ws

    async def socket_closing(self, channel_id: str) -> None:
        await self.sockets[channel_id].send_json(
            {
                "topicName": "v2.system.socket_closing",
                "version": "2",
                "eventBody": {"channelId": channel_id, "message": "This socket will close soon."},
                "metadata": {"CorrelationId": "c-1"},
            }
        )

    def http(self) -> list[dict[str, Any]]:
        return [s.shape for s in self.seen if s.kind == "http"]


def expected(name: str, topics: list[str] | None = None) -> dict[str, Any]:
    shape = dict(FIXTURE["requests"][name])
    if name == "subscribe":
        shape["body"] = [{"id": t} for t in topics or TOPICS]  # every topic, in one request
    return shape


@pytest.fixture
async def recorder() -> AsyncIterator[Recorder]:
    async with Recorder() as rec:
        yield rec


async def test_the_fixture_is_what_py269_sends(recorder: Recorder) -> None:
    client = G.ApiClient(host=recorder.url)
    await sdk(client.get_client_credentials_token, "conformance-client", "secret")
    client.host = recorder.url
    api = G.NotificationsApi(client)
    channel = await sdk(api.post_notifications_channels)
    assert isinstance(channel, G.Channel) and channel.connect_uri.endswith(f"/channels/{channel.id}")
    assert channel.expires is not None  # the fixture's expires parses as PY269's datetime
    body = []
    for name in TOPICS:
        topic = G.ChannelTopic()  # PY269 models take no constructor arguments
        topic.id = name
        body.append(topic)
    listing = await sdk(api.put_notifications_channel_subscriptions, channel.id, body)
    assert [e.id for e in listing.entities] == TOPICS and {e.state for e in listing.entities} == {"Permitted"}
    await sdk(api.get_notifications_channel_subscriptions, channel.id)
    assert recorder.http() == [expected("create"), expected("subscribe"), expected("subscriptions")]


async def test_the_daemon_rolls_over_with_py269s_requests_and_closes_the_old_channel(
    recorder: Recorder,
) -> None:
    async with httpx.AsyncClient(timeout=10.0) as http:
        clock = SystemClock()
        tokens = TokenCache(GenesysClientCredentials(http, recorder.url, "client", Secret("secret")), clock)
        pipeline = RequestPipeline(
            http, RetryExecutor(V2, Attempts(Endpoints(clock, CircuitRegistry(clock))), clock), tokens=tokens
        )
        transport = NotificationsTransport(
            SessionContext("conformance", Platform.GENESYS, Channel.NOTIFICATIONS),
            pipeline=pipeline,
            api_url=recorder.url,
            topics=TOPICS,
            keepalive=Keepalive(ping_interval=60.0, ping_timeout=30.0, echo_interval=0.0, open_timeout=5.0),
        )
        conn = await transport.open()
        first = conn.channel_id
        rollovers: list[Rollover] = []
        conn.on_rolled_over = rollovers.append

        async def keep(raw: RawError) -> bool:
            event = V2.classify(raw)
            return not (event.fail_fast or event.reconnect or event.graceful)

        with anyio.fail_after(20.0):
            async with anyio.create_task_group() as tg:
                tg.start_soon(conn.serve, keep)
                await recorder.socket_closing(first)
                await wait_until(lambda: len(rollovers) == 1)
                second = conn.channel_id
                await wait_until(
                    lambda: any(s.kind == "ws-close" and s.channel == first for s in recorder.seen)
                )
                await conn.close(CloseCode.NORMAL_CLOSURE)
                tg.cancel_scope.cancel()
    assert recorder.http() == [
        expected("create"),
        expected("subscribe"),
        expected("create"),
        expected("subscribe"),
    ]
    order = [(s.kind, s.channel) for s in recorder.seen if s.kind != "ws-in"]
    # made before broken: the new channel is created, connected and subscribed, then the old closed
    assert order.index(("http", second)) < order.index(("ws-close", first))
    assert order.index(("ws-open", second)) < order.index(("http", second))
    closes = {s.channel: s.code for s in recorder.seen if s.kind == "ws-close"}
    assert closes[first] == 1000
    # nothing but the ping of the drain went over a socket: the subscription is the REST request
    assert {json.dumps(s.shape) for s in recorder.seen if s.kind == "ws-in"} <= {'{"message": "ping"}'}
