"""Values that validate but cannot work are refused by ``run --check`` with one located line.

Among them: URLs (scheme per key, host, port), non-finite numbers, and more Genesys
notifications sessions than the platform's 20 channels per user and app (docs/platforms.md, "Genesys Cloud notifications").
And socket paths `run` could not bind (a missing directory, a file in the way).
"""

from __future__ import annotations

import math
import os
import re
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from supervisor.config import GENESYS_CHANNELS_PER_CLIENT, parse_config
from supervisor.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def genesys(login: str = "https://login.example.com", **extra: str) -> str:
    lines = [
        "[platforms.genesys]",
        f'loginUrl = "{login}"',
        'apiUrl = "https://api.example.com"',
        'clientId = "c"',
        *(f'{key} = "{value}"' for key, value in extra.items()),
    ]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("http://127.0.0.1:99999", "not a valid URL (Port out of range 0-65535)"),
        ("http://h:abc", "not a valid URL (Port could not be cast to integer value as 'abc')"),
        ("http://h:+80", "not a valid URL (Port could not be cast to integer value as '+80')"),
        ("http://h:0", "port 0 cannot be connected to"),
        ("http://exa mple", "invalid host 'exa mple'"),
        ("http://a..b", "invalid host 'a..b'"),
        ("http://-bad.example", "invalid host '-bad.example'"),
        ("http://1.2.3.999", "invalid host '1.2.3.999' (not an IPv4 address)"),
        ("http://[::1", "not a valid URL (Invalid IPv6 URL)"),
        ("http://:80", "has no host"),
        ("http://user:pw@h.example", "must not carry credentials (name them in the *File keys)"),
        ("http://h.example/?x=1", "must not have a query or a fragment (it is a base URL)"),
        ("http://h.example/#f", "must not have a query or a fragment (it is a base URL)"),
        ("wss://h.example", "the scheme must be http or https, got 'wss'"),
        ("ftp://h.example", "the scheme must be http or https, got 'ftp'"),
        ("h.example", "the scheme must be http or https, got 'h.example'"),
    ],
)
def test_a_login_url_that_cannot_be_connected_to_is_located(url: str, problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(genesys(url), "c.toml")
    assert str(info.value) == f"c.toml: platforms.genesys.loginUrl: {problem}"


@pytest.mark.parametrize(
    ("key", "url", "problem"),
    [
        ("webmessagingUrl", "https://wm.example", "the scheme must be ws or wss, got 'https'"),
        ("streamingUrl", "http://s.example", "the scheme must be ws or wss, got 'http'"),
        ("webmessagingUrl", "wss://wm.example:70000", "not a valid URL (Port out of range 0-65535)"),
    ],
)
def test_websocket_urls_need_a_websocket_scheme(key: str, url: str, problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(genesys(**{key: url}), "c.toml")
    assert str(info.value) == f"c.toml: platforms.genesys.{key}: {problem}"


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:1",
        "https://[::1]:8443",
        "https://bücher.example",
        "https://api.example.com/inContactAPI/",
        "https://login.example.com.",
        "http://localhost:65535",
    ],
)
def test_usable_urls_pass(url: str) -> None:
    assert parse_config(genesys(url), "c.toml").platforms.genesys is not None


@given(st.integers(0, 10**7))
def test_every_port_in_range_passes_and_every_other_is_refused(port: int) -> None:
    text = genesys(f"https://login.example.com:{port}")
    if 1 <= port <= 65535:
        parse_config(text, "c.toml")
    else:
        with pytest.raises(ConfigError, match=r"^c\.toml: platforms\.genesys\.loginUrl: "):
            parse_config(text, "c.toml")


@given(
    st.sampled_from(
        ["daemon.shutdownGrace", "daemon.requestTimeout", "circuit.window", "tokens.earlyRefresh"]
    ),
    st.sampled_from(["nan", "inf", "-inf", "+nan", "1e400"]),
)
def test_non_finite_durations_are_refused(key: str, value: str) -> None:
    section, name = key.split(".")
    text = genesys() + f"[{section}]\n{name} = {value}\n"
    with pytest.raises(ConfigError, match=rf"^c\.toml: {key}: "):
        parse_config(text, "c.toml")
    assert not math.isfinite(float(value))


def notifications(count: int) -> str:
    """``count`` notifications sessions, one channel each (``sharedChannels = false``: the limit these
    tests are about; the shared default's is tests/unit/test_config_shared_channels.py's)."""
    sessions = "".join(
        f'[[sessions]]\nid = "n{i}"\nplatform = "genesys"\nkind = "notifications"\nagentId = "a{i}"\n'
        for i in range(count)
    )
    return genesys() + "sharedChannels = false\n" + sessions


def test_twenty_notifications_sessions_pass_and_a_21st_names_the_limit() -> None:
    assert GENESYS_CHANNELS_PER_CLIENT == 20
    assert len(parse_config(notifications(20), "c.toml").sessions) == 20
    with pytest.raises(ConfigError) as info:
        parse_config(notifications(21), "c.toml")
    assert str(info.value) == (
        "c.toml: sessions[20].kind: more than 20 notifications sessions; Genesys allows 20 notification "
        "channels per user and app (platforms.genesys.clientId is shared by all of them)"
    )


@pytest.mark.parametrize(
    ("text", "line"),
    [
        (
            genesys("http://127.0.0.1:99999"),
            "platforms.genesys.loginUrl: not a valid URL (Port out of range 0-65535)",
        ),
        (notifications(25), "sessions[20].kind: more than 20 notifications sessions;"),
    ],
)
def test_run_check_refuses_them_in_one_line(tmp_path: Path, text: str, line: str) -> None:
    (tmp_path / "secret").write_text("s3cret")
    path = tmp_path / "c.toml"
    path.write_text(text.replace('clientId = "c"', 'clientId = "c"\nclientSecretFile = "secret"'))
    result = subprocess.run(
        [sys.executable, "-m", "supervisor", "run", "--config", str(path), "--check"],
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
        cwd=ROOT,
    )
    assert result.returncode == 1
    assert result.stdout == ""
    assert len(result.stderr.splitlines()) == 1
    assert result.stderr.startswith(f"session-supervisor: error: {path}: {line}")


def test_a_notifications_session_needs_an_agent_for_its_topic() -> None:
    from supervisor.config import parse_config
    from supervisor.errors import ConfigError

    text = """
[platforms.genesys]
loginUrl = "https://login.example.com"
apiUrl = "https://api.example.com"
clientId = "c"
clientSecretFile = "s"
[[sessions]]
id = "nt-0"
platform = "genesys"
kind = "notifications"
"""
    with pytest.raises(
        ConfigError,
        match="^" + re.escape("t.toml: sessions[0].agentId: required by a notifications session") + "$",
    ):
        parse_config(text, "t.toml")


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        (
            '[admission]\nprobe = "vegas"\n',
            "x.toml: admission.probe: invalid enum value 'vegas' (expected one of: aimd, cubic)",
        ),
        (
            '[[sessions]]\nid = "s"\nplatform = "genesys"\nkind = "agent"\n',
            "x.toml: sessions[0].kind: invalid enum value 'agent' "
            "(expected one of: webmessaging, notifications, agent-session)",
        ),
    ],
)
def test_a_wrong_choice_names_the_choices(toml: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(genesys() + toml, "x.toml")
    assert str(caught.value) == message


def test_admission_probe_is_aimd_by_default_and_cubic_when_asked() -> None:
    assert parse_config(genesys(), "x.toml").admission.probe == "aimd"
    assert parse_config(genesys() + '[admission]\nprobe = "cubic"\n', "x.toml").admission.probe == "cubic"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0", "expected `int` >= 1"),
        ("100001", "expected `int` <= 100000"),
        ('"many"', "expected `int`, got `str`"),
        ("2.5", "expected `int`, got `float`"),
    ],
)
def test_connects_in_flight_is_a_count_of_at_least_one(value: str, message: str) -> None:
    assert parse_config(genesys(), "x.toml").admission.connects_in_flight == 128
    text = genesys() + f"[admission]\nconnectsInFlight = {value}\n"
    assert (
        parse_config(genesys() + "[admission]\nconnectsInFlight = 1\n", "x.toml").admission.connects_in_flight
        == 1
    )
    with pytest.raises(ConfigError) as caught:
        parse_config(text, "x.toml")
    assert str(caught.value) == f"x.toml: admission.connectsInFlight: {message}"


def test_store_and_attribute_defaults_are_the_seeds_when_the_tables_are_left_out() -> None:
    """Seed edge case 2: a queue of depth 50, a read-back 3 s after acceptance; the store synced
    at every commit (docs/store.md), at $STATE_DIRECTORY unless a path is given."""
    config = parse_config(genesys(), "x.toml")
    attributes, store = config.attributes, config.store
    assert (attributes.queue_depth, attributes.verify_after, attributes.sensitive) == (50, 3.0, [])
    assert (attributes.resume_at, attributes.repair_budget) == (None, 2)
    assert (store.path, store.synchronous) == (None, "full")
    with pytest.raises(ConfigError) as caught:
        parse_config(genesys() + "[attributes]\nqueueDepth = 10\nresumeAt = 10\n", "x.toml")
    assert "resumeAt must be below queueDepth" in str(caught.value)


# -- the socket directory `run` binds in ----------------------------------------------------------------


def run_check(path: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environ = {
        k: v for k, v in os.environ.items() if k not in ("XDG_RUNTIME_DIR", "LISTEN_FDS", "LISTEN_PID")
    }
    return subprocess.run(
        [sys.executable, "-m", "supervisor", "run", "--config", str(path), "--check"],
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
        cwd=ROOT,
        env={**environ, **(env or {})},
    )


def with_sockets(tmp_path: Path, table: str) -> Path:
    path = tmp_path / "c.toml"
    (tmp_path / "secret").write_text("s3cret")
    path.write_text(genesys(clientSecretFile="secret") + table)
    return path


@pytest.mark.parametrize("case", ["missing", "a-file", "not-a-socket", "too-long", "xdg-missing"])
def test_run_check_says_what_run_would_fail_on_when_it_binds_its_sockets(tmp_path: Path, case: str) -> None:
    """Formerly `run --check` passed these and `run` then failed at the bind."""
    (tmp_path / "plain").write_text("not a directory")
    (tmp_path / "sockets").mkdir()
    (tmp_path / "sockets" / "control.sock").write_text("not a socket")
    control, env = str(tmp_path / "sockets" / "c.sock"), None
    if case == "missing":
        control = str(tmp_path / "nowhere" / "c.sock")
        line = f"sockets.control: the directory {tmp_path / 'nowhere'} does not exist, so run cannot bind {control}"
    elif case == "a-file":
        control = str(tmp_path / "plain" / "c.sock")
        line = f"sockets.control: {tmp_path / 'plain'} is not a directory, so run cannot bind {control}"
    elif case == "not-a-socket":
        control = str(tmp_path / "sockets" / "control.sock")
        line = f"sockets.control: {control} exists and is not a socket"
    elif case == "too-long":
        deep = tmp_path / ("d" * 100)
        deep.mkdir()
        control = str(deep / "c.sock")
        line = "sockets.control: "  # refused by the configuration's own 107-byte bound, located
    else:
        # no [sockets] paths: under $XDG_RUNTIME_DIR (short enough for sun_path), which is missing
        missing = Path(tempfile.gettempdir()) / f"ss-no-runtime-{os.getpid()}"
        env = {"XDG_RUNTIME_DIR": str(missing)}
        line = f"$XDG_RUNTIME_DIR: the directory {missing} does not exist"
    table = f'[sockets]\nsubscribe = "{tmp_path / "sockets" / "s.sock"}"\ncontrol = "{control}"\n'
    result = run_check(with_sockets(tmp_path, "" if case == "xdg-missing" else table), env)
    assert result.returncode == 1
    assert result.stdout == ""
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert result.stderr.startswith(f"session-supervisor: error: {tmp_path / 'c.toml'}: {line}"), (
        result.stderr
    )


def test_run_check_passes_sockets_it_can_bind_and_a_disabled_api(tmp_path: Path) -> None:
    sockets = tmp_path / "s"
    sockets.mkdir()
    # a socket a killed daemon left behind is replaced at start: fine
    with socket.socket(socket.AF_UNIX) as stale:
        stale.bind(str(sockets / "c.sock"))
    table = f'[sockets]\nsubscribe = "{sockets / "s.sock"}"\ncontrol = "{sockets / "c.sock"}"\n'
    assert run_check(with_sockets(tmp_path, table)).returncode == 0
    off = f'[sockets]\nenabled = false\ncontrol = "{tmp_path / "nowhere" / "c.sock"}"\n'
    assert run_check(with_sockets(tmp_path, off)).returncode == 0
    # the default place: $XDG_RUNTIME_DIR exists, session-supervisor/ in it is created by `run`
    assert run_check(with_sockets(tmp_path, ""), {"XDG_RUNTIME_DIR": str(tmp_path)}).returncode == 0
