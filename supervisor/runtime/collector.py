"""The garbage collector's thresholds for a process that holds thousands of sessions.

CPython's defaults, ``(700, 10, 10)``, run a young collection every 700 net allocations and a
full one whenever the long-lived objects have grown by a quarter. A daemon holding 5,000 sessions
has over a million long-lived objects (machines, connections, buffers), and a reconnection storm
allocates a new connection per session: in the storm benchmark at 5,000 sessions and 500
handshakes a second, full collections of 0.2-1.0 s came every second or two, took about half of
the daemon's CPU, and each one stalled every session (the pacer then spaces the attempts that fell
due during the stall instead of bursting them, so the time is lost, not made up). With
:data:`THRESHOLDS` the same storm ran without a full collection: CPU 15 to 7 s, recovery 21.5-24.7
to 19.1-19.6 s (docs/benchmarks.md, "Admission at a binding limit").

Reference cycles are still collected, just in larger batches: a young collection every 50,000
net allocations, a middle one every 20 young ones, a full one after 100 middle ones (and then
only when CPython's own quarter-growth rule agrees). The
process owner sets it (``run`` and ``demo``; the benchmarks, as the daemon's process would), not
the library: a program that embeds the runtime keeps its own collector settings.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from typing import Final

__all__ = ["THRESHOLDS", "tuned_collector"]

#: (young, middle, full) as gc.set_threshold takes them
THRESHOLDS: Final = (50_000, 20, 100)


@contextlib.contextmanager
def tuned_collector() -> Iterator[None]:
    """:data:`THRESHOLDS` while the block runs; the thresholds in force before, after it (a
    command run in-process, as the tests run them, leaves its caller's collector as it was)."""
    before = gc.get_threshold()
    gc.set_threshold(*THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*before)
