"""httpcore finds the event loop without a failed import per call.

httpcore asks ``sniffio`` which async library runs whenever it sets up a lock, an event or a
semaphore (several per request); without sniffio installed each ask is an ``import`` that fails
and is searched for on disk again, since a failed import is not cached: 36 µs a call against
1 µs (docs/benchmarks.md, "One attempt path"). The dependency is declared in pyproject.toml.
"""

from __future__ import annotations

import asyncio
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType

from httpcore._synchronization import current_async_library


class _Lookups(importlib.abc.MetaPathFinder):
    def __init__(self) -> None:
        self.names: list[str] = []

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        self.names.append(fullname)
        return None  # the next finder decides


def test_asking_which_loop_runs_searches_no_module() -> None:
    async def ask() -> str:
        return current_async_library()

    assert asyncio.run(ask()) == "asyncio"  # the first ask may import sniffio once
    lookups = _Lookups()
    sys.meta_path.insert(0, lookups)
    try:
        answers = asyncio.run(_ask_many(100))
    finally:
        sys.meta_path.remove(lookups)
    assert answers == {"asyncio"}
    assert lookups.names == [], f"httpcore looked for {sorted(set(lookups.names))} on every ask"


async def _ask_many(n: int) -> set[str]:
    return {current_async_library() for _ in range(n)}
