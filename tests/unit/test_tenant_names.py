"""A named tenant's session says whose it is wherever a session is named: its event lines, its spans,
``watch``'s table, the token metrics' ``credential``; the default tenant's stay exactly as they were."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from supervisor.boundary import SessionContext
from supervisor.cli.watch_view import WatchModel, render
from supervisor.clock import FakeClock
from supervisor.events import Correlation
from supervisor.rest.tokens import TokenCache
from supervisor.taxonomy import Channel
from supervisor.telemetry import attributes as A
from supervisor.telemetry.spans import correlate
from supervisor.vocabulary import Platform, TenantScope


def test_a_named_tenants_correlation_carries_the_tenant_and_the_default_tenants_is_as_it_was() -> None:
    default = SessionContext("wm-0", Platform.GENESYS, Channel.WEBMESSAGING, agent_id="a")
    named = SessionContext("wm-1", Platform.GENESYS, Channel.WEBMESSAGING, agent_id="a", tenant="east")
    assert default.correlation().fields() == {"sessionId": "wm-0", "agentId": "a"}
    assert named.correlation().fields() == {"sessionId": "wm-1", "agentId": "a", "tenant": "east"}
    assert (default.scope, named.scope) == (Platform.GENESYS, TenantScope("east", Platform.GENESYS))
    spans: dict[str, Any] = {}
    correlate(spans, named.correlation())
    assert spans[A.TENANT] == "east"
    plain: dict[str, Any] = {}
    correlate(plain, default.correlation())
    assert A.TENANT not in plain


def test_watch_shows_a_named_tenants_sessions_by_tenant_and_platform() -> None:
    model = WatchModel()
    rows = [
        {"sessionId": "wm-0", "state": "active", "platform": "genesys", "attempts": 0},
        {"sessionId": "wm-1", "state": "active", "platform": "genesys", "attempts": 0, "tenant": "emea-west"},
    ]
    model.apply({"type": "snapshot", "bootId": "b", "seq": 1, "sessions": rows})
    console = Console(width=120, record=True)
    console.print(render(model, height=30, width=120, title="watch"))
    lines = console.export_text().splitlines()
    assert any("wm-1" in line and "emea-west/genesys" in line for line in lines)
    assert any("wm-0" in line and "genesys" in line and "/genesys" not in line for line in lines)


def test_the_token_metrics_name_a_named_tenants_credential_by_its_scope() -> None:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from supervisor.telemetry.metrics import Metrics

    class Source:
        async def fetch(self, refresh: object) -> Any:
            raise AssertionError("not fetched")

    clock = FakeClock()
    reader = InMemoryMetricReader()
    metrics = Metrics(
        MeterProvider(metric_readers=[reader]).get_meter("test"),
        sessions=dict,
        circuits=dict,
        segment_attempt=lambda sid: 0,
    )
    metrics.observe_tokens(
        {
            Platform.GENESYS: TokenCache(Source(), clock, platform=Platform.GENESYS),
            TenantScope("east", Platform.GENESYS): TokenCache(
                Source(), clock, platform=Platform.GENESYS, tenant="east"
            ),
        }
    )
    data = reader.get_metrics_data()
    assert data is not None
    labels = {
        point.attributes[A.CREDENTIAL]
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == A.M_TOKEN_FETCHES
        for point in metric.data.data_points
        if point.attributes is not None
    }
    assert labels == {"genesys", "east/genesys"}


def test_a_named_tenants_session_counts_carry_the_tenant_label_and_the_default_tenants_none() -> None:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from supervisor.events import RetryAttempt, RetryKind
    from supervisor.telemetry.metrics import Metrics

    reader = InMemoryMetricReader()
    metrics = Metrics(
        MeterProvider(metric_readers=[reader]).get_meter("test"),
        sessions=dict,
        circuits=dict,
        segment_attempt=lambda sid: 0,
    )
    at = "2026-12-02T07:00:00.000Z"
    for session, tenant in (("wm-0", None), ("wm-1", "east")):
        attempt = RetryAttempt(session, RetryKind.RECONNECT, 1, 2.5, "ABNORMAL_CLOSURE", "network", at)
        metrics.event(attempt, Correlation(session, tenant=tenant))
    data = reader.get_metrics_data()
    assert data is not None
    series = [
        dict(point.attributes or {})
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == A.M_RECONNECT_ATTEMPTS
        for point in metric.data.data_points
    ]
    assert sorted(s.get(A.TENANT, "") for s in series) == ["", "east"]
