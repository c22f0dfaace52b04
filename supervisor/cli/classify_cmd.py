"""placeholder"""

import click


@click.command()
def classify() -> None:
    """placeholder"""
