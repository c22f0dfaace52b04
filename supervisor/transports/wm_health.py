"""When the Web Messaging ``echo`` health check goes out. Pure: times in, times out.

GMT (genesys-messenger-transport-mobile-sdk 2.14.0, ``core/events/HealthCheckProvider.kt``) sends
an echo at most once per ``HEALTH_CHECK_COOL_DOWN_MILLISECONDS`` (30 s): a request within the
cool-down is deferred to its end. The daemon probes only a quiet link: the echo goes out once
``keepalive.echoInterval`` seconds passed without any inbound frame (any frame proves the platform
reads and writes, an error reply included), and never sooner than 30 s after the previous echo.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ECHO_COOL_DOWN_S", "EchoSchedule"]

#: GMT HealthCheckProvider.kt HEALTH_CHECK_COOL_DOWN_MILLISECONDS = 30000
ECHO_COOL_DOWN_S = 30.0


@dataclass(slots=True)
class EchoSchedule:
    """The last inbound frame and the last echo (monotonic seconds); :meth:`due` is the next echo."""

    interval: float
    last_inbound: float
    cool_down: float = ECHO_COOL_DOWN_S
    last_echo: float | None = None

    def heard(self, now: float) -> None:
        """An inbound frame arrived at ``now``."""
        self.last_inbound = max(self.last_inbound, now)

    def sent(self, now: float) -> None:
        """An echo went out at ``now``."""
        self.last_echo = now

    def due(self) -> float:
        """When the next echo may go out: ``interval`` after the last inbound frame, and not
        within ``cool_down`` of the last echo."""
        due = self.last_inbound + self.interval
        if self.last_echo is not None:
            due = max(due, self.last_echo + self.cool_down)
        return due
