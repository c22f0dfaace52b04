"""``watch`` shows an operator's hand on a circuit (docs/runtime.md, "Manual circuit control"):
the session rows follow the circuit into ``isolated`` and back, and CIRCUIT_MANUAL is a notable event."""

from __future__ import annotations

from rich.console import Console

from supervisor.cli.watch_view import WatchModel, render


def rendered(model: WatchModel) -> str:
    console = Console(width=120, record=True)
    console.print(render(model, height=30, width=120, title="watch"))
    return console.export_text()


def test_an_isolation_shows_in_the_rows_the_circuits_line_and_the_events() -> None:
    model = WatchModel()
    row = {
        "sessionId": "wm-0",
        "state": "reconnecting",
        "platform": "genesys",
        "attempts": 1,
        "circuit": {"endpoint": "genesys:webmessaging", "state": "closed"},
    }
    model.apply({"type": "snapshot", "bootId": "b", "seq": 1, "sessions": [row]})
    model.apply(
        {
            "type": "event",
            "event": "CIRCUIT_TRANSITION",
            "seq": 2,
            "machineId": "circuit:genesys:webmessaging",
            "from": "closed",
            "to": "isolated",
        }
    )
    model.apply(
        {
            "type": "event",
            "event": "CIRCUIT_MANUAL",
            "seq": 3,
            "timestamp": "2026-12-02T04:00:00.000Z",
            "circuitId": "circuit:genesys:webmessaging",
            "action": "isolate",
            "previous": "closed",
            "state": "isolated",
            "forS": 1800.0,
            "until": "2026-12-02T04:30:00.000Z",
        }
    )
    assert model.rows["wm-0"]["circuit"]["state"] == "isolated"
    assert list(model.events) == [
        "04:00:00 circuit:genesys:webmessaging isolate (by hand): isolated until 04:30:00"
    ]
    text = rendered(model)
    assert "circuits: genesys:webmessaging isolated" in text
    assert "isolate (by hand)" in text
