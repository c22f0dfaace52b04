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
from typing import Any

from opentelemetry.sdk.trace import Event as SpanEvent
from opentelemetry.trace import Link

from supervisor.events import CircuitClosed, CircuitHalfOpened, CircuitOpened, CircuitTransition, Event
from supervisor.telemetry import attributes as A
from supervisor.telemetry.records import Period
from supervisor.telemetry.sampling import IdSource
from supervisor.telemetry.spans import ERROR, UNSET, SpanFactory, context_of
from supervisor.vocabulary import CircuitState

__all__ = ["CircuitTracker"]


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
        self.states: dict[str, CircuitState] = {}

    def ids_for(self, event: Event) -> tuple[int, int] | None:
        if isinstance(event, CircuitTransition):
            if event.target is not CircuitState.CLOSED:
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
            self._emit(ended)
        if event.target is not CircuitState.CLOSED:
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
            self._emit(period)
        self._current.clear()

    def _emit(self, period: Period) -> None:
        attrs: dict[str, Any] = {A.CIRCUIT_ID: period.circuit_id, A.CIRCUIT_STATE: period.state.value}
        events = []
        if period.enter is not None:
            source, trigger, reason = period.enter
            attrs[A.CIRCUIT_REASON] = reason
            if period.state is CircuitState.OPEN:
                # an open period is an error span: error.type says why it opened (the semantic code
                # of the trip's last failure, or PROBE_FAILED / PROBE_TIMEOUT; machines/circuit.py)
                attrs[A.ERROR_TYPE] = reason
            events.append(_transition(period.start, source, period.state, trigger, reason))
        if period.leave is not None:
            source, target, trigger, reason = period.leave
            attrs[A.CIRCUIT_NEXT] = target.value
            events.append(_transition(period.end, source, target, trigger, reason))
        opened = period.opened
        if opened is not None:
            attrs[A.CIRCUIT_FAILURES] = opened.consecutive_failures
            attrs[A.CIRCUIT_OPEN_S] = opened.open_s
            attrs[A.CIRCUIT_TRIPS] = opened.trips
        if period.probe_id:
            attrs[A.CIRCUIT_PROBE] = period.probe_id
        links = None
        if period.previous is not None:
            links = [Link(context_of(*period.previous), {A.LINK_RELATION: "previous_period"})]
        span = self._factory.span(
            f"circuit.{period.state}",
            context_of(period.trace_id, period.span_id),
            None,
            attrs,
            period.start,
            period.end,
            status=ERROR if period.state is CircuitState.OPEN else UNSET,
            events=events,
            links=links,
        )
        self._factory.emit([span])


def _transition(at: int, source: CircuitState, target: CircuitState, trigger: str, reason: str) -> SpanEvent:
    attrs = {
        A.CIRCUIT_FROM: source.value,
        A.CIRCUIT_TO: target.value,
        A.CIRCUIT_TRIGGER: trigger,
        A.CIRCUIT_REASON: reason,
    }
    return SpanEvent(A.CIRCUIT_TRANSITION, attrs, at)
