"""Overlays: a local file that ``extends`` a shipped version (docs/taxonomy.md, "Overlays").

Its ``[codes.*]`` add to or replace the base's, its ``[[rules]]`` are tried before the base's; every
place a taxonomy is named (``taxonomy check``, ``diff``, ``classify --taxonomy``, the daemon's
configuration, the live switch) loads it laid over its base. A bad overlay is one located line.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from supervisor.config import parse_config
from supervisor.errors import TaxonomyError
from supervisor.runtime.wiring import Wiring
from supervisor.taxonomy import Classifier, load_taxonomy
from supervisor.taxonomy.envelope import envelope_from_object
from tests.harness.process import CLI

THROTTLED = Path(__file__).parent.parent / "fixtures" / "taxonomy" / "throttled.toml"
RATE_LIMITED_429 = {"platform": "genesys", "channel": "rest", "method": "GET", "status": 429}
QUEUE_FULL_429 = {"platform": "genesys", "channel": "rest", "status": 429, "body": {"code": "QUEUE_FULL"}}


def code_of(taxonomy_ref: str | Path, envelope: dict[str, object]) -> str:
    return Classifier(load_taxonomy(taxonomy_ref)).classify(envelope_from_object(envelope)).code


def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], input=stdin, capture_output=True, text=True, timeout=30, check=False)


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_an_overlay_adds_a_code_and_its_rules_are_tried_before_the_bases() -> None:
    overlay = load_taxonomy(THROTTLED)
    assert (overlay.version, overlay.extends) == ("v2-throttled", "v2")
    base = load_taxonomy("v2")
    # everything v2 has is there, plus the one added code
    assert set(overlay.codes) == set(base.codes) | {"THROTTLED"}
    assert len(overlay.rules) == len(base.rules) + 2
    assert code_of(THROTTLED, RATE_LIMITED_429) == "THROTTLED"
    assert code_of("v2", RATE_LIMITED_429) == "RATE_LIMITED"
    # the overlay's own rule keeps QUEUE_FULL (first match wins: the overlay's rules come first)
    assert code_of(THROTTLED, QUEUE_FULL_429) == "QUEUE_FULL"
    # what the overlay does not touch routes as v2 does
    timeout = {"platform": "genesys", "channel": "rest", "status": 504}
    assert code_of(THROTTLED, timeout) == code_of("v2", timeout)


def test_an_overlay_replaces_a_bases_code_entry_by_entry(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "site.toml",
        'extends = "v2"\nversion = "site"\n[codes.RATE_LIMITED]\nclass = "TRANSIENT"\n'
        'scope = "operation"\npolicy = "server_error"\n',
    )
    overlay, base = load_taxonomy(path), load_taxonomy("v2")
    assert overlay.codes["RATE_LIMITED"].policy.name == "server_error"
    assert base.codes["RATE_LIMITED"].policy.name == "rate_limit"
    assert overlay.codes["QUEUE_FULL"] == base.codes["QUEUE_FULL"]


def test_an_overlay_may_extend_an_overlay_by_a_relative_path(tmp_path: Path) -> None:
    (tmp_path / "throttled.toml").write_text(THROTTLED.read_text())
    path = write(tmp_path, "top.toml", 'extends = "throttled.toml"\nversion = "top"\n')
    top = load_taxonomy(path)
    assert (top.version, top.extends) == ("top", "throttled.toml")
    assert code_of(path, RATE_LIMITED_429) == "THROTTLED"


@pytest.mark.parametrize(
    ("files", "message"),
    [
        (
            {"site.toml": 'extends = "v9"\nversion = "site"\n'},
            r"^{d}/site\.toml: extends: taxonomy version 'v9' is not shipped \(shipped: v1, v2; or give a path\)$",
        ),
        (
            {"site.toml": 'extends = "base.toml"\nversion = "site"\n'},
            r"^{d}/site\.toml: extends: base\.toml: no such taxonomy file \(nor a shipped version\)$",
        ),
        (
            {
                "site.toml": 'extends = "a.toml"\nversion = "site"\n',
                "a.toml": 'extends = "b.toml"\nversion = "a"\n',
                "b.toml": 'extends = "a.toml"\nversion = "b"\n',
            },
            # located in the file whose `extends` closes the cycle
            r"^{d}/b\.toml: extends: a cycle of overlays: {d}/a\.toml → {d}/b\.toml → {d}/a\.toml$",
        ),
        (
            {"site.toml": 'extends = "site.toml"\nversion = "site"\n'},
            r"^{d}/site\.toml: extends: a cycle of overlays: {d}/site\.toml → {d}/site\.toml$",
        ),
        (
            {"site.toml": 'extends = "v2"\nversion = "site"\n[[rules]]\nstatus = 429\ncode = "NOPE"\n'},
            r"^{d}/site\.toml: rules\[0\]\.code: unknown code 'NOPE'$",
        ),
        (
            {
                "site.toml": 'extends = "v2"\nversion = "site"\n[codes.lower]\nclass = "TRANSIENT"\nscope = "operation"\npolicy = "network"\n'
            },
            r"^{d}/site\.toml: codes\.lower: a semantic code is UPPER_SNAKE_CASE$",
        ),
        (
            {"site.toml": 'extends = "v2"\n[[rules]]\nstatus = 429\ncode = "RATE_LIMITED"\n'},
            r"^{d}/site\.toml: version: required in an overlay \(the name events and diff show\)$",
        ),
        (
            {"site.toml": 'extends = "v2"\nversion = "site"\nrules = 3\n'},
            r"^{d}/site\.toml: rules: expected an array of tables$",
        ),
    ],
)
def test_a_bad_overlay_is_one_located_line(tmp_path: Path, files: dict[str, str], message: str) -> None:
    for name, text in files.items():
        write(tmp_path, name, text)
    with pytest.raises(TaxonomyError) as caught:
        load_taxonomy(tmp_path / "site.toml")
    assert re.match(message.replace("{d}", re.escape(str(tmp_path))), str(caught.value)), str(caught.value)


def test_the_cli_checks_diffs_and_classifies_with_an_overlay(tmp_path: Path) -> None:
    checked = run("taxonomy", "check", str(THROTTLED))
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.startswith(f"ok: {THROTTLED} is taxonomy v2-throttled (an overlay of v2): ")
    as_json = json.loads(run("taxonomy", "check", str(THROTTLED), "--json").stdout)
    assert (as_json["version"], as_json["extends"]) == ("v2-throttled", "v2")

    classified = run("classify", "--taxonomy", str(THROTTLED), stdin=json.dumps(RATE_LIMITED_429) + "\n")
    assert classified.returncode == 0, classified.stderr
    event = json.loads(classified.stdout)
    assert (event["code"], event["taxonomyVersion"]) == ("THROTTLED", "v2-throttled")

    diff = run("taxonomy", "diff", "v2", str(THROTTLED), "--json")
    assert diff.returncode == 0, diff.stderr
    doc = json.loads(diff.stdout)
    assert [(c["code"], c["change"]) for c in doc["codes"]] == [("THROTTLED", "added")]

    bad = write(tmp_path, "bad.toml", 'extends = "v9"\nversion = "bad"\n')
    for args in (("taxonomy", "check", str(bad)), ("taxonomy", "diff", "v2", str(bad))):
        refused = run(*args)
        assert refused.returncode == 1
        assert refused.stderr.splitlines() == [
            f"session-supervisor: error: {bad}: extends: taxonomy version 'v9' is not shipped "
            "(shipped: v1, v2; or give a path)"
        ]


def test_the_daemon_runs_the_overlay_its_configuration_names(tmp_path: Path) -> None:
    (tmp_path / "secret").write_text("not-a-real-secret")
    config = parse_config(
        f'[daemon]\ntaxonomyVersion = "{THROTTLED}"\n[platforms.genesys]\n'
        'loginUrl = "https://login.example.com"\napiUrl = "https://api.example.com"\n'
        'clientId = "c"\nclientSecretFile = "secret"\n',
        "test.toml",
    )
    wiring = Wiring(config, config_dir=tmp_path, environ={})
    assert wiring.taxonomy.version == "v2-throttled"
    assert wiring.classifier.classify(envelope_from_object(RATE_LIMITED_429)).code == "THROTTLED"


def test_the_documented_overlay_loads_as_written(tmp_path: Path) -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "taxonomy.md").read_text(encoding="utf-8")
    section = doc[doc.index("### Overlays") :]
    example = section[
        section.index("```toml\n") + len("```toml\n") : section.index("\n```", section.index("```toml"))
    ]
    overlay = load_taxonomy(write(tmp_path, "site.toml", example))
    assert (overlay.version, overlay.extends) == ("v2-site", "v2")
    assert code_of(tmp_path / "site.toml", RATE_LIMITED_429) == "THROTTLED"
