"""Endpoint patterns match in time linear in the path, whatever the pattern.

A pattern like ``/**/a/**/a/**/a/**/b`` used to compile to a regular expression with nested
unbounded repetitions: ``taxonomy check`` passed it, then classifying one envelope took
minutes (catastrophic backtracking). Work is counted in automaton steps, never timed.
"""

from __future__ import annotations

import re
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from supervisor.errors import TaxonomyError
from supervisor.taxonomy import compile_taxonomy
from supervisor.taxonomy.rules import MAX_PATTERN_SEGMENTS, EndpointGlob

ROOT = Path(__file__).resolve().parents[2]
V1 = (resources.files("supervisor.taxonomy") / "data" / "v1.toml").read_text()
ATTRIBUTES = 'endpoint = "/api/v2/conversations/**/attributes"'


def oracle(pattern: str) -> re.Pattern[str]:
    """The old backtracking translation: the meaning the matcher must keep."""
    body = ""
    for segment in pattern.strip("/").split("/"):
        if segment == "**":
            body += r"(?:/[^/]+)*"
        elif segment == "*":
            body += r"/[^/]+"
        else:
            body += "/" + re.escape(segment)
    return re.compile(body + "/?", re.IGNORECASE)


segments = st.sampled_from(["a", "B", "c", "*", "**", ""])
patterns = st.lists(segments, min_size=1, max_size=7).map(lambda parts: "/" + "/".join(parts))
paths = st.tuples(
    st.sampled_from(["", "/"]),
    st.lists(st.sampled_from(["a", "b", "C", "", "*"]), max_size=8),
    st.booleans(),
).map(lambda t: t[0] + "/".join(t[1]) + ("/" if t[2] else ""))


@given(patterns, paths)
def test_the_automaton_means_what_the_regular_expression_meant(pattern: str, path: str) -> None:
    glob = EndpointGlob(pattern)
    expected = oracle(pattern).fullmatch(path) is not None
    assert glob.run(path)[0] is expected
    assert glob.fullmatch(path) is expected


many_stars = st.lists(
    st.sampled_from(["**", "a", "*", "x"]), min_size=2, max_size=MAX_PATTERN_SEGMENTS - 3
).map(lambda parts: "/" + "/".join(["**", *parts, "**", "b"]))


@given(many_stars, st.integers(0, 3000), st.sampled_from(["a", "x", "b", ""]))
def test_work_is_one_step_per_path_segment_whatever_the_pattern(pattern: str, length: int, last: str) -> None:
    path = "/" + "/".join(["a"] * length + [last])
    matched, steps = EndpointGlob(pattern).run(path)
    segments_in_path = length + 1
    # at most two passes (with and without a trailing slash), one step per segment each
    assert steps <= 2 * segments_in_path
    assert isinstance(matched, bool)


def test_a_pathological_pattern_matches_a_long_path_at_once() -> None:
    glob = EndpointGlob("/" + "/".join(["**", "a"] * 30) + "/b")
    path = "/" + "/".join(["a"] * 2000) + "/c"
    assert glob.fullmatch(path) is False
    assert glob.run(path)[1] <= 2 * 2001


def test_consecutive_double_stars_collapse_and_too_many_segments_are_located() -> None:
    assert EndpointGlob("/a/" + "/".join(["**"] * 500) + "/b").fullmatch("/a/x/y/b")
    too_long = "/" + "/".join(["s"] * (MAX_PATTERN_SEGMENTS + 1))
    text = V1.replace(ATTRIBUTES, f'endpoint = "{too_long}"')
    with pytest.raises(
        TaxonomyError, match=r"^t\.toml: operations\[\d+\]\.endpoint: .* more than 64 segments$"
    ):
        compile_taxonomy(text, "t.toml")


def test_taxonomy_check_then_classify_with_a_many_double_star_pattern(tmp_path: Path) -> None:
    pattern = "/api/v2/conversations/" + "/".join(["**", "x"] * 20) + "/**/attributes"
    assert ATTRIBUTES in V1
    path = tmp_path / "stars.toml"
    path.write_text(V1.replace(ATTRIBUTES, f'endpoint = "{pattern}"'))
    check = subprocess.run(
        [sys.executable, "-m", "supervisor", "taxonomy", "check", str(path)],
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
        cwd=ROOT,
    )
    assert check.returncode == 0, check.stderr
    endpoint = "/api/v2/conversations/" + "x/" * 900 + "nope"
    line = (
        f'{{"platform":"genesys","channel":"rest","method":"PATCH","status":404,"endpoint":"{endpoint}"}}\n'
    )
    result = subprocess.run(
        [sys.executable, "-m", "supervisor", "classify", "--taxonomy", str(path)],
        input=line,
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    assert '"rawStatus":404' in result.stdout
