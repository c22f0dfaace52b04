"""OpenTelemetry traces and metrics, exported over OTLP/HTTP to a collector (docs/telemetry.md).

Off unless configured (supervisor/telemetry/settings.py). When on, :class:`Telemetry` is wired
into the daemon at four points and nowhere else (docs/architecture.md: nothing calls a
tracer from business code):

* ``hooks``: executor hooks, given to ``Wiring(..., hooks=...)``: operation and attempt spans;
* the bus sink (``bus.subscribe(telemetry)``): session segments, circuit periods, metrics;
* ``trace_context``: the bus's provider of ``traceId``/``spanId`` for the JSON lines;
* ``service(grace_s)``: a ``run_daemon`` service whose end flushes, bounded by the grace left.

Floor 6 (docs/runtime.md): it implements the REST layer's hooks and the bus's sinks; only the
runtime's entry points (the CLI, the demo) import it.

**The SDK is imported only when telemetry is on.** This package imports the settings alone
(standard library); the names that need the OpenTelemetry SDK (:class:`Telemetry` and its kin,
``daemon.py``) load on first use, and only after :func:`~supervisor.telemetry.environment.check_sdk_reads`
passed: the SDK reads ``OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT`` when it is imported and raised on a value it
refuses, even with telemetry off. With telemetry off, ``run`` never gets that far.
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING, Any

from supervisor.telemetry.settings import ExportSettings, resolve_settings

if TYPE_CHECKING:
    from supervisor.telemetry.daemon import Telemetry, configured_secrets, shapes_of
    from supervisor.telemetry.export import CloseReport
    from supervisor.telemetry.spans import SessionShape

__all__ = [
    "CloseReport",
    "ExportSettings",
    "SessionShape",
    "Telemetry",
    "configured_secrets",
    "resolve_settings",
    "shapes_of",
]

# the names whose modules import the OpenTelemetry SDK: loaded on first use (module docstring)
_WITH_THE_SDK = {
    "Telemetry": "supervisor.telemetry.daemon",
    "configured_secrets": "supervisor.telemetry.daemon",
    "shapes_of": "supervisor.telemetry.daemon",
    "CloseReport": "supervisor.telemetry.export",
    "SessionShape": "supervisor.telemetry.spans",
}


def __getattr__(name: str) -> Any:
    module = _WITH_THE_SDK.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from supervisor.telemetry.environment import check_sdk_reads

    check_sdk_reads(os.environ)  # before the SDK's import reads them (a ConfigError names the variable)
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
