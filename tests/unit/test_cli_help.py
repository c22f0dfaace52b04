"""The top-level --help sends a newcomer to `demo` and `run` (issue 8, point 8)."""

from __future__ import annotations

from click.testing import CliRunner

from supervisor.cli import _register, cli


def test_top_level_help_leads_with_demo_and_run() -> None:
    _register()
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0
    text = result.output
    assert text.index("session-supervisor demo") < text.index("session-supervisor run --config")
    assert "classify --help" not in text  # the decision core is there to inspect, not to start with
