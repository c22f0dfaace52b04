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
* **The fence.** ``fences`` (a fleet member's leases, a :class:`~supervisor.store.model.FenceSource`)
  makes every own-state write lock its shard's lease row ``FOR SHARE`` first and raise
  :class:`~supervisor.errors.LeaseLost` when this member no longer holds it (:func:`supervisor.store.sql.fence`);
  the connection ends a transaction left idle longer than :data:`IDLE_IN_TRANSACTION_S`, so a stopped
  member cannot keep its shards' lease rows locked. ``fences=None``: no fence (one host, ``store copy``).
* **Connection.** :func:`~supervisor.config_urls.store_url_problem` says what a URL may hold; the password
  comes apart (``passwordFile``) and never appears in an error; a TCP host gets ``sslmode=verify-full``
  unless the URL says ``verify-ca``.
* The schema and its migrations: :mod:`supervisor.store.pg_schema`. The calls and their SQL are
  SQLite's (:mod:`supervisor.store.calls`, bodies written once against :mod:`supervisor.store.sql`);
  :func:`run_async` runs a body here, each statement awaited in PostgreSQL's dialect;
  :mod:`supervisor.store.pg_sql` runs the desired-state commands' bodies inside a caller's transaction.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeVar

import anyio
import psycopg
from psycopg import AsyncConnection, errors
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from supervisor.config_urls import DEFAULT_SSLMODE, needs_tls, redacted, store_url_problem
from supervisor.errors import StoreError
from supervisor.store.calls import BodyOf, StoreCalls
from supervisor.store.model import FenceSource
from supervisor.store.pg_schema import prepare
from supervisor.store.schema import NewerSchema, NotOurs
from supervisor.store.sql import POSTGRES, Body, Mode, Query, Tx

__all__ = [
    "IDLE_IN_TRANSACTION_S",
    "PgStore",
    "connect",
    "connection_string",
    "describe",
    "execute",
    "run_async",
]

T = TypeVar("T")
HealthHook = Callable[[str | None], None]
Conn = AsyncConnection[tuple[Any, ...]]
#: how long opening a connection may take before the store says the database is unreachable
CONNECT_TIMEOUT_S: Final = 10
_APPLICATION_NAME: Final = "session-supervisor"
#: how long the store's connection may idle inside a transaction before the server ends it (and with
#: it the transaction and its locks): a stopped member (SIGSTOP, a frozen VM) inside a fenced write
#: holds its shard's lease row FOR SHARE, which would keep every other member from taking the shard
#: over; the server frees it after this, well within the lease's TTL (10 s by default). A call never
#: idles that long on its own: its statements follow one another on the loop (PostgreSQL docs, 20.11.1
#: "Statement Behavior", idle_in_transaction_session_timeout)
IDLE_IN_TRANSACTION_S: Final = 5.0
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


async def run_async(conn: Conn, body: Body[T]) -> T:
    """Run a transaction body (:mod:`supervisor.store.sql`) on ``conn``, in the transaction open there."""
    try:
        query = next(body)
        while True:
            query = body.send(await execute(conn, query))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


async def execute(conn: Conn, query: Query) -> Any:
    """One statement of a body, in PostgreSQL's dialect; what :class:`Mode` says it hands back."""
    sql = POSTGRES.text(query.sql)
    if query.mode is Mode.INSERT_ID:
        sql += f" RETURNING {query.returning}"
    if query.mode is Mode.MANY:
        async with conn.cursor() as cur:
            await cur.executemany(sql.encode(), query.params)
        return None
    cur = await conn.execute(sql.encode(), query.params)
    if query.mode is Mode.ALL:
        return await cur.fetchall()
    if query.mode is Mode.DO:
        return None
    row = await cur.fetchone()
    if query.mode is Mode.INSERT_ID:
        assert row is not None
        return row[0]
    return row


class PgStore(StoreCalls):
    """The store in a PostgreSQL schema (see the module docstring); open it with :meth:`open`.

    Its calls are :class:`~supervisor.store.calls.StoreCalls`'; each body runs in :meth:`_run`'s transaction."""

    RESERVED_META = RESERVED_META

    def __init__(
        self,
        where: str,
        conninfo: str,
        conn: Conn,
        *,
        epoch: int,
        on_health: HealthHook | None,
        fences: FenceSource | None = None,
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
        #: the fleet member's leases the own-state writes are fenced on (None: no fence)
        self._tx = Tx(POSTGRES, fences, epoch)

    # ------------------------------------------------------------------ opening
    @classmethod
    async def open(
        cls,
        url: str,
        *,
        password: str | None = None,
        on_health: HealthHook | None = None,
        fences: FenceSource | None = None,
    ) -> PgStore:
        """Connect, identify and migrate the schema, take the next epoch; raises :class:`StoreError`
        naming the URL and the problem (nothing is written to a schema that is not the store's).

        ``fences``: a fleet member's leases; every own-state write is fenced on them (docs/store.md,
        "The fence"). None: no fence (one host, or a tool such as ``store copy``)."""
        conninfo = connection_string(url, password)
        try:
            conn = await connect(conninfo)
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
        return cls(url, conninfo, conn, epoch=epoch, on_health=on_health, fences=fences)

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
                        conn = self._conn = await connect(self._conninfo)
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

    # ------------------------------------------------------------------ the calls (supervisor/store/calls.py)
    async def _call(self, body_of: BodyOf[T]) -> T:
        return await self._run(lambda conn: run_async(conn, body_of(self._tx)))

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


async def connect(conninfo: str, *, idle_in_transaction_s: float = IDLE_IN_TRANSACTION_S) -> Conn:
    """The store's connection: autocommit (each call's transaction is opened explicitly,
    ``conn.transaction()``), ended by the server when it idles inside a transaction for longer than
    ``idle_in_transaction_s`` (:data:`IDLE_IN_TRANSACTION_S`)."""
    conn = await AsyncConnection.connect(conninfo, autocommit=True)
    try:
        # set_config: SET takes no parameters; false: for the session, not the transaction
        await conn.execute(
            "SELECT set_config('idle_in_transaction_session_timeout', %s, false)",
            (f"{max(1, round(idle_in_transaction_s * 1000))}ms",),
        )
    except BaseException:
        await conn.close()
        raise
    return conn


def _is_health(exc: psycopg.Error) -> bool:
    """Whether the error is the database's state (not one statement's): the store is degraded by it."""
    return isinstance(
        exc,
        psycopg.OperationalError
        | errors.DiskFull
        | errors.ReadOnlySqlTransaction
        | errors.InsufficientPrivilege,
    )
