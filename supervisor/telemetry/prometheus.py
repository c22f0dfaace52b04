"""The Prometheus scrape endpoint (``[telemetry] prometheus``): the daemon's metrics, pulled.

A pull reader on the daemon's one ``MeterProvider``, beside the OTLP push reader when both are on:
``PrometheusMetricReader`` of ``opentelemetry-exporter-prometheus`` (the ``[prometheus]`` extra, pinned
to the SDK's paired version; why this one and not a reader of our own over ``prometheus-client``:
docs/telemetry.md, "Prometheus"). It turns the instruments into Prometheus' names (dots to
underscores, ``_total`` on counters, the unit as a suffix where it is one) and the resource into
``target_info``; ``prometheus-client``'s HTTP server serves them on a thread of its own.

A scrape runs the instruments' callbacks (gauges, token counts) on that thread, as the OTLP reader
runs them on its worker thread: the event loop never waits for a scrape. The endpoint is a binding of
the lifecycle (supervisor/runtime/main.py): bound before any session starts, so a port another process
holds ends the start with one line, and closed when the lifecycle ends.

Imported only when the endpoint is configured, after the settings checked that the extra is installed
(supervisor/telemetry/settings.py: ``check_prometheus_extra``).
"""

from __future__ import annotations

import threading
from typing import Any

from opentelemetry.exporter.prometheus import PrometheusMetricReader
from prometheus_client import (
    CollectorRegistry,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
    start_http_server,
)

from supervisor.errors import ConfigError

__all__ = ["PrometheusEndpoint"]


class PrometheusEndpoint:
    """The pull reader, and the HTTP server that serves what it reads (``/metrics``, any path)."""

    def __init__(self, address: tuple[str, int]) -> None:
        self.address = address
        # a registry of this endpoint's own (not prometheus-client's global one: two daemons in one
        # process, as tests make them, never serve each other's series), with the process's own
        # collectors beside the reader's: process_*, python_gc_*, python_info
        self.registry = CollectorRegistry()
        for collector in (ProcessCollector, GCCollector, PlatformCollector):
            collector(registry=self.registry)
        self.reader = PrometheusMetricReader(registry=self.registry)
        self._server: Any = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The port it listens on (once bound)."""
        if self._server is None:
            return self.address[1]
        return int(self._server.server_address[1])

    def bind(self) -> None:
        """Listen now; a ConfigError naming the address when the port cannot be had."""
        if self._server is not None:
            return
        host, port = self.address
        try:
            self._server, self._thread = start_http_server(port, addr=host, registry=self.registry)
        except OSError as exc:
            raise ConfigError(
                f"telemetry.prometheus: cannot listen on {_hostport(host, port)}: {exc.strerror or exc}"
            ) from None

    def close(self) -> None:
        """Stop serving (idempotent); a scrape in progress finishes on its own thread."""
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join(2.0)


def _hostport(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
