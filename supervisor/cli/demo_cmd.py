"""``session-supervisor demo`` (being written)."""

from __future__ import annotations

import click


@click.command(hidden=True)
def demo() -> None:
    """The live demo against the built-in simulators (not yet available)."""
    raise click.ClickException("the live demo is not available yet")
