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

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

from supervisor.taxonomy.model import SdkErrorEvent, Trigger

__all__ = [
    "REVOKE_AND_REAUTHENTICATE",
    "CircuitClosed",
    "CircuitEvent",
    "CircuitHalfOpened",
    "CircuitOpened",
    "CircuitTransition",
    "Correlation",
    "DaemonForcedExit",
    "DaemonStarted",
    "DaemonStopped",
    "DaemonStopping",
    "ErrorClassified",
    "Event",
    "EventsDropped",
    "PacingChanged",
    "Published",
    "ReconnectionThrottled",
    "RetryAttempt",
    "RetryExhausted",
    "RetryKind",
    "RetrySuccess",
    "SessionTerminated",
    "SessionTransition",
    "TerminationReason",
    "TraceIds",
    "wire",
]

# seed section 3: the one action a SESSION_TERMINATED event carries
REVOKE_AND_REAUTHENTICATE: Final = "REVOKE_LOCAL_STORAGE_AND_REAUTHENTICATE"


class TerminationReason(enum.StrEnum):
    """Why a session ended; every termination carries exactly one."""

    # seed section 3: one of the fail-fast triggers fired (the trigger says which)
    FAIL_FAST_TRIGGER = "FAIL_FAST_TRIGGER"
    # a STATE_CORRUPTING failure without a named trigger (e.g. a session id mismatch)
    STATE_CORRUPTING = "STATE_CORRUPTING"
    # a PERMANENT failure scoped to the session (design.md, "Scope")
    PERMANENT_SESSION_ERROR = "PERMANENT_SESSION_ERROR"
    # the reconnection budget of the class policy is spent (seed section 2, RETRY_EXHAUSTED)
    RETRY_EXHAUSTED = "RETRY_EXHAUSTED"
    # WebSocket close 1000 (seed section 2: graceful closes are not reconnected)
    GRACEFUL_CLOSE = "GRACEFUL_CLOSE"
    # an explicit stop command or daemon shutdown
    STOPPED = "STOPPED"


class RetryKind(enum.StrEnum):
    """What is retried: a session's connection, or one operation (a REST call, a socket request)."""

    RECONNECT = "reconnect"
    OPERATION = "operation"


@dataclass(frozen=True, slots=True)
class Correlation:
    """The ids that tie an event to a session (seed section 2: "correlate ... with conversation
    IDs and agent IDs"). Built in one place, :meth:`supervisor.boundary.SessionContext.correlation`.
    """

    session_id: str
    agent_id: str | None = None
    conversation_id: str | None = None
    platform_session_id: str | None = None

    def fields(self) -> dict[str, str]:
        out = {"sessionId": self.session_id}
        if self.agent_id is not None:
            out["agentId"] = self.agent_id
        if self.conversation_id is not None:
            out["conversationId"] = self.conversation_id
        if self.platform_session_id is not None:
            out["platformSessionId"] = self.platform_session_id
        return out


class Event:
    """Base of every published event: a wire ``name`` and the wire ``fields()``."""

    __slots__ = ()
    name: ClassVar[str]

    def fields(self) -> dict[str, Any]:
        raise NotImplementedError


# -- machines: transitions ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SessionTransition(Event):
    """A session machine moved (connecting → active, active → reconnecting, ...)."""

    name: ClassVar[str] = "SESSION_TRANSITION"
    session_id: str
    source: str
    target: str
    # the machine event that moved it (e.g. "connection_lost")
    trigger: str
    # why, in the caller's words: a semantic code, a termination reason, "VALIDATED", ...
    reason: str
    timestamp: str

    def fields(self) -> dict[str, Any]:
        return {
            "machineId": self.session_id,
            "from": self.source,
            "to": self.target,
            "trigger": self.trigger,
            "reason": self.reason,
            "timestamp": self.timestamp,
        }


@dataclass(frozen=True, slots=True)
class CircuitTransition(Event):
    """An endpoint's circuit moved (closed → open → half_open → closed)."""

    name: ClassVar[str] = "CIRCUIT_TRANSITION"
    circuit_id: str
    source: str
    target: str
    trigger: str
    reason: str
    timestamp: str

    def fields(self) -> dict[str, Any]:
        return {
            "machineId": self.circuit_id,
            "from": self.source,
            "to": self.target,
            "trigger": self.trigger,
            "reason": self.reason,
            "timestamp": self.timestamp,
        }


# -- the seed's telemetry (section 2) -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RetryAttempt(Event):
    """A reconnection or an operation retry is scheduled ``delay_s`` from now."""

    name: ClassVar[str] = "RETRY_ATTEMPT"
    session_id: str
    kind: RetryKind
    # 1-based number of the retry (or reconnection) this schedules
    attempt: int
    delay_s: float
    code: str
    policy: str
    timestamp: str
    operation: str | None = None
    # the server's Retry-After set the delay (seed edge case 2: a minimum delay)
    from_retry_after: bool = False
    # a 401 on a token expired by our clock: replayed at once with a fresh token (seed edge case 3)
    token_refreshed: bool = False
    # the retry scheduled before this one came due while the endpoint's retry budget was spent:
    # not sent, one of the policy's retries all the same (issue 15; supervisor/rest/steps.py)
    budget_refused: bool = False

    def fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "timestamp": self.timestamp,
            "sessionId": self.session_id,
            "kind": self.kind.value,
            "attempt": self.attempt,
            "delayS": self.delay_s,
            "code": self.code,
            "policy": self.policy,
        }
        if self.kind is RetryKind.OPERATION:
            out["operation"] = self.operation
            out["fromRetryAfter"] = self.from_retry_after
            out["tokenRefreshed"] = self.token_refreshed
            out["budgetRefused"] = self.budget_refused
        return out


@dataclass(frozen=True, slots=True)
class RetrySuccess(Event):
    """A reconnection or a retried operation succeeded after ``attempts`` retries."""

    name: ClassVar[str] = "RETRY_SUCCESS"
    session_id: str
    kind: RetryKind
    attempts: int
    timestamp: str
    operation: str | None = None

    def fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "timestamp": self.timestamp,
            "sessionId": self.session_id,
            "kind": self.kind.value,
            "attempts": self.attempts,
        }
        if self.operation is not None:
            out["operation"] = self.operation
        return out


@dataclass(frozen=True, slots=True)
class RetryExhausted(Event):
    """A budget ran out: ``give_up`` says which limit (the retry policy's GiveUpReason)."""

    name: ClassVar[str] = "RETRY_EXHAUSTED"
    session_id: str
    kind: RetryKind
    attempts: int
    code: str
    policy: str
    give_up: str | None
    timestamp: str
    operation: str | None = None

    def fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "timestamp": self.timestamp,
            "sessionId": self.session_id,
            "kind": self.kind.value,
            "attempts": self.attempts,
            "code": self.code,
            "policy": self.policy,
            "giveUp": self.give_up,
        }
        if self.operation is not None:
            out["operation"] = self.operation
        return out


@dataclass(frozen=True, slots=True)
class ReconnectionThrottled(Event):
    """Seed edge case 1: a due reconnection was deferred because its endpoint's circuit is open."""

    name: ClassVar[str] = "RECONNECTION_THROTTLED"
    session_id: str
    attempt: int
    retry_in_s: float
    delay_s: float
    timestamp: str

    def fields(self) -> dict[str, Any]:
        return {
            "timestamp": self.timestamp,
            "sessionId": self.session_id,
            "attempt": self.attempt,
            "retryInS": self.retry_in_s,
            "delayS": self.delay_s,
        }


@dataclass(frozen=True, slots=True)
class CircuitOpened(Event):
    """Seed section 2: CIRCUIT_BREAKER_OPEN (a trip, or a failed or timed-out probe)."""

    name: ClassVar[str] = "CIRCUIT_BREAKER_OPEN"
    circuit_id: str
    reason: str
    consecutive_failures: int
    open_s: float
    trips: int
    timestamp: str

    def fields(self) -> dict[str, Any]:
        return {
            "timestamp": self.timestamp,
            "circuitId": self.circuit_id,
            "reason": self.reason,
            "consecutiveFailures": self.consecutive_failures,
            "openS": self.open_s,
            "trips": self.trips,
        }


@dataclass(frozen=True, slots=True)
class CircuitHalfOpened(Event):
    """The open period passed: one probe (``probe_id``) is let through."""

    name: ClassVar[str] = "CIRCUIT_BREAKER_HALF_OPEN"
    circuit_id: str
    probe_id: int
    timestamp: str

    def fields(self) -> dict[str, Any]:
        return {"timestamp": self.timestamp, "circuitId": self.circuit_id, "probeId": self.probe_id}


@dataclass(frozen=True, slots=True)
class CircuitClosed(Event):
    """The probe succeeded: the endpoint is healthy again."""

    name: ClassVar[str] = "CIRCUIT_BREAKER_CLOSED"
    circuit_id: str
    probe_id: int
    timestamp: str

    def fields(self) -> dict[str, Any]:
        return {"timestamp": self.timestamp, "circuitId": self.circuit_id, "probeId": self.probe_id}


CircuitEvent = CircuitTransition | CircuitOpened | CircuitHalfOpened | CircuitClosed


@dataclass(frozen=True, slots=True)
class SessionTerminated(Event):
    """End the session: revoke what we stored for it, tell subscribers, never reconnect.

    Both a machine effect (the runtime executes it) and an event; :meth:`as_json` is exactly
    the seed's SESSION_TERMINATED JSON (section 3).
    """

    name: ClassVar[str] = "SESSION_TERMINATED"
    session_id: str
    reason: TerminationReason
    trigger: Trigger | None
    raw_status: int | None
    raw_code: str | None
    timestamp: str
    # the semantic code of the failure that ended it (None for STOPPED)
    code: str | None = None
    # the taxonomy says this failure condemns the shared credential's token (a CodeSpec flag)
    revokes_credential: bool = False
    action: str = REVOKE_AND_REAUTHENTICATE

    def as_json(self) -> dict[str, Any]:
        return {
            "event": "SESSION_TERMINATED",
            "reason": self.reason.value,
            "trigger": None if self.trigger is None else self.trigger.value,
            "rawStatus": self.raw_status,
            "rawCode": self.raw_code,
            "timestamp": self.timestamp,
            "action": self.action,
        }

    def fields(self) -> dict[str, Any]:
        out = self.as_json()
        out["sessionId"] = self.session_id
        if self.code is not None:
            out["code"] = self.code
        return out


# -- runtime --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ErrorClassified(Event):
    """Seed section 1: SDK_ERROR_CLASSIFIED, the classified failure itself."""

    name: ClassVar[str] = "SDK_ERROR_CLASSIFIED"
    event: SdkErrorEvent

    def fields(self) -> dict[str, Any]:
        return self.event.as_json()


@dataclass(frozen=True, slots=True)
class DaemonStarted(Event):
    """Every service is started and every configured session handed to the supervisor."""

    name: ClassVar[str] = "DAEMON_STARTED"
    sessions: int
    config: str

    def fields(self) -> dict[str, Any]:
        return {"sessions": self.sessions, "config": self.config}


@dataclass(frozen=True, slots=True)
class DaemonStopping(Event):
    """A stop signal arrived: intake stops and the drain begins (at most ``grace_s``)."""

    name: ClassVar[str] = "DAEMON_STOPPING"
    grace_s: float

    def fields(self) -> dict[str, Any]:
        return {"graceS": self.grace_s}


@dataclass(frozen=True, slots=True)
class DaemonStopped(Event):
    """The drain completed; ``snapshot`` is the supervisor's last state summary."""

    name: ClassVar[str] = "DAEMON_STOPPED"
    snapshot: Mapping[str, Any] = field(default_factory=dict)

    def fields(self) -> dict[str, Any]:
        return dict(self.snapshot)


@dataclass(frozen=True, slots=True)
class DaemonForcedExit(Event):
    """A second signal cut the drain short."""

    name: ClassVar[str] = "DAEMON_FORCED_EXIT"
    snapshot: Mapping[str, Any] = field(default_factory=dict)

    def fields(self) -> dict[str, Any]:
        return dict(self.snapshot)


@dataclass(frozen=True, slots=True)
class PacingChanged(Event):
    """Beyond the seed (issue 15): an endpoint's adaptive pacing changed its rate, or paused it.

    ``reason`` is ``throttled`` (the platform refused for rate: the rate was cut), ``probe``
    (the rate grew; reported each time it doubles), ``pause`` (a further Retry-After lengthened
    the endpoint's pause) or ``restart`` (the platform dropped a connection while the endpoint
    was quiet: the rate starts again from the initial rate). ``pausedForS`` is the window nobody
    attempts in (a Retry-After applies to the whole endpoint); ``kind`` says what is paced:
    ``connect`` or ``rest``.
    """

    name: ClassVar[str] = "PACING_CHANGED"
    endpoint: str
    kind: str
    rate: float | None
    previous: float | None
    reason: str
    paused_for_s: float
    timestamp: str

    def fields(self) -> dict[str, Any]:
        return {
            "timestamp": self.timestamp,
            "endpoint": self.endpoint,
            "kind": self.kind,
            "rate": None if self.rate is None else round(self.rate, 3),
            "previous": None if self.previous is None else round(self.previous, 3),
            "reason": self.reason,
            "pausedForS": self.paused_for_s,
        }


@dataclass(frozen=True, slots=True)
class EventsDropped(Event):
    """A sink could not keep up (stdout nobody reads): ``dropped`` lines were lost since the last notice."""

    name: ClassVar[str] = "EVENTS_DROPPED"
    sink: str
    dropped: int
    total: int

    def fields(self) -> dict[str, Any]:
        return {"sink": self.sink, "dropped": self.dropped, "totalDropped": self.total}


# -- what the bus hands its sinks ------------------------------------------------------------------


# (trace id, span id) as lowercase hex (32 and 16 digits): the span an event line belongs to
TraceIds = tuple[str, str]


@dataclass(frozen=True, slots=True)
class Published:
    """One event as published: stamped by the bus with ``seq`` (strictly rising) and ``boot_id``.

    ``trace_id``/``span_id`` name the OpenTelemetry span the event belongs to, when telemetry
    is on and the span is (or will be) exported, so a log line leads to its trace.
    """

    seq: int
    boot_id: str
    event: Event
    correlation: Correlation | None = None
    trace_id: str | None = None
    span_id: str | None = None

    @property
    def name(self) -> str:
        return self.event.name


def wire(published: Published) -> dict[str, Any]:
    """The wire form: ``{"event": NAME, ...correlation, ...fields, ["traceId", "spanId",] "seq", "bootId"}``."""
    out: dict[str, Any] = {"event": published.event.name}
    if published.correlation is not None:
        out.update(published.correlation.fields())
    out.update(published.event.fields())
    if published.trace_id is not None and published.span_id is not None:
        out["traceId"] = published.trace_id
        out["spanId"] = published.span_id
    out["seq"] = published.seq
    out["bootId"] = published.boot_id
    return out
