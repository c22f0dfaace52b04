"""The daemon's own events: its lifecycle (started, stopping, stopped, forced exit), a sink
that could not keep up, and a log record (a library's, or the daemon's own warning) while it serves.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from supervisor.events.base import Event, StampedEvent, WireEvent

__all__ = [
    "DaemonForcedExit",
    "DaemonStarted",
    "DaemonStopped",
    "DaemonStopping",
    "EventsDropped",
    "LogRecorded",
]


class DaemonStarted(WireEvent, frozen=True):
    """Every service is started and every configured session handed to the supervisor."""

    name: ClassVar[str] = "DAEMON_STARTED"
    sessions: int
    config: str


class DaemonStopping(WireEvent, frozen=True):
    """A stop signal arrived: intake stops and the drain begins (at most ``grace_s``)."""

    name: ClassVar[str] = "DAEMON_STOPPING"
    grace_s: float


@dataclass(frozen=True, slots=True)
class DaemonStopped(Event):
    """The drain completed; ``snapshot`` is the supervisor's last state summary."""

    name: ClassVar[str] = "DAEMON_STOPPED"
    snapshot: Mapping[str, Any] = field(default_factory=dict)

    def fields(self) -> dict[str, Any]:
        return dict(self.snapshot)


@dataclass(frozen=True, slots=True)
class DaemonForcedExit(Event):
    """A second signal cut the drain short."""

    name: ClassVar[str] = "DAEMON_FORCED_EXIT"
    snapshot: Mapping[str, Any] = field(default_factory=dict)

    def fields(self) -> dict[str, Any]:
        return dict(self.snapshot)


class EventsDropped(WireEvent, frozen=True):
    """A sink could not keep up (stdout nobody reads): ``dropped`` lines were lost since the last notice."""

    name: ClassVar[str] = "EVENTS_DROPPED"
    sink: str
    dropped: int
    total_dropped: int


class LogRecorded(StampedEvent, frozen=True):
    """A :mod:`logging` record of a library (the OpenTelemetry exporter's retries, asyncio's
    unhandled errors, a Python warning) or a warning of the daemon itself, while ``run`` serves: one
    event line like every other, where it used to be a text line on stderr (docs/systemd.md, "The journal").
    ``level`` is the record's, lowercase (``warning``, ``error``, ``critical``); ``exception`` the
    exception's type and message when the record carries one (never its traceback)."""

    name: ClassVar[str] = "LOG_RECORD"
    level: str
    logger: str
    message: str
    exception: str | None = None
