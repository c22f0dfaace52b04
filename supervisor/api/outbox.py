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
The subscribers that take every record share :class:`PlatformRun` items (one append per record
for all of them, the bytes joined once); the records appended to an open run are charged to its
holders when it is sealed, so an outbox may hold up to :data:`RUN_BYTES` more than its cap before
it lags.
"""

from __future__ import annotations

from collections.abc import Callable

from supervisor.api.messages import Delta, encode_message
from supervisor.api.platform_events import PlatformRecord

__all__ = ["LaggedGap", "Outbox", "PlatformRun"]

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


#: a run takes records up to this many bytes: how far an outbox's byte count may lag behind its
#: content between two checks of its cap (the records appended after the run was pushed)
RUN_BYTES = 64 * 1024


class PlatformRun:
    """Consecutive platform records shared by the outboxes of the subscribers that take every record.

    The fan-out opens a run, puts it into each such outbox once (one item, one wake) and appends
    the records that follow to the run itself: a record then costs one append, however many
    subscribers take it, and the run's bytes are joined once for all of them. A run is *sealed*
    (takes no more records; the next record opens a new run) as soon as anything else happens to an
    outbox holding it (another message pushed, a lag, a writer's take) or it reaches
    :data:`RUN_BYTES`, so every outbox still gets every record once and in push order. At the seal,
    each holder is charged the bytes appended since it got the run (and lags if that takes it over
    its cap).
    """

    __slots__ = ("_holders", "_joined", "bytes", "records", "sealed")

    def __init__(self) -> None:
        self.records: list[PlatformRecord] = []
        self.bytes = 0
        self.sealed = False
        self._joined: bytes | None = None
        self._holders: list[Outbox] = []

    def append(self, record: PlatformRecord) -> None:
        self.records.append(record)
        self.bytes += len(record.frame)
        if self.bytes >= RUN_BYTES:
            self.seal()

    def seal(self) -> None:
        if self.sealed:
            return
        self.sealed = True
        holders, self._holders = self._holders, []
        for outbox in holders:
            outbox._run_sealed(self)

    @property
    def frame(self) -> bytes:
        """The records' frames, joined once (a take seals the run: every holder gets the same bytes)."""
        self.seal()
        joined = self._joined
        if joined is None:
            joined = self._joined = b"".join([record.frame for record in self.records])
        return joined


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
        "_run",
        "_run_charged",
        "_snapshot",
        "backlogged",
        "conflated",
        "lagged",
        "lags",
        "lost",
        "taken",
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
        self._items: dict[int, Delta | bytes | PlatformRecord | PlatformRun] = {}
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
        # the shared run this outbox holds as its last item, while the run is open
        self._run: PlatformRun | None = None
        # the run's bytes this outbox was charged when it got the run
        self._run_charged = 0
        # messages handed out by the last take (a run is as many messages as it has records)
        self.taken = 0

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

    def push_run(self, run: PlatformRun) -> None:
        """A shared run of platform records (see :class:`PlatformRun`): its records so far, and those
        appended to it while it stays this outbox's last item."""
        if self.lagged:
            # a lagged outbox counts each record it loses: no more records may reach it through the run
            run.seal()
            self.lost += len(run.records)
            for record in run.records:
                self._lose(record)
            return
        self._append(run, run.bytes, None)
        if self.lagged:
            # the run took this outbox over its cap: its records are counted lost, no more reach it
            run.seal()
        elif not run.sealed:
            self._run = run
            self._run_charged = run.bytes
            run._holders.append(self)

    def _detach(self) -> None:
        """Seal the open run this outbox holds, charging it what was appended since (the caller checks the cap)."""
        run = self._run
        if run is not None:
            self._run = None
            self._bytes += run.bytes - self._run_charged
            run.seal()

    def _run_sealed(self, run: PlatformRun) -> None:
        """Another holder sealed the run: charge what was appended to it since this outbox got it."""
        if self._run is run:
            self._run = None
            self._bytes += run.bytes - self._run_charged
            if self._bytes > self._cap and not self.lagged:
                self._lag()

    def _lose(self, record: PlatformRecord) -> None:
        lost = self._lost_platform.get(record.session_id)
        if lost is None:
            lost = self._lost_platform[record.session_id] = _Lost(record)
        lost.add(record)

    def _append(
        self, item: Delta | bytes | PlatformRecord | PlatformRun, size: int, session_id: str | None
    ) -> None:
        # whatever comes after an open run must not be overtaken by records appended to it
        self._detach()
        key = self._next
        self._next += 1
        self._items[key] = item
        if session_id is not None:
            self._latest[session_id] = key
        self._bytes += size
        if self._bytes > self._cap:
            self._lag()

    def _lag(self) -> None:
        self._detach()
        for item in self._items.values():
            if isinstance(item, PlatformRun):
                self.lost += len(item.records)
                for record in item.records:
                    self._lose(record)
            else:
                self.lost += 1
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
        self._detach()
        if self.lagged:
            lost, self.lost = self.lost, 0
            self.lagged = False
            gaps = self._platform_gaps()
            if self._head is not None:
                # the first snapshot never left: the reader lost nothing it had, a fresh one is enough
                self._head = None
                recovery = [self._snapshot(), *gaps]
            else:
                recovery = [encode_message({"type": "lagged", "count": lost}), self._snapshot(), *gaps]
            self.taken = len(recovery)
            return recovery, True
        frames: list[bytes] = []
        count = 0
        if self._head is not None:
            frames.append(self._head)
            self._head = None
            count = 1
        if self._items:
            for item in self._items.values():
                if isinstance(item, bytes):
                    frames.append(item)
                    count += 1
                elif isinstance(item, PlatformRun):
                    frames.append(item.frame)
                    count += len(item.records)
                else:
                    frames.append(item.frame)
                    count += 1
            self._items.clear()
            self._latest.clear()
            self._bytes = 0
        self.taken = count
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
