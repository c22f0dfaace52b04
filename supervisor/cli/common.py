"""Options and helpers shared by the CLI commands."""

from __future__ import annotations

import errno
import io
import os
import shlex
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import IO, Any, TypeVar

import click
from rich.console import Console

from supervisor.taxonomy import DEFAULT_VERSION, ENV_VAR, Taxonomy, load_taxonomy, resolve_version
from supervisor.taxonomy.envelope import MAX_LINE_BYTES

F = TypeVar("F", bound=Callable[..., Any])


def taxonomy_option(func: F) -> F:
    """``--taxonomy VERSION|PATH``; the environment override applies when it is not given."""
    return click.option(
        "--taxonomy",
        "taxonomy_ref",
        metavar="VERSION|PATH",
        default=None,
        help=f"Taxonomy version shipped with the package (e.g. {DEFAULT_VERSION}) or a TOML file. "
        f"Default: ${ENV_VAR} if set, else {DEFAULT_VERSION}.",
    )(func)


def active_taxonomy(ref: str | None) -> Taxonomy:
    """Load the taxonomy the user asked for, or the active one (env override, then default)."""
    return load_taxonomy(ref or resolve_version(None, os.environ))


def stderr_console() -> Console:
    return Console(file=sys.stderr, highlight=False, soft_wrap=True)


def stdout_console() -> Console:
    # piped output keeps whole words: rich would otherwise assume 80 columns
    width = None if sys.stdout.isatty() else 160
    return Console(file=sys.stdout, highlight=False, width=width)


class _ClosedStdin(io.RawIOBase):
    """Standard input when fd 0 was closed: reading it is an error, not an empty input."""

    name = "-"

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        raise OSError(errno.EBADF, "it is closed")


class InputFile(click.File):
    """``click.File("rb")`` where ``-`` with a closed standard input fails when read (one line, exit 1).

    click itself raises a RuntimeError while parsing, even when the command never reads it.
    """

    def __init__(self) -> None:
        super().__init__("rb")

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if value == "-" and (sys.stdin is None or getattr(sys.stdin, "buffer", None) is None):
            return io.BufferedReader(_ClosedStdin())
        return super().convert(value, param, ctx)


def _input_name(stream: IO[bytes]) -> str:
    name = getattr(stream, "name", None)
    return "standard input" if name in (None, "-", "<stdin>", 0) else str(name)


class NdjsonLines:
    """The lines of a stream, each read with a bounded ``readline``: memory stays bounded.

    Iteration stops at a line longer than ``MAX_LINE_BYTES`` (without yielding it): a line that
    long may never end (``/dev/zero``). :attr:`cut_line` is then its 1-based number and
    :meth:`cut_message` says so. A read error is one ``click.ClickException`` naming the input.
    """

    def __init__(self, stream: IO[bytes]) -> None:
        self._stream = stream
        self.cut_line: int | None = None

    def __iter__(self) -> Iterator[bytes]:
        number = 0
        while True:
            try:
                line = self._stream.readline(MAX_LINE_BYTES + 1)
            except OSError as exc:
                reason = exc.strerror or str(exc)
                raise click.ClickException(f"cannot read {_input_name(self._stream)}: {reason}") from None
            if not line:
                return
            number += 1
            if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
                self.cut_line = number
                return
            yield line

    def cut_message(self) -> str:
        """``line N: longer than the 1 MiB line cap; ...`` (only after a cut)."""
        cap = f"{MAX_LINE_BYTES // 1024 // 1024} MiB"
        return f"line {self.cut_line}: longer than the {cap} line cap; the input is not read past it"


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
