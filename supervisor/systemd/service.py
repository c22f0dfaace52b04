"""What the composition root wires into :func:`~supervisor.runtime.main.run_daemon` for systemd (docs/systemd.md).

It reads the session table and the circuits it is given (supervisor/runtime/sessions.py), never
the supervisor (supervisor/runtime/assembly.py builds it)::

    glue = Systemd(sessions, circuits, bus=bus, clock=clock, environ=os.environ, grace_s=grace_s)
    await run_daemon(
        supervisor,
        services=[..., *glue.services],       # status line, watchdog, state-directory probe
        on_ready=glue.ready,                  # READY=1 + STATUS=: sockets answer, sessions handed over
        on_stopping=glue.stopping,            # STOPPING=1 + EXTEND_TIMEOUT_USEC: the drain starts
        on_reload=glue.reloading(reload),     # RELOADING=1 + MONOTONIC_USEC ... READY=1
    )

Everything is a no-op without ``$NOTIFY_SOCKET`` (the daemon run by hand, by a test, by another
supervisor), except the degraded conditions: they are published on the bus either way.

* **READY=1** is sent at the readiness moment ``run_daemon`` defines (on_ready): every service
  started (both sockets bound or handed over and answering) and every configured session handed
  to the supervisor, its first attempt scheduled but not awaited (with thousands of paced
  sessions, waiting for every first connection would outlast ``TimeoutStartSec=``). The durable
  store, when it exists, opens before the services start, so READY also means it is open.
* **STOPPING=1** when the drain starts, with ``EXTEND_TIMEOUT_USEC`` covering the drain's bound
  (``daemon.shutdownGrace``) plus the final flush: a grace configured longer than the unit's
  ``TimeoutStopSec=`` is not cut short by SIGKILL (systemd.service(5); the extension only applies
  past the original timeout, so sending it when the unit's timeout suffices changes nothing).
* **RELOADING=1** (with ``MONOTONIC_USEC``, as systemd >= 253 asks) before a reload and
  **READY=1** after it, whatever its outcome (a refused reload leaves the old configuration
  running: the daemon is ready), for SIGHUP and the control socket's ``reload`` alike.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import TypeVar

from supervisor.bus import EventBus
from supervisor.clock import Clock
from supervisor.runtime.main import Service
from supervisor.runtime.sessions import CircuitReader, SessionReader
from supervisor.systemd.conditions import (
    CircuitConditions,
    CredentialConditions,
    FleetConditions,
    StateDirectoryProbe,
    StoreConditions,
    state_directory,
)
from supervisor.systemd.degraded import Degraded
from supervisor.systemd.notify import Notifier
from supervisor.systemd.status import StatusLine
from supervisor.systemd.watchdog import MIN_PING_PERIOD_S, Watchdog, watchdog_usec

__all__ = ["FLUSH_MARGIN_S", "Systemd"]

T = TypeVar("T")

#: after the drain: DAEMON_STOPPED, the stdout flush (2 s in ``run``), closing; systemd must wait for it
FLUSH_MARGIN_S = 5.0


class Systemd:
    """Notify, status line, watchdog and degraded conditions for one daemon (module docstring)."""

    def __init__(
        self,
        sessions: SessionReader,
        circuits: CircuitReader,
        *,
        bus: EventBus,
        clock: Clock,
        environ: MutableMapping[str, str],
        grace_s: float,
        notifier: Notifier | None = None,
        outbox: Callable[[], int | None] | None = None,
        store_problem: str | None = None,
        warn: Callable[[str], object] | None = None,
    ) -> None:
        self._clock = clock
        self._grace_s = grace_s
        self._stopping = False
        self.notifier = notifier if notifier is not None else Notifier.from_environ(environ)
        self.degraded = Degraded(bus, self._clock)
        self.status = StatusLine(
            sessions, circuits, self.degraded, self.notifier, clock=self._clock, outbox=outbox
        )
        self.degraded.on_change = self.status.touch
        bus.subscribe(self.status)
        bus.subscribe(CircuitConditions(self.degraded))
        bus.subscribe(StoreConditions(self.degraded))
        bus.subscribe(FleetConditions(self.degraded))
        bus.subscribe(CredentialConditions(self.degraded))
        if store_problem is not None:
            # the store failed to open before this glue subscribed: its STORE_DEGRADED went by
            self.degraded.raise_condition(
                StoreConditions.CONDITION, f"{store_problem}: acknowledgements refused"
            )
        # what the environment asks that cannot be done: one line each (``run`` prints them as warnings)
        say: Callable[[str], object] = warn if warn is not None else (lambda line: None)
        if self.notifier.problem is not None:
            say(self.notifier.problem)
        self.watchdog: Watchdog | None = None
        # without a notify socket there is nobody to ping: the variables are not read at all
        usec = watchdog_usec(environ, warn=say) if self.notifier.enabled else None
        if usec is not None:
            self.watchdog = Watchdog(self.notifier, bus, usec, clock=self._clock)
            if self.watchdog.period_s > self.watchdog.requested_period_s:
                say(
                    f"WATCHDOG_USEC={usec} asks for a ping every {self.watchdog.requested_period_s:.6g} s; "
                    f"the daemon pings every {MIN_PING_PERIOD_S:g} s at most often "
                    f"(WatchdogSec= below {2 * MIN_PING_PERIOD_S:g} s cannot be honoured)"
                )
        state_dir = state_directory(environ)
        self.state_probe = StateDirectoryProbe(state_dir, self.degraded) if state_dir is not None else None

    @property
    def services(self) -> list[Service]:
        """The services to start before readiness (each reports started at once)."""
        out: list[Service] = []
        if self.state_probe is not None:
            out.append(self.state_probe.serve)
        if self.notifier.enabled:
            out.append(self.status.serve)
        if self.watchdog is not None:
            out.append(self.watchdog.serve)
        return out

    def _announce(self, send: Callable[[str], object]) -> None:
        text = self.status.text()
        send(text)
        self.status.sent_now(text)

    def ready(self) -> None:
        """READY=1 with the first status line (``on_ready``)."""
        self.status.phase = None
        self._announce(lambda text: self.notifier.ready(text))

    def stopping(self) -> None:
        """STOPPING=1 and a stop timeout covering the drain (``on_stopping``)."""
        self._stopping = True
        self.status.phase = "draining"
        extend_usec = int((self._grace_s + FLUSH_MARGIN_S) * 1_000_000)
        self._announce(lambda text: self.notifier.stopping(extend_usec=extend_usec, status=text))

    def reloading(self, reload: Callable[[], Awaitable[T]]) -> Callable[[], Awaitable[T]]:
        """``reload`` between RELOADING=1 and READY=1 (SIGHUP and the control socket's verb)."""

        async def reload_notified() -> T:
            if self._stopping:
                # the control socket still answers during the drain: no READY=1 after STOPPING=1
                return await reload()
            self.status.phase = "reloading"
            self._announce(lambda text: self.notifier.reloading(text))
            try:
                return await reload()
            finally:
                if not self._stopping:
                    self.ready()

        return reload_notified
