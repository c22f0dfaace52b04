"""What a reload decides without I/O: the tables only a restart applies, what restarts a session, and
how a token cache takes a rotated credential's source.

The daemon-level behaviour (real sockets, the simulators) is in tests/integration/test_reload_rotation.py
and tests/integration/test_reload_tables.py.
"""

from __future__ import annotations

from typing import Any

import anyio
import msgspec
import pytest

from supervisor.cli.ctl_cmd import reload_summary
from supervisor.clock import FakeClock
from supervisor.config import Config, Secret, parse_config
from supervisor.rest.tokens import TokenCache
from supervisor.runtime.reload import APPLIED_TABLES, RESTART_FIELDS, restart_required, settings
from tests.harness.config import genesys_config

URLS = {
    "login": "http://127.0.0.1:1",
    "api": "http://127.0.0.1:2",
    "webmessaging": "ws://127.0.0.1:3",
    "streaming": "ws://127.0.0.1:4",
}
BASE = genesys_config(URLS, 1, notifications=1)


def config(extra: str = "", text: str = BASE) -> Config:
    return parse_config(text + extra, "test.toml")


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ('[store]\npath = "/var/lib/x/store.sqlite3"\n', ("store",)),
        ("[attributes]\nqueueDepth = 7\n", ("attributes",)),
        ('[telemetry]\nendpoint = "http://127.0.0.1:4318"\n', ("telemetry",)),
        ('[sockets]\nmode = "0600"\n', ("sockets",)),
        ('[taxonomy]\nshadow = "v1"\n', ("taxonomy",)),
        ("[events]\nwindowEvents = 7\n", ()),
        ("[events]\nresyncInFlight = 2\n", ("events",)),
        ('[sockets]\ncontrol = "/run/x/control.sock"\n', ("sockets",)),
        # access lists, roles and limits are applied: nothing to restart for
        ("[sockets]\nallowUids = [1000]\ncontrolAllowUids = [1000]\nobserverUids = []\n", ()),
        ("[sockets]\nmaxConnections = 3\ncontrolIdleTimeout = 5\n", ()),
    ],
)
def test_the_tables_only_a_restart_applies_are_named(extra: str, named: tuple[str, ...]) -> None:
    assert restart_required(config(), config(extra)) == named


def test_daemon_and_admission_keys() -> None:
    base = BASE.replace("shutdownGrace = 2.0", "shutdownGrace = 2.0\nrequestTimeout = 15")
    timeout = base.replace("requestTimeout = 15", "requestTimeout = 3")
    grace = base.replace("shutdownGrace = 2.0", "shutdownGrace = 9.0")
    admission = base.replace("connectsInFlight = 128", "connectsInFlight = 64")
    reconnect = base.replace("horizon = 600.0", "horizon = 60.0")
    assert restart_required(config(text=base), config(text=timeout)) == ()
    assert restart_required(config(text=base), config(text=grace)) == ("daemon",)
    assert restart_required(config(text=base), config(text=admission)) == ("admission",)
    assert restart_required(config(text=base), config(text=reconnect)) == ()


def test_without_a_socket_api_any_sockets_change_waits_for_a_restart() -> None:
    lists = config("[sockets]\nallowUids = [1000]\n")
    assert restart_required(config(), lists, sockets_applied=False) == ("sockets",)


def test_every_table_is_either_applied_or_named_for_a_restart() -> None:
    """A table added to the configuration later must be decided here: applied by a reload, or named
    in restartRequired; never acknowledged and silently not applied."""
    tables = {f.name for f in msgspec.structs.fields(Config)}
    assert tables == APPLIED_TABLES | set(RESTART_FIELDS)
    assert not APPLIED_TABLES & set(RESTART_FIELDS)


def test_every_restart_field_exists_in_its_table() -> None:
    default = config()
    for table, fields in RESTART_FIELDS.items():
        names = {f.name for f in msgspec.structs.fields(getattr(default, table))}
        assert set(fields or ()) <= names, table


def by_id(c: Config) -> dict[str, bytes]:
    return {spec.id: settings(c, spec) for spec in c.sessions}


def test_a_guest_depends_on_the_web_messaging_keys_only() -> None:
    before = by_id(config())
    client = by_id(config(text=BASE.replace('clientId = "demo-client"', 'clientId = "other"')))
    assert client["wm-0"] == before["wm-0"] and client["nt-0"] != before["nt-0"]
    deployment = by_id(config(text=BASE.replace('deploymentId = "dep-1"', 'deploymentId = "dep-2"')))
    assert deployment["wm-0"] != before["wm-0"]


def test_a_credential_file_renamed_changes_no_session() -> None:
    renamed = config(text=BASE.replace('clientSecretFile = "genesys-secret"', 'clientSecretFile = "/x/s"'))
    assert by_id(renamed) == by_id(config())


class Source:
    """A token source answering from a list (what the endpoint would grant, in order)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.asked = 0

    async def fetch(self, refresh: Secret | None) -> tuple[Secret, float, Secret | None, dict[str, Any]]:
        self.asked += 1
        return Secret(f"{self.name}-{self.asked}"), 600.0, None, {}


def test_a_swapped_source_serves_from_the_next_refresh_and_the_token_in_use_stays() -> None:
    async def main() -> None:
        clock = FakeClock()
        old, new = Source("old"), Source("new")
        cache = TokenCache(old, clock, early_refresh_s=60.0)
        in_use = await cache.get()
        clock.advance(300.0)
        granted = await cache.trial(new)
        assert cache.current is in_use and (old.asked, new.asked) == (1, 1)
        cache.swap(new, granted)
        assert cache.current is in_use  # not replaced: no channel rolls over for a rotation
        clock.advance(250.0)  # in_use is within its early-refresh window, granted is not
        assert await cache.get() is granted and new.asked == 1  # taken, not fetched again
        clock.advance(300.0)
        refreshed = await cache.get()
        assert refreshed.access.reveal() == "new-2" and old.asked == 1

    anyio.run(main)


def test_a_granted_token_past_its_window_is_not_taken_and_a_revocation_drops_it() -> None:
    async def main() -> None:
        clock = FakeClock()
        old, new = Source("old"), Source("new")
        cache = TokenCache(old, clock, early_refresh_s=60.0)
        await cache.get()
        cache.swap(new, await cache.trial(new))
        clock.advance(560.0)  # both within their windows now
        assert (await cache.get()).access.reveal() == "new-2"
        cache.swap(old, await cache.trial(old))
        cache.revoke()
        assert (await cache.get()).access.reveal() == "old-3"

    anyio.run(main)


def test_ctl_says_a_rotation_and_the_tables_to_restart_for_in_its_one_line() -> None:
    answer = {
        "added": [],
        "removed": [],
        "restarted": [],
        "unchanged": 4,
        "restartRequired": ["store", "telemetry"],
        "credentialsRotated": ["genesys"],
    }
    assert reload_summary(answer) == (
        "reloaded: none added, none removed, none restarted, 4 unchanged; "
        "credentials rotated: genesys; restart required for: store, telemetry"
    )
