"""The sessions' write-ahead, committed in groups (a fleet member's; docs/runtime.md, "Shards and leases").

Before its first connection attempt each session writes its desired row and its server row
(supervisor/runtime/durable.py, ``opening``): what a crash, or the shard's next owner, needs. A fleet
member's store is one PostgreSQL connection, one transaction at a time (supervisor/store/pg.py), and
each of those writes is a transaction of its own with its fence check: the sessions of the shards a
member just acquired (a hundred and more, started together) queued behind one another for it, in the
order of the configuration, so a takeover's last sessions (its CXone ones, listed last) made their
first attempt seconds after the acquisition, whatever the pace allowed.

:class:`WriteAhead` commits them the way a database commits a log (group commit): the rows that arrive
while a transaction runs are written together by the next one, so a burst of sessions costs a few
transactions, not two per session. A group the store refuses as a whole (a shard among them lost
meanwhile: ``LeaseLost``) is written again row by row, so the others' rows are not lost with it.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import anyio

from supervisor.errors import StoreError
from supervisor.store import DesiredSession, ServerSession, Store

__all__ = ["WriteAhead"]


@dataclass
class _Group:
    """Rows that arrived while the previous group was being written."""

    desired: list[DesiredSession] = field(default_factory=list)
    sessions: list[ServerSession] = field(default_factory=list)
    done: anyio.Event = field(default_factory=anyio.Event)


class WriteAhead:
    """Group commit of the sessions' write-ahead rows on ``store`` (module docstring)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._gathering: _Group | None = None
        self._writing = False
        #: transactions committed (a group each), and groups written again row by row
        self.groups = 0
        self.split = 0

    async def write(self, desired: DesiredSession, session: ServerSession) -> None:
        """Return once ``desired`` and ``session`` are written (or the store refused them: its health
        hook reports a store that cannot write; the session goes on, as a single write's would)."""
        group = self._gathering
        if group is None:
            group = self._gathering = _Group()
        group.desired.append(desired)
        group.sessions.append(session)
        if self._writing:
            await group.done.wait()
            return
        self._writing = True
        # shielded: the groups gathered meanwhile are written even if this session is cancelled (handed
        # over), or their sessions would wait for a writer that is gone
        with anyio.CancelScope(shield=True):
            try:
                while self._gathering is not None:
                    current, self._gathering = self._gathering, None
                    await self._commit(current)
            finally:
                self._writing = False

    async def _commit(self, group: _Group) -> None:
        try:
            await self._store.sessions_opening(group.desired, group.sessions)
            self.groups += 1
        except StoreError:
            # one shard lost (or the database gone): each row on its own, as before the grouping
            self.split += 1
            for desired, session in zip(group.desired, group.sessions, strict=True):
                with contextlib.suppress(StoreError):
                    await self._store.set_desired(desired)
                with contextlib.suppress(StoreError):
                    await self._store.session_opening(session)
        finally:
            group.done.set()
