"""The one place secrets are scrubbed, before anything leaves for the collector.

Every span (name, attributes, events, links, status text) and every metric label goes through
:class:`Scrubber` inside the exporter wrappers below, on the batch worker's thread, just before
the OTLP exporter encodes it (opentelemetry-sdk: ``on_end`` gets an immutable span, so redact
in a wrapping exporter). What it removes, wherever it appears in a string value:

* ``Bearer …`` and ``Basic …`` credentials (an Authorization header's value);
* JWTs (``eyJ…``) and URL userinfo (``https://user:pass@host``);
* OAuth and credential names with their values: ``access_token``, ``refresh_token``,
  ``id_token`` (and their camelCase ``accessToken``, ``refreshToken``, ``idToken``: CXone's
  regional token service answers so), ``client_secret``, ``client_assertion``, ``password``,
  ``guest_token``, ``api_key`` (``access_token=…``, ``"client_secret": "…"`` and the bare names);
* the configured secrets' values (client secrets, passwords, the collector's headers).

Nothing upstream is meant to put a secret in telemetry (the RawError keeps no Authorization
header, spans carry codes and ids, not messages); this is the defence in depth that makes a
slip harmless. The wrappers also count failed exports (``failures``) for status reporting.
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult, MetricsData
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import Link, Status

__all__ = ["REDACTED", "Scrubber", "ScrubbingMetricExporter", "ScrubbingSpanExporter"]

REDACTED = "[REDACTED]"

_SECRETS = re.compile(
    r"(?i:\bbearer\s+\S*)"
    r"|(?i:\bbasic\s+[a-z0-9+/=]{6,})"
    r"|eyJ[\w-]{10,}(?:\.[\w-]*)*"
    r"|(?i:\b(?:(?:access|refresh|id)_?token|client_secret|client_assertion|password|passwd"
    r"|guest_?token|api_?key)\b(?:\s*[\"']?\s*[:=]\s*[\"']?[^\s&\"',;}]*)?)"
)
_USERINFO = re.compile(r"(?<=://)[^/\s:@]+:[^/\s@]+@")
# shorter configured values would redact ordinary words
_MIN_LITERAL = 6
# spans per OTLP request, and the pause between chunks that lets the event loop take the GIL
_CHUNK = 32
_YIELD_S = 0.0005


class Scrubber:
    """Redacts secrets from strings, attribute maps and sequences of strings."""

    __slots__ = ("_literals",)

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        unique = {s for s in secrets if len(s) >= _MIN_LITERAL}
        # longest first, so a secret that contains another is removed whole
        self._literals = tuple(sorted(unique, key=len, reverse=True))

    def text(self, value: str) -> str:
        for literal in self._literals:
            if literal in value:
                value = value.replace(literal, REDACTED)
        value = _SECRETS.sub(REDACTED, value)
        if "://" in value:
            value = _USERINFO.sub("REDACTED:REDACTED@", value)
        return value

    def value(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, tuple | list) and any(isinstance(v, str) for v in value):
            return tuple(self.text(v) if isinstance(v, str) else v for v in value)
        return value

    def attributes(self, attrs: Mapping[str, Any] | None) -> dict[str, Any]:
        if not attrs:
            return {}
        return {self.text(k): self.value(v) for k, v in attrs.items()}

    def span(self, span: ReadableSpan) -> ReadableSpan:
        status = span.status
        if status.description:
            status = Status(status.status_code, self.text(status.description))
        return ReadableSpan(
            name=self.text(span.name),
            context=span.context,
            parent=span.parent,
            resource=span.resource,
            attributes=self.attributes(span.attributes),
            events=[
                Event(self.text(e.name), self.attributes(e.attributes), e.timestamp) for e in span.events
            ],
            links=[Link(link.context, self.attributes(link.attributes)) for link in span.links],
            kind=span.kind,
            status=status,
            start_time=span.start_time,
            end_time=span.end_time,
            instrumentation_scope=span.instrumentation_scope,
        )

    def metrics(self, data: MetricsData) -> MetricsData:
        """Metric labels scrubbed (they are bounded by design; this is the same defence in depth)."""
        resource_metrics = []
        for rm in data.resource_metrics:
            scope_metrics = []
            for sm in rm.scope_metrics:
                metrics = []
                for metric in sm.metrics:
                    # Sum, Gauge and the histograms all hold dataclass points with ``attributes``
                    payload: Any = metric.data
                    points = [
                        dataclasses.replace(p, attributes=self.attributes(p.attributes))
                        for p in payload.data_points
                    ]
                    payload = dataclasses.replace(payload, data_points=points)
                    metrics.append(dataclasses.replace(metric, data=payload))
                scope_metrics.append(dataclasses.replace(sm, metrics=metrics))
            resource_metrics.append(dataclasses.replace(rm, scope_metrics=scope_metrics))
        return dataclasses.replace(data, resource_metrics=resource_metrics)


class ScrubbingSpanExporter(SpanExporter):
    """Scrubs every span, then hands it to the OTLP exporter in small chunks; counts what happened.

    Chunks, with a short sleep between them, because this runs on the batch worker's thread
    and pure-Python work there (scrubbing, protobuf encoding) holds the GIL: the event loop's
    thread, wanting it back, could otherwise wait a whole switch interval (5 ms) each time,
    for the ~50 ms a 512-span batch takes. A failed chunk drops the rest of the batch at once
    (the exporter already retried it within its timeout): a collector that is down costs one
    timeout per batch, not one per chunk.
    """

    def __init__(self, inner: SpanExporter, scrubber: Scrubber, *, chunk: int = _CHUNK) -> None:
        self._inner = inner
        self._scrubber = scrubber
        self._chunk = chunk
        self.failures = 0
        self.exported = 0
        self.dropped = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        size = self._chunk
        for start in range(0, len(spans), size):
            if start:
                time.sleep(_YIELD_S)
            clean = [self._scrubber.span(s) for s in spans[start : start + size]]
            time.sleep(_YIELD_S)
            try:
                result = self._inner.export(clean)
            except Exception:  # an exporter bug must not kill the batch worker
                result = SpanExportResult.FAILURE
            if result is not SpanExportResult.SUCCESS:
                self.failures += 1
                self.dropped += len(spans) - start
                return result
            self.exported += len(clean)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self._inner.force_flush(timeout_millis)


class ScrubbingMetricExporter(MetricExporter):
    """Scrubs metric labels, then hands the data to the OTLP exporter; counts failed exports."""

    def __init__(self, inner: MetricExporter, scrubber: Scrubber) -> None:
        super().__init__(
            preferred_temporality=inner._preferred_temporality,
            preferred_aggregation=inner._preferred_aggregation,
        )
        self._inner = inner
        self._scrubber = scrubber
        self.failures = 0

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        try:
            result = self._inner.export(self._scrubber.metrics(metrics_data), timeout_millis, **kwargs)
        except Exception:  # an exporter bug must not kill the reader's thread
            result = MetricExportResult.FAILURE
        if result is not MetricExportResult.SUCCESS:
            self.failures += 1
        return result

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return self._inner.force_flush(timeout_millis)

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        self._inner.shutdown(timeout_millis=timeout_millis, **kwargs)
