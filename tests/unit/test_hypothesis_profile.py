"""The property tests run under one settings profile, with strategies cheap to draw on a fresh clone.

``test_wrongly_typed_calls_only_ever_raise_typed_errors`` failed 2 CI runs in
6 (and 6 times in 6 alone from a clean ``.hypothesis``) on Hypothesis' too_slow health check: its
``st.text()`` made Hypothesis build its Unicode codec table inside the first draw. The cure is in
the strategies (tests/strategies.py) and in one profile (tests/conftest.py); these tests hold both.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import settings

from tests.conftest import PROFILE_VARIABLE, REAL_DAEMON, _profile

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
# keywords a test may still give @settings: what is about the test, not about the run
ALLOWED_SETTINGS = frozenset({"suppress_health_check", "stateful_step_count"})


def _suite_sources() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if "bench" not in p.relative_to(TESTS).parts)


@pytest.fixture(scope="module")
def suite_trees() -> list[tuple[Path, ast.Module]]:
    """Every test source, parsed once for the checks below that only read it."""
    return [(path, ast.parse(path.read_text(), str(path))) for path in _suite_sources()]


def _calls(tree: ast.AST, *names: str) -> list[ast.Call]:
    def called(node: ast.Call) -> str:
        func = node.func
        return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""

    return [n for n in ast.walk(tree) if isinstance(n, ast.Call) and called(n) in names]


@pytest.mark.parametrize(
    ("environ", "profile"),
    [
        ({}, "dev"),
        ({"CI": "true"}, "ci"),
        ({"CI": "1"}, "ci"),
        ({"CI": "false"}, "dev"),
        ({"CI": "0"}, "dev"),
        ({PROFILE_VARIABLE: "thorough", "CI": "true"}, "thorough"),
        ({PROFILE_VARIABLE: "ci"}, "ci"),
    ],
)
def test_the_profile_follows_the_environment(environ: dict[str, str], profile: str) -> None:
    assert _profile(environ) == profile


def test_no_profile_has_a_deadline_and_ci_draws_the_same_examples_every_run() -> None:
    for name in ("dev", "ci", "thorough"):
        chosen = settings.get_profile(name)
        assert chosen.deadline is None
        # too slow to draw stays a failure everywhere (unlike Hypothesis' own "ci" profile)
        assert not chosen.suppress_health_check
    ci = settings.get_profile("ci")
    assert ci.derandomize and ci.database is None
    # a property test that drives a real daemon draws an eighth of the loaded profile's examples
    assert REAL_DAEMON.max_examples == max(4, settings.default.max_examples // 8)
    assert REAL_DAEMON.deadline is None and not REAL_DAEMON.suppress_health_check
    assert settings.get_profile("dev").max_examples == ci.max_examples == 100
    assert settings.get_profile("thorough").max_examples == 1000


def test_ci_runs_under_the_ci_profile() -> None:
    script = (ROOT / ".ci" / "run").read_text()
    assert f'export {PROFILE_VARIABLE}="${{{PROFILE_VARIABLE}:-ci}}"' in script


def test_no_test_sets_its_own_deadline_or_example_count(suite_trees: list[tuple[Path, ast.Module]]) -> None:
    offenders = []
    for path, tree in suite_trees:
        for call in _calls(tree, "settings"):
            given = {k.arg for k in call.keywords if k.arg is not None}
            # register_profile(NAME, parent, ...) in conftest is the profile itself
            if path.name != "conftest.py" and not given <= ALLOWED_SETTINGS:
                offenders.append(
                    f"{path.relative_to(ROOT)}:{call.lineno}: {sorted(given - ALLOWED_SETTINGS)}"
                )
            for keyword in call.keywords:
                if keyword.arg == "suppress_health_check" and "too_slow" in ast.unparse(keyword.value):
                    offenders.append(f"{path.relative_to(ROOT)}:{call.lineno}: suppresses too_slow")
    assert offenders == []


def test_no_strategy_draws_from_hypothesis_own_character_tables(
    suite_trees: list[tuple[Path, ast.Module]],
) -> None:
    """``st.text`` / ``st.characters`` build Unicode tables on first use: tests/strategies.py's text instead."""
    offenders = []
    for path, tree in suite_trees:
        if path.name == "strategies.py":
            continue
        for call in _calls(tree, "text", "characters"):
            func = call.func
            if isinstance(func, ast.Attribute) and ast.unparse(func.value) == "st":
                offenders.append(f"{path.relative_to(ROOT)}:{call.lineno}: st.{func.attr}")
    assert offenders == []


def test_the_protocol_properties_pass_from_a_fresh_clone(tmp_path: Path) -> None:
    """The reported case: the protocol's property tests from an empty Hypothesis directory, in a process of their own."""
    storage = tmp_path / "hypothesis"
    environ = {**os.environ, "HYPOTHESIS_STORAGE_DIRECTORY": str(storage), PROFILE_VARIABLE: "dev"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "tests/unit/test_api_protocol.py"],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    # what made the first draw slow: Hypothesis' Unicode tables, never built by our strategies
    assert not (storage / "unicode_data").exists()
