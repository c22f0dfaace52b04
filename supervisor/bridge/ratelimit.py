"""Failed authentications, limited per source address: a token bucket each. Pure: the caller gives the time.

Each failed authentication from an address takes one token from that address's bucket; a bucket
refills at ``rate`` tokens a second up to ``burst``. While an address's bucket is empty, its
connections are refused before any token is looked at (HTTP 429), so guessing costs the guesser
time, not the bridge CPU. Successful authentications take nothing: a desktop that reconnects all day
is never limited. The buckets of addresses that have not failed for a while are forgotten (a full
bucket says nothing), and at most ``max_addresses`` are kept: past that, a new address finds the
table full and is refused like an empty bucket (a flood of spoofed sources cannot grow memory).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["FailureLimiter"]


@dataclass(slots=True)
class _Bucket:
    tokens: float
    at: float


class FailureLimiter:
    """Per-address buckets of failed authentications (see the module docstring)."""

    def __init__(self, *, burst: int = 5, rate: float = 0.5, max_addresses: int = 10_000) -> None:
        if burst < 1 or rate <= 0 or max_addresses < 1:
            raise ValueError("burst >= 1, rate > 0 and max_addresses >= 1")
        self.burst = burst
        self.rate = rate
        self.max_addresses = max_addresses
        self._buckets: dict[str, _Bucket] = {}
        # counters the bridge reports: failures recorded, connections refused by the limit
        self.failures = 0
        self.refused = 0

    def _level(self, bucket: _Bucket, now: float) -> float:
        return min(float(self.burst), bucket.tokens + (now - bucket.at) * self.rate)

    def allows(self, address: str, now: float) -> bool:
        """Whether ``address`` may try to authenticate now (counted in :attr:`refused` when not)."""
        bucket = self._buckets.get(address)
        if bucket is None:
            allowed = len(self._buckets) < self.max_addresses or self._forget_full(now)
        else:
            allowed = self._level(bucket, now) >= 1.0
        if not allowed:
            self.refused += 1
        return allowed

    def failed(self, address: str, now: float) -> None:
        """One failed authentication from ``address``: one token less."""
        self.failures += 1
        bucket = self._buckets.get(address)
        if bucket is None:
            if len(self._buckets) >= self.max_addresses and not self._forget_full(now):
                return
            bucket = self._buckets[address] = _Bucket(float(self.burst), now)
        bucket.tokens = max(0.0, self._level(bucket, now) - 1.0)
        bucket.at = now

    def _forget_full(self, now: float) -> bool:
        """Drop the buckets that have refilled (they limit nothing); whether room was made."""
        full = [a for a, b in self._buckets.items() if self._level(b, now) >= self.burst]
        for address in full:
            del self._buckets[address]
        return len(self._buckets) < self.max_addresses
