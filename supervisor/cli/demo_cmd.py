"""``session-supervisor demo``: the daemon against both built-in simulators, one scenario (docs/demo.md)."""

from __future__ import annotations

import json
import math
import re
import shlex
import sys
from pathlib import Path
from typing import Any

import anyio
import click

from supervisor.cli.common import command_for_another_terminal, stderr_console, stdout_console
from supervisor.config import PROMETHEUS_ADDRESS
from supervisor.demo.scenarios import DEFAULT_SCENARIO, SCENARIOS

_NAMES = tuple(SCENARIOS)
_OTLP_URL = re.compile(r"^https?://[^\s/]+(/\S*)?$")


def _otlp_url(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is not None and not _OTLP_URL.match(value):
        raise click.BadParameter(f"expected an http:// or https:// URL, got {value!r}")
    return value


def _prometheus_address(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is not None and not re.match(PROMETHEUS_ADDRESS, value):
        raise click.BadParameter(f"expected HOST:PORT (an IP address or localhost) or PORT, got {value!r}")
    return value


def _finite(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    # FloatRange lets NaN through (every comparison with it is false): a usage error here
    if value is not None and not math.isfinite(value):
        raise click.BadParameter(f"{value} is not a number of seconds", ctx=ctx, param=param)
    return value


@click.command()
@click.option(
    "--scenario",
    type=click.Choice(_NAMES),
    default=DEFAULT_SCENARIO,
    show_default=True,
    help="What goes wrong (docs/demo.md describes each one and its expected outcome).",
)
@click.option(
    "--sessions",
    type=click.IntRange(5, 10_000),
    default=50,
    show_default=True,
    help="Sessions supervised, across both platforms (2/5 Web Messaging, 1/5 notifications, 2/5 CXone; "
    "at least 5, so every kind is present).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as one JSON object on stdout.")
@click.option(
    "--seed", type=int, default=1, show_default=True, help="Seed of the simulators and the daemon's RNG."
)
@click.option(
    "--fast",
    is_flag=True,
    help="Scale the seed's durations down for tests and CI: first reconnect delay U(0.2, 0.8) s, "
    "circuit open 3 s, backoff delays / 10, 4 s tokens (token-expiry).",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(min=1.0, max=3600.0),
    callback=_finite,
    default=None,
    help="Give up after this many seconds (default: 180, or 45 with --fast; past 2,000 sessions "
    "it grows in proportion: 450 s for 5,000).",
)
@click.option(
    "--otlp",
    metavar="URL",
    default=None,
    callback=_otlp_url,
    help="Export the run's traces and metrics to this OpenTelemetry collector (OTLP/HTTP base URL, "
    "e.g. http://127.0.0.1:4318; docs/telemetry.md).",
)
@click.option(
    "--prometheus",
    metavar="ADDRESS",
    default=None,
    callback=_prometheus_address,
    help="Serve the run's metrics on a Prometheus scrape endpoint at HOST:PORT or PORT (loopback), "
    'e.g. 127.0.0.1:9464; needs the [prometheus] extra (docs/telemetry.md, "Prometheus").',
)
@click.option(
    "--progress/--no-progress",
    default=None,
    help="Live progress on stderr (default: only when stderr is a terminal).",
)
def demo(
    scenario: str,
    sessions: int,
    as_json: bool,
    seed: int,
    fast: bool,
    timeout_s: float | None,
    otlp: str | None,
    prometheus: str | None,
    progress: bool | None,
) -> None:
    """Supervise --sessions sessions against in-process Genesys and CXone simulators and play a scenario.

    Ends with a summary (a table, or one JSON object with --json). Exit 0 when the outcome
    matches the scenario's expected outcome, 1 when it does not (the reasons go to stderr).
    The daemon's socket API is on, in a temporary directory: the `watch` command that
    attaches to it from another terminal is printed on stderr first.
    """
    from supervisor.demo.runner import DemoOptions, DemoTimedOut, demo_settings, run_demo

    if otlp is not None or prometheus is not None:
        # the collector's settings and the OTEL_* variables the SDK reads, before anything starts:
        # a value it refuses is one line naming it, exit 1 (main() prints the ConfigError)
        demo_settings(otlp, None, prometheus=prometheus)
    show = sys.stderr.isatty() if progress is None else progress
    options = DemoOptions(
        scenario=scenario,
        sessions=sessions,
        seed=seed,
        fast=fast,
        timeout_s=timeout_s,
        otlp=otlp,
        prometheus=prometheus,
    )

    def announce(sockets: tuple[Path, Path] | str) -> None:
        # stderr: stdout stays the summary alone (one JSON object with --json)
        if isinstance(sockets, str):
            click.echo(f"session-supervisor: demo without its sockets: {sockets}", err=True)
            return
        subscribe, control = sockets
        program = command_for_another_terminal()
        click.echo(
            f"watch it from another terminal: {program} watch --socket {shlex.quote(str(subscribe))}",
            err=True,
        )
        click.echo(f"control it: {program} ctl --socket {shlex.quote(str(control))} status", err=True)

    async def main() -> dict[str, Any] | None:
        return await run_demo(options, progress=stderr_console() if show else None, on_sockets=announce)

    from supervisor.runtime.collector import tuned_collector

    try:
        with tuned_collector():  # the daemon's process, as `run` tunes it
            summary = anyio.run(main, backend="asyncio")
    except OSError as exc:
        raise click.ClickException(f"cannot run the demo: {exc.strerror or exc}") from None
    except DemoTimedOut as exc:
        if as_json:  # stdout stays one JSON object, whatever ended the run
            sys.stdout.write(json.dumps(exc.summary, sort_keys=False) + "\n")
            sys.stdout.flush()
        raise click.ClickException(str(exc)) from None
    if summary is None:
        click.echo(f"session-supervisor: demo {scenario}: interrupted; the daemon drained", err=True)
        ctx = click.get_current_context()
        ctx.exit(130)
    if as_json:
        sys.stdout.write(json.dumps(summary, sort_keys=False) + "\n")
        sys.stdout.flush()
    else:
        from supervisor.demo.summary import render

        render(stdout_console(), summary)
    outcome = summary["outcome"]
    if not outcome["ok"]:
        # exit 1 with one line saying why (a ClickException: main() maps it to its exit code)
        raise click.ClickException(
            f"demo {scenario}: outcome not as expected: " + "; ".join(outcome["problems"])
        )
