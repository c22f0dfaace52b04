"""``[handover]``: what a stop does to the sessions, as the configuration, the environment and
``run --check`` say it (docs/configuration.md, "Handover")."""

from __future__ import annotations

from pathlib import Path

import pytest

from supervisor.cli import main
from supervisor.config import parse_config
from supervisor.config_durable import DEFAULT_HANDOVER_MAX_AGE_S, ON_STOP_ENV, StopAction, stop_action
from supervisor.errors import ConfigError

EXAMPLE = Path(__file__).resolve().parents[2] / "systemd" / "session-supervisor.example.toml"
PLATFORMS = "[platforms]\n"


def test_a_stop_hands_over_by_default_and_the_key_or_the_environment_says_end() -> None:
    config = parse_config(PLATFORMS, "c.toml")
    assert config.handover.on_stop is StopAction.HANDOVER
    assert config.handover.max_age_seconds == DEFAULT_HANDOVER_MAX_AGE_S == 240.0
    assert stop_action(config.handover, {}) is StopAction.HANDOVER
    ended = parse_config(PLATFORMS + '[handover]\nonStop = "end"\nmaxAgeSeconds = 60\n', "c.toml")
    assert stop_action(ended.handover, {}) is StopAction.END and ended.handover.max_age_seconds == 60.0
    # a unit's drop-in (Environment=) wins over the file, either way
    assert stop_action(config.handover, {ON_STOP_ENV: "end"}) is StopAction.END
    assert stop_action(ended.handover, {ON_STOP_ENV: "handover"}) is StopAction.HANDOVER


@pytest.mark.parametrize(
    ("table", "problem"),
    [
        (
            'onStop = "logout"',
            "handover.onStop: invalid enum value 'logout' (expected one of: handover, end)",
        ),
        ("maxAgeSeconds = 0", "handover.maxAgeSeconds: expected `float` > 0.0"),
        ("maxAge = 5", "handover: object contains unknown field `maxAge`"),
    ],
)
def test_a_bad_handover_table_is_one_located_error(table: str, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(PLATFORMS + f"[handover]\n{table}\n", "c.toml")
    assert str(caught.value) == f"c.toml: {problem}"


def test_a_bad_environment_value_names_the_variable() -> None:
    config = parse_config(PLATFORMS, "c.toml")
    with pytest.raises(ConfigError) as caught:
        stop_action(config.handover, {ON_STOP_ENV: "nope"})
    assert str(caught.value) == f"${ON_STOP_ENV}: expected 'handover' or 'end', got 'nope'"


def _example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store: bool) -> Path:
    for name in ("genesys-client-secret", "cxone-client-secret", "cxone-password"):
        (tmp_path / name).write_text("x")
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(tmp_path))
    monkeypatch.delenv("STATE_DIRECTORY", raising=False)
    monkeypatch.delenv(ON_STOP_ENV, raising=False)
    text = EXAMPLE.read_text().replace("/run/session-supervisor/", f"{tmp_path}/")
    if store:
        text = text.replace(
            '# path = "/var/lib/session-supervisor/store.sqlite3"', f'path = "{tmp_path}/s.sqlite3"'
        )
    example = tmp_path / "supervisor.toml"
    example.write_text(text)
    return example


@pytest.mark.parametrize(
    ("store", "env", "said"),
    [
        (False, None, "stop: no store ([store] path, or $STATE_DIRECTORY): a stop ends every session"),
        (True, None, "stop: hands every session over to the next start (store: "),
        (True, "end", f"stop: ends every session (${ON_STOP_ENV}; store: "),
    ],
)
def test_run_check_says_what_a_stop_does(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    store: bool,
    env: str | None,
    said: str,
) -> None:
    example = _example(tmp_path, monkeypatch, store)
    if env is not None:
        monkeypatch.setenv(ON_STOP_ENV, env)
    with pytest.raises(SystemExit) as info:
        main(["run", "--config", str(example), "--check"])
    out, err = capsys.readouterr()
    assert info.value.code == 0, err
    (line,) = [x for x in out.splitlines() if x.startswith("stop: ")]
    assert line.startswith(said)


def test_run_check_refuses_a_bad_environment_value_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    example = _example(tmp_path, monkeypatch, True)
    monkeypatch.setenv(ON_STOP_ENV, "later")
    with pytest.raises(SystemExit) as info:
        main(["run", "--config", str(example), "--check"])
    out, err = capsys.readouterr()
    assert info.value.code == 1 and out == ""
    assert err.splitlines() == [
        f"session-supervisor: error: ${ON_STOP_ENV}: expected 'handover' or 'end', got 'later'"
    ]
