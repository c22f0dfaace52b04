"""journald's stream protocol: which output lines journald reads, and the priority each line carries.

A service's standard output and error under systemd are stream sockets into journald
(``StandardOutput=journal``, the default). journald stores each line with the priority of its
``<N>`` prefix and strips the prefix (``SyslogLevelPrefix=yes``, the default; sd-daemon(3): SD_ERR
``<3>`` ... SD_DEBUG ``<7>``); a line without one is priority 6, info. So that ``journalctl -p
warning`` finds a degraded state, a withheld watchdog ping or a termination, each event line leads
with its priority while it goes to journald, and only then: anywhere else the prefix would be three
bytes of noise before the JSON.

Whether a descriptor goes to journald: systemd sets ``$JOURNAL_STREAM`` to ``DEVICE:INODE`` of the
stream it connected (systemd.exec(5), "Environment variables in spawned processes"), and a process
compares that with its own descriptor's ``fstat``, because a descriptor may have been redirected
since (``run ... >file`` under a unit, a child that inherited the variable).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:  # the command line's error path imports this module: nothing heavy at run time
    from supervisor.events import Published

__all__ = [
    "SD_ERR",
    "SD_INFO",
    "SD_NOTICE",
    "SD_WARNING",
    "event_priority",
    "journal_descriptors",
    "level_priority",
    "prefix",
    "stderr_prefix",
]

# sd-daemon(3): the syslog priorities a line may lead with
SD_CRIT: Final = 2
SD_ERR: Final = 3
SD_WARNING: Final = 4
SD_NOTICE: Final = 5
SD_INFO: Final = 6
SD_DEBUG: Final = 7

#: what an operator must see with ``journalctl -p warning`` (or ``-p notice``), by wire name; every
#: other event (transitions, retries, classified errors on their way to a retry) is info
_EVENT_PRIORITIES: Final[Mapping[str, int]] = {
    # a stop that could not drain
    "DAEMON_FORCED_EXIT": SD_ERR,
    # something is wrong and the daemon goes on (docs/systemd.md, "Degraded is not unhealthy")
    "DAEMON_DEGRADED": SD_WARNING,
    "WATCHDOG_WITHHELD": SD_WARNING,
    "STORE_DEGRADED": SD_WARNING,
    "FLEET_DEGRADED": SD_WARNING,
    "CIRCUIT_BREAKER_OPEN": SD_WARNING,
    "RETRY_EXHAUSTED": SD_WARNING,
    "EVENTS_DROPPED": SD_WARNING,
    "CONFIG_RELOAD_FAILED": SD_WARNING,
    "CREDENTIAL_REFUSED": SD_WARNING,
    "SOCKET_PEER_REFUSED": SD_WARNING,
    "ATTRIBUTE_MISMATCH": SD_WARNING,
    "RATE_LIMIT_BACKPRESSURE": SD_WARNING,
    # the daemon's life and what an operator did
    "DAEMON_STARTED": SD_NOTICE,
    "DAEMON_STOPPING": SD_NOTICE,
    "DAEMON_STOPPED": SD_NOTICE,
    "DAEMON_RECOVERED": SD_NOTICE,
    "WATCHDOG_RESUMED": SD_NOTICE,
    "STORE_RECOVERED": SD_NOTICE,
    "FLEET_RECOVERED": SD_NOTICE,
    "CIRCUIT_BREAKER_CLOSED": SD_NOTICE,
    "CONFIG_RELOADED": SD_NOTICE,
    "CREDENTIAL_ACCEPTED": SD_NOTICE,
    "TAXONOMY_SWITCHED": SD_NOTICE,
    "CONTROL_COMMAND": SD_NOTICE,
    "SOCKET_API_LISTENING": SD_NOTICE,
    "SUBSCRIBER_DISCONNECTED": SD_NOTICE,
    "SESSION_HANDED_OVER": SD_NOTICE,
    "ATTRIBUTE_MISMATCH_RESOLVED": SD_NOTICE,
    "RATE_LIMIT_BACKPRESSURE_RELEASED": SD_NOTICE,
}

#: a session ended by what its data can no longer be trusted for (seed section 3): above the other ends
_CORRUPTING_ENDS: Final = frozenset({"FAIL_FAST_TRIGGER", "STATE_CORRUPTING"})


def event_priority(published: Published) -> int:
    """The priority of an event's line: a termination at warning (err when the session's state was
    corrupted), a library's log record at its own level, the table above, else info."""
    event = published.event
    name = event.name
    if name == "SESSION_TERMINATED":
        return SD_ERR if event.fields().get("reason") in _CORRUPTING_ENDS else SD_WARNING
    if name == "LOG_RECORD":
        return _LEVEL_NAMES.get(str(event.fields().get("level")), SD_INFO)
    return _EVENT_PRIORITIES.get(name, SD_INFO)


_LEVEL_NAMES: Final[Mapping[str, int]] = {
    "critical": SD_CRIT,
    "error": SD_ERR,
    "warning": SD_WARNING,
    "info": SD_INFO,
    "debug": SD_DEBUG,
}


def level_priority(levelno: int) -> int:
    """A :mod:`logging` level as a syslog priority (CRITICAL 2 ... DEBUG 7)."""
    if levelno >= logging.CRITICAL:
        return SD_CRIT
    if levelno >= logging.ERROR:
        return SD_ERR
    if levelno >= logging.WARNING:
        return SD_WARNING
    if levelno >= logging.INFO:
        return SD_INFO
    return SD_DEBUG


def prefix(priority: int) -> bytes:
    """The ``<N>`` a line to journald leads with (sd-daemon(3))."""
    return b"<%d>" % priority


def journal_descriptors(environ: Mapping[str, str], fds: Iterable[int] = (1, 2)) -> frozenset[int]:
    """Those of ``fds`` that are the journal stream ``$JOURNAL_STREAM`` names (``DEVICE:INODE``,
    decimal); none when it is unset or not that form (the lines then go out without a prefix)."""
    value = environ.get("JOURNAL_STREAM", "")
    device, colon, inode = value.partition(":")
    if not colon or not (device.isascii() and device.isdigit() and inode.isascii() and inode.isdigit()):
        return frozenset()
    if len(device) > 20 or len(inode) > 20:
        return frozenset()
    wanted = (int(device), int(inode))
    out = set()
    for fd in fds:
        try:
            st = os.fstat(fd)
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == wanted:
            out.add(fd)
    return frozenset(out)


def stderr_prefix(environ: Mapping[str, str], priority: int) -> str:
    """``<N>`` for a text line on stderr when stderr is journald's stream, else nothing: the command
    line's own lines (``session-supervisor: error: ...``) keep their text and gain their priority."""
    return f"<{priority}>" if 2 in journal_descriptors(environ, (2,)) else ""
