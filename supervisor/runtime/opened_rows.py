"""The rows of the sessions that went active, written together (:class:`OpenedRows`).

Each session that goes active writes its server row's ``open`` state, its conversation and its
platform session id (supervisor/runtime/durable.py): what a restart takes over. A takeover's or a
start-up's sessions go active together, and one transaction each (a fence check, an update, a commit)
held a fleet member's one PostgreSQL connection for a second and more while the write-ahead of the
sessions still to start waited behind them. Here they are **group-committed**
(:mod:`supervisor.runtime.group_commit`) in one :meth:`Store.sessions_opened` transaction each. A group
the store refuses as a whole (a shard among them lost meanwhile: ``LeaseLost``) is written again row by
row, so the others' rows are not lost with it; any other failure is the store's health to report.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

from supervisor.errors import StoreError
from supervisor.runtime.group_commit import GroupCommit
from supervisor.store.model import OpenedSession, Store

__all__ = ["OpenedRows"]


class OpenedRows:
    """Opened rows group-committed to ``store`` (module docstring)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._groups: GroupCommit[OpenedSession] = GroupCommit(self._commit)
        #: groups written again row by row
        self.split = 0

    @property
    def groups(self) -> int:
        """Groups committed (a transaction each, when the store took them whole)."""
        return self._groups.groups

    async def write(self, row: OpenedSession) -> None:
        """Return once ``row`` is written (or could not be: never raises a store failure)."""
        await self._groups.write(row)

    async def _commit(self, rows: Sequence[OpenedSession]) -> None:
        try:
            await self._store.sessions_opened(rows)
        except StoreError:
            if len(rows) == 1:
                return
            self.split += 1
            for row in rows:
                with contextlib.suppress(StoreError):
                    await self._store.session_opened(
                        row.session_id, row.conversation_id, row.platform_session_id
                    )
