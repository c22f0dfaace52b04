"""The commands `demo` prints for a second terminal work there (found by a first-time user: under
./dev, the bare `session-supervisor` it printed was not on the second terminal's PATH)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

from supervisor.cli.common import DEV_ENV_VAR, command_for_another_terminal

ROOT = Path(__file__).resolve().parents[2]


def test_under_dev_the_command_goes_through_dev_by_its_absolute_path(tmp_path: Path) -> None:
    dev = tmp_path / "my checkout" / "dev"
    dev.parent.mkdir()
    dev.write_text("#!/bin/sh\n")
    got = command_for_another_terminal({DEV_ENV_VAR: str(dev)}, argv0="/venv/bin/session-supervisor")
    assert got == f"{shlex.quote(str(dev))} run" and shlex.split(got) == [str(dev), "run"]


def test_from_the_console_script_its_absolute_path(tmp_path: Path, monkeypatch: object) -> None:
    script = tmp_path / "bin" / "session-supervisor"
    script.parent.mkdir()
    script.write_text("#!/bin/sh\n")
    relative = os.path.relpath(script)
    assert command_for_another_terminal({}, argv0=relative) == shlex.quote(str(script))
    # a DEV variable that names no file is not trusted
    assert command_for_another_terminal({DEV_ENV_VAR: "dev"}, argv0=str(script)) == str(script)


def test_otherwise_this_interpreter_by_its_absolute_path() -> None:
    got = command_for_another_terminal({}, argv0="-c", executable="/opt/py 3/bin/python")
    assert shlex.split(got) == ["/opt/py 3/bin/python", "-m", "supervisor"]


def test_the_printed_control_command_works_from_another_directory_without_the_venv_on_path(
    tmp_path: Path,
) -> None:
    """End to end: a real demo prints its `control it:` line; that line, run by a shell in another
    directory with a PATH that has no session-supervisor, reaches the demo's daemon."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "TMPDIR": "/tmp"}
    demo = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "supervisor",
            "demo",
            "--scenario",
            "token-expiry",
            "--fast",
            "--sessions",
            "5",
        ],
        cwd=ROOT,
        env=env,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert demo.stderr is not None
        command = ""
        seen = []
        for line in demo.stderr:
            seen.append(line)
            if line.startswith("control it: "):
                command = line.removeprefix("control it: ").strip()
                break
        assert command, f"the demo printed no control command: {seen}"
        status = subprocess.run(
            ["bash", "-c", command],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert status.returncode == 0, status.stderr
        assert "sessions" in status.stdout.lower()
    finally:
        demo.terminate()
        demo.communicate(timeout=30)
