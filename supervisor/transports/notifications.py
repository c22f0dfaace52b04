"""Genesys Notifications channel (platforms.md §2): a :class:`~supervisor.transports.base.Transport`.

* :meth:`NotificationsTransport.open` creates a channel (``POST /api/v2/notifications/channels``
  through the :class:`~supervisor.rest.pipeline.RequestPipeline`: retries, token, circuit ``genesys:api``),
  connects to its ``connectUri`` (no credentials on the socket: the channel id is the capability, as
  on the real platform) and subscribes its topics on the socket.
* :meth:`NotificationsConnection.serve` treats heartbeats and pongs as liveness, sends
  ``{"message":"ping"}`` every ``keepalive.echo_interval`` s (a missing pong ends the connection,
  reported as 1006), reports ``v2.system.socket_closing`` (SOCKET_CLOSING: the runtime reconnects
  proactively, the old socket lives about one more minute) and ``{"result":"404"}`` (CHANNEL_LOST)
  in-band, and hands other topic events to ``on_event``.

Every open creates a new channel: after socket_closing the platform wants a new one, and a dead
channel without a connection is the first one evicted past the 20-channel limit (§2).
The bearer token goes only into the pipeline's REST call, never into a RawError.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any
from urllib.parse import urlsplit

import anyio
import websockets.exceptions as wsx
from websockets.asyncio.client import ClientConnection, connect
from websockets.protocol import State

from supervisor.boundary import (
    Learned,
    Reporter,
    SessionContext,
    raw_from_exception,
    raw_from_message,
)
from supervisor.config import Keepalive
from supervisor.errors import TransportFailure
from supervisor.rest.pipeline import RequestPipeline, ResponseCheck
from supervisor.taxonomy import Channel, RawError
from supervisor.transports.sockets import (
    abort_socket,
    decode_frame,
    discard_socket,
    malformed_frame,
    receive_frames,
    serve_alive,
    shutdown_socket,
)

__all__ = ["CHANNELS_PATH", "NotificationsConnection", "NotificationsTransport"]

CHANNELS_PATH = "/api/v2/notifications/channels"
_METADATA = "channel.metadata"  # heartbeats and pongs (§2)
_SOCKET_CLOSING = "v2.system.socket_closing"
_PING = json.dumps({"message": "ping"})

EventHandler = Callable[[Mapping[str, Any]], None]


class NotificationsTransport:
    """Opens notifications channels for one session (one channel per connection)."""

    # taxonomy v1 [responses."genesys.notifications.Channel"]: the PY269 Channel's id and connectUri
    response_kind = "genesys.notifications.Channel"

    def __init__(
        self,
        ctx: SessionContext,
        *,
        pipeline: RequestPipeline,
        api_url: str,
        topics: list[str],
        keepalive: Keepalive,
        on_event: EventHandler | None = None,
        close_timeout: float = 5.0,
        max_size: int = 1 << 20,
        proxy: str | None = None,
    ) -> None:
        if not topics:
            raise ValueError("a notifications channel needs at least one topic")
        self.context = ctx
        self.topics = list(topics)
        self._pipeline = pipeline
        self._create_url = api_url.rstrip("/") + CHANNELS_PATH
        self._keepalive = keepalive
        self._on_event = on_event
        self._close_timeout = close_timeout
        self._max_size = max_size
        self._proxy = proxy
        self._live: NotificationsConnection | None = None

    async def open(self) -> NotificationsConnection:
        """Create a channel, connect, subscribe; raises OperationError (REST) or TransportFailure."""
        response = await self._pipeline.request(
            "POST",
            self._create_url,
            ctx=self.context,
            circuit="genesys:api",
            operation="notifications.channel.create",
            channel=Channel.REST,
            # without id and connectUri there is nothing to connect to: INCOMPLETE_RESPONSE (seed §3)
            check=ResponseCheck(required=self._pipeline.classifier.required_fields(self.response_kind)),
        )
        channel: dict[str, Any] = response.json()
        channel_id, connect_uri = str(channel["id"]), str(channel["connectUri"])
        # the channel id is the session's platform id (correlation only: it is not a credential)
        ctx = self.context.learned(Learned(platform_session_id=channel_id))
        endpoint = urlsplit(connect_uri).path or "/channels"
        ka = self._keepalive
        try:
            ws = await connect(
                connect_uri,
                compression=None,
                proxy=self._proxy,
                open_timeout=ka.open_timeout,
                ping_interval=ka.ping_interval,  # RFC 6455 §5.5.2 keepalive under the app-level ping
                ping_timeout=ka.ping_timeout,
                close_timeout=self._close_timeout,
                max_size=self._max_size,
            )
        except (wsx.WebSocketException, OSError) as exc:
            raw = raw_from_exception(exc, ctx=ctx, method="CONNECT", endpoint=endpoint)
            raise TransportFailure(raw) from None
        conn = NotificationsConnection(self, ws, endpoint, ctx)
        try:
            with anyio.fail_after(ka.open_timeout):
                failure = await conn.subscribe(self.topics)
        except (wsx.WebSocketException, OSError) as exc:  # TimeoutError is an OSError
            failure = raw_from_exception(exc, ctx=ctx, method="subscribe", endpoint=endpoint)
        except BaseException:
            # cancelled while subscribing (the runner was stopped): the socket goes with the attempt,
            # or its keepalive holds it open with nobody serving it (issue 23); an abort awaits nothing
            abort_socket(ws)
            raise
        if failure is not None:
            await discard_socket(ws, failure, self._close_timeout)
            raise TransportFailure(failure)
        # the Channel as the platform sent it, and how the socket answered the subscribe
        conn.session_response = {**channel, "status": "subscribed"}
        self._live = conn
        return conn

    async def aclose(self) -> None:
        """Close a connection still open (daemon shutdown: 1001 going away)."""
        if self._live is not None:
            await self._live.close(1001)
            self._live = None


class NotificationsConnection:
    """One subscribed channel socket."""

    def __init__(
        self, transport: NotificationsTransport, ws: ClientConnection, endpoint: str, ctx: SessionContext
    ) -> None:
        self._t = transport
        self._ws = ws
        self._ctx = ctx
        self._endpoint = endpoint
        self.session_response: dict[str, Any] = {}
        self._pong = anyio.Event()
        self._closed = False
        self.heartbeats = 0

    @property
    def learned(self) -> Learned:
        """The channel this connection rides on, as the session's platform id."""
        return Learned(platform_session_id=self._ctx.platform_session_id)

    async def subscribe(self, topics: list[str]) -> RawError | None:
        """Subscribe on the socket and wait for the reply; None on ``result`` 200 (§2)."""
        correlation = str(uuid.uuid4())
        await self._ws.send(
            json.dumps({"message": "subscribe", "topics": topics, "correlationId": correlation})
        )
        while True:
            msg = decode_frame(await self._ws.recv())
            if msg is None:
                return malformed_frame(self._ctx, method="subscribe", endpoint=self._endpoint)
            if msg.get("topicName") == _SOCKET_CLOSING:
                return raw_from_message(msg, ctx=self._ctx, method="subscribe", endpoint=self._endpoint)
            if "result" not in msg or msg.get("correlationId") not in (None, correlation):
                continue  # a heartbeat, or another reply: not ours
            if str(msg["result"]) == "200":
                return None
            # {"result":"400","status":"error",...} or {"result":"404",...}: the channel is unusable
            return raw_from_message(msg, ctx=self._ctx, method="subscribe", endpoint=self._endpoint)

    async def serve(self, report: Reporter) -> RawError:
        """Receive until the connection ends; return the RawError that says why.

        A ``{"message":"ping"}`` every echo interval must get its pong (platforms.md section 2);
        silence aborts the link: close 1006, ABNORMAL_CLOSURE, reconnect.
        """
        return await serve_alive(
            self._ws,
            self._ctx,
            self._t._keepalive,
            _PING,
            self._fresh_pong_event,
            partial(self._receive, report),
        )

    def _fresh_pong_event(self) -> anyio.Event:
        self._pong = anyio.Event()
        return self._pong

    async def _receive(self, report: Reporter) -> RawError:
        # when the runtime has moved on (socket_closing: it reconnects on a new channel now), close
        return await receive_frames(
            self._ws, self._ctx, self._endpoint, self._classify_frame, report, partial(self.close, 1000)
        )

    def _classify_frame(self, msg: dict[str, Any] | None) -> RawError | None:
        """The RawError a frame stands for, or None when it is liveness or an event."""
        if msg is None:
            return malformed_frame(self._ctx, method=None, endpoint=self._endpoint)
        topic = msg.get("topicName")
        if topic == _METADATA:
            body = msg.get("eventBody")
            text = body.get("message") if isinstance(body, Mapping) else None
            if text == "pong":
                self._pong.set()
            else:
                self.heartbeats += 1  # "WebSocket Heartbeat" every 30 s (§2)
            return None
        if isinstance(topic, str) and topic.startswith("v2.system."):
            return raw_from_message(msg, ctx=self._ctx, endpoint=self._endpoint)  # socket_closing (§2)
        if "result" in msg:
            if str(msg["result"]) == "200":
                return None  # a late subscribe acknowledgement
            # {"result":"404"}: channel expired, evicted over the 20-channel quota, or token expired
            return raw_from_message(msg, ctx=self._ctx, endpoint=self._endpoint)
        if isinstance(topic, str) and self._t._on_event is not None:
            self._t._on_event(msg)
        return None

    async def close(self, code: int = 1000, reason: str = "") -> None:
        """Close the socket with ``code`` (1000 stop, 1001 shutdown); never raises."""
        if self._closed:
            return
        self._closed = True
        if self._t._live is self:
            self._t._live = None
        if self._ws.state is State.CLOSED:
            return
        await shutdown_socket(self._ws, code, reason, self._t._close_timeout)
