"""The watchdog: ``WATCHDOG=1`` from a task on the event loop, only while the daemon is healthy.

With ``WatchdogSec=`` in the unit, systemd sets ``$WATCHDOG_USEC`` (and ``$WATCHDOG_PID``) and
expects a ping at least that often; sd_watchdog_enabled(3) advises sending at half the interval.
A missed deadline fails the unit, systemd sends ``WatchdogSignal=`` (SIGABRT), and
``Restart=on-failure`` brings the daemon back, within ``StartLimitBurst=`` (systemd.service(5);
docs/robustness.md, "Fault matrix", row 17).

* **A task, never a thread**: the pings come from this coroutine on the daemon's one event loop,
  so a loop wedged by a blocking call stops them (a helper thread would keep pinging a daemon
  that serves nobody; docs/robustness.md, "systemd").
* **Only while healthy**, judged at each ping from what the task saw since the last one:

  - *event-loop lag*: the task wakes every quarter period and measures how late it woke; when
    even the best wake-up of the window was later than ``max_lag_s``, the loop is persistently
    starved (a busy loop that rarely yields) and the ping is withheld. The best, not the worst:
    one slow callback must not restart a daemon holding thousands of sessions.
  - *the bus delivering*: when every event published in the window failed in a sink, what the
    daemon tells its subscribers and the journal is lost: the ping is withheld.

* **Degraded is not unhealthy**: conditions a restart cannot cure (a full disk, a read-only state
  directory, a platform outage; :mod:`supervisor.systemd.degraded`) never stop the pings; they
  are shown in ``STATUS=`` and on the bus instead.

Withholding starts and ends are published (``WATCHDOG_WITHHELD`` with the reason,
``WATCHDOG_RESUMED``), so the journal says why systemd restarted the daemon.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import ClassVar

import anyio
from anyio.abc import TaskStatus

from supervisor.bus import EventBus
from supervisor.clock import Clock, iso_utc
from supervisor.events import StampedEvent
from supervisor.systemd.environ import PID_DIGITS, USEC_DIGITS, decimal, shown
from supervisor.systemd.notify import Notifier

__all__ = [
    "MAX_LAG_S",
    "MIN_PING_PERIOD_S",
    "Health",
    "Watchdog",
    "WatchdogResumed",
    "WatchdogWithheld",
    "watchdog_usec",
]

#: a loop whose best wake-up in a whole ping period was later than this is starved
MAX_LAG_S = 5.0
#: wake-ups per ping period (lag samples)
SAMPLES_PER_PERIOD = 4
#: the shortest ping period. Half of ``WATCHDOG_USEC=1`` is half a microsecond: the task woke every
#: eighth of one and took 81 % of a CPU on an idle daemon. At this floor it wakes every 25 ms;
#: any WatchdogSec= of 0.2 s or more is still honoured, a shorter one cannot be by a Python daemon
MIN_PING_PERIOD_S = 0.1
#: USEC_INFINITY (systemd's time-util.h): "no watchdog", never exported
USEC_INFINITY = 2**64 - 1


def watchdog_usec(
    environ: Mapping[str, str],
    *,
    pid: int | None = None,
    warn: Callable[[str], object] | None = None,
) -> int | None:
    """``$WATCHDOG_USEC`` when it is meant for this process (sd_watchdog_enabled(3)); else None.

    systemd sets both variables as decimal numbers (a ``usec_t`` below ``USEC_INFINITY``, a pid).
    A value it never sends (``²``, which ``str.isdigit`` accepts and ``int`` refuses; 400 digits;
    ``USEC_INFINITY`` or beyond) is not an instruction: ``warn`` gets one line and the watchdog is
    off, as ``sd_watchdog_enabled`` answers ``-EINVAL`` for it. 0 is off without a word.
    """
    value = environ.get("WATCHDOG_USEC", "").strip()
    if not value:
        return None
    usec = decimal(value, USEC_DIGITS)
    if usec is None or usec >= USEC_INFINITY:
        _warn(warn, f"WATCHDOG_USEC={shown(value)} is not a number of microseconds systemd sends")
        return None
    if usec == 0:
        return None
    owner_text = environ.get("WATCHDOG_PID", "").strip()
    if not owner_text:
        return usec
    owner = decimal(owner_text, PID_DIGITS)
    if owner is None:
        _warn(warn, f"WATCHDOG_PID={shown(owner_text)} is not a process id")
        return None
    if owner != (os.getpid() if pid is None else pid):
        return None  # inherited from a parent that is watched itself
    return usec


def _warn(warn: Callable[[str], object] | None, problem: str) -> None:
    if warn is not None:
        warn(f"{problem}: the watchdog is off")


class WatchdogWithheld(StampedEvent, frozen=True):
    """The daemon stopped pinging the watchdog: ``reason`` says which health check failed."""

    name: ClassVar[str] = "WATCHDOG_WITHHELD"
    reason: str


class WatchdogResumed(StampedEvent, frozen=True):
    """The daemon is healthy again and pings the watchdog."""

    name: ClassVar[str] = "WATCHDOG_RESUMED"


class Health:
    """The health verdict over one ping period (pure: fed with numbers, no clock, no I/O)."""

    def __init__(self, max_lag_s: float) -> None:
        self.max_lag_s = max_lag_s
        self._best_lag: float | None = None

    def observe_lag(self, lag_s: float) -> None:
        self._best_lag = lag_s if self._best_lag is None else min(self._best_lag, lag_s)

    def verdict(self, *, events: int, failed_deliveries: int) -> str | None:
        """None when healthy, else why not; starts a new window."""
        best, self._best_lag = self._best_lag, None
        if best is not None and best > self.max_lag_s:
            return f"event loop starved: every wake-up of the last period was over {best:.3f}s late"
        if events > 0 and failed_deliveries >= events:
            return f"the bus is not delivering: all {events} events of the last period failed in a sink"
        return None


class Watchdog:
    """Pings ``WATCHDOG=1`` every half ``$WATCHDOG_USEC`` while :class:`Health` passes."""

    def __init__(
        self,
        notifier: Notifier,
        bus: EventBus,
        usec: int,
        *,
        clock: Clock,
        max_lag_s: float = MAX_LAG_S,
    ) -> None:
        self._notifier = notifier
        self._bus = bus
        self._clock = clock
        # sd_watchdog_enabled(3): ping at half the interval; never more often than the floor
        self.requested_period_s = usec / 1_000_000 / 2
        self.period_s = max(self.requested_period_s, MIN_PING_PERIOD_S)
        self.sample_s = self.period_s / SAMPLES_PER_PERIOD
        # a lag of a whole period misses the deadline anyway: the bound never exceeds it
        self.health = Health(min(max_lag_s, self.period_s))
        self.pings = 0
        self.withheld = 0
        self.withholding: str | None = None
        self._seq = bus.seq
        self._failures = bus.sink_failures

    def decide(self) -> bool:
        """Judge the period that just ended; ping when healthy. True when pinged."""
        seq, failures = self._bus.seq, self._bus.sink_failures
        reason = self.health.verdict(events=seq - self._seq, failed_deliveries=failures - self._failures)
        now = iso_utc(self._clock.time())
        if reason is not None:
            self.withheld += 1
            if self.withholding is None:
                self._bus.publish(WatchdogWithheld(reason, timestamp=now))
            self.withholding = reason
        else:
            if self.withholding is not None:
                self._bus.publish(WatchdogResumed(timestamp=now))
            self.withholding = None
            self._notifier.watchdog()
            self.pings += 1
        # our own notices are not part of the next window's delivery check
        self._seq, self._failures = self._bus.seq, self._bus.sink_failures
        return reason is None

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Sample the loop's lag and decide once per period, until cancelled."""
        task_status.started()
        clock = self._clock
        sample_s = self.sample_s
        self.decide()  # the first ping at once: systemd's watchdog starts with READY=1
        next_decision = clock.monotonic() + self.period_s
        while True:
            expected = clock.monotonic() + sample_s
            await anyio.sleep(sample_s)
            now = clock.monotonic()
            self.health.observe_lag(max(0.0, now - expected))
            if now >= next_decision:
                self.decide()
                next_decision = max(next_decision + self.period_s, now)
