"""``session-supervisor run --config PATH``: the daemon in the foreground."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
import click

from supervisor.bus import EventBus, JsonLineSink
from supervisor.config import load_config


@click.command()
@click.option(
    "--config",
    "config_path",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="The TOML configuration (see systemd/session-supervisor.example.toml).",
)
@click.option("--check", is_flag=True, help="Validate the configuration and credentials, then exit.")
def run(config_path: Path, check: bool) -> None:
    """Supervise the configured sessions until SIGTERM or SIGINT.

    Telemetry goes to stdout as one JSON object per line (journald-friendly):
    SDK_ERROR_CLASSIFIED, RETRY_ATTEMPT, RETRY_SUCCESS, RETRY_EXHAUSTED,
    CIRCUIT_BREAKER_OPEN/HALF_OPEN/CLOSED, RECONNECTION_THROTTLED, SESSION_TERMINATED and
    every session transition. SIGTERM stops intake, closes sessions with 1001, waits
    at most daemon.shutdownGrace seconds and exits 0; a second signal forces the exit
    (exit code 1, DAEMON_FORCED_EXIT).

    With a [telemetry] endpoint or OTEL_EXPORTER_OTLP_ENDPOINT, traces and metrics go to an
    OpenTelemetry collector too (docs/telemetry.md), and the lines gain traceId/spanId.
    """
    from supervisor.events import DaemonForcedExit, DaemonStarted, DaemonStopped, DaemonStopping
    from supervisor.runtime.main import run_daemon
    from supervisor.runtime.supervisor import Supervisor
    from supervisor.runtime.wiring import Wiring
    from supervisor.telemetry import Telemetry, resolve_settings

    config = load_config(config_path)
    config_dir = config_path.resolve().parent
    grace_s = config.daemon.shutdown_grace
    bus = EventBus()
    telemetry = None
    if check:
        # the settings and the collector's credential file are checked; nothing is exported
        resolve_settings(config.telemetry, os.environ, config_dir=config_dir)
    else:
        # off unless configured; reads telemetry.headersFile like the platforms' credentials
        telemetry = Telemetry.from_config(
            config, environ=os.environ, boot_id=bus.boot_id, config_dir=config_dir
        )
    if telemetry is not None:
        bus.trace_context = telemetry.trace_context

    async def main() -> None:
        hooks = telemetry.hooks if telemetry is not None else []
        async with Wiring(config, bus=bus, config_dir=config_dir, hooks=hooks) as wiring:
            if check:
                click.echo(f"ok: {config_path}: {len(config.sessions)} sessions, credentials readable")
                return
            bus.subscribe(JsonLineSink(sys.stdout))
            services = []
            if telemetry is not None:
                bus.subscribe(telemetry)
                telemetry.observe(tokens=wiring.tokens, sink_failures=bus)
                services.append(telemetry.service(grace_s))
            supervisor = Supervisor(wiring)
            forced = await run_daemon(
                supervisor,
                grace_s=grace_s,
                services=services,
                on_ready=lambda: bus.publish(DaemonStarted(len(config.sessions), str(config_path))),
                on_stopping=lambda: bus.publish(DaemonStopping(grace_s)),
            )
            if forced:
                bus.publish(DaemonForcedExit(supervisor.snapshot()))
                raise SystemExit(1)
            bus.publish(DaemonStopped(supervisor.snapshot()))

    anyio.run(main, backend="asyncio")
