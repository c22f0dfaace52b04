"""Test-only hooks, enabled by environment variables a production daemon never has.

* ``SESSION_SUPERVISOR_TEST_CRASH_AT=POINT[:N]``: the daemon kills itself with SIGKILL (a real
  ``kill -9``, no cleanup, no flush) the N-th time (default 1) it reaches ``POINT``, as the store
  sees it (:class:`CrashingStore` wraps the opened store; nothing else knows):

  - ``after-outbox-commit``: an update is committed to the outbox (``submit`` accepted it), its
    caller not yet answered;
  - ``after-send``: an attribute request went out, the ledger does not know how it ended (the first
    store call that follows the send, ``count_attempt`` of a retry or the ``record`` of its outcome,
    dies before it writes);
  - ``after-answer``: the platform's answer is in the ledger (the ``record`` of a claimed send with
    its HTTP status committed), the verification has not run.

* ``SESSION_SUPERVISOR_TEST_STORE_FULL_WHEN=PATH``: while ``PATH`` exists, every commit fails as
  SQLite fails on a full disk (``SQLITE_FULL``): for machines where a small filesystem cannot be
  mounted. Removing the file is the disk freed again.

The crash test (tests/integration/test_store_crash.py) and its benchmark (tests/bench/bench_crash.py)
drive them; docs/store.md describes them.
"""

from __future__ import annotations

import enum
import os
import signal
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from supervisor.store.model import (
    Claim,
    LedgerChange,
    NewMismatch,
    Outcome,
    RowChange,
    Store,
    Submission,
    SubmitResult,
)

__all__ = ["CRASH_ENV", "FULL_ENV", "CrashPoint", "CrashingStore", "StoreFaults", "crash_points"]

CRASH_ENV: Final = "SESSION_SUPERVISOR_TEST_CRASH_AT"
FULL_ENV: Final = "SESSION_SUPERVISOR_TEST_STORE_FULL_WHEN"


class CrashPoint(enum.StrEnum):
    AFTER_OUTBOX_COMMIT = "after-outbox-commit"
    AFTER_SEND = "after-send"
    AFTER_ANSWER = "after-answer"


def crash_points(store: Store, environ: Mapping[str, str]) -> Store:
    """``store`` itself, or wrapped to die at the point ``environ`` names (see the module docstring)."""
    point, _, count = environ.get(CRASH_ENV, "").partition(":")
    if point not in CrashPoint._value2member_map_:
        return store
    return CrashingStore(store, CrashPoint(point), int(count) if count.isdigit() and int(count) > 0 else 1)


def _kill() -> None:
    # no atexit, no finally, no buffered output: exactly what `kill -9` leaves behind
    os.kill(os.getpid(), signal.SIGKILL)


class CrashingStore:
    """A :class:`~supervisor.store.model.Store` that dies the ``nth`` time its wrapped store reaches
    ``point``; every other call goes through unchanged."""

    def __init__(
        self, store: Store, point: CrashPoint, nth: int = 1, kill: Callable[[], None] = _kill
    ) -> None:
        self._store = store
        self._point = point
        self._nth = nth
        self._seen = 0
        self._kill = kill
        # claimed requests that go out (a participant to write to) and whose outcome is not recorded yet
        self._sent: set[int] = set()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def _reached(self, point: CrashPoint) -> None:
        if point is self._point:
            self._seen += 1
            if self._seen >= self._nth:
                self._kill()

    async def submit(self, submission: Submission, max_depth: int) -> SubmitResult:
        result = await self._store.submit(submission, max_depth)
        if result.accepted:
            self._reached(CrashPoint.AFTER_OUTBOX_COMMIT)
        return result

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
        claim = await self._store.claim(
            conversation_id,
            before,
            idempotency_key=idempotency_key,
            participant_id=participant_id,
            endpoint=endpoint,
            sent_at=sent_at,
            limit=limit,
            attempts=attempts,
        )
        if claim is not None and claim.entry is not None and attempts > 0:
            self._sent.add(claim.entry.request_id)
        return claim

    async def count_attempt(self, request_id: int) -> int:
        if request_id in self._sent:
            self._reached(CrashPoint.AFTER_SEND)  # the previous attempt went out
        return await self._store.count_attempt(request_id)

    async def record(
        self,
        rows: Sequence[RowChange] = (),
        ledger: LedgerChange | None = None,
        mismatches: Sequence[NewMismatch] = (),
    ) -> list[int]:
        answered = ledger is not None and ledger.request_id in self._sent
        if answered:
            self._reached(CrashPoint.AFTER_SEND)
        ids = await self._store.record(rows, ledger, mismatches)
        if ledger is not None and answered:
            self._sent.discard(ledger.request_id)
            if ledger.outcome is Outcome.OK and ledger.status is not None:
                self._reached(CrashPoint.AFTER_ANSWER)
        return ids


class StoreFaults:
    """An injected ``SQLITE_FULL`` on commit while a flag file exists (see the module docstring)."""

    __slots__ = ("_flag",)

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        flag = (environ if environ is not None else os.environ).get(FULL_ENV)
        self._flag = flag or None

    def before_commit(self) -> None:
        if self._flag is not None and os.path.exists(self._flag):
            raise sqlite3.OperationalError("database or disk is full")
