"""Hard tenant quota decisions per second (supervisor/fleet/quota.py; docs/benchmarks.md, "The hard tenant quota").

Each caller is a member's :class:`TenantQuota` (its own connection) deciding as fast as it can, for one tenant
(every caller on the same row: the fleet's worst case, the row's lock serialises them) or a tenant each. The
rows compare the shipped decision (an ``UNLOGGED`` table, ``synchronous_commit`` off for the statement's
transaction) with the same statement on a logged table with synchronous commits (what a prototype measured at
438-722 decisions a second). The quota is set high (1,000,000/s) so that every decision is an admission: the cost
of a decision, not of a refusal.

The embedded server of tests/harness/postgres.py runs with ``fsync = off`` for the tests; this benchmark starts
it again with ``fsync`` on (PostgreSQL's default), or it would measure nothing of a commit's flush. ``PG_DSN``
names another server instead (left as it is configured).

    .venv/bin/python tests/bench/bench_tenant_quota.py [--seconds 5]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import psycopg

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from supervisor.fleet.quota import DECIDE_SQL, TenantQuota
from supervisor.store.pg import PgStore
from tests.harness.postgres import fresh_schema, server_from_environment, url_of

#: the same decision on a logged table, committed synchronously (the prototype's)
LOGGED_SQL = DECIDE_SQL.replace("tenant_quota", "tenant_quota_logged").replace(
    "set_config('synchronous_commit', 'off', true)", "current_setting('synchronous_commit')"
)


class LoggedQuota(TenantQuota):
    """:class:`TenantQuota` on a logged table, synchronous commits: the prototype's decision."""

    async def take(self, tenant: str) -> float:
        params = {"tenant": tenant, "interval": 1.0 / self.rate, "tolerance": 1.0}
        if self._conn is None:
            self._conn = await psycopg.AsyncConnection.connect(self._conninfo, autocommit=True)
        await self._conn.execute(LOGGED_SQL, params)
        return 0.0


async def run(
    dsn: str, make: type[TenantQuota], callers: int, shared: bool, seconds: float
) -> dict[str, Any]:
    quotas = [make(dsn, rate=1_000_000.0, burst=1_000_000) for _ in range(callers)]
    counts = [0] * callers
    deadline = time.perf_counter() + seconds

    async def caller(i: int) -> None:
        tenant = "acme" if shared else f"tenant-{i}"
        quota = quotas[i]
        await quota.take(tenant)  # connected before the clock starts
        while time.perf_counter() < deadline:
            assert await quota.take(tenant) == 0.0
            counts[i] += 1

    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for i in range(callers):
            tg.start_soon(caller, i)
    elapsed = time.perf_counter() - started
    for quota in quotas:
        await quota.aclose()
    total = sum(counts)
    return {"decisions": total, "per_s": total / elapsed}


async def main(seconds: float) -> None:
    server = server_from_environment()
    try:
        if server.embedded:
            # started again without the tests' "-c fsync=off" (a command line option beats ALTER SYSTEM)
            assert server.directory is not None
            server.stop()
            options = f"-k {server.directory} -c listen_addresses= -c max_connections=60"
            server._ctl("-w", "-l", str(server.directory / "log"), "-o", options, "start")
        with fresh_schema(server) as dsn:
            store = await PgStore.open(url_of(dsn))
            await store.aclose()
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("CREATE TABLE tenant_quota_logged (LIKE tenant_quota INCLUDING ALL)")
                fsync = conn.execute("SHOW fsync").fetchone()
                version = conn.execute("SHOW server_version").fetchone()
            print(f"# PostgreSQL {version[0] if version else '?'}, fsync {fsync[0] if fsync else '?'}")
            print(f"# {platform.platform()}, {os.cpu_count()} cores, python {platform.python_version()}")
            print("| table, commit | callers | tenants | decisions | per second |")
            print("|---|---:|---|---:|---:|")
            for name, make in (
                ("UNLOGGED, synchronous_commit off", TenantQuota),
                ("logged, synchronous", LoggedQuota),
            ):
                for callers, shared in ((1, True), (8, True), (8, False)):
                    row = await run(dsn, make, callers, shared, seconds)
                    tenants = "one" if shared else "one each"
                    print(f"| {name} | {callers} | {tenants} | {row['decisions']} | {row['per_s']:.0f} |")
    finally:
        server.remove()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    anyio.run(main, args.seconds)
