"""The variables systemd sets for a service, read as systemd writes them.

systemd writes ``WATCHDOG_USEC``, ``WATCHDOG_PID``, ``LISTEN_PID`` and ``LISTEN_FDS`` as plain
decimal numbers (``usec_t``, ``pid_t``, ``int``: src/core/service.c, ``service_set_exec_env``
and ``build_environment``). ``str.isdigit`` is not that test: it accepts ``²`` or ``٣`` (which
``int`` refuses) and any length (``int`` of 400 digits is a number no clock or pid can be).

What a caller does with a value systemd never sends is its own decision (docs/systemd.md,
"Values systemd never sends"); every message quotes the value through :func:`shown`, cut short.

Floor 3 (stdlib only): the notify and activation readers beside it use it.
"""

from __future__ import annotations

__all__ = ["PID_DIGITS", "USEC_DIGITS", "decimal", "shown"]

#: a usec_t is 64 bits: at most 20 decimal digits
USEC_DIGITS = 20
#: a pid_t: at most 10 (Linux's PID_MAX_LIMIT is 2^22)
PID_DIGITS = 10


def decimal(text: str, digits: int) -> int | None:
    """``text`` as systemd writes a number (ASCII digits, at most ``digits``), else None."""
    if not 0 < len(text) <= digits or not all("0" <= c <= "9" for c in text):
        return None
    return int(text)


def shown(value: str, limit: int = 32) -> str:
    """A value as a one-line message quotes it: ``repr``, cut to ``limit`` characters."""
    if len(value) <= limit:
        return repr(value)
    return f"{value[:limit]!r}... ({len(value)} characters)"
