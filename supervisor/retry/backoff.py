"""Backoff strategies and the retry decision.

``attempt`` counts retries from 0: the first retry of an operation is attempt 0, so the
seed's formula gives ``base + U(0, base)`` for it (seed section 2, ``calculateBackoff``).
"""

from __future__ import annotations

import enum

import msgspec

from supervisor.clock import Rng
from supervisor.taxonomy.model import Jitter, RetryPolicy

# 2**62 ms is ~146 million years: past it the exponent can only overflow a float for nothing
_MAX_EXPONENT = 62


class GiveUpReason(enum.StrEnum):
    NOT_RETRYABLE = "NOT_RETRYABLE"
    BUDGET_EXHAUSTED = "BUDGET_EXHAUSTED"
    RETRY_AFTER_EXCEEDS_CEILING = "RETRY_AFTER_EXCEEDS_CEILING"
    # a session's reconnection outlasted the reconnection horizon ([reconnect] horizon)
    HORIZON = "HORIZON"
    # retries to the endpoint already add their allowed share of its calls ([admission])
    RETRY_BUDGET_EXHAUSTED = "RETRY_BUDGET_EXHAUSTED"


class RetryDecision(msgspec.Struct, frozen=True):
    """Retry after ``delay_ms``, or give up for ``reason``."""

    retry: bool
    delay_ms: float = 0.0
    reason: GiveUpReason | None = None
    # True when a server's Retry-After set the delay (it was longer than the backoff)
    from_retry_after: bool = False


def _exponential_ms(base_ms: float, attempt: int) -> float:
    return base_ms * float(2 ** min(max(attempt, 0), _MAX_EXPONENT))


def backoff_delay_ms(
    policy: RetryPolicy,
    attempt: int,
    rng: Rng,
    previous_delay_ms: float | None = None,
) -> float:
    """The backoff before retry number ``attempt`` (0-based), in milliseconds.

    Bounds, for ``b`` = base, ``c`` = cap and ``e`` = ``b*2^attempt``:
    additive in ``[min(e, c), min(e + b, c)]``; full in ``[0, min(e, c)]``;
    decorrelated in ``[min(b, c), c]``.
    """
    base = float(policy.base_delay_ms)
    cap = float(policy.max_delay_ms)
    jitter = policy.jitter
    if jitter is Jitter.ADDITIVE:
        # seed section 2: delay = baseDelay * 2^attempt + U(0, baseDelay), capped
        return min(_exponential_ms(base, attempt) + rng.random() * base, cap)
    if jitter is Jitter.FULL:
        # Brooker 2015 "full jitter": U(0, min(cap, base * 2^attempt))
        return rng.random() * min(cap, _exponential_ms(base, attempt))
    # decorrelated jitter: min(cap, U(base, previous * 3)), previous starting at base
    previous = base if previous_delay_ms is None or previous_delay_ms < base else previous_delay_ms
    upper = previous * 3.0
    return min(cap, base + rng.random() * (upper - base))


def decide_retry(
    policy: RetryPolicy,
    attempt: int,
    rng: Rng,
    *,
    retryable: bool = True,
    retry_after_ms: float | None = None,
    previous_delay_ms: float | None = None,
) -> RetryDecision:
    """Whether retry number ``attempt`` (0-based) may happen, and after how long.

    A server's Retry-After, when the policy honours it, is a *minimum* delay (seed edge
    case 2: "apply it as the minimum delay for the next retry attempt"); one longer than
    the policy's ceiling means give up (the Genesys Java SDK treats > 180 s as a quota
    breach). Negative or missing values are ignored.
    """
    if not retryable or policy.max_retries <= 0:
        return RetryDecision(retry=False, reason=GiveUpReason.NOT_RETRYABLE)
    if attempt >= policy.max_retries:
        return RetryDecision(retry=False, reason=GiveUpReason.BUDGET_EXHAUSTED)
    delay = backoff_delay_ms(policy, attempt, rng, previous_delay_ms)
    if policy.honors_retry_after and retry_after_ms is not None and retry_after_ms >= 0:
        if retry_after_ms > policy.retry_after_ceiling_ms:
            return RetryDecision(retry=False, reason=GiveUpReason.RETRY_AFTER_EXCEEDS_CEILING)
        if retry_after_ms > delay:
            return RetryDecision(retry=True, delay_ms=float(retry_after_ms), from_retry_after=True)
    return RetryDecision(retry=True, delay_ms=delay)
