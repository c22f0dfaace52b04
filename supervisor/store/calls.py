"""The :class:`~supervisor.store.model.Store` protocol's calls, defined once for both stores.

:class:`StoreCalls` maps each call to its transaction body (``sql_sessions.py``, ``sql_outbox.py``,
written once against :mod:`supervisor.store.sql`); a store subclasses it and says only how a body
runs, in :meth:`StoreCalls._call`: :class:`~supervisor.store.sqlite.SqliteStore` queues it for its
one writer thread (a savepoint of a group-committed transaction), :class:`~supervisor.store.pg.PgStore`
runs it in a transaction of its own on its connection. A body is handed over as a function of the
store's :class:`~supervisor.store.sql.Tx` so that the store can start it afresh when it must run a
transaction again (SQLite's retry of a batch after a checkpoint).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TypeVar

from supervisor.store import sql_outbox, sql_sessions
from supervisor.store.model import (
    Claim,
    DesiredSession,
    LedgerChange,
    LedgerEntry,
    LeftSession,
    Mismatch,
    NewMismatch,
    OpenedSession,
    OutboxRow,
    Resolution,
    RowChange,
    ServerSession,
    Submission,
    SubmitResult,
    UpdateOutcome,
)
from supervisor.store.sql import Body, Tx

__all__ = ["BodyOf", "StoreCalls"]

T = TypeVar("T")
#: a call's transaction body, made for the store's :class:`Tx`
BodyOf = Callable[[Tx], Body[T]]


class StoreCalls:
    """Every data call of the ``Store`` protocol, over :meth:`_call` (see the module docstring)."""

    #: ``meta`` keys the store writes itself, refused to :meth:`write_meta`
    RESERVED_META: frozenset[str] = frozenset({"epoch"})

    async def _call(self, body_of: BodyOf[T]) -> T:
        """Run the body in one transaction of the store; its result once that committed."""
        raise NotImplementedError

    # ------------------------------------------------------------------ desired sessions, session ledger
    async def desired_sessions(self, shards: Collection[int] | None = None) -> dict[str, DesiredSession]:
        return await self._call(lambda tx: sql_sessions.desired_sessions(tx, shards))

    async def set_desired(self, desired: DesiredSession, *, fenced: bool = True) -> None:
        await self._call(lambda tx: sql_sessions.set_desired(tx, desired, fenced=fenced))

    async def add_sessions(self, added: Sequence[DesiredSession]) -> None:
        rows = list(added)
        await self._call(lambda tx: sql_sessions.add_sessions(tx, rows))

    async def forget_desired(self, session_id: str) -> None:
        await self._call(lambda tx: sql_sessions.forget_desired(tx, session_id))

    async def server_sessions(self, shards: Collection[int] | None = None) -> dict[str, ServerSession]:
        return await self._call(lambda tx: sql_sessions.server_sessions(tx, shards))

    async def session_opening(self, session: ServerSession) -> None:
        await self._call(lambda tx: sql_sessions.session_opening(tx, session))

    async def sessions_opening(
        self, desired: Sequence[DesiredSession], sessions: Sequence[ServerSession]
    ) -> None:
        wanted, opening = list(desired), list(sessions)
        await self._call(lambda tx: sql_sessions.sessions_opening(tx, wanted, opening))

    async def session_opened(
        self, session_id: str, conversation_id: str | None, platform_session_id: str | None
    ) -> None:
        await self._call(
            lambda tx: sql_sessions.session_opened(tx, session_id, conversation_id, platform_session_id)
        )

    async def sessions_opened(self, opened: Sequence[OpenedSession]) -> None:
        rows = list(opened)
        await self._call(lambda tx: sql_sessions.sessions_opened(tx, rows))

    async def session_closed(self, session_id: str, outcome: str, closed_at: float) -> None:
        await self._call(lambda tx: sql_sessions.session_closed(tx, session_id, outcome, closed_at))

    async def session_left(self, session_id: str, left_at: float, platform_session_id: str | None) -> None:
        await self._call(lambda tx: sql_sessions.session_left(tx, session_id, left_at, platform_session_id))

    async def sessions_left(self, left: Sequence[LeftSession]) -> None:
        rows = list(left)
        await self._call(lambda tx: sql_sessions.sessions_left(tx, rows))

    # ------------------------------------------------------------------ outbox, ledger, mismatches
    async def submit(self, submission: Submission, max_depth: int) -> SubmitResult:
        return await self._call(lambda tx: sql_outbox.submit(tx, submission, max_depth))

    async def live_rows(self, shards: Collection[int] | None = None) -> list[OutboxRow]:
        return await self._call(lambda tx: sql_outbox.live_rows(tx, shards))

    async def ledger(self, request_ids: Sequence[int] | None = None) -> dict[int, LedgerEntry]:
        return await self._call(lambda tx: sql_outbox.ledger(tx, request_ids))

    async def claim(
        self,
        conversation_id: str,
        before: Mapping[str, str],
        *,
        idempotency_key: str,
        participant_id: str | None,
        endpoint: str,
        sent_at: float,
        limit: int,
        attempts: int = 1,
    ) -> Claim | None:
        return await self._call(
            lambda tx: sql_outbox.claim(
                tx,
                conversation_id,
                before,
                idempotency_key=idempotency_key,
                participant_id=participant_id,
                endpoint=endpoint,
                sent_at=sent_at,
                limit=limit,
                attempts=attempts,
            )
        )

    async def count_attempt(self, request_id: int) -> int:
        return await self._call(lambda tx: sql_outbox.count_attempt(tx, request_id))

    async def record(
        self,
        rows: Sequence[RowChange] = (),
        ledger: LedgerChange | None = None,
        mismatches: Sequence[NewMismatch] = (),
    ) -> list[int]:
        return await self._call(lambda tx: sql_outbox.record(tx, rows, ledger, mismatches))

    async def mismatches(self, *, include_resolved: bool = False) -> list[Mismatch]:
        return await self._call(lambda tx: sql_outbox.mismatches(tx, include_resolved))

    async def resolve(self, mismatch_id: int, resolution: Resolution, at: float) -> Mismatch:
        return await self._call(lambda tx: sql_outbox.resolve(tx, mismatch_id, resolution, at))

    async def depth(self, tenant: str) -> int:
        return await self._call(lambda tx: sql_outbox.depth(tx, tenant))

    async def update_outcomes(self) -> dict[str, UpdateOutcome]:
        return await self._call(sql_outbox.update_outcomes)

    async def counts(self) -> dict[str, int]:
        return await self._call(sql_outbox.counts)

    # ------------------------------------------------------------------ meta records
    async def read_meta(self, prefix: str) -> dict[str, str]:
        """The ``meta`` rows whose key starts with ``prefix`` (a plain prefix: no LIKE pattern)."""
        return await self._call(lambda tx: sql_outbox.read_meta(tx, prefix))

    async def write_meta(self, values: Mapping[str, str]) -> None:
        """Insert or replace ``meta`` rows, in one transaction; the keys the store keeps itself are refused."""
        rows = list(values.items())
        if any(key in self.RESERVED_META for key, _ in rows):
            raise ValueError(f"meta keys {sorted(self.RESERVED_META)} are the store's own")
        await self._call(lambda tx: sql_outbox.write_meta(tx, rows))
