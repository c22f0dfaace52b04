"""Deeply nested JSON and TOML, anywhere it is read: one located error, never a RecursionError.

Every JSON and TOML document the project reads may nest at most 64 levels
(``MAX_NESTING``); deeper is an error naming the cap, whatever stack happens to be left.
"""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from supervisor.clock import FakeClock
from supervisor.config import parse_config
from supervisor.errors import ConfigError, EnvelopeError, TaxonomyError
from supervisor.taxonomy import Classifier, compile_taxonomy, load_taxonomy
from supervisor.taxonomy.envelope import MAX_NESTING, envelope_from_json, nesting_exceeds
from supervisor.taxonomy.loader import LimitError, parse_toml
from tests import strategies

CLASSIFIER = Classifier(load_taxonomy("v1"), FakeClock())
V1 = (resources.files("supervisor.taxonomy") / "data" / "v1.toml").read_text()
ROOT = Path(__file__).resolve().parents[2]
TOO_DEEP = f"nested deeper than {MAX_NESTING} levels"


def nested_json(shape: str) -> str:
    """Containers from ``shape``, outermost first: ``a`` an array, ``o`` an object."""
    opening = "".join("[" if c == "a" else '{"k":' for c in shape)
    closing = "".join("]" if c == "a" else "}" for c in reversed(shape))
    return opening + "1" + closing


def envelope(body: str) -> str:
    return '{"platform":"genesys","channel":"rest","status":500,"body":' + body + "}"


shapes = strategies.text(max_size=200, alphabet="ao")


@given(shapes)
def test_an_envelope_is_refused_exactly_when_it_nests_past_the_cap(shape: str) -> None:
    line = envelope(nested_json(shape))
    depth = len(shape) + 1  # the envelope object itself is the first level
    if depth > MAX_NESTING:
        with pytest.raises(EnvelopeError, match=TOO_DEEP):
            CLASSIFIER.classify_json(line)
        with pytest.raises(EnvelopeError, match=TOO_DEEP):
            CLASSIFIER.classify_object(json.loads(line))
    else:
        assert CLASSIFIER.classify_json(line).raw_status == 500


@pytest.mark.parametrize("depth", [1_000, 10_000, 100_000])
def test_far_too_deep_envelopes_never_reach_the_stack_limit(depth: int) -> None:
    with pytest.raises(EnvelopeError, match=TOO_DEEP):
        envelope_from_json(envelope("[" * depth + "]" * depth))
    with pytest.raises(EnvelopeError, match=TOO_DEEP):
        envelope_from_json(envelope('{"a":' * depth + "1" + "}" * depth))


@given(st.integers(0, 150))
def test_nesting_exceeds_counts_levels(depth: int) -> None:
    value: object = 1
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    assert nesting_exceeds(value, MAX_NESTING) is (depth > MAX_NESTING)


@given(st.integers(1, 400))
def test_config_toml_arrays_nested_past_the_cap_are_one_located_error(depth: int) -> None:
    text = "x = " + "[" * depth + "1" + "]" * depth + "\n"
    with pytest.raises(ConfigError) as info:
        parse_config(text, "c.toml")
    message = str(info.value)
    assert message.startswith("c.toml: ")
    assert (TOO_DEEP in message) is (depth + 1 > MAX_NESTING)


@given(st.integers(1, 100_000))
@example(MAX_NESTING - 1)
@example(MAX_NESTING)  # a draw found it: a 64-part `a.a... = 1` went through, its `[a.a...]` did not
def test_toml_dotted_keys_past_the_cap_are_refused_before_parsing(parts: int) -> None:
    # tomllib takes time quadratic in the parts of one dotted key: minutes at 100,000
    for text in (
        ".".join(["a"] * parts) + " = 1\n",
        "[" + ".".join(["a"] * parts) + "]\n",
        "x = {" + ".".join(['"a"'] * parts) + " = 1}\n",
    ):
        if parts + 1 > MAX_NESTING:
            with pytest.raises(LimitError, match=str(MAX_NESTING)):
                parse_toml(text)
        else:
            assert not nesting_exceeds(parse_toml(text), MAX_NESTING)


def test_inline_tables_nested_past_the_cap_are_refused() -> None:
    text = "x = " + "{a = " * 5_000 + "1" + "}" * 5_000
    with pytest.raises(LimitError, match=TOO_DEEP):
        parse_toml(text)


def test_a_taxonomy_nested_past_the_cap_names_the_file() -> None:
    deep = V1 + "\n[extra]\n" + "x = " + "[" * 3_000 + "]" * 3_000 + "\n"
    with pytest.raises(TaxonomyError, match=rf"^deep\.toml: {TOO_DEEP}$"):
        compile_taxonomy(deep, "deep.toml")


def run_cli(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "supervisor", *args],
        input=stdin,
        capture_output=True,
        timeout=50,
        check=False,
        cwd=ROOT,
    )


def test_classify_reports_a_deep_line_and_classifies_every_line_after_it() -> None:
    good = envelope('{"code":"internal.server.error"}')
    lines = [good, "[" * 1_000 + "]" * 1_000, good, envelope("[" * 100_000 + "]" * 100_000), good]
    result = run_cli("classify", stdin="\n".join(lines).encode() + b"\n")
    assert result.returncode == 1
    assert len(result.stdout.splitlines()) == 3
    assert result.stderr.decode().splitlines() == [
        "session-supervisor: line 2: not a valid envelope: expected `object`, got `array`",
        f"session-supervisor: line 4: not a valid envelope: {TOO_DEEP}",
    ]


@pytest.mark.parametrize("command", ["run --config {path} --check", "taxonomy check {path}"])
def test_deep_toml_files_are_one_line_with_exit_1(tmp_path: Path, command: str) -> None:
    path = tmp_path / "deep.toml"
    path.write_text("x = " + "[" * 3_000 + "]" * 3_000 + "\n")
    result = run_cli(*command.format(path=path).split())
    assert result.returncode == 1
    assert result.stderr.decode().splitlines() == [f"session-supervisor: error: {path}: {TOO_DEEP}"]
