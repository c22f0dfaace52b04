"""An endpoint's events: its circuit's transitions (seed section 2, CIRCUIT_BREAKER_*), an operator's
hand on it (CIRCUIT_MANUAL) and its adaptive pacing (PACING_CHANGED; docs/runtime.md, "Admission").
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, ClassVar

from supervisor.events.base import Event, StampedEvent
from supervisor.vocabulary.endpoints import EndpointId
from supervisor.vocabulary.states import CircuitState

__all__ = [
    "CircuitClosed",
    "CircuitEvent",
    "CircuitHalfOpened",
    "CircuitManual",
    "CircuitOpened",
    "CircuitTransition",
    "ManualAction",
    "PacingChanged",
]


@dataclass(frozen=True, slots=True)
class CircuitTransition(Event):
    """An endpoint's circuit moved (closed → open → half_open → closed)."""

    name: ClassVar[str] = "CIRCUIT_TRANSITION"
    circuit_id: str
    source: CircuitState
    target: CircuitState
    trigger: str
    reason: str
    timestamp: str

    def fields(self) -> dict[str, Any]:
        return {
            "machineId": self.circuit_id,
            "from": self.source.value,
            "to": self.target.value,
            "trigger": self.trigger,
            "reason": self.reason,
            "timestamp": self.timestamp,
        }


class CircuitOpened(StampedEvent, frozen=True):
    """Seed section 2: CIRCUIT_BREAKER_OPEN (a trip, or a failed or timed-out probe)."""

    name: ClassVar[str] = "CIRCUIT_BREAKER_OPEN"
    circuit_id: str
    reason: str
    consecutive_failures: int
    open_s: float
    trips: int


class CircuitHalfOpened(StampedEvent, frozen=True):
    """The open period passed: one probe (``probe_id``) is let through."""

    name: ClassVar[str] = "CIRCUIT_BREAKER_HALF_OPEN"
    circuit_id: str
    probe_id: int


class CircuitClosed(StampedEvent, frozen=True):
    """The probe succeeded: the endpoint is healthy again."""

    name: ClassVar[str] = "CIRCUIT_BREAKER_CLOSED"
    circuit_id: str
    probe_id: int


class ManualAction(enum.StrEnum):
    """What moved a circuit by hand (``ctl circuit``), or ended what a hand had set."""

    # isolated for a maintenance window (Polly's Isolate(), Resilience4j's FORCED_OPEN)
    ISOLATE = "isolate"
    # the isolation ended by the operator's word
    CLOSE = "close"
    # the isolation's ``--for`` ran out
    EXPIRE = "expire"
    # closed with its counters cleared (after a false trip: Polly's Reset())
    RESET = "reset"


class CircuitManual(StampedEvent, frozen=True):
    """An endpoint's circuit was isolated, closed or reset by an operator, or its isolation ran out.

    Published instead of CIRCUIT_BREAKER_OPEN: an isolation is nobody's failure. ``previous`` and
    ``state`` are the circuit's states before and after; ``forS`` and ``until`` (wall time) say when
    an isolation given ``--for`` ends by itself (absent: until closed or reset).
    """

    name: ClassVar[str] = "CIRCUIT_MANUAL"
    circuit_id: str
    action: ManualAction
    previous: CircuitState
    state: CircuitState
    for_s: float | None = None
    until: str | None = None


CircuitEvent = CircuitTransition | CircuitOpened | CircuitHalfOpened | CircuitClosed | CircuitManual


@dataclass(frozen=True, slots=True)
class PacingChanged(Event):
    """Beyond the seed (docs/runtime.md, "Admission"): an endpoint's adaptive pacing changed its rate, or paused it.

    ``reason`` is ``throttled`` (the platform refused for rate: the rate was cut), ``probe``
    (the rate grew; reported each time it doubles), ``pause`` (a further Retry-After lengthened
    the endpoint's pause) or ``restart`` (the platform dropped a connection while the endpoint
    was quiet: the rate starts again from the initial rate) or ``ratelimit`` (the platform's
    inin-ratelimit-* reading put a ceiling on the rate, lifted it, or paused the endpoint until its
    window starts again). ``pausedForS`` is the window nobody
    attempts in (a Retry-After applies to the whole endpoint); ``kind`` says what is paced:
    ``connect`` or ``rest``.
    """

    name: ClassVar[str] = "PACING_CHANGED"
    endpoint: EndpointId
    kind: str
    rate: float | None
    previous: float | None
    reason: str
    paused_for_s: float
    timestamp: str

    def fields(self) -> dict[str, Any]:
        return {
            "timestamp": self.timestamp,
            "endpoint": str(self.endpoint),
            "kind": self.kind,
            "rate": None if self.rate is None else round(self.rate, 3),
            "previous": None if self.previous is None else round(self.previous, 3),
            "reason": self.reason,
            "pausedForS": self.paused_for_s,
        }
