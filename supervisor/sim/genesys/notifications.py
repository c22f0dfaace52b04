"""Notifications: channel REST on the API host and the channel WebSocket on the streaming host.

REST (docs/platforms.md, "Genesys Cloud notifications"; docs/simulators.md):

- ``POST /api/v2/notifications/channels`` -> ``{"connectUri":"ws://127.0.0.1:P/channels/<id>","id","expires"}``;
  the 21st channel of a client evicts one (unconnected first, then oldest last-used); an evicted
  channel's socket gets ``{"result":"404",...}`` then a close 1001 [I];
- ``GET /api/v2/notifications/channels`` -> ``{"entities":[Channel...]}``;
- ``HEAD /api/v2/notifications/channels/{channelId}`` -> 200 or 404, no body;
- ``GET|POST|PUT|DELETE .../{channelId}/subscriptions``, body ``[{"id": topic}]`` ->
  ``{"entities":[ChannelTopic{"id","state"}]}`` (DELETE: 204). A topic that fits no documented
  template, or one ``denied_topics`` refuses, is ``Rejected`` (:mod:`.topics`): without
  ``?ignoreErrors=true`` the whole request fails (400 ``bad.request`` for an unknown topic, 403
  ``missing.permissions`` otherwise, docs/platforms.md, "Genesys Cloud notifications") and nothing is stored; with it the permitted
  topics are stored and the answer lists the others as ``Rejected`` with ``rejectionReason`` and
  ``missingPermissions``. Subscribing extends the channel lifetime (``channel_ttl_s`` after the
  last subscribe);
- ``GET /api/v2/notifications/availabletopics`` -> ``AvailableTopicEntityListing`` (the templates).

WebSocket ``/channels/{id}`` (docs/platforms.md, "The channel's WebSocket"): a heartbeat
``{"topicName":"channel.metadata","eventBody":{"message":"WebSocket Heartbeat"}}`` every
``heartbeat_interval_s``; ``{"message":"ping"}`` -> pong; ``{"message":"subscribe","topics":[..],
"correlationId":C}`` -> ``{"result":"200","status":"subscribed","correlationId":C}`` (bad request ->
``{"result":"400","status":"error","message":..}``); events
``{"topicName","version":"2","eventBody","metadata":{"CorrelationId"}}``, published on conversation
activity (agent and guest messages, attribute changes, disconnects; :func:`.topics.events_for`) and
by :meth:`NotificationsHub.publish`; a subscribe naming a rejected topic gets
``{"result":"400","status":"error","message":..}`` and stores nothing [I]; SOCKET_CLOSING sends
``v2.system.socket_closing`` then closes after the lead time.

A channel the platform drops says why on its socket, then is closed with 1001 [I: the close]
(docs/runtime.md, "Notifications rollover"; docs/platforms.md, "Genesys Cloud notifications"):

- past its lifetime, or its creating token expired: ``{"result":"404","message":..}`` (GN3P
  ``channel.py``: a 404 means the channel expired, was displaced over the quota, or "the auth token
  used for the channel has expired");
- its creating token revoked: ``v2.system.token_revoked`` (PY269 ``SystemMessageSystemMessage``,
  reason ``user_tokens_revoked``). A TOKEN_REVOKE (or TOKEN_EXPIRE) fault reaches the tokens that
  created channels at once, not at their next REST use: the platform knows what it revoked.

SYSTEM_TOPIC faults (and :meth:`NotificationsHub.system_message`) send the other system topics PY269
names, with their effect: ``no_longer_subscribed`` (reason ``another_channel_subscribed``) takes the
channel's topics away, ``subscription_changed`` replaces them (an extension: no vendor source says
when the platform sends them, docs/simulators.md).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from websockets.asyncio.server import ServerConnection, broadcast
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request as WsRequest
from websockets.http11 import Response

from supervisor.sim.activity import ActivityKind
from supervisor.sim.bodies import MalformedBody, parse_json
from supervisor.sim.faults import Fault, FaultKind
from supervisor.sim.genesys.connections import WsListener
from supervisor.sim.genesys.context import SimContext
from supervisor.sim.genesys.conversations import ConversationChange
from supervisor.sim.genesys.rest import BadRequest, Handler, Reply, Request, read_json
from supervisor.sim.genesys.state import Channel
from supervisor.sim.genesys.topics import TopicVerdict, available_topics, events_for, judge
from supervisor.sim.genesys.wire import ErrorCode, encode, iso_utc
from supervisor.vocabulary import CloseCode

__all__ = ["CHANNEL_ROUTES", "NotificationsHub"]

LISTENER = "streaming"
ENDPOINT = "WS /channels/{id}"
_HEARTBEAT = encode({"topicName": "channel.metadata", "eventBody": {"message": "WebSocket Heartbeat"}})
# PY269 SystemMessageSystemMessage reason values
_SYSTEM_REASONS = {
    "no_longer_subscribed": "another_channel_subscribed",
    "token_revoked": "user_tokens_revoked",
}
_SYSTEM_TEXT = {
    "no_longer_subscribed": "This channel is no longer subscribed: another channel subscribed to its topics.",
    "subscription_changed": "The subscriptions of this channel changed.",
    "token_revoked": "The token that created this channel was revoked.",
}
_TOKEN_FAULTS = (FaultKind.TOKEN_REVOKE, FaultKind.TOKEN_EXPIRE)
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
            # docs/platforms.md, "Genesys Cloud notifications" [D]: an unpermitted topic makes the whole request a 403
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
    if req.ctx.channel_subscribed is not None:
        req.ctx.channel_subscribed(chan.id)
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
        self.listener.extra[FaultKind.SYSTEM_TOPIC] = self._system_topic
        self.by_channel: dict[str, ServerConnection] = {}
        # Python API for tests: called with a channel id once its subscriptions are stored
        self.on_subscribed: list[Callable[[str], None]] = []
        ctx.channel_evicted = self._evicted
        ctx.channel_subscribed = self._subscribed
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
            await conn.close(CloseCode.GOING_AWAY, "channel expired")
            return
        old = self.by_channel.get(chan_id)
        if old is not None:  # one connection per channel (§2) [I]: the newer one wins
            self.listener.displaced(chan_id, old, conn)
            self.listener.spawn(old.close(CloseCode.GOING_AWAY, "replaced by a new connection"))
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
            self.listener.record(conn, ActivityKind.DISCONNECT, chan_id)
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
        self.listener.record(
            conn, ActivityKind.FRAME, chan.id, message=kind[:40] if isinstance(kind, str) else "invalid"
        )
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
                self._subscribed(chan.id)
            else:
                chan.topics = [t for t in chan.topics if t not in topics]
                body = {"result": "200", "status": "unsubscribed"}
        if corr is not None:
            body["correlationId"] = corr
        return encode(body)

    def _subscribed(self, chan_id: str) -> None:
        for hook in list(self.on_subscribed):
            hook(chan_id)

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
        """Drop channels past their lifetime or whose creating token expired or was revoked, each
        told why on its socket first (called on the simulator's tick)."""
        self._apply_token_faults()
        for chan in self.ctx.state.expired_channels():
            conn = self.by_channel.get(chan.id)
            if conn is None:
                continue
            token = chan.token
            if token is not None and token.revoked:
                self.ctx.recorder.record_event("channel_token_revoked")
                self._tell_and_close(conn, self._system_frame(chan.id, "token_revoked"), "token revoked")
                continue
            self.ctx.recorder.record_event("channel_expired")
            now = self.ctx.clock.monotonic()
            if now >= chan.expires_at:
                text = "Channel has expired."
            else:
                text = "Channel was removed: the auth token used for it has expired."
            self._tell_and_close(conn, encode({"result": "404", "message": text}), "channel expired")

    def _apply_token_faults(self) -> None:
        """TOKEN_REVOKE / TOKEN_EXPIRE reach the tokens that created channels now (as a REST call
        with them would, :func:`.rest._authenticate`): the platform drops those channels."""
        faults = self.ctx.faults
        if not any(f.kind in _TOKEN_FAULTS for f in faults.active()):
            return
        for chan in list(self.ctx.state.channels.values()):
            token = chan.token
            if token is None or token.revoked or token.expired:
                continue
            for kind in _TOKEN_FAULTS:
                for fault in list(faults.candidates(kind, token.id, ENDPOINT)):
                    if token.issued_at <= faults.started_at(fault) and faults.hit(fault):
                        self.ctx.recorder.record_fault_hit(fault)
                        token.revoked = token.revoked or kind is FaultKind.TOKEN_REVOKE
                        token.expired = token.expired or kind is FaultKind.TOKEN_EXPIRE

    def _tell_and_close(self, conn: ServerConnection, frame: bytes, reason: str) -> None:
        async def tell_and_close() -> None:
            with contextlib.suppress(ConnectionClosed):
                await conn.send(frame.decode())
            await conn.close(CloseCode.GOING_AWAY, reason)

        self.listener.spawn(tell_and_close())

    def _evicted(self, chan_id: str) -> None:
        conn = self.by_channel.get(chan_id)
        if conn is None:
            return
        gone = encode({"result": "404", "message": "Channel was removed: over the channel limit."})
        self._tell_and_close(conn, gone, "channel removed")

    # -- the other v2.system topics ---------------------------------------------------------------------

    def _system_frame(self, chan_id: str, kind: str, reason: str | None = None) -> bytes:
        """A ``v2.system.<kind>`` message: PY269 ``SystemMessageSystemMessage`` in the eventBody."""
        body: dict[str, Any] = {
            "channelId": chan_id,
            "systemTopicType": kind,
            "correlationId": self.ctx.state.uuid(),
            "message": _SYSTEM_TEXT.get(kind, kind),
        }
        chan = self.ctx.state.channels.get(chan_id)
        if chan is not None:
            body["oauthClientId"] = chan.owner
        why = reason or _SYSTEM_REASONS.get(kind)
        if why:
            body["reason"] = why
        message = {
            "topicName": f"v2.system.{kind}",
            "version": "2",
            "eventBody": body,
            "metadata": {"CorrelationId": self.ctx.state.uuid()},
        }
        return encode(message)

    def system_message(
        self, chan_id: str, kind: str, *, reason: str | None = None, topics: list[str] | None = None
    ) -> bool:
        """Send ``v2.system.<kind>`` to the channel's socket, with its effect; False when the channel
        has no open socket. ``no_longer_subscribed`` takes the channel's topics away,
        ``subscription_changed`` makes them ``topics`` (none by default), ``token_revoked`` revokes
        the token that created it (every channel of that token is told, then dropped)."""
        chan = self.ctx.state.channels.get(chan_id)
        conn = self.by_channel.get(chan_id)
        if chan is None or conn is None:
            return False
        if kind == "token_revoked":
            if chan.token is not None:
                chan.token.revoked = True
            else:
                chan.expires_at = self.ctx.clock.monotonic()  # [I] a channel without a token: dropped
            self.sweep()
            return True
        if kind == "no_longer_subscribed":
            chan.topics = []
        elif kind == "subscription_changed":
            chan.topics = list(dict.fromkeys(topics or []))
        self.ctx.recorder.record_ws_message(LISTENER, "out", f"v2.system.{kind}")

        async def tell() -> None:
            with contextlib.suppress(ConnectionClosed):
                await conn.send(self._system_frame(chan_id, kind, reason).decode())

        self.listener.spawn(tell())
        return True

    def _system_topic(self, conn: ServerConnection, fault: Fault) -> None:
        chan_id = self.listener.conns.get(conn, "")
        topics = fault.params.get("topics")
        self.system_message(
            chan_id,
            str(fault.params["type"]),
            reason=fault.params.get("reason"),
            topics=list(topics) if topics is not None else None,
        )

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
        code = int(fault.params.get("code") or CloseCode.GOING_AWAY)

        async def warn_then_close() -> None:
            with contextlib.suppress(ConnectionClosed):
                await conn.send(encode(message).decode())
                self.ctx.recorder.record_ws_message(LISTENER, "out", "v2.system.socket_closing")
            await asyncio.sleep(lead_s)
            await conn.close(code, "socket closing")

        self.listener.spawn(warn_then_close())


_NONE = Channel("", "", 0.0, 0.0, 0.0)
