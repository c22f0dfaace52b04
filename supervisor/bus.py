"""The in-process event bus: every transition and telemetry event is published here once.

Publishers hand the bus a typed event (supervisor/events/) and, for a session's events, its
:class:`~supervisor.events.Correlation`. The bus stamps each with a strictly rising ``seq``
and the process's ``bootId`` (a subscriber that sees a new bootId knows the daemon restarted)
and calls every sink synchronously. Sinks render the wire form themselves, at the edge: the
JSON lines on stdout today, socket subscribers and OpenTelemetry next (docs/architecture.md, "Roadmap").
Publishing never blocks and never raises into the publisher: a failing sink is counted and
skipped. A bus given a trace-context provider (OpenTelemetry, supervisor/telemetry/) asks it,
once per event, which span the event belongs to, and stamps those ids too.
"""

from __future__ import annotations

import sys
import uuid
from collections import Counter
from collections.abc import Callable
from typing import IO

import msgspec

from supervisor.events import Correlation, Event, Published, TraceIds, wire

Sink = Callable[[Published], None]
# which span an event belongs to (None: no span); called before the sinks see the event
TraceContext = Callable[[Event, Correlation | None], TraceIds | None]

_encoder = msgspec.json.Encoder()


class EventBus:
    """Synchronous fan-out of stamped events to sinks."""

    __slots__ = ("_seq", "_sinks", "boot_id", "counts", "sink_failures", "trace_context")

    def __init__(self, boot_id: str | None = None, *, trace_context: TraceContext | None = None) -> None:
        self._sinks: tuple[Sink, ...] = ()
        self._seq = 0
        self.boot_id = boot_id if boot_id is not None else str(uuid.uuid4())
        self.counts: Counter[str] = Counter()
        self.sink_failures = 0
        self.trace_context = trace_context

    @property
    def seq(self) -> int:
        """The seq of the last event published (0 before the first)."""
        return self._seq

    def subscribe(self, sink: Sink) -> Callable[[], None]:
        self._sinks = (*self._sinks, sink)

        def unsubscribe() -> None:
            self._sinks = tuple(s for s in self._sinks if s is not sink)

        return unsubscribe

    def publish(self, event: Event, correlation: Correlation | None = None) -> Published:
        self._seq += 1
        ids = None
        if self.trace_context is not None:
            try:
                ids = self.trace_context(event, correlation)
            except Exception:  # telemetry must never break the publisher either
                self.sink_failures += 1
        if ids is None:
            published = Published(self._seq, self.boot_id, event, correlation)
        else:
            published = Published(self._seq, self.boot_id, event, correlation, ids[0], ids[1])
        self.counts[event.name] += 1
        for sink in self._sinks:
            try:
                sink(published)
            except Exception:  # a sink must never break the publisher
                self.sink_failures += 1
        return published


class JsonLineSink:
    """One JSON object per line (:func:`supervisor.events.wire`); flushed per line for journald."""

    __slots__ = ("_names", "_stream")

    def __init__(self, stream: IO[str] | None = None, names: frozenset[str] | None = None) -> None:
        self._stream = stream if stream is not None else sys.stdout
        self._names = names

    def __call__(self, published: Published) -> None:
        if self._names is not None and published.event.name not in self._names:
            return
        self._stream.write(_encoder.encode(wire(published)).decode() + "\n")
        self._stream.flush()
