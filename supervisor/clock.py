"""Injected time and randomness.

Every decision that depends on time takes a :class:`Clock`; every decision that
depends on chance takes a :class:`Rng`. Production code passes
:class:`SystemClock` and :class:`random.Random`; tests pass :class:`FakeClock`
and a seeded ``random.Random`` so no test ever sleeps to wait for a timer.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """A source of time: monotonic seconds for deadlines, epoch seconds for wire dates."""

    def monotonic(self) -> float: ...

    def time(self) -> float: ...


class Rng(Protocol):
    """The one method of :class:`random.Random` the decisions use: U[0, 1)."""

    def random(self) -> float: ...


class SystemClock:
    """The real clock."""

    __slots__ = ()

    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()


class FakeClock:
    """A clock that moves only when told to; ``time()`` tracks ``monotonic()`` from an epoch offset."""

    __slots__ = ("_epoch", "_now")

    def __init__(self, start: float = 0.0, epoch: float = 1_715_679_131.004) -> None:
        self._now = start
        # 2024-05-14T09:32:11.004Z, the seed's example timestamp
        self._epoch = epoch - start

    def monotonic(self) -> float:
        return self._now

    def time(self) -> float:
        return self._epoch + self._now

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("a clock does not go backwards")
        self._now += seconds

    def set(self, now: float) -> None:
        if now < self._now:
            raise ValueError("a clock does not go backwards")
        self._now = now


def iso_utc(epoch_s: float) -> str:
    """Epoch seconds as ISO-8601 UTC with milliseconds and ``Z``, the seed's format.

    ``2024-05-14T09:32:11.004Z``. Rounded to the millisecond, not truncated: ``1715679131.004``
    is stored as ``...131.0039999``. The one formatter of the project: events, the classifier and
    the simulators all use it.
    """
    ms = round(epoch_s * 1000.0)
    whole, frac = divmod(ms, 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{frac:03d}Z"
