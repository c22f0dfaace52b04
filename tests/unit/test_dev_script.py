"""./dev, the README's one entry point (found by a first-time user: `./dev help` printed a stray
`set -euo pipefail`, and `./dev demo` installed the test and benchmark tools, 355 MB).

The install steps are checked against a stand-in virtual environment whose programs record how
they were called: what `pip install` is asked for, per command, without installing anything."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

RECORDER = """#!/bin/sh
echo "$(basename "$0") $*" >> "$CALLS"
"""


@pytest.fixture
def fake_venv(tmp_path: Path) -> Path:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    for program in ("python", "session-supervisor", "ruff", "mypy"):
        path = venv / "bin" / program
        path.write_text(RECORDER)
        path.chmod(0o755)
    return venv


def dev(venv: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    calls = venv / "calls"
    env = {**os.environ, "VENV": str(venv), "CALLS": str(calls)}
    result = subprocess.run(
        ["bash", str(ROOT / "dev"), *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=30
    )
    return result, calls.read_text().splitlines() if calls.exists() else []


def test_help_prints_the_usage_block_and_nothing_after_it(fake_venv: Path) -> None:
    result, calls = dev(fake_venv, "help")
    assert result.returncode == 0 and calls == []
    lines = result.stdout.splitlines()
    assert lines[0].startswith("One entry point")
    assert [line.split()[:2] for line in lines[1:]] == [
        ["./dev", cmd] for cmd in ("demo", "test", "lint", "pytest", "bench", "run")
    ]
    assert "set -euo" not in result.stdout


def pip_installs(calls: list[str]) -> list[str]:
    return [c.split()[-1] for c in calls if c.startswith("python -m pip install")]


def test_demo_and_run_install_the_package_alone(fake_venv: Path) -> None:
    _, calls = dev(fake_venv, "demo", "--fast")
    assert pip_installs(calls) == ["."] and calls[-1] == "session-supervisor demo --fast"
    _, calls = dev(fake_venv, "run", "ctl", "status")
    assert pip_installs(calls) == ["."]  # installed once: no second install


def test_test_adds_the_test_extra_and_bench_the_bench_extra_each_once(fake_venv: Path) -> None:
    dev(fake_venv, "demo")
    _, calls = dev(fake_venv, "test", "-q")
    assert pip_installs(calls) == [".", ".[test]"]
    assert calls[-1] == "python -m pytest -q"
    _, calls = dev(fake_venv, "test")
    assert pip_installs(calls) == [".", ".[test]"]  # not again
    _, calls = dev(fake_venv, "bench")
    assert pip_installs(calls) == [".", ".[test]", ".[test,bench]"]


def test_a_changed_pyproject_installs_again(fake_venv: Path) -> None:
    dev(fake_venv, "demo")
    for stamp in fake_venv.glob(".installed-*"):
        stamp.write_text("an older pyproject.toml\n")
    _, calls = dev(fake_venv, "demo")
    assert pip_installs(calls) == [".", "."]
