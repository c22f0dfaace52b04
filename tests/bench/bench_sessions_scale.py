"""Sessions as data at scale: 1,000 sessions added over the control socket from NDJSON, as an integration
adds them, against a platform that admits ``LIMIT`` handshakes a second (the simulator's admission limit,
counted there). Real daemon processes, real ``ctl`` processes, the Genesys simulator over loopback.

    ./dev bench -k sessions_scale

It takes about 85 s on a loaded 2-core machine: past what the CI steps' 30 minutes leave for one more
heavy suite (.ci/heavy-suites), so it runs with the benchmarks, not in CI.

* they come up paced: the busiest second the platform saw stays within 1.1 x its admission rate;
* they survive a restart of the daemon process (they are the store's, not the file's);
* after an outage past the reconnection horizon every one of them is terminated, and
  ``ctl start --state terminated --yes`` brings all of them back, paced the same way.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from supervisor.api.protocol import Method
from supervisor.sim.faults import Fault, FaultKind
from supervisor.sim.genesys import GenesysSimConfig, GenesysSimulator
from tests.harness.config import daemon_config
from tests.harness.process import CLI, Daemon, running_daemon

pytestmark = [
    pytest.mark.bench,
    pytest.mark.anyio,
    pytest.mark.timeout(240),
    pytest.mark.genesys_sim(GenesysSimConfig(rate_limit=1_000_000), seed=73),
]

ADDED = 1_000
#: handshakes the platform admits per second (the simulator refuses the rest: 429, Retry-After: 1)
LIMIT = 250


@pytest.fixture
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="ss-scale-", dir="/tmp") as d:
        yield Path(d)


async def ctl(
    daemon: Daemon, *args: str, stdin: bytes | None = None
) -> tuple[int, list[dict[str, object]], str]:
    done = await anyio.run_process(
        [*CLI, "ctl", "--socket", str(daemon.control), *args], input=stdin, check=False
    )
    lines = [json.loads(line) for line in done.stdout.decode().splitlines() if line.startswith("{")]
    return done.returncode, lines, done.stderr.decode()


def admit(sim: GenesysSimulator, rate_per_s: float) -> None:
    sim.faults.clear()
    sim.faults.inject(Fault(kind=FaultKind.ADMISSION_LIMIT, params={"rate_per_s": rate_per_s}))


def assert_paced(sim: GenesysSimulator, phase: str) -> None:
    """The busiest second the platform saw, within 1.1 x what it admits (each second in the message)."""
    seconds = sim.recorder.attempts_per_second("webmessaging")
    peak = sim.recorder.peak_attempts_per_second("webmessaging")
    print(
        f"bench_sessions_scale: {phase}: peak {peak} handshakes in one second (limit {LIMIT}, at most {1.1 * LIMIT:g})"
    )
    assert peak <= 1.1 * LIMIT, json.dumps(seconds)


async def all_terminated(daemon: Daemon, n: int, limit_s: float = 60.0) -> None:
    with anyio.fail_after(limit_s):
        while True:
            status = await daemon.acall(Method.STATUS)
            if status["sessions"]["byState"].get("terminated", 0) >= n:
                return
            await anyio.sleep(0.1)  # polling the daemon's state, not waiting for a timer


async def test_a_thousand_sessions_added_come_up_paced_survive_a_restart_and_recover_in_bulk(
    genesys_sim: GenesysSimulator, workdir: Path
) -> None:
    store = workdir / "store.sqlite3"
    config = daemon_config(genesys_sim.urls, workdir, [("wm-0", None)], store=store)
    lines = "".join(json.dumps({"id": f"agent-{i}", "kind": "webmessaging"}) + "\n" for i in range(ADDED))
    admit(genesys_sim, LIMIT)
    async with running_daemon(config) as daemon:
        await daemon.wait_ready(1)
        code, answers, err = await ctl(
            daemon, "sessions", "add", "--from", "-", "--json", stdin=lines.encode()
        )
        assert code == 0, err
        assert len(answers) == ADDED and all(a["added"] for a in answers)
        await daemon.wait_ready(ADDED + 1, limit_s=120)
        assert_paced(genesys_sim, "the adds")
        await daemon.stop()

    async with running_daemon(config) as daemon:
        await daemon.wait_ready(ADDED + 1, limit_s=120)
        rows = (await daemon.acall(Method.LIST_SESSIONS))["sessions"]
        assert sum(1 for r in rows if r["origin"] == "api") == ADDED
        assert_paced(genesys_sim, "the adds and the restart")
        await daemon.stop()

    # a short horizon (the sessions a run starts keep the horizon they started with), and an open door
    config.write_text(config.read_text().replace("horizon = 600.0", "horizon = 1.0"))
    genesys_sim.faults.clear()
    async with running_daemon(config) as daemon:
        await daemon.wait_ready(ADDED + 1, limit_s=120)
        # an outage past the horizon: nobody gets back in, every session ends RETRY_EXHAUSTED
        admit(genesys_sim, 0)
        genesys_sim.faults.inject(Fault(kind=FaultKind.DROP))
        await all_terminated(daemon, ADDED + 1)
        # the platform is back; the horizon too, for the sessions started from now on
        config.write_text(config.read_text().replace("horizon = 1.0", "horizon = 600.0"))
        code, _, err = await ctl(daemon, "reload")
        assert code == 0, err
        admit(genesys_sim, LIMIT)
        genesys_sim.recorder.reset()  # the recovery's own seconds are counted from here
        code, dry, err = await ctl(daemon, "start", "--state", "terminated", "--dry-run", "--json")
        assert code == 0 and len(dry) == ADDED + 1, err
        code, _, err = await ctl(daemon, "start", "--state", "terminated")
        assert code == 2 and "--yes" in err  # more than 100 sessions: confirmed, or nothing is done
        code, started, err = await ctl(daemon, "start", "--state", "terminated", "--yes", "--json")
        assert code == 0, err
        assert len(started) == ADDED + 1 and all(s["reauthenticated"] for s in started)
        await daemon.wait_ready(ADDED + 1, limit_s=120)
        assert_paced(genesys_sim, "start --state terminated")
        await daemon.stop()
