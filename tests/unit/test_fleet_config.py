"""The ``[fleet]`` table (supervisor/config_durable.py, docs/configuration.md): its defaults, its
bounds, and the renewal period two of which must fit in a lease's local window; a bad value is one
located line."""

from __future__ import annotations

import pytest

from supervisor.config import parse_config
from supervisor.errors import ConfigError
from supervisor.runtime.reload import restart_required


def test_the_defaults_are_a_ten_second_lease_renewed_every_two_seconds() -> None:
    fleet = parse_config("", "f.toml").fleet
    assert (fleet.member, fleet.host, fleet.lease_seconds, fleet.renew_seconds) == (None, None, 10.0, 2.0)


def test_the_keys_are_read() -> None:
    text = '[fleet]\nmember = "edge-1/ab12cd34"\nhost = "edge-1.example.com"\nleaseSeconds = 2\nrenewSeconds = 0.5\n'
    fleet = parse_config(text, "f.toml").fleet
    assert (fleet.member, fleet.host, fleet.lease_seconds, fleet.renew_seconds) == (
        "edge-1/ab12cd34",
        "edge-1.example.com",
        2.0,
        0.5,
    )


@pytest.mark.parametrize(
    ("table", "said"),
    [
        (
            "renewSeconds = 4",
            "fleet: renewSeconds 4 is too long for leaseSeconds 10: two renewals must fit in 6 s",
        ),
        ("leaseSeconds = 0.5", "fleet.leaseSeconds: expected `float` >= 1.0"),
        ('member = "has space"', "fleet.member: expected `str` matching regex"),
        ("tll = 3", "fleet: object contains unknown field `tll`"),
    ],
)
def test_a_bad_value_is_one_located_line(table: str, said: str) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config(f"[fleet]\n{table}\n", "f.toml")
    text = str(refused.value)
    assert text.startswith("f.toml: ") and said in text and "\n" not in text


def test_a_reload_that_changes_the_fleet_table_needs_a_restart() -> None:
    before = parse_config("", "f.toml")
    after = parse_config("[fleet]\nleaseSeconds = 20\n", "f.toml")
    assert restart_required(before, after) == ("fleet",)
