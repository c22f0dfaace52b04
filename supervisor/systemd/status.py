"""The one live ``STATUS=`` line: what ``systemctl status`` shows under the unit's name.

``1834/2000 active · 3 reconnecting · circuits open: 1 · outbox 12`` (docs/systemd.md), plus
``degraded: <condition> (<reason>)`` while a degraded condition is raised, and a leading phase
(``reloading``, ``draining``) while one is under way. The outbox part appears once a durable
store exists and hands over a depth function (docs/store.md).

Sent at most once a second (sd_notify(3) asks for no flood; a storm moves thousands of sessions a
second): every bus event marks the line dirty, and the service recomputes and sends it when it
is dirty and a second has passed since the last send, and only if the text changed. Time is the
injected :class:`~supervisor.clock.Clock`'s, so the throttle is tested without sleeping.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import anyio
from anyio.abc import TaskStatus

from supervisor.clock import Clock
from supervisor.events import Published
from supervisor.runtime.sessions import CircuitReader, SessionReader
from supervisor.systemd.degraded import Degraded
from supervisor.systemd.notify import Notifier
from supervisor.vocabulary import CircuitState, SessionState

__all__ = ["MIN_INTERVAL_S", "StatusLine", "compose"]

#: at most one STATUS= per this many seconds
MIN_INTERVAL_S = 1.0
_SEP = " · "


def compose(
    states: Mapping[SessionState, int],
    *,
    open_circuits: int,
    degraded: Mapping[str, str],
    outbox: int | None = None,
    phase: str | None = None,
) -> str:
    """The status text from counts (pure): ``1834/2000 active · 3 reconnecting · circuits open: 1``."""
    total = sum(states.values())
    active, connecting, reconnecting, terminated, handed_over = (
        states.get(state, 0)
        for state in (
            SessionState.ACTIVE,
            SessionState.CONNECTING,
            SessionState.RECONNECTING,
            SessionState.TERMINATED,
            SessionState.HANDED_OVER,
        )
    )
    parts = [f"{active}/{total} {SessionState.ACTIVE}"]
    if connecting:
        parts.append(f"{connecting} {SessionState.CONNECTING}")
    parts.append(f"{reconnecting} {SessionState.RECONNECTING}")
    if terminated:
        parts.append(f"{terminated} {SessionState.TERMINATED}")
    if handed_over:
        # a stop with a store: left alive on the platform for the next start
        parts.append(f"{handed_over} {SessionState.HANDED_OVER}")
    parts.append(f"circuits open: {open_circuits}")
    if outbox is not None:
        parts.append(f"outbox {outbox}")
    if degraded:
        parts.append("degraded: " + "; ".join(f"{name} ({reason})" for name, reason in degraded.items()))
    if phase is not None:
        parts.insert(0, phase)
    return _SEP.join(parts)


class StatusLine:
    """Keeps ``STATUS=`` current: a bus sink that marks it dirty, and a service that sends it."""

    def __init__(
        self,
        sessions: SessionReader,
        circuits: CircuitReader,
        degraded: Degraded,
        notifier: Notifier,
        *,
        clock: Clock,
        outbox: Callable[[], int | None] | None = None,
        min_interval_s: float = MIN_INTERVAL_S,
    ) -> None:
        self._sessions = sessions
        self._circuits = circuits
        self._degraded = degraded
        self._notifier = notifier
        self._clock = clock
        self._outbox = outbox
        self._min_interval = min_interval_s
        self._dirty = anyio.Event()
        self._last_text: str | None = None
        self._last_sent_at: float | None = None
        #: a phase shown first (``reloading``, ``draining``); None while simply running
        self.phase: str | None = None
        self.sent = 0

    def text(self) -> str:
        open_circuits = sum(1 for c in self._circuits.all().values() if c.state is not CircuitState.CLOSED)
        return compose(
            self._sessions.states(),
            open_circuits=open_circuits,
            degraded=self._degraded.active,
            outbox=self._outbox() if self._outbox is not None else None,
            phase=self.phase,
        )

    # -- marking dirty (on the loop, cheap: a storm publishes thousands of events a second) -----------

    def __call__(self, published: Published) -> None:
        self.touch()

    def touch(self) -> None:
        if not self._dirty.is_set():
            self._dirty.set()

    # -- the throttle (pure on the injected clock) ------------------------------------------------------

    def wait_s(self) -> float:
        """How long until a send is allowed (0 when it is)."""
        if self._last_sent_at is None:
            return 0.0
        return max(0.0, self._last_sent_at + self._min_interval - self._clock.monotonic())

    def sent_now(self, text: str) -> None:
        """Record a send made outside the service (READY=1 with STATUS=): it counts for the throttle."""
        self._last_text = text
        self._last_sent_at = self._clock.monotonic()

    def refresh(self) -> bool:
        """Send the line if it changed (the caller respects :meth:`wait_s`); True when sent."""
        text = self.text()
        if text == self._last_text:
            return False
        if self._notifier.status(text):
            self.sent += 1
        self.sent_now(text)
        return True

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Send the line whenever it is dirty, at most once per ``min_interval_s``, until cancelled."""
        task_status.started()
        # the outbox drains without bus events: with one, the line is looked at each interval too
        # (refresh() sends nothing when the text did not change)
        idle_s = self._min_interval if self._outbox is not None else math.inf
        while True:
            with anyio.move_on_after(idle_s):
                await self._dirty.wait()
            delay = self.wait_s()
            if delay > 0:
                await anyio.sleep(delay)  # the throttle: events in the meantime join this send
            self._dirty = anyio.Event()
            self.refresh()
