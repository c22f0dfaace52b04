"""A fake clock and the sleep that waits on it: timers fire only when a test moves the clock.

A transport built with ``clock=timers.clock, sleep=timers.sleep`` waits for its timers (the Web
Messaging echo health check) until the test calls :meth:`FakeTimers.advance`; nothing sleeps for
real. :attr:`FakeTimers.sleeping` lets a test wait until the code under test is parked on a timer
before it moves time.
"""

from __future__ import annotations

import anyio
import anyio.lowlevel

from supervisor.clock import FakeClock

__all__ = ["FakeTimers"]


class FakeTimers:
    def __init__(self, clock: FakeClock | None = None) -> None:
        self.clock = clock or FakeClock(start=1000.0)
        self._sleepers: list[tuple[float, anyio.Event]] = []

    @property
    def sleeping(self) -> int:
        """How many sleeps are waiting for the clock."""
        return sum(1 for _, event in self._sleepers if not event.is_set())

    def deadlines(self) -> list[float]:
        """When the waiting sleeps end (monotonic seconds of the fake clock)."""
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

    def advance(self, seconds: float) -> None:
        """Move the clock and wake every sleep whose end it reached."""
        self.clock.advance(seconds)
        now = self.clock.monotonic()
        for deadline, event in self._sleepers:
            if deadline <= now:
                event.set()
