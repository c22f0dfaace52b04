"""Following a simulator's activity log over HTTP, as a check of several daemons reads it (docs/simulators.md, "Activity log").

::

    tail = ActivityTail(sim.urls["admin"], http)
    await tail.read()          # every entry since the last read, page by page, in seq order
    tail.entries               # all read so far
    tail.gaps                  # the gap lines met: entries the reader never saw (the ring moved on)

A check over a log with a gap has not seen everything: :meth:`ActivityTail.complete` says whether it did.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import httpx

__all__ = ["ActivityTail"]


@dataclass
class ActivityTail:
    """A reader of ``GET {admin}/activity`` that keeps its cursor."""

    admin: str
    http: httpx.AsyncClient
    page: int = 10_000
    cursor: int = 0
    entries: list[dict[str, Any]] = field(default_factory=list)
    gaps: list[dict[str, Any]] = field(default_factory=list)

    async def read(self) -> list[dict[str, Any]]:
        """The entries written since the last read (all pages of them); gaps are kept in :attr:`gaps`."""
        new: list[dict[str, Any]] = []
        while True:
            r = await self.http.get(
                f"{self.admin}/activity", params={"since": self.cursor, "limit": self.page}
            )
            r.raise_for_status()
            lines = [json.loads(line) for line in r.text.splitlines()]
            for line in lines:
                (self.gaps if line["kind"] == "gap" else new).append(line)
            following = int(r.headers["X-Activity-Next"])
            if following == self.cursor:
                break
            self.cursor = following
        self.entries.extend(new)
        return new

    def complete(self) -> bool:
        """Whether every entry since the start was read (no gap)."""
        return not self.gaps
