"""`session-supervisor run` as a process: telemetry lines, SIGTERM drains with 1001 and exits 0."""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import Process
from anyio.streams.text import TextReceiveStream

from supervisor.sim.faults import Fault, FaultKind
from supervisor.sim.genesys import GenesysSimulator
from tests.integration.conftest import wait_until
from tests.integration.runtime_harness import genesys_config

pytestmark = [pytest.mark.integration, pytest.mark.anyio]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def sim() -> AsyncIterator[GenesysSimulator]:
    async with GenesysSimulator(seed=2) as simulator:
        yield simulator


class Lines:
    """JSON lines read from a process's stdout as they arrive."""

    def __init__(self, process: Process) -> None:
        self.process = process
        self.records: list[dict[str, Any]] = []
        self.raw: list[str] = []

    async def pump(self) -> None:
        assert self.process.stdout is not None
        buffer = ""
        async for chunk in TextReceiveStream(self.process.stdout):
            buffer += chunk
            *lines, buffer = buffer.split("\n")
            for line in lines:
                self.raw.append(line)
                self.records.append(json.loads(line))

    async def stderr(self) -> str:
        assert self.process.stderr is not None
        chunks = [chunk async for chunk in TextReceiveStream(self.process.stderr)]
        return "".join(chunks)

    def named(self, event: str) -> list[dict[str, Any]]:
        return [r for r in self.records if r.get("event") == event]


async def start_daemon(config: Path) -> Process:
    return await anyio.open_process(
        [sys.executable, "-m", "supervisor", "run", "--config", str(config)],
        stdin=None,
    )


async def test_sigterm_closes_sessions_with_1001_and_exits_zero(
    sim: GenesysSimulator, tmp_path: Path
) -> None:
    config = tmp_path / "supervisor.toml"
    config.write_text(genesys_config(sim.urls, 3))
    (tmp_path / "genesys-secret").write_text("s3cr3t-value")
    process = await start_daemon(config)
    lines = Lines(process)
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
    await wait_until(lambda: sim.recorder.events("client_close", code=1001) == 3)
    # every telemetry line is JSON and no secret leaked into any of them
    assert all("s3cr3t" not in line for line in lines.raw)
    # every line is stamped by the bus: one bootId, seq strictly rising from 1 with no gap
    assert len({r["bootId"] for r in lines.records}) == 1
    assert [r["seq"] for r in lines.records] == list(range(1, len(lines.records) + 1))
    # readiness comes once every session is handed over: no session event precedes DAEMON_STARTED
    names = [r["event"] for r in lines.records]
    assert names.index("DAEMON_STARTED") < names.index("DAEMON_STOPPING") < names.index("DAEMON_STOPPED")


async def test_second_signal_forces_the_exit(sim: GenesysSimulator, tmp_path: Path) -> None:
    """While draining (closes wait on a black-holed server), a second SIGTERM exits at once with 1."""
    config = tmp_path / "supervisor.toml"
    # a long grace period: only the second signal can end the drain early
    config.write_text(genesys_config(sim.urls, 2).replace("shutdownGrace = 2.0", "shutdownGrace = 60.0"))
    (tmp_path / "genesys-secret").write_text("x")
    process = await start_daemon(config)
    lines = Lines(process)
    async with anyio.create_task_group() as tg:
        tg.start_soon(lines.pump)
        await wait_until(
            lambda: len([r for r in lines.named("SESSION_TRANSITION") if r["to"] == "active"]) == 2, 20
        )
        # the server stops answering: a polite 1001 close now waits for a close frame that never comes
        sim.faults.inject(Fault(kind=FaultKind.BLACKHOLE))
        process.send_signal(signal.SIGTERM)
        await wait_until(lambda: bool(lines.named("DAEMON_STOPPING")), 10)
        process.send_signal(signal.SIGTERM)
        with anyio.fail_after(15):
            code = await process.wait()
    assert code == 1
    assert "Traceback" not in await lines.stderr()
    assert lines.named("DAEMON_FORCED_EXIT") and not lines.named("DAEMON_STOPPED")
    assert "Traceback" not in "\n".join(lines.raw)
