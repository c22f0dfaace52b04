"""The socket API's metrics (docs/telemetry.md): subscribers, lagged notices and lagged disconnects.

Read through an in-memory reader of the OpenTelemetry SDK, as the exporter's reader reads them.
"""

from __future__ import annotations

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from supervisor.events import PacingChanged
from supervisor.telemetry import attributes as A
from supervisor.telemetry.metrics import Metrics
from supervisor.vocabulary import EndpointId, Platform


def points(reader: InMemoryMetricReader) -> dict[str, list[int]]:
    data = reader.get_metrics_data()
    assert data is not None
    out: dict[str, list[int]] = {}
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                out[metric.name] = [int(p.value) for p in metric.data.data_points]  # type: ignore[union-attr]
    return out


def test_subscriber_counts_are_read_when_the_api_is_there_and_absent_when_not() -> None:
    reader = InMemoryMetricReader()
    metrics = Metrics(
        MeterProvider(metric_readers=[reader]).get_meter("test"),
        sessions=dict,
        circuits=dict,
        segment_attempt=lambda sid: 0,
    )
    # no socket API (off, or the demo without sockets): nothing is reported, not a zero
    before = points(reader)
    assert not before.get(A.M_SUBSCRIBERS) and not before.get(A.M_LAGGED_NOTICES)
    live = {"subscribers": 3, "lagged": 7, "disconnected": 1}
    metrics.count("subscribers", lambda: live["subscribers"])
    metrics.count("lagged", lambda: live["lagged"])
    metrics.count("lag_disconnects", lambda: live["disconnected"])
    after = points(reader)
    assert after[A.M_SUBSCRIBERS] == [3]
    assert after[A.M_LAGGED_NOTICES] == [7]
    assert after[A.M_LAGGED_DISCONNECTS] == [1]
    live.update(subscribers=1, lagged=9)
    again = points(reader)
    assert (again[A.M_SUBSCRIBERS], again[A.M_LAGGED_NOTICES]) == ([1], [9])


def test_pacing_rates_and_changes_follow_pacing_changed() -> None:
    reader = InMemoryMetricReader()
    metrics = Metrics(
        MeterProvider(metric_readers=[reader]).get_meter("test"),
        sessions=dict,
        circuits=dict,
        segment_attempt=lambda sid: 0,
    )
    assert not points(reader).get(A.M_PACING_RATE)
    at = "2026-12-01T00:00:00.000Z"
    metrics.event(
        PacingChanged(
            EndpointId(Platform.GENESYS, "webmessaging"), "connect", 14.0, 20.0, "throttled", 1.0, at
        )
    )
    metrics.event(PacingChanged(EndpointId(Platform.GENESYS, "api"), "rest", None, None, "pause", 7.0, at))
    assert points(reader)[A.M_PACING_RATE] == [14]  # the unpaced REST endpoint reports no rate
    metrics.event(
        PacingChanged(EndpointId(Platform.GENESYS, "webmessaging"), "connect", 28.0, 14.0, "probe", 0.0, at)
    )
    after = points(reader)
    assert after[A.M_PACING_RATE] == [28] and sorted(after[A.M_PACING_CHANGES]) == [1, 1, 1]


def test_shadow_divergences_are_counted_by_both_codes_every_one() -> None:
    """``[taxonomy] shadow``: the metric reads every divergence, not only the (per-minute) events."""
    reader = InMemoryMetricReader()
    metrics = Metrics(
        MeterProvider(metric_readers=[reader]).get_meter("test"),
        sessions=dict,
        circuits=dict,
        segment_attempt=lambda sid: 0,
    )
    assert not points(reader).get(A.M_SHADOW_DIVERGENCES)  # no shadow: nothing, not a zero
    totals = {("RATE_LIMITED", "THROTTLED"): 7}
    metrics.observe_shadow(lambda: totals)
    assert points(reader)[A.M_SHADOW_DIVERGENCES] == [7]
    totals[("QUEUE_FULL", "THROTTLED")] = 1
    totals[("RATE_LIMITED", "THROTTLED")] = 9
    assert sorted(points(reader)[A.M_SHADOW_DIVERGENCES]) == [1, 9]
