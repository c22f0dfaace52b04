"""One subscriber's pending messages: ordered, conflated per session while backlogged, capped in bytes. Pure.

The publisher (a bus sink, synchronous) pushes; the subscriber's writer task takes. Nothing here
waits or does I/O, so the publisher never awaits a socket (docs/robustness.md, "Local sockets"):

* **in order**: messages leave in the order they were pushed, so ``seq`` rises on every stream;
* **conflated while backlogged**: once the socket has pushed back (the writer could not hand
  everything to the kernel), a session's newer delta replaces its older pending one (last value
  wins; the merged delta keeps the ``previous`` this subscriber saw and moves to the back, so
  order holds). The backlog of deltas is then bounded by the number of sessions. A subscriber
  that keeps up never has anything conflated: it sees every transition;
* **capped**: past ``cap_bytes`` pending, everything pending is dropped and counted; from then
  on pushes are only counted, until the writer takes ``{"type": "lagged", "count": n}`` and a
  snapshot built at that moment (tokio's broadcast ``Lagged(n)``). ``on_lag`` tells the writer,
  which disconnects a subscriber that stays over the cap too long (Redis'
  ``client-output-buffer-limit pubsub``).

Platform records (the ``platform`` stream) are never conflated either, and never dropped silently:
what a lag drops of them is remembered per session (the first and last ``sessionSeq`` lost, the
last gap notice lost), and the recovery tells it after the snapshot as ``gap`` messages
(``reason: "lagged"``): a client that wants the records asks for them again with ``since``.
"""

from __future__ import annotations

from collections.abc import Callable

from supervisor.api.messages import Delta, encode_message
from supervisor.api.platform_events import PlatformRecord

__all__ = ["LaggedGap", "Outbox"]

#: builds the ``gap`` frame of one session's records a lag dropped: (session, platform, agent, first, last)
LaggedGap = Callable[[str, str | None, str | None, int, int], bytes]


def _nothing() -> None:
    return None


class _Lost:
    """What a lag dropped of one session's platform records."""

    __slots__ = ("agent_id", "first", "gap", "last", "platform")

    def __init__(self, record: PlatformRecord) -> None:
        self.platform = record.platform
        self.agent_id = record.agent_id
        self.first = 0
        self.last = 0
        self.gap: bytes | None = None

    def add(self, record: PlatformRecord) -> None:
        if record.is_gap:
            self.gap = record.frame
            return
        seq = record.position
        self.first = seq if self.first == 0 else min(self.first, seq)
        self.last = max(self.last, seq)


class Outbox:
    """Pending messages of one subscriber (see the module docstring for the rules)."""

    __slots__ = (
        "_bytes",
        "_cap",
        "_head",
        "_items",
        "_lagged_gap",
        "_latest",
        "_lost_platform",
        "_next",
        "_on_lag",
        "_snapshot",
        "backlogged",
        "conflated",
        "lagged",
        "lags",
        "lost",
    )

    def __init__(
        self,
        cap_bytes: int,
        snapshot: Callable[[], bytes],
        on_lag: Callable[[], None] = _nothing,
        lagged_gap: LaggedGap | None = None,
    ) -> None:
        self._cap = cap_bytes
        self._snapshot = snapshot
        self._on_lag = on_lag
        # the first snapshot, sent before anything else and outside the cap (it grows with sessions)
        self._head: bytes | None = None
        # push order is dict order; a conflated delta is popped and re-inserted at the back
        self._items: dict[int, Delta | bytes | PlatformRecord] = {}
        # what lags dropped of each session's platform records, told at the recovery
        self._lost_platform: dict[str, _Lost] = {}
        self._lagged_gap = lagged_gap
        # session -> key of its newest delta still pending (conflation target)
        self._latest: dict[str, int] = {}
        self._next = 0
        self._bytes = 0
        # set by the writer while the socket pushes back (a send left bytes over)
        self.backlogged = False
        self.lagged = False
        # messages dropped since the lag began (the next "lagged" notice carries it)
        self.lost = 0
        self.lags = 0
        self.conflated = 0

    @property
    def pending_bytes(self) -> int:
        return self._bytes

    def start(self, snapshot: bytes) -> None:
        """The subscription's first message, taken before any delta pushed after it."""
        self._head = snapshot

    def push_delta(self, delta: Delta) -> None:
        if self.lagged:
            self.lost += 1
            return
        if self.backlogged:
            key = self._latest.get(delta.session_id)
            if key is not None:
                older = self._items.pop(key)
                assert isinstance(older, Delta)
                self._bytes -= len(older.frame)
                # what this subscriber last saw of the session is what the older delta left from
                delta = delta.rebased(older.previous)
                self.conflated += 1
        self._append(delta, len(delta.frame), delta.session_id)

    def push_frame(self, frame: bytes) -> None:
        """An event's frame: never conflated (every RETRY_ATTEMPT is its own fact)."""
        if self.lagged:
            self.lost += 1
            return
        self._append(frame, len(frame), None)

    def push_platform(self, record: PlatformRecord) -> None:
        """A platform record or gap: never conflated; what a lag drops of it is told as a gap."""
        if self.lagged:
            self.lost += 1
            self._lose(record)
            return
        self._append(record, len(record.frame), None)

    def _lose(self, record: PlatformRecord) -> None:
        lost = self._lost_platform.get(record.session_id)
        if lost is None:
            lost = self._lost_platform[record.session_id] = _Lost(record)
        lost.add(record)

    def _append(self, item: Delta | bytes | PlatformRecord, size: int, session_id: str | None) -> None:
        key = self._next
        self._next += 1
        self._items[key] = item
        if session_id is not None:
            self._latest[session_id] = key
        self._bytes += size
        if self._bytes > self._cap:
            self._lag()

    def _lag(self) -> None:
        self.lost += len(self._items)
        for item in self._items.values():
            if isinstance(item, PlatformRecord):
                self._lose(item)
        self._items.clear()
        self._latest.clear()
        self._bytes = 0
        self.lagged = True
        self.lags += 1
        self._on_lag()

    def take(self) -> tuple[list[bytes], bool]:
        """Everything to write now, in order, and whether it is a lag's recovery (notice + snapshot).

        After a lag the pending messages are gone already: the notice and a snapshot built now
        replace them, and whatever is pushed after this call follows the snapshot.
        """
        if self.lagged:
            lost, self.lost = self.lost, 0
            self.lagged = False
            gaps = self._platform_gaps()
            if self._head is not None:
                # the first snapshot never left: the reader lost nothing it had, a fresh one is enough
                self._head = None
                return [self._snapshot(), *gaps], True
            return [encode_message({"type": "lagged", "count": lost}), self._snapshot(), *gaps], True
        frames: list[bytes] = []
        if self._head is not None:
            frames.append(self._head)
            self._head = None
        if self._items:
            frames.extend(item if isinstance(item, bytes) else item.frame for item in self._items.values())
            self._items.clear()
            self._latest.clear()
            self._bytes = 0
        return frames, False

    def _platform_gaps(self) -> list[bytes]:
        """The gaps a lag left in the platform records: the last gap notice lost, then the range lost."""
        lost_platform, self._lost_platform = self._lost_platform, {}
        frames: list[bytes] = []
        for session_id, lost in lost_platform.items():
            if lost.gap is not None:
                frames.append(lost.gap)
            if lost.last and self._lagged_gap is not None:
                frames.append(
                    self._lagged_gap(session_id, lost.platform, lost.agent_id, lost.first, lost.last)
                )
        return frames
