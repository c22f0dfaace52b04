"""A session entry added over the control socket is validated exactly as the file's ``[[sessions]]`` entry:
one code path (supervisor/config.py: ``parse_session`` and ``check_session``), so the same entry gets the same
error, located at its place, whichever way it came; the kind implies the platform when it is left out."""

from __future__ import annotations

from typing import Any

import pytest

from supervisor.config import GENESYS_CHANNELS_PER_CLIENT, Config, parse_config, parse_session
from supervisor.errors import ConfigError
from supervisor.vocabulary import Platform

GENESYS = """
[platforms.genesys]
loginUrl = "https://login.example.com"
apiUrl = "https://api.example.com"
webmessagingUrl = "wss://webmessaging.example.com"
clientId = "client"
clientSecretFile = "secret"
"""


def config(extra: str = "") -> Config:
    return parse_config(GENESYS + extra, "supervisor.toml")


def toml_entry(entry: dict[str, Any]) -> str:
    return "[[sessions]]\n" + "".join(f'{k} = "{v}"\n' for k, v in entry.items())


@pytest.mark.parametrize(
    "entry",
    [
        {"id": "s", "platform": "genesys", "kind": "chat"},  # not a kind
        {"id": "s", "platform": "genesis", "kind": "webmessaging"},  # not a platform
        {"id": "s", "platform": "genesys", "kind": "agent-session"},  # a CXone kind on Genesys
        {"id": "s", "platform": "cxone", "kind": "agent-session"},  # no [platforms.cxone]
        {"id": "s", "platform": "genesys", "kind": "webmessaging"},  # no deploymentId anywhere
        {"id": "s", "platform": "genesys", "kind": "notifications"},  # no agentId
        {"id": "s", "platform": "genesys", "kind": "webmessaging", "colour": "red"},  # unknown key
        {"platform": "genesys", "kind": "webmessaging"},  # no id
    ],
)
def test_the_same_entry_gets_the_same_error_from_the_file_and_from_add_session(entry: dict[str, Any]) -> None:
    with pytest.raises(ConfigError) as from_file:
        config(toml_entry(entry))
    with pytest.raises(ConfigError) as added:
        parse_session(entry, config(), "supervisor.toml", "sessions[0]", notifications=0)
    assert str(added.value) == str(from_file.value)


def test_the_kind_implies_the_platform_and_a_platform_given_is_checked() -> None:
    base = config('deploymentId = "dep"\n')
    spec = parse_session(
        {"id": "wm-9", "kind": "webmessaging"}, base, "AddSession", "sessions[0]", notifications=0
    )
    assert spec.platform is Platform.GENESYS
    with pytest.raises(ConfigError) as wrong:
        parse_session(
            {"id": "cx-9", "kind": "agent-session", "platform": "genesys"},
            base,
            "AddSession",
            "sessions[3]",
            notifications=0,
        )
    assert (
        str(wrong.value)
        == "AddSession: sessions[3].kind: a genesys session is 'webmessaging' or 'notifications'"
    )


def test_the_notification_channel_limit_counts_the_sessions_already_there() -> None:
    # one channel a session (sharedChannels = false): 20 sessions; the shared default's 20 x 1,000 is
    # tests/unit/test_config_shared_channels.py's
    base = config("sharedChannels = false\n")
    entry = {"id": "nt-x", "kind": "notifications", "agentId": "a"}
    parse_session(entry, base, "AddSession", "sessions[0]", notifications=GENESYS_CHANNELS_PER_CLIENT - 1)
    with pytest.raises(
        ConfigError, match=r"^AddSession: sessions\[0\]\.kind: more than 20 notifications sessions"
    ):
        parse_session(entry, base, "AddSession", "sessions[0]", notifications=GENESYS_CHANNELS_PER_CLIENT)
