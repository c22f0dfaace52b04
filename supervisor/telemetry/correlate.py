"""Which span a published event belongs to: the bus stamps its ids on the JSON line (``traceId``/``spanId``).

Asked by the bus once per event, before any sink sees it (supervisor/bus.py):

* a circuit event belongs to its circuit's period span (supervisor/telemetry/circuits.py);
* an event published while an operation runs in this task (a classified attempt failure, a
  scheduled retry, a retry that succeeded or ran out) belongs to that operation, or to its
  running attempt, which is traced from then on;
* a session's event belongs to its lifetime segment (supervisor/telemetry/segments.py says
  which, and only names a segment that is or will be traced);
* anything else (the daemon's own lifecycle) belongs to no span.
"""

from __future__ import annotations

from supervisor.events import (
    CircuitClosed,
    CircuitHalfOpened,
    CircuitOpened,
    CircuitTransition,
    Correlation,
    ErrorClassified,
    Event,
    TraceIds,
)
from supervisor.telemetry.circuits import CircuitTracker
from supervisor.telemetry.operations import OperationTracer
from supervisor.telemetry.records import CURRENT
from supervisor.telemetry.sampling import hex_span, hex_trace
from supervisor.telemetry.segments import SessionTracker

__all__ = ["TraceContextProvider", "session_of"]

_CIRCUIT_EVENTS = (CircuitTransition, CircuitOpened, CircuitHalfOpened, CircuitClosed)


def session_of(event: Event, correlation: Correlation | None) -> str | None:
    """The session an event is about: its correlation, or a classified failure's context."""
    if correlation is not None:
        return correlation.session_id
    if isinstance(event, ErrorClassified):
        session = event.event.context.get("sessionId")
        return session if isinstance(session, str) else None
    return None


class TraceContextProvider:
    """The bus's trace-context provider (``EventBus(trace_context=...)``)."""

    __slots__ = ("_circuits", "_operations", "_sessions")

    def __init__(
        self, operations: OperationTracer, sessions: SessionTracker, circuits: CircuitTracker
    ) -> None:
        self._operations = operations
        self._sessions = sessions
        self._circuits = circuits

    def __call__(self, event: Event, correlation: Correlation | None) -> TraceIds | None:
        ids: tuple[int, int] | None
        if isinstance(event, _CIRCUIT_EVENTS):
            ids = self._circuits.ids_for(event)
        else:
            op = CURRENT.get()
            if op is not None:
                ids = self._operations.log_ids(op)
            else:
                session = session_of(event, correlation)
                ids = None if session is None else self._sessions.ids_for(event, session)
        return None if ids is None else (hex_trace(ids[0]), hex_span(ids[1]))
