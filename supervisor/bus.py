"""The in-process event bus: every transition and telemetry event is published here once.

Sinks today: structured JSON lines on stdout (journald-friendly) and in-memory
counters for the demo and tests. The socket API and OpenTelemetry attach here later
(design.md, Roadmap) without touching business code. Publishing never blocks and never
raises into the publisher: a failing sink is counted and skipped.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable
from typing import IO, Any

import msgspec

Sink = Callable[[str, dict[str, Any]], None]

_encoder = msgspec.json.Encoder()


class EventBus:
    """Synchronous fan-out of ``(name, payload)`` events to sinks."""

    __slots__ = ("_sinks", "counts", "sink_failures")

    def __init__(self) -> None:
        self._sinks: list[Sink] = []
        self.counts: Counter[str] = Counter()
        self.sink_failures = 0

    def subscribe(self, sink: Sink) -> Callable[[], None]:
        self._sinks.append(sink)

        def unsubscribe() -> None:
            if sink in self._sinks:
                self._sinks.remove(sink)

        return unsubscribe

    def publish(self, name: str, payload: dict[str, Any]) -> None:
        self.counts[name] += 1
        for sink in tuple(self._sinks):
            try:
                sink(name, payload)
            except Exception:  # a sink must never break the publisher
                self.sink_failures += 1


class JsonLineSink:
    """One JSON object per line: ``{"event": NAME, ...payload}``; flushed per line for journald."""

    __slots__ = ("_names", "_stream")

    def __init__(self, stream: IO[str] | None = None, names: frozenset[str] | None = None) -> None:
        self._stream = stream if stream is not None else sys.stdout
        self._names = names

    def __call__(self, name: str, payload: dict[str, Any]) -> None:
        if self._names is not None and name not in self._names:
            return
        record = payload if payload.get("event") == name else {"event": name, **payload}
        self._stream.write(_encoder.encode(record).decode() + "\n")
        self._stream.flush()
