"""The test clocks, in one module: the ``clock`` fixture and the two sleeps that run on a fake clock.

Time in a test is :class:`supervisor.clock.FakeClock` (the production module's: it moves only when
told to). What a test injects as the code's ``sleep`` is one of two kinds, never a real wait:

* :class:`FakeTimers`: a sleep **parked** until the test moves the clock past its end
  (:meth:`FakeTimers.advance`); :attr:`FakeTimers.sleeping` and :meth:`FakeTimers.deadlines` let
  the test wait until the code under test is parked on a timer before it moves time. For timers
  the test drives (a health check's interval, a channel's renewal).
* :func:`advancing`: a sleep that **moves** the clock by what it was asked and returns, for waits
  that are the code's own business (the retry executor's backoff): they take no time and the clock
  shows that they happened.

``tests/unit/test_shared_scaffolding.py`` fails when a test module defines another clock class or
its own ``clock`` fixture: a module that needs another start asks with ``@pytest.mark.clock(start=S)``.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import anyio
import anyio.lowlevel
import pytest

from supervisor.clock import FakeClock

__all__ = ["DEFAULT_START", "FakeClock", "FakeTimers", "SlowClock", "advancing", "clock"]

#: the fake clock's monotonic start (any positive number: deadlines computed before it stay positive)
DEFAULT_START = 1000.0


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "clock(start): the start of the test's `clock` fixture (FakeClock), default 1000.0"
    )


@pytest.fixture
def clock(request: pytest.FixtureRequest) -> FakeClock:
    """The test's fake clock, at ``DEFAULT_START`` or the start its ``clock`` marker names."""
    marker = request.node.get_closest_marker("clock")
    start = DEFAULT_START if marker is None else float(marker.kwargs.get("start", DEFAULT_START))
    return FakeClock(start=start)


class SlowClock(FakeClock):
    """A fake clock that takes a moment to read, letting other threads run while it is read.

    For tests of code that must take a lock around a decision that reads the clock (the library's
    sync shell: a circuit that sees itself open and lets the probe go): with a plain fake clock the
    GIL rarely switches threads between the two, and a missing lock goes unseen.
    """

    def monotonic(self) -> float:
        time.sleep(0.0002)  # a real pause on purpose: it hands the GIL to the other threads
        return super().monotonic()


class FakeTimers:
    """Sleeps parked on a fake clock: each ends only when :meth:`advance` moves the clock past it.

    Pass the instance itself (it is callable) or :attr:`sleep` where the code takes a ``sleep``;
    nothing waits for real time.
    """

    def __init__(self, clock: FakeClock | None = None) -> None:
        self.clock = clock if clock is not None else FakeClock(start=DEFAULT_START)
        self._sleepers: list[tuple[float, anyio.Event]] = []

    @property
    def sleeping(self) -> int:
        """How many sleeps are parked on the clock now (a woken or cancelled one no longer counts)."""
        return sum(1 for _, event in self._sleepers if not event.is_set())

    def deadlines(self) -> list[float]:
        """When the parked sleeps end (monotonic seconds of the fake clock), earliest first."""
        return sorted(deadline for deadline, event in self._sleepers if not event.is_set())

    async def sleep(self, seconds: float) -> None:
        deadline = self.clock.monotonic() + max(0.0, seconds)
        if deadline <= self.clock.monotonic():
            await anyio.lowlevel.checkpoint()
            return
        entry = (deadline, anyio.Event())
        self._sleepers.append(entry)
        try:
            await entry[1].wait()
        finally:
            self._sleepers.remove(entry)

    async def __call__(self, seconds: float) -> None:
        await self.sleep(seconds)

    def advance(self, seconds: float) -> None:
        """Move the clock and wake every sleep whose end it reached."""
        self.clock.advance(seconds)
        now = self.clock.monotonic()
        for deadline, event in self._sleepers:
            if deadline <= now:
                event.set()


def advancing(
    clock: FakeClock, slept: list[float] | None = None, *, others_first: bool = False
) -> Callable[[float], Awaitable[None]]:
    """A sleep that moves ``clock`` by what it is asked (a negative wait by nothing) and yields once.

    ``slept`` records every wait asked for. ``others_first``: the other tasks run before the clock
    moves, as they would while this one slept; by default the clock moves first, then they run.
    """

    async def sleep(seconds: float) -> None:
        if slept is not None:
            slept.append(seconds)
        if others_first:
            await anyio.lowlevel.checkpoint()
        clock.advance(max(0.0, seconds))
        if not others_first:
            await anyio.lowlevel.checkpoint()

    return sleep
