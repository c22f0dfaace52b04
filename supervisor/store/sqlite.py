"""The embedded :class:`~supervisor.store.model.Store`: one SQLite file in the state directory.

* **WAL** (readers never wait for the writer; a crash leaves the last committed transaction) and
  ``synchronous=FULL`` by default: the WAL is synced at every commit, so an acknowledgement
  survives a ``kill -9`` *and* an OS crash or power loss (SQLite "PRAGMA synchronous"; ``NORMAL`` survives
  ``kill -9`` only; docs/store.md, "Durability"). Commits are grouped to share the sync.
* **One writer, off the event loop.** Every call queues a job; whoever holds the store's lock
  runs every queued job in a worker thread (``anyio.to_thread``), in order, each in its own
  savepoint of one transaction, then commits once: several acknowledgements share one fsync
  (group commit). A job's result is handed back only once its commit succeeded.
* **Health.** A commit that fails (disk full, read-only, I/O error) fails every job of its
  batch with :class:`~supervisor.errors.StoreError` naming the file, and marks the store
  ``degraded`` with the reason until a later commit succeeds; ``on_health`` hears both moves.
* **The calls** are :class:`~supervisor.store.calls.StoreCalls`': each body (written once for both
  stores against :mod:`supervisor.store.sql`) runs in its job's savepoint with :func:`run_sync`. SQLite
  has no lease fence: one host holds every shard.
* The file is created ``0600`` (a wider existing file is narrowed): it holds resume credentials
  (the Web Messaging guest token) and the values of queued attribute writes, never an OAuth
  token or a secret.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import stat
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Generic, Literal, TypeVar

import anyio
from anyio import to_thread

from supervisor.errors import StoreError
from supervisor.store import sql_sessions
from supervisor.store.calls import BodyOf, StoreCalls
from supervisor.store.model import DesiredSession, ServerSession
from supervisor.store.schema import SCHEMA_VERSION, Identity, NewerSchema, NotOurs, identify, migrate, stamp
from supervisor.store.sql import SQLITE, Body, Mode, Query, Tx
from supervisor.store.testhooks import StoreFaults

__all__ = ["Snapshot", "SqliteStore", "Synchronous", "describe", "read_only", "run_sync"]

T = TypeVar("T")
Synchronous = Literal["full", "normal"]
#: the file holds resume credentials and queued values: the owner only
FILE_MODE: Final = 0o600
HealthHook = Callable[[str | None], None]
#: ``meta`` keys the store writes itself (the owner epoch, bumped at every open)
RESERVED_META: Final = frozenset({"epoch"})
#: what the read-only bodies know of a SQLite store: its dialect, and no fence (one host holds every shard)
_TX: Final = Tx(SQLITE)


def describe(exc: BaseException) -> str:
    """A SQLite error in words an operator acts on (the library's text kept in parentheses)."""
    name = str(getattr(exc, "sqlite_errorname", "") or "")
    text = str(exc) or type(exc).__name__
    if name == "SQLITE_FULL" or "disk is full" in text:
        return f"the disk is full ({text})"
    if name == "SQLITE_IOERR_SHMSIZE":
        # unixShmMap: the -shm file beside the store could not be given room (ENOSPC, a quota)
        return f"the disk is full: no room for the shared-memory file beside it ({text})"
    if name.startswith("SQLITE_READONLY") or "readonly" in text:
        return f"read-only: cannot write ({text})"
    if name.startswith("SQLITE_CANTOPEN") or "unable to open" in text:
        return f"cannot open ({text}): does its directory exist, and may the daemon write there?"
    if name in ("SQLITE_NOTADB", "SQLITE_CORRUPT") or "not a database" in text or "malformed" in text:
        return f"corrupt or not a SQLite database ({text}); nothing was changed: move it aside to start an empty store"
    if name.startswith("SQLITE_IOERR") or "I/O error" in text:
        return f"I/O error ({text})"
    return text


def _is_full(exc: BaseException) -> bool:
    name = str(getattr(exc, "sqlite_errorname", "") or "")
    return name in ("SQLITE_FULL", "SQLITE_IOERR_SHMSIZE") or "disk is full" in str(exc)


def _checkpoint(conn: sqlite3.Connection) -> bool:
    """Move the whole WAL into the file and truncate it; True when it completed (nobody held it)."""
    try:
        busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    except sqlite3.Error:
        return False  # the file itself could not grow: the disk is full of something else
    return int(busy) == 0


class _Job(Generic[T]):
    __slots__ = ("done", "error", "fn", "result")

    def __init__(self, fn: Callable[[sqlite3.Connection], T]) -> None:
        self.fn = fn
        self.done = False
        self.result: T | None = None
        self.error: BaseException | None = None


def run_sync(conn: sqlite3.Connection, body: Body[T]) -> T:
    """Run a transaction body (:mod:`supervisor.store.sql`) on ``conn``, in the transaction open there."""
    try:
        query = next(body)
        while True:
            query = body.send(_execute(conn, query))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


def _execute(conn: sqlite3.Connection, query: Query) -> Any:
    if query.mode is Mode.MANY:
        conn.executemany(query.sql, query.params)
        return None
    cursor = conn.execute(query.sql, query.params)
    if query.mode is Mode.ONE:
        return cursor.fetchone()
    if query.mode is Mode.ALL:
        return cursor.fetchall()
    if query.mode is Mode.INSERT_ID:
        return cursor.lastrowid
    return None


class SqliteStore(StoreCalls):
    """The store in one SQLite file (see the module docstring); open it with :meth:`open`.

    Its calls are :class:`~supervisor.store.calls.StoreCalls`'; each body runs in :meth:`_run`'s writer."""

    RESERVED_META = RESERVED_META

    def __init__(
        self,
        path: Path,
        conn: sqlite3.Connection,
        *,
        epoch: int,
        synchronous: Synchronous,
        faults: StoreFaults,
        on_health: HealthHook | None,
        lock_fd: int | None = None,
    ) -> None:
        self.path = str(path)
        # the store's shared flock, held while it is open (see hold_shared)
        self._lock_fd = lock_fd
        self.epoch = epoch
        self.synchronous = synchronous
        self.degraded: str | None = None
        self.commits = 0
        self._conn: sqlite3.Connection | None = conn
        self._faults = faults
        self._on_health = on_health
        self._pending: list[_Job[Any]] = []
        self._lock = anyio.Lock()
        self._tx = Tx(SQLITE, None, epoch)

    # ------------------------------------------------------------------ opening
    @classmethod
    async def open(
        cls,
        path: str | Path,
        *,
        synchronous: Synchronous = "full",
        environ: Mapping[str, str] | None = None,
        on_health: HealthHook | None = None,
    ) -> SqliteStore:
        """Open (or create) the store; raises :class:`StoreError` naming the file and the problem."""
        p = Path(path)
        faults = StoreFaults(environ)
        conn, epoch, lock_fd = await to_thread.run_sync(_open_sync, p, synchronous)
        return cls(
            p, conn, epoch=epoch, synchronous=synchronous, faults=faults, on_health=on_health, lock_fd=lock_fd
        )

    async def aclose(self) -> None:
        """Run what is queued, checkpoint the WAL, close the file (idempotent)."""
        async with self._lock:
            conn, self._conn = self._conn, None
            if conn is None:
                return
            batch, self._pending = self._pending, []
            with anyio.CancelScope(shield=True):
                if batch:
                    await to_thread.run_sync(self._execute, conn, batch)
                await to_thread.run_sync(_close_sync, conn)
            if self._lock_fd is not None:
                os.close(self._lock_fd)  # drops the shared flock
                self._lock_fd = None

    # ------------------------------------------------------------------ the one writer
    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        job: _Job[T] = _Job(fn)
        self._pending.append(job)
        async with self._lock:
            if not job.done:
                conn = self._conn
                if conn is None:
                    raise StoreError(self.path, "the store is closed")
                batch, self._pending = self._pending, []
                # not cancellable: a batch that started runs to its commit (or rollback)
                problem = await to_thread.run_sync(self._execute, conn, batch)
                self._health(problem)
        if job.error is not None:
            raise job.error
        return job.result  # type: ignore[return-value]

    def _execute(self, conn: sqlite3.Connection, batch: list[_Job[Any]]) -> str | Literal[False] | None:
        """Run ``batch`` in one transaction (a savepoint per job); returns the commit's problem,
        None when it committed writes, False when it wrote nothing (health unchanged).

        A commit refused for a full disk is tried once more after a checkpoint that truncates the
        WAL: when the disk is full of the store's own WAL (it grows until a commit crosses SQLite's
        1,000-page mark, and on a nearly full disk no commit ever does), moving its pages into the
        file frees the space and the batch commits. A disk full of something else
        stays full: the second try fails the same way and the batch is refused.
        """
        try:
            problem, full = self._attempt(conn, batch)
            if full and _checkpoint(conn):
                problem, _ = self._attempt(conn, batch)
            return problem
        finally:
            for job in batch:
                job.done = True

    def _attempt(
        self, conn: sqlite3.Connection, batch: list[_Job[Any]]
    ) -> tuple[str | Literal[False] | None, bool]:
        """One try at ``batch``: (its problem as :meth:`_execute` says it, whether the disk was full)."""
        before = conn.total_changes
        for job in batch:
            job.result, job.error = None, None
        try:
            conn.execute("BEGIN IMMEDIATE")
            for job in batch:
                conn.execute("SAVEPOINT job")
                try:
                    job.result = job.fn(conn)
                except Exception as exc:  # the job's own failure: only its writes are undone
                    conn.execute("ROLLBACK TO job")
                    job.error = (
                        StoreError(self.path, describe(exc)) if isinstance(exc, sqlite3.Error) else exc
                    )
                    job.result = None
                conn.execute("RELEASE job")
            wrote = conn.total_changes != before
            if wrote:
                self._faults.before_commit()
            conn.execute("COMMIT")
            self.commits += 1
            return (None if wrote else False), False
        except sqlite3.Error as exc:
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            problem = describe(exc)
            for job in batch:
                if job.error is None:
                    job.error = StoreError(self.path, problem)
                job.result = None
            return problem, _is_full(exc)

    def _health(self, problem: str | Literal[False] | None) -> None:
        if problem is False or problem == self.degraded:
            return
        self.degraded = problem
        if self._on_health is not None:
            self._on_health(problem)

    # ------------------------------------------------------------------ the calls (supervisor/store/calls.py)
    async def _call(self, body_of: BodyOf[T]) -> T:
        return await self._run(lambda conn: run_sync(conn, body_of(self._tx)))

    async def integrity_check(self) -> str:
        def check(conn: sqlite3.Connection) -> str:
            return "; ".join(str(r[0]) for r in conn.execute("PRAGMA integrity_check").fetchall())

        return await self._run(check)


# -- opening and closing, in a worker thread ------------------------------------------------------------


def _prepare_file(path: Path) -> None:
    """Create the file 0600 when it is absent; raise StoreError for what SQLite would say less clearly.

    An existing file is not changed here (not even its mode): it is the store's only once
    :func:`~supervisor.store.schema.identify` says so.
    """
    where = str(path)
    parent = path.parent
    if not parent.is_dir():
        raise StoreError(where, f"its directory {parent} does not exist")
    try:
        info = os.stat(path)
    except FileNotFoundError:
        info = None
    except OSError as exc:
        raise StoreError(where, f"cannot read it ({exc.strerror})") from None
    if info is not None and not stat.S_ISREG(info.st_mode):
        raise StoreError(where, "not a regular file")
    try:
        flags = os.O_RDWR | os.O_CLOEXEC | (os.O_CREAT | os.O_EXCL if info is None else 0)
        fd = os.open(path, flags, FILE_MODE)
    except FileExistsError:
        return  # created by someone else meanwhile: identified like any existing file
    except OSError as exc:
        verb = "create" if info is None else "open"
        raise StoreError(where, f"cannot {verb} it for writing ({exc.strerror})") from None
    os.close(fd)


def _narrow(path: Path) -> None:
    """The store's file is the owner's only: it holds resume credentials and queued values."""
    with contextlib.suppress(OSError):
        if stat.S_IMODE(os.stat(path).st_mode) & 0o077:
            os.chmod(path, FILE_MODE)


def hold_shared(path: Path) -> int:
    """A shared ``flock`` on the store's file, held by every open store: ``store copy`` takes it
    exclusively, so it copies no store a daemon has open, and no daemon opens one while it copies.
    (SQLite's own locks are ``fcntl`` record locks, which ``flock`` does not touch on Linux.)"""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise StoreError(str(path), f"cannot open it ({exc.strerror})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise StoreError(
            str(path), "`session-supervisor store copy` is copying it; start again once it is done"
        ) from None
    return fd


def _open_sync(path: Path, synchronous: Synchronous) -> tuple[sqlite3.Connection, int, int]:
    _prepare_file(path)
    lock_fd = hold_shared(path)
    try:
        conn, epoch = _open_locked(path, synchronous)
    except BaseException:
        os.close(lock_fd)
        raise
    return conn, epoch, lock_fd


def _open_locked(path: Path, synchronous: Synchronous) -> tuple[sqlite3.Connection, int]:
    try:
        conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False, timeout=5.0)
    except sqlite3.Error as exc:
        raise StoreError(str(path), describe(exc)) from None
    try:
        conn.execute("PRAGMA busy_timeout = 5000")
        # whose file it is, decided before anything is written: the WAL switch, the
        # mode, a migration and the epoch all come after, and only for the store's own file
        identity, version = identify(conn)
        if identity is not Identity.NEW:
            check = str(conn.execute("PRAGMA quick_check(1)").fetchone()[0])
            if check != "ok":
                raise StoreError(
                    str(path), f"corrupt (quick_check: {check}); nothing was changed: move it aside"
                )
        _narrow(path)
        if identity is Identity.NEW:
            # created (and stamped) in one transaction before WAL is switched on: a crash leaves an
            # empty file or a whole schema 1, never a half-made file a later start would refuse
            migrate(conn, 0)
        mode = str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]).lower()
        if mode != "wal":
            raise StoreError(str(path), f"cannot use write-ahead logging here (journal_mode is {mode})")
        # "full": the WAL is synced at every commit (an ack survives power loss); "normal": kill -9 only
        conn.execute(f"PRAGMA synchronous = {'FULL' if synchronous == 'full' else 'NORMAL'}")
        conn.execute("PRAGMA foreign_keys = ON")
        if identity is Identity.LEGACY:
            stamp(conn)
        if identity is not Identity.NEW:
            migrate(conn, version)
        conn.execute("BEGIN IMMEDIATE")
        row = conn.execute("SELECT value FROM meta WHERE key = 'epoch'").fetchone()
        epoch = (int(row[0]) if row is not None else 0) + 1
        conn.execute(
            "INSERT INTO meta (key, value) VALUES ('epoch', ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (str(epoch),),
        )
        conn.execute("COMMIT")
    except StoreError:
        conn.close()
        raise
    except (NewerSchema, NotOurs) as exc:
        conn.close()
        raise StoreError(str(path), str(exc)) from None
    except sqlite3.Error as exc:
        conn.close()
        raise StoreError(str(path), describe(exc)) from None
    return conn, epoch


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What a store holds for the next start, read without writing (:func:`read_only`)."""

    desired: dict[str, DesiredSession]
    server: dict[str, ServerSession]


async def read_only(path: str | Path) -> Snapshot:
    """Read the desired sessions and the session ledger without writing a byte.

    For a start where the store cannot be written (a full disk, a read-only state directory): the
    sessions still start as the store says (a stopped or ended session stays down, a guest session
    resumes). Raises :class:`StoreError` for a file that is not the store's, or one it cannot read.
    """
    return await to_thread.run_sync(_read_only_sync, Path(path))


def _read_only_sync(path: Path) -> Snapshot:
    where = str(path)
    uri = "file:" + urllib.parse.quote(str(path.resolve()))
    wal = Path(f"{path}-wal")
    if wal.exists() and wal.stat().st_size > 0:
        # committed transactions may wait in the WAL (a kill -9): read through it (its -shm is there)
        uri += "?mode=ro"
    else:
        # nothing to replay: read the file as it is, creating nothing beside it (no -wal, no -shm,
        # which a full or read-only directory could not hold anyway; https://sqlite.org/uri.html)
        uri += "?immutable=1"
    try:
        conn = sqlite3.connect(uri, uri=True, check_same_thread=False)
    except sqlite3.Error as exc:
        raise StoreError(where, describe(exc)) from None
    try:
        identity, version = identify(conn)
        if identity is Identity.NEW:
            return Snapshot({}, {})
        if version != SCHEMA_VERSION and version != 1:
            raise StoreError(where, f"schema version {version} must be migrated first, which needs writing")
        # a version 1 file (a store the upgrade could not migrate, read-only) has no left_at: none was left
        ledger = run_sync(conn, sql_sessions.server_sessions(_TX, left_at=version >= 2))
        return Snapshot(run_sync(conn, sql_sessions.desired_sessions(_TX)), ledger)
    except (NewerSchema, NotOurs) as exc:
        raise StoreError(where, str(exc)) from None
    except sqlite3.Error as exc:
        raise StoreError(where, describe(exc)) from None
    finally:
        conn.close()


def _close_sync(conn: sqlite3.Connection) -> None:
    # a full or read-only disk: the WAL stays, and the next open replays it
    with contextlib.suppress(sqlite3.Error):
        conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
    conn.close()
