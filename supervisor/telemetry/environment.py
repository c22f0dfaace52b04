"""The OTEL_* variables the OpenTelemetry SDK reads, read and checked before it does.

The SDK (opentelemetry-sdk and the OTLP/HTTP exporter, 1.45.2) reads the process environment in
the constructors of the objects the daemon builds, and one value at import time; a value it refuses
was a traceback at start-up (``OTEL_BSP_MAX_QUEUE_SIZE=-1``: ``ValueError: max_queue_size must be a
positive integer``), even with ``run --check``, and one it merely dislikes was a logged traceback or
a silently used default. So, before any of it is built:

* :func:`read_sdk_settings` reads every value the constructors would read, with the SDK's own
  rules, and the pipeline hands them over explicitly (the SDK then reads none of them):

  ================================================  ==============================================
  ``OTEL_BSP_MAX_QUEUE_SIZE``                       ``BatchSpanProcessor``: an integer >= 1
  ``OTEL_BSP_SCHEDULE_DELAY``                       an integer >= 1 (ms)
  ``OTEL_BSP_MAX_EXPORT_BATCH_SIZE``                an integer >= 1, at most the queue's size
  ``OTEL_BSP_EXPORT_TIMEOUT``                       an integer >= 0 (ms)
  ``OTEL_METRIC_EXPORT_INTERVAL``                   ``PeriodicExportingMetricReader``: a finite
                                                    number > 0 (ms)
  ``OTEL_METRIC_EXPORT_TIMEOUT``                    a finite number >= 0 (ms)
  ``OTEL_EXPORTER_OTLP_[TRACES_|METRICS_]TIMEOUT``  the exporters: a finite number > 0 (seconds, as
                                                    this exporter reads it)
  ``OTEL_EXPORTER_OTLP_[TRACES_|METRICS_]COMPRESSION``  ``none``, ``gzip`` or ``deflate``
  ``OTEL_METRICS_EXEMPLAR_FILTER``                  ``MeterProvider``: ``trace_based``,
                                                    ``always_on`` or ``always_off``
  ================================================  ==============================================

* :func:`check_sdk_reads` checks what the SDK reads from the process environment whatever it is
  handed: ``OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT`` (read when ``opentelemetry.sdk.trace`` is imported:
  ``unset`` or an integer >= 0), ``OTEL_PYTHON_CONTEXT`` (when ``opentelemetry.context`` is: an
  installed context), and the exporters' credential providers, refused like the headers variables
  (collector credentials come from ``telemetry.headersFile``).

Each refusal is a :class:`ConfigError` naming the variable and its value (cut short), for ``run``,
``run --check`` and ``demo --otlp`` alike. With telemetry off nothing here is read, and the SDK is not
imported at all (``supervisor/telemetry/__init__.py``). Standard library only, like the settings.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

from supervisor.errors import ConfigError

__all__ = ["SdkSettings", "check_sdk_reads", "read_sdk_settings"]

T = TypeVar("T")

#: our batch queue (docs/telemetry.md: room for a 1,000-session storm); the SDK's default is 2,048
DEFAULT_QUEUE = 8192
_COMPRESSIONS = ("none", "gzip", "deflate")
_EXEMPLAR_FILTERS = ("trace_based", "always_on", "always_off")
_CREDENTIAL_PROVIDERS = (
    "OTEL_PYTHON_EXPORTER_OTLP_HTTP_CREDENTIAL_PROVIDER",
    "OTEL_PYTHON_EXPORTER_OTLP_HTTP_TRACES_CREDENTIAL_PROVIDER",
    "OTEL_PYTHON_EXPORTER_OTLP_HTTP_METRICS_CREDENTIAL_PROVIDER",
)


@dataclass(frozen=True, slots=True)
class SdkSettings:
    """What the SDK's constructors would have read from the environment (defaults: the SDK's)."""

    max_queue_size: int = DEFAULT_QUEUE
    schedule_delay_ms: int = 5000
    max_export_batch_size: int = 512
    bsp_export_timeout_ms: int = 30000
    metric_interval_ms: float = 60000.0
    metric_timeout_ms: float = 30000.0
    traces_timeout_s: float = 10.0
    metrics_timeout_s: float = 10.0
    traces_compression: str = "none"
    metrics_compression: str = "none"
    exemplar_filter: str = "trace_based"


def read_sdk_settings(environ: Mapping[str, str]) -> SdkSettings:
    """The SDK's settings from ``environ``; raises ConfigError naming a variable the SDK would refuse."""
    queue = _integer(environ, "OTEL_BSP_MAX_QUEUE_SIZE", minimum=1, what="spans the batch queue holds")
    batch = _integer(environ, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", minimum=1, what="spans per export")
    max_queue = DEFAULT_QUEUE if queue is None else queue
    if batch is not None and batch > max_queue:
        raise ConfigError(
            f"OTEL_BSP_MAX_EXPORT_BATCH_SIZE={batch}: more than the batch queue holds "
            f"(OTEL_BSP_MAX_QUEUE_SIZE, {max_queue})"
        )
    defaults = SdkSettings()
    delay = _integer(environ, "OTEL_BSP_SCHEDULE_DELAY", minimum=1, what="milliseconds")
    bsp_timeout = _integer(environ, "OTEL_BSP_EXPORT_TIMEOUT", minimum=0, what="milliseconds")
    interval = _number(environ, "OTEL_METRIC_EXPORT_INTERVAL", positive=True, what="milliseconds")
    metric_timeout = _number(environ, "OTEL_METRIC_EXPORT_TIMEOUT", positive=False, what="milliseconds")
    shared_timeout = _number(environ, "OTEL_EXPORTER_OTLP_TIMEOUT", positive=True, what="seconds")
    traces_timeout = _number(environ, "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", positive=True, what="seconds")
    metrics_timeout = _number(environ, "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT", positive=True, what="seconds")
    shared_compression = _choice(environ, "OTEL_EXPORTER_OTLP_COMPRESSION", _COMPRESSIONS)
    traces_compression = _choice(environ, "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", _COMPRESSIONS)
    metrics_compression = _choice(environ, "OTEL_EXPORTER_OTLP_METRICS_COMPRESSION", _COMPRESSIONS)
    exemplars = _choice(environ, "OTEL_METRICS_EXEMPLAR_FILTER", _EXEMPLAR_FILTERS, fold=False)
    return SdkSettings(
        max_queue_size=max_queue,
        schedule_delay_ms=_first(delay, defaults.schedule_delay_ms),
        # the SDK's default batch (512) never exceeds a smaller queue set alone: it would refuse both
        max_export_batch_size=_first(batch, min(defaults.max_export_batch_size, max_queue)),
        bsp_export_timeout_ms=_first(bsp_timeout, defaults.bsp_export_timeout_ms),
        metric_interval_ms=_first(interval, defaults.metric_interval_ms),
        metric_timeout_ms=_first(metric_timeout, defaults.metric_timeout_ms),
        # a signal's own variable first, then the shared one (the exporter's order)
        traces_timeout_s=_first(traces_timeout, shared_timeout, defaults.traces_timeout_s),
        metrics_timeout_s=_first(metrics_timeout, shared_timeout, defaults.metrics_timeout_s),
        traces_compression=_first(traces_compression, shared_compression, defaults.traces_compression),
        metrics_compression=_first(metrics_compression, shared_compression, defaults.metrics_compression),
        exemplar_filter=_first(exemplars, defaults.exemplar_filter),
    )


def check_sdk_reads(environ: Mapping[str, str]) -> None:
    """What the SDK reads from the process environment whatever it is handed; raises ConfigError."""
    limit = environ.get("OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT")
    if limit is not None and limit.strip().lower() != "unset":
        _integer(environ, "OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", minimum=0, what="attributes per span, or unset")
    for name in _CREDENTIAL_PROVIDERS:
        if environ.get(name):
            raise ConfigError(
                f"{name} is set: collector credentials come from telemetry.headersFile "
                "(a credential file), never from a provider named in the environment"
            )
    context = environ.get("OTEL_PYTHON_CONTEXT")
    if context:
        from importlib.metadata import entry_points

        known = sorted(point.name for point in entry_points(group="opentelemetry_context"))
        if context not in known:
            raise ConfigError(f"OTEL_PYTHON_CONTEXT={_shown(context)}: expected one of {', '.join(known)}")


# -- one variable ---------------------------------------------------------------------------------------


def _shown(value: str) -> str:
    return repr(value) if len(value) <= 32 else f"{value[:32]!r}... ({len(value)} characters)"


def _first(*values: T | None) -> T:
    return next(v for v in values if v is not None)


def _integer(environ: Mapping[str, str], name: str, *, minimum: int, what: str) -> int | None:
    """The SDK reads these with ``int()``; ASCII digits here (``int('²')`` fails, 400 digits is no size)."""
    raw = environ.get(name)
    if raw is None or not raw.strip():
        return None
    text = raw.strip()
    value = int(text) if 0 < len(text) <= 12 and all("0" <= c <= "9" for c in text) else None
    if value is None or value < minimum:
        bound = "a positive integer" if minimum == 1 else "an integer >= 0"
        raise ConfigError(f"{name}={_shown(raw)}: expected {bound} ({what})")
    return value


def _number(environ: Mapping[str, str], name: str, *, positive: bool, what: str) -> float | None:
    """The SDK reads these with ``float()``: a finite number here (``nan`` never compares, ``inf`` never fires)."""
    raw = environ.get(name)
    if raw is None or not raw.strip():
        return None
    try:
        value = float(raw.strip()) if raw.strip().isascii() else math.nan
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        bound = "a number > 0" if positive else "a number >= 0"
        raise ConfigError(f"{name}={_shown(raw)}: expected {bound} ({what})")
    return value


def _choice(
    environ: Mapping[str, str], name: str, choices: tuple[str, ...], *, fold: bool = True
) -> str | None:
    raw = environ.get(name)
    if raw is None or not raw.strip():
        return None
    value = raw.strip().lower() if fold else raw
    if value not in choices:
        raise ConfigError(f"{name}={_shown(raw)}: expected {', '.join(choices)}")
    return value
