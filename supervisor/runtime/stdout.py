"""Event lines on standard output that never block the event loop.

A pipe nobody reads (or a journald applying backpressure) used to block the loop in a
``write``: keepalives stopped, sessions dropped, SIGTERM went unheard. Now the bus sink only
appends the encoded line to a bounded buffer; a daemon thread does the blocking writes; past the
buffer's byte cap a line is dropped and counted, and once the writer catches up the service
publishes ``EVENTS_DROPPED`` with the count, so the loss is never silent.

The thread is a daemon thread on purpose: a write blocked forever must not hold the process's
exit (anyio's worker threads are joined at interpreter exit). Standard output that cannot be
written at all before any line got through (``> /dev/full``, a closed descriptor) is reported
through :attr:`StdoutEvents.broken`, and ``run`` stops with one line and exit 1; a write error
after lines got through (the reader went away) only drops lines, counted and reported on stderr
once: the sessions matter more than their log. While writes fail, no ``EVENTS_DROPPED`` is
published (it would be one more line for the dead output: a loop of drops reporting drops);
the count waits for the first write that gets through again.

Every line is one JSON object, that report on stderr included (a ``LOG_RECORD`` line, not
published: the bus's lines go to the output that failed). Given ``priority`` (standard output is
journald's stream, supervisor/systemd/journal.py), each line leads with its ``<N>``; the one stderr
line leads with ``stderr_prefix`` (``<4>`` when stderr is journald's).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable

import anyio
import msgspec
from anyio.abc import TaskStatus

from supervisor.bus import EventBus
from supervisor.clock import iso_utc
from supervisor.events import EventsDropped, LogRecorded, Published, wire

__all__ = ["DEFAULT_BUFFER_BYTES", "WAKE_AFTER_S", "WAKE_AT_BYTES", "WRITTEN_AT_ONCE", "StdoutEvents"]

#: the most event bytes held for a slow standard output before lines are dropped
DEFAULT_BUFFER_BYTES = 8 * 1024 * 1024
#: how long a line may wait on the loop for the lines after it before the writer is woken: one
#: wake (a GIL hand-over to the writer thread and back) per this much time, not one per line
WAKE_AFTER_S = 0.02
#: ...unless this many bytes wait (or half the buffer, when that is less): the writer is woken at
#: once, so a burst of lines (a drain's) is not dropped from a small buffer while the wake is due
WAKE_AT_BYTES = 64 * 1024
#: ...or the line is one of the daemon's own state, which wakes the writer at once: a process
#: killed (a watchdog's SIGABRT, kill -9) loses what waits for the wake, and journald must not miss
#: that the daemon started, degraded or was reloaded because a kill came within 20 ms of it. Each
#: comes a few times per change of the whole daemon, never per session, so no burst wakes per line.
WRITTEN_AT_ONCE: frozenset[str] = frozenset(
    {
        "SOCKET_API_LISTENING",
        "DAEMON_STARTED",
        "DAEMON_STOPPING",
        "DAEMON_STOPPED",
        "DAEMON_FORCED_EXIT",
        "DAEMON_DEGRADED",
        "DAEMON_RECOVERED",
        "WATCHDOG_WITHHELD",
        "WATCHDOG_RESUMED",
        "STORE_DEGRADED",
        "STORE_RECOVERED",
        "FLEET_DEGRADED",
        "FLEET_RECOVERED",
        "CONFIG_RELOADED",
        "CONFIG_RELOAD_FAILED",
        "CREDENTIAL_ACCEPTED",
        "CREDENTIAL_REFUSED",
        "TAXONOMY_SWITCHED",
        "EVENTS_DROPPED",
    }
)

_encoder = msgspec.json.Encoder()


class StdoutEvents:
    """A bus sink writing one JSON object per line to ``fd`` from a daemon thread."""

    def __init__(
        self,
        bus: EventBus,
        *,
        fd: int = 1,
        max_buffer_bytes: int = DEFAULT_BUFFER_BYTES,
        priority: Callable[[Published], int] | None = None,
        stderr_prefix: bytes = b"",
        wake_after_s: float = WAKE_AFTER_S,
    ) -> None:
        self._bus = bus
        self._wake_after_s = wake_after_s
        self._wake_at = min(WAKE_AT_BYTES, max_buffer_bytes // 2)
        self._fd = fd
        self._priority = priority
        self._stderr_prefix = stderr_prefix
        self._max = max_buffer_bytes
        self._lines: deque[bytes] = deque()
        self._buffered = 0
        self._lock = threading.Condition()
        self._closed = False
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        # the writer's wake is scheduled on the loop (:data:`WAKE_AFTER_S`)
        self._wake_due = False
        self._progress: anyio.Event | None = None
        #: the writes made (each of every line buffered when the writer woke)
        self.batches = 0
        #: lines written, lines dropped in all, and dropped since the last EVENTS_DROPPED
        self.written = 0
        self.dropped = 0
        self._unreported = 0
        #: why standard output cannot be written at all (set before any line got through)
        self.broken: str | None = None
        #: called on the loop when standard output turns out to be unusable (``run`` drains and exits 1)
        self.on_broken: Callable[[], object] | None = None
        self._warned = False
        #: the last write failed (the reader went away): drops are counted, not reported, meanwhile
        self._failing = False

    # -- the sink (on the event loop: never blocks) ------------------------------------------------

    def __call__(self, published: Published) -> None:
        line = _encoder.encode(wire(published)) + b"\n"
        if self._priority is not None:
            line = b"<%d>" % self._priority(published) + line
        with self._lock:
            if self._closed or self._buffered + len(line) > self._max or self.broken is not None:
                self.dropped += 1
                self._unreported += 1
                return
            idle = not self._lines
            self._lines.append(line)
            self._buffered += len(line)
            if self._buffered >= self._wake_at or published.event.name in WRITTEN_AT_ONCE:
                self._lock.notify()  # (a writer awake already: nobody waits, nothing happens)
                return
            if not idle:
                return  # the writer waits only on an empty buffer: a line behind others goes with them
            loop = self._loop
            if loop is None or self._loop_thread != threading.get_ident():
                self._lock.notify()  # (no loop yet, or published from another thread)
                return
        # Woken per line, the writer took the GIL from the loop per line (a take-over publishes
        # thousands a second: 4 % of its samples were this notify, then 2 % once it was woken
        # only on an empty buffer); woken once per WAKE_AFTER_S, it takes what came meanwhile
        if not self._wake_due:
            self._wake_due = True
            loop.call_later(self._wake_after_s, self._wake_writer)

    def _wake_writer(self) -> None:
        with self._lock:
            self._wake_due = False
            if self._lines:
                self._lock.notify()

    # -- the service ---------------------------------------------------------------------------------

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Start the writer thread; publish EVENTS_DROPPED whenever it caught up after drops."""
        progress = self._start_writer()
        task_status.started()
        while True:
            await progress.wait()
            self._progress = progress = anyio.Event()
            self._report()

    def _start_writer(self) -> anyio.Event:
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._progress = progress = anyio.Event()
        self._thread = threading.Thread(target=self._write_loop, name="stdout-events", daemon=True)
        self._thread.start()
        return progress

    def _report(self) -> None:
        with self._lock:
            broken = self.broken is not None
            caught_up = not self._lines
            count = self._unreported if caught_up and not self._failing else 0
            if count:
                self._unreported = 0
        if broken:
            if self.on_broken is not None:
                self.on_broken()
            return
        if count:
            # published once the writer caught up: this notice itself has room
            self._bus.publish(EventsDropped("stdout", count, self.dropped))

    async def flush(self, within_s: float) -> None:
        """At exit: give the writer at most ``within_s`` to write what is buffered, then stop it
        (started here when the start failed before the services: what was said before is written)."""
        if self._thread is None:
            self._start_writer()
        with self._lock:
            self._lock.notify()  # what is buffered goes now, not when the wake is due
        with anyio.move_on_after(within_s):
            while True:
                with self._lock:
                    if not self._lines or self._thread is None or not self._thread.is_alive():
                        break
                await anyio.sleep(0.01)  # the writer thread's progress, bounded by within_s
        with self._lock:
            self._closed = True
            self._lock.notify()

    # -- the writer thread ---------------------------------------------------------------------------

    def _write_loop(self) -> None:
        while True:
            with self._lock:
                while not self._lines and not self._closed:
                    self._lock.wait()
                if not self._lines:
                    return
                batch = b"".join(self._lines)
                count = len(self._lines)
                self._lines.clear()
                self._buffered = 0
            problem = self._write_all(batch)
            with self._lock:
                self._failing = problem is not None
                self.batches += 1
                if problem is None:
                    self.written += count
                elif self.written == 0:
                    # nothing ever got through: standard output is unusable (/dev/full, closed)
                    self.broken = problem
                    self.dropped += count
                else:
                    self.dropped += count
                    self._unreported += count
                # the loop hears of a batch only when it has something to say (drops to report, a
                # broken output): woken after every write, it ran a task per batch for nothing
                tell = self.broken is not None or (self._unreported > 0 and not self._failing)
            if problem is not None and self.written and not self._warned:
                self._warned = True
                self._stderr(f"cannot write events to standard output ({problem}); dropping them, counted")
            if tell:
                self._notify()

    def _write_all(self, data: bytes) -> str | None:
        view = memoryview(data)
        try:
            while view:
                n = os.write(self._fd, view)
                view = view[n:]
        except OSError as exc:
            return exc.strerror or type(exc).__name__
        return None

    def _notify(self) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop is shutting down
                loop.call_soon_threadsafe(self._wake)

    def _wake(self) -> None:
        if self._progress is not None:
            self._progress.set()

    def _stderr(self, message: str) -> None:
        """One warning on stderr, as a ``LOG_RECORD`` line (with the bus's bootId, without a seq)."""
        record = LogRecorded("warning", "session-supervisor", message, timestamp=iso_utc(time.time()))
        line = _encoder.encode({"event": record.name, **record.fields(), "bootId": self._bus.boot_id})
        try:
            sys.stderr.buffer.write(self._stderr_prefix + line + b"\n")
            sys.stderr.flush()
        except (OSError, ValueError, AttributeError):
            pass
