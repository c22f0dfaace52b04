"""Publishing machine effects that are pure notifications (transitions, telemetry) on the bus."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from machines.effects import Effect, Telemetry, Transition
from supervisor.bus import EventBus
from supervisor.taxonomy import SdkErrorEvent


def publish_effects(
    bus: EventBus, effects: Iterable[Effect], correlation: dict[str, Any] | None = None
) -> None:
    """Put every Transition and Telemetry effect on the bus, with the session's correlation ids."""
    extra = correlation or {}
    for effect in effects:
        if isinstance(effect, Telemetry):
            bus.publish(effect.name.value, {**extra, **effect.fields})
        elif isinstance(effect, Transition):
            kind = "CIRCUIT_TRANSITION" if effect.machine_id.startswith("circuit:") else "SESSION_TRANSITION"
            bus.publish(
                kind,
                {
                    **extra,
                    "machineId": effect.machine_id,
                    "from": str(effect.source),
                    "to": str(effect.target),
                    "trigger": effect.event,
                    "reason": effect.reason,
                    "timestamp": effect.timestamp,
                },
            )


def publish_classified(bus: EventBus, event: SdkErrorEvent) -> None:
    bus.publish("SDK_ERROR_CLASSIFIED", event.as_json())
