"""The export pipeline: OTLP/HTTP exporters behind our scrubbers, a batch processor, a metric reader.

Nothing here runs on the event loop but ``on_end`` (a deque append) and metric ``add`` calls:
encoding, scrubbing and HTTP happen on the SDK's worker threads (the batch processor's and the
periodic reader's). A collector that is down, refusing, answering 429 or hanging therefore
costs dropped spans (the batch queue is bounded and drops when full), never a blocked session.

Shutdown is bounded: :meth:`ExportPipeline.close` runs the final flush on a daemon thread of
its own and waits for it at most ``budget_s`` (what is left of the drain's grace period); a
flush still stuck on a hanging collector after that is abandoned, and a daemon thread does not
hold the process's exit. The SDK's own ``force_flush`` ignores its timeout (it exports on the
calling thread until done), which is why it never runs on the event loop.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import anyio
import anyio.from_thread
import anyio.lowlevel
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.metrics import Meter, NoOpMeterProvider
from opentelemetry.sdk.metrics import (
    AlwaysOffExemplarFilter,
    AlwaysOnExemplarFilter,
    ExemplarFilter,
    MeterProvider,
    TraceBasedExemplarFilter,
)
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from supervisor.errors import ConfigError
from supervisor.telemetry.scrub import Scrubber, ScrubbingMetricExporter, ScrubbingSpanExporter
from supervisor.telemetry.settings import ExportSettings

if TYPE_CHECKING:
    from supervisor.telemetry.prometheus import PrometheusEndpoint

__all__ = ["CloseReport", "ExportPipeline"]

# the OTLP exporters' own loggers: during an outage they warn on every retry of every batch
_EXPORTER_LOGGERS = (
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "opentelemetry.exporter.otlp.proto.http.metric_exporter",
)

# OTEL_METRICS_EXEMPLAR_FILTER's values, as the SDK's MeterProvider maps them
_EXEMPLAR_FILTERS: dict[str, Callable[[], ExemplarFilter]] = {
    "trace_based": TraceBasedExemplarFilter,
    "always_on": AlwaysOnExemplarFilter,
    "always_off": AlwaysOffExemplarFilter,
}


class _OncePerMinute(logging.Filter):
    """Lets one record per logger and level through per minute: an outage is said, not shouted
    (stderr is the journal; the count of failed exports is a metric)."""

    def __init__(self) -> None:
        super().__init__()
        self._last: dict[tuple[str, int], float] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, record.levelno)
        now = time.monotonic()
        last = self._last.get(key)
        if last is not None and now - last < 60.0:
            return False
        self._last[key] = now
        return True


def _quiet_exporter_logs() -> None:
    for name in _EXPORTER_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _OncePerMinute) for f in logger.filters):
            logger.addFilter(_OncePerMinute())


@dataclass(frozen=True, slots=True)
class CloseReport:
    """How the final flush went: within its budget or abandoned (the collector did not answer)."""

    flushed: bool
    budget_s: float


class ExportPipeline:
    """Exporters, processor and reader for one daemon; :meth:`close` exactly once at the end."""

    def __init__(self, settings: ExportSettings, resource: Resource, scrubber: Scrubber) -> None:
        """Raises ConfigError when the SDK refuses what it is given (its ValueError, at the boundary)."""
        _quiet_exporter_logs()
        try:
            self._build(settings, resource, scrubber)
        except (ValueError, TypeError, RuntimeError) as exc:
            # environment.py checks every value the SDK reads first; this is the net for what a later
            # SDK version might read or refuse (its messages name the variable or the argument)
            raise ConfigError(f"telemetry: the OpenTelemetry SDK refused its settings: {exc}") from None
        self._closed = False

    def _build(self, settings: ExportSettings, resource: Resource, scrubber: Scrubber) -> None:
        # every value the SDK's constructors would read from OTEL_* is handed over explicitly
        # (settings.sdk, read and checked by environment.py), so they read none of them; their own
        # metrics go to no provider (OTEL_PYTHON_METER_PROVIDER is not looked up)
        sdk = settings.sdk
        headers = dict(settings.headers)
        quiet = NoOpMeterProvider()
        self.spans: ScrubbingSpanExporter | None = None
        self.processor: SpanProcessor = SpanProcessor()  # the base class does nothing
        if settings.traces_endpoint is not None:
            self.spans = ScrubbingSpanExporter(
                OTLPSpanExporter(
                    endpoint=settings.traces_endpoint,
                    headers=headers,
                    timeout=_first(settings.export_timeout_s, sdk.traces_timeout_s),
                    compression=Compression(sdk.traces_compression),
                    meter_provider=quiet,
                ),
                scrubber,
            )
            self.processor = BatchSpanProcessor(
                self.spans,
                max_queue_size=sdk.max_queue_size,
                schedule_delay_millis=sdk.schedule_delay_ms,
                max_export_batch_size=sdk.max_export_batch_size,
                export_timeout_millis=sdk.bsp_export_timeout_ms,
                meter_provider=quiet,
            )
        self.metrics: ScrubbingMetricExporter | None = None
        self._reader: PeriodicExportingMetricReader | None = None
        self._meter_provider: MeterProvider | None = None
        readers: list[MetricReader] = []
        if settings.metrics_endpoint is not None:
            self.metrics = ScrubbingMetricExporter(
                OTLPMetricExporter(
                    endpoint=settings.metrics_endpoint,
                    headers=headers,
                    timeout=_first(settings.export_timeout_s, sdk.metrics_timeout_s),
                    compression=Compression(sdk.metrics_compression),
                    meter_provider=quiet,
                ),
                scrubber,
            )
            interval_ms = (
                sdk.metric_interval_ms
                if settings.metric_interval_s is None
                else settings.metric_interval_s * 1000.0
            )
            self._reader = PeriodicExportingMetricReader(
                self.metrics, export_interval_millis=interval_ms, export_timeout_millis=sdk.metric_timeout_ms
            )
            readers.append(self._reader)
        self.prometheus: PrometheusEndpoint | None = None
        if settings.prometheus is not None:
            # the scrape endpoint's pull reader, on the same provider (imported only when configured)
            from supervisor.telemetry.prometheus import PrometheusEndpoint

            self.prometheus = PrometheusEndpoint(settings.prometheus)
            readers.append(self.prometheus.reader)
        if readers:
            # no atexit hook: the SDK's would join the reader for up to 30 s at interpreter exit
            self._meter_provider = MeterProvider(
                resource=resource,
                metric_readers=readers,
                shutdown_on_exit=False,
                exemplar_filter=_EXEMPLAR_FILTERS[sdk.exemplar_filter](),
            )

    def meter(self, name: str, version: str, schema_url: str | None = None) -> Meter:
        if self._meter_provider is None:
            return NoOpMeterProvider().get_meter(name, version, schema_url)
        return self._meter_provider.get_meter(name, version, schema_url)

    @property
    def export_failures(self) -> int:
        spans = 0 if self.spans is None else self.spans.failures
        return spans + (0 if self.metrics is None else self.metrics.failures)

    # -- blocking: worker threads only ----------------------------------------------------------------
    def force_flush(self) -> bool:
        """Export everything queued now (blocks on the collector: never call it on the event loop)."""
        ok = self.processor.force_flush()
        if self._meter_provider is not None:
            ok = self._meter_provider.force_flush() and ok
        return ok

    def _flush_and_shutdown(self) -> None:
        try:
            self.force_flush()
        finally:
            self.processor.shutdown()
            if self._meter_provider is not None:
                self._meter_provider.shutdown()

    # -- from the event loop ----------------------------------------------------------------------------
    async def flush(self, limit_s: float) -> bool:
        """Flush on a daemon thread; True when it finished within ``limit_s`` (tests, status)."""
        return await _bounded(self.force_flush, limit_s, "otel-flush")

    async def close(self, budget_s: float) -> CloseReport:
        """Final flush and shutdown, waiting at most ``budget_s`` (even when cancelled); never raises."""
        if self._closed:
            return CloseReport(True, budget_s)
        self._closed = True
        flushed = False
        # shielded: it runs while the daemon's task group is being cancelled; its own limit bounds it
        with anyio.CancelScope(shield=True):
            flushed = await _bounded(self._flush_and_shutdown, budget_s, "otel-shutdown")
        if not flushed:
            self._abandon()
        return CloseReport(flushed, budget_s)

    def _abandon(self) -> None:
        """The budget ran out (a hanging or refusing collector): stop the exporters' retry loops.

        An OTLP exporter retries with jittered backoff until its own deadline; shut down, it stops
        at the next wait instead of retrying on a thread nobody waits for (and the processor's and
        reader's threads, whose shutdown waited on that export, end with it). Non-blocking: it sets
        the exporter's shutdown event and closes its HTTP session.
        """
        for exporter in (self.spans, self.metrics):
            if exporter is not None:
                with contextlib.suppress(Exception):
                    exporter.shutdown()


async def _bounded(work: Callable[[], object], limit_s: float, name: str) -> bool:
    """Run ``work`` on a daemon thread; wait for it at most ``limit_s`` without blocking the loop.

    The thread tells the loop it is done (``from_thread``); no worker thread sits waiting, and a
    cancelled caller stops waiting at once. A thread stuck on a hanging collector is left to
    itself: a daemon thread never holds the process's exit.
    """
    done = anyio.Event()
    token = anyio.lowlevel.current_token()

    def run() -> None:
        # a flush that fails has nothing left to do (the failure counts say so); a loop that is
        # gone (RuntimeError) has nobody waiting any more
        try:
            with contextlib.suppress(Exception):
                work()
        finally:
            with contextlib.suppress(RuntimeError):
                anyio.from_thread.run_sync(done.set, token=token)

    threading.Thread(target=run, name=name, daemon=True).start()
    with anyio.move_on_after(max(limit_s, 0.0)):
        await done.wait()
    return done.is_set()


def _first(value: float | None, otherwise: float) -> float:
    return otherwise if value is None else value
