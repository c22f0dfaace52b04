"""``session-supervisor watch``: a live table of the daemon's sessions, or its stream as NDJSON."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
import msgspec

from supervisor.api.client import Client
from supervisor.api.messages import ALL_STREAMS, PLATFORM_STREAM, STREAMS
from supervisor.api.protocol import Method
from supervisor.cli.socket_option import UTF8, resolve_socket, sendable, socket_option
from supervisor.vocabulary import Platform, SessionState

_STATES = tuple(state.value for state in SessionState)
_PLATFORMS = tuple(platform.value for platform in Platform)
# what the table follows besides deltas: attempts, circuit states, why sessions ended
_TABLE_STREAMS = ("circuits", "retries", "terminations")
# the daemon answers a Subscribe at once; a silent one is not ours or is wedged
_FIRST_REPLY_TIMEOUT_S = 10.0


@click.command()
@socket_option("subscribe")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the stream as NDJSON, one object per line, each with a type.",
)
@click.option(
    "--platform",
    "platforms",
    multiple=True,
    type=click.Choice(_PLATFORMS),
    help="Only this platform (repeatable).",
)
@click.option(
    "--state",
    "states",
    multiple=True,
    type=click.Choice(_STATES),
    help="Only sessions entering or leaving this state (repeatable).",
)
@click.option(
    "--session", "sessions", multiple=True, metavar="ID", type=UTF8, help="Only this session (repeatable)."
)
@click.option(
    "--events",
    "streams",
    multiple=True,
    type=click.Choice((*STREAMS, ALL_STREAMS, PLATFORM_STREAM)),
    help="Also stream these events (repeatable): circuits, retries, throttling, rollovers, terminations, "
    "errors, backpressure, attributes, control, daemon, or all; and platform (the sessions' platform "
    "events and gaps, with --json; not part of all, and only for the peers [sockets] platformAllowUids "
    "and platformAllowGids name).",
)
def watch(
    socket_path: Path | None,
    as_json: bool,
    platforms: tuple[str, ...],
    states: tuple[str, ...],
    sessions: tuple[str, ...],
    streams: tuple[str, ...],
) -> None:
    """Follow the daemon's sessions over its subscribe socket, until the daemon stops.

    \b
    The table updates in place: counts by state in the header, then one row per
    session (state, since, reconnection attempts, last error, its endpoint's circuit).
    With --json: the first line is {"type": "snapshot", "bootId", "seq", "sessions"},
    then "delta" lines (seq, sessionId, state, previous, at, reason), "event" lines for
    the --events streams ("platform" and "gap" lines for --events platform), and "lagged"
    (count) followed by a new "snapshot" if this reader fell too far behind. Exit 0 when the daemon closes the stream; 1 with one
    line when it is not running or refuses us.

    \b
    Example:
      session-supervisor watch --socket /run/session-supervisor/subscribe.sock --json --state terminated
    """
    path = resolve_socket(socket_path, "subscribe")
    wanted = set(streams) if as_json else {*streams, *_TABLE_STREAMS}
    selection: dict[str, Any] = {
        "platforms": list(platforms) or None,
        "states": list(states) or None,
        "sessions": list(sessions) or None,
    }
    parameters = {"filter": selection, "streams": sorted(wanted)}
    sendable(Method.SUBSCRIBE, parameters, more=True)
    with Client(path) as client:
        messages = client.stream(Method.SUBSCRIBE, parameters, first_timeout=_FIRST_REPLY_TIMEOUT_S)
        if as_json:
            _print_json(messages)
        else:
            _show_table(client, messages, path)


def _print_json(messages: Any) -> None:
    encode = msgspec.json.Encoder().encode
    out = sys.stdout.buffer
    for message in messages:
        out.write(encode(message) + b"\n")
        # a script reading line by line sees each change as it happens
        out.flush()


def _show_table(client: Client, messages: Any, path: Path) -> None:
    from rich.console import Console
    from rich.live import Live

    from supervisor.cli.watch_view import WatchModel, render

    console = Console(highlight=False)
    model = WatchModel()
    title = f"session-supervisor watch {path}"

    def frame() -> Any:
        return render(model, height=console.height, width=console.width, title=title)

    with Live(frame(), console=console, auto_refresh=False, transient=False) as live:
        for message in messages:
            model.apply(message)
            # redraw once the burst that arrived together has been applied (before the next wait)
            if not client.buffered:
                live.update(frame(), refresh=True)
        if model.ended is None:
            model.ended = "the daemon closed the stream"
        live.update(frame(), refresh=True)
