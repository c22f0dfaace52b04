"""What a daemon builds of the fleet (supervisor/fleet/sharing.py): nothing for one host, the bus (with the store's
password) for a PostgreSQL store, and the hard tenant quota only when configured."""

from __future__ import annotations

from pathlib import Path

from machines.registry import Endpoints
from supervisor.attempts import SILENT, Attempts
from supervisor.bus import EventBus
from supervisor.clock import FakeClock
from supervisor.config import parse_config
from supervisor.fleet.bus import Notice
from supervisor.fleet.leases import RELEASED, PgLeases
from supervisor.fleet.sharing import FleetSharing, fleet_sharing
from supervisor.runtime.leases import SoloLeases

BASE = """
[platforms.genesys]
loginUrl = "http://127.0.0.1:1/login"
apiUrl = "http://127.0.0.1:1/api"
webmessagingUrl = "ws://127.0.0.1:1/wm"
clientId = "demo-client"
clientSecretFile = "genesys-secret"
deploymentId = "dep-1"
"""


def build(text: str, directory: Path, leases: SoloLeases | PgLeases | None = None) -> FleetSharing | None:
    clock = FakeClock()
    return fleet_sharing(
        parse_config(text, "test.toml"),
        attempts=Attempts(Endpoints(clock)),
        events=EventBus(),
        leases=SoloLeases(1, identity="member-x") if leases is None else leases,
        clock=clock,
        reports=SILENT,
        config_dir=directory,
        environ={},
    )


def test_one_host_builds_nothing_of_the_fleet(tmp_path: Path) -> None:
    assert build(BASE, tmp_path) is None
    assert build(BASE + f'[store]\npath = "{tmp_path / "s.sqlite3"}"\n', tmp_path) is None


def test_a_postgresql_store_makes_a_member_its_bus_with_the_stores_password(tmp_path: Path) -> None:
    (tmp_path / "pg-password").write_text("pw-s3cret\n")
    store = '[store]\nurl = "postgresql:///fleet?host=/run/pg&user=ss"\npasswordFile = "pg-password"\n'
    member = build(BASE + store, tmp_path)
    assert member is not None
    bus = member.bus
    assert bus.member == "member-x"
    assert bus._password == "pw-s3cret" and "pw-s3cret" not in bus._conninfo
    assert member.quota is None
    quota = "[admission]\ntenantQuota = 50\ntenantQuotaBurst = 5\n"
    limited = build(BASE + quota + store, tmp_path)
    assert limited is not None
    assert limited.quota is not None
    assert (limited.quota.rate, limited.quota.burst) == (50.0, 5)


def test_a_peers_release_heard_on_the_bus_wakes_the_members_renewal(tmp_path: Path) -> None:
    store = '[store]\nurl = "postgresql:///fleet?host=/run/pg&user=ss"\n'
    leases = PgLeases("dbname=fleet", member="member-x", host="h", digest="d" * 64)
    member = build(BASE + store, tmp_path, leases)
    assert member is not None
    handler = member.bus._handlers[RELEASED]
    assert not leases._woken
    handler(Notice(RELEASED, '{"member": "member-y", "freed": 128}', 4242))
    assert leases._woken
