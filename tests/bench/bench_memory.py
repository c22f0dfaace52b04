"""Daemon memory per supervised session at 1,000 and 5,000 sessions (docs/architecture.md, "Targets": <= 80 KiB),
and the daemon's idle CPU with those sessions' keepalives running (docs/architecture.md, "Targets": <= 10 % of one core).

Each size runs in a fresh child process (so one size's heap does not flatter the other):
the child starts the Genesys simulator in its own subprocess, imports everything, measures
its RSS, supervises N Web Messaging sessions (one WebSocket each, keepalives on, as
configured by default) until all are active, collects garbage and measures RSS again.
Memory per session = RSS delta / N, all-in: session machine, runner, transport, WebSocket
connection and buffers, and the shared clients amortised. Then, with nothing happening but
keepalives (WebSocket pings every 15 s, Web Messaging ``echo`` every 30 s), the daemon's CPU
time over IDLE_WINDOW_S seconds, as a percentage of one core.

    .venv/bin/python tests/bench/bench_memory.py [--sizes 1000 5000]
    .venv/bin/python -m pytest tests/bench/bench_memory.py -m bench -o addopts="" -p no:cacheprovider
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from supervisor.bus import EventBus
from tests.bench.runtime_harness import (
    REPO,
    SimProcess,
    raise_nofile,
    rss_bytes,
    running_supervisor,
    table,
    wait_for,
    webmessaging_config,
)

TARGET_KIB = 80.0
TARGET_IDLE_CPU_PERCENT = 10.0
IDLE_WINDOW_S = 60.0  # four ping periods and two echo periods
SIZES = (1000, 5000)


async def measure(sessions: int, seed: int = 1) -> dict[str, float]:
    importlib.import_module("supervisor.transports.webmessaging")  # imported before the baseline
    with SimProcess(seed=seed) as sim:
        config = webmessaging_config(sim.urls, sessions, seed=seed)
        gc.collect()
        before = rss_bytes()
        async with running_supervisor(config, bus=EventBus(), seed=seed) as supervisor:
            ok = await wait_for(lambda: supervisor.states() == {"active": sessions}, 180.0, poll_s=0.2)
            if not ok:
                raise RuntimeError(f"not all sessions became active: {supervisor.states()}")
            await anyio.sleep(1.0)  # let handshake buffers settle before measuring
            gc.collect()
            after = rss_bytes()
            cpu0 = time.process_time()
            await anyio.sleep(IDLE_WINDOW_S)  # the measurement window itself, not a wait for a timer
            idle_cpu = (time.process_time() - cpu0) / IDLE_WINDOW_S * 100.0
            still_active = supervisor.states() == {"active": sessions}
    return {
        "sessions": sessions,
        "rss_before_mib": before / 2**20,
        "rss_after_mib": after / 2**20,
        "kib_per_session": (after - before) / sessions / 1024,
        "idle_cpu_percent": idle_cpu,
        "still_active": 1.0 if still_active else 0.0,
    }


def one_size(sessions: int) -> dict[str, float]:
    """Measure ``sessions`` in a fresh interpreter."""
    out = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--one", str(sessions)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        cwd=REPO,
    )
    if out.returncode != 0:
        raise RuntimeError(f"measuring {sessions} sessions failed: {out.stderr.strip()[-800:]}")
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def report(results: list[dict[str, float]]) -> str:
    rows = [
        [
            f"{int(r['sessions']):,}",
            f"{r['rss_before_mib']:.1f}",
            f"{r['rss_after_mib']:.1f}",
            f"{r['kib_per_session']:.1f}",
            f"{r['idle_cpu_percent']:.1f}",
            "yes" if r["still_active"] else "no",
        ]
        for r in results
    ]
    return (
        "daemon memory per supervised Web Messaging session (RSS delta / N), and idle CPU\n"
        + table(
            [
                "sessions",
                "RSS before, MiB",
                "RSS all active, MiB",
                "KiB/session",
                f"idle CPU over {IDLE_WINDOW_S:.0f} s, % of one core",
                "all still active",
            ],
            rows,
        )
        + f"\ntargets: <= {TARGET_KIB:.0f} KiB/session, idle CPU <= {TARGET_IDLE_CPU_PERCENT:.0f} %"
    )


def met(results: list[dict[str, float]]) -> bool:
    return all(
        r["kib_per_session"] <= TARGET_KIB
        and r["idle_cpu_percent"] <= TARGET_IDLE_CPU_PERCENT
        and r["still_active"]
        for r in results
    )


@pytest.mark.bench
def test_memory_per_session() -> None:
    results = [one_size(n) for n in SIZES]
    print(report(results))
    assert met(results)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="daemon memory per session")
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one is not None:
        raise_nofile(2 * args.one + 1024)
        print(json.dumps(anyio.run(measure, args.one, backend="asyncio")))
        return 0
    raise_nofile(2 * max(args.sizes) + 1024)
    results = [one_size(n) for n in args.sizes]
    print(report(results))
    return 0 if met(results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
