"""Connection attempts in flight to one endpoint, held to its pacer's cap (issue 15).

The pacer (machines/pacing.py) decides *when* an attempt may leave and *how many* may be
unanswered at once (:meth:`~machines.pacing.Pacer.in_flight_cap`); this is the waiting, which
is I/O and so lives here. One :class:`InFlight` per endpoint, shared by its sessions; an attempt
holds a place from the moment it leaves until its answer (or its failure, or its cancellation)
has been handled, so a place is never lost: ``async with`` gives it back on every path.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio

from machines.pacing import Pacer

__all__ = ["InFlight", "InFlightLimits"]


class InFlight:
    """The places in flight for one endpoint; waiters are served first come, first served."""

    __slots__ = ("_limiter", "_pacer")

    def __init__(self, pacer: Pacer) -> None:
        self._pacer = pacer
        self._limiter = anyio.CapacityLimiter(math.inf)

    @asynccontextmanager
    async def place(self) -> AsyncIterator[None]:
        """Hold one place while the attempt is in flight (waits while the endpoint is full)."""
        cap = self._pacer.in_flight_cap()
        # the cap moves with what the platform admits; a lower cap only holds back new attempts
        self._limiter.total_tokens = math.inf if cap is None else cap
        async with self._limiter:
            yield


class InFlightLimits:
    """One :class:`InFlight` per paced endpoint (the runtime's side of machines.registry.Admission)."""

    __slots__ = ("_by_endpoint",)

    def __init__(self) -> None:
        self._by_endpoint: dict[str, InFlight] = {}

    def for_pacer(self, pacer: Pacer | None) -> InFlight | None:
        """The places of ``pacer``'s endpoint; None when the endpoint is not paced or not capped."""
        if pacer is None or pacer.in_flight_cap() is None:
            return None
        limit = self._by_endpoint.get(pacer.endpoint)
        if limit is None:
            limit = self._by_endpoint[pacer.endpoint] = InFlight(pacer)
        return limit
