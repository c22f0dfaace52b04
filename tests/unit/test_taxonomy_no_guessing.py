"""No guessing: ``classify`` and ``taxonomy diff --replay`` refuse what is not a RawError envelope
(docs/taxonomy.md, "The RawError envelope"), as a script runs them: a subprocess, its exit code and
its one line per bad input line.

Fed its own ``SDK_ERROR_CLASSIFIED`` lines, ``classify`` used to call every one UNKNOWN_ERROR and
``diff`` to report "no routing differences" for any two versions.
"""

from __future__ import annotations

import json
import subprocess
from importlib import resources

from tests.harness.process import CLI

SAMPLES = str(resources.files("supervisor.taxonomy") / "data" / "samples.ndjson")
EVENT_LINE = "an SdkErrorEvent, not a RawError (capture them with [taxonomy] capture)"
NOTHING = (
    "not a valid envelope: nothing to classify it by: give status, closeCode or exception "
    "(a webmessaging or notifications envelope may instead carry the server's message in body)"
)


def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], input=stdin, capture_output=True, text=True, timeout=30, check=False)


def test_classified_events_fed_back_are_refused_one_line_each() -> None:
    events = run("classify", "--sample")
    assert events.returncode == 0 and events.stderr == ""
    lines = events.stdout.splitlines()
    assert len(lines) > 10 and all(json.loads(line)["event"] == "SDK_ERROR_CLASSIFIED" for line in lines)
    again = run("classify", stdin=events.stdout)
    assert again.returncode == 1
    assert again.stdout == ""
    assert again.stderr.splitlines() == [
        f"session-supervisor: line {n}: {EVENT_LINE}" for n in range(1, len(lines) + 1)
    ]
    diff = run("taxonomy", "diff", "v1", "v2", "--replay", "-", stdin=events.stdout)
    assert diff.returncode == 1
    assert diff.stderr.splitlines()[:2] == [
        f"session-supervisor: line 1: {EVENT_LINE}",
        f"session-supervisor: line 2: {EVENT_LINE}",
    ]


def test_an_unknown_field_and_an_envelope_with_nothing_to_route_by_are_refused() -> None:
    lines = [
        {"platform": "genesys", "channel": "rest", "status": 429, "rawStatus": 429},
        {"platform": "genesys", "channel": "rest"},
        {"platform": "cxone", "channel": "agent-session", "body": {"error": "invalid_token"}},
        {"platform": "genesys", "channel": "notifications", "body": {"hello": "there"}},
        {"platform": "genesys", "channel": "rest", "status": 503},
    ]
    result = run("classify", stdin="".join(json.dumps(line) + "\n" for line in lines))
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "session-supervisor: line 1: not a valid envelope: unknown field 'rawStatus' (known: platform, "
        "channel, method, endpoint, status, headers, body, closeCode, exception, context, timestamp)",
        f"session-supervisor: line 2: {NOTHING}",
        f"session-supervisor: line 3: {NOTHING}",
        f"session-supervisor: line 4: {NOTHING}",
    ]
    # the good line is still classified
    assert [json.loads(line)["rawStatus"] for line in result.stdout.splitlines()] == [503]


def test_the_shipped_samples_still_classify_and_replay() -> None:
    assert run("classify", SAMPLES).returncode == 0
    replay = run("taxonomy", "diff", "v1", "v2", "--replay", SAMPLES)
    assert replay.returncode == 0 and replay.stderr == ""
    assert "replay line" in replay.stdout
