"""The rows of the sessions a stop hands over, written together (:class:`LeftRows`).

A drain hands every session over at once: each runner, once its connection is let go of, writes its
row (``left_at`` and CXone's rolling id: what the next owner polls on). Written one transaction each,
a few hundred of them queued on the store's one connection for most of a second (a fleet's short
acceptance run measured 0.6 s for 218), and a fleet member frees its shards for its peers only once
they are written (its fence refuses a write after that). Here they are **group-committed**
(:mod:`supervisor.runtime.group_commit`): every caller returns once the transaction holding its row
(:meth:`Store.sessions_left`) has committed.

A shard no longer held here (:class:`~supervisor.errors.LeaseLost`) costs only its own rows: the
batch is written again without them (its new owner has the shard's rows). Any other store failure
drops the batch, as a single write's failure would (the store reports its health).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

from supervisor.errors import LeaseLost, StoreError
from supervisor.runtime.group_commit import GroupCommit
from supervisor.store.model import LeftSession, Store
from supervisor.store.shards import shard_of

__all__ = ["LeftRows"]


class LeftRows:
    """Handed-over rows group-committed to ``store`` (module docstring)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._groups: GroupCommit[LeftSession] = GroupCommit(self._commit)
        #: transactions tried (a batch written again without a lost shard's rows counts again)
        self.transactions = 0

    async def write(self, row: LeftSession) -> None:
        """Return once ``row`` is written (or could not be: never raises a store failure)."""
        await self._groups.write(row)

    async def _commit(self, rows: Sequence[LeftSession]) -> None:
        with contextlib.suppress(StoreError):
            await self._write(rows)

    async def _write(self, rows: Sequence[LeftSession]) -> None:
        while rows:
            try:
                self.transactions += 1
                await self._store.sessions_left(rows)
                return
            except LeaseLost as lost:
                # the shard's rows are its new owner's now; the others are still this member's to write
                left = [row for row in rows if shard_of(row.session_id) != lost.shard]
                if len(left) == len(rows):
                    raise  # a shard none of the rows is of: nothing to leave out
                rows = left
