"""What the daemon stores per session (today in memory; the durable SQLite store comes with the outbox).

Seed section 3: on a fail-fast the daemon "revokes local session storage": the runner
deletes the session's record here (guest token, conversationId, platform session id), so
nothing can resume the old session; only a full authentication cycle starts a new one.
"""

from __future__ import annotations

from typing import Any


class SessionStore:
    """Session records by session id."""

    __slots__ = ("_records", "deleted")

    def __init__(self) -> None:
        self._records: dict[str, dict[str, Any]] = {}
        self.deleted: list[str] = []

    def put(self, session_id: str, record: dict[str, Any]) -> None:
        self._records[session_id] = dict(record)

    def get(self, session_id: str) -> dict[str, Any]:
        """A copy of the record, or an empty dict when there is none."""
        return dict(self._records.get(session_id, {}))

    def delete(self, session_id: str) -> None:
        if self._records.pop(session_id, None) is not None:
            self.deleted.append(session_id)

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._records

    def __len__(self) -> int:
        return len(self._records)
