"""The Prometheus endpoint's two candidates, measured (docs/telemetry.md, "Prometheus"): scrape cost, memory, install size.

* ``exporter``: ``opentelemetry-exporter-prometheus``'s ``PrometheusMetricReader`` (what the daemon uses), over
  ``prometheus-client``;
* ``own``: ``prometheus-client`` behind a pull reader of our own, the smallest one that serves our instruments
  (counters and gauges; this file's ``OwnReader``: what we would have to keep).

Both on one ``MeterProvider`` holding the daemon's real instruments (supervisor/telemetry/metrics.py) after a
storm-sized set of events: ``--series`` reconnection series and as many retry series, 20 circuits, token counts.
A scrape is ``prometheus_client.generate_latest`` (what the HTTP handler runs): best-of-5 median over
``--scrapes`` scrapes, in µs. Memory: the resident set after importing each candidate and building it, in a
fresh interpreter, against the SDK alone. Install size: the files each distribution installed (its RECORD).

    .venv/bin/python tests/bench/bench_prometheus.py [--scrapes 500] [--series 60]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import statistics
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


class OwnReader:
    """The alternative: a pull reader over prometheus-client of our own (counters and gauges only)."""

    def __init__(self) -> None:
        from opentelemetry.sdk.metrics.export import MetricReader

        class Reader(MetricReader):
            def __init__(self) -> None:
                super().__init__()
                self.data: Any = None

            def _receive_metrics(
                self, metrics_data: Any, timeout_millis: float = 10_000, **kwargs: Any
            ) -> None:
                self.data = metrics_data

            def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
                pass

        self.reader = Reader()

    def collect(self) -> Iterator[Any]:
        from opentelemetry.sdk.metrics.export import Sum
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        self.reader.collect()
        data = self.reader.data
        if data is None:
            return
        for rm in data.resource_metrics:
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    name = metric.name.replace(".", "_")
                    points = list(metric.data.data_points)
                    keys = sorted({k for p in points for k in p.attributes})
                    labels = [k.replace(".", "_") for k in keys]
                    family: Any
                    if isinstance(metric.data, Sum) and metric.data.is_monotonic:
                        family = CounterMetricFamily(name, metric.description or "", labels=labels)
                    else:
                        family = GaugeMetricFamily(name, metric.description or "", labels=labels)
                    for p in points:
                        family.add_metric([str(p.attributes.get(k, "")) for k in keys], p.value)
                    yield family


def _provider(kind: str, series: int) -> tuple[Any, Any]:
    """A MeterProvider with the daemon's instruments after a storm; the registry a scrape reads."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.resources import Resource
    from prometheus_client import CollectorRegistry

    from supervisor.events import RetryAttempt, RetryKind
    from supervisor.telemetry.metrics import Metrics
    from supervisor.vocabulary import CircuitState, SessionState

    registry = CollectorRegistry(auto_describe=False)
    if kind == "exporter":
        from opentelemetry.exporter.prometheus import PrometheusMetricReader

        reader: Any = PrometheusMetricReader(registry=registry)
    else:
        own = OwnReader()
        reader = own.reader
        registry.register(own)  # type: ignore[arg-type]
    provider = MeterProvider(resource=Resource({"service.name": "bench"}), metric_readers=[reader])
    circuits = {f"circuit:{i}": CircuitState.CLOSED for i in range(20)}
    metrics = Metrics(
        provider.get_meter("bench"),
        sessions=lambda: dict.fromkeys(SessionState, 100),
        circuits=lambda: circuits,
        segment_attempt=lambda _: 0,
    )
    for i in range(series):
        for kind_ in (RetryKind.RECONNECT, RetryKind.OPERATION):
            metrics.event(RetryAttempt(f"s{i}", kind_, 1, 0.5, f"CODE_{i}", "policy", "t", "op"))
    return provider, registry


def scrape_us(kind: str, scrapes: int, series: int) -> float:
    from prometheus_client import generate_latest

    provider, registry = _provider(kind, series)
    generate_latest(registry)
    rounds = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(scrapes):
            generate_latest(registry)
        rounds.append((time.perf_counter() - start) / scrapes * 1e6)
    provider.shutdown()
    return statistics.median(rounds)


_RSS = textwrap.dedent(
    """
    import resource, sys
    sys.path.insert(0, {root!r})
    import opentelemetry.sdk.metrics
    kind = {kind!r}
    if kind != "sdk":
        from tests.bench.bench_prometheus import _provider
        _provider(kind, 60)
    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    """
)


def rss_kib(kind: str) -> int:
    root = str(Path(__file__).resolve().parents[2])
    out = subprocess.run(
        [sys.executable, "-c", _RSS.format(root=root, kind=kind)], capture_output=True, text=True, check=True
    )
    return int(out.stdout.split()[-1])


def installed_kib(distribution: str) -> float:
    files: Iterable[Any] = importlib.metadata.distribution(distribution).files or ()
    return sum((f.size or 0) for f in files) / 1024


def measure(scrapes: int, series: int) -> list[str]:
    sdk = rss_kib("sdk")
    lines = [f"scrapes {scrapes} x 5, {series} series per counter, 20 circuits"]
    for kind in ("exporter", "own"):
        lines.append(
            f"{kind:9s} scrape {scrape_us(kind, scrapes, series):8.1f} us   RSS over the SDK alone "
            f"{rss_kib(kind) - sdk:6d} KiB"
        )
    for dist in ("prometheus-client", "opentelemetry-exporter-prometheus"):
        lines.append(f"installed {dist}: {installed_kib(dist):.0f} KiB")
    return lines


@pytest.mark.bench
def test_prometheus_candidates() -> None:
    for line in measure(200, 60):
        print(line)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scrapes", type=int, default=500)
    parser.add_argument("--series", type=int, default=60)
    args = parser.parse_args()
    for line in measure(args.scrapes, args.series):
        print(line)
