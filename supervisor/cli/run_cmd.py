"""``session-supervisor run --config PATH``: the daemon in the foreground."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import click

from supervisor.bus import JsonLineSink
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
    """
    from supervisor.runtime.daemon import Supervisor, serve_until_signalled

    config = load_config(config_path)
    config_dir = config_path.resolve().parent

    async def main() -> None:
        async with Supervisor(config, config_dir=config_dir) as supervisor:
            if check:
                click.echo(f"ok: {config_path}: {len(config.sessions)} sessions, credentials readable")
                return
            supervisor.bus.subscribe(JsonLineSink(sys.stdout))
            supervisor.bus.publish(
                "DAEMON_STARTED", {"sessions": len(config.sessions), "config": str(config_path)}
            )
            forced = await serve_until_signalled(supervisor, grace_s=config.daemon.shutdown_grace)
            if forced:
                supervisor.bus.publish("DAEMON_FORCED_EXIT", supervisor.snapshot())
                raise SystemExit(1)
            supervisor.bus.publish("DAEMON_STOPPED", supervisor.snapshot())

    anyio.run(main, backend="asyncio")
