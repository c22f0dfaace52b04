"""Typed events: everything the daemon tells its subscribers, one frozen, slotted class per kind.

The machines emit most of these as effects (a transition, a retry scheduled, a circuit that
opened); the runtime emits the rest (a classified error, a retried operation, the daemon's own
lifecycle). The bus (supervisor/bus.py) stamps each with a strictly rising ``seq`` and the
process's ``bootId``; sinks render the wire form at the edge with :func:`wire`, so the JSON
lines, the socket API and OpenTelemetry read the same objects.

Wire names are the seed's (section 2: RETRY_ATTEMPT, RETRY_SUCCESS, RETRY_EXHAUSTED,
CIRCUIT_BREAKER_OPEN; section 3: SESSION_TERMINATED; edge case 1: RECONNECTION_THROTTLED)
plus ours; docs/runtime.md lists every field. Nothing here does I/O.
"""

from __future__ import annotations

from supervisor.events.base import (
    REVOKE_AND_REAUTHENTICATE,
    Correlation,
    Event,
    Published,
    RetryKind,
    StampedEvent,
    TerminationReason,
    TraceIds,
    WireEvent,
    wire,
)
from supervisor.events.circuit import (
    CircuitClosed,
    CircuitEvent,
    CircuitHalfOpened,
    CircuitManual,
    CircuitOpened,
    CircuitTransition,
    ManualAction,
    PacingChanged,
)
from supervisor.events.daemon import (
    CredentialAccepted,
    CredentialRefused,
    DaemonForcedExit,
    DaemonStarted,
    DaemonStopped,
    DaemonStopping,
    EventsDropped,
)
from supervisor.events.session import (
    ConnectionRolledOver,
    ErrorClassified,
    ReconnectionThrottled,
    RetryAttempt,
    RetryExhausted,
    RetrySuccess,
    RolloverReason,
    SessionHandedOver,
    SessionTerminated,
    SessionTransition,
)
from supervisor.events.taxonomy import ShadowDivergence, TaxonomyCaptureFailed

__all__ = [
    "REVOKE_AND_REAUTHENTICATE",
    "CircuitClosed",
    "CircuitEvent",
    "CircuitHalfOpened",
    "CircuitManual",
    "CircuitOpened",
    "CircuitTransition",
    "ConnectionRolledOver",
    "Correlation",
    "CredentialAccepted",
    "CredentialRefused",
    "DaemonForcedExit",
    "DaemonStarted",
    "DaemonStopped",
    "DaemonStopping",
    "ErrorClassified",
    "Event",
    "EventsDropped",
    "ManualAction",
    "PacingChanged",
    "Published",
    "ReconnectionThrottled",
    "RetryAttempt",
    "RetryExhausted",
    "RetryKind",
    "RetrySuccess",
    "RolloverReason",
    "SessionHandedOver",
    "SessionTerminated",
    "SessionTransition",
    "ShadowDivergence",
    "StampedEvent",
    "TaxonomyCaptureFailed",
    "TerminationReason",
    "TraceIds",
    "WireEvent",
    "wire",
]
