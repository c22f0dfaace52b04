"""When each piece of attribute work is due, decided on the injected clock.

Work is per conversation: *send* its queued writes, or *check* one send (the verification 3 s
after the platform accepted it, or the read-back of a send whose answer never came). A
conversation has at most one piece of work under way, so its sends go out in order and a
verification never races the next send of the same conversation. A tenant held by a
Retry-After (its endpoint's hold, which ``held`` reads: the endpoint keeps it once, for every
caller) is paused until it passes (seed edge case 2: "apply it as the minimum delay"): nothing
of that tenant is due before.

:meth:`Scheduler.run_due` runs everything due *now* on up to ``concurrency`` workers and returns
when nothing more is; tests call it after moving a fake clock, so whether the verification ran is a
clock decision, never a race. :meth:`Scheduler.serve` is the daemon's loop: run what is due, then
wait until the next due time (or a :meth:`kick`).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from typing import Final

import anyio
from anyio.abc import TaskStatus

from supervisor.clock import Clock

__all__ = ["Kind", "Scheduler", "Work"]


class Kind(enum.Enum):
    SEND = "send"
    CHECK = "check"


@dataclass(frozen=True, slots=True)
class Work:
    kind: Kind
    tenant: str
    conversation_id: str
    # the send a CHECK is about (0 for SEND)
    request_id: int = 0


Handler = Callable[[Work], Awaitable[None]]
#: seconds a tenant is still held by a Retry-After
Held = Callable[[str], float]


def _never_held(tenant: str) -> float:
    return 0.0


NEVER_HELD: Final[Held] = _never_held


class Scheduler:
    """Due times of work, tenant pauses, and the workers that run what is due."""

    def __init__(
        self, clock: Clock, handler: Handler, *, concurrency: int = 4, held: Held = NEVER_HELD
    ) -> None:
        self._clock = clock
        self._handler = handler
        self._concurrency = max(1, concurrency)
        self._due: dict[Work, float] = {}
        self._busy: set[str] = set()
        self._held = held
        self._wake: anyio.Event | None = None
        self.stopped = False
        self.failures = 0

    # ------------------------------------------------------------------ scheduling
    def at(self, work: Work, due: float) -> None:
        """Make ``work`` due at monotonic ``due`` (an earlier due time already set wins)."""
        current = self._due.get(work)
        if current is None or due < current:
            self._due[work] = due
        self.kick()

    def after(self, work: Work, seconds: float) -> None:
        self.at(work, self._clock.monotonic() + max(0.0, seconds))

    def forget(self, conversations: Collection[str]) -> int:
        """Drop the work not yet started of ``conversations`` (their shard was lost: its next owner
        loads them from the store); how many pieces were dropped. Work already running finishes."""
        gone = [work for work in self._due if work.conversation_id in conversations]
        for work in gone:
            del self._due[work]
        return len(gone)

    def paused_for(self, tenant: str) -> float:
        """Seconds nothing of ``tenant`` is due for: a Retry-After still holding it."""
        return max(0.0, self._held(tenant))

    def pending(self) -> int:
        return len(self._due)

    def _effective(self, work: Work, due: float) -> float:
        held = self._held(work.tenant)
        return due if held <= 0 else max(due, self._clock.monotonic() + held)

    def next_due(self) -> float | None:
        """The monotonic time the next piece of work becomes due (pauses included), or None."""
        if not self._due:
            return None
        return min(self._effective(work, due) for work, due in self._due.items())

    def kick(self) -> None:
        if self._wake is not None:
            self._wake.set()

    # ------------------------------------------------------------------ running
    def _take(self) -> Work | None:
        if self.stopped:
            return None
        now = self._clock.monotonic()
        best: tuple[float, Work] | None = None
        for work, due in self._due.items():
            if work.conversation_id in self._busy:
                continue
            effective = self._effective(work, due)
            if effective <= now and (best is None or effective < best[0]):
                best = (effective, work)
        if best is None:
            return None
        work = best[1]
        del self._due[work]
        self._busy.add(work.conversation_id)
        return work

    async def _worker(self) -> None:
        while (work := self._take()) is not None:
            try:
                await self._handler(work)
            except Exception:
                # a bug in one piece of work must not stop the others: try it again later
                self.failures += 1
                self.after(work, 5.0)
            finally:
                self._busy.discard(work.conversation_id)

    async def run_due(self) -> None:
        """Run every piece of work due now (and what becomes due meanwhile); return when none is."""
        async with anyio.create_task_group() as tg:
            for _ in range(self._concurrency):
                tg.start_soon(self._worker)

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """The daemon's loop: run what is due, sleep until the next due time or a kick."""
        task_status.started()
        while not self.stopped:
            wake = self._wake = anyio.Event()
            await self.run_due()
            due = self.next_due()
            wait = math.inf if due is None else max(0.0, due - self._clock.monotonic())
            if self.stopped:
                return
            with anyio.move_on_after(wait):
                await wake.wait()

    def stop(self) -> None:
        """Take no new work (the daemon drains); work under way finishes or is cancelled with it."""
        self.stopped = True
        self.kick()
