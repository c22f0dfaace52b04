"""A ``[store] url`` daemon made a fleet member: its :class:`~supervisor.fleet.leases.PgLeases` built from
the configuration (docs/runtime.md, "The fleet"), its health told on the bus.

The lease connection is the member's own, to the store's database with the store's credentials
(``[store] url``, ``passwordFile``), not the store's connection: a renewal never waits behind a store
call, and a store call never holds a lease row.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Mapping
from pathlib import Path

from supervisor.bus import EventBus
from supervisor.clock import Clock, SystemClock, iso_utc
from supervisor.config import Config, read_secret
from supervisor.errors import ConfigError, StoreError
from supervisor.events import Published
from supervisor.fleet.events import FleetDegraded, FleetRecovered
from supervisor.fleet.identity import DIGEST_SHOWN, config_digest, default_member
from supervisor.fleet.leases import PgLeases

__all__ = ["FleetHealth", "fleet_leases", "fleet_line", "follow_reloads"]

Warn = Callable[[str], object]


class FleetHealth:
    """The member's health moves, published (``FLEET_DEGRADED`` / ``FLEET_RECOVERED``), each degradation
    also said once through ``warn``."""

    def __init__(self, member: str, bus: EventBus, clock: Clock, warn: Warn | None) -> None:
        self._member, self._bus, self._clock, self._warn = member, bus, clock, warn

    def __call__(self, problem: str | None) -> None:
        now = iso_utc(self._clock.time())
        if problem is None:
            self._bus.publish(FleetRecovered(self._member, timestamp=now))
            return
        self._bus.publish(FleetDegraded(self._member, problem, timestamp=now))
        if self._warn is not None:
            self._warn(f"fleet: member {self._member}: {problem}")


def fleet_leases(
    config: Config,
    *,
    config_path: Path | None,
    config_dir: Path | None,
    environ: Mapping[str, str],
    bus: EventBus,
    clock: Clock,
    warn: Warn | None = None,
) -> PgLeases:
    """The leases of the member ``config`` makes (``[store] url`` set): its id, host, digest and
    timing from ``[fleet]``. Raises ConfigError naming what is wrong (the URL, the password file)."""
    from supervisor.store.pg import connection_string

    url = config.store.url
    if url is None:
        raise ConfigError("fleet: a fleet member needs [store] url (a PostgreSQL store)")
    secret = read_secret(
        config.store.password_file, key="store.passwordFile", config_dir=config_dir, environ=environ
    )
    try:
        conninfo = connection_string(url, None if secret is None else secret.reveal())
    except StoreError as exc:
        raise ConfigError(f"store.url: {exc.problem}") from None
    fleet = config.fleet
    member = fleet.member or default_member(config_path)
    return PgLeases(
        conninfo,
        member=member,
        host=fleet.host or socket.gethostname(),
        digest=config_digest(config),
        lease_s=fleet.lease_seconds,
        renew_s=fleet.renew_seconds,
        on_health=FleetHealth(member, bus, clock, warn),
    )


def fleet_line(
    config: Config, *, config_path: Path | None, config_dir: Path | None, environ: Mapping[str, str]
) -> str | None:
    """What ``run --check`` says of the fleet: the member this configuration makes and its leases'
    timing (its password file read, nothing connected); None without ``[store] url``. Raises
    ConfigError as :func:`fleet_leases` does."""
    if config.store.url is None:
        return None
    leases = fleet_leases(
        config,
        config_path=config_path,
        config_dir=config_dir,
        environ=environ,
        bus=EventBus(),
        clock=SystemClock(),
    )
    return (
        f"fleet: member {leases.identity} (host {leases.host}) of the fleet on {config.store.url}: leases of "
        f"{leases.lease_s:g} s renewed every {leases.renew_s:g} s (held here {leases.window_s:g} s past a "
        f"renewal's send); configuration digest {leases.digest[:DIGEST_SHOWN]}"
    )


def follow_reloads(leases: PgLeases, bus: EventBus, config_of: Callable[[], Config]) -> None:
    """A reload applied (``CONFIG_RELOADED``) changes the digest the member publishes from its next
    renewal: members reloaded one by one agree again once the last one has reloaded."""
    from supervisor.runtime.reload import ConfigReloaded

    def on_event(published: Published) -> None:
        if isinstance(published.event, ConfigReloaded):
            leases.digest = config_digest(config_of())

    bus.subscribe(on_event)
