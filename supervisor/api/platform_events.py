"""Platform events: what the sessions carry, numbered per session, kept in a bounded window, fanned out. Pure.

The one object the runtime hands every platform event to (docs/runtime.md, "Platform events"):

* :meth:`PlatformEvents.delivered` takes one event a session's platform delivered (a CXone
  ``get-next-event`` event, a Genesys notification, a Web Messaging inbound message or event), gives it
  the session's next ``sessionSeq`` (1, 2, 3, ...: no hole while the session is connected) and hands its
  record to every listener (the subscribe socket's fan-out). A *replayed* item (fetched from a history
  after a gap) whose platform message id the session already delivered is dropped: never twice.
* :meth:`PlatformEvents.gap` tells a gap: the daemon could not hear the session's platform for a while
  (a reconnection, the daemon's start, a CXone resync), with what was done to close it (``resync``).
* The hub watches the bus (:meth:`PlatformEvents.__call__`, a bus sink) for the moments a gap opens: a
  session's first transition of this boot (``started``), a session leaving ``active`` (told as
  ``reconnected`` once it is back), a CXone ``SESSION_RESYNCED`` (``resynced``). It tells each to the
  gap handler (:meth:`PlatformEvents.resync_with`) once the session can deliver again: before the
  first event the new connection delivers, or when the session turns ``active``, whichever comes
  first. The default handler tells the gap at once with ``resync: "none"``; a resyncer (a history
  fetch, a snapshot read) replaces it and calls :meth:`gap` itself, then delivers what it fetched
  flagged ``replayed`` or ``snapshot``.
* Every record and gap stays in its session's **window** (``windowEvents``, ``windowBytes``), and all
  windows together within ``windowTotalBytes``: past it the oldest record of the daemon goes first. A
  subscriber that comes back with ``since`` (per session: the bootId and the last ``sessionSeq`` it saw)
  gets what it missed from the window (:meth:`PlatformEvents.replay`), or a gap naming what fell out.

A record's frame is encoded once, whoever receives it. Nothing here logs or publishes a record: the
content is customer data and goes to the subscribe socket's ``platform`` stream only; counts do go
elsewhere (:meth:`PlatformEvents.stats`).
"""

from __future__ import annotations

import enum
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from supervisor.api.protocol import frame_parameters
from supervisor.clock import Clock, iso_utc
from supervisor.events import ErrorClassified, Published, SessionTransition
from supervisor.vocabulary import SessionState

__all__ = [
    "PLATFORM_STREAM",
    "GapHandler",
    "GapOpened",
    "GapReason",
    "PlatformEvents",
    "PlatformRecord",
    "Resync",
    "WindowLimits",
    "gap_message",
]

#: the opt-in stream of the subscribe socket that carries these records (not part of "all")
PLATFORM_STREAM: Final = "platform"
#: the ``ids`` key a replayed item is deduplicated by (the platform's own message id)
MESSAGE_ID: Final = "messageId"
#: a CXone resync, as the transport names it (taxonomy v2; docs/taxonomy.md): the platform's snapshot follows
_RESYNCED = "SESSION_RESYNCED"

_encoder = msgspec.json.Encoder()


class Resync(enum.StrEnum):
    """What was done to close a gap (docs/socket-api.md, "Gaps")."""

    #: nothing the platform allows (Genesys notifications have no replay), or nothing done
    NONE = "none"
    #: what was missed was fetched from the platform's history and follows, flagged ``replayed``
    REPLAYED = "replayed"
    #: the platform's current state follows, flagged ``snapshot``
    SNAPSHOT = "snapshot"
    #: a resync was tried and failed: what was missed is lost
    FAILED = "failed"


class GapReason(enum.StrEnum):
    """Why the daemon could not hear a session's platform, or why a subscriber misses records."""

    #: the session's first connection since the daemon started (what came before is unknown)
    STARTED = "started"
    #: the session's connection was lost and is back
    RECONNECTED = "reconnected"
    #: the platform resynced the session (CXone: a poll answer was lost; its snapshot follows)
    RESYNCED = "resynced"
    #: the subscriber's ``since`` names records the window no longer holds
    WINDOW = "window"
    #: the subscriber fell behind and its pending records were dropped (``lagged``)
    LAGGED = "lagged"
    #: the subscriber's ``since`` names another boot of the daemon (a restart, a handover)
    RESTARTED = "restarted"


@dataclass(frozen=True, slots=True)
class WindowLimits:
    """``[events]``: per session, records and bytes; all windows of the daemon, bytes."""

    events: int = 100
    bytes: int = 64 * 1024
    total_bytes: int = 256 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class GapOpened:
    """A gap the hub found, handed to the gap handler when the session can deliver again."""

    session_id: str
    platform: str | None
    reason: GapReason
    #: the sequence number the session's next record takes: what follows the gap starts there
    from_seq: int
    #: how long the daemon could not hear the platform; None when unknown (a start, a resync)
    seconds: float | None


GapHandler = Callable[[GapOpened], None]


class PlatformRecord:
    """One entry of a session's window: a platform event, or a gap told for the session.

    ``position`` orders it within the session: a record's own ``sessionSeq``; a gap's, the
    ``sessionSeq`` the next record takes (it comes after every record below it).
    """

    __slots__ = ("agent_id", "event_type", "frame", "is_gap", "key", "platform", "position", "session_id")

    def __init__(
        self,
        session_id: str,
        position: int,
        *,
        platform: str | None,
        agent_id: str | None,
        event_type: str | None,
        payload: Mapping[str, Any],
        key: int,
    ) -> None:
        self.session_id = session_id
        self.position = position
        self.platform = platform
        self.agent_id = agent_id
        # None for a gap: the event-type filter never hides a gap
        self.event_type = event_type
        self.is_gap = event_type is None
        # daemon-wide insertion order (the total-bytes eviction takes the smallest first)
        self.key = key
        self.frame = frame_parameters(_encoder.encode(payload), continues=True)


def gap_message(
    boot_id: str,
    session_id: str,
    *,
    platform: str | None,
    agent_id: str | None,
    from_seq: int,
    seconds: float | None,
    resync: Resync,
    reason: GapReason,
    at: str,
    to_seq: int | None = None,
) -> dict[str, Any]:
    """A ``gap`` message's parameters (docs/socket-api.md, "Gaps")."""
    out: dict[str, Any] = {
        "type": "gap",
        "bootId": boot_id,
        "sessionId": session_id,
        "agentId": agent_id,
        "platform": platform,
        "fromSeq": from_seq,
        "seconds": None if seconds is None else round(seconds, 3),
        "resync": resync.value,
        "reason": reason.value,
        "at": at,
    }
    if to_seq is not None:
        out["toSeq"] = to_seq
    return out


class _Window:
    """One session's sequence and its last records (bounded)."""

    __slots__ = ("bytes", "entries", "evicted_through", "lost_at", "next_seq", "opened", "seen_ids")

    def __init__(self) -> None:
        self.next_seq = 1
        self.entries: deque[PlatformRecord] = deque()
        self.bytes = 0
        # the highest sessionSeq that fell out of the window (0: nothing yet)
        self.evicted_through = 0
        # a gap found and not yet told; when the session left ``active`` (monotonic)
        self.opened: GapOpened | None = None
        self.lost_at: float | None = None
        # platform message ids delivered (bounded): a replayed one is never delivered twice
        self.seen_ids: OrderedDict[str, None] = OrderedDict()


class PlatformEvents:
    """The hub of platform events (see the module docstring)."""

    def __init__(
        self,
        *,
        boot_id: str,
        clock: Clock,
        limits: WindowLimits | None = None,
        describe: Callable[[str], tuple[str | None, str | None]] | None = None,
    ) -> None:
        self.boot_id = boot_id
        self._clock = clock
        self.limits = limits if limits is not None else WindowLimits()
        # a session's (platform, agentId) as the daemon knows them now (the session table)
        self._describe = describe
        self._windows: dict[str, _Window] = {}
        self._listeners: tuple[Callable[[PlatformRecord], None], ...] = ()
        self._handler: GapHandler = self._tell_unresynced
        # every window entry, oldest first, for the daemon-wide cap (entries evicted per session
        # stay here until popped or compacted: `_live` counts the ones still in a window)
        self._all: deque[PlatformRecord] = deque()
        self._live = 0
        self.total_bytes = 0
        self._next_key = 0
        # counts (never content): delivered records, gaps told, replayed duplicates dropped, evictions
        self.records = 0
        self.gaps = 0
        self.duplicates = 0
        self.evicted = 0
        # events a transport's sink could not hand over (supervisor/runtime/platform_sinks.py)
        self.failures = 0

    # ------------------------------------------------------------------ wiring
    def listen(self, listener: Callable[[PlatformRecord], None]) -> Callable[[], None]:
        """Hand every record and gap to ``listener`` (synchronously); returns the unsubscribe."""
        self._listeners = (*self._listeners, listener)

        def unsubscribe() -> None:
            self._listeners = tuple(x for x in self._listeners if x is not listener)

        return unsubscribe

    def describe_with(self, describe: Callable[[str], tuple[str | None, str | None]]) -> None:
        """How the hub learns a session's (platform, agentId): the session table, once it exists."""
        self._describe = describe

    def resync_with(self, handler: GapHandler) -> None:
        """Who tells the gaps the hub finds (a resyncer); the default tells them with ``resync: "none"``."""
        self._handler = handler

    def _tell_unresynced(self, opened: GapOpened) -> None:
        self.gap(
            opened.session_id,
            from_seq=opened.from_seq,
            seconds=opened.seconds,
            resync=Resync.NONE,
            reason=opened.reason,
            platform=opened.platform,
        )

    # ------------------------------------------------------------------ the transports' side
    def delivered(
        self,
        session_id: str,
        platform: str,
        event_type: str,
        body: Any,
        ids: Mapping[str, str],
        *,
        replayed: bool = False,
        snapshot: bool = False,
    ) -> int | None:
        """One platform event of a session: its ``sessionSeq``, or None for a replayed duplicate.

        ``body`` passes through as the platform sent it. ``ids``: the conversation or contact ids
        the event names and the platform's own ids (``conversationId``, ``contactId``,
        ``messageId``, ``correlationId``, ...), each a top-level field of the record; ``agentId``
        there overrides the session table's. A gap found for the session and not yet told is told
        first (to the gap handler).
        """
        window = self._window(session_id)
        if window.opened is not None:
            self._open(window)
        message_id = ids.get(MESSAGE_ID)
        if message_id is not None:
            if replayed and message_id in window.seen_ids:
                self.duplicates += 1
                return None
            window.seen_ids[message_id] = None
            if len(window.seen_ids) > max(self.limits.events, 1):
                window.seen_ids.popitem(last=False)
        seq = window.next_seq
        window.next_seq = seq + 1
        agent_id = ids.get("agentId") or self._agent(session_id)
        payload: dict[str, Any] = {
            "type": PLATFORM_STREAM,
            "bootId": self.boot_id,
            "sessionId": session_id,
            "sessionSeq": seq,
            "agentId": agent_id,
            "platform": platform,
            "eventType": event_type,
        }
        for name, value in ids.items():
            if name not in payload:
                payload[name] = value
        payload["body"] = body
        payload["receivedAt"] = iso_utc(self._clock.time())
        if replayed:
            payload["replayed"] = True
        if snapshot:
            payload["snapshot"] = True
        self.records += 1
        self._add(
            window,
            PlatformRecord(
                session_id,
                seq,
                platform=platform,
                agent_id=agent_id,
                event_type=event_type,
                payload=payload,
                key=self._key(),
            ),
        )
        return seq

    def gap(
        self,
        session_id: str,
        *,
        seconds: float | None,
        resync: Resync,
        reason: GapReason = GapReason.RECONNECTED,
        from_seq: int | None = None,
        platform: str | None = None,
    ) -> None:
        """Tell a gap of ``session_id`` to every subscriber and keep it in the window.

        ``from_seq``: the first sequence number after the gap (default: the session's next one).
        A gap the hub found and had not told yet is told by this call (it is not told twice).
        """
        window = self._window(session_id)
        window.opened = None
        start = window.next_seq if from_seq is None else from_seq
        agent_id = self._agent(session_id)
        if platform is None:
            platform = self._platform(session_id)
        message = gap_message(
            self.boot_id,
            session_id,
            platform=platform,
            agent_id=agent_id,
            from_seq=start,
            seconds=seconds,
            resync=resync,
            reason=reason,
            at=iso_utc(self._clock.time()),
        )
        self.gaps += 1
        self._add(
            window,
            PlatformRecord(
                session_id,
                window.next_seq,
                platform=platform,
                agent_id=agent_id,
                event_type=None,
                payload=message,
                key=self._key(),
            ),
        )

    def next_seq(self, session_id: str) -> int:
        """The sequence number the session's next record takes."""
        window = self._windows.get(session_id)
        return 1 if window is None else window.next_seq

    # ------------------------------------------------------------------ the bus side
    def __call__(self, published: Published) -> None:
        """A bus sink: finds the moments a gap opens, and when it may be told."""
        event = published.event
        if isinstance(event, SessionTransition):
            self._moved(event)
        elif isinstance(event, ErrorClassified) and event.event.code == _RESYNCED:
            # the transport named it (not a routing decision): the platform's snapshot follows at once
            session_id = event.event.context.get("sessionId")
            if isinstance(session_id, str):
                window = self._window(session_id)
                window.opened = GapOpened(
                    session_id, event.event.platform or None, GapReason.RESYNCED, window.next_seq, None
                )
                self._open(window)

    def _moved(self, event: SessionTransition) -> None:
        session_id = event.session_id
        window = self._window(session_id)
        if event.source is SessionState.ACTIVE:
            window.lost_at = self._clock.monotonic()
            platform = self._platform(session_id)
            window.opened = GapOpened(session_id, platform, GapReason.RECONNECTED, window.next_seq, None)
        if event.target is SessionState.ACTIVE and window.opened is not None:
            self._open(window)

    def _open(self, window: _Window) -> None:
        """Hand the session's pending gap to the handler (once), with how long it lasted."""
        opened = window.opened
        if opened is None:
            return
        window.opened = None
        if opened.reason is GapReason.RECONNECTED and window.lost_at is not None:
            opened = GapOpened(
                opened.session_id,
                opened.platform,
                opened.reason,
                opened.from_seq,
                max(self._clock.monotonic() - window.lost_at, 0.0),
            )
            window.lost_at = None
        self._handler(opened)

    # ------------------------------------------------------------------ windows
    def _window(self, session_id: str) -> _Window:
        window = self._windows.get(session_id)
        if window is None:
            window = self._windows[session_id] = _Window()
            # the session's first sight in this boot: whatever its platform sent before is unknown
            window.opened = GapOpened(session_id, self._platform(session_id), GapReason.STARTED, 1, None)
        return window

    def _agent(self, session_id: str) -> str | None:
        return None if self._describe is None else self._describe(session_id)[1]

    def _platform(self, session_id: str) -> str | None:
        return None if self._describe is None else self._describe(session_id)[0]

    def _key(self) -> int:
        key = self._next_key
        self._next_key = key + 1
        return key

    def _add(self, window: _Window, record: PlatformRecord) -> None:
        size = len(record.frame)
        window.entries.append(record)
        window.bytes += size
        self._all.append(record)
        self._live += 1
        self.total_bytes += size
        limits = self.limits
        while window.entries and (len(window.entries) > limits.events or window.bytes > limits.bytes):
            self._evict(window)
        while self.total_bytes > limits.total_bytes and self._all:
            oldest = self._all.popleft()
            owner = self._windows.get(oldest.session_id)
            if owner is not None and owner.entries and owner.entries[0] is oldest:
                self._evict(owner)
        if len(self._all) > 2 * self._live + 1024:
            # entries evicted per session linger in the daemon-wide queue: drop them (amortised)
            self._all = deque(r for r in self._all if self._held(r))
        for listener in self._listeners:
            listener(record)

    def _held(self, record: PlatformRecord) -> bool:
        window = self._windows.get(record.session_id)
        return window is not None and bool(window.entries) and record.key >= window.entries[0].key

    def _evict(self, window: _Window) -> None:
        record = window.entries.popleft()
        size = len(record.frame)
        window.bytes -= size
        self.total_bytes -= size
        self._live -= 1
        self.evicted += 1
        if not record.is_gap:
            window.evicted_through = max(window.evicted_through, record.position)

    # ------------------------------------------------------------------ a subscriber's return
    def replay(
        self,
        since: Mapping[str, tuple[str, int]],
        wants: Callable[[PlatformRecord], bool],
    ) -> list[PlatformRecord]:
        """What a subscriber that saw ``since`` (per session: bootId, last sessionSeq) missed.

        Per session, in order: a ``restarted`` gap when its bootId is not this boot's (then
        everything the window holds), a ``window`` gap naming what fell out, then the window's
        records and gaps after what it saw. Only what ``wants`` accepts (the subscriber's filters).
        """
        out: list[PlatformRecord] = []
        at = iso_utc(self._clock.time())
        for session_id, (boot_id, seen) in since.items():
            window = self._windows.get(session_id)
            platform = self._platform(session_id)
            agent_id = self._agent(session_id)

            if boot_id != self.boot_id:
                gap = self._told(session_id, platform, agent_id, GapReason.RESTARTED, 1, None, at)
                if not wants(gap):
                    continue
                out.append(gap)
                seen = 0
            if window is None:
                continue
            if seen < window.evicted_through:
                gap = self._told(
                    session_id, platform, agent_id, GapReason.WINDOW, seen + 1, window.evicted_through, at
                )
                if not wants(gap):
                    continue
                out.append(gap)
            out.extend(r for r in window.entries if r.position > seen and wants(r))
        return out

    def _told(
        self,
        session_id: str,
        platform: str | None,
        agent_id: str | None,
        reason: GapReason,
        from_seq: int,
        to_seq: int | None,
        at: str,
    ) -> PlatformRecord:
        """A gap told to one subscriber only (its ``since``): not kept in the window."""
        message = gap_message(
            self.boot_id,
            session_id,
            platform=platform,
            agent_id=agent_id,
            from_seq=from_seq,
            seconds=None,
            resync=Resync.NONE,
            reason=reason,
            at=at,
            to_seq=to_seq,
        )
        return PlatformRecord(
            session_id,
            from_seq,
            platform=platform,
            agent_id=agent_id,
            event_type=None,
            payload=message,
            key=-1,
        )

    def lagged_gap(
        self, session_id: str, platform: str | None, agent_id: str | None, first: int, last: int
    ) -> bytes:
        """The gap a lagged subscriber is told for one session's records it was not sent."""
        return _frame(
            gap_message(
                self.boot_id,
                session_id,
                platform=platform,
                agent_id=agent_id,
                from_seq=first,
                seconds=None,
                resync=Resync.NONE,
                reason=GapReason.LAGGED,
                at=iso_utc(self._clock.time()),
                to_seq=last,
            )
        )

    def stats(self) -> dict[str, int]:
        """Counts only, never content: what Status and the benchmarks report."""
        return {
            "sessions": len(self._windows),
            "records": self.records,
            "gaps": self.gaps,
            "duplicatesDropped": self.duplicates,
            "evicted": self.evicted,
            "failures": self.failures,
            "windowEntries": self._live,
            "windowBytes": self.total_bytes,
        }


def _frame(message: Mapping[str, Any]) -> bytes:
    return frame_parameters(_encoder.encode(message), continues=True)
