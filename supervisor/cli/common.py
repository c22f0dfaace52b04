"""Helpers shared by the CLI commands: the consoles they print on, the command for another terminal.

rich is imported when a console is made, not with this module: ``ctl status`` prints plain lines
and never pays for it (docs/runtime.md, "Floors"). What the decision-core commands read (the taxonomy
option, NDJSON input) is in :mod:`supervisor.cli.inputs`.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final

from supervisor.errors import ApiError, SupervisorError
from supervisor.vocabulary.faults import ApiFault

if TYPE_CHECKING:
    from rich.console import Console

#: ``ctl``'s exit when the session is in a shard this process does not own (NotOwner): ask the
#: process that owns it (sysexits' EX_UNAVAILABLE: this daemon cannot serve it, another can)
EX_NOT_OWNER: Final = 69


def exit_code_of(error: SupervisorError) -> int:
    """The exit of a command that ``error`` ended: 69 for NotOwner (docs/socket-api.md, "Errors"), else 1."""
    if isinstance(error, ApiError) and error.name == ApiFault.NOT_OWNER:
        return EX_NOT_OWNER
    return 1


def stderr_console() -> Console:
    from rich.console import Console

    return Console(file=sys.stderr, highlight=False, soft_wrap=True)


def stdout_console() -> Console:
    from rich.console import Console

    # piped output keeps whole words: rich would otherwise assume 80 columns
    width = None if sys.stdout.isatty() else 160
    return Console(file=sys.stdout, highlight=False, width=width)


#: set by ./dev to its own absolute path: a command printed for another terminal goes through it
DEV_ENV_VAR = "SESSION_SUPERVISOR_DEV"


def command_for_another_terminal(
    environ: Mapping[str, str] | None = None, argv0: str | None = None, executable: str | None = None
) -> str:
    """How to run this program from another terminal, whose PATH may not have it (found by a
    first-time user: under ./dev, the bare `session-supervisor` a demo printed was not found).

    Under ./dev: ``/abs/dev run``; from the console script: its absolute path; otherwise
    ``python -m supervisor`` with this interpreter's absolute path. Quoted for a POSIX shell."""
    environ = os.environ if environ is None else environ
    argv0 = sys.argv[0] if argv0 is None else argv0
    executable = sys.executable if executable is None else executable
    dev = environ.get(DEV_ENV_VAR)
    if dev and os.path.isabs(dev) and os.path.isfile(dev):
        return f"{shlex.quote(dev)} run"
    if os.path.basename(argv0) == "session-supervisor" and os.path.isfile(argv0):
        return shlex.quote(os.path.abspath(argv0))
    return f"{shlex.quote(executable)} -m supervisor"
