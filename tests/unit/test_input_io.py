"""Output that cannot be written and input that cannot be read: one stderr line, exit 1, no traceback.

These need real file descriptors (``/dev/full``, a closed or read-only fd 1,
a closed fd 0), so every test runs the CLI in a subprocess through ``sh`` redirections.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")


def run_sh(args: str, redirections: str) -> subprocess.CompletedProcess[str]:
    """``python -m supervisor ARGS REDIRECTIONS`` through sh; stderr captured, stdout as redirected."""
    command = f"exec {shlex.quote(sys.executable)} -m supervisor {args} {redirections}"
    return subprocess.run(
        ["sh", "-c", command], stderr=subprocess.PIPE, text=True, timeout=50, check=False, cwd=ROOT
    )


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("session-supervisor: error: ")
    return lines[0]


@pytest.mark.parametrize(
    "args",
    [
        "classify --sample",
        "classify --sample --format table",
        "taxonomy list",
        "taxonomy check v1 --json",
        "policy show",
        "--help",
        "classify --help",
        "--version",
    ],
)
def test_a_full_device_is_one_line_and_exit_1(args: str) -> None:
    result = run_sh(args, "> /dev/full")
    assert result.returncode == 1
    assert one_error_line(result) == (
        "session-supervisor: error: cannot write to standard output: No space left on device"
    )


@pytest.mark.parametrize("args", ["classify --sample", "taxonomy list", "policy show --json"])
def test_a_closed_stdout_is_one_line_and_exit_1(args: str) -> None:
    result = run_sh(args, ">&-")
    assert result.returncode == 1
    assert one_error_line(result) == (
        "session-supervisor: error: cannot write to standard output: Bad file descriptor (it is closed)"
    )


def test_a_read_only_stdout_is_one_line_and_exit_1() -> None:
    result = run_sh("taxonomy list", "1</dev/null")
    assert result.returncode == 1
    assert one_error_line(result) == (
        "session-supervisor: error: cannot write to standard output: Bad file descriptor"
    )


@pytest.mark.parametrize("args", ["classify", "classify -", "taxonomy diff v1 v1 --replay -"])
def test_a_closed_stdin_is_one_line_and_exit_1(args: str) -> None:
    result = run_sh(args, "<&- >/dev/null")
    assert result.returncode == 1
    assert one_error_line(result) == "session-supervisor: error: cannot read standard input: it is closed"


def test_a_closed_stdin_does_not_matter_when_it_is_not_read() -> None:
    result = run_sh("classify --sample", "<&- >/dev/null")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""


def test_stdin_that_is_not_readable_is_one_line() -> None:
    # fd 0 opened for writing only: read(2) fails with EBADF
    result = run_sh("classify", "0>/dev/null >/dev/null")
    assert result.returncode == 1
    assert (
        one_error_line(result) == "session-supervisor: error: cannot read standard input: Bad file descriptor"
    )
