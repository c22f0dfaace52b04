"""Acknowledged attribute updates per second, and what an acknowledgement adds (docs/attributes.md).

An update is acknowledged once it is committed to the outbox (WAL). Two measurements, each with
``synchronous=FULL`` (the default: the WAL is synced at every commit, an acknowledgement survives
power loss) and ``NORMAL`` (it survives ``kill -9``, not an OS crash):

* **store**: ``SqliteStore.submit`` alone, 1 and 16 callers at once (group commit: the callers
  whose submissions queue up while a commit syncs share the next one);
* **daemon**: a daemon process, ``SetAttributes`` over its control socket from 1 and 8 clients
  (each a blocking client, as ``ctl`` is), against ``Status`` over the same socket: with the sender
  held (the simulator leaves its first read unanswered) the difference between the two round trips
  is what the acknowledgement adds (validation, the transaction, the sync); then with the sender
  running against the Genesys simulator, as in production (each update read, written, read back).

    .venv/bin/python tests/bench/bench_store.py [--seconds 5]
"""

from __future__ import annotations

import argparse
import logging
import platform
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from supervisor.api.client import Client
from supervisor.api.protocol import Method
from supervisor.sim.faults import Fault, FaultKind
from supervisor.sim.genesys import GenesysSimConfig, GenesysSimulator
from supervisor.store import SqliteStore, Submission
from tests.harness.config import daemon_config
from tests.harness.process import running_daemon

LEVELS = ("full", "normal")


def _percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    p50 = statistics.median(ordered)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    return p50 * 1000.0, p99 * 1000.0


async def store_acks(synchronous: str, callers: int, seconds: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="ss-bench-", dir="/var/tmp") as d:
        store = await SqliteStore.open(Path(d) / "store.sqlite3", synchronous=synchronous)  # type: ignore[arg-type]
        latencies: list[float] = []
        deadline = time.perf_counter() + seconds
        first = store.commits

        async def caller(c: int) -> None:
            n = 0
            while time.perf_counter() < deadline:
                n += 1
                sub = Submission(f"u{c}-{n}", "t", "wm-0", f"conv-{c}", {"survey": f"v{n}"}, frozenset(), 0.0)
                started = time.perf_counter()
                result = await store.submit(sub, 1_000_000)
                latencies.append(time.perf_counter() - started)
                assert result.accepted

        started = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for c in range(callers):
                tg.start_soon(caller, c)
        elapsed = time.perf_counter() - started
        commits = store.commits - first
        await store.aclose()
    p50, p99 = _percentiles(latencies)
    return {
        "what": "store.submit",
        "synchronous": synchronous,
        "callers": callers,
        "acks": len(latencies),
        "perSecond": len(latencies) / elapsed,
        "p50Ms": p50,
        "p99Ms": p99,
        "acksPerCommit": len(latencies) / max(1, commits),
    }


def _clients(path: Path, method: str, clients: int, seconds: float) -> tuple[list[float], float]:
    latencies: list[float] = []
    lock = threading.Lock()
    deadline = time.perf_counter() + seconds

    def client(c: int) -> None:
        with Client(path) as conn:
            n = 0
            while time.perf_counter() < deadline:
                n += 1
                params = None
                if method == Method.SET_ATTRIBUTES:
                    # one attribute per client: queued writes coalesce, the queue never fills
                    params = {"sessionId": f"wm-{c % 3}", "attributes": {f"c{c}": f"v{n}"}}
                started = time.perf_counter()
                conn.call(method, params)
                took = time.perf_counter() - started
                with lock:
                    latencies.append(took)

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return latencies, time.perf_counter() - started


async def _measured(
    control: Path, method: str, what: str, synchronous: str, clients: int, seconds: float
) -> dict[str, Any]:
    latencies, elapsed = await anyio.to_thread.run_sync(_clients, control, method, clients, seconds)
    p50, p99 = _percentiles(latencies)
    return {
        "what": what,
        "synchronous": synchronous,
        "callers": clients,
        "acks": len(latencies),
        "perSecond": len(latencies) / elapsed,
        "p50Ms": p50,
        "p99Ms": p99,
    }


async def daemon_acks(synchronous: str, seconds: float) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    async with GenesysSimulator(GenesysSimConfig(rate_limit=1_000_000_000), seed=3) as sim:
        with tempfile.TemporaryDirectory(prefix="ss-bench-", dir="/tmp") as d:
            workdir = Path(d)
            sessions = [(f"wm-{i}", sim.create_conversation().id) for i in range(3)]
            config = daemon_config(
                sim.urls,
                workdir,
                sessions,
                store=workdir / "store.sqlite3",
                synchronous=synchronous,
                queue_depth=10_000,
            )
            async with running_daemon(config) as daemon:
                await daemon.wait_ready(3)
                for clients in (1, 8):
                    # the sender held in its first read: the round trip is the acknowledgement alone
                    hole = sim.faults.inject(
                        Fault(kind=FaultKind.BLACKHOLE, endpoint="GET /api/v2/conversations/*")
                    )
                    for method, what in (
                        (Method.STATUS, "Status"),
                        (Method.SET_ATTRIBUTES, "SetAttributes, sender held"),
                    ):
                        out.append(
                            await _measured(daemon.control, method, what, synchronous, clients, seconds)
                        )
                    sim.faults.clear(hole.id)
                    out.append(
                        await _measured(
                            daemon.control,
                            Method.SET_ATTRIBUTES,
                            "SetAttributes, sending",
                            synchronous,
                            clients,
                            seconds,
                        )
                    )
                assert await daemon.stop() == 0
    return out


async def measure(seconds: float) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for level in LEVELS:
        for callers in (1, 16):
            rows.append(await store_acks(level, callers, seconds))
    for level in LEVELS:
        rows += await daemon_acks(level, seconds)
    return rows


def report(rows: list[dict[str, Any]]) -> str:
    lines = [
        f"{time.strftime('%Y-%m-%d')}, {platform.machine()}, Python {platform.python_version()}",
        "",
        "| call | synchronous | callers at once | calls | per second | p50, ms | p99, ms | acks per commit |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        per_commit = f"{r['acksPerCommit']:.1f}" if "acksPerCommit" in r else "-"
        lines.append(
            f"| {r['what']} | {r['synchronous'].upper()} | {r['callers']} | {r['acks']} | {r['perSecond']:.0f} "
            f"| {r['p50Ms']:.2f} | {r['p99Ms']:.2f} | {per_commit} |"
        )
    return "\n".join(lines)


@pytest.mark.bench
def test_store_acknowledgements() -> None:
    logging.getLogger("supervisor.sim").setLevel(logging.CRITICAL)
    rows = anyio.run(measure, 5.0, backend="asyncio")
    print(report(rows))
    assert all(r["acks"] > 0 for r in rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args(argv)
    logging.getLogger("supervisor.sim").setLevel(logging.CRITICAL)
    print(report(anyio.run(measure, args.seconds, backend="asyncio")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
