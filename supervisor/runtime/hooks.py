"""Retry-executor hooks that publish on the event bus (the seed's telemetry names, section 2)."""

from __future__ import annotations

from machines.effects import CircuitEffect
from machines.pacing import PacerReport
from supervisor.bus import EventBus
from supervisor.clock import Clock, SystemClock
from supervisor.events import ErrorClassified, RetryAttempt, RetryExhausted, RetrySuccess
from supervisor.rest.hooks import NoHooks, OperationDetails
from supervisor.runtime.publish import publish_effects, publish_pacing
from supervisor.taxonomy import SdkErrorEvent


class BusHooks(NoHooks):
    """SDK_ERROR_CLASSIFIED, RETRY_ATTEMPT / RETRY_SUCCESS / RETRY_EXHAUSTED, circuit and pacing events.

    Also what the session runner publishes its connect endpoint's moves with (the attempt shell's
    reports: supervisor/attempts/shell.py).

    It opens no scopes (``operation``/``attempt`` stay None): the bus needs only the outcomes.
    """

    __slots__ = ("_bus", "_clock")

    def __init__(self, bus: EventBus, clock: Clock | None = None) -> None:
        self._bus = bus
        self._clock: Clock = clock if clock is not None else SystemClock()

    def classified(self, event: SdkErrorEvent) -> None:
        self._bus.publish(ErrorClassified(event))

    def retry_scheduled(self, details: OperationDetails, retry: RetryAttempt) -> None:
        self._bus.publish(retry, details.context.correlation())

    def succeeded(self, details: OperationDetails, retried: RetrySuccess | None) -> None:
        if retried is not None:
            self._bus.publish(retried, details.context.correlation())

    def gave_up(self, details: OperationDetails, exhausted: RetryExhausted | None) -> None:
        if exhausted is not None:
            self._bus.publish(exhausted, details.context.correlation())

    def circuit(self, effects: tuple[CircuitEffect, ...]) -> None:
        publish_effects(self._bus, effects)

    def pacing(self, report: PacerReport) -> None:
        publish_pacing(self._bus, report, self._clock.time())
