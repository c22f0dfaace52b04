"""The ``[fleet]`` table (supervisor/config_durable.py, docs/configuration.md): its defaults, its
bounds, and the renewal period two of which must fit in a lease's local window; a bad value is one
located line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from supervisor.cli import main
from supervisor.config import parse_config
from supervisor.errors import ConfigError
from supervisor.fleet.identity import default_member
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


def test_run_check_names_the_member_a_postgresql_store_makes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "edge.toml"
    config.write_text(
        '[store]\nurl = "postgresql:///contact?host=/run/postgresql"\npasswordFile = "pg-password"\n'
        '[fleet]\nhost = "edge-1.example"\n'
    )
    (tmp_path / "pg-password").write_text("s3cret\n")
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    with pytest.raises(SystemExit) as info:
        main(["run", "--config", str(config), "--check"])
    out, err = capsys.readouterr()
    assert info.value.code == 0, err
    (line,) = [x for x in out.splitlines() if x.startswith("fleet: ")]
    member = default_member(config)
    assert line.startswith(
        f"fleet: member {member} (host edge-1.example) of the fleet on postgresql:///contact"
    )
    assert "leases of 10 s renewed every 2 s (held here 6 s past a renewal's send)" in line
    assert "s3cret" not in out + err


def test_run_check_refuses_a_missing_password_file_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "edge.toml"
    config.write_text('[store]\nurl = "postgresql:///contact?host=/run/postgresql"\npasswordFile = "gone"\n')
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    with pytest.raises(SystemExit) as info:
        main(["run", "--config", str(config), "--check"])
    out, err = capsys.readouterr()
    assert info.value.code == 1 and "fleet: " not in out
    (line,) = err.splitlines()
    assert line.startswith("session-supervisor: error: ") and "store.passwordFile" in line


def test_run_check_of_one_host_needs_no_postgresql_driver(tmp_path: Path) -> None:
    """A one-host install has no ``postgres`` extra (systemd/install.sh installs the wheel alone): ``run
    --check`` of a configuration without ``[store] url`` must not import psycopg (it once did, through the
    fleet's check line, and the install failed)."""
    blocked = tmp_path / "blocked"
    (blocked / "psycopg").mkdir(parents=True)
    (blocked / "psycopg" / "__init__.py").write_text(
        'raise ModuleNotFoundError("psycopg is not installed")\n'
    )
    config = tmp_path / "one.toml"
    config.write_text("")
    env = {**os.environ, "PYTHONPATH": str(blocked), "XDG_RUNTIME_DIR": str(tmp_path)}
    env.pop("STATE_DIRECTORY", None)
    done = subprocess.run(
        [sys.executable, "-m", "supervisor", "run", "--config", str(config), "--check"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "psycopg" not in done.stderr and "fleet: " not in done.stdout
