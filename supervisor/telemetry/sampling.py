"""Span ids and our own sampling decision, taken before the SDK is touched.

The SDK's samplers decide when a span *starts*, before anyone knows whether the operation
will fail; a sampled-out operation span plus its attempt span still cost 14.4 µs through
``ParentBased(TraceIdRatio(0))`` (docs/telemetry.md). We decide when the outcome is known instead:

* a successful operation that took one attempt is traced with probability ``ratio``
  (a coin per operation tree), and when it is not, nothing reaches the SDK at all;
* a failed operation, a retried one, a reconnection and every termination are traced
  whatever the ratio (:mod:`supervisor.telemetry.operations`, :mod:`.segments`);
* a session's lifetime segments follow one deterministic decision per session id, so a
  sampled session's chain of segments is whole.

Ids come from our own generator (not the SDK's) because a log line may need a span's ids
before the span exists: spans are built after the outcome, with their true start times.
"""

from __future__ import annotations

import random
import zlib
from typing import Final

__all__ = ["IdSource", "Sampler", "hex_span", "hex_trace"]

_BITS_64: Final = 64
_BITS_128: Final = 128


class IdSource:
    """Random non-zero W3C trace ids (128 bits) and span ids (64 bits)."""

    __slots__ = ("_bits",)

    def __init__(self, rng: random.Random | None = None) -> None:
        # a generator of our own: the daemon's RNG is seeded for reproducible jitter, and
        # drawing ids from it would change every delay a seeded run makes
        self._bits = (rng if rng is not None else random.Random()).getrandbits

    def trace_id(self) -> int:
        while True:
            value = self._bits(_BITS_128)
            if value:
                return value

    def span_id(self) -> int:
        while True:
            value = self._bits(_BITS_64)
            if value:
                return value


def hex_trace(trace_id: int) -> str:
    return format(trace_id, "032x")


def hex_span(span_id: int) -> str:
    return format(span_id, "016x")


class Sampler:
    """The ratio decisions: a coin per operation tree, a fixed answer per session."""

    __slots__ = ("_random", "ratio")

    def __init__(self, ratio: float, rng: random.Random | None = None) -> None:
        if not 0.0 <= ratio <= 1.0:
            raise ValueError(f"sample ratio must be within [0, 1], got {ratio!r}")
        self.ratio = ratio
        self._random = (rng if rng is not None else random.Random()).random

    def coin(self) -> bool:
        """Trace this successful, unretried operation tree?"""
        ratio = self.ratio
        if ratio >= 1.0:
            return True
        return ratio > 0.0 and self._random() < ratio

    def session(self, session_id: str) -> bool:
        """Trace this session's healthy segments? The same answer every time for one id."""
        ratio = self.ratio
        if ratio >= 1.0:
            return True
        return ratio > 0.0 and zlib.crc32(session_id.encode()) / 4_294_967_296.0 < ratio
