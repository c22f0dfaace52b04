"""Which bridge client gets which record, and the snapshot each new client starts from. Pure.

The bridge is one subscriber of the subscribe socket (docs/socket-api.md): a snapshot, then deltas,
``terminations`` events and, when some token may have it, the ``platform`` stream. It keeps a mirror
of the sessions from them (:class:`Mirror`), for two reasons:

* **scope**: a record is sent to a client only when the record's session is in the client's scope:
  its agent among the token's ``agents``, or its id among the token's ``sessions``. Snapshot rows,
  ``SESSION_TERMINATED`` events and platform records carry ``agentId``; deltas do not (the socket
  sends the columns that change: docs/socket-api.md, "delta"), so a delta's agent is the one the
  mirror learnt for the session (from the snapshot, or from an event that named it). A session whose
  agent the mirror does not know is visible only to tokens that name it;
* **snapshots**: a client that connects later starts, like a subscriber of the socket, with a snapshot
  of its sessions; the bridge builds it from the mirror, which has applied exactly the records up to
  its ``seq`` (they arrive in order on one connection), so the snapshot and the records that follow it
  are consistent.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from supervisor.bridge.tokens import Scope

__all__ = ["Mirror", "Route", "Routed"]

# the columns a delta carries besides its state change (docs/socket-api.md, "delta")
_DELTA_COLUMNS = ("platform", "attempts", "lastError", "circuit")
# what a delta says when the control socket started the session again: a new runner, nothing carried over
_STARTED = "STARTED"


class Route(enum.Enum):
    """What the bridge does with one record of the subscribe socket."""

    #: a (new) snapshot: each client gets its own, :meth:`Mirror.snapshot_for` its scope
    SNAPSHOT = "snapshot"
    #: one session's record: to the clients whose scope allows the session
    SESSION = "session"
    #: one session's platform record or gap: as SESSION, and only to tokens allowed the platform stream
    PLATFORM = "platform"
    #: the bridge fell behind the daemon: every client is told, a snapshot follows
    EVERYONE = "everyone"
    #: the daemon is stopping: every client is told, then closed
    END = "end"
    #: nothing any client may see (an event of no session)
    NOBODY = "nobody"


@dataclass(frozen=True, slots=True)
class Routed:
    route: Route
    session_id: str | None = None
    agent_id: str | None = None

    def allows(self, scope: Scope) -> bool:
        """Whether a client of ``scope`` gets this record (SESSION and PLATFORM; the others go to all)."""
        if self.route is Route.NOBODY:
            return False
        if self.route not in (Route.SESSION, Route.PLATFORM):
            return True
        if self.route is Route.PLATFORM and not scope.platform:
            return False
        assert self.session_id is not None
        return scope.allows(self.session_id, self.agent_id)


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


class Mirror:
    """The sessions as the bridge last heard of them (see the module docstring)."""

    def __init__(self) -> None:
        self.boot_id: str | None = None
        self.seq = 0
        self._rows: dict[str, dict[str, Any]] = {}

    @property
    def ready(self) -> bool:
        """Whether a snapshot has arrived (before it, a new client waits for it)."""
        return self.boot_id is not None

    def reset(self) -> None:
        """The connection to the daemon is gone: nothing is known until the next snapshot."""
        self.boot_id = None
        self.seq = 0
        self._rows.clear()

    def agent_of(self, session_id: str) -> str | None:
        row = self._rows.get(session_id)
        return None if row is None else _text(row.get("agentId"))

    def snapshot_for(self, scope: Scope) -> dict[str, Any]:
        """A snapshot of the sessions ``scope`` allows, in the socket's shape."""
        sessions = [row for sid, row in self._rows.items() if scope.allows(sid, _text(row.get("agentId")))]
        return {"type": "snapshot", "bootId": self.boot_id, "seq": self.seq, "sessions": sessions}

    def apply(self, message: dict[str, Any]) -> Routed:
        """Apply one record of the subscribe socket; where it goes."""
        kind = message.get("type")
        seq = message.get("seq")
        if isinstance(seq, int) and kind in ("delta", "event", "snapshot"):
            self.seq = max(self.seq, seq) if kind != "snapshot" else seq
        if kind == "snapshot":
            boot = message.get("bootId")
            self.boot_id = boot if isinstance(boot, str) else ""
            rows = message.get("sessions")
            self._rows = {
                row["sessionId"]: row
                for row in (rows if isinstance(rows, list) else [])
                if isinstance(row, dict) and _text(row.get("sessionId"))
            }
            return Routed(Route.SNAPSHOT)
        if kind == "lagged":
            return Routed(Route.EVERYONE)
        if kind == "end":
            return Routed(Route.END)
        session_id = _text(message.get("sessionId"))
        if session_id is None:
            return Routed(Route.NOBODY)
        if kind == "delta":
            self._apply_delta(session_id, message)
        elif kind == "event":
            self._apply_event(session_id, message)
        elif kind in ("platform", "gap"):
            self._learn(session_id, message)
            return Routed(Route.PLATFORM, session_id, self.agent_of(session_id))
        return Routed(Route.SESSION, session_id, self.agent_of(session_id))

    def _row(self, session_id: str) -> dict[str, Any]:
        row = self._rows.get(session_id)
        if row is None:
            # first heard of in a delta or an event (a session added since the snapshot): its agent is
            # unknown until a record names it
            row = self._rows[session_id] = {"sessionId": session_id, "state": "unknown", "agentId": None}
        return row

    def _learn(self, session_id: str, message: dict[str, Any]) -> None:
        """A record that names the session's agent teaches it, when the mirror does not know it yet.

        Never overwritten: a session's agent is the one the daemon's snapshot gave (a CXone platform
        record's ``agentId`` is the event's own, which may name another agent: docs/socket-api.md).
        """
        agent = _text(message.get("agentId"))
        if agent is not None and self.agent_of(session_id) is None:
            self._row(session_id)["agentId"] = agent

    def _apply_delta(self, session_id: str, delta: dict[str, Any]) -> None:
        row = self._row(session_id)
        if delta.get("reason") == _STARTED:
            # a new runner: as the daemon's board, nothing of the ended one is carried over
            row.pop("termination", None)
            row["attempts"] = 0
            row["lastError"] = None
        row["state"] = delta.get("state")
        row["since"] = delta.get("at")
        for column in _DELTA_COLUMNS:
            if column in delta:
                row[column] = delta[column]

    def _apply_event(self, session_id: str, event: dict[str, Any]) -> None:
        self._learn(session_id, event)
        if event.get("event") == "SESSION_TERMINATED":
            self._row(session_id)["termination"] = {
                "reason": event.get("reason"),
                "trigger": event.get("trigger"),
                "code": event.get("code"),
                "action": event.get("action"),
                "at": event.get("timestamp"),
            }
