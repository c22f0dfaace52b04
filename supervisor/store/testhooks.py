"""Test-only hooks, enabled by environment variables a production daemon never has.

* ``SESSION_SUPERVISOR_TEST_CRASH_AT=POINT[:N]``: the daemon kills itself with SIGKILL (a real
  ``kill -9``, no cleanup, no flush) the N-th time (default 1) it reaches ``POINT``:

  - ``after-outbox-commit``: an update is committed to the outbox, its caller not yet answered;
  - ``after-send``: an attribute request went out, the ledger does not know how it ended;
  - ``after-answer``: the platform's answer is in the ledger, the verification has not run.

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
from collections.abc import Mapping
from typing import Final

__all__ = ["CRASH_ENV", "FULL_ENV", "CrashPoint", "CrashPoints", "StoreFaults"]

CRASH_ENV: Final = "SESSION_SUPERVISOR_TEST_CRASH_AT"
FULL_ENV: Final = "SESSION_SUPERVISOR_TEST_STORE_FULL_WHEN"


class CrashPoint(enum.StrEnum):
    AFTER_OUTBOX_COMMIT = "after-outbox-commit"
    AFTER_SEND = "after-send"
    AFTER_ANSWER = "after-answer"


class CrashPoints:
    """Where a test asked the daemon to die; :meth:`reached` does nothing unless it is that point."""

    __slots__ = ("_point", "_seen", "_target")

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        spec = (environ if environ is not None else os.environ).get(CRASH_ENV, "")
        point, _, count = spec.partition(":")
        self._point = CrashPoint(point) if point in CrashPoint._value2member_map_ else None
        self._target = int(count) if count.isdigit() and int(count) > 0 else 1
        self._seen = 0

    @property
    def armed(self) -> bool:
        return self._point is not None

    def reached(self, point: CrashPoint) -> None:
        if point is not self._point:
            return
        self._seen += 1
        if self._seen >= self._target:
            # no atexit, no finally, no buffered output: exactly what `kill -9` leaves behind
            os.kill(os.getpid(), signal.SIGKILL)


class StoreFaults:
    """An injected ``SQLITE_FULL`` on commit while a flag file exists (see the module docstring)."""

    __slots__ = ("_flag",)

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        flag = (environ if environ is not None else os.environ).get(FULL_ENV)
        self._flag = flag or None

    def before_commit(self) -> None:
        if self._flag is not None and os.path.exists(self._flag):
            raise sqlite3.OperationalError("database or disk is full")
