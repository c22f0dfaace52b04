"""A supervisor wired with telemetry, exporting over real OTLP/HTTP to the loopback receiver.

Like :func:`tests.integration.runtime_harness.supervised`, plus: the executor hooks, the bus
sink and the trace-context provider of :class:`supervisor.telemetry.Telemetry`, exporting to an
:class:`~tests.integration.otlp_receiver.OtlpReceiver`. Tests flush the exporter (on a worker
thread, bounded) instead of waiting for the batch delay.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import anyio

from supervisor.bus import EventBus
from supervisor.clock import Clock, SystemClock
from supervisor.config import Config, parse_config
from supervisor.rest.executor import Sleep
from supervisor.runtime.supervisor import Supervisor
from supervisor.runtime.wiring import Wiring
from supervisor.sim.cxone import CxoneSimulator
from supervisor.sim.genesys import GenesysSimulator
from supervisor.telemetry import ExportSettings, Telemetry, shapes_of
from supervisor.telemetry.settings import DEFAULT_SERVICE_NAME
from tests.integration.otlp_receiver import OtlpReceiver
from tests.integration.runtime_harness import Harness, Recorded

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


@dataclass
class Traced:
    harness: Harness
    telemetry: Telemetry
    receiver: OtlpReceiver
    config: Config

    async def flush(self, limit_s: float = 10.0) -> bool:
        return await self.telemetry.flush(limit_s)


@contextlib.asynccontextmanager
async def traced(
    config_text: str,
    tmp: Path,
    receiver: OtlpReceiver,
    *,
    ratio: float = 1.0,
    timeout_s: float = 5.0,
    genesys: GenesysSimulator | None = None,
    cxone: CxoneSimulator | None = None,
    clock: Clock | None = None,
    sleep: Sleep | None = None,
    url: str | None = None,
) -> AsyncIterator[Traced]:
    (tmp / "genesys-secret").write_text(GENESYS_SECRET)
    (tmp / "cxone-secret").write_text(CXONE_SECRET)
    config = parse_config(config_text, "test.toml")
    clock = clock or SystemClock()
    bus = EventBus()
    telemetry = Telemetry(
        settings_for(url or receiver.url, ratio=ratio, timeout_s=timeout_s),
        boot_id=bus.boot_id,
        shapes=shapes_of(config),
        secrets=[GENESYS_SECRET, CXONE_SECRET],
    )
    bus.trace_context = telemetry.trace_context
    recorded = Recorded(clock)
    bus.subscribe(recorded)
    bus.subscribe(telemetry)
    async with (
        Wiring(
            config,
            bus=bus,
            clock=clock,
            rng=random.Random(config.daemon.seed or 0),
            config_dir=tmp,
            environ={},
            sleep=sleep or anyio.sleep,
            hooks=telemetry.hooks,
        ) as wiring,
        anyio.create_task_group() as tg,
    ):
        telemetry.observe(tokens=wiring.tokens, sink_failures=bus)
        sup = Supervisor(wiring)
        await tg.start(sup.serve)
        harness = Harness(sup, recorded, tg, genesys, cxone)
        try:
            yield Traced(harness, telemetry, receiver, config)
        finally:
            await sup.shutdown(2.0)
            await telemetry.close(5.0)
            tg.cancel_scope.cancel()
