"""``session-supervisor sim`` with input it cannot use: one line, never a traceback."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def run_sh(args: str, redirections: str = "") -> subprocess.CompletedProcess[str]:
    command = f"exec {shlex.quote(sys.executable)} -m supervisor sim {args} {redirections}"
    return subprocess.run(
        ["sh", "-c", command], capture_output=True, text=True, timeout=50, check=False, cwd=ROOT
    )


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize("which", ["genesys", "cxone"])
def test_a_ready_line_that_cannot_be_written_is_one_line_and_exit_1(which: str) -> None:
    result = run_sh(which, "> /dev/full")
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "session-supervisor: error: cannot write to standard output: No space left on device"
    ]


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("x = " + "[" * 2000 + "]" * 2000, "nested deeper than 64 levels"),
        (
            ".".join(["a"] * 50_000) + " = 1",
            "line 1: a dotted key of 64 parts or more (past the nesting cap)",
        ),
        (
            "token_ttl_s = 1\nrate_window_s = nan\n",
            "rate_window_s must be a finite number of at most 1000000000",
        ),
        ("read_timeout_s = inf\n", "read_timeout_s must be a finite number of at most 1000000000"),
    ],
)
def test_a_config_past_the_limits_is_one_usage_line(tmp_path: Path, content: str, problem: str) -> None:
    path = tmp_path / "sim.toml"
    path.write_text(content + "\n")
    result = run_sh(f"genesys --config {shlex.quote(str(path))}")
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and result.stdout == ""
    assert lines[0].startswith(f"session-supervisor: usage error: Invalid value for --config: {path}")
    assert problem in lines[0]


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
@pytest.mark.parametrize("which", ["genesys", "cxone"])
def test_an_endless_config_is_one_usage_line(which: str) -> None:
    result = run_sh(f"{which} --config /dev/zero")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "session-supervisor: usage error: Invalid value for --config: /dev/zero: not a regular file (a character device) "
        f"(see 'session-supervisor sim {which} --help')"
    ]
