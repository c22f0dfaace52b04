"""``session-supervisor run --config PATH``: the daemon in the foreground."""

from __future__ import annotations

import os
import signal
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import click

from supervisor.cli.import_name import import_name_warning
from supervisor.config import Config, SocketsConfig
from supervisor.systemd.journal import SD_NOTICE, SD_WARNING, stderr_prefix
from supervisor.taxonomy import ENV_VAR, Taxonomy, resolve_version
from supervisor.taxonomy.gaps import gaps

if TYPE_CHECKING:
    from supervisor.runtime.assembly import DaemonConfig


def taxonomy_warnings(configured: str, taxonomy: Taxonomy, environ: Mapping[str, str]) -> list[str]:
    """One line per gap of the active taxonomy, naming the version and what selected it."""
    chosen_by = ENV_VAR if environ.get(ENV_VAR, "").strip() else "daemon.taxonomyVersion"
    version = resolve_version(configured, environ)
    return [f"taxonomy '{version}' ({chosen_by}) {gap}" for gap in gaps(taxonomy)]


@click.command()
@click.option(
    "--config",
    "config_path",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="The TOML configuration (see systemd/session-supervisor.example.toml).",
)
@click.option(
    "--check",
    is_flag=True,
    help="Validate the configuration, the credentials and where the sockets go, then exit; a warning "
    "line on stderr says what the active taxonomy version cannot do (v1: update Genesys attributes), "
    "and one when supervisord (import name 'supervisor' too) is installed in the same environment.",
)
def run(config_path: Path, check: bool) -> None:
    """Supervise the configured sessions until SIGTERM or SIGINT.

    Telemetry goes to stdout as one JSON object per line (journald-friendly):
    SDK_ERROR_CLASSIFIED, RETRY_ATTEMPT, RETRY_SUCCESS, RETRY_EXHAUSTED,
    CIRCUIT_BREAKER_OPEN/HALF_OPEN/CLOSED, RECONNECTION_THROTTLED, SESSION_TERMINATED and
    every session transition, each stamped with seq and bootId (docs/runtime.md). A slow or
    unread stdout never blocks the daemon: lines past daemon.eventBufferBytes are dropped and
    counted (EVENTS_DROPPED). The socket API ([sockets]: watch, ctl) listens once the sessions
    are handed over. With a [telemetry] endpoint or OTEL_EXPORTER_OTLP_ENDPOINT, traces and
    metrics go to an OpenTelemetry collector too (docs/telemetry.md), and the lines gain
    traceId/spanId. While it serves nothing else is written: what libraries log (the exporter's
    failed exports, a Python warning) is a LOG_RECORD line too, and so is a warning of its own;
    under journald ($JOURNAL_STREAM) each line leads with its <N> priority (docs/systemd.md).

    \b
    Signals:
      SIGTERM/SIGINT  stop intake; with a store hand the sessions over to the next start (left
                      alive on the platform), else end them (1001, CXone DELETE); wait at most
                      daemon.shutdownGrace seconds, exit 0 (`ctl drain` does the same; `ctl drain
                      --end-sessions` ends them); a second one forces the exit (exit 1)
      SIGHUP          reload the configuration and credential files (validated first; on any
                      error the daemon keeps running on the old one: CONFIG_RELOAD_FAILED);
                      `ctl reload` does the same
      before it serves  SIGTERM/SIGINT end the start (one line, exit 0); SIGHUP is one reload
                      once it serves; after the drain, signals change nothing

    One daemon per configuration: a second one on the same file refuses to start (exit 1).

    Under systemd (Type=notify, docs/systemd.md): READY=1 once the sockets answer and every
    session is handed over, a live STATUS= line, STOPPING=1, RELOADING=1/READY=1 around a
    reload, WATCHDOG=1 while healthy; the sockets may be handed over (LISTEN_FDS, names
    subscribe and control); secrets come from $CREDENTIALS_DIRECTORY.
    """
    from supervisor.runtime.signals import PROCESS

    if check:
        # validating is a short command, not the daemon: the default actions (SIGINT: exit 130)
        PROCESS.release()
        # first, whatever the configuration says: supervisord sharing our import name
        clash = import_name_warning()
        if clash is not None:
            _warning(clash)
    else:
        _stopped_before_serving(PROCESS.take_stop())  # during the imports: nothing read, nothing started

    from supervisor.runtime.assembly import Daemon, DaemonConfig

    # the file read and validated, the telemetry settings resolved (ConfigError: one line, exit 1)
    options = DaemonConfig.from_file(config_path, environ=os.environ, say=_say)
    if check:
        _check(options, config_path)
        return
    from supervisor.runtime.collector import tuned_collector

    daemon = Daemon(options)
    with tuned_collector():  # this process holds the sessions: fewer, larger collections
        outcome = anyio.run(daemon.serve, backend="asyncio")
    # the process's record stays installed: a signal from here to the exit changes nothing
    if not outcome.served:
        _stopped_before_serving(outcome.stopped_by)
    click.get_current_context().exit(outcome.exit_code)


def _check(options: DaemonConfig, config_path: Path) -> None:
    """``run --check``: the credentials read, the taxonomy's gaps said, the socket paths checked."""
    from supervisor.runtime.wiring import Wiring

    config = options.config
    # the telemetry settings and the collector's credential file were checked; nothing is exported

    async def check_credentials() -> None:
        async with Wiring(config, config_dir=options.config_dir, environ=options.environ) as wiring:
            # a version that loads but cannot work against a platform (v1: no Genesys attribute
            # update, docs/taxonomy.md, "Response validation") is said once, on stderr; a warning, not a refusal (exit 0)
            for line in taxonomy_warnings(config.daemon.taxonomy_version, wiring.taxonomy, options.environ):
                _warning(line)

    anyio.run(check_credentials, backend="asyncio")
    _check_socket_paths(config_path, config.sockets, options.environ)
    stop = stop_line(config, options.environ)  # a bad $SESSION_SUPERVISOR_ON_STOP fails the check
    fleet = None
    if config.store.url is not None:
        # imported here: psycopg is the postgres extra's, absent from a one-host install
        from supervisor.fleet.member import fleet_line

        # a PostgreSQL store: the fleet member it makes (a password file it cannot read fails the check)
        fleet = fleet_line(
            config, config_path=config_path, config_dir=options.config_dir, environ=options.environ
        )
    click.echo(f"ok: {config_path}: {len(config.sessions)} sessions, credentials readable")
    click.echo(stop)
    if fleet is not None:
        click.echo(fleet)


def stop_line(config: Config, environ: Mapping[str, str]) -> str:
    """What a stop (SIGTERM, ``ctl drain``) will do to the sessions, as ``run --check`` says it."""
    from supervisor.config_durable import ON_STOP_ENV, StopAction, stop_action
    from supervisor.runtime.durable import store_path

    # a PostgreSQL store is named by its URL (which holds no password: the configuration refuses one)
    path = config.store.url or store_path(config, environ)
    handover = config.handover
    action = stop_action(handover, environ)  # ConfigError for a bad $SESSION_SUPERVISOR_ON_STOP
    if path is None:
        return (
            "stop: no store ([store] path, or $STATE_DIRECTORY): a stop ends every session "
            "(CXone agents are logged out); configure one to hand sessions over to the next start"
        )
    if action is StopAction.END:
        said = f"${ON_STOP_ENV}" if environ.get(ON_STOP_ENV) else 'handover.onStop = "end"'
        return f"stop: ends every session ({said}; store: {path})"
    return (
        f"stop: hands every session over to the next start (store: {path}); one left more than "
        f"{handover.max_age_seconds:g} s before that start is ended instead"
    )


def _say(line: str) -> None:
    # a line before the daemon serves (once it serves, its warnings are event lines); under journald
    # at warning priority (docs/systemd.md, "The journal")
    click.echo(f"{stderr_prefix(os.environ, SD_WARNING)}session-supervisor: {line}", err=True)


def _warning(line: str) -> None:
    _say(f"warning: {line}")


def _stopped_before_serving(sig: signal.Signals | None) -> None:
    """A stop signal before the daemon was ready: one line, exit 0 (docs/runtime.md, "Lifecycle")."""
    if sig is None:
        return
    click.echo(
        f"{stderr_prefix(os.environ, SD_NOTICE)}session-supervisor: {sig.name} during start-up: "
        "stopped before serving",
        err=True,
    )
    click.get_current_context().exit(0)


def _check_socket_paths(config_path: Path, sockets: SocketsConfig, environ: Mapping[str, str]) -> None:
    """What ``run`` would fail on when it binds the socket API, said by ``--check``.

    A configured path is bound in its directory, which the daemon never creates (only the default
    ``$XDG_RUNTIME_DIR/session-supervisor/`` is); the path must fit sun_path and must not be
    something other than a socket. A socket already there is fine: a running daemon's (checking
    the configuration before a reload) or one a killed daemon left (replaced at start).
    """
    from supervisor.api.listen import default_paths, socket_paths
    from supervisor.errors import ConfigError

    paths = socket_paths(sockets, environ)
    if isinstance(paths, str):
        return  # the API is off (disabled, or nowhere to put it): `run` says so and runs without it
    defaults = default_paths(environ)
    for key, path, configured in (
        ("subscribe", paths[0], sockets.subscribe is not None),
        ("control", paths[1], sockets.control is not None),
    ):
        where = f"{config_path}: sockets.{key}" if configured else f"{config_path}: $XDG_RUNTIME_DIR"
        # the default directory is created, but only inside an existing $XDG_RUNTIME_DIR
        directory = path.parent if configured or defaults is None else path.parent.parent
        if len(os.fsencode(path)) > 107:
            raise ConfigError(f"{where}: {path}: a socket path is limited to 107 bytes")
        directory_mode = _mode(directory, follow=True)
        if directory_mode is None:
            raise ConfigError(
                f"{where}: the directory {directory} does not exist, so run cannot bind {path} "
                "(create it; under systemd, the socket units create it once enabled)"
            )
        if not stat.S_ISDIR(directory_mode):
            raise ConfigError(f"{where}: {directory} is not a directory, so run cannot bind {path}")
        path_mode = _mode(path, follow=False)
        if path_mode is not None and not stat.S_ISSOCK(path_mode):
            raise ConfigError(f"{where}: {path} exists and is not a socket; run does not replace it")


def _mode(path: Path, *, follow: bool) -> int | None:
    """``st_mode``, None when nothing is there; what this user may not look at counts as there
    (``--check`` may run as another user than the daemon)."""
    try:
        return (os.stat(path) if follow else os.lstat(path)).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError:
        return stat.S_IFDIR if follow else stat.S_IFSOCK
