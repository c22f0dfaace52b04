"""Bounds shared by both simulators' configurations (docs/simulators.md, "Limits").

A number in a simulator config is a duration, a count or a size: NaN, Infinity or 10**400 would
validate as "> 0" and then hang a request, overflow the clock or a float conversion.
"""

from __future__ import annotations

import math

import msgspec

__all__ = ["DEFAULT_READ_TIMEOUT_S", "MAX_CONFIG_NUMBER", "check_numbers"]

#: the largest number any simulator config key takes (seconds, counts, bytes)
MAX_CONFIG_NUMBER = 10**9
#: a request's headers, and then its body, must arrive within this long; an idle keep-alive
#: connection is closed after it too (half-sent requests are never held forever)
DEFAULT_READ_TIMEOUT_S = 60.0


def check_numbers(config: msgspec.Struct) -> None:
    """Raise ValueError naming the first numeric field of ``config`` that is not finite or too large."""
    for name in config.__struct_fields__:
        value = getattr(config, name)
        items = value if isinstance(value, tuple) else (value,)
        for item in items:
            if isinstance(item, bool) or not isinstance(item, int | float):
                continue
            if not math.isfinite(item) or abs(item) > MAX_CONFIG_NUMBER:
                raise ValueError(f"{name} must be a finite number of at most {MAX_CONFIG_NUMBER}")
