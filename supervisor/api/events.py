"""Events of the socket API, published on the bus like every other (supervisor/events.py). Pure.

Every control verb that changes something is published (``CONTROL_COMMAND``, with the peer's
uid, gid and pid, whether it succeeded, and the error name when not), so subscribers and the
journal see who changed what; a taxonomy switch is also published as ``TAXONOMY_SWITCHED``.
A refused peer and a disconnected slow subscriber are published too (the audit line of
docs/robustness.md, "Local sockets"; the counters are in the control socket's ``Status``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from supervisor.events import Event

__all__ = [
    "ControlCommand",
    "Peer",
    "PeerRefused",
    "SocketApiListening",
    "SubscriberDisconnected",
    "TaxonomySwitched",
]


@dataclass(frozen=True, slots=True)
class Peer:
    """Who is at the other end of a connection: ``SO_PEERCRED`` at connect time (unix(7))."""

    pid: int
    uid: int
    gid: int
    # supplementary groups (SO_PEERGROUPS); the primary gid alone when the kernel cannot say
    groups: tuple[int, ...] = ()

    def fields(self) -> dict[str, int]:
        return {"uid": self.uid, "gid": self.gid, "pid": self.pid}


@dataclass(frozen=True, slots=True)
class ControlCommand(Event):
    """A control verb that changes something (start, stop, drain, taxonomy.use, reload), done or refused
    (for the caller's role too: ``error`` PermissionDenied, ``required`` the role it needs)."""

    name: ClassVar[str] = "CONTROL_COMMAND"
    verb: str
    peer: Peer
    ok: bool
    timestamp: str
    session_id: str | None = None
    # the verb's argument besides a session (a taxonomy version)
    target: str | None = None
    # the typed error name when refused
    error: str | None = None
    # refused for the caller's role: the role the verb needs (supervisor/api/roles.py)
    required: str | None = None

    def fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {"timestamp": self.timestamp, "verb": self.verb, "by": self.peer.fields()}
        if self.session_id is not None:
            out["sessionId"] = self.session_id
        if self.target is not None:
            out["target"] = self.target
        out["ok"] = self.ok
        if self.error is not None:
            out["error"] = self.error
        if self.required is not None:
            out["required"] = self.required
        return out


@dataclass(frozen=True, slots=True)
class TaxonomySwitched(Event):
    """The active taxonomy changed at run time (the seed's feature-flag rollout), validated first."""

    name: ClassVar[str] = "TAXONOMY_SWITCHED"
    previous: str
    version: str
    origin: str
    peer: Peer
    timestamp: str

    def fields(self) -> dict[str, Any]:
        return {
            "timestamp": self.timestamp,
            "previous": self.previous,
            "version": self.version,
            "origin": self.origin,
            "by": self.peer.fields(),
        }


@dataclass(frozen=True, slots=True)
class PeerRefused(Event):
    """Connections closed on accept: the peer's uid and groups are not allowed on that socket.

    One per peer per interval (supervisor/api/refusals.py): ``count`` refusals of this peer since its
    last report (1 for the first); ``peer`` carries the pid of the last one.
    """

    name: ClassVar[str] = "SOCKET_PEER_REFUSED"
    socket: str
    peer: Peer
    # refusals on this socket so far, every peer
    refused: int
    timestamp: str
    count: int = 1

    def fields(self) -> dict[str, Any]:
        return {
            "timestamp": self.timestamp,
            "socket": self.socket,
            "peer": self.peer.fields(),
            "count": self.count,
            "refused": self.refused,
        }


@dataclass(frozen=True, slots=True)
class SubscriberDisconnected(Event):
    """A subscriber stayed over its byte cap longer than ``laggedDisconnectAfter`` and was cut off."""

    name: ClassVar[str] = "SUBSCRIBER_DISCONNECTED"
    peer: Peer
    reason: str
    lags: int
    timestamp: str

    def fields(self) -> dict[str, Any]:
        return {
            "timestamp": self.timestamp,
            "peer": self.peer.fields(),
            "reason": self.reason,
            "lags": self.lags,
        }


@dataclass(frozen=True, slots=True)
class SocketApiListening(Event):
    """Both sockets are bound (or the API is off, with the reason): published before readiness."""

    name: ClassVar[str] = "SOCKET_API_LISTENING"
    subscribe: str | None
    control: str | None
    off_reason: str | None = None

    def fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {"subscribe": self.subscribe, "control": self.control}
        if self.off_reason is not None:
            out["off"] = self.off_reason
        return out
