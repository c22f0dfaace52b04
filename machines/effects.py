"""Effects: what a machine asks its caller to do, as plain immutable data.

The machines never act. Each input returns a list of these; the runtime executes the two
commands (:class:`ScheduleReconnect`, :class:`Reconnect`) and the termination, and publishes
every effect that is also an event (supervisor/events.py: transitions, the seed's telemetry,
SESSION_TERMINATED) on the bus. Keeping them as data is what lets the decision core be tested
on a fake clock with no I/O at all (docs/architecture.md, "Data flows one way").

Times: ``at`` fields are *monotonic* seconds of the injected clock (deadlines), and
``timestamp`` fields are its wall time rendered by :func:`supervisor.clock.iso_utc`, the
seed's format (``"2024-05-14T09:45:22.118Z"``).
"""

from __future__ import annotations

from dataclasses import dataclass

from supervisor.clock import iso_utc
from supervisor.errors import SupervisorError
from supervisor.events import (
    REVOKE_AND_REAUTHENTICATE,
    CircuitClosed,
    CircuitHalfOpened,
    CircuitManual,
    CircuitOpened,
    CircuitTransition,
    Event,
    ReconnectionThrottled,
    RetryAttempt,
    RetryExhausted,
    RetryKind,
    RetrySuccess,
    SessionHandedOver,
    SessionTerminated,
    SessionTransition,
    TerminationReason,
)
from supervisor.vocabulary.states import ChannelState, CircuitState, SessionState

__all__ = [
    "REVOKE_AND_REAUTHENTICATE",
    "CircuitClosed",
    "CircuitEffect",
    "CircuitHalfOpened",
    "CircuitManual",
    "CircuitOpened",
    "CircuitTransition",
    "Effect",
    "Event",
    "InputRejected",
    "MachineError",
    "Reconnect",
    "ReconnectionThrottled",
    "RetryAttempt",
    "RetryExhausted",
    "RetryKind",
    "RetrySuccess",
    "ScheduleReconnect",
    "SessionHandedOver",
    "SessionTerminated",
    "SessionTransition",
    "TerminationReason",
    "iso_utc",
]


class MachineError(SupervisorError):
    """A machine was misused."""


class InputRejected(MachineError):
    """An input the machine's current state does not accept (strict machines never ignore one).

    Raised, for example, for any input fed to a terminated session, or a second
    ``reconnect_due`` while the first attempt is still connecting.
    """

    def __init__(
        self, machine_id: str, state: SessionState | CircuitState | ChannelState, input_name: str
    ) -> None:
        self.machine_id = machine_id
        self.state = state
        self.input_name = input_name
        super().__init__(f"{machine_id}: {input_name!r} is not accepted in state {state!r}")


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


# what the session machine returns
Effect = (
    ScheduleReconnect
    | Reconnect
    | SessionTerminated
    | SessionHandedOver
    | SessionTransition
    | RetryAttempt
    | RetrySuccess
    | RetryExhausted
    | ReconnectionThrottled
)
# what the circuit machine returns: all of them are events
CircuitEffect = CircuitTransition | CircuitOpened | CircuitHalfOpened | CircuitClosed | CircuitManual
