"""``[fleet] loopLagSeconds`` and ``localAddress`` (docs/configuration.md): defaults, and bad values
refused in one line naming the key."""

from __future__ import annotations

import pytest

from supervisor.config import parse_config
from supervisor.errors import ConfigError


def test_the_defaults_are_a_two_second_bound_and_no_source_address() -> None:
    fleet = parse_config("", "c.toml").fleet
    assert fleet.loop_lag_seconds == 2.0 and fleet.local_address is None


@pytest.mark.parametrize("address", ["127.0.0.12", "::1", "fd00::12"])
def test_a_local_address_is_an_ip_literal(address: str) -> None:
    fleet = parse_config(f'[fleet]\nlocalAddress = "{address}"\nloopLagSeconds = 0.5\n', "c.toml").fleet
    assert fleet.local_address == address and fleet.loop_lag_seconds == 0.5


@pytest.mark.parametrize(
    ("table", "key"),
    [
        ('localAddress = "member-1.example"', "fleet.localAddress"),
        ("loopLagSeconds = 0", "fleet.loopLagSeconds"),
        ("loopLagSeconds = 61", "fleet.loopLagSeconds"),
    ],
)
def test_a_bad_value_is_refused_naming_its_key(table: str, key: str) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config(f"[fleet]\n{table}\n", "c.toml")
    message = str(refused.value)
    assert message.startswith(f"c.toml: {key}: ") and "\n" not in message
