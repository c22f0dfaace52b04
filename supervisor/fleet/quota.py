"""The hard tenant quota (docs/runtime.md, "Admission across a fleet"): at most ``rate`` attempts a second per
tenant across the whole fleet, decided by one statement on the shared PostgreSQL store.

Off by default (``[admission] tenantQuota = 0``): each member's pacers already keep the fleet within
the configured rates (their share of the shards) without asking anyone. The quota is for a platform
that enforces a tenant's limit hard and must never see it passed, at the price of a round trip to
the database for every attempt.

**GCRA** (the Generic Cell Rate Algorithm, ITU-T I.371; the virtual scheduling form): one row per
tenant holds ``tat``, the theoretical arrival time of its next attempt, on the database's clock (so
members' clocks never decide). With the emission interval ``T = 1/rate`` and the tolerance
``tau = T x (burst - 1)``, an attempt at ``now`` is admitted when ``tat - now <= tau``, and
``tat`` becomes ``max(tat, now) + T``; refused, it may ask again in ``tat - tau - now`` seconds.
:data:`DECIDE_SQL` decides that in one statement: an upsert whose ``DO UPDATE ... WHERE`` is the
test, so two members deciding at once are serialised by the row's lock (``INSERT ... ON CONFLICT``
re-checks the newest version of the row: PostgreSQL docs, INSERT, "ON CONFLICT Clause").

**Cost.** The table is ``UNLOGGED`` (migration 7) and the statement sets ``synchronous_commit`` off
for its own transaction (``set_config(..., true)``, what ``SET LOCAL`` does): no WAL for the row and
no wait for a WAL flush at commit. A prototype with a logged row and synchronous commits decided only
438-722 times a second; docs/benchmarks.md, "The hard tenant quota", measures this one. An unlogged
table is emptied after a crash of the server: every tenant then starts with its full burst again.

**The database down.** A decision that cannot be made admits the attempt (and says so once until
decisions work again): the members' own pacers still hold, and a quota that stopped every tenant's
sessions because the store is away would be worse than one that is briefly soft.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from typing import Any, Final

import anyio
import psycopg
from psycopg import AsyncConnection

from supervisor.store.pg import describe

__all__ = ["DECIDE_SQL", "TenantQuota"]

#: one decision: (admitted, the row's arrival time before it, the database's now)
DECIDE_SQL: Final = """
WITH now AS (
    SELECT extract(epoch FROM clock_timestamp())::double precision AS t,
           set_config('synchronous_commit', 'off', true) AS sync
), taken AS (
    INSERT INTO tenant_quota AS q (tenant, tat)
    SELECT %(tenant)s, now.t + %(interval)s FROM now
    ON CONFLICT (tenant) DO UPDATE
        SET tat = GREATEST(q.tat, (SELECT t FROM now)) + %(interval)s
        WHERE q.tat - (SELECT t FROM now) <= %(tolerance)s
    RETURNING tat
)
SELECT EXISTS (SELECT 1 FROM taken),
       (SELECT q.tat FROM tenant_quota AS q WHERE q.tenant = %(tenant)s),
       (SELECT t FROM now)
"""

Conn = AsyncConnection[tuple[Any, ...]]
Warn = Callable[[str], object]


class TenantQuota:
    """At most ``rate`` attempts a second per tenant, ``burst`` at once, fleet-wide (module docstring)."""

    def __init__(
        self,
        conninfo: str,
        *,
        rate: float,
        burst: int,
        password: str | None = None,
        warn: Warn | None = None,
    ) -> None:
        if not (rate > 0 and math.isfinite(rate)) or burst < 1:
            raise ValueError(f"a tenant quota needs a rate > 0 and a burst >= 1, got {rate!r}, {burst!r}")
        self.rate = rate
        self.burst = burst
        self._interval = 1.0 / rate
        self._tolerance = self._interval * (burst - 1)
        self._conninfo = conninfo
        self._password = password
        self._warn = warn
        self._conn: Conn | None = None
        self._lock = anyio.Lock()
        #: why the last decision could not be made (None: decisions work)
        self.degraded: str | None = None
        #: decisions made, and attempts admitted without one (the database away)
        self.decisions = 0
        self.unchecked = 0

    async def take(self, tenant: str) -> float:
        """Take one of ``tenant``'s attempts: 0.0 when admitted, else the seconds to wait before
        asking again (nothing was taken)."""
        params = {"tenant": tenant, "interval": self._interval, "tolerance": self._tolerance}
        async with self._lock:
            try:
                if self._conn is None or self._conn.closed:
                    extra: dict[str, Any] = {} if self._password is None else {"password": self._password}
                    self._conn = await AsyncConnection.connect(self._conninfo, autocommit=True, **extra)
                cur = await self._conn.execute(DECIDE_SQL, params)
                row = await cur.fetchone()
            except psycopg.Error as exc:
                # (any failure of the decision: the connection is opened again at the next one)
                await self._lost(describe(exc))
                return 0.0
        assert row is not None
        self.decisions += 1
        self.degraded = None
        admitted, tat, now = row
        if admitted:
            return 0.0
        return max(1e-3, float(tat) - self._tolerance - float(now))

    async def _lost(self, reason: str) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with anyio.CancelScope(shield=True), contextlib.suppress(psycopg.Error):
                await conn.close()
        self.unchecked += 1
        if self.degraded is None and self._warn is not None:
            self._warn(f"tenant quota: {reason}; attempts are admitted unchecked until it is back")
        self.degraded = reason

    async def aclose(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()
