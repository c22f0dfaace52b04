"""Waiting for an outcome a test cannot await directly, bounded by a deadline."""

from __future__ import annotations

from collections.abc import Callable

import anyio

__all__ = ["wait_until"]


async def wait_until(predicate: Callable[[], bool], limit_s: float = 5.0) -> None:
    """Wait for an event the test cannot await directly (a server-side effect); fail after ``limit_s``."""
    with anyio.fail_after(limit_s):
        while True:
            if predicate():
                return
            await anyio.sleep(0.005)  # polling a server-side effect, not waiting for a timer
