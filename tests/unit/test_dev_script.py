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
    assert calls[-1] == "python -m pytest --numprocesses=auto -q"
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


def test_byte_compiled_modules_are_kept_under_the_venv_even_where_the_environment_forbids_them(
    tmp_path: Path,
) -> None:
    # a daemon a test starts then imports the package from its cache, not compiled anew each time
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    seen = tmp_path / "seen"
    python = venv / "bin" / "python"
    python.write_text(
        f'#!/bin/sh\necho "prefix=$PYTHONPYCACHEPREFIX dont=${{PYTHONDONTWRITEBYTECODE-unset}}" > {seen}\n'
    )
    python.chmod(0o755)
    for extra in ("base", "test"):
        want = subprocess.run(["sha256sum", str(ROOT / "pyproject.toml")], capture_output=True, text=True)
        (venv / f".installed-{extra}").write_text(want.stdout.split()[0] + "\n")
    env = {**os.environ, "VENV": str(venv), "PYTHONDONTWRITEBYTECODE": "1"}
    result = subprocess.run(
        ["bash", str(ROOT / "dev"), "pytest", "-q"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    assert seen.read_text().split() == [f"prefix={venv.resolve()}/pycache", "dont=unset"]
