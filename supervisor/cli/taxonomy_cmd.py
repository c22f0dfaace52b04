"""placeholder"""

import click


@click.command()
def taxonomy() -> None:
    """placeholder"""
