"""The sessions' write-ahead, committed in groups (a fleet member's; docs/runtime.md, "Shards and leases").

Before its first connection attempt each session writes its desired row and its server row
(supervisor/runtime/durable.py, ``opening``): what a crash, or the shard's next owner, needs. A fleet
member's store is one PostgreSQL connection, one transaction at a time (supervisor/store/pg.py), and
each of those writes is a transaction of its own with its fence check: the sessions of the shards a
member just acquired (a hundred and more, started together) queued behind one another for it, in the
order of the configuration, so a takeover's last sessions (its CXone ones, listed last) made their
first attempt seconds after the acquisition, whatever the pace allowed.

:class:`WriteAhead` commits them in groups (:mod:`supervisor.runtime.group_commit`): a burst of sessions
costs a few transactions, not two per session. A group the store refuses as a whole (a shard among them
lost meanwhile: ``LeaseLost``) is written again row by row, so the others' rows are not lost with it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

from supervisor.errors import StoreError
from supervisor.runtime.group_commit import GroupCommit
from supervisor.store import DesiredSession, ServerSession, Store

__all__ = ["WriteAhead"]

Rows = tuple[DesiredSession, ServerSession]


class WriteAhead:
    """Group commit of the sessions' write-ahead rows on ``store`` (module docstring)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._groups: GroupCommit[Rows] = GroupCommit(self._commit)
        #: groups written again row by row (a shard among them lost, or the database gone)
        self.split = 0

    @property
    def groups(self) -> int:
        """Groups committed (a transaction each, when the store took them whole)."""
        return self._groups.groups

    async def write(self, desired: DesiredSession, session: ServerSession) -> None:
        """Return once ``desired`` and ``session`` are written (or the store refused them: its health
        hook reports a store that cannot write; the session goes on, as a single write's would)."""
        await self._groups.write((desired, session))

    async def _commit(self, rows: Sequence[Rows]) -> None:
        try:
            await self._store.sessions_opening([d for d, _ in rows], [s for _, s in rows])
        except StoreError:
            # one shard lost (or the database gone): each row on its own, as before the grouping
            self.split += 1
            for desired, session in rows:
                with contextlib.suppress(StoreError):
                    await self._store.set_desired(desired)
                with contextlib.suppress(StoreError):
                    await self._store.session_opening(session)
