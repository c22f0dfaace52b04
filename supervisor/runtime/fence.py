"""The fence at the write: a fleet member writes for a shard only before its lease deadline.

A member's leases (supervisor/runtime/leases.py) each carry a deadline on ``CLOCK_BOOTTIME``
(``time.clock_gettime(time.CLOCK_BOOTTIME)``, clock_gettime(2): unlike CLOCK_MONOTONIC it counts the
time the process was stopped or the machine suspended, so a SIGSTOPped member that wakes sees its
deadlines passed). Past a shard's deadline its next owner may already run the shard's sessions: not
one byte may leave this member for them (docs/runtime.md, "The fence at the write").

* :class:`WriteFence` follows the deadlines (``Leases.subscribe_deadlines`` calls :meth:`follow` after
  every renewal or loss) and hands out one :class:`ShardGuard` per shard, and :class:`EarliestGuard`\\ s
  for sockets that carry several shards (a shared notifications channel: its earliest deadline).
* A guard's ``check`` is asked by the socket itself in the same step as each write
  (supervisor/transports/fenced_io.py): a dictionary lookup, one ``clock_gettime`` and a comparison.
* :meth:`WriteFence.serve` is the watchdog: at each deadline it aborts the sockets its guards adopted
  (a TCP reset: no graceful close, which would itself be bytes after the deadline), and it is the
  **loop-lag guard**: it measures how late the event loop wakes it; a lateness past
  ``[fleet] loopLagSeconds`` fences every shard until the leases are renewed again (a stalled loop
  may hold renewals' answers it has not read, and what it believed before the stall is stale).

One host (SoloLeases: leases without deadline) has no fence: its pools and sockets are today's.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING, Final

import anyio
from anyio.abc import TaskStatus

from supervisor.errors import Fenced

if TYPE_CHECKING:
    # (annotations only: the leases' module reaches the session runner, which imports this one)
    from supervisor.runtime.leases import Lease

__all__ = ["DEFAULT_LOOP_LAG_S", "EarliestGuard", "ShardGuard", "WriteFence", "boottime"]

_log = logging.getLogger(__name__)

#: the loop-lag guard's default bound ([fleet] loopLagSeconds)
DEFAULT_LOOP_LAG_S: Final = 2.0
#: how often the watchdog wakes when no deadline is nearer (the lag guard's probe interval)
WATCH_TICK_S: Final = 0.25

Now = Callable[[], float]


#: Linux's; elsewhere (macOS, the BSDs) the monotonic clock stands in (it may not count a suspension)
_BOOTTIME: Final = getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC)


def boottime() -> float:
    """Seconds on CLOCK_BOOTTIME: what lease deadlines are measured on (module docstring)."""
    return time.clock_gettime(_BOOTTIME)


class _Sockets:
    """The sockets one guard adopted: each aborted once its deadline passes."""

    __slots__ = ("_aborts",)

    def __init__(self) -> None:
        self._aborts: dict[int, Callable[[], None]] = {}

    def adopt(self, abort: Callable[[], None]) -> Callable[[], None]:
        key = id(abort)
        self._aborts[key] = abort

        def release() -> None:
            self._aborts.pop(key, None)

        return release

    def abort_all(self) -> int:
        aborts, self._aborts = list(self._aborts.values()), {}
        for abort in aborts:
            abort()
        return len(aborts)

    def __len__(self) -> int:
        return len(self._aborts)


class _GuardSockets:
    """What both guards share: the sockets adopted under the fence, aborted at its deadline, and the
    wait for writes to be allowed again; ``passed`` is each guard's own."""

    __slots__ = ("_fence", "_sockets")

    def __init__(self, fence: WriteFence) -> None:
        self._fence = fence
        self._sockets = _Sockets()

    def passed(self) -> bool:
        raise NotImplementedError

    def adopt(self, abort: Callable[[], None]) -> Callable[[], None]:
        self._fence.watch(self)  # type: ignore[arg-type]  # each subclass is a Guard
        return self._sockets.adopt(abort)

    def abort_sockets(self) -> int:
        return self._sockets.abort_all()

    @property
    def sockets(self) -> int:
        """Sockets adopted and still open."""
        return len(self._sockets)

    async def reopened(self) -> None:
        """Return once writes may go out again (the lease renewed, or the shard acquired again)."""
        while self.passed():
            await self._fence.changed()


class ShardGuard(_GuardSockets):
    """One shard's fence: ``check`` before every write of its sessions' sockets."""

    __slots__ = ("shard",)

    def __init__(self, fence: WriteFence, shard: int) -> None:
        super().__init__(fence)
        self.shard = shard

    def deadline(self) -> float | None:
        """The shard's lease deadline (None: not held, or every shard fenced by a stalled loop)."""
        fence = self._fence
        return None if fence.lagging else fence.deadlines.get(self.shard)

    def passed(self) -> bool:
        fence = self._fence
        deadline = fence.deadlines.get(self.shard)
        return fence.lagging or deadline is None or fence.now() >= deadline

    def check(self) -> None:
        # the hot path (every write): no allocation unless fenced
        fence = self._fence
        deadline = fence.deadlines.get(self.shard)
        if fence.lagging or deadline is None or fence.now() >= deadline:
            raise Fenced((self.shard,), None if fence.lagging else deadline)


class EarliestGuard(_GuardSockets):
    """The fence of a socket that carries several shards (a shared notifications channel): its
    writes stop at the **earliest** deadline among the shards of ``shards()`` still held; with no
    shard (a channel not yet carrying a topic) the member's earliest deadline of all.

    A shard no longer held is left out rather than fencing the socket: its sessions are leaving the
    channel (their topics unsubscribed by the next request, which carries only the shards that stay),
    and the channel is the other shards' too. With none held at all, it is fenced."""

    __slots__ = ("_shards",)

    def __init__(self, fence: WriteFence, shards: Callable[[], Collection[int]]) -> None:
        super().__init__(fence)
        self._shards = shards

    def deadline(self) -> float | None:
        fence = self._fence
        if fence.lagging:
            return None
        shards = self._shards()
        deadlines = fence.deadlines
        if not shards:
            return min(deadlines.values(), default=None)
        earliest: float | None = None
        for shard in shards:
            deadline = deadlines.get(shard)
            if deadline is not None and (earliest is None or deadline < earliest):
                earliest = deadline
        return earliest

    def passed(self) -> bool:
        deadline = self.deadline()
        return deadline is None or self._fence.now() >= deadline

    def check(self) -> None:
        deadline = self.deadline()
        if deadline is None or self._fence.now() >= deadline:
            raise Fenced(tuple(sorted(self._shards())), deadline)


Guard = ShardGuard | EarliestGuard


class WriteFence:
    """Every shard's deadline, its guards, and the watchdog that aborts and measures (module docstring).

    ``now``: the CLOCK_BOOTTIME source (a test's own); ``loop_lag_s``: the lag guard's bound;
    ``tick_s``: how often the watchdog wakes when no deadline is nearer.
    """

    def __init__(
        self, *, now: Now = boottime, loop_lag_s: float = DEFAULT_LOOP_LAG_S, tick_s: float = WATCH_TICK_S
    ) -> None:
        self.now = now
        self.loop_lag_s = loop_lag_s
        self.tick_s = tick_s
        #: shard → deadline, the shards held now (the leases' last word)
        self.deadlines: dict[int, float] = {}
        #: the loop stalled past its bound since the last renewal: every shard fenced
        self.lagging = False
        #: how many stalls past the bound the guard saw, and how many sockets the watchdog aborted
        self.stalls = 0
        self.aborted = 0
        self._shard_guards: dict[int, ShardGuard] = {}
        self._watched: dict[int, Guard] = {}
        self._changed = anyio.Event()

    # -- the leases' side --------------------------------------------------------------------------

    def follow(self, owned: Mapping[int, Lease]) -> None:
        """The leases' new word (``Leases.subscribe_deadlines``' callback, on the loop; and the
        supervisor's at every acquisition and loss): every shard held with its deadline. A renewal
        lifts the lag guard's fence; a shard gone is aborted now."""
        # (a lease without deadline is held for as long as the process runs)
        self.deadlines = {
            s: math.inf if lease.deadline is None else lease.deadline for s, lease in owned.items()
        }
        self.lagging = False
        self.enforce()
        self._wake()

    def guard(self, shard: int) -> ShardGuard:
        """The one guard of ``shard`` (every socket of its sessions shares it)."""
        guard = self._shard_guards.get(shard)
        if guard is None:
            guard = self._shard_guards[shard] = ShardGuard(self, shard)
        return guard

    def earliest(self, shards: Callable[[], Collection[int]]) -> EarliestGuard:
        """A guard for a socket carrying the shards ``shards()`` names (they may change)."""
        return EarliestGuard(self, shards)

    def watch(self, guard: Guard) -> None:
        """``guard`` holds sockets: the watchdog aborts them at its deadline."""
        self._watched[id(guard)] = guard

    def owned_count(self) -> int:
        return len(self.deadlines)

    # -- the watchdog ----------------------------------------------------------------------------------

    def enforce(self) -> int:
        """Abort the sockets of every guard whose deadline passed; returns how many."""
        aborted = 0
        for key, guard in list(self._watched.items()):
            if guard.passed():
                aborted += guard.abort_sockets()
            if guard.sockets == 0:
                del self._watched[key]
        if aborted:
            self.aborted += aborted
            _log.warning("write fence: %d socket(s) aborted at their shards' deadline", aborted)
        return aborted

    async def changed(self) -> None:
        """Return at the leases' next word (:meth:`follow`) or the watchdog's next pass."""
        await self._changed.wait()

    def _wake(self) -> None:
        event, self._changed = self._changed, anyio.Event()
        event.set()

    def _next_wait(self, now: float) -> float:
        ahead = [d - now for d in self.deadlines.values() if now < d < math.inf]
        return min([self.tick_s, *ahead])

    def stalled(self, lateness: float) -> None:
        """The loop woke the watchdog ``lateness`` s late: past the bound, every shard is fenced."""
        if lateness <= self.loop_lag_s:
            return
        self.stalls += 1
        if not self.lagging:
            _log.warning(
                "write fence: the event loop stalled %.3f s (bound %.3f s): every shard fenced until renewed",
                lateness,
                self.loop_lag_s,
            )
        self.lagging = True

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """The watchdog and loop-lag guard (module docstring); runs until cancelled."""
        task_status.started()
        while True:
            before = self.now()
            wait = self._next_wait(before)
            # the leases' word wakes it too (a shard lost: its sockets aborted at once)
            with anyio.move_on_after(wait):
                await self._changed.wait()
            # woken early by the leases' word: no lateness; past ``wait`` by more than the bound: a stall
            self.stalled(self.now() - before - wait)
            self.enforce()
            self._wake()
