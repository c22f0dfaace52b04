"""Genesys Cloud notifications: a session's channel, rolled over before the platform drops it
(docs/platforms.md, "Genesys Cloud notifications"; docs/runtime.md, "Notifications rollover").

* :meth:`NotificationsTransport.open` sends what PY269's ``NotificationsApi`` sends: ``POST
  /api/v2/notifications/channels`` (``post_notifications_channels``), then, once connected to the
  channel's ``connectUri`` (no credentials on the socket: the channel id is the capability),
  *one* ``PUT .../channels/{id}/subscriptions`` with every topic
  (``put_notifications_channel_subscriptions``: replace the list, so a retry is harmless). Both go
  through the :class:`~supervisor.rest.pipeline.RequestPipeline` (retries, token, circuit
  ``genesys:api``); the bearer token never reaches a RawError.
* :meth:`NotificationsConnection.serve` reads the channel (heartbeats and our ``ping`` as liveness,
  events to ``on_event``) and keeps the session on a live channel for as long as it runs: a
  channel lives at most 24 h and no longer than the token that created it, ``v2.system.socket_closing``
  announces a close a minute ahead, ``{"result":"404"}`` says the channel is gone, the other
  ``v2.system`` topics say its token was revoked or its topics were taken (GN3P ``channel.py``,
  PY269 ``SystemMessageSystemMessage``). The connection *rolls over*: a new channel is created,
  connected and subscribed, then the old one is drained (a ping, its pong) and closed, and an
  event carried by both is delivered once (:class:`~supervisor.transports.overlap.OverlapDedupe`).
  The session never leaves ``active``; the runtime publishes CONNECTION_ROLLED_OVER.

What a platform message means for the session is the taxonomy's decision, never this module's:
each is reported to the runtime (which classifies and publishes it, and ends the session on a
fail-fast), and the connection repairs in place only what the taxonomy calls TRANSIENT (v2). A
pinned v1 keeps v1's behaviour: socket_closing reconnects (the runtime lets the connection go), a
404 ends the session, other system topics are reported and nothing else.
"""

from __future__ import annotations

import contextlib
import math
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from typing import Any
from urllib.parse import quote, urlsplit

import anyio
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from websockets.asyncio.client import connect

from supervisor.attempts import Flight
from supervisor.boundary import Learned, Reporter, SessionContext, socket_failures
from supervisor.clock import Clock, SystemClock
from supervisor.config import Keepalive
from supervisor.errors import OperationError
from supervisor.events import RolloverReason
from supervisor.rest.pipeline import RequestPipeline, ResponseCheck
from supervisor.rest.token_fetch import refresh_from
from supervisor.rest.tokens import Token, TokenCache
from supervisor.taxonomy import Channel, RawError, SdkErrorEvent, TaxonomyClass
from supervisor.transports.base import Rollover
from supervisor.transports.channel_quota import ChannelQuota, Place
from supervisor.transports.fenced_io import PLAIN_WIRE, Wire
from supervisor.transports.notifications_link import ChannelLink, Due, Ended, Notice, Noticed, Signal
from supervisor.transports.overlap import OverlapDedupe
from supervisor.transports.renewal import RENEW_LEAD_S, renewal_due
from supervisor.vocabulary import CloseCode, EndpointId, Platform

__all__ = [
    "CHANNELS_PATH",
    "CIRCUIT",
    "TOKEN_CHECK_S",
    "NotificationsConnection",
    "NotificationsTransport",
    "channel_gone",
]

CHANNELS_PATH = "/api/v2/notifications/channels"
#: the endpoint of the channel's REST calls (its creation, its subscription): the Platform API's
CIRCUIT = EndpointId.api(Platform.GENESYS)
# PY269 ApiClient: every call says Accept and Content-Type application/json (a body-less POST
# carries the JSON ``null``: rest.py json.dumps(None))
_JSON = {"Accept": "application/json", "Content-Type": "application/json"}
_NO_BODY = b"null"
#: how often a live channel looks whether the credential's token was replaced (the heartbeat period)
TOKEN_CHECK_S = 30.0
# Genesys' streaming client: at most 2 new channels for no_longer_subscribed within 10 minutes
# (HARD_RECONNECT_THRESHOLD, reconnectLeakTime), so two consumers of one topic do not fight forever
_DISPLACED_LIMIT = 2
_DISPLACED_WINDOW_S = 600.0

EventHandler = Callable[[Mapping[str, Any]], None]
Sleep = Callable[[float], Awaitable[None]]


def _epoch(text: object) -> float | None:
    """PY269 ``Channel.expires`` (ISO-8601) as epoch seconds; None when absent or unreadable."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


class NotificationsTransport:
    """Opens notifications channels for one session; a connection rolls over on its own channels."""

    # taxonomy [responses."genesys.notifications.Channel"]: the PY269 Channel's id and connectUri
    response_kind = "genesys.notifications.Channel"

    def __init__(
        self,
        ctx: SessionContext,
        *,
        pipeline: RequestPipeline,
        api_url: str,
        topics: list[str],
        keepalive: Keepalive,
        clock: Clock | None = None,
        sleep: Sleep = anyio.sleep,
        quota: ChannelQuota | None = None,
        on_event: EventHandler | None = None,
        renew_lead: float = RENEW_LEAD_S,
        close_timeout: float = 5.0,
        max_size: int = 1 << 20,
        proxy: str | None = None,
        stamp: Callable[[], Mapping[str, str]] | None = None,
        wire: Wire = PLAIN_WIRE,
    ) -> None:
        # headers for the upgrade request: the test-only stamp (supervisor/stamp.py), else none
        self._stamp = stamp
        # a fleet member's sockets: each write fenced by the shard's lease deadline, bound to its address
        self._wire = wire
        if not topics:
            raise ValueError("a notifications channel needs at least one topic")
        self.context = ctx
        self.topics = list(dict.fromkeys(topics))
        self._pipeline = pipeline
        self._api = api_url.rstrip("/")
        self._keepalive = keepalive
        self.clock: Clock = clock or SystemClock()
        self.sleep = sleep
        # without a shared quota (tests, one session) this transport counts its own channels
        self.quota = quota or ChannelQuota()
        self.on_event = on_event
        self.renew_lead = renew_lead
        self._close_timeout = close_timeout
        self._max_size = max_size
        self._proxy = proxy
        self._live: NotificationsConnection | None = None

    @property
    def keepalive(self) -> Keepalive:
        return self._keepalive

    @property
    def tokens(self) -> TokenCache | None:
        return self._pipeline.tokens

    @property
    def pipeline(self) -> RequestPipeline:
        return self._pipeline

    async def open(self, flight: Flight | None = None) -> NotificationsConnection:
        """Create a channel, connect, subscribe; raises OperationError (REST) or TransportFailure.

        ``flight`` is the WebSocket handshake's attempt on ``genesys:streaming``: it leaves right
        before the handshake and is answered as soon as the handshake succeeds (the runtime tells a
        failed one). The channel's creation and subscription are REST calls on ``genesys:api``,
        decided there once; a channel that could not be created never made the handshake.
        """
        place = await self.quota.reserve()
        link = await self.establish(self.context, place, flight=flight)
        conn = NotificationsConnection(self, link)
        self._live = conn
        return conn

    async def aclose(self) -> None:
        """Close a connection still open (daemon shutdown: 1001 going away)."""
        if self._live is not None:
            await self._live.close(CloseCode.GOING_AWAY)
            self._live = None

    # -- one channel: create, connect, subscribe --------------------------------------------------------

    async def establish(
        self,
        ctx: SessionContext,
        place: Place,
        deliver: Callable[[ChannelLink, Mapping[str, Any]], None] | None = None,
        on_heartbeat: Callable[[], None] | None = None,
        *,
        flight: Flight | None = None,
    ) -> ChannelLink:
        """A new channel, connected and subscribed to every topic; ``place`` is released on failure.

        ``flight``: the handshake's admitted attempt (None for a rollover's new channel, whose
        socket is not gated: docs/runtime.md, "Known limits").
        """
        try:
            channel = await self._create(ctx)
            tokens = self.tokens
            # the token the channel was just created with (the pipeline signed with the cache's)
            token = tokens.current if tokens is not None else None
            link = await self._connect(channel, ctx, place, token, deliver, on_heartbeat, flight)
        except BaseException:
            place.release()
            raise
        try:
            await self.subscribe(link)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await link.close(CloseCode.NORMAL_CLOSURE)
            raise
        return link

    async def _create(self, ctx: SessionContext) -> dict[str, Any]:
        response = await self._pipeline.request(
            "POST",
            self._api + CHANNELS_PATH,
            ctx=ctx,
            circuit=CIRCUIT,
            operation="notifications.channel.create",
            channel=Channel.REST,
            # without id and connectUri there is nothing to connect to: INCOMPLETE_RESPONSE (seed §3)
            check=ResponseCheck(required=self._pipeline.classifier.required_fields(self.response_kind)),
            headers=_JSON,
            content=_NO_BODY,
        )
        channel: dict[str, Any] = response.json()
        return channel

    async def _connect(
        self,
        channel: dict[str, Any],
        ctx: SessionContext,
        place: Place,
        token: Token | None,
        deliver: Callable[[ChannelLink, Mapping[str, Any]], None] | None,
        on_heartbeat: Callable[[], None] | None,
        flight: Flight | None,
    ) -> ChannelLink:
        channel_id, connect_uri = str(channel["id"]), str(channel["connectUri"])
        # the channel id is the session's platform id (correlation only: it is not a credential)
        link_ctx = ctx.learned(Learned(platform_session_id=channel_id))
        endpoint = urlsplit(connect_uri).path or "/channels"
        ka = self._keepalive
        if flight is not None:
            await flight.leave()
        # a refused handshake is the runtime's to tell the endpoint, classified
        with socket_failures(ctx=link_ctx, method="CONNECT", endpoint=endpoint):
            ws = await connect(
                connect_uri,
                additional_headers=self._stamp() if self._stamp is not None else None,
                compression=None,
                proxy=self._proxy,
                open_timeout=ka.open_timeout,
                ping_interval=ka.ping_interval,  # RFC 6455 §5.5.2 keepalive under the app-level ping
                ping_timeout=ka.ping_timeout,
                close_timeout=self._close_timeout,
                max_size=self._max_size,
                **self._wire.websocket_options(),
            )
        if flight is not None:
            flight.answered(None)  # the handshake went through: its endpoint hears so now
        now = self.clock.monotonic()
        expires = _epoch(channel.get("expires"))
        channel_expires_at = None if expires is None else now + (expires - self.clock.time())
        return ChannelLink(
            channel_id=channel_id,
            ws=ws,
            endpoint=endpoint,
            ctx=link_ctx,
            keepalive=ka,
            close_timeout=self._close_timeout,
            place=place,
            token=token,
            opened_at=now,
            renewal=renewal_due(
                now,
                channel_expires_at=channel_expires_at,
                token_expires_at=None if token is None else token.expires_at,
                lead_s=self.renew_lead,
            ),
            deliver=deliver or _deliver_nowhere,
            on_heartbeat=on_heartbeat or _no_heartbeat,
            channel=dict(channel),
        )

    def _subscriptions_url(self, link: ChannelLink) -> str:
        return f"{self._api}{CHANNELS_PATH}/{quote(link.channel_id, safe='')}/subscriptions"

    async def subscribe(self, link: ChannelLink) -> None:
        """One request with every topic (PY269 put_notifications_channel_subscriptions, a list of
        ChannelTopic ``{"id": topic}``); without ``ignoreErrors`` a topic the platform refuses
        fails the whole request (400/403), so a 200 means every topic is permitted."""
        await self._pipeline.request(
            "PUT",
            self._subscriptions_url(link),
            ctx=link.ctx,
            circuit=CIRCUIT,
            operation="notifications.channel.subscribe",
            channel=Channel.REST,
            route=CHANNELS_PATH + "/{channelId}/subscriptions",
            headers=_JSON,
            json=[{"id": topic} for topic in self.topics],
        )

    async def missing_topics(self, link: ChannelLink) -> list[str]:
        """Our topics the channel's subscription list lacks (PY269 get_notifications_channel_subscriptions)."""
        response = await self._pipeline.request(
            "GET",
            self._subscriptions_url(link),
            ctx=link.ctx,
            circuit=CIRCUIT,
            operation="notifications.channel.subscriptions",
            channel=Channel.REST,
            route=CHANNELS_PATH + "/{channelId}/subscriptions",
            headers=_JSON,
        )
        try:
            body = response.json()
        except ValueError:
            body = None
        entities = body.get("entities") if isinstance(body, Mapping) else None
        held = {
            str(e.get("id"))
            for e in entities or ()
            if isinstance(e, Mapping) and e.get("state", "Permitted") == "Permitted"
        }
        return [t for t in self.topics if t not in held]

    # -- the credential's token, for a renewal -----------------------------------------------------------

    def forget_token(self, revoked: Token | None) -> None:
        """The platform revoked the token that created a channel: when the cache still holds it,
        drop it, so the next channel is created with a fresh grant (not a refresh of a revoked one)."""
        tokens = self.tokens
        if tokens is not None and revoked is not None and tokens.current is revoked:
            tokens.revoke()

    async def fresh_token(self, ctx: SessionContext, expiring: Token | None) -> None:
        """Replace the token that created a channel about to expire with it (single-flight: a token
        another session already got is taken as it is), through the executor's token step."""
        tokens = self.tokens
        if tokens is None or expiring is None or tokens.current is not expiring:
            return
        await self._pipeline.executor.token(ctx, tokens, refresh_from(tokens, expiring))


def _deliver_nowhere(link: ChannelLink, message: Mapping[str, Any]) -> None:
    """A link opened outside a connection delivers nothing (it is handed over before serving)."""


def _no_heartbeat() -> None:
    """See :func:`_deliver_nowhere`."""


class NotificationsConnection:
    """A session's notifications: the channel it rides on now, replaced in place when it must be."""

    def __init__(self, transport: NotificationsTransport, link: ChannelLink) -> None:
        self._t = transport
        self._ctx = transport.context
        self._link = link
        self._links: list[ChannelLink] = [link]
        link.deliver, link.on_heartbeat = self._deliver, self._heartbeat
        self.session_response: dict[str, Any] = {**link.channel, "status": "subscribed"}
        self._dedupe = OverlapDedupe()
        self._displaced: deque[float] = deque()
        self._tg: TaskGroup | None = None
        self._signals: MemoryObjectSendStream[Signal] | None = None
        self._closed = False
        self.heartbeats = 0
        self.rollovers = 0
        self.sink_failures = 0
        # the runtime's hook (transports/base.py Rolling): told after each rollover
        self.on_rolled_over: Callable[[Rollover], None] | None = None

    @property
    def learned(self) -> Learned:
        """The channel this connection rides on now, as the session's platform id."""
        return Learned(platform_session_id=self._link.channel_id)

    @property
    def channel_id(self) -> str:
        return self._link.channel_id

    @property
    def duplicates_dropped(self) -> int:
        return self._dedupe.dropped

    # -- serving ------------------------------------------------------------------------------------

    async def serve(self, report: Reporter) -> RawError:
        """Serve until the channel ends and cannot be replaced; return the RawError that says why.

        Raises OperationError / TransportFailure (or CircuitOpenError) when a rollover fails (its REST
        calls spent their retries, the new socket was refused): the runtime reconnects or ends the
        session on it. The failure is raised as itself, never inside an exception group.
        """
        send, receive = anyio.create_memory_object_stream[Signal](math.inf)
        outcome: RawError | None = None
        failure: BaseException | None = None
        with send, receive:
            async with anyio.create_task_group() as tg:
                self._tg, self._signals = tg, send
                self._start(self._link)
                try:
                    outcome = await self._control(receive, report)
                except Exception as exc:  # re-raised below, outside the task group that would wrap it
                    failure = exc
                finally:
                    tg.cancel_scope.cancel()
                    self._tg = self._signals = None
        if failure is not None:
            raise failure
        assert outcome is not None
        return outcome

    def _start(self, link: ChannelLink) -> None:
        tg, signals = self._tg, self._signals
        if tg is None or signals is None:
            return
        tg.start_soon(link.run, signals.clone())
        tg.start_soon(self._renew_when_due, link, signals.clone())

    async def _control(self, signals: MemoryObjectReceiveStream[Signal], report: Reporter) -> RawError:
        async for signal in signals:
            link = self._link
            if signal.link is not link:
                continue  # the channel before a rollover: its end, its notices, its renewal are moot
            if isinstance(signal, Ended):
                return signal.raw
            if isinstance(signal, Due):
                await self._roll_over(signal.reason)
                continue
            if not await report(signal.raw):
                # the runtime moves on (a fail-fast, or v1's reconnection on socket_closing)
                await self.close(CloseCode.NORMAL_CLOSURE)
                return signal.raw
            # reported (and classified, captured, shadowed) above: this is a second look, not a failure
            event = self._t.pipeline.classifier.classify(signal.raw, observe=False)
            if event.taxonomy_class is not TaxonomyClass.TRANSIENT:
                continue  # reported, nothing to repair (v1's unknown system topics, a result 400)
            ended = await self._repair(signal, event)
            if ended is not None:
                return ended
        raise AssertionError("the signal stream never ends while serving")  # pragma: no cover

    async def _repair(self, signal: Noticed, event: SdkErrorEvent) -> RawError | None:
        """Put the session back on a live, subscribed channel; a RawError when it gives up."""
        notice = signal.notice
        if notice is Notice.CHANGED:
            await self._verify(signal.link)
        elif notice is Notice.DISPLACED:
            now = self._t.clock.monotonic()
            while self._displaced and now - self._displaced[0] > _DISPLACED_WINDOW_S:
                self._displaced.popleft()
            if len(self._displaced) >= _DISPLACED_LIMIT:
                # another consumer keeps taking the topics back: stop fighting over them here;
                # the runtime reconnects at its own (backed-off) pace
                await self.close(CloseCode.NORMAL_CLOSURE)
                return signal.raw
            self._displaced.append(now)
            await self._roll_over(RolloverReason.PLATFORM_SIGNAL, code=event.code)
        elif notice in (Notice.CLOSING, Notice.GONE, Notice.TOKEN_REVOKED):
            await self._roll_over(
                RolloverReason.PLATFORM_SIGNAL,
                code=event.code,
                gone=notice is Notice.GONE,
                token_revoked=notice is Notice.TOKEN_REVOKED,
            )
        return None

    async def _verify(self, link: ChannelLink) -> None:
        """subscription_changed: read the list back; put every topic again when one is missing."""
        try:
            missing = await self._t.missing_topics(link)
        except OperationError as exc:
            if not self._channel_gone(exc):
                raise
            await self._roll_over(RolloverReason.PLATFORM_SIGNAL, code=_code(exc), gone=True)
            return
        if missing:
            await self._t.subscribe(link)

    @staticmethod
    def _channel_gone(exc: OperationError) -> bool:
        return channel_gone(exc)

    # -- rollover -----------------------------------------------------------------------------------------

    async def _roll_over(
        self,
        reason: RolloverReason,
        *,
        code: str | None = None,
        gone: bool = False,
        token_revoked: bool = False,
    ) -> None:
        """Replace the channel: make the new one (created, connected, subscribed) before breaking the
        old one (drained, closed), unless the old one is gone or the quota has no room for both."""
        t, old = self._t, self._link
        clock = t.clock
        dropped_before = self._dedupe.dropped
        if token_revoked:
            t.forget_token(old.token)
        elif reason is RolloverReason.TOKEN_EXPIRING:
            await t.fresh_token(self._ctx, old.token)
        place: Place | None = None
        if not gone and not old.closed:
            place = await t.quota.reserve(overlap=True)
            if not place.granted:
                place = None  # the sessions fill the quota: break first, then make
        make_before_break = place is not None
        if place is None:
            await old.close(CloseCode.NORMAL_CLOSURE, now=clock.monotonic())
            place = await t.quota.reserve()
        new = await t.establish(self._ctx, place, self._deliver, self._heartbeat)
        self._links.append(new)
        self._link = new
        self._start(new)
        if not old.closed:
            # every event the old channel sent before now is read once its pong is: then close it
            await old.drain(t.keepalive.echo_timeout)
            await old.close(CloseCode.NORMAL_CLOSURE, now=clock.monotonic())
        place.settle()
        self._links = [link for link in self._links if not link.closed]
        self.rollovers += 1
        closed_at = old.closed_at if old.closed_at is not None else clock.monotonic()
        hook = self.on_rolled_over
        if hook is not None:
            hook(
                Rollover(
                    reason=reason,
                    previous=old.channel_id,
                    current=new.channel_id,
                    make_before_break=make_before_break,
                    overlap_s=max(0.0, closed_at - new.opened_at) if make_before_break else 0.0,
                    duplicates_dropped=self._dedupe.dropped - dropped_before,
                    code=code,
                )
            )

    async def _renew_when_due(self, link: ChannelLink, signals: MemoryObjectSendStream[Signal]) -> None:
        """Tell the control loop when ``link`` is to be renewed: its planned time, or as soon as the
        credential's token is no longer the one that created it. Ends with the link."""
        t = self._t
        with signals:
            while self._link is link and not link.closed:
                reason = self._renewal_reason(link)
                if reason is not None:
                    with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                        signals.send_nowait(Due(link, reason))
                    return
                wait = TOKEN_CHECK_S
                if link.renewal is not None:
                    wait = min(wait, link.renewal.at - t.clock.monotonic())
                await t.sleep(max(wait, 0.0))

    def _renewal_reason(self, link: ChannelLink) -> RolloverReason | None:
        tokens = self._t.tokens
        if tokens is not None and link.token is not None:
            current = tokens.current
            if current is not None and current is not link.token:
                return RolloverReason.TOKEN_REPLACED
        due = link.renewal
        if due is not None and self._t.clock.monotonic() >= due.at:
            return due.reason
        return None

    # -- events -------------------------------------------------------------------------------------

    def _deliver(self, link: ChannelLink, message: Mapping[str, Any]) -> None:
        sink = self._t.on_event
        if not self._dedupe.admit(link.channel_id, message) or sink is None:
            return
        try:
            sink(message)
        except Exception:
            # an embedder's sink that fails must not end the session's channel: counted, not raised
            self.sink_failures += 1

    def _heartbeat(self) -> None:
        self.heartbeats += 1

    async def abandon(self) -> None:
        """A handover: the channel sockets closed with 1001 and the channel left to expire (no API
        deletes a channel, and its subscriptions are not removed); never raises."""
        await self.close(CloseCode.GOING_AWAY)

    async def close(self, code: CloseCode = CloseCode.NORMAL_CLOSURE, reason: str = "") -> None:
        """Close every channel socket with ``code`` (1000 stop, 1001 shutdown); never raises."""
        if self._closed:
            return
        self._closed = True
        if self._t._live is self:
            self._t._live = None
        links, self._links = self._links, []
        now = self._t.clock.monotonic()
        for link in links:
            await link.close(code, reason, now=now)


def channel_gone(exc: OperationError) -> bool:
    """A channel's own subscriptions failed in a way the taxonomy repairs by a new channel:
    TRANSIENT yet not retried (v2 CHANNEL_LOST, the ``rollover`` policy), never a code's name."""
    event = exc.event
    return (
        isinstance(event, SdkErrorEvent)
        and event.taxonomy_class is TaxonomyClass.TRANSIENT
        and not event.retryable
    )


def _code(exc: OperationError) -> str | None:
    event = exc.event
    return event.code if isinstance(event, SdkErrorEvent) else None
