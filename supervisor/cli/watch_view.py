"""The ``watch`` table: sessions by state in a header, one row per session, recent notable events.

:class:`WatchModel` applies the subscription's messages (snapshot, delta, event, lagged) to
its rows; :func:`render` draws them. Rows are sorted with the troubled first (terminated,
reconnecting, connecting, then active) and cut to what fits the terminal, with a count of the
rest, so a fleet of thousands still reads at a glance.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from supervisor.vocabulary import SessionState

# the troubled first; a row's state is the wire's string, which looks a member up by its value
_ORDER = (
    SessionState.TERMINATED,
    SessionState.RECONNECTING,
    SessionState.CONNECTING,
    SessionState.ACTIVE,
    SessionState.HANDED_OVER,
)
_STYLE = {
    SessionState.HANDED_OVER: "cyan",
    SessionState.ACTIVE: "green",
    SessionState.CONNECTING: "yellow",
    SessionState.RECONNECTING: "yellow",
    SessionState.TERMINATED: "red",
}
_RANK: dict[SessionState | None, int] = {state: rank for rank, state in enumerate(_ORDER)}
_NOTABLE = frozenset(
    {
        "SESSION_TERMINATED",
        "CIRCUIT_BREAKER_OPEN",
        "CIRCUIT_BREAKER_CLOSED",
        "CIRCUIT_MANUAL",
        "RETRY_EXHAUSTED",
    }
)
# lines the table needs besides its rows: header, column titles, borders, events, footer
_CHROME = 12


@dataclass
class WatchModel:
    """What the table shows, kept up to date from the stream."""

    rows: dict[str, dict[str, Any]] = field(default_factory=dict)
    boot_id: str = ""
    seq: int = 0
    lagged: int = 0
    ended: str | None = None
    events: deque[str] = field(default_factory=lambda: deque(maxlen=5))

    def apply(self, message: dict[str, Any]) -> None:
        kind = message.get("type")
        if kind == "snapshot":
            self.boot_id = str(message.get("bootId", ""))
            self.rows = {str(s["sessionId"]): dict(s) for s in message.get("sessions", [])}
            self.seq = int(message.get("seq", 0))
        elif kind == "delta":
            row = self.rows.setdefault(str(message["sessionId"]), {"sessionId": message["sessionId"]})
            row.update(
                {k: v for k, v in message.items() if k not in ("type", "seq", "previous", "at", "reason")}
            )
            row["since"] = message.get("at")
            self.seq = int(message.get("seq", self.seq))
        elif kind == "event":
            self._event(message)
        elif kind == "lagged":
            self.lagged += int(message.get("count", 0))
        elif kind == "end":
            self.ended = str(message.get("reason", "ended"))

    def _event(self, message: dict[str, Any]) -> None:
        name = message.get("event")
        self.seq = int(message.get("seq", self.seq))
        if name == "RETRY_ATTEMPT" and message.get("kind") == "reconnect":
            row = self.rows.get(str(message.get("sessionId")))
            if row is not None:
                row["attempts"] = message.get("attempt", row.get("attempts"))
        elif name in ("CIRCUIT_TRANSITION",):
            endpoint = str(message.get("machineId", "")).removeprefix("circuit:")
            for row in self.rows.values():
                circuit = row.get("circuit")
                if isinstance(circuit, dict) and circuit.get("endpoint") == endpoint:
                    circuit["state"] = message.get("to")
        if name in _NOTABLE:
            self.events.append(_describe(message))

    def counts(self) -> Counter[SessionState | None]:
        return Counter(_state_of(row) for row in self.rows.values())


def _state_of(row: dict[str, Any]) -> SessionState | None:
    """A row's state (the wire's string); None for one this client does not know (``unknown``)."""
    try:
        return SessionState(str(row.get("state")))
    except ValueError:
        return None


def _describe(message: dict[str, Any]) -> str:
    at = str(message.get("timestamp", ""))[11:19]
    name = message.get("event")
    if name == "SESSION_TERMINATED":
        cause = message.get("trigger") or message.get("code") or ""
        return f"{at} {message.get('sessionId')} terminated: {message.get('reason')} {cause}".rstrip()
    if name == "RETRY_EXHAUSTED":
        return f"{at} {message.get('sessionId')} retries exhausted: {message.get('code')}"
    if name == "CIRCUIT_MANUAL":
        until = f" until {str(message['until'])[11:19]}" if message.get("until") else ""
        return f"{at} {message.get('circuitId')} {message.get('action')} (by hand): {message.get('state')}{until}"
    return f"{at} {message.get('circuitId')} {str(name).removeprefix('CIRCUIT_BREAKER_').lower()}"


def _error(error: object, with_class: bool) -> str:
    if not isinstance(error, dict):
        return ""
    code = str(error.get("code", ""))
    return f"{code} {error.get('class', '')}".strip() if with_class else code


def _clock(iso: object) -> str:
    text = str(iso or "")
    return text[11:19] if len(text) >= 19 else text


def render(model: WatchModel, *, height: int, width: int, title: str) -> RenderableType:
    counts = model.counts()
    header = Text(f"{title}  ", style="bold")
    header.append(f"{len(model.rows)} sessions")
    for state in _ORDER:
        if counts.get(state):
            header.append("  ")
            header.append(f"{state} {counts[state]}", style=_STYLE[state])
    header.append(f"   seq {model.seq}", style="dim")
    if model.lagged:
        header.append(f"   lagged {model.lagged}", style="magenta")
    circuits: dict[str, str] = {}
    for row in model.rows.values():
        circuit = row.get("circuit")
        if isinstance(circuit, dict):
            circuits[str(circuit.get("endpoint"))] = str(circuit.get("state"))
    summary = Text(
        "circuits: " + (", ".join(f"{e} {s}" for e, s in sorted(circuits.items())) or "-"), style="dim"
    )
    ordered = sorted(model.rows.values(), key=lambda r: (_RANK.get(_state_of(r), 9), str(r["sessionId"])))
    table = Table(expand=False, pad_edge=False)
    # fixed columns keep their width on a narrow terminal; only "last error" gets what is left
    fixed = (
        ("session", max([len("session"), *(len(str(r["sessionId"])) for r in ordered)])),
        # a named tenant's session: "NAME/platform" (the default tenant's: the platform alone)
        ("plat.", max([7, *(len(_platform(r)) for r in ordered)])),
        ("state", 12),
        ("since", 8),
        ("att.", 4),
    )
    for column, size in fixed:
        table.add_column(column, width=size, no_wrap=True, justify="right" if column == "att." else "left")
    circuit_width = 9
    # every column has its width, a space either side and a border; the edges have no padding
    used = sum(size + 3 for _, size in fixed) + (circuit_width + 2) + 3 + 1
    room_for_error = max(8, width - used)
    with_class = room_for_error >= 42  # the longest code and class side by side
    table.add_column("last error", max_width=room_for_error, no_wrap=True, overflow="ellipsis")
    table.add_column("circuit", width=circuit_width, no_wrap=True)
    room = max(1, height - _CHROME)
    for row in ordered[:room]:
        row_state = _state_of(row)
        error = row.get("lastError")
        circuit = row.get("circuit")
        table.add_row(
            str(row["sessionId"]),
            _platform(row),
            Text(str(row.get("state")), style="" if row_state is None else _STYLE[row_state]),
            _clock(row.get("since")),
            str(row.get("attempts", 0)),
            _error(error, with_class),
            # the endpoint is in the circuits line above: the column says how it is now
            str(circuit.get("state", "")) if isinstance(circuit, dict) else "",
        )
    parts: list[RenderableType] = [header, summary, table]
    if len(ordered) > room:
        parts.append(Text(f"… {len(ordered) - room} more (troubled sessions first)", style="dim"))
    for line in model.events:
        parts.append(Text(line, style="dim"))
    if model.ended:
        parts.append(Text(f"stream ended: {model.ended}", style="bold"))
    return Group(*parts)


def _platform(row: Mapping[str, Any]) -> str:
    """A row's platform, its tenant's name first when it is a named tenant's (``emea/genesys``)."""
    platform = str(row.get("platform") or "")
    tenant = row.get("tenant")
    return f"{tenant}/{platform}" if tenant else platform
