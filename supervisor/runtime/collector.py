"""The garbage collector's thresholds for a process that holds thousands of sessions.

CPython's defaults, ``(700, 10, 10)``, run a young collection every 700 net allocations and a
full one whenever the long-lived objects have grown by a quarter. A daemon holding 5,000 sessions
has over a million long-lived objects (machines, connections, buffers), and a reconnection storm
allocates a new connection per session: full collections then come every second or two, each
stalling every session (the pacer spaces the attempts that fell due during the stall instead of
bursting them, so the time is lost, not made up). :data:`THRESHOLDS` keeps full collections out of
a storm (docs/benchmarks.md, "5,000 sessions", has the runs and the figures).

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
