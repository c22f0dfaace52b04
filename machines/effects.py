"""Effects: what a machine asks its caller to do, as plain immutable data.

The machines never act. Each input returns a list of these; the runtime executes them
(wait then reconnect, revoke storage, publish on the bus, log, count). Keeping them as
data is what lets the decision core be tested on a fake clock with no I/O at all
(design.md, "Data flows one way").

Times: ``at`` fields are *monotonic* seconds of the injected clock (deadlines), and
``timestamp`` fields are its wall time rendered ISO-8601 UTC with milliseconds and ``Z``,
the seed's format (``"2024-05-14T09:45:22.118Z"``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from supervisor.errors import SupervisorError
from supervisor.taxonomy.model import SdkErrorEvent, Trigger

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


class TelemetryName(enum.StrEnum):
    """Telemetry event names: the seed's four (section 2) plus ours."""

    RETRY_ATTEMPT = "RETRY_ATTEMPT"
    RETRY_SUCCESS = "RETRY_SUCCESS"
    RETRY_EXHAUSTED = "RETRY_EXHAUSTED"
    CIRCUIT_BREAKER_OPEN = "CIRCUIT_BREAKER_OPEN"
    CIRCUIT_BREAKER_HALF_OPEN = "CIRCUIT_BREAKER_HALF_OPEN"
    CIRCUIT_BREAKER_CLOSED = "CIRCUIT_BREAKER_CLOSED"
    # seed edge case 1: "Emit RECONNECTION_THROTTLED telemetry to monitor storm severity"
    RECONNECTION_THROTTLED = "RECONNECTION_THROTTLED"
    SESSION_TERMINATED = "SESSION_TERMINATED"


class MachineError(SupervisorError):
    """A machine was misused."""


class InputRejected(MachineError):
    """An input the machine's current state does not accept (strict machines never ignore one).

    Raised, for example, for any input fed to a terminated session, or a second
    ``reconnect_due`` while the first attempt is still connecting.
    """

    def __init__(self, machine_id: str, state: str, input_name: str) -> None:
        self.machine_id = machine_id
        self.state = state
        self.input_name = input_name
        super().__init__(f"{machine_id}: {input_name!r} is not accepted in state {state!r}")


def iso_utc(epoch_s: float) -> str:
    """Epoch seconds as ISO-8601 UTC with milliseconds and ``Z``, rounded to the millisecond.

    Rounding (not truncation) matters: ``1715679131.004`` is stored as ``...131.0039999``.
    """
    ms = round(epoch_s * 1000.0)
    whole, frac = divmod(ms, 1000)
    return datetime.fromtimestamp(whole, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{frac:03d}Z"


@dataclass(frozen=True, slots=True)
class ScheduleReconnect:
    """Call the session's ``reconnect_due`` at monotonic time ``at``.

    ``attempt`` is the 1-based number of the reconnection this timer is for; ``first``
    marks the first one after a drop, whose delay is U(2 s, 8 s) (seed edge case 1).
    """

    session_id: str
    at: float
    attempt: int
    delay_s: float
    first: bool


@dataclass(frozen=True, slots=True)
class Reconnect:
    """Open the session's connection now (reconnection ``attempt``, 1-based)."""

    session_id: str
    attempt: int


@dataclass(frozen=True, slots=True)
class RetryOperation:
    """Retry the failed operation at monotonic time ``at``; ``attempt`` is its 1-based retry number."""

    session_id: str
    at: float
    attempt: int
    delay_s: float
    code: str
    # the server's Retry-After set the delay (seed edge case 2: a minimum delay)
    from_retry_after: bool = False


@dataclass(frozen=True, slots=True)
class OperationFailed:
    """Fail this operation (only it): PERMANENT operation-scoped, or its retry budget spent."""

    session_id: str
    event: SdkErrorEvent
    exhausted: bool = False


@dataclass(frozen=True, slots=True)
class SessionTerminated:
    """End the session: revoke what we stored for it, tell subscribers, never reconnect.

    :meth:`as_json` is exactly the seed's SESSION_TERMINATED event (section 3).
    """

    session_id: str
    reason: TerminationReason
    trigger: Trigger | None
    raw_status: int | None
    raw_code: str | None
    timestamp: str
    # the semantic code of the failure that ended it (None for STOPPED)
    code: str | None = None
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


@dataclass(frozen=True, slots=True)
class Transition:
    """Publish a state change of machine ``machine_id`` (a session or a circuit)."""

    machine_id: str
    source: str
    target: str
    # the machine event that moved it (e.g. "connection_lost")
    event: str
    # why, in the caller's words: a semantic code, a termination reason, "VALIDATED", ...
    reason: str
    timestamp: str


@dataclass(frozen=True, slots=True, eq=True)
class Telemetry:
    """One structured telemetry event; ``fields`` always has ``timestamp`` and the machine id."""

    name: TelemetryName
    fields: dict[str, Any] = field(hash=False)


Effect = (
    ScheduleReconnect
    | Reconnect
    | RetryOperation
    | OperationFailed
    | SessionTerminated
    | Transition
    | Telemetry
)
