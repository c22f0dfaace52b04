"""``session-supervisor sim genesys|cxone``: placeholder until the simulators land (issue 4)."""

from __future__ import annotations

import click


@click.group()
def sim() -> None:
    """Run a loopback simulator of Genesys Cloud or NICE CXone in the foreground."""
