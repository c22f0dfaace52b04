"""Genesys notifications channels shared by many agent sessions of one OAuth client
(docs/runtime.md, "Shared notification channels"; docs/platforms.md, "Genesys Cloud notifications").

A notifications session is a *member*: its agent's topics on a channel its client shares. One
:class:`ChannelPool` per OAuth client holds its :class:`~.shared_channel.SharedChannel`\\ s, each up
to ``topic_limit`` topics (1,000: GN3P README, "the 1000 topics per channel subscription limit"),
at most ``channel_limit`` of them (20: PY269 ``post_notifications_channels``, "a limit of 20
channels per user/app combination. Creating a 21st channel will remove the channel with oldest
last used date"). A session that would need a 21st channel is refused with
:class:`~supervisor.errors.ChannelLimit`: the daemon never creates one. A session joins the first
channel with room; :class:`SharedNotificationsTransport` is its transport, :class:`Membership` its
connection (it ends when the channel drops under it). :class:`ChannelPools` holds every client's
pool and the task group their channels run in.

A fleet member (docs/runtime.md, "The fence at the write"): a channel belongs to the member whose
sessions it carries. Its socket's frames (pings, subscriptions) and its own REST calls go through a
pool of its own, fenced by the **earliest** lease deadline among the shards it carries
(:class:`ChannelFencing`); a shard lost unsubscribes that shard's topics (:meth:`ChannelPools.shards_lost`);
and the client's 20 channels are shared by the fleet in proportion to the shards each member owns
(:func:`~.channel_quota.fleet_share`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Collection, Coroutine, Mapping
from typing import Any, Protocol

import anyio
from anyio.abc import TaskGroup, TaskStatus

from machines.channel import ChannelConfig
from supervisor.attempts import SILENT, Flight, Gate, Reports
from supervisor.boundary import Learned, Reporter, SessionContext
from supervisor.clock import Clock, Rng
from supervisor.config import GENESYS_TOPICS_PER_CHANNEL, Keepalive
from supervisor.errors import ChannelLimit, OperationError, TransportFailure
from supervisor.rest.pipeline import RequestPipeline
from supervisor.store.shards import SHARDS, shard_of
from supervisor.taxonomy import Channel, RawError, SdkErrorEvent
from supervisor.transports.base import Rollover
from supervisor.transports.channel_quota import GENESYS_CHANNEL_LIMIT, ChannelQuota, fleet_share
from supervisor.transports.fenced_io import PLAIN_WIRE, Wire, WriteGuard
from supervisor.transports.notifications import NotificationsTransport, channel_gone
from supervisor.transports.shared_channel import EventHandler, Member, SharedChannel
from supervisor.vocabulary import CloseCode, Platform

__all__ = [
    "ChannelPool",
    "ChannelPools",
    "Member",
    "Membership",
    "SharedChannel",
    "SharedNotificationsTransport",
]

Sleep = Callable[[float], Awaitable[None]]


class ChannelFencing(Protocol):
    """A fleet member's fence for its channels (the runtime's: supervisor/runtime/wiring.py)."""

    def guard(self, shards: Callable[[], Collection[int]]) -> WriteGuard:
        """The guard of a socket carrying ``shards()``: their earliest lease deadline."""

    def pipeline(self, base: RequestPipeline, guard: WriteGuard) -> RequestPipeline:
        """``base``'s requests on a pool of their own whose connections write through ``guard``."""

    async def retire(self, pipeline: RequestPipeline) -> None:
        """Close a pool :meth:`pipeline` made."""

    def owned(self) -> int:
        """How many shards the member owns now."""


class ChannelPool:
    """The shared channels of one OAuth client (``key``)."""

    def __init__(
        self,
        key: str,
        pools: ChannelPools,
        *,
        topic_limit: int = GENESYS_TOPICS_PER_CHANNEL,
        channel_limit: int = GENESYS_CHANNEL_LIMIT,
    ) -> None:
        self.key = key
        self._pools = pools
        self.topic_limit = topic_limit
        # the platform's limit for the client; a fleet member holds its share of it (_share)
        self.client_limit = channel_limit
        self.channel_limit = channel_limit
        self.quota = ChannelQuota(channel_limit)
        self.channels: list[SharedChannel] = []
        self._serial = 0
        # how a channel's requests go: set by ChannelPools.pool (a reload may rebuild them)
        self.pipeline: RequestPipeline
        self.api_url = ""
        self.keepalive = Keepalive()
        # the streaming endpoint of this client's tenant (a named tenant's NAME/genesys:streaming); None:
        # the pools' (the default tenant's)
        self.own_gate: Gate | None = None

    @property
    def clock(self) -> Clock:
        return self._pools.clock

    @property
    def rng(self) -> Rng:
        return self._pools.rng

    @property
    def channel_config(self) -> ChannelConfig:
        return self._pools.config

    @property
    def sleep(self) -> Sleep:
        return self._pools.sleep

    @property
    def gate(self) -> Gate | None:
        return self.own_gate if self.own_gate is not None else self._pools.gate

    @property
    def reports(self) -> Reports:
        return self._pools.reports

    def transport(
        self, topics: list[str], *, wire: Wire = PLAIN_WIRE, pipeline: RequestPipeline | None = None
    ) -> NotificationsTransport:
        """A channel's own requests (its creation, its socket, one PUT of ``topics``), with ``wire``'s
        socket and ``pipeline`` (the pool's by default)."""
        return NotificationsTransport(
            SessionContext(self.key, Platform.GENESYS, Channel.NOTIFICATIONS),
            pipeline=pipeline if pipeline is not None else self.pipeline,
            api_url=self.api_url,
            topics=topics,
            keepalive=self.keepalive,
            clock=self.clock,
            sleep=self.sleep,
            quota=self.quota,
            stamp=self._pools.stamp,
            wire=wire,
        )

    def wire_for(self, shards: Callable[[], Collection[int]]) -> tuple[Wire, RequestPipeline | None]:
        fencing = self._pools.fencing
        local = self._pools.local_address
        if fencing is None:
            return Wire(None, local), None
        guard = fencing.guard(shards)
        return Wire(guard, local), fencing.pipeline(self.pipeline, guard)

    async def retire(self, pipeline: RequestPipeline | None) -> None:
        fencing = self._pools.fencing
        if fencing is not None and pipeline is not None:
            await fencing.retire(pipeline)

    def _share(self) -> None:
        """A fleet member's share of the client's channels, from the shards it owns now."""
        fencing = self._pools.fencing
        if fencing is None:
            return
        self.channel_limit = fleet_share(self.client_limit, fencing.owned(), SHARDS)
        self.quota.limit = self.channel_limit

    def classify(self, raw: RawError) -> SdkErrorEvent:
        """Classify a failure of one of this client's channels and publish it (SDK_ERROR_CLASSIFIED
        with the channel's key as ``sessionId``), as a session's runner does its own."""
        event = self.pipeline.classifier.classify(raw)
        self._pools.classified(event)
        return event

    def channel_gone(self, exc: OperationError) -> bool:
        """A subscriptions call answered that the channel is gone (404: taxonomy v2 CHANNEL_LOST)."""
        return channel_gone(exc)

    def join(self, member: Member) -> SharedChannel:
        """Put ``member`` on a channel with room, opening one when none has; raises ChannelLimit
        when the client's channels are all full and it holds as many as the platform allows."""
        self._share()
        for channel in self.channels:
            if channel.room_for(member):
                channel.add(member)
                return channel
        if len(self.channels) >= self.channel_limit:
            raise ChannelLimit(self.key, self.channel_limit, self.topic_limit)
        self._serial += 1
        channel = SharedChannel(self, f"{self.key}#{self._serial}")
        self.channels.append(channel)
        channel.add(member)
        self._pools.spawn(channel.run)
        return channel

    def closed(self, channel: SharedChannel) -> None:
        """``channel`` closed: its place in the pool is free."""
        with contextlib.suppress(ValueError):
            self.channels.remove(channel)


class ChannelPools:
    """Every OAuth client's pool, and the task group their channels run in (:meth:`serve`)."""

    def __init__(
        self,
        *,
        clock: Clock,
        rng: Rng,
        config: ChannelConfig | None = None,
        sleep: Sleep,
        gate: Gate | None = None,
        reports: Reports = SILENT,
        classified: Callable[[SdkErrorEvent], None] = lambda event: None,
        topic_limit: int = GENESYS_TOPICS_PER_CHANNEL,
        channel_limit: int = GENESYS_CHANNEL_LIMIT,
        stamp: Callable[[], Mapping[str, str]] | None = None,
    ) -> None:
        self.clock = clock
        # headers for every channel's upgrade request: the test-only stamp (supervisor/stamp.py), else none
        self.stamp = stamp
        # where a channel's classified failures are published (the bus's SDK_ERROR_CLASSIFIED)
        self.classified = classified
        self.rng = rng
        # the channel's first reconnection: the sessions' U(first delay) ([reconnect], seed edge case 1)
        self.config = config if config is not None else ChannelConfig()
        self.sleep = sleep
        self.gate = gate
        self.reports = reports
        self.topic_limit = topic_limit
        self.channel_limit = channel_limit
        self._pools: dict[str, ChannelPool] = {}
        self._tg: TaskGroup | None = None
        # a fleet member's: its channels fenced by their shards' deadlines (ChannelFencing); the
        # source address of every channel's connections ([fleet] localAddress)
        self.fencing: ChannelFencing | None = None
        self.local_address: str | None = None

    def shards_lost(self, shards: Collection[int]) -> int:
        """The member lost ``shards``: their sessions leave their channels now, their topics removed
        with one PUT per channel (on the channel's fenced pool), the channel closed when it carried
        nothing else. Returns how many sessions left."""
        left = 0
        for pool in self._pools.values():
            for channel in list(pool.channels):
                for member in list(channel.members.values()):
                    if shard_of(member.session_id) in shards:
                        channel.remove(member, quietly=False)
                        left += 1
        return left

    def pool(
        self,
        key: str,
        *,
        pipeline: RequestPipeline,
        api_url: str,
        keepalive: Keepalive,
        topic_limit: int | None = None,
        gate: Gate | None = None,
    ) -> ChannelPool:
        """The pool of the OAuth client ``key`` (its credential and endpoint identity), its
        channels' requests made with ``pipeline`` on ``api_url``; ``gate``: its channels' attempts
        (a named tenant's own streaming endpoint; None: the pools' gate)."""
        pool = self._pools.get(key)
        if pool is None:
            pool = ChannelPool(key, self, topic_limit=self.topic_limit, channel_limit=self.channel_limit)
            self._pools[key] = pool
        pool.pipeline = pipeline
        if topic_limit is not None:
            pool.topic_limit = topic_limit
        pool.api_url = api_url.rstrip("/")
        pool.keepalive = keepalive
        if gate is not None:
            pool.own_gate = gate
        return pool

    @property
    def pools(self) -> dict[str, ChannelPool]:
        return dict(self._pools)

    def spawn(self, run: Callable[[], Coroutine[Any, Any, None]]) -> None:
        tg = self._tg
        if tg is None:
            raise RuntimeError("the shared notification channels are not being served")
        tg.start_soon(run)

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Run the channels until cancelled (then each closes its socket with 1001)."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            try:
                task_status.started()
                await anyio.sleep_forever()
            finally:
                self._tg = None
                tg.cancel_scope.cancel()


class Membership:
    """A notifications session's connection on a shared channel: it lasts until the channel drops
    under it (its RawError is why) or the session leaves."""

    # the runtime's validation of the open's answer: the channel's id and connectUri (PY269 Channel)
    # Rolling (transports/base.py): the channel's rollover is told to the session through ``on_rolled_over``
    def __init__(
        self, transport: SharedNotificationsTransport, member: Member, channel: SharedChannel
    ) -> None:
        self._t = transport
        self._member = member
        link = channel.link
        self.channel_id = link.channel_id if link is not None else ""
        wire = dict(link.channel) if link is not None else {}
        self.session_response: dict[str, Any] = {**wire, "status": "subscribed"}

    @property
    def on_rolled_over(self) -> Callable[[Rollover], None] | None:
        return self._member.on_rolled_over

    @on_rolled_over.setter
    def on_rolled_over(self, hook: Callable[[Rollover], None] | None) -> None:
        self._member.on_rolled_over = hook

    @property
    def learned(self) -> Learned:
        """The channel the session's topic rides on now (a rollover replaces it in place)."""
        channel = self._member.channel
        link = channel.link if channel is not None else None
        if link is not None:
            self.channel_id = link.channel_id
        return Learned(platform_session_id=self.channel_id)

    async def serve(self, report: Reporter) -> RawError:
        """Until the channel drops under this session: the channel's RawError (the session then
        reconnects, and its reconnection waits for the channel's)."""
        member = self._member
        await member.lost.wait()
        raw = member.dropped_by
        assert raw is not None
        return raw

    async def close(self, code: CloseCode = CloseCode.NORMAL_CLOSURE, reason: str = "") -> None:
        """After a drop the session stays on its channel (it reconnects there); otherwise it leaves:
        its topic removed (1000, a stop) or left with the channel (1001, a shutdown)."""
        if self._member.lost.is_set():
            return
        self._t.leave(quietly=code is not CloseCode.NORMAL_CLOSURE)

    async def abandon(self) -> None:
        """A handover: the session leaves without a request; the channel goes with the daemon."""
        self._t.leave(quietly=True)


class SharedNotificationsTransport:
    """A notifications session as a member of its client's shared channels."""

    # taxonomy [responses."genesys.notifications.Channel"]: the channel's id and connectUri
    response_kind = "genesys.notifications.Channel"

    def __init__(
        self,
        ctx: SessionContext,
        *,
        pool: ChannelPool,
        topics: list[str],
        keepalive: Keepalive,
        on_event: EventHandler | None = None,
    ) -> None:
        if not topics:
            raise ValueError("a notifications session needs at least one topic")
        self.context = ctx
        self.pool = pool
        self.topics = list(dict.fromkeys(topics))
        self._keepalive = keepalive
        self.on_event = on_event
        self._member: Member | None = None

    @property
    def keepalive(self) -> Keepalive:
        return self._keepalive

    @property
    def member(self) -> Member | None:
        return self._member

    async def open(self, flight: Flight | None = None) -> Membership:
        """Join a channel with room (raises ChannelLimit when there is none and none may be
        opened), wait until the session's topics are subscribed on it, open.

        ``flight``: the session's admitted attempt on the streaming endpoint; it leaves (taking its
        slot of the endpoint's pace) and is answered as soon as the session is on a channel: the
        wait for the channel is the channel's, whose own attempts the endpoint admits."""
        if flight is not None:
            await flight.leave()
        member = self._member
        if member is None or member.channel is None or member.failure is not None:
            member = Member(self.context.session_id, tuple(self.topics), self.on_event)
            try:
                self.pool.join(member)
            except BaseException:
                if flight is not None:
                    flight.abandon()
                raise
            self._member = member
        else:
            # back after the channel dropped: the same place on the same channel
            member.lost = anyio.Event()
            member.dropped_by = None
        if flight is not None:
            flight.answered(None)
        try:
            await member.ready.wait()
        except BaseException:
            self.leave(quietly=True)
            raise
        channel = member.channel
        if member.failure is not None or channel is None:
            failure = member.failure
            self._member = None
            if failure is None:
                raise TransportFailure(
                    RawError(platform=Platform.GENESYS, channel=Channel.NOTIFICATIONS, close_code=1001)
                )
            raise failure
        return Membership(self, member, channel)

    def leave(self, *, quietly: bool) -> None:
        member, self._member = self._member, None
        if member is not None and member.channel is not None:
            member.channel.remove(member, quietly=quietly)

    async def aclose(self) -> None:
        """The session's runner ended: it leaves its channel (no request: its close said so)."""
        self.leave(quietly=True)
