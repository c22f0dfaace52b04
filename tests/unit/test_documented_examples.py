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


def _fleet_blocks() -> list[str]:
    """The shell blocks of docs/store.md's "A fleet on one machine"."""
    text = (ROOT / "docs" / "store.md").read_text(encoding="utf-8")
    section = text[text.index("### A fleet on one machine") :]
    section = section[: section.index("\n**Tests.**")]
    return re.findall(r"```sh\n(.*?)```", section, re.S)


def test_the_fleet_example_writes_three_configurations_that_differ_in_member_and_sockets_only(
    tmp_path: Path,
) -> None:
    setup, _ = _fleet_blocks()
    # the script as a reader pastes it, but for what needs a running platform and database: the
    # simulator and the three daemons (tests/integration/test_fleet_control.py runs members)
    lines = [
        line
        for line in setup.splitlines()
        if not line.startswith("session-supervisor sim ") and "session-supervisor run" not in line
    ]
    written = subprocess.run(
        ["bash", "-ec", "\n".join(lines)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert written.returncode == 0, written.stderr
    configs = {m: (tmp_path / f"{m}.toml").read_text(encoding="utf-8") for m in ("m1", "m2", "m3")}
    # the same file but for the member's id and its socket paths
    same = {m: text.replace(f'"{m}"', '"M"').replace(f"/{m}/", "/M/") for m, text in configs.items()}
    assert same["m1"] == same["m2"] == same["m3"]
    assert all(f'[fleet]\nmember = "{m}"\n' in text for m, text in configs.items())
    assert (
        len({line for text in configs.values() for line in text.splitlines() if "control.sock" in line}) == 3
    )
    for m in configs:
        # each a configuration the daemon accepts, its [fleet] table included
        done = subprocess.run(
            [sys.executable, "-m", "supervisor", "run", "--config", f"{m}.toml", "--check"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert done.returncode == 0, (m, done.stderr)
        assert f"fleet: member {m} " in done.stdout


def test_the_fleet_examples_ctl_commands_are_commands_ctl_has() -> None:
    commands = [
        line.split("#", 1)[0].split()
        for block in _fleet_blocks()
        for line in block.splitlines()
        if line.startswith("session-supervisor ctl ")
    ]
    assert {c[4] for c in commands} == {"status", "show", "stop", "start"}
    for words in commands:
        # parsed as given (options and arguments), the help printed instead of a call
        result = CliRunner().invoke(cli, [*words[1:], "--help"])
        assert result.exit_code == 0, (words, result.output)
