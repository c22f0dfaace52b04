"""5,000 sessions added in one ``ctl sessions add --from -`` run (docs/benchmarks.md, "Sessions added at run time").

A real daemon process with a store, the Genesys simulator in this process over loopback (no admission
limit: the daemon's own pacing from ``initialRate``), one ``ctl`` process reading 5,000 NDJSON lines.
Printed: the ``ctl`` run's wall time (its AddSession calls and entries per second), the time from the
``ctl`` run's start to every session active, and the daemon's CPU time (user + system, from /proc) over
that span.

    ./dev bench -k sessions_add
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from supervisor.api.control_sessions import MAX_SESSIONS_PER_CALL
from supervisor.sim.genesys import GenesysSimConfig, GenesysSimulator
from tests.harness.config import daemon_config
from tests.harness.process import CLI, running_daemon

pytestmark = [
    pytest.mark.bench,
    pytest.mark.anyio,
    pytest.mark.timeout(600),
    pytest.mark.genesys_sim(GenesysSimConfig(rate_limit=1_000_000), seed=75),
]

ADDED = 5_000


@pytest.fixture
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="ss-badd-", dir="/tmp") as d:
        yield Path(d)


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far (/proc/PID/stat fields 14 and 15, in clock ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def test_five_thousand_sessions_added_in_one_run(genesys_sim: GenesysSimulator, workdir: Path) -> None:
    config = daemon_config(genesys_sim.urls, workdir, [("wm-0", None)], store=workdir / "store.sqlite3")
    lines = "".join(json.dumps({"id": f"agent-{i}", "kind": "webmessaging"}) + "\n" for i in range(ADDED))
    async with running_daemon(config) as daemon:
        await daemon.wait_ready(1)
        pid = daemon.process.pid
        cpu0, t0 = cpu_seconds(pid), time.monotonic()
        done = await anyio.run_process(
            [*CLI, "ctl", "--socket", str(daemon.control), "sessions", "add", "--from", "-"],
            input=lines.encode(),
            check=False,
        )
        added_s = time.monotonic() - t0
        assert done.returncode == 0, done.stderr.decode()
        await daemon.wait_ready(ADDED + 1, limit_s=400)
        active_s = time.monotonic() - t0
        cpu = cpu_seconds(pid) - cpu0
        calls = -(-ADDED // MAX_SESSIONS_PER_CALL)
        print(
            f"\n{ADDED} sessions: ctl sessions add --from - {added_s:.2f} s ({calls} AddSession calls, "
            f"{calls / added_s:.1f} calls/s, {ADDED / added_s:.0f} entries/s); all active after {active_s:.1f} s; "
            f"daemon CPU {cpu:.1f} s over that span"
        )
        await daemon.stop(limit_s=120)
