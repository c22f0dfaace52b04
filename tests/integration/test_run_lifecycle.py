"""`session-supervisor run` as a process: telemetry lines, SIGTERM drains with 1001 and exits 0."""

from __future__ import annotations

import signal
from pathlib import Path

import anyio
import pytest

from supervisor.sim.faults import Fault, FaultKind
from supervisor.sim.genesys import GenesysSimulator
from tests.harness.config import Credentials, config_file, genesys_config
from tests.harness.process import Output, spawn
from tests.harness.waits import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.anyio, pytest.mark.genesys_sim(seed=2)]


async def test_sigterm_closes_sessions_with_1001_and_exits_zero(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    config = config_file(tmp_path, genesys_config(genesys_sim.urls, 3), Credentials(genesys="s3cr3t-value"))
    process = await spawn(config, stdin=None)
    lines = Output(process)
    async with anyio.create_task_group() as tg:
        tg.start_soon(lines.pump)
        await wait_until(
            lambda: len([r for r in lines.named("SESSION_TRANSITION") if r["to"] == "active"]) == 3, 20
        )
        process.send_signal(signal.SIGTERM)
        with anyio.fail_after(15):
            code = await process.wait()
    assert code == 0
    assert await lines.stderr() == ""
    assert lines.named("DAEMON_STARTED") and lines.named("DAEMON_STOPPED")
    stopped = [r for r in lines.named("SESSION_TERMINATED") if r["reason"] == "STOPPED"]
    assert sorted(r["sessionId"] for r in stopped) == ["wm-0", "wm-1", "wm-2"]
    # the simulator saw each session leave with 1001 (going away), not an abrupt drop
    await wait_until(lambda: genesys_sim.recorder.events("client_close", code=1001) == 3)
    # every telemetry line is JSON and no secret leaked into any of them
    assert all("s3cr3t" not in line for line in lines.raw)
    # every line is stamped by the bus: one bootId, seq strictly rising from 1 with no gap
    assert len({r["bootId"] for r in lines.records}) == 1
    assert [r["seq"] for r in lines.records] == list(range(1, len(lines.records) + 1))
    # readiness comes once every session is handed over: no session event precedes DAEMON_STARTED
    names = [r["event"] for r in lines.records]
    assert names.index("DAEMON_STARTED") < names.index("DAEMON_STOPPING") < names.index("DAEMON_STOPPED")


async def test_second_signal_forces_the_exit(genesys_sim: GenesysSimulator, tmp_path: Path) -> None:
    """While draining (closes wait on a black-holed server), a second SIGTERM exits at once with 1."""
    # a long grace period: only the second signal can end the drain early
    text = genesys_config(genesys_sim.urls, 2).replace("shutdownGrace = 2.0", "shutdownGrace = 60.0")
    process = await spawn(config_file(tmp_path, text), stdin=None)
    lines = Output(process)
    async with anyio.create_task_group() as tg:
        tg.start_soon(lines.pump)
        await wait_until(
            lambda: len([r for r in lines.named("SESSION_TRANSITION") if r["to"] == "active"]) == 2, 20
        )
        # the server stops answering: a polite 1001 close now waits for a close frame that never comes
        genesys_sim.faults.inject(Fault(kind=FaultKind.BLACKHOLE))
        process.send_signal(signal.SIGTERM)
        await wait_until(lambda: bool(lines.named("DAEMON_STOPPING")), 10)
        process.send_signal(signal.SIGTERM)
        with anyio.fail_after(15):
            code = await process.wait()
    assert code == 1
    assert "Traceback" not in await lines.stderr()
    assert lines.named("DAEMON_FORCED_EXIT") and not lines.named("DAEMON_STOPPED")
    assert "Traceback" not in "\n".join(lines.raw)
