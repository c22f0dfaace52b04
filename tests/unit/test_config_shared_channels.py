"""``platforms.genesys.sharedChannels`` and ``topicsPerChannel``: how many notifications sessions a
client can carry (docs/configuration.md, "Genesys notifications: at most 20 sessions, or 20 shared
channels")."""

from __future__ import annotations

import pytest

from supervisor.config import GENESYS_TOPICS_PER_CHANNEL, notification_capacity, parse_config
from supervisor.errors import ConfigError


def config(count: int, *shared: str) -> str:
    lines = [
        "[platforms.genesys]",
        'loginUrl = "https://login.example.com"',
        'apiUrl = "https://api.example.com"',
        'clientId = "c"',
        *shared,
    ]
    sessions = "".join(
        f'[[sessions]]\nid = "n{i}"\nplatform = "genesys"\nkind = "notifications"\nagentId = "a{i}"\n'
        for i in range(count)
    )
    return "\n".join(lines) + "\n" + sessions


def test_shared_channels_carry_twenty_channels_of_topics() -> None:
    assert GENESYS_TOPICS_PER_CHANNEL == 1000
    # shared is the default
    parsed = parse_config(config(0), "c.toml")
    genesys = parsed.platforms.genesys
    assert genesys is not None and genesys.shared_channels and notification_capacity(genesys) == 20_000
    # off: one channel a session
    off = parse_config(config(0, "sharedChannels = false"), "c.toml").platforms.genesys
    assert off is not None and not off.shared_channels and notification_capacity(off) == 20
    with pytest.raises(
        ConfigError, match=r"^c\.toml: sessions\[20\]\.kind: more than 20 notifications sessions;"
    ):
        parse_config(config(21, "sharedChannels = false"), "c.toml")


def test_past_twenty_channels_of_topics_the_file_is_refused() -> None:
    shared = ("sharedChannels = true", "topicsPerChannel = 2")
    assert len(parse_config(config(40, *shared), "c.toml").sessions) == 40
    with pytest.raises(
        ConfigError, match=r"^c\.toml: sessions\[40\]\.kind: more than 40 notifications sessions;"
    ):
        parse_config(config(41, *shared), "c.toml")


@pytest.mark.parametrize("value", ["0", "1001", '"many"'])
def test_topics_per_channel_is_checked(value: str) -> None:
    with pytest.raises(ConfigError, match=r"^c\.toml: platforms\.genesys\.topicsPerChannel"):
        parse_config(config(0, "sharedChannels = true", f"topicsPerChannel = {value}"), "c.toml")
