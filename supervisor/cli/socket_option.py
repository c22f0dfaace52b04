"""What ``watch`` and ``ctl`` share: ``--socket PATH`` (the path given, else the daemon's default for
this user) and :data:`UTF8`, the type of every argument they send to the daemon."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar

import click

from supervisor.api.client import encode
from supervisor.api.paths import default_paths
from supervisor.errors import CallNotSent

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
            # not readable=True (click's default): connecting needs write permission on a socket,
            # and a socket the user may not use is the client's one line and exit 1, not bad usage
            type=click.Path(dir_okay=False, readable=False, path_type=Path),
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


if TYPE_CHECKING:  # click 8.5 types ParamType by what it converts to and from; 8.1 cannot subscript it
    _TextType = click.ParamType[str, Any]
else:
    _TextType = click.ParamType


class Utf8Text(_TextType):
    """Text that can travel in a call: UTF-8, as the socket protocol is (varlink: JSON in UTF-8).

    Python hands arguments that are not valid UTF-8 over with each bad byte escaped (PEP 383);
    sent as they are, the JSON encoder fails. Refused here instead: a usage error naming the
    argument and the byte (exit 2), before anything is sent.
    """

    name = "text"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            code = ord(text[exc.start])
            # PEP 383: byte 0xNN arrives as U+DCNN
            byte = f"byte 0x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"U+{code:04X}"
            self.fail(f"not valid UTF-8 ({byte} at position {exc.start + 1})", param, ctx)
        return text


#: every argument ``watch`` and ``ctl`` send to the daemon
UTF8: Final = Utf8Text()


def sendable(
    method: str, parameters: Mapping[str, Any] | None = None, *, more: bool = False, hint: str = ""
) -> None:
    """A usage error (exit 2) for a call the daemon could not take, before connecting to it."""
    try:
        encode(method, parameters, more=more)
    except CallNotSent as exc:
        raise click.UsageError(f"{exc}{': ' + hint if hint else ''}") from None
