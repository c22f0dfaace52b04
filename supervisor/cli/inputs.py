"""What the decision-core commands (classify, taxonomy, policy) read: the taxonomy option, NDJSON input.

Apart from :mod:`supervisor.cli.common` because it imports the taxonomy, which the commands that
talk to the daemon (``ctl``, ``watch``) never need (docs/runtime.md, "Floors").
"""

from __future__ import annotations

import errno
import io
import os
import sys
from collections.abc import Callable, Iterator
from typing import IO, Any, TypeVar

import click

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
