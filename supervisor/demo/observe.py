"""What the demo learns from the daemon's event bus while a scenario runs.

:class:`Observer` is a bus sink (synchronous, cheap): it keeps the sessions' states from
SESSION_TRANSITION events, notes when every surviving session is active again after the
fault (``recoverySeconds``), remembers each terminated session's connection count (so a
reconnection after termination would show), pairs every RATE_LIMITED classification with
the retry scheduled after it (a retry earlier than Retry-After would show), and counts
events for the events-per-second gauge. It wakes the orchestrator on every transition.
"""

from __future__ import annotations

from collections.abc import Callable

import anyio

from supervisor.clock import Clock
from supervisor.events import ErrorClassified, Published, RetryAttempt, SessionTransition
from supervisor.taxonomy import SdkErrorEvent
from supervisor.vocabulary import SessionState

# where a session is once the scenario is over for it: back up, or ended for good
_SETTLED = frozenset({SessionState.ACTIVE, SessionState.TERMINATED})


class Observer:
    """A sink for :meth:`supervisor.bus.EventBus.subscribe`; see the module docstring."""

    def __init__(self, clock: Clock, connects_of: Callable[[str], int]) -> None:
        self._clock = clock
        self._connects_of = connects_of
        self.states: dict[str, SessionState] = {}
        self.events = 0
        self.fault_at: float | None = None
        self.recovered_at: float | None = None
        # sessions seen leaving "active" after the fault (other than by terminating)
        self.disrupted: set[str] = set()
        self.connects_at_termination: dict[str, int] = {}
        self.rate_limited = 0
        self.rate_limit_retries = 0
        self.min_retry_delay_s: float | None = None
        self.early_retries = 0
        self._retry_after_ms: dict[str, int] = {}
        self._changed = anyio.Event()

    # -- the sink -----------------------------------------------------------------------------------

    def __call__(self, published: Published) -> None:
        self.events += 1
        event = published.event
        if isinstance(event, SessionTransition):
            self._transition(event)
        elif isinstance(event, ErrorClassified) and event.event.code == "RATE_LIMITED":
            self._rate_limited(event.event)
        elif isinstance(event, RetryAttempt) and event.code == "RATE_LIMITED":
            self._retry(event)

    def _transition(self, event: SessionTransition) -> None:
        session = event.session_id
        target = event.target
        source = self.states.get(session)
        self.states[session] = target
        if target is SessionState.TERMINATED:
            self.connects_at_termination[session] = self._connects_of(session)
        if self.fault_at is not None:
            if source is SessionState.ACTIVE and target is not SessionState.TERMINATED:
                self.disrupted.add(session)
                self.recovered_at = None
            elif target is SessionState.ACTIVE and self.all_survivors_active():
                self.recovered_at = self._clock.monotonic()
        self._changed.set()

    def _rate_limited(self, event: SdkErrorEvent) -> None:
        if self.fault_at is None:
            return
        self.rate_limited += 1
        session = event.context.get("sessionId")
        if isinstance(session, str) and event.retry_after_ms is not None:
            self._retry_after_ms[session] = event.retry_after_ms

    def _retry(self, retry: RetryAttempt) -> None:
        if self.fault_at is None:
            return
        self.rate_limit_retries += 1
        delay_s = retry.delay_s
        if self.min_retry_delay_s is None or delay_s < self.min_retry_delay_s:
            self.min_retry_delay_s = delay_s
        wanted = self._retry_after_ms.pop(retry.session_id, None)
        if wanted is not None and delay_s * 1000.0 < wanted - 0.5:
            self.early_retries += 1

    # -- queries for the orchestrator ---------------------------------------------------------------

    def mark_fault(self) -> None:
        """The scenario's faults are being injected now."""
        now = self._clock.monotonic()
        self.fault_at = now
        self.recovered_at = now if self.all_survivors_active() else None

    def count(self, state: SessionState) -> int:
        return sum(1 for s in self.states.values() if s is state)

    def all_survivors_active(self) -> bool:
        return all(s in _SETTLED for s in self.states.values())

    def recovery_seconds(self) -> float | None:
        if self.fault_at is None or self.recovered_at is None:
            return None
        return round(max(0.0, self.recovered_at - self.fault_at), 3)

    async def changed(self, limit_s: float) -> None:
        """Wait for the next transition, at most ``limit_s`` (time-based conditions need a re-check)."""
        with anyio.move_on_after(limit_s):
            await self._changed.wait()
        self._changed = anyio.Event()
