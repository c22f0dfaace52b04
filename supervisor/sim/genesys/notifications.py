"""Notifications: channel REST on the API host and the channel WebSocket on the streaming host.

REST (platforms.md §2, SIMULATOR SPEC 3):

- ``POST /api/v2/notifications/channels`` -> ``{"connectUri":"ws://127.0.0.1:P/channels/<id>","id","expires"}``;
  the 21st channel of a client evicts one (unconnected first, then oldest last-used); an evicted
  channel's socket gets ``{"result":"404",...}`` then a close 1001 [I];
- ``GET /api/v2/notifications/channels`` -> ``{"entities":[Channel...]}``;
- ``HEAD /api/v2/notifications/channels/{channelId}`` -> 200 or 404, no body;
- ``GET|POST|PUT|DELETE .../{channelId}/subscriptions``, body ``[{"id": topic}]`` ->
  ``{"entities":[ChannelTopic{"id","state"}]}`` (DELETE: 204). A topic that fits no documented
  template, or one ``denied_topics`` refuses, is ``Rejected`` (:mod:`.topics`): without
  ``?ignoreErrors=true`` the whole request fails (400 ``bad.request`` for an unknown topic, 403
  ``missing.permissions`` otherwise, platforms.md §2) and nothing is stored; with it the permitted
  topics are stored and the answer lists the others as ``Rejected`` with ``rejectionReason`` and
  ``missingPermissions``. Subscribing extends the channel lifetime (``channel_ttl_s`` after the
  last subscribe);
- ``GET /api/v2/notifications/availabletopics`` -> ``AvailableTopicEntityListing`` (the templates).

WebSocket ``/channels/{id}`` (SIMULATOR SPEC 4): a heartbeat
``{"topicName":"channel.metadata","eventBody":{"message":"WebSocket Heartbeat"}}`` every
``heartbeat_interval_s``; ``{"message":"ping"}`` -> pong; ``{"message":"subscribe","topics":[..],
"correlationId":C}`` -> ``{"result":"200","status":"subscribed","correlationId":C}`` (bad request ->
``{"result":"400","status":"error","message":..}``); events
``{"topicName","version":"2","eventBody","metadata":{"CorrelationId"}}``, published on conversation
activity (agent and guest messages, attribute changes, disconnects; :func:`.topics.events_for`) and
by :meth:`NotificationsHub.publish`; a subscribe naming a rejected topic gets
``{"result":"400","status":"error","message":..}`` and stores nothing [I]; SOCKET_CLOSING sends ``v2.system.socket_closing`` then closes
after the lead time; a channel past its lifetime, or whose creating token expired or was
revoked (§2), is closed with 1001.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from websockets.asyncio.server import ServerConnection, broadcast
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request as WsRequest
from websockets.http11 import Response

from supervisor.sim.bodies import MalformedBody, parse_json
from supervisor.sim.faults import Fault, FaultKind
from supervisor.sim.genesys.connections import WsListener
from supervisor.sim.genesys.context import SimContext
from supervisor.sim.genesys.conversations import ConversationChange
from supervisor.sim.genesys.rest import BadRequest, Handler, Reply, Request, read_json
from supervisor.sim.genesys.state import Channel
from supervisor.sim.genesys.topics import TopicVerdict, available_topics, events_for, judge
from supervisor.sim.genesys.wire import ErrorCode, encode, iso_utc

__all__ = ["CHANNEL_ROUTES", "NotificationsHub"]

LISTENER = "streaming"
ENDPOINT = "WS /channels/{id}"
_HEARTBEAT = encode({"topicName": "channel.metadata", "eventBody": {"message": "WebSocket Heartbeat"}})
_PONG = encode({"topicName": "channel.metadata", "eventBody": {"message": "pong"}})


def _channel_wire(ctx: SimContext, chan: Channel) -> dict[str, Any]:
    expires = ctx.clock.time() + (chan.expires_at - ctx.clock.monotonic())
    uri = f"{ctx.urls.get('streaming', 'ws://127.0.0.1:0')}/channels/{chan.id}"
    return {"connectUri": uri, "id": chan.id, "expires": iso_utc(expires)}


def _owned(req: Request) -> Channel:
    chan = req.ctx.state.channels.get(req.http.match_info["channelId"])
    if chan is None:
        raise BadRequest("The requested resource was not found.", ErrorCode.NOT_FOUND, 404)
    chan.last_used = req.ctx.clock.monotonic()
    return chan


async def create_channel(req: Request) -> Reply:
    chan, evicted = req.ctx.state.create_channel(req.token.client_id, req.token)
    if evicted is not None:
        req.ctx.recorder.record_event("channel_evicted")
        if req.ctx.channel_evicted is not None:
            req.ctx.channel_evicted(evicted.id)
    return Reply(200, _channel_wire(req.ctx, chan))


async def list_channels(req: Request) -> Reply:
    mine = [c for c in req.ctx.state.channels.values() if c.owner == req.token.client_id]
    return Reply(200, {"entities": [_channel_wire(req.ctx, c) for c in mine]})


async def head_channel(req: Request) -> Reply:
    if req.ctx.state.channels.get(req.http.match_info["channelId"]) is None:
        return Reply(404)  # HEAD: status only
    return Reply(200)


def _topics(data: Any, limit: int) -> list[str]:
    if not isinstance(data, list) or not all(
        isinstance(t, dict) and isinstance(t.get("id"), str) for t in data
    ):
        raise BadRequest('The body must be a list of {"id": topic} objects.', ErrorCode.INVALID_VALUE)
    topics = [t["id"] for t in data if t["id"]]
    if len(topics) > limit:
        raise BadRequest(f"A channel holds at most {limit} topics.", ErrorCode.INVALID_VALUE)
    return topics


def _listing(chan: Channel, rejected: list[TopicVerdict] | None = None) -> dict[str, Any]:
    entities = [{"id": t, "state": "Permitted"} for t in chan.topics]
    return {"entities": entities + [v.to_wire() for v in rejected or ()]}


def _verdicts(req: Request, topics: list[str]) -> tuple[list[str], list[TopicVerdict]]:
    """(permitted topics, rejections); raises the whole-request error unless ``ignoreErrors=true``."""
    verdicts = [judge(t, req.ctx.config.denied_topics) for t in topics]
    rejected = [v for v in verdicts if not v.permitted]
    if rejected and req.http.query.get("ignoreErrors", "").lower() != "true":
        first = rejected[0]
        if first.missing:
            # platforms.md §2 [D]: an unpermitted topic makes the whole request a 403
            raise BadRequest(first.reason, ErrorCode.MISSING_PERMISSIONS, 403)
        raise BadRequest(first.reason, ErrorCode.BAD_REQUEST, 400)  # [I] status of an unknown topic
    return [v.id for v in verdicts if v.permitted], rejected


async def subscriptions(req: Request) -> Reply:
    chan = _owned(req)
    method = req.http.method
    if method == "GET":
        return Reply(200, _listing(chan))
    if method == "DELETE":
        chan.topics.clear()
        return Reply(204)
    topics, rejected = _verdicts(req, _topics(await read_json(req.http), req.ctx.config.max_topics))
    merged = topics if method == "PUT" else list(dict.fromkeys([*chan.topics, *topics]))
    if len(merged) > req.ctx.config.max_topics:
        raise BadRequest(
            f"A channel holds at most {req.ctx.config.max_topics} topics.", ErrorCode.INVALID_VALUE
        )
    chan.topics = merged
    chan.expires_at = req.ctx.clock.monotonic() + req.ctx.config.channel_ttl_s
    return Reply(200, _listing(chan, rejected))


async def get_available_topics(req: Request) -> Reply:
    return Reply(200, available_topics())


_BASE = "/api/v2/notifications/channels"
_SUBS = _BASE + "/{channelId}/subscriptions"
CHANNEL_ROUTES: list[tuple[str, str, Handler]] = [
    ("POST", _BASE, create_channel),
    ("GET", _BASE, list_channels),
    ("HEAD", _BASE + "/{channelId}", head_channel),
    ("GET", "/api/v2/notifications/availabletopics", get_available_topics),
    *((m, _SUBS, subscriptions) for m in ("GET", "POST", "PUT", "DELETE")),
]


class NotificationsHub:
    """The streaming host: channel sockets, heartbeats, events, socket_closing."""

    def __init__(self, ctx: SimContext) -> None:
        self.ctx = ctx
        self.listener = WsListener(ctx, LISTENER, ENDPOINT)
        self.listener.extra[FaultKind.SOCKET_CLOSING] = self._socket_closing
        self.by_channel: dict[str, ServerConnection] = {}
        ctx.channel_evicted = self._evicted
        ctx.conversation_changed = self.conversation_changed

    async def process_request(self, conn: ServerConnection, request: WsRequest) -> Response | None:
        path = request.path.split("?", 1)[0]
        if not path.startswith("/channels/") or path[10:] not in self.ctx.state.channels:
            return self.listener.refuse(conn, 404, "Not Found")
        return await self.listener.admit(conn, request)

    async def handler(self, conn: ServerConnection) -> None:
        chan_id = conn.request.path.split("?", 1)[0][10:] if conn.request else ""
        chan = self.ctx.state.channels.get(chan_id)
        if chan is None:
            await conn.close(1001, "channel expired")
            return
        old = self.by_channel.get(chan_id)
        if old is not None:  # one connection per channel (§2) [I]: the newer one wins
            self.listener.spawn(old.close(1001, "replaced by a new connection"))
        self.by_channel[chan_id] = conn
        chan.connected = True
        self.listener.opened(conn, chan_id)
        try:
            if self.listener.intercept(conn):
                await conn.wait_closed()
                return
            async for frame in conn:
                if self.listener.intercept(conn):
                    continue
                await self._on_frame(conn, chan, frame)
        except ConnectionClosed:
            pass
        finally:
            self.listener.closed(conn)
            if self.by_channel.get(chan_id) is conn:
                del self.by_channel[chan_id]
                chan.connected = False

    async def _on_frame(self, conn: ServerConnection, chan: Channel, frame: str | bytes) -> None:
        rec = self.ctx.recorder
        try:
            msg = parse_json(frame)
        except MalformedBody:  # answered "Unsupported or malformed message." below (§2)
            msg = None
        kind = msg.get("message") if isinstance(msg, dict) else None
        rec.record_ws_message(LISTENER, "in", kind if isinstance(kind, str) else "invalid")
        chan.last_used = self.ctx.clock.monotonic()
        if kind == "ping":
            reply = _PONG
        elif kind in ("subscribe", "unsubscribe") and isinstance(msg, dict):
            reply = self._subscribe(chan, msg, kind)
        else:
            reply = encode(
                {"result": "400", "status": "error", "message": "Unsupported or malformed message."}
            )
        rec.record_ws_message(LISTENER, "out", "reply")
        await conn.send(reply.decode())

    def _subscribe(self, chan: Channel, msg: dict[str, Any], kind: str) -> bytes:
        topics = msg.get("topics")
        corr = msg.get("correlationId")
        if not isinstance(topics, list) or not topics or not all(isinstance(t, str) and t for t in topics):
            body: dict[str, Any] = {
                "result": "400",
                "status": "error",
                "message": "Required data missing from subscribe request.",
            }
        elif kind == "subscribe" and len(set(chan.topics) | set(topics)) > self.ctx.config.max_topics:
            body = {"result": "400", "status": "error", "message": "Too many topics for this channel."}
        elif kind == "subscribe" and (
            refused := [
                v for v in (judge(t, self.ctx.config.denied_topics) for t in topics) if not v.permitted
            ]
        ):
            body = {"result": "400", "status": "error", "message": refused[0].reason}
        else:
            if kind == "subscribe":
                chan.topics = list(dict.fromkeys([*chan.topics, *topics]))
                chan.expires_at = self.ctx.clock.monotonic() + self.ctx.config.channel_ttl_s
                body = {"result": "200", "status": "subscribed"}
            else:
                chan.topics = [t for t in chan.topics if t not in topics]
                body = {"result": "200", "status": "unsubscribed"}
        if corr is not None:
            body["correlationId"] = corr
        return encode(body)

    # -- pushes -------------------------------------------------------------------------------------

    def heartbeat(self) -> int:
        """Send one heartbeat to every live channel socket; returns how many."""
        conns = self.listener.live()
        broadcast(conns, _HEARTBEAT.decode())
        if conns:
            self.ctx.recorder.record_event("heartbeat", listener=LISTENER, sockets=0)
        return len(conns)

    async def run_heartbeats(self) -> None:
        """Heartbeat forever at ``heartbeat_interval_s`` (real time: heartbeats are wire traffic)."""
        while True:
            await asyncio.sleep(self.ctx.config.heartbeat_interval_s)
            self.heartbeat()

    def publish(self, topic: str, body: dict[str, Any], correlation_id: str | None = None) -> int:
        """Send an event to every live socket subscribed to ``topic``; returns how many."""
        event = {
            "topicName": topic,
            "version": "2",
            "eventBody": body,
            "metadata": {"CorrelationId": correlation_id or self.ctx.state.uuid()},
        }
        conns = [
            conn
            for chan_id, conn in self.by_channel.items()
            if conn not in self.listener.blackholed
            and topic in self.ctx.state.channels.get(chan_id, _NONE).topics
        ]
        broadcast(conns, encode(event).decode())
        return len(conns)

    def conversation_changed(self, change: ConversationChange) -> None:
        """Publish what real Genesys publishes for a conversation change (:func:`.topics.events_for`)."""
        if not any(self.ctx.state.channels.get(c, _NONE).topics for c in self.by_channel):
            return  # nobody could receive anything: build nothing
        now_ms = int(self.ctx.clock.time() * 1000)
        for topic, body in events_for(change, now_ms):
            if self.publish(topic, body):
                self.ctx.recorder.record_ws_message(LISTENER, "out", "event")

    def sweep(self) -> None:
        """Close the sockets of channels past their lifetime (called on the simulator's tick)."""
        for chan in self.ctx.state.expired_channels():
            conn = self.by_channel.get(chan.id)
            if conn is not None:
                self.ctx.recorder.record_event("channel_expired")
                self.listener.spawn(conn.close(1001, "channel expired"))

    def _evicted(self, chan_id: str) -> None:
        conn = self.by_channel.get(chan_id)
        if conn is None:
            return
        gone = encode({"result": "404", "message": "Channel was removed: over the channel limit."}).decode()

        async def tell_and_close() -> None:
            with contextlib.suppress(ConnectionClosed):
                await conn.send(gone)
            await conn.close(1001, "channel removed")

        self.listener.spawn(tell_and_close())

    def _socket_closing(self, conn: ServerConnection, fault: Fault) -> None:
        lead = fault.params.get("lead_s")
        lead_s = float(lead) if lead is not None else self.ctx.config.socket_closing_lead_s
        chan_id = self.listener.conns.get(conn, "")
        now = self.ctx.clock.time()
        message = {
            "topicName": "v2.system.socket_closing",
            "version": "2",
            "eventBody": {
                "channelId": chan_id,
                "systemTopicType": "socket_closing",
                "correlationId": self.ctx.state.uuid(),
                "reason": "maintenance",
                "message": "This socket will close; reconnect on a new channel.",
                "data": {"closeAt": iso_utc(now + lead_s)},
            },
            "metadata": {"CorrelationId": self.ctx.state.uuid()},
        }
        code = int(fault.params.get("code") or 1001)

        async def warn_then_close() -> None:
            with contextlib.suppress(ConnectionClosed):
                await conn.send(encode(message).decode())
                self.ctx.recorder.record_ws_message(LISTENER, "out", "v2.system.socket_closing")
            await asyncio.sleep(lead_s)
            await conn.close(code, "socket closing")

        self.listener.spawn(warn_then_close())


_NONE = Channel("", "", 0.0, 0.0, 0.0)
