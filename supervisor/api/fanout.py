"""Fan-out: the bus side hands each change to every subscriber that wants it; one writer task per subscriber.

The bus calls the board synchronously, and the board calls :meth:`Hub.publish`: it only pushes
into each matching subscriber's :class:`~supervisor.api.outbox.Outbox` and wakes that
subscriber's writer. Nothing on this path awaits or touches a socket, so a subscriber that never
reads cannot slow the daemon or anyone else; its own outbox conflates, then lags, and its writer
disconnects it once it has been over its cap for ``lagged_disconnect_after`` seconds.

A delta's or an event's frame is encoded once, however many subscribers get it. The platform
events hub (supervisor/api/platform_events.py) hands its records here the same way
(:meth:`Hub.platform_record`): only subscribers of the ``platform`` stream get them, found
through an index (by session for those whose filter names sessions); those that take every record
share runs of records (supervisor/api/outbox.py, ``PlatformRun``): a record costs one append for
all of them, not one push and one wake per subscriber.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import anyio

from supervisor.api.board import StateBoard
from supervisor.api.connection import Connection
from supervisor.api.events import SubscriberDisconnected
from supervisor.api.messages import Delta, Subscription, encode_message
from supervisor.api.outbox import LaggedGap, Outbox, PlatformRun
from supervisor.api.platform_events import PlatformEvents, PlatformRecord
from supervisor.events import CircuitEvent, ErrorClassified, Event, Published, wire

__all__ = ["Hub", "Subscriber"]

_TRANSITION = "SESSION_TRANSITION"


class Subscriber:
    """One subscription: its outbox, and the writer that drains it into the socket."""

    def __init__(
        self,
        connection: Connection,
        subscription: Subscription,
        *,
        cap_bytes: int,
        lagged_disconnect_after: float,
        snapshot: Callable[[Subscription], bytes],
        lagged_gap: LaggedGap | None = None,
    ) -> None:
        self.connection = connection
        self.subscription = subscription
        self.outbox = Outbox(cap_bytes, lambda: snapshot(subscription), self._lagging, lagged_gap)
        self._after = lagged_disconnect_after
        self._wake: anyio.Event | None = None
        # while over the cap: the moment past which the writer gives up (anyio's clock)
        self._deadline = math.inf
        self._send_scope: anyio.CancelScope | None = None
        self.delivered = 0
        self.disconnected_for_lag = False
        self.outbox.start(snapshot(subscription))

    def wake(self) -> None:
        wake = self._wake
        if wake is not None:
            self._wake = None
            wake.set()

    def _lagging(self) -> None:
        # called synchronously from a push: arm the deadline once, even mid-send
        if self._deadline == math.inf:
            self._deadline = anyio.current_time() + self._after
            if self._send_scope is not None:
                self._send_scope.deadline = self._deadline

    async def write(self) -> None:
        """Drain the outbox until the connection is gone or stays over its cap too long."""
        outbox = self.outbox
        while True:
            frames, recovery = outbox.take()
            if not frames:
                self._wake = anyio.Event()
                await self._wake.wait()
                continue
            if not await self._send(b"".join(frames)):
                return
            self.delivered += outbox.taken
            if recovery and not outbox.lagged:
                self._deadline = math.inf  # caught up: the lag notice and the snapshot are out

    async def _send(self, data: bytes) -> bool:
        sock = self.connection.sock
        view = memoryview(data)
        outbox = self.outbox
        while view:
            try:
                sent = sock.send(view)
            except BlockingIOError:
                sent = 0
            except OSError:
                return False
            view = view[sent:]
            if view:
                # the kernel's buffer is full: from now on this subscriber's deltas conflate
                outbox.backlogged = True
                with anyio.CancelScope(deadline=self._deadline) as scope:
                    self._send_scope = scope
                    await anyio.wait_writable(sock)
                self._send_scope = None
                if scope.cancelled_caught:
                    self.disconnected_for_lag = True
                    return False
        outbox.backlogged = False
        return True

    def finish(self, reason: str) -> None:
        """The daemon is stopping: what is pending and the ``end`` reply, if the socket takes them now."""
        frames, _ = self.outbox.take()
        frames.append(encode_message({"type": "end", "reason": reason}, continues=False))
        self.connection.send_nowait(b"".join(frames))


class Hub:
    """The subscribers of the subscribe socket, fed by the board (see the module docstring)."""

    def __init__(
        self,
        board: StateBoard,
        *,
        publish: Callable[[Event], object],
        timestamp: Callable[[], str],
        platform: PlatformEvents | None = None,
    ) -> None:
        self.board = board
        self.platform = platform
        self._publish = publish
        self._timestamp = timestamp
        self._subscribers: tuple[Subscriber, ...] = ()
        # the ``platform`` stream's subscribers, indexed so that a record costs only the subscribers
        # that may want it: those whose filter names sessions, by session; the others (every session)
        self._platform_by_session: dict[str, tuple[Subscriber, ...]] = {}
        self._platform_any: tuple[Subscriber, ...] = ()
        # those that take every record (no filter on the stream): they share runs of records
        # (supervisor/api/outbox.py, PlatformRun), one append per record for all of them
        self._platform_all: tuple[Subscriber, ...] = ()
        self._run: PlatformRun | None = None
        self.lag_disconnects = 0
        # `lagged` notices of subscribers gone (the live ones count their own)
        self._retired_lags = 0
        board.on_change = self.publish
        if platform is not None:
            platform.listen(self.platform_record)

    @property
    def subscribers(self) -> tuple[Subscriber, ...]:
        return self._subscribers

    def snapshot_frame(self, subscription: Subscription) -> bytes:
        return encode_message(self.board.snapshot(subscription))

    def add(self, subscriber: Subscriber) -> None:
        """Register ``subscriber``; a ``platform`` subscription with ``since`` first gets what it
        missed from the windows (in the same synchronous step: nothing falls in between)."""
        subscription = subscriber.subscription
        platform = self.platform
        if platform is not None and subscription.platform and subscription.since:
            for record in platform.replay(
                subscription.since,
                lambda r: subscription.wants_platform(r.session_id, r.platform, r.agent_id, r.event_type),
            ):
                # as a live record: what a lag drops of the replay is told as a gap too
                subscriber.outbox.push_platform(record)
        self._subscribers = (*self._subscribers, subscriber)
        if subscription.platform:
            # the open run was put into the others' outboxes only: the next record opens a new one
            self._seal_run()
            if _takes_every_record(subscription):
                self._platform_all = (*self._platform_all, subscriber)
            elif subscription.sessions is None:
                self._platform_any = (*self._platform_any, subscriber)
            else:
                index = self._platform_by_session
                for session_id in subscription.sessions:
                    index[session_id] = (*index.get(session_id, ()), subscriber)

    def _seal_run(self) -> None:
        run, self._run = self._run, None
        if run is not None:
            run.seal()

    def platform_record(self, record: PlatformRecord) -> None:
        """A platform record or gap, to each ``platform`` subscriber whose filters it passes. Never awaits.

        Only the subscribers that take every session and those whose filter names the record's
        session are asked (the index), not every subscriber: with subscribers that each watch their
        share of the sessions, a record costs the one or few that watch its session.
        """
        every = self._platform_all
        if every:
            run = self._run
            if run is None or run.sealed:
                run = self._run = PlatformRun()
                run.append(record)
                for subscriber in every:
                    subscriber.outbox.push_run(run)
                    subscriber.wake()
            else:
                # still the last item of every such outbox (nothing else happened to them since)
                run.append(record)
        session_id = record.session_id
        watching = self._platform_by_session.get(session_id)
        for subscribers in (self._platform_any, watching) if watching else (self._platform_any,):
            for subscriber in subscribers:
                if subscriber.subscription.wants_platform(
                    session_id, record.platform, record.agent_id, record.event_type
                ):
                    subscriber.outbox.push_platform(record)
                    subscriber.wake()

    def remove(self, subscriber: Subscriber) -> None:
        self._subscribers = tuple(s for s in self._subscribers if s is not subscriber)
        subscription = subscriber.subscription
        if subscription.platform:
            self._seal_run()
            if _takes_every_record(subscription):
                self._platform_all = tuple(s for s in self._platform_all if s is not subscriber)
            elif subscription.sessions is None:
                self._platform_any = tuple(s for s in self._platform_any if s is not subscriber)
            else:
                index = self._platform_by_session
                for session_id in subscription.sessions:
                    rest = tuple(s for s in index.get(session_id, ()) if s is not subscriber)
                    if rest:
                        index[session_id] = rest
                    else:
                        index.pop(session_id, None)
        self._retired_lags += subscriber.outbox.lags
        if subscriber.disconnected_for_lag:
            self.lag_disconnects += 1
            # published from the subscriber's task, never from inside a bus sink (seq order)
            self._publish(
                SubscriberDisconnected(
                    subscriber.connection.peer, "lagged", subscriber.outbox.lags, self._timestamp()
                )
            )

    @property
    def lagged_notices(self) -> int:
        """`lagged` notices sent since the start, to live subscribers and gone ones."""
        return self._retired_lags + sum(s.outbox.lags for s in self._subscribers)

    def stats(self) -> dict[str, Any]:
        return {
            "subscribers": len(self._subscribers),
            "laggedDisconnects": self.lag_disconnects,
            "pendingBytes": sum(s.outbox.pending_bytes for s in self._subscribers),
        }

    # ------------------------------------------------------------------ the bus side
    def publish(self, published: Published, delta: Delta | None) -> None:
        """Called synchronously for every bus event, after the board applied it. Never awaits."""
        subscribers = self._subscribers
        if not subscribers:
            return
        name = published.event.name
        # a session transition is the delta itself: never sent a second time as an event
        as_event = name != _TRANSITION
        frame: bytes | None = None
        for subscriber in subscribers:
            subscription = subscriber.subscription
            pushed = False
            if delta is not None and self._wants_delta(subscription, delta):
                subscriber.outbox.push_delta(delta)
                pushed = True
            if as_event and subscription.wants_event(name) and self._wants_event(subscription, published):
                if frame is None:
                    frame = encode_message({"type": "event", **wire(published)})
                subscriber.outbox.push_frame(frame)
                pushed = True
            if pushed:
                subscriber.wake()

    def _wants_delta(self, subscription: Subscription, delta: Delta) -> bool:
        if subscription.unfiltered:
            return True
        if subscription.sessions is not None and delta.session_id not in subscription.sessions:
            return False
        if subscription.platforms is not None and delta.extra.get("platform") not in subscription.platforms:
            return False
        return subscription.wants_state(delta.state, delta.previous)

    def _wants_event(self, subscription: Subscription, published: Published) -> bool:
        """Session and platform filters apply to events too: by their session, or by their circuit."""
        if subscription.sessions is None and subscription.platforms is None:
            return True
        event = published.event
        session_id = _session_of(published)
        if session_id is not None:
            if subscription.sessions is not None and session_id not in subscription.sessions:
                return False
            platforms = subscription.platforms
            return platforms is None or self.board.platform_of(session_id) in platforms
        if isinstance(event, CircuitEvent):
            endpoint = self.board.endpoint_of_circuit(event.circuit_id)
            if endpoint is None:
                return False  # no circuit of this daemon: no session or platform to match it by
            if subscription.platforms is not None and endpoint.platform not in subscription.platforms:
                return False
            sessions = subscription.sessions
            return sessions is None or any(self.board.endpoint_of(s) == endpoint for s in sessions)
        # daemon-wide events (drain, a taxonomy switch, the daemon's lifecycle) go to everyone who asked
        return True


def _takes_every_record(subscription: Subscription) -> bool:
    """A ``platform`` subscription with no filter that applies to records: it takes them all."""
    return (
        subscription.sessions is None
        and subscription.platforms is None
        and subscription.agents is None
        and subscription.event_types is None
    )


def _session_of(published: Published) -> str | None:
    if published.correlation is not None:
        return published.correlation.session_id
    event = published.event
    if isinstance(event, ErrorClassified):
        session_id = event.event.context.get("sessionId")
        return session_id if isinstance(session_id, str) else None
    session_id = getattr(event, "session_id", None)
    return session_id if isinstance(session_id, str) else None
