"""The rows of the sessions a stop hands over, written together (:class:`LeftRows`).

A drain hands every session over at once: each runner, once its connection is let go of, writes its
row (``left_at`` and CXone's rolling id: what the next owner polls on). Written one transaction each,
a few hundred of them queued on the store's one connection for most of a second (a fleet's short
acceptance run measured 0.6 s for 218), and a fleet member frees its shards for its peers only once
they are written (its fence refuses a write after that). Here they are **group-committed**, as
PostgreSQL does with the WAL flushes of concurrent commits (PostgreSQL docs, "WAL Configuration",
``commit_delay``): a row joins the batch being gathered; whoever finds no batch
being written writes the gathered one in one transaction (:meth:`Store.sessions_left`), and every
caller returns once the transaction holding its row has committed. Nothing waits on a timer: the
batch is whatever arrived while the previous one was being written.

A shard no longer held here (:class:`~supervisor.errors.LeaseLost`) costs only its own rows: the
batch is written again without them (its new owner has the shard's rows). Any other store failure
drops the batch, as a single write's failure would (the store reports its health).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import anyio

from supervisor.errors import LeaseLost, StoreError
from supervisor.store.model import LeftSession, Store
from supervisor.store.shards import shard_of

__all__ = ["LeftRows"]


@dataclass
class _Batch:
    rows: list[LeftSession] = field(default_factory=list)
    written: bool = False


class LeftRows:
    """Handed-over rows group-committed to ``store`` (module docstring)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._gathering = _Batch()
        self._writing = anyio.Lock()
        #: transactions written, for tests and figures
        self.transactions = 0

    async def write(self, row: LeftSession) -> None:
        """Return once ``row`` is written (or could not be: never raises a store failure)."""
        batch = self._gathering
        batch.rows.append(row)
        async with self._writing:
            if batch.written:
                return  # written by the caller that held the lock before us
            self._gathering = _Batch()
            with contextlib.suppress(StoreError):
                await self._write(batch.rows)
            batch.written = True

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
