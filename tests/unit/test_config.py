"""Configuration: validated on load, errors located, secrets read from files and never printed."""

from __future__ import annotations

from pathlib import Path

import pytest

from supervisor.cli import main
from supervisor.config import Secret, SessionKind, load_config, parse_config, read_secret
from supervisor.errors import ConfigError

EXAMPLE = Path(__file__).resolve().parents[2] / "systemd" / "session-supervisor.example.toml"


def test_example_config_is_valid() -> None:
    config = load_config(EXAMPLE)
    assert [s.kind for s in config.sessions] == [
        SessionKind.WEBMESSAGING,
        SessionKind.NOTIFICATIONS,
        SessionKind.AGENT_SESSION,
    ]
    assert (config.reconnect.first_delay_min, config.reconnect.first_delay_max) == (2.0, 8.0)
    assert config.reconnect.throttle_jitter == 10.0
    assert (config.circuit.failure_threshold, config.circuit.window, config.circuit.open_for) == (
        5,
        10.0,
        30.0,
    )
    assert (config.tokens.early_refresh, config.tokens.refresh_before_retry) == (300.0, 60.0)


BASE = """
[platforms.cxone]
authUrl = "http://127.0.0.1:1"
clientId = "app"
clientSecretFile = "s"
username = "AKID"
passwordFile = "p"
"""


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            BASE + "[circuit]\nfailureThreshold = 0\n",
            r"^c\.toml: circuit\.failureThreshold: expected `int` >= 1$",
        ),
        (
            BASE + "[circuit]\nfailurethreshold = 5\n",
            r"^c\.toml: circuit: object contains unknown field `failurethreshold`$",
        ),
        (
            BASE + '[[sessions]]\nid = "a"\nplatform = "genesis"\nkind = "agent-session"\n',
            r"^c\.toml: sessions\[0\]\.platform: expected 'genesys' or 'cxone', got 'genesis'$",
        ),
        (
            BASE + '[[sessions]]\nid = "a"\nplatform = "cxone"\nkind = "webmessaging"\n',
            r"^c\.toml: sessions\[0\]\.kind: a cxone session is an 'agent-session'$",
        ),
        (
            BASE + '[[sessions]]\nid = "a"\nplatform = "genesys"\nkind = "webmessaging"\n',
            r"^c\.toml: sessions\[0\]\.platform: \[platforms\.genesys\] is not configured$",
        ),
        (
            BASE + '[[sessions]]\nid = "a"\nplatform = "cxone"\nkind = "agent-session"\n' * 2,
            r"^c\.toml: sessions\[1\]\.id: duplicate session id 'a'$",
        ),
        (
            BASE + "[reconnect]\nfirstDelayMin = 9.0\n",
            r"^c\.toml: reconnect\.firstDelayMin: must be <= reconnect\.firstDelayMax$",
        ),
        (
            '[platforms.cxone]\nauthUrl = "ftp://x"\n',
            r"^c\.toml: platforms\.cxone\.authUrl: the scheme must be http or https, got 'ftp'$",
        ),
        ("[platforms\n", r"^c\.toml: not valid TOML: "),
        (
            BASE.replace('username = "AKID"\n', ""),
            r"^c\.toml: platforms\.cxone\.username: required: the access key id \(CXone logs in with an access key\)$",
        ),
        (
            BASE.replace('passwordFile = "p"\n', ""),
            r"^c\.toml: platforms\.cxone\.passwordFile: required: the file holding the access key secret",
        ),
    ],
)
def test_errors_name_the_key(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(text, "c.toml")


def test_secret_never_prints() -> None:
    secret = Secret("hunter2")
    assert "hunter2" not in repr(secret) and "hunter2" not in str(secret) and "hunter2" not in f"{secret}"
    assert secret.reveal() == "hunter2"


def test_secrets_come_from_the_credentials_directory_first(tmp_path: Path) -> None:
    creds, beside = tmp_path / "creds", tmp_path / "etc"
    creds.mkdir()
    beside.mkdir()
    (creds / "s").write_text("from-systemd\n")
    (beside / "s").write_text("from-beside")
    env = {"CREDENTIALS_DIRECTORY": str(creds)}
    value = read_secret("s", key="k", config_dir=beside, environ=env)
    assert value is not None and value.reveal() == "from-systemd"
    value = read_secret("s", key="k", config_dir=beside, environ={})
    assert value is not None and value.reveal() == "from-beside"
    with pytest.raises(ConfigError, match=r"^k: credential file not found"):
        read_secret("missing", key="k", config_dir=beside, environ=env)
    with pytest.raises(ConfigError, match=r"^k: cannot read credential file"):
        read_secret("bad\x00name", key="k", config_dir=beside, environ={})
    (beside / "empty").write_text("  \n")
    with pytest.raises(ConfigError, match=r"^k: credential file .* is empty$"):
        read_secret("empty", key="k", config_dir=beside, environ={})


def test_run_check_reads_credentials_without_printing_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in (
        ("genesys-client-secret", "g-SECRET"),
        ("cxone-client-secret", "c-SECRET"),
        ("cxone-password", "p-SECRET"),
    ):
        (tmp_path / name).write_text(value)
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(tmp_path))
    # the example's sockets are under /run/session-supervisor/, which systemd's socket units make:
    # here they go to a directory that exists (run --check says when it does not)
    example = tmp_path / "supervisor.toml"
    example.write_text(EXAMPLE.read_text().replace("/run/session-supervisor/", f"{tmp_path}/"))
    with pytest.raises(SystemExit) as info:
        main(["run", "--config", str(example), "--check"])
    out, err = capsys.readouterr()
    assert info.value.code == 0, err
    assert "3 sessions" in out and "SECRET" not in out + err


@pytest.mark.parametrize("check", [True, False])
def test_run_refuses_a_cxone_login_without_an_access_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], check: bool
) -> None:
    """A client-credentials-only [platforms.cxone] (no vendor source shows such a CXone grant) is one
    located line from `run --check` and from `run`, before anything starts."""
    config = tmp_path / "c.toml"
    config.write_text(BASE.replace('username = "AKID"\n', "").replace('passwordFile = "p"\n', ""))
    with pytest.raises(SystemExit) as info:
        main(["run", "--config", str(config), *(["--check"] if check else [])])
    out, err = capsys.readouterr()
    assert info.value.code == 1 and out == ""
    assert err.splitlines() == [
        f"session-supervisor: error: {config}: platforms.cxone.username: required: the access key id "
        "(CXone logs in with an access key)"
    ]


def test_run_with_a_missing_config_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as info:
        main(["run", "--config", str(tmp_path / "nope.toml")])
    _, err = capsys.readouterr()
    assert info.value.code == 1
    assert err.strip() == f"session-supervisor: error: {tmp_path / 'nope.toml'}: no such configuration file"
