"""Publishing machine effects that are events (transitions, the seed's telemetry) on the bus."""

from __future__ import annotations

from collections.abc import Iterable

from machines.effects import CircuitEffect, Effect
from machines.pacing import PacerReport
from supervisor.bus import EventBus
from supervisor.clock import iso_utc
from supervisor.events import Correlation, Event, PacingChanged


def publish_effects(
    bus: EventBus, effects: Iterable[Effect | CircuitEffect], correlation: Correlation | None = None
) -> None:
    """Put every effect that is also an event on the bus, with the session's correlation ids.

    Commands (ScheduleReconnect, Reconnect) are the runner's to execute, not events.
    """
    for effect in effects:
        if isinstance(effect, Event):
            bus.publish(effect, correlation)


def publish_pacing(bus: EventBus, report: PacerReport, now_epoch: float) -> None:
    """PACING_CHANGED: an endpoint's pacing moved (beyond the seed, docs/runtime.md, "Admission"); ``kind`` is the
    endpoint's (``connect``: handshakes and session starts; ``rest``: REST calls)."""
    stamp = iso_utc(now_epoch)
    bus.publish(
        PacingChanged(
            report.endpoint,
            report.kind,
            report.rate,
            report.previous,
            report.reason,
            report.paused_for_s,
            stamp,
        )
    )
