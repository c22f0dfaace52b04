"""Circuit periods from the bus: one short span per open or half-open period of an endpoint's circuit.

Why short spans and not events on one span per endpoint: a per-endpoint span would stay open
for the daemon's whole life, so it would be exported only at exit (and lost with a crash),
while an open period is bounded by ``circuit.openFor`` and a half-open one by the probe
timeout: each period's span is exported seconds after it ends. The closed state is the normal
one and has no span. The transitions that begin and end a period are events on its span, a
period links to the one before it in the same episode (open → half-open → open ...), and the
``CIRCUIT_*`` JSON lines carry the ids of the period they belong to (a move to closed, and
``CIRCUIT_BREAKER_CLOSED``, belong to the half-open period the probe ended). Always traced:
circuit transitions are rare and always worth seeing.
"""

from __future__ import annotations

import time

from supervisor.events import CircuitClosed, CircuitHalfOpened, CircuitOpened, CircuitTransition, Event
from supervisor.telemetry.records import Period
from supervisor.telemetry.sampling import IdSource
from supervisor.telemetry.spans import SpanFactory

__all__ = ["CLOSED", "CircuitTracker"]

CLOSED = "closed"


class CircuitTracker:
    """The current period of every circuit that has moved; emits each period's span when it ends."""

    def __init__(self, factory: SpanFactory, ids: IdSource) -> None:
        self._factory = factory
        self._ids = ids
        self._current: dict[str, Period] = {}
        # ids drawn for a period a log line named before the period began (the transition's line)
        self._upcoming: dict[str, tuple[int, int]] = {}
        self._last: dict[str, tuple[int, int]] = {}
        # the state of every circuit seen moving (the circuit-state gauge)
        self.states: dict[str, str] = {}

    def ids_for(self, event: Event) -> tuple[int, int] | None:
        if isinstance(event, CircuitTransition):
            if event.target != CLOSED:
                ids = self._upcoming.get(event.circuit_id)
                if ids is None:
                    ids = self._upcoming[event.circuit_id] = (self._ids.trace_id(), self._ids.span_id())
                return ids
            current = self._current.get(event.circuit_id)
            return None if current is None else (current.trace_id, current.span_id)
        if isinstance(event, CircuitClosed):
            return self._last.get(event.circuit_id)
        if isinstance(event, CircuitOpened | CircuitHalfOpened):
            current = self._current.get(event.circuit_id)
            return None if current is None else (current.trace_id, current.span_id)
        return None

    def transition(self, event: CircuitTransition) -> None:
        now = time.time_ns()
        cid = event.circuit_id
        ended = self._current.pop(cid, None)
        if ended is not None:
            ended.end = now
            ended.leave = (event.source, event.target, event.trigger, event.reason)
            self._last[cid] = (ended.trace_id, ended.span_id)
            self._factory.emit_period(ended)
        if event.target != CLOSED:
            ids = self._upcoming.pop(cid, None) or (self._ids.trace_id(), self._ids.span_id())
            period = Period(cid, event.target, ids)
            period.start = now
            period.enter = (event.source, event.trigger, event.reason)
            period.previous = None if ended is None else (ended.trace_id, ended.span_id)
            self._current[cid] = period
        self.states[cid] = event.target

    def opened(self, event: CircuitOpened) -> None:
        period = self._current.get(event.circuit_id)
        if period is not None:
            period.opened = event

    def half_opened(self, event: CircuitHalfOpened) -> None:
        period = self._current.get(event.circuit_id)
        if period is not None:
            period.probe_id = event.probe_id

    def close(self) -> None:
        """Telemetry is closing: export the periods still open (no end transition)."""
        now = time.time_ns()
        for period in self._current.values():
            period.end = now
            self._factory.emit_period(period)
        self._current.clear()
