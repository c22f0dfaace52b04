"""One bridge client's pending messages: the subscribe socket's slow-subscriber rules, per WebSocket. Pure.

As on the socket (docs/socket-api.md, "Slow subscribers never slow the daemon or each other"): the
bridge's reading of the daemon only appends to each client's outbox and wakes that client's writer;
nothing on that path waits for a client. A client whose pending messages pass ``cap_bytes`` loses
them all (counted): nothing more is kept for it until its writer has handed everything to its
connection, then it gets ``{"type": "lagged", "count": N}`` and a fresh snapshot, and the records go on
from there. A client that stays over its cap for ``lagged_disconnect_after`` seconds is disconnected
(the server arms that deadline when :meth:`Outbox.push` reports the lag). Unlike the socket, the
bridge does not conflate a backlogged client's deltas: a client of a WebSocket is one agent's desktop,
a few sessions, and the cap is reached by records that all matter (terminations above all).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import msgspec

__all__ = ["Outbox"]

_encode = msgspec.json.Encoder().encode


class Outbox:
    """See the module docstring; ``now`` is the caller's clock (seconds). Messages are UTF-8 JSON, sent as
    text frames."""

    def __init__(self, cap_bytes: int) -> None:
        self.cap_bytes = cap_bytes
        self._pending: deque[bytes] = deque()
        self._bytes = 0
        # messages dropped since the client fell behind (its `lagged` count); None while it keeps up
        self._dropped: int | None = None
        self.lagged_since: float | None = None
        self.lag_count = 0

    @property
    def lagging(self) -> bool:
        return self._dropped is not None

    @property
    def pending(self) -> int:
        return len(self._pending)

    def push(self, text: bytes, size: int, now: float) -> bool:
        """Queue one message of ``size`` bytes; True when it made the client fall behind just now."""
        if self._dropped is not None:
            self._dropped += 1
            return False
        if self._bytes + size > self.cap_bytes:
            self._dropped = len(self._pending) + 1
            self._pending.clear()
            self._bytes = 0
            self.lagged_since = now
            self.lag_count += 1
            return True
        self._pending.append(text)
        self._bytes += size
        return False

    def take(self, snapshot: Callable[[], bytes]) -> list[bytes]:
        """Everything pending, oldest first; after a lag (the connection took all it was handed), the
        ``lagged`` notice and a fresh snapshot from ``snapshot``."""
        if self._dropped is not None:
            count, self._dropped = self._dropped, None
            self.lagged_since = None
            return [_encode({"type": "lagged", "count": count}), snapshot()]
        out = list(self._pending)
        self._pending.clear()
        self._bytes = 0
        return out

    def overdue(self, now: float, after: float) -> bool:
        """Whether the client has stayed behind for ``after`` seconds (then it is disconnected)."""
        return self.lagged_since is not None and now - self.lagged_since >= after
