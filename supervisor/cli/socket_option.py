"""``--socket PATH`` for ``watch`` and ``ctl``: the path given, else the daemon's default for this user."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from supervisor.api.listen import default_paths

F = TypeVar("F", bound=Callable[..., Any])


def socket_option(which: str) -> Callable[[F], F]:
    """``--socket PATH``: the ``which`` socket ("subscribe" or "control")."""
    defaults = default_paths(os.environ)
    shown = str(defaults[0 if which == "subscribe" else 1]) if defaults else None

    def decorate(func: F) -> F:
        return click.option(
            "--socket",
            "socket_path",
            metavar="PATH",
            type=click.Path(dir_okay=False, path_type=Path),
            default=None,
            help=f"The daemon's {which} socket ([sockets] {which} in its config). "
            + (f"Default: {shown}." if shown else "Default: under $XDG_RUNTIME_DIR/session-supervisor/."),
        )(func)

    return decorate


def resolve_socket(path: Path | None, which: str) -> Path:
    """The path to use; a usage error (exit 2) when none is given and none can be derived."""
    if path is not None:
        return path
    defaults = default_paths(os.environ)
    if defaults is None:
        raise click.UsageError("no --socket PATH given and $XDG_RUNTIME_DIR is unset")
    return defaults[0 if which == "subscribe" else 1]
