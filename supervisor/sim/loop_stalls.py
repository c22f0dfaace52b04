"""The simulator's own stalls: the seconds its event loop could not handle anything.

A simulator is the judge of the daemon's pace: it stamps each connection attempt when its loop
handles it, in whole clock seconds (supervisor/sim/recorder.py), and its ``admission_limit``
fault refuses what passes the rate in such a second. While its loop stalls (a full collection
of the garbage collector over the state of thousands of sessions took 0.13 to 0.45 s every 5 to
10 s in a 7,000-session handover, measured), the kernel queues the connections sent meanwhile,
and the loop then handles them in one clump: attempts the daemon spaced evenly are stamped into
one second, and refused as a burst the daemon never sent. What a simulator says about a second
in which it stalled is about itself as much as about its client; :class:`LoopStalls` keeps those
seconds so that a benchmark can say so (``GET /stats``'s ``loop_stalls``).

The watch is one task sleeping :data:`WATCH_EVERY_S` and keeping how much later than that it
woke, when that is over :data:`STALL_S`. ``session-supervisor sim`` runs it (and tunes the
collector as ``run`` does, supervisor/runtime/collector.py); simulators created in a test's own
process do not, unless the test starts :meth:`LoopStalls.watch` (the fleet's harness does, keeping
every stall with its evidence: ``LoopStalls(keep=None)``).
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any, Final

import anyio

__all__ = ["STALL_S", "WATCH_EVERY_S", "LoopStalls"]

#: how often the watch wakes (the resolution of a stall)
WATCH_EVERY_S: Final = 0.01
#: lateness kept as a stall: a twentieth of the one-second windows the attempts are stamped in
STALL_S: Final = 0.05
#: the most recent stalls kept with their times (the totals count every one)
RECENT: Final = 256


class LoopStalls:
    """Stalls of the loop the watch runs on, over :data:`STALL_S`; the last ``keep`` with their
    times (every one when ``None``: a run that keeps them all as evidence)."""

    def __init__(self, keep: int | None = RECENT) -> None:
        self._keep = keep
        self.reset()

    def reset(self) -> None:
        self.count = 0
        self.total_s = 0.0
        self.longest_s = 0.0
        #: (epoch seconds when the stall ended, its length)
        self.recent: deque[tuple[float, float]] = deque(maxlen=self._keep)

    def record(self, ended_at: float, late_s: float) -> None:
        """A wake ``late_s`` later than asked, at ``ended_at`` (epoch seconds)."""
        if late_s <= STALL_S:
            return
        self.count += 1
        self.total_s += late_s
        self.longest_s = max(self.longest_s, late_s)
        self.recent.append((ended_at, late_s))

    async def watch(self) -> None:
        """Until cancelled: keep how late each of its sleeps woke (monotonic time, stamped in epoch)."""
        while True:
            began = time.monotonic()
            await anyio.sleep(WATCH_EVERY_S)  # measuring how late a sleep ends, not waiting for a timer
            self.record(time.time(), time.monotonic() - began - WATCH_EVERY_S)

    def snapshot(self) -> dict[str, Any]:
        """``{"watched": true, "count", "total_s", "longest_s", "recent": [[ended_at, s], ...]}``."""
        return {
            "watched": True,
            "count": self.count,
            "total_s": round(self.total_s, 3),
            "longest_s": round(self.longest_s, 3),
            "recent": [[round(t, 3), round(s, 3)] for t, s in self.recent],
        }
