"""The decision-core commands: classify, taxonomy check|diff, policy show."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest

from supervisor.cli import main

V1 = (resources.files("supervisor.taxonomy") / "data" / "v1.toml").read_text()
ENV_OK = '{"platform":"genesys","channel":"rest","status":429,"headers":{"Retry-After":"3"}}'
ENV_5XX = '{"platform":"cxone","channel":"rest","status":503}'


def run(
    argv: list[str],
    capsysbinary: pytest.CaptureFixture[bytes],
    stdin: bytes | None = None,
    monkeypatch: pytest.MonkeyPatch | None = None,
) -> tuple[int, str, str]:
    if stdin is not None:
        assert monkeypatch is not None
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    with pytest.raises(SystemExit) as info:
        main(argv)
    out, err = capsysbinary.readouterr()
    return int(info.value.code or 0), out.decode(), err.decode()


def test_classify_keeps_order_and_reports_bad_lines(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    """Good lines are classified in order; each bad line gets one stderr line; exit 1."""
    src = tmp_path / "in.ndjson"
    src.write_text(
        "\n".join([ENV_OK, "{not json", "", '{"platform":"genesys","channel":"fax"}', ENV_5XX, "[1]"])
    )
    code, out, err = run(["classify", str(src)], capsysbinary)
    assert code == 1
    events = [json.loads(line) for line in out.splitlines()]
    assert [e["code"] for e in events] == ["RATE_LIMITED", "SERVER_ERROR"]
    assert [e["rawStatus"] for e in events] == [429, 503]
    lines = err.splitlines()
    assert len(lines) == 3
    assert lines[0].startswith("session-supervisor: line 2: not JSON")
    assert lines[1].startswith("session-supervisor: line 4: not a valid envelope: field 'channel'")
    assert lines[2].startswith("session-supervisor: line 6: not a valid envelope: expected")
    assert "Traceback" not in err


def test_classify_stdin_all_good_exits_zero(
    capsysbinary: pytest.CaptureFixture[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, err = run(
        ["classify", "-"], capsysbinary, stdin=(ENV_OK + "\n").encode(), monkeypatch=monkeypatch
    )
    assert (code, err) == (0, "")
    event = json.loads(out)
    assert event["retryAfterMs"] == 3000 and event["taxonomyClass"] == "TRANSIENT"


def test_classify_bundled_sample_as_table(capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    code, out, _ = run(["classify", "--sample", "--format", "table"], capsysbinary)
    assert code == 0
    assert "OAUTH_TOKEN_INVALID" in out and "EMPTY_POLL" in out and "by class:" in out


def test_classify_uses_the_environment_override(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The seed's feature flag: SESSION_SUPERVISOR_TAXONOMY switches the active version."""
    v2 = tmp_path / "v2.toml"
    v2.write_text(V1.replace('version = "v1"', 'version = "v2"'))
    monkeypatch.setenv("SESSION_SUPERVISOR_TAXONOMY", str(v2))
    src = tmp_path / "in.ndjson"
    src.write_text(ENV_OK)
    code, out, _ = run(["classify", str(src)], capsysbinary)
    assert code == 0 and json.loads(out)["taxonomyVersion"] == "v2"


def test_taxonomy_check(tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    code, out, _ = run(["taxonomy", "check", "v1"], capsysbinary)
    assert code == 0 and out.startswith("ok: v1.toml is taxonomy v1")
    bad = tmp_path / "bad.toml"
    bad.write_text(V1.replace("[policies.network]\nmaxRetries = 3", "[policies.network]\nmaxRetries = -1"))
    code, out, err = run(["taxonomy", "check", str(bad)], capsysbinary)
    assert code == 1 and out == ""
    assert (
        err.strip()
        == f"session-supervisor: error: {bad}: policies.network.maxRetries: must be between 0 and 100"
    )


def test_taxonomy_diff_lists_codes_and_replayed_envelopes(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    """A version that fails fast on 429 (the seed's trap) shows up before it is switched on."""
    v2 = tmp_path / "v2.toml"
    v2.write_text(
        V1.replace('version = "v1"', 'version = "v2"').replace(
            '[codes.RATE_LIMITED]\nclass = "TRANSIENT"\nscope = "operation"\npolicy = "rate_limit"',
            '[codes.RATE_LIMITED]\nclass = "PERMANENT"\nscope = "session"\npolicy = "fail_fast"',
        )
    )
    replay = tmp_path / "rec.ndjson"
    replay.write_text("\n".join([ENV_OK, ENV_5XX, "oops"]))
    code, out, err = run(["taxonomy", "diff", "v1", str(v2), "--replay", str(replay), "--json"], capsysbinary)
    doc = json.loads(out)
    assert [c["code"] for c in doc["codes"]] == ["RATE_LIMITED"]
    assert doc["codes"][0]["after"]["class"] == "PERMANENT"
    assert [r["line"] for r in doc["replay"]] == [1]
    assert doc["replay"][0]["before"]["retryable"] is True and doc["replay"][0]["after"]["retryable"] is False
    assert code == 1 and "line 3: not JSON" in err  # a bad replay line is reported, not fatal
    code, out, _ = run(["taxonomy", "diff", "v1", "v1"], capsysbinary)
    assert code == 0 and "no routing differences" in out
    code, out, _ = run(["taxonomy", "diff", "v1", str(v2), "--fail-on-diff"], capsysbinary)
    assert code == 1 and "code RATE_LIMITED: class: TRANSIENT → PERMANENT" in out


def test_taxonomy_diff_shows_a_changed_response_check_and_gates_on_it(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    """What a response must carry decides whether a session goes active or an update goes out
    (seed section 3): a version that changes only that is a routing change, shown and gated."""
    staged = tmp_path / "staged.toml"
    staged.write_text(
        V1.replace('version = "v1"', 'version = "v1-lax"').replace(
            'required = ["id", "state", "participants"]', 'required = ["id", "participants"]'
        )
    )
    code, out, _ = run(["taxonomy", "diff", "v1", str(staged), "--json"], capsysbinary)
    doc = json.loads(out)
    assert code == 0 and doc["codes"] == [] and doc["tables"] == []
    assert doc["responses"] == [
        {
            "response": "genesys.rest.Conversation",
            "change": "changed",
            "before": {"required": ["id", "state", "participants"], "conversationField": "id"},
            "after": {"required": ["id", "participants"], "conversationField": "id"},
        }
    ]
    code, out, _ = run(["taxonomy", "diff", "v1", str(staged), "--fail-on-diff"], capsysbinary)
    assert code == 1
    assert (
        "response genesys.rest.Conversation: required: ['id', 'state', 'participants'] → ['id', 'participants']"
        in out
    )


def test_shipped_v2_requires_less_of_genesys_than_v1(capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    """v2 requires only what the vendors' models require of a conversation read and of a
    Web Messaging SessionResponse; `taxonomy diff v1 v2` says so."""
    code, out, _ = run(["taxonomy", "diff", "v1", "v2", "--json"], capsysbinary)
    changed = {r["response"]: r["after"]["required"] for r in json.loads(out)["responses"]}
    assert code == 0 and changed == {
        "genesys.rest.Conversation": ["participants"],
        "genesys.webmessaging.SessionResponse": ["connected"],
    }


def test_policy_show_json(capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    code, out, _ = run(["policy", "show", "--json"], capsysbinary)
    assert code == 0
    policies = {p["name"]: p for p in json.loads(out)}
    assert {"name", "maxRetries", "baseDelayMs", "maxDelayMs", "jitter", "honorsRetryAfter"} <= set(
        policies["rate_limit"]
    )
    assert (policies["rate_limit"]["maxRetries"], policies["rate_limit"]["honorsRetryAfter"]) == (2, True)
    assert "RATE_LIMITED" in policies["rate_limit"]["codes"]
    code, out, _ = run(["policy", "show"], capsysbinary)
    assert code == 0 and "rate_limit" in out


@pytest.mark.parametrize(
    ("argv", "code", "needle"),
    [
        (["classify", "/no/such/file"], 2, "usage error"),
        (["policy", "show", "--taxonomy", "v7"], 1, "taxonomy version 'v7' is not shipped"),
        (["taxonomy", "frobnicate"], 2, "No such command"),
        (["classify", "--format", "xml"], 2, "'xml' is not one of"),
    ],
)
def test_bad_usage_is_one_line_without_traceback(
    argv: list[str], code: int, needle: str, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    got, _, err = run(argv, capsysbinary)
    assert got == code
    assert needle in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_python_dash_m_supervisor_runs_the_same_cli() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "supervisor", "classify", "-"],
        input=ENV_5XX.encode(),
        capture_output=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["code"] == "SERVER_ERROR"


def test_taxonomy_diff_piped_keeps_one_difference_per_line() -> None:
    """A script reads `taxonomy diff` line by line: a long difference (v1 → v2's SOCKET_CLOSING, a
    re-routed replay line) stays one line when stdout is a pipe, however long it is."""
    samples = resources.files("supervisor.taxonomy") / "data" / "samples.ndjson"
    done = subprocess.run(
        [sys.executable, "-m", "supervisor", "taxonomy", "diff", "v1", "v2", "--replay", str(samples)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    prefixes = ("taxonomy diff ", "code ", "response ", "replay line ", "… and ")
    assert lines and all(line.startswith(prefixes) for line in lines), lines
    assert any(len(line) > 160 for line in lines)  # the case that was folded at 160 columns
    socket_closing = next(line for line in lines if line.startswith("code SOCKET_CLOSING:"))
    assert socket_closing.endswith("maxDelayMs: 16000 → 0")
