"""A collector that is down, hanging or answering 429 never holds sessions up (docs/telemetry.md).

The daemon exports to the loopback receiver while it misbehaves. Sessions are dropped and must
all come back while the exporter fails or is stuck; the exporter's failures are counted; the
final flush is bounded by the grace left however long the collector hangs. The 429 tests
record what the installed OTLP/HTTP exporter does with Retry-After (docs/telemetry.md).
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from email.utils import formatdate
from pathlib import Path

import anyio
import pytest

from supervisor.bus import EventBus
from supervisor.config import parse_config
from supervisor.events import DaemonStopping
from supervisor.runtime.main import run_daemon
from supervisor.runtime.supervisor import Supervisor
from supervisor.runtime.wiring import Wiring
from supervisor.sim.faults import Fault, FaultKind
from supervisor.sim.genesys import GenesysSimulator
from supervisor.telemetry import Telemetry, shapes_of
from tests.harness.config import genesys_config
from tests.harness.in_process import Harness
from tests.harness.waits import wait_until
from tests.integration.otlp_receiver import OtlpReceiver
from tests.integration.telemetry_harness import settings_for, traced

pytestmark = [pytest.mark.integration, pytest.mark.anyio, pytest.mark.genesys_sim(seed=4)]

N = 6


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    server = OtlpReceiver()
    yield server
    server.stop()


async def storm(h: Harness, sim: GenesysSimulator) -> None:
    """Drop every session (1006) and wait until all are active again, nobody terminated."""
    await h.wait(lambda: h.all_in("active") and len(h.runners) == N)
    before = sum(r.connects for r in h.runners.values())
    sim.faults.inject(Fault(kind=FaultKind.DROP))
    await h.wait(lambda: sum(r.connects for r in h.runners.values()) >= before + N and h.all_in("active"))
    assert h.terminations() == {}


async def test_collector_down_costs_dropped_spans_not_sessions(
    genesys_sim: GenesysSimulator, tmp_path: Path, receiver: OtlpReceiver
) -> None:
    receiver.stop()  # nothing listens on its port now: every export is refused
    config = genesys_config(genesys_sim.urls, N)
    async with traced(config, tmp_path, receiver, timeout_s=1.0) as h:
        await storm(h, genesys_sim)
        # the JSON lines still lead to traces (ids are ours, not the collector's)
        lines = [e for e in h.recorded.named("RETRY_ATTEMPT") if e["kind"] == "reconnect"]
        assert len(lines) == N and all("traceId" in e for e in lines)
        assert await h.flush(limit_s=20.0)
        assert h.telemetry.export_failures >= 1
        assert h.telemetry.pipeline.spans is not None and h.telemetry.pipeline.spans.exported == 0


async def test_a_hanging_collector_holds_nothing_up_and_shutdown_stays_bounded(
    genesys_sim: GenesysSimulator, tmp_path: Path, receiver: OtlpReceiver
) -> None:
    receiver.hang = True
    config = genesys_config(genesys_sim.urls, N)
    # the exporter would wait 30 s for an answer: far past anything the daemon may wait
    async with traced(config, tmp_path, receiver, timeout_s=30.0) as h:
        await h.wait(lambda: h.all_in("active") and len(h.runners) == N)
        async with anyio.create_task_group() as tg:
            # an export goes out and the collector holds it: the exporter thread is stuck on it
            tg.start_soon(h.flush, 40.0)
            await wait_until(lambda: receiver.holding >= 1)
            await storm(h, genesys_sim)
            assert receiver.holding >= 1  # still stuck: the sessions recovered regardless
            with anyio.fail_after(10):
                report = await h.telemetry.close(0.5)
            assert report.flushed is False  # abandoned after its budget, not waited for
            tg.cancel_scope.cancel()
        receiver.release()


async def test_run_daemon_exit_is_bounded_by_the_grace_period_when_the_collector_hangs(
    genesys_sim: GenesysSimulator, tmp_path: Path, receiver: OtlpReceiver
) -> None:
    """The telemetry service's final flush gets what is left of the grace, never more."""
    receiver.hang = True
    (tmp_path / "genesys-secret").write_text("a-secret-value")
    config = parse_config(genesys_config(genesys_sim.urls, 2), "test.toml")
    bus = EventBus()
    telemetry = Telemetry(
        settings_for(receiver.url, timeout_s=30.0), boot_id=bus.boot_id, shapes=shapes_of(config)
    )
    bus.trace_context = telemetry.trace_context
    bus.subscribe(telemetry)
    grace_s = 1.0
    async with Wiring(
        config, bus=bus, rng=random.Random(1), config_dir=tmp_path, environ={}, hooks=telemetry.hooks
    ) as wiring:
        supervisor = Supervisor(wiring)

        async def body() -> None:
            await wait_until(lambda: supervisor.states() == {"active": 2}, 10)
            # make sure an export is out and held before the daemon stops
            await wait_until(lambda: bool(telemetry.sessions.states()), 1)
            async with anyio.create_task_group() as tg:
                tg.start_soon(telemetry.flush, 40.0)
                await wait_until(lambda: receiver.holding >= 1)
                tg.cancel_scope.cancel()

        with anyio.fail_after(15):
            forced = await run_daemon(
                supervisor,
                grace_s=grace_s,
                services=[telemetry.service(grace_s)],
                body=body,
                on_stopping=lambda: bus.publish(DaemonStopping(grace_s)),
            )
    assert forced is False
    assert telemetry.closed is not None
    assert telemetry.closed.flushed is False
    assert telemetry.closed.budget_s <= grace_s
    assert supervisor.states() == {"terminated": 2}
    receiver.release()


@pytest.mark.parametrize("form", ["seconds", "http-date"])
async def test_429_with_retry_after_is_retried_by_the_exporter_after_the_wait(
    genesys_sim: GenesysSimulator, tmp_path: Path, receiver: OtlpReceiver, form: str
) -> None:
    """Measured: opentelemetry-exporter-otlp-proto-http retries a 429 and honours its Retry-After."""
    receiver.refuse = 1
    receiver.retry_after = "1" if form == "seconds" else formatdate(time.time() + 2, usegmt=True)
    async with traced(genesys_config(genesys_sim.urls, N), tmp_path, receiver, timeout_s=10.0) as h:
        await storm(h, genesys_sim)
        assert await h.flush(limit_s=20.0)
        traces = [r for r in receiver.requests if r.path.endswith("/v1/traces")]
        assert [r.answered for r in traces[:2]] == [429, 200]
        assert receiver.named("session.reconnecting")  # the refused batch arrived on the retry
        assert h.telemetry.pipeline.spans is not None and h.telemetry.pipeline.spans.failures == 0


async def test_429_with_a_retry_after_beyond_the_export_timeout_is_given_up_at_once(
    genesys_sim: GenesysSimulator, tmp_path: Path, receiver: OtlpReceiver
) -> None:
    """Measured: a Retry-After longer than the export timeout is not waited for: the batch is dropped."""
    receiver.refuse = 1
    receiver.retry_after = "3600"
    async with traced(genesys_config(genesys_sim.urls, N), tmp_path, receiver, timeout_s=5.0) as h:
        await storm(h, genesys_sim)
        with anyio.fail_after(10):
            assert await h.flush(limit_s=20.0)
        traces = [r for r in receiver.requests if r.path.endswith("/v1/traces")]
        assert traces[0].answered == 429
        assert h.telemetry.pipeline.spans is not None and h.telemetry.pipeline.spans.failures >= 1
