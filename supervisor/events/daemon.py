"""The daemon's own events: its lifecycle (started, stopping, stopped, forced exit), a sink
that could not keep up, and what a reload did with a rotated credential.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from supervisor.events.base import Event, StampedEvent, WireEvent

__all__ = [
    "CredentialAccepted",
    "CredentialRefused",
    "DaemonForcedExit",
    "DaemonStarted",
    "DaemonStopped",
    "DaemonStopping",
    "EventsDropped",
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


class CredentialRefused(StampedEvent, frozen=True):
    """A reload found a rotated credential the platform refused (or that could not be verified):
    the credential in use stays, its tokens keep serving the sessions, and the ``credentials``
    degraded condition is raised until a good one arrives (docs/runtime.md, "Rotation").

    ``problem`` is the located one-line error (the config key, the code); never the secret.
    """

    name: ClassVar[str] = "CREDENTIAL_REFUSED"
    platform: str
    problem: str


class CredentialAccepted(StampedEvent, frozen=True):
    """The configured credential of ``platform`` is the one in use again: ``rotated`` when a
    reload swapped the token source to a new one the platform granted, false when the file was
    put back to the credential in use. Clears the ``credentials`` degraded condition."""

    name: ClassVar[str] = "CREDENTIAL_ACCEPTED"
    platform: str
    rotated: bool
