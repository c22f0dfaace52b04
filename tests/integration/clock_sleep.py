"""An injected ``sleep`` on a :class:`~supervisor.clock.FakeClock`: a sleeper wakes only when the test
moves the clock to its time (no real waiting for a timer, and no time passing by itself)."""

from __future__ import annotations

import anyio
import anyio.lowlevel

from supervisor.clock import FakeClock

__all__ = ["ClockSleep"]


class ClockSleep:
    """``await sleep(s)`` parks until :meth:`advance` (or :meth:`wake`) reaches now + s."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self._waiters: list[tuple[float, anyio.Event]] = []

    async def __call__(self, seconds: float) -> None:
        if seconds <= 0:
            await anyio.lowlevel.checkpoint()
            return
        event = anyio.Event()
        self._waiters.append((self.clock.monotonic() + seconds, event))
        await event.wait()

    @property
    def sleeping(self) -> int:
        """Sleepers not yet woken (a cancelled one counts until the clock passes its time)."""
        return len(self._waiters)

    def advance(self, seconds: float) -> None:
        """Move the clock and wake every sleeper whose time has come."""
        self.clock.advance(seconds)
        self.wake()

    def wake(self) -> None:
        now = self.clock.monotonic()
        due = [event for at, event in self._waiters if at <= now]
        self._waiters = [(at, event) for at, event in self._waiters if at > now]
        for event in due:
            event.set()
