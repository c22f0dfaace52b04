"""Publishing machine effects that are events (transitions, the seed's telemetry) on the bus."""

from __future__ import annotations

from collections.abc import Iterable

from machines.effects import CircuitEffect, Effect
from supervisor.bus import EventBus
from supervisor.events import Correlation, Event


def publish_effects(
    bus: EventBus, effects: Iterable[Effect | CircuitEffect], correlation: Correlation | None = None
) -> None:
    """Put every effect that is also an event on the bus, with the session's correlation ids.

    Commands (ScheduleReconnect, Reconnect) are the runner's to execute, not events.
    """
    for effect in effects:
        if isinstance(effect, Event):
            bus.publish(effect, correlation)
