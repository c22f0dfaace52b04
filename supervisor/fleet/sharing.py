"""A daemon's part in a fleet that is not its leases: the fleet bus and admission across members.

Built by :func:`fleet_sharing` when the daemon runs on a PostgreSQL store (``[store] url``); one host
(SQLite, or no store) builds none of it. The bus connects as the store does (the URL's TLS default,
the password from ``[store] passwordFile``: :func:`supervisor.store.pg.connection_string`). What the
member changes in admission (the rates' share, the tenant quota, the throttles noted to be sent) is in
force from its construction, before the sessions start.
:meth:`FleetSharing.serve` runs under the daemon's task group: it is started at once, whether or not
the database can be reached (the bus connects, and reconnects, on its own: a daemon whose database
is down still starts, as its store says: docs/store.md).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
from anyio.abc import TaskStatus

from supervisor.attempts import Attempts, Reports
from supervisor.bus import EventBus
from supervisor.clock import Clock
from supervisor.config import Config
from supervisor.credentials import read_secret
from supervisor.errors import ConfigError, StoreError
from supervisor.fleet.admission import FleetAdmission, RateShare
from supervisor.runtime.leases import Leases

if TYPE_CHECKING:
    from supervisor.fleet.bus import FleetBus
    from supervisor.fleet.quota import TenantQuota

__all__ = ["FleetSharing", "fleet_sharing"]

Warn = Callable[[str], object]


class FleetSharing:
    """The bus, the throttle and circuit publishers and appliers, the rates' share of one member."""

    def __init__(
        self,
        bus: FleetBus,
        attempts: Attempts,
        events: EventBus,
        leases: Leases,
        *,
        clock: Clock,
        reports: Reports,
        quota: TenantQuota | None = None,
        warn: Warn | None = None,
    ) -> None:
        self.bus = bus
        self.admission = FleetAdmission(bus, attempts, clock=clock, reports=reports, warn=warn)
        self.share = RateShare(attempts.endpoints)
        #: the hard tenant quota, when configured (``[admission] tenantQuota``)
        self.quota = quota
        self._attempts = attempts
        # in force from now, before any session starts (the services, this one among them, start
        # after the sessions are handed over): the start-up's attempts are the fleet's too
        self._unsubscribe = events.subscribe(self.admission.observe)
        self.share.follow(leases)
        if quota is not None:
            attempts.limit_tenants(quota.take)

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Listen and publish until cancelled; started at once (the bus connects on its own)."""
        quota = self.quota
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self.bus.serve)
                await tg.start(self.admission.serve)
                task_status.started()
        finally:
            self._unsubscribe()
            if quota is not None:
                self._attempts.limit_tenants(None)
                with anyio.CancelScope(shield=True):
                    await quota.aclose()


def fleet_sharing(
    config: Config,
    *,
    attempts: Attempts,
    events: EventBus,
    leases: Leases,
    clock: Clock,
    reports: Reports,
    config_dir: Path | None,
    environ: Mapping[str, str],
    warn: Warn | None = None,
) -> FleetSharing | None:
    """The fleet member of a daemon on a PostgreSQL store; None for one host (no ``[store] url``),
    or when the store's URL or password file cannot be used (the store says why already)."""
    url = config.store.url
    if url is None:
        return None
    # (psycopg, the postgres extra's, is imported only by a daemon on a PostgreSQL store)
    from supervisor.fleet.bus import FleetBus
    from supervisor.store.pg import connection_string

    try:
        secret = read_secret(
            config.store.password_file, key="store.passwordFile", config_dir=config_dir, environ=environ
        )
        conninfo = connection_string(url)
    except (ConfigError, StoreError):
        return None
    password = None if secret is None else secret.reveal()
    bus = FleetBus(conninfo, member=leases.identity, password=password, warn=warn)
    from supervisor.fleet.leases import RELEASED, PgLeases

    if isinstance(leases, PgLeases):
        # a peer's SIGTERM handover: its freed shards are acquired at once, not at the next renewal
        # (the bus drops this member's own notices)
        pg_leases = leases
        bus.on(RELEASED, lambda _notice: pg_leases.wake())
    settings = config.admission
    quota = None
    if settings.tenant_quota > 0:
        from supervisor.fleet.quota import TenantQuota

        quota = TenantQuota(
            conninfo,
            rate=settings.tenant_quota,
            burst=settings.tenant_quota_burst,
            password=password,
            warn=warn,
        )
    return FleetSharing(bus, attempts, events, leases, clock=clock, reports=reports, quota=quota, warn=warn)
