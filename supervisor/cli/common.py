"""Options and helpers shared by the CLI commands."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click
from rich.console import Console

from supervisor.taxonomy import ENV_VAR, Taxonomy, load_taxonomy, resolve_version

F = TypeVar("F", bound=Callable[..., Any])


def taxonomy_option(func: F) -> F:
    """``--taxonomy VERSION|PATH``; the environment override applies when it is not given."""
    return click.option(
        "--taxonomy",
        "taxonomy_ref",
        metavar="VERSION|PATH",
        default=None,
        help=f"Taxonomy version shipped with the package (e.g. v1) or a TOML file. "
        f"Default: ${ENV_VAR} if set, else v1.",
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
