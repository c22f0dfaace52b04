"""The `classify` examples a newcomer copies (the README's and `classify --help`'s) work as written.

Found by a first-time user: both split one envelope over two lines of NDJSON, so each printed two
"not JSON" errors and exit 1. These run each example's `echo` through a real shell into the real
console entry point, as the reader would.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from supervisor.cli import cli

ROOT = Path(__file__).resolve().parents[2]
ENTRY = f"{sys.executable} -m supervisor"


def _run_shell(command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=30, check=False)


def _classified(result: subprocess.CompletedProcess[str]) -> list[dict[str, object]]:
    assert result.returncode == 0 and result.stderr == "", result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_the_readme_classify_example_classifies_one_envelope() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    (example,) = [
        line for line in readme.splitlines() if line.startswith("echo ") and "| ./dev run classify" in line
    ]
    command = example.replace("./dev run", ENTRY)
    (event,) = _classified(_run_shell(command))
    assert (
        event["rawStatus"] == 429 and event["taxonomyClass"] == "TRANSIENT" and event["retryAfterMs"] == 3000
    )


def test_the_classify_help_example_classifies_one_envelope() -> None:
    text = CliRunner().invoke(cli, ["classify", "--help"], terminal_width=400).output
    (example,) = [line.strip() for line in text.splitlines() if re.match(r"\s*echo ", line)]
    command = example.replace("session-supervisor", ENTRY)
    (event,) = _classified(_run_shell(command))
    assert event["rawStatus"] == 429 and event["retryable"] is True
