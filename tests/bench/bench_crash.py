"""Crash benchmark (docs/robustness.md, "Fault matrix", row 16): ``kill -9`` at random moments, 200 runs or more.

One daemon process supervises three Web Messaging sessions bound to conversations on the Genesys
simulator (in this process, loopback). Each run drives attribute updates through the control
socket (one script-like client, recording every acknowledgement) and SIGKILLs the daemon after a
random delay (uniform 0 to 1 s: during a submission's commit, a send, an answer, a verification,
or an idle moment), then restarts it on the same store and checks, before the next run:

* the desired sessions came back (all three active again, resuming their guest sessions);
* every acknowledged update so far reached the simulator or is flagged (lost = 0);
* no idempotency key was applied twice and none more often than the ledger counted (duplicated = 0);
* ``PRAGMA integrity_check`` is ok (read beside the running daemon: WAL readers do not block).

The restarted daemon is the next run's victim.

    .venv/bin/python tests/bench/bench_crash.py [--runs 200] [--seed 1] [--synchronous normal|full]
"""

from __future__ import annotations

import argparse
import logging
import platform
import random
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from supervisor.api.protocol import Method
from supervisor.sim.genesys import GenesysSimConfig, GenesysSimulator
from tests.harness.config import daemon_config
from tests.harness.process import kill9, running_daemon
from tests.integration.crash_harness import Driver, duplicates, flagged_keys, integrity_ok, problems

SESSIONS = 3


async def crash_runs(runs: int, seed: int, synchronous: str) -> dict[str, Any]:
    # the simulator logs each request a killed daemon left half-sent: expected here, not news
    logging.getLogger("supervisor.sim").setLevel(logging.CRITICAL)
    rng = random.Random(seed)
    stats: dict[str, Any] = {
        "runs": 0,
        "acknowledged": 0,
        "submitted": 0,
        "lost": 0,
        "duplicated": 0,
        "integrityFailures": 0,
        "desiredBack": 0,
        "killedBySigkill": 0,
        "restartSeconds": [],
        "problems": [],
    }
    async with GenesysSimulator(GenesysSimConfig(rate_limit=1_000_000_000), seed=seed) as sim:
        with tempfile.TemporaryDirectory(prefix="ss-bench-", dir="/tmp") as d:
            workdir = Path(d)
            conversations = [sim.create_conversation().id for _ in range(SESSIONS)]
            sessions = [(f"wm-{i}", c) for i, c in enumerate(conversations)]
            store = workdir / "store.sqlite3"
            config = daemon_config(sim.urls, workdir, sessions, store=store, synchronous=synchronous)
            driver = Driver(sessions)
            victim_cm = running_daemon(config)
            victim = await victim_cm.__aenter__()
            try:
                await victim.wait_ready(SESSIONS)
                for _ in range(runs):
                    delay = rng.uniform(0.0, 1.0)
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(driver.drive, victim, 100_000)
                        await anyio.sleep(delay)  # the random moment of the kill
                        kill9(victim)
                        with anyio.fail_after(30):
                            code = await victim.process.wait()
                    stats["killedBySigkill"] += code == -signal.SIGKILL
                    await victim_cm.__aexit__(None, None, None)
                    started = time.perf_counter()
                    victim_cm = running_daemon(config)
                    victim = await victim_cm.__aenter__()
                    await victim.wait_ready(SESSIONS)
                    stats["restartSeconds"].append(time.perf_counter() - started)
                    rows = (await victim.acall(Method.LIST_SESSIONS))["sessions"]
                    stats["desiredBack"] += sum(r["state"] == "active" for r in rows) == SESSIONS
                    await victim.settled(limit_s=120)
                    flagged = await flagged_keys(victim)
                    lost = problems(driver, sim, flagged)
                    dup = duplicates(sim, store)
                    stats["lost"] = len(lost)
                    stats["duplicated"] = len(dup)
                    stats["problems"] = (lost + dup)[:10]
                    stats["integrityFailures"] += not integrity_ok(store)
                    stats["runs"] += 1
                    if lost or dup:
                        break
                assert await victim.stop() == 0
            finally:
                await victim_cm.__aexit__(None, None, None)
            stats["integrityFailures"] += not integrity_ok(store)
            stats["acknowledged"] = len(driver.acknowledged)
            stats["submitted"] = len(driver.submitted)
            stats["flagged"] = len(flagged)
            stats["simulatorKeys"] = len(sim.recorder.idempotency_keys())
    return stats


def report(stats: dict[str, Any], synchronous: str, seed: int) -> str:
    restarts = sorted(stats["restartSeconds"])
    median = restarts[len(restarts) // 2] if restarts else 0.0
    return "\n".join(
        [
            f"kill -9 at random moments, synchronous={synchronous}, seed {seed}, "
            f"{time.strftime('%Y-%m-%d')}, {platform.machine()} {platform.python_version()}",
            "",
            "| runs | killed by SIGKILL | submitted | acknowledged | lost | duplicated | integrity failures "
            "| desired sessions back | flagged | restart to ready (median) |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            f"| {stats['runs']} | {stats['killedBySigkill']} | {stats['submitted']} | {stats['acknowledged']} "
            f"| {stats['lost']} | {stats['duplicated']} | {stats['integrityFailures']} | {stats['desiredBack']} "
            f"| {stats['flagged']} | {median:.2f} s |",
            *(f"problem: {p}" for p in stats["problems"]),
        ]
    )


@pytest.mark.bench
def test_crash_at_random_moments() -> None:
    stats = anyio.run(crash_runs, 200, 1, "normal", backend="asyncio")
    print(report(stats, "normal", 1))
    assert stats["runs"] == 200 and stats["lost"] == 0 and stats["duplicated"] == 0
    assert stats["integrityFailures"] == 0 and stats["desiredBack"] == 200


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--synchronous", choices=("normal", "full"), default="normal")
    args = parser.parse_args(argv)
    stats = anyio.run(crash_runs, args.runs, args.seed, args.synchronous, backend="asyncio")
    print(report(stats, args.synchronous, args.seed))
    clean = stats["lost"] == 0 and stats["duplicated"] == 0 and stats["integrityFailures"] == 0
    return 0 if clean and stats["runs"] == args.runs else 1


if __name__ == "__main__":
    raise SystemExit(main())
