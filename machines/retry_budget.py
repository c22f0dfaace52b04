"""A retry budget across calls to one endpoint, beyond the seed (docs/runtime.md, "Admission").

Pure and clock-driven, like the pacer (machines/pacing.py) beside it. :class:`RetryBudget` caps
retries across calls to one endpoint (Finagle's TokenRetryBudget, Envoy's retry budget, gRPC's
retry throttling): within any ``window_s``, retries may add at most ``ratio`` of the calls made,
plus ``min_per_s`` retries per second whatever the traffic. Past it a retryable failure is not
retried. The seed's per-class budgets still bound each call.
"""

from __future__ import annotations

from collections import deque

from supervisor.clock import Clock

__all__ = ["RetryBudget"]


class RetryBudget:
    """Retries across calls to one endpoint: at most ``ratio`` of calls plus ``min_per_s``, per window.

    One-second buckets over ``window_s`` count the calls (first attempts) and the retries; a
    retry is allowed while ``retries < ratio * calls + min_per_s * window_s`` in the window.
    """

    __slots__ = ("_buckets", "_clock", "_min", "_ratio", "_window", "refused")

    def __init__(
        self, clock: Clock, *, ratio: float = 0.1, min_per_s: float = 5.0, window_s: float = 10.0
    ) -> None:
        if not 0.0 <= ratio <= 10.0 or min_per_s < 0 or not window_s >= 1.0:
            raise ValueError(
                f"bad retry budget: ratio={ratio!r} min_per_s={min_per_s!r} window_s={window_s!r}"
            )
        self._clock = clock
        self._ratio = ratio
        self._min = min_per_s
        self._window = int(window_s)
        # (second, calls, retries), newest last
        self._buckets: deque[list[int]] = deque()
        self.refused = 0

    def _bucket(self) -> list[int]:
        second = int(self._clock.monotonic())
        buckets = self._buckets
        while buckets and buckets[0][0] <= second - self._window:
            buckets.popleft()
        if not buckets or buckets[-1][0] != second:
            buckets.append([second, 0, 0])
        return buckets[-1]

    def call(self) -> None:
        """A first attempt went out."""
        self._bucket()[1] += 1

    def allow_retry(self) -> bool:
        """May a retry go out now? Counts it when it may."""
        bucket = self._bucket()
        calls = sum(b[1] for b in self._buckets)
        retries = sum(b[2] for b in self._buckets)
        if retries + 1 > self._ratio * calls + self._min * self._window:
            self.refused += 1
            return False
        bucket[2] += 1
        return True
