"""Group commit: writes that arrive together, committed together (:class:`GroupCommit`).

A store that runs one transaction at a time (a fleet member's PostgreSQL connection, SQLite's one
writer) queues a burst of single-row writes behind one another: a takeover's sessions, or a drain's
handed-over rows, waited for most of a second for their turn. A database commits its log the same
way when many transactions commit at once (PostgreSQL docs, "WAL Configuration", ``commit_delay``):
the items that arrive while a commit runs are written together by the next one. Here:

* an item joins the group being gathered; if no commit is running, its caller becomes the writer
  and commits groups until none is left; otherwise it waits for the commit of its own group;
* every caller returns once the commit holding its item has ended (what the commit function did with
  a failure is the commit function's: :mod:`supervisor.runtime.write_ahead`,
  :mod:`supervisor.runtime.left_rows`);
* nothing waits on a timer: a group is whatever arrived while the previous one was being written
  (the first, what arrived within one turn of the event loop);
* the writer's commits are shielded from cancellation: a writer cancelled (its session handed over)
  still writes the groups gathered meanwhile, or their callers would wait for a writer that is gone.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import anyio
import anyio.lowlevel

__all__ = ["GroupCommit"]

T = TypeVar("T")


@dataclass
class _Group(Generic[T]):
    """Items that arrived while the previous group was being committed."""

    items: list[T] = field(default_factory=list)
    done: anyio.Event = field(default_factory=anyio.Event)


class GroupCommit(Generic[T]):
    """Items committed in groups by ``commit`` (module docstring). An exception ``commit`` raises ends
    its group's callers' waits as a commit does, the groups gathered meanwhile are still committed, and
    it reaches the writer alone, once they are: a commit function keeps what its callers must see."""

    def __init__(self, commit: Callable[[Sequence[T]], Awaitable[None]]) -> None:
        self._commit = commit
        self._gathering: _Group[T] | None = None
        self._writing = False
        #: the groups committed (one call of ``commit`` each), for tests and figures
        self.groups = 0

    async def write(self, item: T) -> None:
        """Return once the group holding ``item`` has been committed."""
        group = self._gathering
        if group is None:
            group = self._gathering = _Group()
        group.items.append(item)
        if self._writing:
            await group.done.wait()
            return
        self._writing = True
        failure: Exception | None = None
        with anyio.CancelScope(shield=True):
            try:
                # one turn of the loop before the first commit: the writes started in the same turn
                # as this one (a drain's hundreds of handed-over rows) join its group, at no timer's cost
                await anyio.lowlevel.checkpoint()
                while self._gathering is not None:
                    current, self._gathering = self._gathering, None
                    try:
                        self.groups += 1
                        await self._commit(current.items)
                    except Exception as exc:  # the groups gathered meanwhile are still written
                        failure = failure or exc
                    finally:
                        current.done.set()
            finally:
                self._writing = False
        if failure is not None:
            raise failure
