"""Per-tenant backpressure episodes (seed edge case 2). Pure: the caller says what the depth is.

"Implement a request queue with a maximum depth of 50. If the queue fills, emit a
RATE_LIMIT_BACKPRESSURE event and pause outgoing updates until the queue drains." An episode
starts when a submission does not fit (the store refused it: depth is enforced in the transaction
that would have acknowledged it). While it lasts every submission is refused with a "try later"
answer; what is queued keeps being sent, under the platform's Retry-After. It ends once the queue
has drained to the resume mark (hysteresis: one event per episode, not one per refused call).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Episodes", "Started"]

#: the retry hint is at least this, and at most ...
MIN_RETRY_S = 1.0
MAX_RETRY_S = 60.0
#: writes answered per second assumed before any was measured
DEFAULT_RATE = 2.0


@dataclass(frozen=True, slots=True)
class Started:
    """A new episode: publish RATE_LIMIT_BACKPRESSURE once."""

    depth: int
    retry_after_s: float


class Episodes:
    """Which tenants are in an episode, how many submissions each refused, and a retry hint."""

    __slots__ = ("_limit", "_on", "_rate", "_resume_at")

    def __init__(self, limit: int, resume_at: int) -> None:
        self._limit = limit
        self._resume_at = resume_at
        self._on: dict[str, int] = {}
        self._rate = DEFAULT_RATE

    def active(self, tenant: str) -> bool:
        return tenant in self._on

    def refuse(self, tenant: str, depth: int, paused_for_s: float) -> Started | None:
        """Count one refused submission; a :class:`Started` when it begins an episode."""
        if tenant in self._on:
            self._on[tenant] += 1
            return None
        self._on[tenant] = 1
        return Started(depth, self.retry_after(depth, paused_for_s))

    def drained(self, tenant: str, depth: int) -> int | None:
        """The queue is at ``depth`` now: the episode's refused count when this ends it, else None."""
        if tenant in self._on and depth <= self._resume_at:
            return self._on.pop(tenant)
        return None

    def measured(self, rate_per_s: float) -> None:
        """The recent rate at which the platform answered this daemon's writes."""
        if rate_per_s > 0:
            self._rate = 0.7 * self._rate + 0.3 * rate_per_s

    def retry_after(self, depth: int, paused_for_s: float) -> float:
        """When a refused caller should try again: the time to drain to the resume mark, at least
        any Retry-After the platform is holding us to, between 1 and 60 s."""
        to_drain = max(0, depth - self._resume_at)
        seconds = max(to_drain / self._rate, paused_for_s, MIN_RETRY_S)
        return round(min(seconds, MAX_RETRY_S), 1)
