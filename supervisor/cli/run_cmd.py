"""``session-supervisor run --config PATH``: the daemon in the foreground."""

from __future__ import annotations

import os
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
    every session transition. The socket API ([sockets]: watch, ctl) listens once the
    sessions are handed over. SIGTERM (or `ctl drain`) stops intake, closes sessions with 1001, waits
    at most daemon.shutdownGrace seconds and exits 0; a second signal forces the exit
    (exit code 1, DAEMON_FORCED_EXIT).
    """
    from supervisor.api.server import SocketApi
    from supervisor.events import DaemonForcedExit, DaemonStarted, DaemonStopped, DaemonStopping
    from supervisor.runtime.main import run_daemon
    from supervisor.runtime.supervisor import Supervisor
    from supervisor.runtime.wiring import Wiring

    config = load_config(config_path)
    config_dir = config_path.resolve().parent
    grace_s = config.daemon.shutdown_grace

    async def main() -> None:
        async with Wiring(config, config_dir=config_dir) as wiring:
            if check:
                click.echo(f"ok: {config_path}: {len(config.sessions)} sessions, credentials readable")
                return
            bus = wiring.bus
            bus.subscribe(JsonLineSink(sys.stdout))
            supervisor = Supervisor(wiring)
            # the control socket's drain verb sets it: the same drain as SIGTERM
            stop = anyio.Event()
            api = SocketApi(supervisor, config.sockets, environ=os.environ, stop=stop)
            # bound before any session starts: a path held by a live daemon ends the start here
            api.bind()
            try:
                forced = await run_daemon(
                    supervisor,
                    grace_s=grace_s,
                    services=api.services,
                    stop=stop,
                    on_ready=lambda: bus.publish(DaemonStarted(len(config.sessions), str(config_path))),
                    on_stopping=lambda: bus.publish(DaemonStopping(grace_s)),
                )
            finally:
                api.close()
            if forced:
                bus.publish(DaemonForcedExit(supervisor.snapshot()))
                raise SystemExit(1)
            bus.publish(DaemonStopped(supervisor.snapshot()))

    anyio.run(main, backend="asyncio")
