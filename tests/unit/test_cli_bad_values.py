"""Options that parse but cannot work are bad usage: exit 2 with one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "supervisor", *args],
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
        cwd=ROOT,
    )


@pytest.mark.parametrize("value", ["nan", "NaN", "+nan", "inf", "-inf", "infinity", "1e400"])
def test_demo_timeout_must_be_a_finite_number_of_seconds(value: str) -> None:
    result = run_cli("demo", "--timeout", value)
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("session-supervisor: usage error: Invalid value for '--timeout': ")


@pytest.mark.parametrize("command", ["genesys", "cxone"])
def test_sim_token_ttl_is_bounded(command: str) -> None:
    result = run_cli("sim", command, "--token-ttl", str(10**400))
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"session-supervisor: usage error: Invalid value for '--token-ttl': {10**400} is not in the range "
        f"1<=x<=1000000000. (see 'session-supervisor sim {command} --help')"
    ]
