"""``watch`` shows an operator's hand on a circuit (docs/runtime.md, "Manual circuit control"):
the session rows follow the circuit into ``isolated`` and back, and CIRCUIT_MANUAL is a notable event."""

from __future__ import annotations

import random

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


def test_the_circuit_state_gauge_has_an_isolated_state() -> None:
    """metrics: session_supervisor.circuit.state is 1 for ``isolated`` while an operator holds the
    endpoint (the telemetry's circuit tracker follows CIRCUIT_TRANSITION into it and back)."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from supervisor.events import CircuitTransition
    from supervisor.telemetry import attributes as A
    from supervisor.telemetry.circuits import CircuitTracker
    from supervisor.telemetry.metrics import Metrics
    from supervisor.telemetry.sampling import IdSource
    from supervisor.vocabulary import CircuitState

    emitted: list[object] = []

    class Spans:  # the period spans, kept (an isolation's span is emitted when it ends)
        def span(self, *args: object, **kwargs: object) -> object:
            return args

        def emit(self, spans: list[object]) -> None:
            emitted.extend(spans)

    tracker = CircuitTracker(Spans(), IdSource(random.Random(1)))  # type: ignore[arg-type]
    reader = InMemoryMetricReader()
    Metrics(
        MeterProvider(metric_readers=[reader]).get_meter("test"),
        sessions=dict,
        circuits=lambda: tracker.states,
        segment_attempt=lambda sid: 0,
    )

    def gauge() -> dict[str, int]:
        data = reader.get_metrics_data()
        assert data is not None
        out: dict[str, int] = {}
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == A.M_CIRCUIT_STATE:
                        for p in metric.data.data_points:  # type: ignore[union-attr]
                            out[str(p.attributes[A.CIRCUIT_STATE])] = int(p.value)  # type: ignore[index]
        return out

    circuit = "circuit:genesys:api"
    tracker.transition(
        CircuitTransition(circuit, CircuitState.CLOSED, CircuitState.ISOLATED, "isolate", "MANUAL", "t")
    )
    assert gauge() == {"closed": 0, "open": 0, "half_open": 0, "isolated": 1}
    assert emitted == []  # the isolation's period is still going
    tracker.transition(
        CircuitTransition(circuit, CircuitState.ISOLATED, CircuitState.CLOSED, "close", "MANUAL", "t")
    )
    assert gauge() == {"closed": 1, "open": 0, "half_open": 0, "isolated": 0}
    assert len(emitted) == 1  # its span, now that it ended
