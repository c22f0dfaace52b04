"""The ``session-supervisor`` command line.

Exit codes (docs/architecture.md, "Contracts"): 0 success, 1 a handled failure, 2 bad usage.
The commands are imported when one is run (:class:`LazyGroup`, :data:`COMMANDS`): a short
command such as ``ctl status`` loads no simulator, demo, aiohttp or OpenTelemetry module
(tests/unit/test_cli_imports.py, tests/bench/bench_cli_start.py).
Bad input never prints a traceback: :func:`main` turns every :class:`SupervisorError`
into one ``session-supervisor: error: ...`` line on stderr.

Signals: the entry point (``supervisor/__main__.py``) records SIGTERM, SIGINT and SIGHUP before
anything is imported. The daemons (``run``, ``demo``, ``sim``, ``bridge``) take the record over; every other
command gets the default actions back as soon as it is known (:data:`DAEMON_COMMANDS`), and a signal
recorded until then takes its default effect at that moment (SIGINT: exit 130, no traceback).
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
from typing import NoReturn

import click

from supervisor.cli.common import exit_code_of
from supervisor.cli.lazy_group import LazyCommand, LazyGroup
from supervisor.distribution import VERSION
from supervisor.errors import SupervisorError
from supervisor.runtime.signals import PROCESS

#: the commands that keep the process's signal record (docs/runtime.md, "Lifecycle"); ``run --check``
#: hands it back itself
DAEMON_COMMANDS = frozenset({"run", "demo", "sim", "bridge"})

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


#: every command: its module, and the summary the top-level ``--help`` lists without importing it
#: (the first paragraph of its docstring; tests/unit/test_cli_imports.py holds the two together)
COMMANDS: dict[str, LazyCommand] = {
    "classify": LazyCommand(
        "supervisor.cli.classify_cmd", "classify", "Classify RawError envelopes (NDJSON) into SdkErrorEvents."
    ),
    "taxonomy": LazyCommand(
        "supervisor.cli.taxonomy_cmd",
        "taxonomy",
        "Check taxonomy files and compare versions before switching.",
    ),
    "policy": LazyCommand(
        "supervisor.cli.policy_cmd",
        "policy",
        "Inspect retry policies (budgets, backoff, Retry-After handling).",
    ),
    "sim": LazyCommand(
        "supervisor.cli.sim_cmd",
        "sim",
        "Run a loopback simulator of Genesys Cloud or NICE CXone in the foreground.",
    ),
    "run": LazyCommand(
        "supervisor.cli.run_cmd", "run", "Supervise the configured sessions until SIGTERM or SIGINT."
    ),
    "demo": LazyCommand(
        "supervisor.cli.demo_cmd",
        "demo",
        "Supervise --sessions sessions against in-process Genesys and CXone simulators and play a scenario.",
    ),
    "watch": LazyCommand(
        "supervisor.cli.watch_cmd",
        "watch",
        "Follow the daemon's sessions over its subscribe socket, until the daemon stops.",
    ),
    "store": LazyCommand(
        "supervisor.cli.store_cmd",
        "store",
        "Move the durable store between SQLite and PostgreSQL (the daemons stopped).",
    ),
    "bridge": LazyCommand(
        "supervisor.cli.bridge_cmd",
        "bridge",
        "Serve the daemon's session stream over WebSocket to browser desktops, each token its own agents' sessions.",
    ),
    # with the attribute verbs (docs/attributes.md: ctl attributes set|status, ctl mismatches, ctl resolve)
    "ctl": LazyCommand(
        "supervisor.cli.ctl_cmd", "ctl", "Control the running daemon over its control socket."
    ),
}


@click.group(cls=LazyGroup, lazy=COMMANDS, context_settings=CONTEXT_SETTINGS)
@click.version_option(VERSION, prog_name="session-supervisor")
def cli() -> None:
    """Keep Genesys Cloud and NICE CXone sessions alive and honest.

    Every failure is classified by one versioned error taxonomy
    (TRANSIENT / PERMANENT / STATE_CORRUPTING) that decides retry, reconnect or
    fail fast.

    \b
    New here? Watch it work against the built-in simulators:
      session-supervisor demo                      (50 sessions, a mixed storm, ~80 s)
      session-supervisor demo --scenario storm     (see `demo --help` for all scenarios)
    Run it for real:
      session-supervisor run --config PATH --check (validate config and credentials)
      session-supervisor run --config PATH         (supervise until SIGTERM)
    Follow and steer a running daemon: watch, ctl.
    Look inside the decision core: classify, taxonomy, policy.
    """


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    out: list[BaseException] = []
    for exc in group.exceptions:
        out.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return out


def error_line(message: str) -> str:
    """``session-supervisor: error: MESSAGE``, led by ``<3>`` when stderr is journald's stream (a unit's
    ``ExecStart=`` or ``ExecReload=``): ``journalctl -p err`` finds it, and journald strips the prefix."""
    from supervisor.systemd.journal import SD_ERR, stderr_prefix

    return f"{stderr_prefix(os.environ, SD_ERR)}session-supervisor: error: {message}"


def _fail(message: str) -> NoReturn:
    # stderr may be unwritable too (2>/dev/full): the exit code still says what happened
    with contextlib.suppress(OSError, ValueError, AttributeError):
        click.echo(error_line(message), err=True)
    sys.exit(1)


def _stdout_failing(exc: OSError) -> bool:
    """Whether ``exc`` came from writing standard output (a failed write is not kept buffered)."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        return True  # only a write fails so, and stdout is the only file commands write
    try:
        fd = sys.stdout.fileno()
    except (OSError, ValueError, AttributeError):
        return False
    try:
        os.write(fd, b"")  # an empty write still fails on /dev/full, a read-only or dead descriptor
    except OSError:
        return True
    return False


def _discard_stdout() -> None:
    # what stays buffered can never be written: point fd 1 at /dev/null so the interpreter's
    # final flush does not print a second error (and a traceback) after our one line
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


def _io_error(exc: OSError) -> NoReturn:
    """One line for an I/O error no command turned into its own error, then exit 1."""
    reason = exc.strerror or str(exc) or type(exc).__name__
    if _stdout_failing(exc):
        _discard_stdout()
        _fail(f"cannot write to standard output: {reason}")
    where = f"{exc.filename}: " if exc.filename is not None else ""
    _fail(f"{where}{reason}")


def _command(argv: list[str] | None) -> str | None:
    """The command named on the command line (the group's own options take no value)."""
    args = sys.argv[1:] if argv is None else argv
    return next((arg for arg in args if not arg.startswith("-")), None)


def main(argv: list[str] | None = None) -> None:
    """Run the CLI, map our errors to exit 1 with one line (``supervisor.__main__`` calls it)."""
    if sys.stdout is None:
        # fd 1 was closed before we started: every command writes its result there, and
        # click.echo would drop it silently
        _fail(f"cannot write to standard output: {os.strerror(errno.EBADF)} (it is closed)")
    try:
        if _command(argv) not in DAEMON_COMMANDS:
            PROCESS.release()  # a short command: the default actions (a recorded SIGINT raises here)
        result = cli.main(args=argv, prog_name="session-supervisor", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("session-supervisor: aborted", err=True)
        sys.exit(130)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.UsageError as exc:
        # one line naming what was wrong, then where to look
        hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
        click.echo(f"session-supervisor: usage error: {exc.format_message()}{hint}", err=True)
        sys.exit(2)
    except click.ClickException as exc:
        click.echo(error_line(exc.format_message()), err=True)
        sys.exit(exc.exit_code)
    except SupervisorError as exc:
        click.echo(error_line(str(exc)), err=True)
        sys.exit(exit_code_of(exc))
    except BaseExceptionGroup as group:
        # a task group wraps what its tasks raised: report ours in one line, re-raise the rest
        leaves = _leaves(group)
        if any(isinstance(e, KeyboardInterrupt) for e in leaves):
            sys.exit(130)  # SIGINT under a command's task group: no traceback
        mine = [e for e in leaves if isinstance(e, SupervisorError)]
        if mine:
            click.echo(error_line(str(mine[0])), err=True)
            sys.exit(1)
        io = [e for e in leaves if isinstance(e, OSError) and not isinstance(e, BrokenPipeError)]
        if not io:
            raise
        _io_error(io[0])
    except BrokenPipeError:
        # `... | head` closed our stdout: not an error worth a traceback
        sys.stderr.close()
        sys.exit(1)
    except OSError as exc:
        # /dev/full, a read-only or revoked descriptor: one line, never a traceback
        _io_error(exc)
    except KeyboardInterrupt:
        sys.exit(130)
    except ImportError as exc:
        # one of our modules hidden by supervisord's, which shares the import name 'supervisor'
        # (supervisor/cli/import_name.py): one line saying so; any other failed import is a bug
        from supervisor.cli.import_name import import_name_warning

        clash = import_name_warning()
        if clash is None:
            raise
        _fail(f"cannot import {exc.name or 'a module'}: {clash}")
    # standalone_mode=False returns ctx.exit(n)'s code instead of exiting
    sys.exit(result if isinstance(result, int) else 0)
