"""Pipeline hooks that publish on the event bus (the seed's telemetry names, section 2)."""

from __future__ import annotations

from typing import Any

from supervisor.bus import EventBus
from supervisor.rest.pipeline import AttemptDetails
from supervisor.runtime.publish import publish_classified, publish_effects
from supervisor.taxonomy import SdkErrorEvent


def _fields(details: AttemptDetails) -> dict[str, Any]:
    out: dict[str, Any] = {
        "sessionId": details.session_id,
        "operation": details.operation,
        "attempt": details.attempt,
    }
    event = details.event
    if event is not None:
        out["code"] = event.code
        out["timestamp"] = event.timestamp
        for key in ("conversationId", "agentId"):
            value = event.context.get(key)
            if value is not None:
                out[key] = value
    return out


class BusHooks:
    """RETRY_ATTEMPT / RETRY_SUCCESS / RETRY_EXHAUSTED / SDK_ERROR_CLASSIFIED / circuit events."""

    __slots__ = ("_bus",)

    def __init__(self, bus: EventBus) -> None:
        self._bus = bus

    def classified(self, event: SdkErrorEvent) -> None:
        publish_classified(self._bus, event)

    def retry_scheduled(self, details: AttemptDetails) -> None:
        self._bus.publish(
            "RETRY_ATTEMPT",
            {
                **_fields(details),
                "kind": "operation",
                "delayS": details.delay_s,
                "fromRetryAfter": details.from_retry_after,
                "tokenRefreshed": details.token_refreshed,
            },
        )

    def succeeded(self, details: AttemptDetails) -> None:
        self._bus.publish("RETRY_SUCCESS", {**_fields(details), "kind": "operation"})

    def gave_up(self, details: AttemptDetails) -> None:
        event = details.event
        if event is not None and event.retryable and details.attempt > 0:
            self._bus.publish("RETRY_EXHAUSTED", {**_fields(details), "kind": "operation"})

    def circuit_effects(self, effects: tuple[Any, ...]) -> None:
        publish_effects(self._bus, effects)
