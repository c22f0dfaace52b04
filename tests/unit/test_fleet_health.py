"""A fleet member's health on the bus (supervisor/fleet/member.py: FLEET_DEGRADED, FLEET_RECOVERED) and the
``fleet`` degraded condition the systemd glue keeps from them (supervisor/systemd/conditions.py)."""

from __future__ import annotations

from supervisor.bus import EventBus
from supervisor.clock import FakeClock
from supervisor.config import parse_config
from supervisor.events import Published
from supervisor.fleet.events import FleetDegraded, FleetRecovered
from supervisor.fleet.identity import config_digest
from supervisor.fleet.leases import PgLeases
from supervisor.fleet.member import FleetHealth, follow_reloads
from supervisor.runtime.reload import ConfigReloaded
from supervisor.systemd.conditions import FleetConditions
from supervisor.systemd.degraded import Degraded
from tests.harness.config import genesys_config


def test_a_degraded_member_raises_the_fleet_condition_until_it_recovers() -> None:
    bus = EventBus()
    seen: list[Published] = []
    bus.subscribe(seen.append)
    degraded = Degraded(bus, FakeClock())
    bus.subscribe(FleetConditions(degraded))
    said: list[str] = []
    health = FleetHealth("edge-1", bus, FakeClock(), said.append)
    health("cannot reach the database (connection refused)")
    assert degraded.active == {"fleet": "cannot reach the database (connection refused): no shard taken"}
    assert said == ["fleet: member edge-1: cannot reach the database (connection refused)"]
    events = [p.event for p in seen]
    assert any(isinstance(e, FleetDegraded) and e.member == "edge-1" for e in events)
    health(None)
    assert degraded.active == {}
    assert [type(p.event).__name__ for p in seen[-2:]] == ["FleetRecovered", "DaemonRecovered"]
    assert isinstance(seen[-2].event, FleetRecovered) and seen[-2].event.member == "edge-1"


def test_a_reload_applied_changes_the_digest_the_member_publishes() -> None:
    bus = EventBus()
    leases = PgLeases("host=/nonexistent dbname=x", member="edge-1", host="h", digest="0" * 64)
    urls = {"login": "http://127.0.0.1:9", "api": "http://127.0.0.1:9", "webmessaging": "ws://127.0.0.1:9"}
    config = parse_config(genesys_config({**urls, "streaming": "ws://127.0.0.1:9"}, 1), "c.toml")
    follow_reloads(leases, bus, lambda: config)
    bus.publish(ConfigReloaded(("wm-0",), (), (), 0, "v2"))
    assert leases.digest == config_digest(config) != "0" * 64
