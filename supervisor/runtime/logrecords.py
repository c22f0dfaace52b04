"""Log records as event lines while ``run`` serves: nothing else reaches standard output or error.

Without a handler of its own, a process's :mod:`logging` records of level WARNING and above go to
``logging.lastResort``: one text line on stderr each. The OpenTelemetry OTLP exporter logs every
failed export that way (``Transient error ... encountered while exporting span batch, retrying in
1s.``, from its batch processor's and metric reader's threads), asyncio logs a task's unhandled
exception that way, and Python warnings and uncaught exceptions in threads are printed as text on
stderr too. Under journald those lines sit between the event lines, and ``journalctl -o cat | jq``
stops at the first one.

While the daemon serves, :class:`LogRecords` is the root logger's handler: each record (WARNING and
above, the root logger's level) becomes a ``LOG_RECORD`` event on the bus, with the record's level,
logger name, message and exception (type and message, never the traceback), its text passed through
the telemetry scrubber when there is one, so it is one line like every other, stamped with ``seq``
and ``bootId``, seen by socket subscribers, and given its priority under journald
(supervisor/systemd/journal.py). Python warnings (``logging.captureWarnings``) and uncaught
exceptions in threads (``threading.excepthook``) are turned into records too. The daemon's own
warnings (a variable systemd never sends, a store that cannot be opened) are published the same way
through :meth:`LogRecords.warning`.

A record comes from any thread: it is handed to the event loop (``call_soon_threadsafe``), and a
record logged on the loop is published on its next turn, never from inside the publish that caused
it. Once the daemon stopped serving, the handler is removed and a record is a text line again.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import traceback
from collections.abc import Callable

from supervisor.bus import EventBus
from supervisor.clock import Clock, iso_utc
from supervisor.events import LogRecorded

__all__ = ["DAEMON_LOGGER", "LogRecords"]

#: the ``logger`` of the daemon's own warnings
DAEMON_LOGGER = "session-supervisor"
#: the longest message kept: a record is one readable line, not a payload
MAX_MESSAGE = 2000


class LogRecords(logging.Handler):
    """The root logger's handler while the daemon serves (see the module docstring)."""

    def __init__(self, bus: EventBus, clock: Clock, *, redact: Callable[[str], str] | None = None) -> None:
        # WARNING and above, whatever level a library gave its own logger
        super().__init__(logging.WARNING)
        self._bus = bus
        self._clock = clock
        self._redact = redact
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._thread_hook: Callable[[threading.ExceptHookArgs], object] | None = None
        #: records that arrived when no loop could take them (at the very end), counted
        self.dropped = 0

    # -- installed on the loop, for the daemon's serving life -----------------------------------

    def install(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        logging.getLogger().addHandler(self)
        logging.captureWarnings(True)
        self._thread_hook = threading.excepthook
        threading.excepthook = self._thread_failed

    def uninstall(self) -> None:
        logging.getLogger().removeHandler(self)
        logging.captureWarnings(False)
        if self._thread_hook is not None:
            threading.excepthook = self._thread_hook
            self._thread_hook = None
        self._loop = None

    # -- the daemon's own lines -----------------------------------------------------------------

    def warning(self, line: str) -> None:
        """A warning of the daemon itself (on the loop): published at once."""
        self._bus.publish(self._event("warning", DAEMON_LOGGER, line, None, self._clock.time()))

    # -- logging's side (any thread) ------------------------------------------------------------

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception:  # a record whose arguments do not fit its format: its format, as is
            message = str(record.msg)
        exception = None
        if record.exc_info is not None and record.exc_info[1] is not None:
            exception = _one_line(record.exc_info[1])
        level = record.levelname.lower()
        self._deliver(self._event(level, record.name, message, exception, record.created))

    def _thread_failed(self, args: threading.ExceptHookArgs) -> None:
        if args.exc_type is SystemExit:
            return  # threading's own default: a thread that exits says nothing
        name = args.thread.name if args.thread is not None else "a thread"
        exception = _one_line(args.exc_value) if args.exc_value is not None else args.exc_type.__name__
        event = self._event("error", "threading", f"uncaught exception in {name}", exception, None)
        self._deliver(event)

    def _event(
        self, level: str, logger: str, message: str, exception: str | None, created: float | None
    ) -> LogRecorded:
        redact = self._redact
        if redact is not None:
            message = redact(message)
            exception = None if exception is None else redact(exception)
        if len(message) > MAX_MESSAGE:
            message = message[: MAX_MESSAGE - 1] + "…"
        when = created if created is not None else self._clock.time()
        return LogRecorded(level, logger, message, exception, timestamp=iso_utc(when))

    def _deliver(self, event: LogRecorded) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            self.dropped += 1
            return
        try:
            if threading.get_ident() == self._loop_thread:
                loop.call_soon(self._bus.publish, event)
            else:
                loop.call_soon_threadsafe(self._bus.publish, event)
        except RuntimeError:  # the loop closed meanwhile
            self.dropped += 1


def _one_line(exc: BaseException) -> str:
    """``Type: message`` of an exception, on one line."""
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    return " ".join(text.split())
