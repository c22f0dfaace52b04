"""Outside tools a heavy suite needs (a real Prometheus, a real collector), installed when absent.

Each heavy suite that needs one runs as its own CI step (.ci/heavy-suites); the tool is installed the
way its users get it (Debian's package, a PyPI wheel) the first time the suite asks for it. When it
cannot be had, the suite says so in one line: a failure in CI (``CI`` set, as .ci/run's host sets it),
where a missing tool must not pass for a green step; a skip on a developer's machine, which may have
no root or no network.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Sequence

import pytest

__all__ = ["in_ci", "missing", "run_install"]


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false")


def missing(line: str) -> None:
    """The tool cannot be had: one line; fails the step in CI, skips elsewhere."""
    if in_ci():
        pytest.fail(line, pytrace=False)
    pytest.skip(line)


def run_install(commands: Sequence[Sequence[str]], timeout_s: float) -> str | None:
    """Run install commands in order; None when all succeeded, else why (one line)."""
    for command in commands:
        if shutil.which(command[0]) is None and command[0] != sys.executable:
            return f"{command[0]} is not available"
        try:
            result = subprocess.run(
                list(command),
                capture_output=True,
                text=True,
                timeout=timeout_s,
                env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            return f"`{' '.join(command)}` took more than {timeout_s:.0f} s"
        if result.returncode != 0:
            last = (result.stderr.strip().splitlines() or ["(no output)"])[-1]
            return f"`{' '.join(command)}` failed (exit {result.returncode}): {last}"
    return None
