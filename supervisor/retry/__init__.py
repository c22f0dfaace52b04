"""The retry policy, pure: backoff strategies and server hints (Retry-After, max-age).

No I/O, no sleeping: callers pass the attempt number, an injected RNG and the current
time, and get a decision back.
"""

from supervisor.retry.backoff import RetryDecision, backoff_delay_ms, decide_retry
from supervisor.taxonomy.headers import parse_max_age_ms, parse_retry_after_ms

__all__ = [
    "RetryDecision",
    "backoff_delay_ms",
    "decide_retry",
    "parse_max_age_ms",
    "parse_retry_after_ms",
]
