"""A daemon wired with telemetry, exporting over real OTLP/HTTP to the loopback receiver.

The in-process daemon of :mod:`tests.harness.in_process`, plus: the executor hooks, the bus
sink and the trace-context provider of :class:`supervisor.telemetry.Telemetry`, exporting to an
:class:`~tests.integration.otlp_receiver.OtlpReceiver`. Tests flush the exporter (on a worker
thread, bounded: :meth:`~tests.harness.in_process.Harness.flush`) instead of waiting for the batch
delay.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from supervisor.clock import Clock
from supervisor.rest.executor import Sleep
from supervisor.telemetry import ExportSettings
from supervisor.telemetry.settings import DEFAULT_SERVICE_NAME
from tests.harness.config import Credentials
from tests.harness.in_process import Harness, TelemetryExport, supervised
from tests.integration.otlp_receiver import OtlpReceiver

GENESYS_SECRET = "genesys-client-secret-value-7f3a"
CXONE_SECRET = "cxone-client-secret-value-91bc"
COLLECTOR_TOKEN = "collector-api-key-5d2e9a"


def settings_for(
    url: str, *, ratio: float = 1.0, timeout_s: float = 5.0, headers: dict[str, str] | None = None
) -> ExportSettings:
    return ExportSettings(
        traces_endpoint=f"{url}/v1/traces",
        metrics_endpoint=f"{url}/v1/metrics",
        sample_ratio=ratio,
        service_name=DEFAULT_SERVICE_NAME,
        headers=headers if headers is not None else {"x-api-key": COLLECTOR_TOKEN},
        export_timeout_s=timeout_s,
        # metrics leave on flush only: the reader's own period never fires during a test
        metric_interval_s=3600.0,
    )


@contextlib.asynccontextmanager
async def traced(
    config_text: str,
    tmp: Path,
    receiver: OtlpReceiver,
    *,
    ratio: float = 1.0,
    timeout_s: float = 5.0,
    clock: Clock | None = None,
    sleep: Sleep | None = None,
    url: str | None = None,
) -> AsyncIterator[Harness]:
    """The in-process daemon with telemetry exporting to ``receiver`` (or ``url``), its credential
    files holding the secrets the leak tests look for."""
    export = TelemetryExport(
        settings_for(url or receiver.url, ratio=ratio, timeout_s=timeout_s), [GENESYS_SECRET, CXONE_SECRET]
    )
    credentials = Credentials(genesys=GENESYS_SECRET, cxone=CXONE_SECRET, cxone_password=None)
    async with supervised(
        config_text, tmp, clock=clock, sleep=sleep, credentials=credentials, telemetry=export
    ) as harness:
        yield harness
