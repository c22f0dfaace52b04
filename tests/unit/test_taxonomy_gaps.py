"""``run --check`` warns that taxonomy v1 cannot update Genesys attributes (docs/taxonomy.md, "Response validation").

v1 stays shipped, byte-identical, for configurations that pin it; but it requires ``state`` on a
Genesys conversation read, which Genesys never sends (PureCloudPlatformClientV2 269,
``Conversation.state``: "When reading conversations, this field will never have a value
present."), so every attribute update's read fails INCOMPLETE_RESPONSE. A configuration (or the
environment's staged rollout) that selects such a version gets one warning line on stderr; the
check still passes (exit 0). Tested from the command line, as a script runs it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest

from supervisor.taxonomy import compile_taxonomy, load_taxonomy
from supervisor.taxonomy.gaps import gaps
from tests.harness.config import offline_config

ROOT = Path(__file__).resolve().parents[2]
ENV_VAR = "SESSION_SUPERVISOR_TAXONOMY"


def _v1_text() -> str:
    return (resources.files("supervisor.taxonomy") / "data" / "v1.toml").read_text(encoding="utf-8")


def _without_state() -> str:
    """v1, as a version that no longer requires the field Genesys never sends."""
    text = _v1_text().replace('version = "v1"', 'version = "v1-fixed"')
    fixed = text.replace('required = ["id", "state", "participants"]', 'required = ["id", "participants"]')
    assert fixed != text
    return fixed


def test_v1_cannot_update_genesys_attributes_and_says_why() -> None:
    (gap,) = gaps(load_taxonomy("v1"))
    assert gap.startswith("cannot update Genesys attributes:")
    assert "'state'" in gap and "Genesys never sends" in gap


def test_a_version_that_does_not_require_the_field_has_no_gap() -> None:
    assert gaps(compile_taxonomy(_without_state(), "v1-fixed.toml")) == []


def _check(config: Path, env_taxonomy: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != ENV_VAR}
    if env_taxonomy is not None:
        env[ENV_VAR] = env_taxonomy
    return subprocess.run(
        [sys.executable, "-m", "supervisor", "run", "--config", str(config), "--check"],
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
        cwd=ROOT,
        env=env,
    )


@pytest.mark.parametrize(
    ("configured", "env", "named"),
    [("v1", None, "taxonomy 'v1' (daemon.taxonomyVersion)"), (None, "v1", f"taxonomy 'v1' ({ENV_VAR})")],
    ids=["config", "environment"],
)
def test_run_check_warns_in_one_line_that_v1_cannot_update_genesys_attributes(
    tmp_path: Path, configured: str | None, env: str | None, named: str
) -> None:
    result = _check(offline_config(tmp_path, taxonomy=configured), env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ok: ")  # the check itself passed
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"session-supervisor: warning: {named} cannot update Genesys attributes: ")
    assert "'state'" in line


def test_run_check_warns_nothing_for_a_version_without_the_gap(tmp_path: Path) -> None:
    fixed = tmp_path / "v1-fixed.toml"
    fixed.write_text(_without_state())
    result = _check(offline_config(tmp_path, taxonomy=str(fixed)))
    assert result.returncode == 0, result.stderr
    assert result.stderr == "" and result.stdout.startswith("ok: ")
