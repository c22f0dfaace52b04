"""The store's transaction bodies, written once for SQLite and PostgreSQL: the protocol they speak.

**Why generators.** SQLite's driver is synchronous (``sqlite3``, run in the store's worker thread)
and PostgreSQL's is asynchronous (psycopg 3's ``AsyncConnection``, on the event loop). A body that
called either driver would have to be written twice, once plain and once with ``await``; so a body
calls neither. It *yields* each statement as a :class:`Query` and is sent back its result, the
"sans-I/O" shape (https://sans-io.readthedocs.io/): ``row = yield from one("SELECT ...", params)``.
Each store runs a body with its own small driver, inside the transaction it opened for the call:
``run_sync`` in ``sqlite.py`` (in the worker thread, within the job's savepoint) and ``run_async``
in ``pg.py`` (awaiting each statement). What a body decides (coalescing, superseding, the fence, the
outcomes) is plain Python between its statements, the same code on both stores. (The other way to
one definition, psycopg's synchronous connection in a worker thread like SQLite's, would change how
PgStore runs, is cancelled and reconnects; the stores' own machinery stays as it was here, and only
the few lines that turn a :class:`Query` into a driver call differ.)

**What differs between the dialects** is all in :class:`Dialect`, and only where the SQL itself
cannot be the same text:

* placeholders: bodies write ``?``; PostgreSQL's driver gets ``%s`` (:meth:`Dialect.text`);
* a generated id: bodies ask for it with :func:`insert_id` (SQLite: the cursor's ``lastrowid``;
  PostgreSQL: the same ``INSERT`` with ``RETURNING <column>``: an identity has no rowid);
* a list parameter (the shards read, the request ids): :meth:`Dialect.in_list` (SQLite: a JSON array
  through ``json_each``, https://sqlite.org/json1.html#jeach; PostgreSQL: ``= ANY(array)``), one
  parameter whatever the count;
* the order rows were added: SQLite's ``rowid``; PostgreSQL's ``desired_sessions.added`` identity
  (:attr:`Dialect.insertion_order`);
* the lease fence (:func:`fence`): PostgreSQL's ``SELECT ... FOR SHARE`` on the shard's lease row;
  none on SQLite, where one host holds every shard (no ``shard_leases`` row is ever owned).

Everything else is the same text in both: ``ON CONFLICT ... DO UPDATE``/``DO NOTHING`` (SQLite 3.24,
https://sqlite.org/lang_upsert.html), ``substr``, ``CASE``, scalar sub-queries.

**The fence.** A body that writes the owner's own state (the session ledger, the outbox rows a send
or a verification moves, the owner's desired state) starts with ``yield from fence(tx, shards)``
before its first write: with a :class:`~supervisor.store.model.FenceSource` (PostgreSQL, a fleet
member) it locks each shard's lease row ``FOR SHARE`` and raises
:class:`~supervisor.errors.LeaseLost` (the transaction rolls back: nothing is written) when the
lease is not this member's at that epoch and unexpired by the database's clock; the rows written
carry the epoch. ``FOR SHARE`` (not ``EXISTS``): under READ COMMITTED a plain read does not stop a
takeover committing between the check and the write, while the row lock makes the acquisition's
``UPDATE`` wait for (or its ``FOR UPDATE SKIP LOCKED`` skip) this transaction until it commits
(PostgreSQL docs, 13.3.2 "Row-Level Locks", and SELECT, "The Locking Clause"). Without a fence source
(SQLite; ``PgStore(fences=None)``: one host, ``store copy``) it is a no-op and the epoch is NULL.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Collection, Generator, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from supervisor.errors import LeaseLost
from supervisor.store.model import FenceSource
from supervisor.store.shards import every_shard

__all__ = [
    "FENCE_SQL",
    "POSTGRES",
    "SQLITE",
    "Body",
    "Dialect",
    "Mode",
    "Query",
    "Tx",
    "do",
    "fence",
    "insert_id",
    "many",
    "one",
    "rows",
]

T = TypeVar("T")
#: a transaction body: yields statements, is sent their results, returns the call's result
Body = Generator["Query", Any, T]

#: the lease fence (fleet members only): the lease row, locked FOR SHARE, when this member holds the
#: shard at this epoch and the lease has not expired by the database's clock
FENCE_SQL: Final = (
    "SELECT epoch FROM shard_leases WHERE shard = ? AND owner = ? AND epoch = ? "
    "AND expires_at > extract(epoch from clock_timestamp()) FOR SHARE"
)


class Mode(enum.Enum):
    """What a statement's driver hands back to the body."""

    ONE = "one"  # the first row, or None
    ALL = "all"  # every row
    DO = "do"  # nothing
    MANY = "many"  # nothing; ``params`` is a list of parameter rows (executemany)
    INSERT_ID = "insert_id"  # the id the INSERT generated


@dataclass(frozen=True, slots=True)
class Query:
    """One statement of a body, in the dialect it was built for (placeholders still ``?``)."""

    sql: str
    params: Sequence[Any]
    mode: Mode
    #: the generated column :data:`Mode.INSERT_ID` reads
    returning: str = ""


@dataclass(frozen=True, slots=True)
class Dialect:
    """What differs between SQLite's SQL and PostgreSQL's (see the module docstring)."""

    name: str
    #: the column that orders ``desired_sessions`` as they were added
    insertion_order: str
    #: whether its writes may be fenced on ``shard_leases`` (PostgreSQL: a fleet shares it)
    lease_fence: bool

    def text(self, sql: str) -> str:
        """``sql`` as the driver takes it: ``?`` placeholders become psycopg's ``%s`` (a literal ``%``
        doubled); SQLite's are ``?`` already. None of the store's statements holds a ``?`` in a literal."""
        if self.name == "sqlite":
            return sql
        return sql.replace("%", "%%").replace("?", "%s")

    def in_list(self, column: str, values: Iterable[Any]) -> tuple[str, tuple[Any, ...]]:
        """``column`` is one of ``values``: the condition and its one parameter."""
        listed = list(values)
        if self.name == "sqlite":
            return f"{column} IN (SELECT value FROM json_each(?))", (json.dumps(listed),)
        return f"{column} = ANY(?)", (listed,)

    def shard_filter(
        self, shards: Collection[int] | None, *, where: bool = True
    ) -> tuple[str, tuple[Any, ...]]:
        """The condition (and its parameter) reading only rows of ``shards``; none for every shard
        (None, or all 256: the one host's reads stay the plain scans they were)."""
        if shards is None or every_shard(shards):
            return "", ()
        condition, parameters = self.in_list("shard", sorted(set(shards)))
        return f" {'WHERE' if where else 'AND'} {condition}", parameters


SQLITE: Final = Dialect("sqlite", insertion_order="rowid", lease_fence=False)
POSTGRES: Final = Dialect("postgres", insertion_order="added", lease_fence=True)


@dataclass(frozen=True, slots=True)
class Tx:
    """What a body knows of the store it runs in: its dialect, its fence source, its owner epoch."""

    dialect: Dialect
    #: who holds which shard (None: no fence; always None on SQLite)
    fences: FenceSource | None = None
    #: the store's owner epoch (``meta.epoch``, bumped at every open), stamped on ledger entries
    epoch: int = 0

    @property
    def fenced(self) -> bool:
        """Whether :func:`fence` checks leases here (else it is a no-op and every epoch None)."""
        return self.fences is not None and self.dialect.lease_fence


# -- the statements a body yields ---------------------------------------------------------------------


def one(sql: str, params: Sequence[Any] = ()) -> Generator[Query, Any, tuple[Any, ...] | None]:
    """The statement's first row (None: no row)."""
    found: tuple[Any, ...] | None = yield Query(sql, params, Mode.ONE)
    return found


def rows(sql: str, params: Sequence[Any] = ()) -> Generator[Query, Any, list[tuple[Any, ...]]]:
    """Every row of the statement."""
    found: list[tuple[Any, ...]] = yield Query(sql, params, Mode.ALL)
    return found


def do(sql: str, params: Sequence[Any] = ()) -> Generator[Query, Any, None]:
    """Run the statement; nothing comes back."""
    yield Query(sql, params, Mode.DO)


def many(sql: str, params: Sequence[Sequence[Any]]) -> Generator[Query, Any, None]:
    """Run the statement once per parameter row."""
    yield Query(sql, list(params), Mode.MANY)


def insert_id(sql: str, params: Sequence[Any], returning: str) -> Generator[Query, Any, int]:
    """Run the ``INSERT``; the value its generated column ``returning`` took."""
    generated = yield Query(sql, params, Mode.INSERT_ID, returning)
    return int(generated)


# -- the fence ------------------------------------------------------------------------------------------


def fence(tx: Tx, shards: Iterable[int]) -> Generator[Query, Any, dict[int, int | None]]:
    """Lock each of ``shards``' lease rows ``FOR SHARE`` for this transaction; the epoch each row
    written in it carries (None for every shard without a fence source).

    Raises :class:`LeaseLost` (the store rolls the transaction back) for a shard this member does
    not hold now: its fence source has no lease for it, or the lease row is another member's, of
    another epoch, or expired by the database's clock. The shards are locked in ascending order, so
    two writers of the same shards cannot deadlock on them.
    """
    wanted = sorted(set(shards))
    if tx.fences is None or not tx.fenced:
        return dict.fromkeys(wanted)
    epochs: dict[int, int | None] = {}
    for shard in wanted:
        held = tx.fences.fence_for(shard)
        if held is None:
            raise LeaseLost(shard, 0, "not held by this member: the write is refused")
        found = yield from one(FENCE_SQL, (shard, held.member, held.epoch))
        if found is None:
            raise LeaseLost(
                shard,
                held.epoch,
                f"no longer held by {held.member} at epoch {held.epoch} (taken over, or its lease "
                "expired): the write is refused",
            )
        epochs[shard] = held.epoch
    return epochs
