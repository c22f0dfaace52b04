"""The top-level --help sends a newcomer to `demo` and `run`."""

from __future__ import annotations

import json

from click.testing import CliRunner

from supervisor.cli import cli


def test_top_level_help_leads_with_demo_and_run() -> None:
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0
    text = result.output
    assert text.index("session-supervisor demo") < text.index("session-supervisor run --config")
    assert "classify --help" not in text  # the decision core is there to inspect, not to start with


def test_classify_speaks_json_as_the_other_commands_do() -> None:
    """`classify --json` is `--format json`; with `--format table` it is bad usage."""
    line = '{"platform":"genesys","channel":"rest","status":429,"headers":{"Retry-After":"3"}}\n'
    runner = CliRunner()
    as_json = runner.invoke(cli, ["classify", "--json"], input=line)
    as_format = runner.invoke(cli, ["classify", "--format", "json"], input=line)
    assert as_json.exit_code == 0 == as_format.exit_code
    strip = [
        {k: v for k, v in json.loads(r.output).items() if k != "timestamp"} for r in (as_json, as_format)
    ]
    assert strip[0] == strip[1] and strip[0]["code"] == "RATE_LIMITED"
    clash = runner.invoke(cli, ["classify", "--json", "--format", "table"], input=line)
    assert clash.exit_code == 2
