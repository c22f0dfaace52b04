"""Live progress on stderr: phase, sessions by state, open circuits, events per second."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import anyio
from rich.console import Console
from rich.live import Live
from rich.table import Table

from supervisor.clock import Clock
from supervisor.vocabulary import SessionState

_ORDER = (SessionState.CONNECTING, SessionState.ACTIVE, SessionState.RECONNECTING, SessionState.TERMINATED)


@dataclass(slots=True)
class Frame:
    """One refresh of the progress display."""

    scenario: str
    phase: str
    elapsed_s: float
    states: Mapping[SessionState, int]
    open_circuits: list[str]
    events_per_s: float


def render_frame(frame: Frame) -> Table:
    table = Table(
        title=f"demo {frame.scenario}: {frame.phase}  ({frame.elapsed_s:5.1f} s)",
        title_justify="left",
    )
    for state in _ORDER:
        table.add_column(state, justify="right")
    table.add_column("open circuits")
    table.add_column("events/s", justify="right")
    table.add_row(
        *(str(frame.states.get(s, 0)) for s in _ORDER),
        ", ".join(frame.open_circuits) or "-",
        f"{frame.events_per_s:.0f}",
    )
    return table


class Progress:
    """Refreshes a :class:`rich.live.Live` table from ``sample()`` until cancelled."""

    def __init__(
        self,
        console: Console,
        clock: Clock,
        sample: Callable[[], tuple[str, Mapping[SessionState, int], list[str], int]],
        scenario: str,
        interval_s: float = 0.25,
    ) -> None:
        self._console = console
        self._clock = clock
        self._sample = sample
        self._scenario = scenario
        self._interval = interval_s

    async def run(self) -> None:
        start = self._clock.monotonic()
        last_t, last_events = start, 0
        with Live(console=self._console, auto_refresh=False, transient=False) as live:
            try:
                while True:
                    phase, states, circuits, events = self._sample()
                    now = self._clock.monotonic()
                    rate = (events - last_events) / (now - last_t) if now > last_t else 0.0
                    last_t, last_events = now, events
                    live.update(
                        render_frame(Frame(self._scenario, phase, now - start, states, circuits, rate)),
                        refresh=True,
                    )
                    await anyio.sleep(self._interval)
            finally:
                phase, states, circuits, _ = self._sample()
                live.update(
                    render_frame(
                        Frame(self._scenario, phase, self._clock.monotonic() - start, states, circuits, 0.0)
                    ),
                    refresh=True,
                )
