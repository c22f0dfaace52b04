"""One Genesys notifications channel and its socket (docs/platforms.md, "Genesys Cloud notifications").

A :class:`ChannelLink` reads its socket and turns every frame into one of three things: liveness
(heartbeats, the pong to our ``{"message":"ping"}``), an event handed to ``deliver``, or a
:class:`Noticed` signal for the connection that owns it: the channel said something about itself
(``v2.system.*``, ``{"result":...}``, a frame that is not JSON). When the socket ends it sends
:class:`Ended`. It never decides what a notice means for the session: the connection reports it
to the runtime and rolls over when the taxonomy calls it TRANSIENT
(:mod:`supervisor.transports.notifications`).
"""

from __future__ import annotations

import contextlib
import enum
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectSendStream
from websockets.asyncio.client import ClientConnection
from websockets.protocol import State

from supervisor.boundary import (
    SOCKET_CLOSED,
    SOCKET_FAILURES,
    SessionContext,
    raw_from_exception,
    raw_from_message,
)
from supervisor.config import Keepalive
from supervisor.events import RolloverReason
from supervisor.rest.tokens import Token
from supervisor.taxonomy import RawError
from supervisor.transports.channel_quota import Place
from supervisor.transports.renewal import RenewalDue
from supervisor.transports.sockets import (
    abort_socket,
    decode_frame,
    malformed_frame,
    serve_alive,
    shutdown_socket,
)
from supervisor.vocabulary import CloseCode

__all__ = ["ChannelLink", "Due", "Ended", "Notice", "Noticed", "Signal", "system_kind"]

METADATA = "channel.metadata"  # heartbeats and pongs
SYSTEM_PREFIX = "v2.system."
PING = json.dumps({"message": "ping"})


class Notice(enum.Enum):
    """What a channel said about itself, as the transport names it (the taxonomy classifies it)."""

    # v2.system.socket_closing: the socket closes in about a minute (Genesys' announcement, 2020)
    CLOSING = enum.auto()
    # {"result":"404"}: the channel is gone (GN3P channel.py: expired, displaced, or its token expired)
    GONE = enum.auto()
    # v2.system.token_revoked: the token that created the channel was revoked (PY269 systemTopicType)
    TOKEN_REVOKED = enum.auto()
    # v2.system.no_longer_subscribed: another channel took its topics (PY269 reason another_channel_subscribed)
    DISPLACED = enum.auto()
    # v2.system.subscription_changed: its subscription list changed (PY269 systemTopicType)
    CHANGED = enum.auto()
    # anything else the channel said about itself (another result, another system topic, not JSON)
    OTHER = enum.auto()


_SYSTEM_NOTICES = {
    "socket_closing": Notice.CLOSING,
    "token_revoked": Notice.TOKEN_REVOKED,
    "no_longer_subscribed": Notice.DISPLACED,
    "subscription_changed": Notice.CHANGED,
}


def system_kind(message: Mapping[str, Any]) -> str:
    """``socket_closing``, ``token_revoked``, ...: the body's ``systemTopicType`` (PY269
    SystemMessageSystemMessage), else the topic's next segment (``v2.system.<kind>[.more]``)."""
    body = message.get("eventBody")
    kind = body.get("systemTopicType") if isinstance(body, Mapping) else None
    if isinstance(kind, str) and kind:
        return kind.lower()
    topic = str(message.get("topicName", ""))
    return topic[len(SYSTEM_PREFIX) :].split(".", 1)[0].lower()


# -- what a link tells its connection ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Noticed:
    """The channel said something about itself; ``raw`` is what the runtime classifies."""

    link: ChannelLink
    raw: RawError
    notice: Notice


@dataclass(frozen=True, slots=True)
class Ended:
    """The channel's socket ended; ``raw`` says how (a close code, 1006, ...)."""

    link: ChannelLink
    raw: RawError


@dataclass(frozen=True, slots=True)
class Due:
    """A planned renewal of ``link`` came due (its expiry, or its token's, or a replaced token)."""

    link: ChannelLink
    reason: RolloverReason


Signal = Noticed | Ended | Due


@dataclass(eq=False)
class ChannelLink:
    """One subscribed channel: its id, socket, quota place, the token that created it, deadlines."""

    channel_id: str
    ws: ClientConnection
    endpoint: str
    ctx: SessionContext
    keepalive: Keepalive
    close_timeout: float
    place: Place
    # the token the channel was created with: the platform drops the channel when it ends
    token: Token | None
    # monotonic: when the channel opened, and when it is to be renewed (None: never planned)
    opened_at: float
    renewal: RenewalDue | None
    deliver: Callable[[ChannelLink, Mapping[str, Any]], None]
    on_heartbeat: Callable[[], None]
    # the Channel as the platform answered its creation
    channel: dict[str, Any] = field(default_factory=dict)
    closed_at: float | None = None
    _pong_waiters: list[anyio.Event] = field(default_factory=list)
    _closing: bool = False

    @property
    def closed(self) -> bool:
        return self._closing

    # -- reading ------------------------------------------------------------------------------------

    async def run(self, signals: MemoryObjectSendStream[Signal]) -> None:
        """Read until the socket ends, probing liveness with ``{"message":"ping"}``; never raises.

        ``signals`` is this link's own clone of the stream: closed when the link ends."""
        with signals:
            raw = await serve_alive(
                self.ws, self.ctx, self.keepalive, PING, self._fresh_pong, partial(self._read, signals)
            )
            with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                signals.send_nowait(Ended(self, raw))

    async def _read(self, signals: MemoryObjectSendStream[Signal]) -> RawError:
        while True:
            try:
                frame = await self.ws.recv()
            except SOCKET_CLOSED as exc:
                # the close code the server sent (exc.rcvd), or 1006 when the link just died (RFC 6455 7.1.5)
                return raw_from_exception(exc, ctx=self.ctx, endpoint=self.endpoint)
            noticed = self._on_frame(decode_frame(frame))
            if noticed is not None:
                with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                    signals.send_nowait(noticed)

    def _on_frame(self, msg: dict[str, Any] | None) -> Noticed | None:
        if msg is None:
            return Noticed(self, malformed_frame(self.ctx, method=None, endpoint=self.endpoint), Notice.OTHER)
        topic = msg.get("topicName")
        if topic == METADATA:
            body = msg.get("eventBody")
            if isinstance(body, Mapping) and body.get("message") == "pong":
                self._answered()
            else:
                self.on_heartbeat()  # "WebSocket Heartbeat" every 30 s
            return None
        if isinstance(topic, str) and topic.startswith(SYSTEM_PREFIX):
            body = msg.get("eventBody")
            named = body.get("channelId") if isinstance(body, Mapping) else None
            if isinstance(named, str) and named and named != self.channel_id:
                # about another channel (the one before a rollover): Genesys' streaming client
                # ignores it ("received no_longer_subscribed event for a non active channelId")
                return None
            notice = _SYSTEM_NOTICES.get(system_kind(msg), Notice.OTHER)
            return Noticed(self, raw_from_message(msg, ctx=self.ctx, endpoint=self.endpoint), notice)
        if "result" in msg:
            result = str(msg["result"])
            if result == "200":
                return None  # a subscribe acknowledgement
            notice = Notice.GONE if result == "404" else Notice.OTHER
            return Noticed(self, raw_from_message(msg, ctx=self.ctx, endpoint=self.endpoint), notice)
        if isinstance(topic, str):
            self.deliver(self, msg)
        return None

    # -- liveness -----------------------------------------------------------------------------------

    def _fresh_pong(self) -> anyio.Event:
        event = anyio.Event()
        self._pong_waiters.append(event)
        return event

    def _answered(self) -> None:
        waiters, self._pong_waiters = self._pong_waiters, []
        for event in waiters:
            event.set()

    async def drain(self, within: float) -> None:
        """Ping and wait (at most ``within`` s) for the pong: frames come in order, so every event
        the channel sent before it has been read once the pong is (GN3P's health check)."""
        if self._closing or self.ws.state is not State.OPEN:
            return
        answered = self._fresh_pong()
        with anyio.move_on_after(within):
            try:
                await self.ws.send(PING)
            except SOCKET_FAILURES:
                return
            await answered.wait()

    # -- closing ------------------------------------------------------------------------------------

    async def close(
        self, code: CloseCode = CloseCode.NORMAL_CLOSURE, reason: str = "", *, now: float | None = None
    ) -> None:
        """Close the socket with ``code`` and give its place in the quota back; never raises."""
        if self._closing:
            return
        self._closing = True
        self.closed_at = now
        self.place.release()
        if self.ws.state is State.CLOSED:
            return
        await shutdown_socket(self.ws, code, reason, self.close_timeout)

    def abort(self) -> None:
        """Drop the link at once (a cancelled open: no closing handshake to wait for)."""
        self._closing = True
        self.place.release()
        abort_socket(self.ws)
