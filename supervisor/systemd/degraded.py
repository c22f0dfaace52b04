"""Degraded conditions: what a restart cannot cure, shown in ``STATUS=`` and on the bus, never fatal.

A full disk, a read-only state directory, a platform that is down: restarting the daemon cures
none of them, and a restart drops every session (docs/robustness.md, "Fault matrix", row 21:
``STATUS=`` degraded, no crash loop, no restart). So such a condition never stops the watchdog pings;
it is *raised* here by name with a one-line reason, shown in the live status line, and published
as ``DAEMON_DEGRADED``; when it clears, ``DAEMON_RECOVERED``.

Any component may hold a condition: the durable store (docs/store.md) raises ``store`` when the disk
refuses a write and clears it when a write succeeds again; the daemon itself raises
``circuit:<endpoint>`` while an endpoint's breaker is open and ``state-directory`` when
``$STATE_DIRECTORY`` is full or read-only (:mod:`supervisor.systemd.conditions`)::

    degraded.raise_condition("store", "state directory full (ENOSPC): acknowledgements refused")
    degraded.clear("store")

Raising the same condition with the same reason again publishes nothing (a store refusing every
write must not flood the bus); a new reason is published once. A reason is an operator's line:
never a secret, a token or a payload. It sits on floor 3 (beside the bus) so a component on any
floor above can hold one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from supervisor.bus import EventBus
from supervisor.clock import Clock, SystemClock, iso_utc
from supervisor.events import Event, StampedEvent

__all__ = ["DaemonDegraded", "DaemonRecovered", "Degraded"]

#: the longest reason kept (one status line must stay one readable line)
MAX_REASON = 160


class DaemonDegraded(StampedEvent, frozen=True):
    """A condition a restart cannot cure was raised (or its reason changed); the daemon goes on."""

    name: ClassVar[str] = "DAEMON_DEGRADED"
    condition: str
    reason: str


@dataclass(frozen=True, slots=True)
class DaemonRecovered(Event):
    """A degraded condition cleared after ``degraded_s`` seconds."""

    name: ClassVar[str] = "DAEMON_RECOVERED"
    condition: str
    degraded_s: float
    timestamp: str

    def fields(self) -> dict[str, Any]:
        return {
            "timestamp": self.timestamp,
            "condition": self.condition,
            "degradedS": round(self.degraded_s, 3),
        }


def _one_line(reason: str) -> str:
    text = " ".join(reason.split())
    return text if len(text) <= MAX_REASON else text[: MAX_REASON - 1] + "…"


class Degraded:
    """The daemon's degraded conditions by name (see the module docstring)."""

    def __init__(self, bus: EventBus, clock: Clock | None = None) -> None:
        self._bus = bus
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._active: dict[str, tuple[str, float]] = {}
        #: called after every change (the status line refreshes)
        self.on_change: Callable[[], object] | None = None

    def raise_condition(self, condition: str, reason: str) -> None:
        """Raise ``condition`` (or give it a new reason); published once per change."""
        reason = _one_line(reason)
        held = self._active.get(condition)
        if held is not None and held[0] == reason:
            return
        since = held[1] if held is not None else self._clock.monotonic()
        self._active[condition] = (reason, since)
        self._bus.publish(DaemonDegraded(condition, reason, timestamp=iso_utc(self._clock.time())))
        self._changed()

    def clear(self, condition: str) -> None:
        """Clear ``condition``; nothing happens when it was not raised."""
        held = self._active.pop(condition, None)
        if held is None:
            return
        lasted = self._clock.monotonic() - held[1]
        self._bus.publish(DaemonRecovered(condition, lasted, iso_utc(self._clock.time())))
        self._changed()

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    @property
    def active(self) -> Mapping[str, str]:
        """Condition -> reason, in the order they were raised."""
        return {name: reason for name, (reason, _since) in self._active.items()}

    def __bool__(self) -> bool:
        return bool(self._active)
