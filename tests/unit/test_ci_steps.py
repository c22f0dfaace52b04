"""CI in steps: lint and types, the default suite, then each heavy suite.

``.ci/run`` runs each step with its own time budget and summary, every step whatever the others
did, and fails when any step fails, finds no test, or runs past its budget. The steps are checked
against a stand-in virtual environment whose programs record how they were called and answer as
told (``FAKE_EXIT_<step>``, ``FAKE_SLEEP_<step>``), as tests/unit/test_dev_script.py does for
``./dev``: nothing is installed and no real suite runs. The heavy suites' markers are held to
pyproject.toml: registered, left out of the default run, and used by a test; so are the suites run on
request only (``ON_REQUEST_ONLY``), which are no CI step.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# every program records "name args" (python also the Hypothesis profile it was given); pytest
# (python -m pytest [-m MARKER]) sleeps and exits as FAKE_SLEEP_<marker|default>/FAKE_EXIT_... say
FAKE_PYTHON = """#!/bin/sh
echo "python $* [HYPOTHESIS_PROFILE=${HYPOTHESIS_PROFILE:-}]" >> "$CALLS"
[ "$1 $2" = "-m pytest" ] || exit 0
shift 2
step=default
if [ "${1:-}" = "-m" ]; then step=$2; fi
eval "nap=\\${FAKE_SLEEP_$step:-0}; code=\\${FAKE_EXIT_$step:-0}"
sleep "$nap"
echo "==== fake pytest summary: $step ===="
exit "$code"
"""
FAKE_TOOL = """#!/bin/sh
echo "$(basename "$0") $*" >> "$CALLS"
eval "code=\\${FAKE_EXIT_$(basename "$0"):-0}"
exit "$code"
"""


@pytest.fixture
def fake_venv(tmp_path: Path) -> Path:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    for program, text in (("python", FAKE_PYTHON), ("ruff", FAKE_TOOL), ("mypy", FAKE_TOOL)):
        path = venv / "bin" / program
        path.write_text(text)
        path.chmod(0o755)
    return venv


def run(
    venv: Path, script: str, *args: str, **env: str
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    calls = venv / "calls"
    environ = {k: v for k, v in os.environ.items() if k not in ("HYPOTHESIS_PROFILE", "CI_HEAVY_SUITES")}
    environ.update(VENV=str(venv), CALLS=str(calls), **env)
    result = subprocess.run(
        ["bash", str(ROOT / script), *args], cwd=ROOT, env=environ, capture_output=True, text=True, timeout=60
    )
    recorded = calls.read_text().splitlines() if calls.exists() else []
    return result, [c for c in recorded if " -m pip " not in f" {c} "]


def ci_lines(result: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("ci: ")]


def test_the_steps_run_in_order_each_with_its_budget_and_summary(fake_venv: Path) -> None:
    result, calls = run(fake_venv, ".ci/run")
    assert result.returncode == 0, result.stderr
    assert calls == [
        "ruff check supervisor machines tests",
        "ruff format --check supervisor machines tests",
        "mypy ",
        "python -m pytest --numprocesses=auto [HYPOTHESIS_PROFILE=ci]",
        "python -m pytest -m signal_sweep [HYPOTHESIS_PROFILE=ci]",
        "python -m pytest -m prometheus [HYPOTHESIS_PROFILE=ci]",
        "python -m pytest -m rotel [HYPOTHESIS_PROFILE=ci]",
        "python -m pytest -m systemd_pid1 [HYPOTHESIS_PROFILE=ci]",
        "python -m pytest -m bridge [HYPOTHESIS_PROFILE=ci]",
        "python -m pytest -m channels_scale [HYPOTHESIS_PROFILE=ci]",
        "python -m pytest -m fleet [HYPOTHESIS_PROFILE=ci]",
    ]
    lines = ci_lines(result)
    # step 1 is the README's one test command, exactly: lint, types and the default suite
    assert lines[0] == "ci: step 1/8: ./dev test (budget 780 s): ./dev test"
    assert "ci: step 2/8: heavy suite signal_sweep (budget 90 s): ./dev pytest -m signal_sweep" in lines
    assert "ci: step 3/8: heavy suite prometheus (budget 100 s): ./dev pytest -m prometheus" in lines
    assert "ci: step 4/8: heavy suite rotel (budget 60 s): ./dev pytest -m rotel" in lines
    assert "ci: step 5/8: heavy suite systemd_pid1 (budget 300 s): ./dev pytest -m systemd_pid1" in lines
    assert "ci: step 6/8: heavy suite bridge (budget 80 s): ./dev pytest -m bridge" in lines
    assert "ci: step 7/8: heavy suite channels_scale (budget 60 s): ./dev pytest -m channels_scale" in lines
    assert "ci: step 8/8: heavy suite fleet (budget 240 s): ./dev pytest -m fleet" in lines
    assert [re.sub(r" in \d+ s$", "", line) for line in lines[lines.index("ci: summary") :]] == [
        "ci: summary",
        "ci:   ./dev test: passed",
        "ci:   heavy suite signal_sweep: passed",
        "ci:   heavy suite prometheus: passed",
        "ci:   heavy suite rotel: passed",
        "ci:   heavy suite systemd_pid1: passed",
        "ci:   heavy suite bridge: passed",
        "ci:   heavy suite channels_scale: passed",
        "ci:   heavy suite fleet: passed",
    ]
    # each pytest step prints its own summary
    assert re.findall(r"fake pytest summary: (\w+)", result.stdout) == [
        "default",
        "signal_sweep",
        "prometheus",
        "rotel",
        "systemd_pid1",
        "bridge",
        "channels_scale",
        "fleet",
    ]


def test_the_budgets_stay_under_thirty_minutes_in_all() -> None:
    # CI on 2 cores must finish within 30 minutes, the heavy suites included: the budgets are what guarantees it
    script = (ROOT / ".ci" / "run").read_text()
    fixed = [int(n) for n in re.findall(r"^TEST_BUDGET_S=(\d+)", script, re.MULTILINE)]
    assert len(fixed) == 1
    assert sum(fixed) + sum(heavy_suites().values()) < 30 * 60


DEFAULT_RUN = "python -m pytest --numprocesses=auto [HYPOTHESIS_PROFILE=ci]"
SWEEP_RUN = "python -m pytest -m signal_sweep [HYPOTHESIS_PROFILE=ci]"
PROMETHEUS_RUN = "python -m pytest -m prometheus [HYPOTHESIS_PROFILE=ci]"
ROTEL_RUN = "python -m pytest -m rotel [HYPOTHESIS_PROFILE=ci]"
PID1_RUN = "python -m pytest -m systemd_pid1 [HYPOTHESIS_PROFILE=ci]"
BRIDGE_RUN = "python -m pytest -m bridge [HYPOTHESIS_PROFILE=ci]"
CHANNELS_RUN = "python -m pytest -m channels_scale [HYPOTHESIS_PROFILE=ci]"
FLEET_RUN = "python -m pytest -m fleet [HYPOTHESIS_PROFILE=ci]"
HEAVY_RUNS = [SWEEP_RUN, PROMETHEUS_RUN, ROTEL_RUN, PID1_RUN, BRIDGE_RUN, CHANNELS_RUN, FLEET_RUN]


@pytest.mark.parametrize(
    ("env", "failed", "pytest_runs"),
    [
        # ./dev test stops at a lint or type failure, as on a laptop; the heavy suites still run
        ({"FAKE_EXIT_mypy": "1"}, "./dev test: FAILED (exit 1)", HEAVY_RUNS),
        ({"FAKE_EXIT_default": "1"}, "./dev test: FAILED (exit 1)", [DEFAULT_RUN, *HEAVY_RUNS]),
        (
            {"FAKE_EXIT_signal_sweep": "1"},
            "heavy suite signal_sweep: FAILED (exit 1)",
            [DEFAULT_RUN, *HEAVY_RUNS],
        ),
    ],
    ids=["lint", "default", "heavy"],
)
def test_a_failing_step_fails_the_run_and_every_other_step_still_runs(
    fake_venv: Path, env: dict[str, str], failed: str, pytest_runs: list[str]
) -> None:
    result, calls = run(fake_venv, ".ci/run", **env)
    assert result.returncode == 1
    assert [c for c in calls if c.startswith("python -m pytest")] == pytest_runs
    lines = ci_lines(result)
    summary = lines[lines.index("ci: summary") + 1 :]
    assert len(summary) == 1 + len(HEAVY_RUNS)
    assert [line for line in summary if "FAILED" in line] == [
        f"ci:   {failed} in {line_seconds(summary, failed)} s"
    ]


def line_seconds(lines: list[str], text: str) -> str:
    (line,) = [line for line in lines if text in line]
    return line.rsplit(" ", 2)[-2]


@pytest.mark.parametrize("step", ["default", "signal_sweep"])
def test_a_step_that_finds_no_test_fails(fake_venv: Path, step: str) -> None:
    result, _ = run(fake_venv, ".ci/run", **{f"FAKE_EXIT_{step}": "5"})
    assert result.returncode == 1
    assert "dev: pytest collected no tests; that is a failure here" in result.stderr
    lines = ci_lines(result)
    summary = lines[lines.index("ci: summary") :]
    assert sum("FAILED (exit 1)" in line for line in summary) == 1


def test_a_step_past_its_budget_is_ended_and_fails(fake_venv: Path, tmp_path: Path) -> None:
    suites = tmp_path / "suites"
    suites.write_text("# a suite that takes longer than it may\nslow_suite 1  # one second\n")
    start = time.monotonic()
    result, calls = run(fake_venv, ".ci/run", CI_HEAVY_SUITES=str(suites), FAKE_SLEEP_slow_suite="50")
    assert time.monotonic() - start < 40  # ended at its budget, not waited for
    assert result.returncode == 1
    assert "python -m pytest -m slow_suite [HYPOTHESIS_PROFILE=ci]" in calls
    assert re.fullmatch(
        r"ci:   heavy suite slow_suite: FAILED: exceeded its budget of 1 s in \d+ s", ci_lines(result)[-1]
    )


@pytest.mark.parametrize(
    "line", ["signal_sweep soon", "signal_sweep", "signal_sweep 0", "signal-sweep 60", "signal_sweep 60 more"]
)
def test_a_malformed_suites_line_is_one_error_line(fake_venv: Path, tmp_path: Path, line: str) -> None:
    suites = tmp_path / "suites"
    suites.write_text(f"# heavy suites\n\n{line}\n")
    result, calls = run(fake_venv, ".ci/run", CI_HEAVY_SUITES=str(suites))
    assert result.returncode == 2 and calls == []
    assert result.stderr.splitlines() == [
        f"ci: {suites} line 3: expected a pytest marker and a budget in whole seconds, got: {line}"
    ]


def test_dev_lint_and_dev_pytest_run_their_halves_of_dev_test(fake_venv: Path) -> None:
    result, calls = run(fake_venv, "dev", "lint")
    assert result.returncode == 0
    assert calls == [
        "ruff check supervisor machines tests",
        "ruff format --check supervisor machines tests",
        "mypy ",
    ]
    result, calls = run(fake_venv, "dev", "pytest", "-x", "tests/unit")
    assert result.returncode == 0
    assert calls[len(["ruff", "ruff", "mypy"]) :] == ["python -m pytest -x tests/unit [HYPOTHESIS_PROFILE=]"]
    result, _ = run(fake_venv, "dev", "lint", "--fix")
    assert result.returncode == 2
    assert result.stderr.splitlines() == ["dev: lint takes no arguments (got: --fix)"]


# -- the heavy suites, held to pyproject.toml ----------------------------------------------------------


def heavy_suites() -> dict[str, int]:
    """marker -> budget, from .ci/heavy-suites (comments and blank lines skipped, as .ci/run reads it)."""
    suites: dict[str, int] = {}
    for raw in (ROOT / ".ci" / "heavy-suites").read_text().splitlines():
        fields = raw.split("#", 1)[0].split()
        if fields:
            marker, budget = fields
            suites[marker] = int(budget)
    return suites


#: suites left out of the default run that are not CI steps either: run on request only, when their
#: time does not fit under CI's 30 minutes (none now: the fleet's acceptance, short form, is a step)
ON_REQUEST_ONLY: set[str] = set()


def test_every_heavy_suite_is_registered_left_out_of_the_default_run_and_used() -> None:
    options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    registered = {m.split(":", 1)[0] for m in options["markers"]}
    addopts: list[str] = options["addopts"]
    expression = addopts[addopts.index("-m") + 1]
    excluded = {term.removeprefix("not ").strip() for term in expression.split(" and ")}
    suites = heavy_suites()
    assert suites, "no heavy suite: .ci/heavy-suites is empty"
    assert set(suites) <= registered
    assert not set(suites) & ON_REQUEST_ONLY  # an on-request suite is no CI step
    assert registered >= ON_REQUEST_ONLY
    # every heavy suite and every on-request suite left out of the default run, and only those
    assert set(suites) | ON_REQUEST_ONLY == excluded
    sources = "\n".join(p.read_text() for p in (ROOT / "tests").rglob("test_*.py"))
    for marker in set(suites) | ON_REQUEST_ONLY:
        assert f"pytest.mark.{marker}" in sources, f"no test is marked {marker}"
