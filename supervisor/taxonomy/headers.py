"""Server hints: ``Retry-After`` (RFC 9110 section 10.2.3), ``Cache-Control: max-age``
(RFC 9111 section 5.2.2.1) and Genesys Cloud's ``inin-ratelimit-*`` reading of the token's rate
window (docs/platforms.md, "Genesys Cloud Platform REST"). Pure: the current time is passed in.
"""

from __future__ import annotations

import calendar
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

_DELTA_SECONDS = re.compile(r"^\s*(\d{1,10})\s*$", re.ASCII)
_MONTHS = {
    m: i
    for i, m in enumerate(
        ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"), 1
    )
}
# RFC 9110 section 5.6.7: IMF-fixdate, and the obsolete RFC 850 and asctime forms a recipient must accept
_IMF_FIXDATE = re.compile(r"^[A-Za-z]{3}, (\d{2}) ([A-Za-z]{3}) (\d{4}) (\d{2}):(\d{2}):(\d{2}) GMT$")
_RFC850 = re.compile(r"^[A-Za-z]{6,9}, (\d{2})-([A-Za-z]{3})-(\d{2}) (\d{2}):(\d{2}):(\d{2}) GMT$")
_ASCTIME = re.compile(r"^[A-Za-z]{3} ([A-Za-z]{3}) ([ \d]\d) (\d{2}):(\d{2}):(\d{2}) (\d{4})$")
_MAX_AGE = re.compile(r"(?:^|,)\s*max-age\s*=\s*\"?(\d{1,10})\"?\s*(?:,|$)", re.IGNORECASE | re.ASCII)


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
    when = parse_http_date(value.strip())
    if when is None:
        return None
    # rounded up: a retry made after this many whole milliseconds is never earlier than the date
    return max(0, math.ceil((when - now_epoch) * 1000.0))


def parse_http_date(value: str) -> float | None:
    """An HTTP-date (RFC 9110 section 5.6.7) as epoch seconds, or None.

    Written out rather than borrowed from ``email.utils``, which imports ``socket``: decision
    code imports no I/O library.
    """
    if m := _IMF_FIXDATE.match(value):
        day, month, year, hh, mm, ss = m.groups()
    elif m := _RFC850.match(value):
        day, month, yy, hh, mm, ss = m.groups()
        # RFC 9110: a two-digit year more than 50 years in the future is in the past century
        year = str(2000 + int(yy) if int(yy) < 70 else 1900 + int(yy))
    elif m := _ASCTIME.match(value):
        month, day, hh, mm, ss, year = m.groups()
    else:
        return None
    month_number = _MONTHS.get(month.lower())
    if month_number is None:
        return None
    try:
        fields = (int(year), month_number, int(day), int(hh), int(mm), int(ss))
        if not (1 <= fields[2] <= 31 and fields[3] < 24 and fields[4] < 60 and fields[5] < 61):
            return None
        return float(calendar.timegm((*fields, 0, 0, 0)))
    except (ValueError, OverflowError):
        return None


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


@dataclass(frozen=True, slots=True)
class RateLimitReading:
    """What one answer says of the rate window its token is counted in: ``count`` requests of the
    ``allowed`` ones counted so far, the window starting again in ``reset_s`` seconds.

    Genesys Cloud's ``inin-ratelimit-count``, ``inin-ratelimit-allowed`` and ``inin-ratelimit-reset``
    (docs/platforms.md says where their meaning comes from, and what of it is inferred).
    """

    count: int
    allowed: int
    reset_s: float

    @property
    def used(self) -> float:
        """The share of the window spent (``count / allowed``; 1 and more: the next one is refused)."""
        return self.count / self.allowed


_COUNT = "inin-ratelimit-count"
_ALLOWED = "inin-ratelimit-allowed"
_RESET = "inin-ratelimit-reset"


def _whole(value: object) -> int | None:
    if not isinstance(value, str) or len(value) > 12:
        return None
    match = _DELTA_SECONDS.match(value)
    return None if match is None else int(match.group(1))


def parse_rate_limit(headers: Mapping[str, str]) -> RateLimitReading | None:
    """The answer's rate-window reading, or None when one of the three headers is absent or not a
    non-negative integer, or ``allowed`` is 0 (a reading we cannot act on is no reading)."""
    count, allowed, reset = (
        _whole(headers.get(_COUNT)),
        _whole(headers.get(_ALLOWED)),
        _whole(headers.get(_RESET)),
    )
    if count is None or allowed is None or reset is None or allowed == 0:
        return None
    return RateLimitReading(count, allowed, float(reset))
