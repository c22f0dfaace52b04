"""A click group whose commands are imported when one is run, not when the program starts (docs/runtime.md, "Floors").

Each command's module is imported only when that command is the one invoked (or its ``--help`` is
asked for): ``ctl status`` does not pay for the simulators, the demo or aiohttp, which only ``sim``
and ``demo`` need. The group's own ``--help`` lists every command with its one-line summary
from :class:`LazyCommand`, so listing them imports none of them. This is the pattern of click's
documentation, "Advanced Patterns", "Lazily Loading Subcommands" (``LazyGroup``), with the summaries
kept beside the import path so the listing stays import-free; a test holds each summary to the
command's own docstring (tests/unit/test_cli_imports.py).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import click


@dataclass(frozen=True)
class LazyCommand:
    """Where a command lives, and what ``--help`` says of it without importing it."""

    module: str
    attribute: str
    #: the first paragraph of the command's docstring: click shortens it as it would the command's
    summary: str


class LazyGroup(click.Group):
    """A :class:`click.Group` that imports a command's module the first time the command is needed."""

    def __init__(self, *args: Any, lazy: Mapping[str, LazyCommand], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is None and cmd_name in self.lazy:
            command = self.load(cmd_name)
        return command

    def load(self, name: str) -> click.Command:
        """Import the command ``name`` (once) and register it."""
        where = self.lazy[name]
        command = getattr(importlib.import_module(where.module), where.attribute)
        if not isinstance(command, click.Command):
            raise TypeError(f"{where.module}.{where.attribute} is not a click command")
        self.add_command(command, name)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # click.Group.format_commands, except that a command not imported yet is listed from its
        # summary: a stand-in with that help, shortened by click's own rule (Command.get_short_help_str)
        listed = []
        for name in self.list_commands(ctx):
            command = self.commands.get(name)
            if command is None:
                command = click.Command(name, help=self.lazy[name].summary)
            if not command.hidden:
                listed.append((name, command))
        if not listed:
            return
        # click's spacing: three times the default indent beside the longest name
        limit = formatter.width - 6 - max(len(name) for name, _ in listed)
        with formatter.section("Commands"):
            formatter.write_dl([(name, command.get_short_help_str(limit)) for name, command in listed])
