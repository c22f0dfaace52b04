"""Server hints: ``Retry-After`` (RFC 9110 section 10.2.3) and ``Cache-Control: max-age``
(RFC 9111 section 5.2.2.1). Pure: the current time is passed in.
"""

from __future__ import annotations

import email.utils
import re

_DELTA_SECONDS = re.compile(r"^\s*(\d{1,10})\s*$")
_MAX_AGE = re.compile(r"(?:^|,)\s*max-age\s*=\s*\"?(\d{1,10})\"?\s*(?:,|$)", re.IGNORECASE)


def parse_retry_after_ms(value: object, now_epoch: float) -> int | None:
    """``Retry-After`` as milliseconds from ``now_epoch``, or None when absent or invalid.

    Accepts ``delay-seconds`` (a non-negative integer) or an ``HTTP-date``; a date in the
    past means "now" (0). Anything else (negative, fractional, garbage) is ignored, as
    RFC 9110 lets a recipient do; callers then fall back to their own backoff.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value * 1000 if value >= 0 else None
    if not isinstance(value, str) or not value or len(value) > 64:
        return None
    match = _DELTA_SECONDS.match(value)
    if match:
        return int(match.group(1)) * 1000
    try:
        when = email.utils.parsedate_to_datetime(value.strip())
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        # RFC 9110 section 5.6.7: HTTP-dates are always GMT
        return None
    delta_ms = (when.timestamp() - now_epoch) * 1000.0
    return max(0, round(delta_ms))


def parse_max_age_ms(value: object) -> int | None:
    """``max-age`` of a ``Cache-Control`` value, as milliseconds, or None.

    CXone long polls may carry it as the minimum re-poll interval (seed section 2:
    "Polling retries must honor Cache-Control: max-age headers").
    """
    if not isinstance(value, str) or len(value) > 1024:
        return None
    match = _MAX_AGE.search(value)
    if not match:
        return None
    return int(match.group(1)) * 1000
