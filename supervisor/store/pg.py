"""The :class:`~supervisor.store.model.Store` on PostgreSQL (psycopg 3, async): ``[store] url = "postgresql://..."``.

* **One connection, one call at a time.** Every call is one transaction on the store's connection
  (READ COMMITTED, PostgreSQL's default), in order, under an asyncio lock; its result is handed back
  only once its ``COMMIT`` succeeded. A call that has started is not cancelled half-way (its
  transaction runs to its commit or rollback), as with SQLite.
* **Durability** is the server's: a ``COMMIT`` returns once the WAL is flushed (``synchronous_commit``
  on, PostgreSQL's default; docs/store.md, "PostgreSQL").
* **Health.** A call that fails for the database (unreachable, a dropped connection, a full disk, a
  read-only server) fails with :class:`~supervisor.errors.StoreError` and marks the store
  ``degraded`` with the reason until a later call succeeds; ``on_health`` hears both moves. A broken
  connection is opened again at the next call.
* **Connection.** :func:`~supervisor.config_urls.store_url_problem` says what a URL may hold; the password
  comes apart (``passwordFile``) and never appears in an error; a TCP host gets ``sslmode=verify-full``
  unless the URL says ``verify-ca``.
* The schema and its migrations: :mod:`supervisor.store.pg_schema`; the SQL: :mod:`supervisor.store.pg_sql`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from typing import Any, Final, TypeVar

import anyio
import psycopg
from psycopg import AsyncConnection, errors
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from supervisor.config_urls import DEFAULT_SSLMODE, needs_tls, redacted, store_url_problem
from supervisor.errors import StoreError
from supervisor.store import pg_sql
from supervisor.store.model import (
    Claim,
    DesiredSession,
    LedgerChange,
    LedgerEntry,
    Mismatch,
    NewMismatch,
    OutboxRow,
    Resolution,
    RowChange,
    ServerSession,
    Submission,
    SubmitResult,
    UpdateOutcome,
)
from supervisor.store.pg_schema import prepare
from supervisor.store.schema import NewerSchema, NotOurs

__all__ = ["PgStore", "connection_string", "describe"]

T = TypeVar("T")
HealthHook = Callable[[str | None], None]
Conn = AsyncConnection[tuple[Any, ...]]
#: how long opening a connection may take before the store says the database is unreachable
CONNECT_TIMEOUT_S: Final = 10
_APPLICATION_NAME: Final = "session-supervisor"
#: ``meta`` keys the store writes itself: whose tables, their version, the owner epoch
RESERVED_META: Final = frozenset({"epoch", "application", "schema_version"})


def describe(exc: BaseException) -> str:
    """A PostgreSQL error in words an operator acts on (its first line kept in parentheses; never the password)."""
    text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    if isinstance(exc, errors.DiskFull):
        return f"the database's disk is full ({text})"
    if isinstance(exc, errors.ReadOnlySqlTransaction):
        return f"the database is read-only: cannot write ({text})"
    if isinstance(exc, errors.InsufficientPrivilege):
        return f"the role may not do this ({text}): docs/store.md, 'PostgreSQL', says what it needs"
    if isinstance(exc, psycopg.OperationalError):
        return f"cannot reach the database ({text})"
    return text


def connection_string(url: str, password: str | None = None) -> str:
    """The libpq connection string for ``url``: its TLS default added, the password (from its file) set.

    Raises :class:`StoreError` for a URL :func:`store_url_problem` refuses.
    """
    problem = store_url_problem(url)
    if problem is not None:
        raise StoreError(redacted(url), problem)
    extra: dict[str, Any] = {"connect_timeout": CONNECT_TIMEOUT_S, "application_name": _APPLICATION_NAME}
    try:
        given = conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        raise StoreError(url, f"not a valid connection URL ({describe(exc)})") from None
    if needs_tls(url) and "sslmode" not in given:
        extra["sslmode"] = DEFAULT_SSLMODE
    if password is not None:
        extra["password"] = password
    for key in ("connect_timeout", "application_name"):
        if key in given:
            del extra[key]
    return make_conninfo(url, **extra)


class PgStore:
    """The store in a PostgreSQL schema (see the module docstring); open it with :meth:`open`."""

    def __init__(
        self, where: str, conninfo: str, conn: Conn, *, epoch: int, on_health: HealthHook | None
    ) -> None:
        #: what errors name: the URL as configured (it holds no password)
        self.path = where
        self.epoch = epoch
        self.degraded: str | None = None
        self.commits = 0
        self._conninfo = conninfo
        self._conn: Conn | None = conn
        self._closed = False
        self._on_health = on_health
        self._lock = anyio.Lock()

    # ------------------------------------------------------------------ opening
    @classmethod
    async def open(
        cls, url: str, *, password: str | None = None, on_health: HealthHook | None = None
    ) -> PgStore:
        """Connect, identify and migrate the schema, take the next epoch; raises :class:`StoreError`
        naming the URL and the problem (nothing is written to a schema that is not the store's)."""
        conninfo = connection_string(url, password)
        try:
            conn = await _connect(conninfo)
        except psycopg.Error as exc:
            raise StoreError(url, describe(exc)) from None
        try:
            epoch = await prepare(conn)
        except (NewerSchema, NotOurs) as exc:
            await conn.close()
            raise StoreError(url, str(exc)) from None
        except psycopg.Error as exc:
            await conn.close()
            raise StoreError(url, describe(exc)) from None
        return cls(url, conninfo, conn, epoch=epoch, on_health=on_health)

    async def aclose(self) -> None:
        """Close the connection once the call in progress is done (idempotent)."""
        async with self._lock:
            self._closed = True
            conn, self._conn = self._conn, None
            if conn is not None:
                with anyio.CancelScope(shield=True):
                    await conn.close()

    # ------------------------------------------------------------------ one call, one transaction
    async def _run(self, fn: Callable[[Conn], Awaitable[T]]) -> T:
        async with self._lock:
            if self._closed:
                raise StoreError(self.path, "the store is closed")
            # not cancellable: a transaction that started runs to its commit (or rollback)
            with anyio.CancelScope(shield=True):
                try:
                    conn = self._conn
                    if conn is None or conn.broken or conn.closed:
                        conn = self._conn = await _connect(self._conninfo)
                    async with conn.transaction():
                        result = await fn(conn)
                except psycopg.Error as exc:
                    problem = describe(exc)
                    if _is_health(exc):
                        self._health(problem)
                    raise StoreError(self.path, problem) from None
            self.commits += 1
            self._health(None)
            return result

    async def run_in_transaction(self, fn: Callable[[Conn], Awaitable[T]]) -> T:
        """``fn`` in one transaction on the store's connection, as the store's own calls run (in
        order, to its commit, degraded on a database failure): the fleet's statements beside the
        store's, such as a desired-state write and its ``pg_notify`` committed together
        (supervisor/fleet/desired.py) or the owner lookup (supervisor/fleet/owners.py)."""
        return await self._run(fn)

    def _health(self, problem: str | None) -> None:
        if problem == self.degraded:
            return
        self.degraded = problem
        if self._on_health is not None:
            self._on_health(problem)

    # ------------------------------------------------------------------ desired sessions, session ledger
    async def desired_sessions(self, shards: Collection[int] | None = None) -> dict[str, DesiredSession]:
        return await self._run(lambda conn: pg_sql.desired_sessions(conn, shards))

    async def set_desired(self, desired: DesiredSession) -> None:
        await self._run(lambda conn: pg_sql.set_desired(conn, desired))

    async def add_sessions(self, added: Sequence[DesiredSession]) -> None:
        rows = list(added)
        await self._run(lambda conn: pg_sql.add_sessions(conn, rows))

    async def forget_desired(self, session_id: str) -> None:
        await self._run(lambda conn: pg_sql.forget_desired(conn, session_id))

    async def server_sessions(self, shards: Collection[int] | None = None) -> dict[str, ServerSession]:
        return await self._run(lambda conn: pg_sql.server_sessions(conn, shards))

    async def session_opening(self, session: ServerSession) -> None:
        await self._run(lambda conn: pg_sql.session_opening(conn, session))

    async def session_opened(
        self, session_id: str, conversation_id: str | None, platform_session_id: str | None
    ) -> None:
        await self._run(
            lambda conn: pg_sql.session_opened(conn, session_id, conversation_id, platform_session_id)
        )

    async def session_closed(self, session_id: str, outcome: str, closed_at: float) -> None:
        await self._run(lambda conn: pg_sql.session_closed(conn, session_id, outcome, closed_at))

    async def session_left(self, session_id: str, left_at: float, platform_session_id: str | None) -> None:
        await self._run(lambda conn: pg_sql.session_left(conn, session_id, left_at, platform_session_id))

    # ------------------------------------------------------------------ outbox, ledger, mismatches
    async def submit(self, submission: Submission, max_depth: int) -> SubmitResult:
        return await self._run(lambda conn: pg_sql.submit(conn, submission, max_depth))

    async def live_rows(self, shards: Collection[int] | None = None) -> list[OutboxRow]:
        return await self._run(lambda conn: pg_sql.live_rows(conn, shards))

    async def ledger(self, request_ids: Sequence[int] | None = None) -> dict[int, LedgerEntry]:
        return await self._run(lambda conn: pg_sql.ledger(conn, request_ids))

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
        return await self._run(
            lambda conn: pg_sql.claim(
                conn,
                conversation_id,
                before,
                idempotency_key=idempotency_key,
                participant_id=participant_id,
                endpoint=endpoint,
                sent_at=sent_at,
                limit=limit,
                epoch=self.epoch,
                attempts=attempts,
            )
        )

    async def count_attempt(self, request_id: int) -> int:
        return await self._run(lambda conn: pg_sql.count_attempt(conn, request_id))

    async def record(
        self,
        rows: Sequence[RowChange] = (),
        ledger: LedgerChange | None = None,
        mismatches: Sequence[NewMismatch] = (),
    ) -> list[int]:
        return await self._run(lambda conn: pg_sql.record(conn, rows, ledger, mismatches))

    async def mismatches(self, *, include_resolved: bool = False) -> list[Mismatch]:
        return await self._run(lambda conn: pg_sql.mismatches(conn, include_resolved))

    async def resolve(self, mismatch_id: int, resolution: Resolution, at: float) -> Mismatch:
        return await self._run(lambda conn: pg_sql.resolve(conn, mismatch_id, resolution, at))

    async def depth(self, tenant: str) -> int:
        return await self._run(lambda conn: pg_sql.depth(conn, tenant))

    async def update_outcomes(self) -> dict[str, UpdateOutcome]:
        return await self._run(pg_sql.update_outcomes)

    async def counts(self) -> dict[str, int]:
        return await self._run(pg_sql.counts)

    # ------------------------------------------------------------------ meta records
    async def read_meta(self, prefix: str) -> dict[str, str]:
        """The ``meta`` rows whose key starts with ``prefix`` (a plain prefix: no LIKE pattern)."""
        return await self._run(lambda conn: pg_sql.read_meta(conn, prefix))

    async def write_meta(self, values: Mapping[str, str]) -> None:
        """Insert or replace ``meta`` rows, in one transaction; the keys the store keeps itself are refused."""
        rows = list(values.items())
        if any(key in RESERVED_META for key, _ in rows):
            raise ValueError(f"meta keys {sorted(RESERVED_META)} are the store's own")
        await self._run(lambda conn: pg_sql.write_meta(conn, rows))

    async def integrity_check(self) -> str:
        """ "ok" when every outbox row a mismatch or an update refers to is there (PostgreSQL keeps its
        own pages: its checks are the server administrator's, ``amcheck``)."""

        async def check(conn: Conn) -> str:
            cur = await conn.execute(
                "SELECT (SELECT COUNT(*) FROM update_rows ur LEFT JOIN outbox o ON o.id = ur.row_id "
                "WHERE o.id IS NULL) + (SELECT COUNT(*) FROM mismatches m LEFT JOIN outbox o ON o.id = m.row_id "
                "WHERE o.id IS NULL)"
            )
            row = await cur.fetchone()
            dangling = int(row[0]) if row is not None else 0
            return "ok" if dangling == 0 else f"{dangling} dangling reference(s) to outbox rows"

        return await self._run(check)


async def _connect(conninfo: str) -> Conn:
    # autocommit: each call's transaction is opened explicitly (conn.transaction())
    return await AsyncConnection.connect(conninfo, autocommit=True)


def _is_health(exc: psycopg.Error) -> bool:
    """Whether the error is the database's state (not one statement's): the store is degraded by it."""
    return isinstance(
        exc,
        psycopg.OperationalError
        | errors.DiskFull
        | errors.ReadOnlySqlTransaction
        | errors.InsufficientPrivilege,
    )
