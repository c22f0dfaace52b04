"""Suite-wide guards."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest


def _children(pid: int) -> list[int]:
    """The live descendants of ``pid``, children first (from /proc: no extra dependency)."""
    found: list[int] = []
    try:
        tasks = (Path("/proc") / str(pid) / "task").iterdir()
        direct = [int(child) for task in tasks for child in (task / "children").read_text().split()]
    except OSError:
        return found
    for child in direct:
        found.append(child)
        found.extend(_children(child))
    return found


@pytest.fixture(autouse=True)
def _no_process_outlives_its_test() -> Iterator[None]:
    """A test that failed half-way leaves no daemon behind to load the machine for the next ones.

    Tests end their processes themselves (drain, SIGTERM, kill -9 are what they test); this only
    reaps what a failure or a timeout left running, so that one failure cannot turn into many.
    Processes alive before the test (a module-scoped fixture's, e.g. the systemd user manager
    that test_systemd_manager.py shares between its tests) are not the test's to reap.
    """
    before = set(_children(os.getpid()))
    yield
    for pid in _children(os.getpid()):
        if pid in before:
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
