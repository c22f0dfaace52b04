"""Refused peers, reported once per peer per interval with a count, not once per connection. Pure.

A peer the check refuses is closed without a byte; it can reconnect as fast as the kernel lets
it. Published one event per refusal, 3,000 refusals in 4 s were 3,000 lines on stdout and on every
subscriber's stream. So each socket keeps a window per peer (uid and gid):

* the first refusal of a peer with no open window is reported at once (``count`` 1) and opens a
  window of ``interval_s``;
* refusals inside the window are only counted;
* when the window has ended (checked on the next refusal of anyone, and by the socket's periodic
  flush), its count is reported if it is not 0 and a new window opens; a window that ended empty
  is closed, so the peer's next refusal is reported at once again.

Every refusal is still counted at once in the socket's ``refusedPeers`` (``Status``); only the
lines are aggregated. Time is the caller's monotonic clock (supervisor/clock.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from supervisor.api.events import Peer

__all__ = ["RefusalLog", "Report"]


@dataclass(frozen=True, slots=True)
class Report:
    """One line to publish: ``count`` refusals of ``peer`` (the last one seen) since the last report."""

    peer: Peer
    count: int


@dataclass(slots=True)
class _Window:
    until: float
    pending: int
    peer: Peer


class RefusalLog:
    """The open windows of one socket's refused peers (see the module docstring)."""

    def __init__(self, interval_s: float) -> None:
        if interval_s <= 0:
            raise ValueError("the report interval must be positive")
        self._interval = interval_s
        self._windows: dict[tuple[int, int], _Window] = {}

    def refused(self, peer: Peer, now: float) -> list[Report]:
        """Record one refusal at ``now``: what to publish (ended windows first, then this one if new)."""
        reports = self.due(now)
        key = (peer.uid, peer.gid)
        window = self._windows.get(key)
        if window is None:
            self._windows[key] = _Window(now + self._interval, 0, peer)
            reports.append(Report(peer, 1))
        else:
            window.pending += 1
            window.peer = peer
        return reports

    def due(self, now: float) -> list[Report]:
        """Reports of the windows that ended by ``now``; each with refusals pending opens a new one."""
        reports: list[Report] = []
        for key, window in list(self._windows.items()):
            if now < window.until:
                continue
            if window.pending:
                reports.append(Report(window.peer, window.pending))
                self._windows[key] = _Window(now + self._interval, 0, window.peer)
            else:
                del self._windows[key]
        return reports

    @property
    def open_windows(self) -> int:
        return len(self._windows)
