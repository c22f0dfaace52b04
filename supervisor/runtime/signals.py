"""The process's signals, recorded from its first line until it exits.

Python's default actions do not suit a daemon at any moment: SIGTERM and SIGHUP kill the process
(exit 143, 129) and SIGINT raises ``KeyboardInterrupt`` wherever the main thread happens to be (a
traceback from inside an import). asyncio's own handlers (``loop.add_signal_handler``) exist only
while a receiver is open, and closing one puts the default action back: a signal in the last
moments of a drain killed the daemon with 143.

So the entry point (``supervisor/__main__.py``) installs :data:`PROCESS`'s handlers before it imports
anything else, and they stay installed until the process exits:

* a handler only **records** the signal (and wakes the event loop when one listens): it never
  raises, never exits;
* a command that is not a daemon (``classify``, ``watch``, ``ctl``, ``run --check``, ...) hands the
  default actions back (:meth:`SignalRecord.release`); a signal recorded before that takes its
  default effect then (SIGINT: ``KeyboardInterrupt``, which the CLI turns into exit 130 without a
  traceback);
* ``run``, ``demo``, ``sim`` and ``bridge`` take the recorded signals over with :func:`receiving`: an async
  iterator on the event loop that yields them oldest first, those recorded before the loop existed
  included;
* at the very end (:meth:`SignalRecord.seal`) they are ignored: the exit code is decided, and the
  interpreter's finalization would otherwise put the default actions back before the process is gone.

Why a wake-up descriptor (``signal.set_wakeup_fd``) besides the handler: a handler written in Python
runs only when the main thread runs Python code. A signal the kernel delivers to another thread (the
stdout writer, an exporter's worker) leaves the main thread asleep in its selector; the C-level
handler writes the signal's number to the wake-up descriptor, the loop wakes, and the recorded
handler runs (asyncio's ``add_signal_handler`` relies on the same mechanism).

Only the standard library at import time: the entry point imports this module before anything else.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections import deque
from types import FrameType

# not ``typing.TYPE_CHECKING``: importing ``typing`` costs milliseconds before the handlers exist
# (mypy treats any name TYPE_CHECKING so)
TYPE_CHECKING = False
if TYPE_CHECKING:
    import socket
    from collections.abc import Callable, Iterable, Iterator

    _Handler = Callable[[int, FrameType | None], object] | int | signal.Handlers | None

__all__ = ["HANDLED", "PROCESS", "STOPS", "SignalReceiver", "SignalRecord", "receiving"]

#: the signals a daemon of ours handles: stop (SIGTERM, SIGINT) and reload (SIGHUP)
HANDLED: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
#: the signals that stop the daemon (a drain); SIGHUP reloads
STOPS: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGINT)


class SignalRecord:
    """Handlers that record SIGTERM, SIGINT and SIGHUP; the signals recorded and not yet taken."""

    def __init__(self) -> None:
        self._pending: deque[signal.Signals] = deque()
        self._previous: dict[signal.Signals, _Handler] = {}
        self._wake_fd = -1
        self.installed = False

    def install(self) -> SignalRecord:
        """Record the signals from now on (idempotent). Main thread only, as ``signal.signal``."""
        if not self.installed:
            for sig in HANDLED:
                self._previous[sig] = signal.signal(sig, self._record)
            self.installed = True
        return self

    def _record(self, signum: int, frame: FrameType | None) -> None:
        self._pending.append(signal.Signals(signum))
        if self._wake_fd >= 0:
            # a full socket buffer already holds a wake-up
            with contextlib.suppress(OSError):
                os.write(self._wake_fd, b"\0")

    def wake_on(self, fd: int) -> None:
        """Write a byte to ``fd`` after each signal recorded from now on (-1: stop)."""
        self._wake_fd = fd

    # -- what was recorded ------------------------------------------------------------------------------
    def pending(self) -> tuple[signal.Signals, ...]:
        return tuple(self._pending)

    def stop_pending(self, stops: Iterable[signal.Signals] = STOPS) -> signal.Signals | None:
        """The oldest stop signal recorded and not taken, left in place."""
        wanted = tuple(stops)
        return next((sig for sig in self._pending if sig in wanted), None)

    def take_stop(self, stops: Iterable[signal.Signals] = STOPS) -> signal.Signals | None:
        """The oldest stop signal recorded and not taken, taken (the signals around it stay)."""
        sig = self.stop_pending(stops)
        if sig is not None:
            self._pending.remove(sig)
        return sig

    def take(self) -> signal.Signals | None:
        """The oldest signal recorded and not taken. SIGHUPs recorded in a row are taken as one: a
        reload reads the files as they are when it runs, so one reload serves them all."""
        if not self._pending:
            return None
        sig = self._pending.popleft()
        if sig == signal.SIGHUP:
            while self._pending and self._pending[0] == signal.SIGHUP:
                self._pending.popleft()
        return sig

    # -- the end of the record ----------------------------------------------------------------------------
    def release(self, *, redeliver: bool = True) -> None:
        """Put the handlers found at :meth:`install` back (a command that is not a daemon).

        With ``redeliver``, the oldest signal recorded and not taken is raised again, so it has the
        effect it would have had without us: SIGTERM and SIGHUP their default action, SIGINT a
        ``KeyboardInterrupt`` (the CLI's exit 130), an ignored one nothing.
        """
        if not self.installed:
            return
        for sig, previous in self._previous.items():
            # None: a handler installed outside Python, which cannot be put back; the default then
            signal.signal(sig, signal.SIG_DFL if previous is None else previous)
        self.installed = False
        first = self._pending[0] if self._pending else None
        self._pending.clear()
        if redeliver and first is not None:
            signal.raise_signal(first)

    def seal(self) -> None:
        """Ignore the signals from now on: the process is exiting with the code it decided.

        The interpreter's finalization resets Python-level handlers to the default actions before
        the process is gone; an ignored signal stays ignored (SIG_IGN is not a Python handler).
        """
        if self.installed:
            for sig in HANDLED:
                signal.signal(sig, signal.SIG_IGN)


#: the process's record: the entry point installs it first thing (supervisor/__main__.py)
PROCESS = SignalRecord()


class SignalReceiver:
    """The recorded signals on the event loop, oldest first (``async for sig in receiver``)."""

    def __init__(self, record: SignalRecord, wake: socket.socket) -> None:
        self.record = record
        self._wake = wake
        #: the first stop signal taken through this receiver (what a "stopped by" line names)
        self.stopped_by: signal.Signals | None = None

    def stop_pending(self, stops: Iterable[signal.Signals] = STOPS) -> signal.Signals | None:
        return self.record.stop_pending(stops)

    def take_stop(self, stops: Iterable[signal.Signals] = STOPS) -> signal.Signals | None:
        return self._taken(self.record.take_stop(stops), tuple(stops))

    def _taken(
        self, sig: signal.Signals | None, stops: tuple[signal.Signals, ...] = STOPS
    ) -> signal.Signals | None:
        if sig is not None and sig in stops and self.stopped_by is None:
            self.stopped_by = sig
        return sig

    def __aiter__(self) -> SignalReceiver:
        return self

    async def __anext__(self) -> signal.Signals:
        import anyio  # already loaded by the running loop; not at this module's import

        while True:
            sig = self._taken(self.record.take())
            if sig is not None:
                return sig
            # every signal recorded from here on writes to the wake-up pair after it is recorded
            await anyio.wait_readable(self._wake)
            with contextlib.suppress(OSError):
                while self._wake.recv(4096):
                    pass


@contextlib.contextmanager
def receiving(record: SignalRecord | None = None) -> Iterator[SignalReceiver]:
    """Take the recorded signals over on the running event loop (main thread) for the block's duration.

    ``record`` defaults to :data:`PROCESS`. When nothing installed it (the daemon run in-process,
    by a test), a record of the block's own is installed and its handlers are put back at the end,
    as asyncio's receiver would; the process's record stays installed after the block.
    """
    import socket  # here, not at import: the entry point imports this module before anything else

    if record is None:
        record = PROCESS if PROCESS.installed else SignalRecord()
    owned = not record.installed
    record.install()
    reader, writer = socket.socketpair()
    reader.setblocking(False)
    writer.setblocking(False)
    previous = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    record.wake_on(writer.fileno())
    try:
        yield SignalReceiver(record, reader)
    finally:
        record.wake_on(-1)
        signal.set_wakeup_fd(previous)
        reader.close()
        writer.close()
        if owned:
            record.release(redeliver=False)
