"""One Genesys notifications channel shared by many agent sessions of one OAuth client, and its
members (docs/runtime.md, "Shared notification channels"; docs/platforms.md, "Genesys Cloud
notifications"). The pool that opens channels and refuses a 21st is :mod:`.channel_pool`.

Each channel is driven by its machine (:class:`machines.channel.ChannelCore`) in a task of the
pool's group: connecting (``POST /api/v2/notifications/channels``, the socket, one ``PUT
.../subscriptions`` with every member's topic), open, reconnecting (the first reconnection after
U(first delay) of ``[reconnect]``, U(2 s, 8 s) by default, each admitted by the streaming endpoint,
so its circuit defers it), closed (its last member left). While it is open, members that join are
added in batches with ``POST .../subscriptions`` (PY269 ``post_notifications_channel_subscriptions``,
"Add a list of subscriptions to the existing list"), one request for all that joined while the
previous one was out; members that leave are removed with one ``PUT`` of the topics that stay
(PY269 ``put_notifications_channel_subscriptions``, "Replace the current list"): the platform has
no verb that removes one topic (``delete_notifications_channel_subscriptions`` "Remove all
subscriptions").

A channel's drop (its socket ended, ``{"result":"404"}``: expired or evicted by a 21st channel of
the client, ``token_revoked``, a ``socket_closing`` a pinned v1 reconnects on) is the channel's: every member's connection
ends as a lost connection (1006, whatever ended the channel), so its session moves to
reconnecting; the member stays on the channel, and its session's reconnection (admitted, so paced,
by the streaming endpoint) waits for the channel's one reconnection, whose ``PUT`` carries every
member's topic again. A planned renewal (the channel's expiry or its token's), and v2's answer to
``socket_closing`` (``SOCKET_CLOSING``, TRANSIENT: the channel lives a minute more), are make-before-break:
the new channel is created, connected and subscribed before the old one is drained and closed; each
member's session stays active and is told, as a session on a channel of its own is
(:class:`~supervisor.transports.base.Rollover`, the runtime's CONNECTION_ROLLED_OVER): its platform
id is the channel's, and it changed.

What the channel says about itself (``socket_closing``, ``{"result":"404"}``, ``token_revoked``, a
displaced or changed subscription list, a frame it cannot read) and how its socket ended are
classified and published once, as the channel's (SDK_ERROR_CLASSIFIED with the channel's key as
``sessionId``: :meth:`ChannelHost.classify`), never as each member's.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import quote

import anyio
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from machines.channel import ChannelConfig, ChannelCore, MembersDropped, ScheduleChannelReconnect
from supervisor.attempts import Flight, Gate, Late, Refused, Reports
from supervisor.boundary import SessionContext
from supervisor.clock import Clock, Rng
from supervisor.config import Keepalive
from supervisor.errors import CircuitOpenError, Fenced, OperationError, TransportFailure
from supervisor.events import RolloverReason
from supervisor.rest.pipeline import RequestPipeline
from supervisor.store.shards import shard_of
from supervisor.taxonomy import Channel, RawError, SdkErrorEvent, TaxonomyClass
from supervisor.transports.base import Rollover
from supervisor.transports.channel_quota import ChannelQuota
from supervisor.transports.fenced_io import PLAIN_WIRE, Wire
from supervisor.transports.notifications import CHANNELS_PATH, CIRCUIT, NotificationsTransport
from supervisor.transports.notifications_link import ChannelLink, Due, Ended, Notice, Signal
from supervisor.transports.overlap import OverlapDedupe
from supervisor.vocabulary import CloseCode, Platform
from supervisor.vocabulary.states import ChannelState

__all__ = ["ChannelHost", "EventHandler", "Member", "SharedChannel"]

_JSON = {"Accept": "application/json", "Content-Type": "application/json"}
# what the channel says about itself that ends it: a new channel is needed
_DROPS = (Notice.CLOSING, Notice.GONE, Notice.TOKEN_REVOKED)
# what says its topics were changed under it: put them all again
_RESUBSCRIBE = (Notice.DISPLACED, Notice.CHANGED)

EventHandler = Callable[[Mapping[str, Any]], None]
Sleep = Callable[[float], Awaitable[None]]


class ChannelHost(Protocol):
    """What a channel takes from its pool (:class:`~.channel_pool.ChannelPool`): the client's limits,
    clock and randomness, its streaming endpoint's admission, the requests' pipeline, and (a fleet
    member's) the fence of the shards it carries."""

    topic_limit: int
    quota: ChannelQuota
    pipeline: RequestPipeline
    api_url: str
    keepalive: Keepalive

    @property
    def clock(self) -> Clock: ...
    @property
    def rng(self) -> Rng: ...
    @property
    def channel_config(self) -> ChannelConfig: ...
    @property
    def sleep(self) -> Sleep: ...
    @property
    def gate(self) -> Gate | None: ...
    @property
    def reports(self) -> Reports: ...
    def transport(
        self, topics: list[str], *, wire: Wire = PLAIN_WIRE, pipeline: RequestPipeline | None = None
    ) -> NotificationsTransport: ...
    def wire_for(self, shards: Callable[[], Collection[int]]) -> tuple[Wire, RequestPipeline | None]:
        """How a channel carrying ``shards()`` connects and makes its requests (a fleet member's:
        fenced by their earliest lease deadline, on a pool of the channel's own; None: the pool's)."""
        ...

    async def retire(self, pipeline: RequestPipeline | None) -> None:
        """The channel closed: the pool of its own (a fleet member's) is closed."""
        ...

    def classify(self, raw: RawError) -> SdkErrorEvent:
        """Classify a failure of the channel's own, and publish it (SDK_ERROR_CLASSIFIED)."""
        ...

    def channel_gone(self, exc: OperationError) -> bool: ...
    def closed(self, channel: SharedChannel) -> None: ...


@dataclass(eq=False)
class Member:
    """One agent session on a shared channel: its topics, its sink, and what ended it."""

    session_id: str
    topics: tuple[str, ...]
    on_event: EventHandler | None
    channel: SharedChannel | None = None
    # set when the member's topics are subscribed on an open channel (or its join failed)
    ready: anyio.Event = field(default_factory=anyio.Event)
    failure: BaseException | None = None
    # set when the channel dropped under the member (``dropped_by``: the channel's RawError)
    lost: anyio.Event = field(default_factory=anyio.Event)
    dropped_by: RawError | None = None
    sink_failures: int = 0
    # events of the member's topics a rollover's two channels both carried (delivered once)
    duplicates: int = 0
    # the runtime's hook (transports/base.py Rolling), through the member's Membership
    on_rolled_over: Callable[[Rollover], None] | None = None

    def rolled_over(self, rollover: Rollover) -> None:
        hook = self.on_rolled_over
        if hook is not None:
            hook(rollover)

    def deliver(self, message: Mapping[str, Any]) -> None:
        sink = self.on_event
        if sink is None:
            return
        try:
            sink(message)
        except Exception:
            # an embedder's sink that fails must not end the channel: counted, not raised
            self.sink_failures += 1


class SharedChannel:
    """One notifications channel of a pool, driven by its :class:`ChannelCore`."""

    def __init__(self, pool: ChannelHost, key: str) -> None:
        self.pool = pool
        self.key = key
        self.core = ChannelCore(key, pool.clock, pool.rng, pool.channel_config)
        self.ctx = SessionContext(key, Platform.GENESYS, Channel.NOTIFICATIONS)
        self.members: dict[str, Member] = {}
        # topic -> the members that asked for it (an event goes to each; the channel holds each once)
        self._by_topic: dict[str, list[Member]] = {}
        # the topics the platform holds for this channel, and the members waiting to be added
        self.subscribed: set[str] = set()
        self._to_add: dict[str, Member] = {}
        self._to_remove = False
        self._going_away = False
        self._work = anyio.Event()
        self.link: ChannelLink | None = None
        self._dedupe = OverlapDedupe()
        self._serving: TaskGroup | None = None
        self._signals: MemoryObjectSendStream[Signal] | None = None
        #: counts the tests and the benchmark read
        self.connections = 0
        self.rollovers = 0
        self.batches = 0
        # reconnections the streaming endpoint's circuit deferred, and what ended the channel last
        self.deferrals = 0
        self.last_drop: RawError | None = None
        # the attempt the endpoint admitted for the next connection
        self._flight: Flight | None = None
        # waiting for the leases of the shards it carries (fenced: nothing attempted meanwhile)
        self.fenced = False
        # its socket's writes and its own requests (creation, subscriptions): a fleet member's are
        # fenced by the earliest lease deadline among the shards of its members (fenced_io.py)
        self.wire, self._own_pipeline = pool.wire_for(self.shards)

    @property
    def pipeline(self) -> RequestPipeline:
        """Where the channel's requests go: its own fenced pool's (a fleet member), else its pool's
        (which a reload may rebuild)."""
        own = self._own_pipeline
        return own if own is not None else self.pool.pipeline

    def shards(self) -> set[int]:
        """The shards of the sessions this channel carries now."""
        return {shard_of(session_id) for session_id in self.members}

    # -- members ----------------------------------------------------------------------------------

    @property
    def topic_count(self) -> int:
        return len(self._by_topic)

    def _topics(self) -> list[str]:
        return list(self._by_topic)

    def room_for(self, member: Member) -> bool:
        if self.core.state is ChannelState.CLOSED:
            return False
        new = sum(1 for t in set(member.topics) if t not in self._by_topic)
        return len(self._by_topic) + new <= self.pool.topic_limit

    def add(self, member: Member) -> None:
        self.core.join(member.session_id)
        self.members[member.session_id] = member
        for t in member.topics:
            self._by_topic.setdefault(t, []).append(member)
        member.channel = self
        if self.core.state is ChannelState.OPEN and not set(member.topics) <= self.subscribed:
            self._to_add[member.session_id] = member
            self._work.set()
        elif self.core.state is ChannelState.OPEN:
            member.ready.set()

    def remove(self, member: Member, *, quietly: bool) -> None:
        """The member leaves for good; ``quietly``: no request to the platform (a shutdown, a
        handover: the channel goes with the daemon)."""
        if self.members.get(member.session_id) is not member:
            return
        del self.members[member.session_id]
        for t in member.topics:
            held = self._by_topic.get(t)
            if held is not None and member in held:
                held.remove(member)
                if not held:
                    del self._by_topic[t]
                    # no longer ours to count on: the PUT under way may leave it out, so a session
                    # that asks for it again before that PUT returns is added anew, not taken as held
                    self.subscribed.discard(t)
        self._to_add.pop(member.session_id, None)
        self.core.leave(member.session_id)
        member.channel = None
        # the last one out says how the channel's socket closes: 1000 after a stop, 1001 going away
        self._going_away = quietly
        if not quietly and self.core.state is ChannelState.OPEN:
            self._to_remove = True
        self._work.set()

    # -- the driver ---------------------------------------------------------------------------------

    async def run(self) -> None:
        """Drive the channel until it closes (its last member left, or the pool is cancelled)."""
        core = self.core
        try:
            while core.state is not ChannelState.CLOSED:
                if not self.members and core.state is not ChannelState.RECONNECTING:
                    core.close()
                    break
                if core.state is ChannelState.CONNECTING:
                    await self._connect()
                elif core.state is ChannelState.OPEN:
                    await self._serve()
                else:
                    await self._await_reconnect()
        finally:
            going_away = self._going_away or core.state is not ChannelState.CLOSED
            with anyio.CancelScope(shield=True):
                await self._close_link(CloseCode.GOING_AWAY if going_away else CloseCode.NORMAL_CLOSURE)
            if core.state is not ChannelState.CLOSED:
                core.close()
            self.pool.closed(self)
            with anyio.CancelScope(shield=True):
                await self.pool.retire(self._own_pipeline)
            for member in list(self.members.values()):
                member.channel = None
                if not member.ready.is_set():
                    member.failure = TransportFailure(self._raw(CloseCode.GOING_AWAY))
                    member.ready.set()

    def _raw(self, code: CloseCode) -> RawError:
        return RawError(platform=Platform.GENESYS, channel=Channel.NOTIFICATIONS, close_code=int(code))

    async def _connect(self) -> None:
        """Create, connect and subscribe a channel with every member's topic, admitted by the
        streaming endpoint (its circuit and pace); on failure the channel drops and waits."""
        pool = self.pool
        flight, self._flight = self._flight, None
        if flight is None:
            answer = await self._admitted()
            if not isinstance(answer, Flight) and answer is not None:
                # the first connection refused by the circuit: wait as a reconnection does
                self._dropped(self._raw(CloseCode.TRY_AGAIN_LATER))
                self._defer(answer)
                return
            flight = answer
        topics = self._topics()
        place = await pool.quota.reserve()
        transport = pool.transport(topics, wire=self.wire, pipeline=self.pipeline)
        try:
            link = await transport.establish(self.ctx, place, self._deliver, _no_heartbeat, flight=flight)
        except (OperationError, TransportFailure, CircuitOpenError, Fenced) as exc:
            if flight is not None and isinstance(exc, Fenced):
                flight.abandon()  # nothing was sent: the fence refused the first byte
            elif flight is not None:
                failure = exc.raw if isinstance(exc, TransportFailure) else None
                flight.settle(None if failure is None else pool.classify(failure))
            raw = exc.raw if isinstance(exc, TransportFailure) else self._raw(CloseCode.ABNORMAL_CLOSURE)
            self._dropped(raw)
            return
        if flight is not None:
            flight.settle(None)
        self.link = link
        self.connections += 1
        self.subscribed = set(topics)
        self.core.connected()
        self._to_add = {sid: m for sid, m in self.members.items() if not set(m.topics) <= self.subscribed}
        for member in self.members.values():
            if set(member.topics) <= self.subscribed:
                member.ready.set()
        if self._to_add:
            self._work.set()

    async def _serve(self) -> None:
        link = self.link
        assert link is not None
        send, receive = anyio.create_memory_object_stream[Signal](math.inf)
        with send, receive:
            async with anyio.create_task_group() as tg:
                self._serving, self._signals = tg, send
                self._start(link)
                tg.start_soon(self._batches, send.clone())
                try:
                    await self._control(receive)
                finally:
                    tg.cancel_scope.cancel()
                    self._serving = self._signals = None

    def _start(self, link: ChannelLink) -> None:
        """Read ``link`` and watch its renewal, in the serving group (a rollover's new link too)."""
        tg, signals = self._serving, self._signals
        if tg is None or signals is None:
            return
        tg.start_soon(link.run, signals.clone())
        tg.start_soon(self._renew_when_due, link, signals.clone())

    async def _control(self, signals: MemoryObjectReceiveStream[Signal]) -> None:
        async for signal in signals:
            link = self.link
            if link is None or signal.link is not link:
                continue  # the channel before a rollover
            if isinstance(signal, Ended):
                self.pool.classify(signal.raw)
                self._dropped(signal.raw)
                return
            if isinstance(signal, Due):
                await self._roll_over(signal.reason)
                if self.core.state is not ChannelState.OPEN:
                    return
                continue
            # the channel's own message: classified and published once, as the channel's (a
            # session on a channel of its own reports it to its runner, which does the same)
            event = self.pool.classify(signal.raw)
            if signal.notice is Notice.CLOSING and _repaired_in_place(event):
                # v2 SOCKET_CLOSING (policy rollover): the channel lives about a minute more, time to
                # make its successor before breaking it; its members stay active. A pinned v1's
                # reconnection is the drop below.
                await self._roll_over(RolloverReason.PLATFORM_SIGNAL, code=event.code)
                if self.core.state is not ChannelState.OPEN:
                    return
                continue
            if signal.notice in _DROPS:
                self._dropped(signal.raw)
                return
            if signal.notice in _RESUBSCRIBE:
                self.subscribed = set()
                self._to_remove = True
                self._work.set()
            # another notice (a result 400, a frame not JSON): the channel goes on

    async def _batches(self, signals: MemoryObjectSendStream[Signal]) -> None:
        """Add the members that joined since the last request in one POST; replace the list with
        one PUT after members left (or the platform changed it). Ends the channel on a 404."""
        with signals:
            while True:
                await self._work.wait()
                self._work = anyio.Event()
                if not self.members and self._serving is not None:
                    self._serving.cancel_scope.cancel()  # the last member left: the driver closes the channel
                    return
                link = self.link
                if link is None or self.core.state is not ChannelState.OPEN:
                    return
                try:
                    if self._to_remove:
                        self._to_remove = False
                        await self._replace(link)
                    elif self._to_add:
                        await self._add(link)
                except (OperationError, CircuitOpenError, TransportFailure, Fenced) as exc:
                    # the channel is gone (404), or its subscriptions cannot be made now (retries
                    # spent, the API's circuit open): a new channel, with every topic in one PUT [I]
                    raw = RawError(platform=Platform.GENESYS, channel=Channel.NOTIFICATIONS, status=404)
                    if isinstance(exc, TransportFailure):
                        raw = exc.raw
                    with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                        signals.send_nowait(Ended(link, raw))
                    return
                if not self.members and self._serving is not None:
                    self._serving.cancel_scope.cancel()  # the last member left: the driver closes the channel
                    return

    async def _replace(self, link: ChannelLink) -> None:
        topics = self._topics()
        adding, self._to_add = self._to_add, {}
        await self._request(link, "PUT", topics)
        self.subscribed = set(topics)
        for member in adding.values():
            if member.channel is self:
                member.ready.set()

    async def _add(self, link: ChannelLink) -> None:
        batch, self._to_add = self._to_add, {}
        topics = list(dict.fromkeys(t for m in batch.values() for t in m.topics if t not in self.subscribed))
        try:
            if topics:
                await self._request(link, "POST", topics)
        except OperationError as exc:
            if self.pool.channel_gone(exc) or len(batch) == 1:
                if not self.pool.channel_gone(exc):
                    self._refuse(next(iter(batch.values())), exc)
                    return
                raise
            # one topic the platform refuses fails the whole request: each member on its own, so
            # that the refusal is that member's alone
            for member in batch.values():
                if member.channel is self:
                    await self._add_one(link, member)
            return
        self.subscribed.update(topics)
        for member in batch.values():
            if member.channel is self:
                member.ready.set()

    async def _add_one(self, link: ChannelLink, member: Member) -> None:
        try:
            await self._request(link, "POST", list(member.topics))
        except OperationError as exc:
            if self.pool.channel_gone(exc):
                raise
            self._refuse(member, exc)
            return
        self.subscribed.update(member.topics)
        member.ready.set()

    def _refuse(self, member: Member, exc: OperationError) -> None:
        """The platform refused this member's topics: its open fails with the platform's answer."""
        self.remove(member, quietly=True)
        member.failure = exc
        member.ready.set()

    async def _request(self, link: ChannelLink, method: str, topics: list[str]) -> None:
        pool = self.pool
        self.batches += 1
        await self.pipeline.request(
            method,
            f"{pool.api_url}{CHANNELS_PATH}/{quote(link.channel_id, safe='')}/subscriptions",
            ctx=link.ctx,
            circuit=CIRCUIT,
            operation="notifications.channel.subscribe",
            channel=Channel.REST,
            route=CHANNELS_PATH + "/{channelId}/subscriptions",
            headers=_JSON,
            json=[{"id": topic} for topic in topics],
        )

    def _dropped(self, raw: RawError) -> None:
        """The channel is gone (``raw`` says how: its own business): every member's connection ends
        as a lost connection, so that each session reconnects whatever ended the channel (a 1000
        from the server, a 404 a pinned v1 ends a session on) [I]; the channel reconnects later."""
        lost = self._raw(CloseCode.ABNORMAL_CLOSURE)
        self.last_drop = raw
        link, self.link = self.link, None
        if link is not None and not link.closed:
            link.abort()
        self.subscribed = set()
        self._to_add = {}
        self._to_remove = False
        effects = self.core.dropped()
        for effect in effects:
            if isinstance(effect, MembersDropped):
                for session_id in effect.members:
                    member = self.members.get(session_id)
                    if member is None or member.failure is not None:
                        continue
                    if member.ready.is_set():
                        member.dropped_by = lost
                        member.lost.set()
                        # its reconnection waits for the channel's
                        member.ready = anyio.Event()
                    # a member still waiting to be subscribed (the channel's first connection
                    # failed) keeps waiting on the same event: replaced, its open would never wake
        self._schedule(effects)

    def _schedule(self, effects: list[Any]) -> None:
        for effect in effects:
            if isinstance(effect, ScheduleChannelReconnect):
                self._due_at = effect.at

    _due_at = 0.0

    async def _await_reconnect(self) -> None:
        """At the reconnection's time, ask the streaming endpoint: admitted, connect (with that
        attempt); refused (its circuit open, isolated), defer by what it says, not counted."""
        wait = self._due_at - self.pool.clock.monotonic()
        if wait > 0:
            await self.pool.sleep(wait)
        if self.core.state is not ChannelState.RECONNECTING:
            return
        guard = self.wire.guard
        if guard is not None and guard.passed():
            # a fleet member's channel whose shards are fenced: no attempt until the leases are renewed
            self.fenced = True
            try:
                await guard.reopened()
            finally:
                self.fenced = False
        answer = await self._admitted()
        if answer is not None and not isinstance(answer, Flight):
            self._defer(answer)
            return
        self._flight = answer
        self._schedule(self.core.reconnect_due(None))

    async def _admitted(self) -> Flight | Refused | Late | None:
        """The channel's attempt on the streaming endpoint (None: no gate, nothing to ask)."""
        pool = self.pool
        if pool.gate is None:
            return None
        return await pool.gate.ask(pool.reports, pool.sleep)

    def _defer(self, answer: Refused | Late) -> None:
        wait = answer.retry_in_s if isinstance(answer, Refused) else answer.wait_s
        self.deferrals += 1
        self._schedule(self.core.reconnect_due(max(wait, 0.001)))

    # -- rollover -------------------------------------------------------------------------------------

    async def _renew_when_due(self, link: ChannelLink, signals: MemoryObjectSendStream[Signal]) -> None:
        with signals:
            due = link.renewal
            if due is None:
                return
            wait = due.at - self.pool.clock.monotonic()
            if wait > 0:
                await self.pool.sleep(wait)
            with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                signals.send_nowait(Due(link, due.reason))

    async def _roll_over(self, reason: RolloverReason, *, code: str | None = None) -> None:
        """Make-before-break: a new channel created, connected and subscribed with every topic,
        then the old one drained (a ping, its pong) and closed; break-first only when the client's
        20 places are all held (the quota refuses the overlap)."""
        pool, old = self.pool, self.link
        assert old is not None
        topics = self._topics()
        if not topics:
            # every member left before the rollover was due: nothing to carry over, and the batches
            # task is closing the channel (its last member gone); a new channel with no topic is
            # one the platform's subscription API cannot have
            return
        duplicates = {sid: m.duplicates for sid, m in self.members.items()}
        transport = pool.transport(topics, wire=self.wire, pipeline=self.pipeline)
        place = None
        try:
            if reason is RolloverReason.TOKEN_EXPIRING:
                # the channel dies with the token that created it: the new one gets a fresh token
                await transport.fresh_token(self.ctx, old.token)
            place = await pool.quota.reserve(overlap=True)
            if not place.granted:
                await old.close(CloseCode.NORMAL_CLOSURE)
                place = await pool.quota.reserve()
            new = await transport.establish(self.ctx, place, self._deliver, _no_heartbeat)
        except (OperationError, TransportFailure, CircuitOpenError, Fenced) as exc:
            raw = exc.raw if isinstance(exc, TransportFailure) else self._raw(CloseCode.ABNORMAL_CLOSURE)
            self._dropped(raw)
            return
        make_before_break = not old.closed
        self.link = new
        self._start(new)
        self.subscribed = set(topics)
        if not old.closed:
            await old.drain(pool.keepalive.echo_timeout)
            await old.close(CloseCode.NORMAL_CLOSURE, now=pool.clock.monotonic())
        place.settle()
        self.rollovers += 1
        self.connections += 1
        closed_at = old.closed_at if old.closed_at is not None else pool.clock.monotonic()
        overlap = max(0.0, closed_at - new.opened_at) if make_before_break else 0.0
        # each member's session is told, as a session on a channel of its own is (its platform id,
        # the channel's, changed): one CONNECTION_ROLLED_OVER per session, which is what a
        # session's subscriber (watch, the socket API's rollovers) follows
        for sid, member in list(self.members.items()):
            member.rolled_over(
                Rollover(
                    reason=reason,
                    previous=old.channel_id,
                    current=new.channel_id,
                    make_before_break=make_before_break,
                    overlap_s=overlap,
                    duplicates_dropped=member.duplicates - duplicates.get(sid, member.duplicates),
                    code=code,
                )
            )
        if self._to_add or any(not set(m.topics) <= self.subscribed for m in self.members.values()):
            self._to_add.update(
                {sid: m for sid, m in self.members.items() if not set(m.topics) <= self.subscribed}
            )
            self._work.set()

    # -- events -------------------------------------------------------------------------------------

    def _deliver(self, link: ChannelLink, message: Mapping[str, Any]) -> None:
        topic = message.get("topicName")
        members = list(self._by_topic.get(topic, ())) if isinstance(topic, str) else []
        if not self._dedupe.admit(link.channel_id, message):
            for member in members:
                member.duplicates += 1
            return
        for member in members:
            member.deliver(message)

    async def _close_link(self, code: CloseCode) -> None:
        link, self.link = self.link, None
        if link is not None:
            await link.close(code)


def _repaired_in_place(event: SdkErrorEvent) -> bool:
    """What a session on a channel of its own repairs in place (transports/notifications.py): a
    TRANSIENT message that neither ends nor reconnects the connection; never a code's name."""
    return (
        event.taxonomy_class is TaxonomyClass.TRANSIENT
        and not event.reconnect
        and not event.fail_fast
        and not event.graceful
    )


def _no_heartbeat() -> None:
    """Heartbeats are the link's liveness; nobody counts them here."""
