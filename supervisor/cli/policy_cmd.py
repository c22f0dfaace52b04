"""placeholder"""

import click


@click.command()
def policy() -> None:
    """placeholder"""
