"""Genesys simulator capacity: handshakes per second, 5,000 held sessions, memory per connection (docs/simulators.md).

Run: ``./dev bench tests/bench/bench_sim_genesys.py`` or
``.venv/bin/python tests/bench/bench_sim_genesys.py [--sessions 5000] [--concurrency 100]``.

The simulator runs in its own process (``session-supervisor sim genesys``), as in the storm
benchmark; this process opens the Web Messaging WebSockets with the plain websockets client
(no compression, no pings), then sends ``configureSession`` on each, holds them all, checks
an echo on a sample, and reads the simulator's ``VmRSS`` from ``/proc/<pid>/status`` before
and after, and its CPU use over 3 s of idle holding. Targets (docs/benchmarks.md, "Genesys simulator"): >= 300 handshakes/s accepted and 5,000 concurrent sessions.
The handshake rate is the simulator's own count (``GET /stats`` peak accepted per second)
and the client-side average over the whole ramp.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any

import httpx
import pytest
from websockets.asyncio.client import ClientConnection, connect

ROOT = Path(__file__).resolve().parents[2]
TARGET_SESSIONS = 5000
TARGET_HANDSHAKES_PER_S = 300


def raise_fd_limit(need: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, max(soft, need)) if hard != resource.RLIM_INFINITY else max(soft, need)
    if want > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` (``/proc/<pid>/stat`` fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_simulator(stderr: IO[bytes]) -> tuple[subprocess.Popen[str], dict[str, str]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "supervisor", "sim", "genesys", "--seed", "1"],
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        cwd=ROOT,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        proc.wait(timeout=30)
        proc.stdout.close()
        stderr.seek(0)
        raise RuntimeError("the simulator did not start: " + stderr.read().decode(errors="replace")[-2000:])
    urls: dict[str, str] = json.loads(line)
    return proc, urls


async def run(sessions: int, concurrency: int) -> dict[str, Any]:
    raise_fd_limit(sessions * 2 + 512)
    with tempfile.TemporaryFile() as stderr:
        proc, urls = start_simulator(stderr)
        try:
            return await _measure(proc, urls, sessions, concurrency)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            assert proc.stdout is not None
            proc.stdout.close()


async def _measure(
    proc: subprocess.Popen[str], urls: dict[str, str], sessions: int, concurrency: int
) -> dict[str, Any]:
    await asyncio.sleep(0.5)  # let the interpreter settle before the baseline
    rss_before = rss_kib(proc.pid)
    url = urls["webmessaging"] + "/v1?deploymentId=bench&application=bench"
    gate = asyncio.Semaphore(concurrency)
    conns: list[ClientConnection] = []

    async def open_one() -> None:
        async with gate:
            conns.append(await connect(url, compression=None, ping_interval=None, open_timeout=60))

    t0 = time.perf_counter()
    await asyncio.gather(*(open_one() for _ in range(sessions)))
    ramp_s = time.perf_counter() - t0

    async def configure(i: int, ws: ClientConnection) -> None:
        async with gate:
            frame = {"action": "configureSession", "token": f"bench-{i}", "deploymentId": "bench"}
            await ws.send(json.dumps(frame))
            reply = json.loads(await ws.recv())
            assert reply["code"] == 200, reply

    t1 = time.perf_counter()
    await asyncio.gather(*(configure(i, ws) for i, ws in enumerate(conns)))
    configure_s = time.perf_counter() - t1
    cpu0, wall0 = cpu_seconds(proc.pid), time.perf_counter()
    await asyncio.sleep(3.0)  # hold idle, then measure
    idle_cpu = (cpu_seconds(proc.pid) - cpu0) / (time.perf_counter() - wall0)
    async with httpx.AsyncClient() as http:
        stats = (await http.get(urls["admin"] + "/stats")).json()
    rss_after = rss_kib(proc.pid)
    for ws in conns[:: max(1, sessions // 50)]:  # the held sessions still answer
        await ws.send(json.dumps({"action": "echo", "token": "x", "message": {"type": "Text", "text": "p"}}))
        assert json.loads(await ws.recv())["code"] == 200
    held = stats["connections_open"].get("webmessaging", 0)
    peak = stats["peak_attempts_per_second"]["webmessaging"]["accepted"]
    await asyncio.gather(*(ws.close() for ws in conns), return_exceptions=True)
    return {
        "sessions": sessions,
        "concurrency": concurrency,
        "held": held,
        "refused": stats["attempts_total"]["webmessaging"]["refused"],
        "handshakes_per_s_avg": sessions / ramp_s,
        "handshakes_per_s_peak_server": peak,
        "configure_per_s": sessions / configure_s,
        "rss_before_mib": rss_before / 1024,
        "rss_after_mib": rss_after / 1024,
        "rss_per_conn_kib": (rss_after - rss_before) / sessions,
        "idle_cpu_percent": idle_cpu * 100,
    }


def report(result: dict[str, Any]) -> str:
    cpu = platform.processor() or platform.machine()
    return "\n".join(
        [
            f"machine: {os.cpu_count()} CPUs ({cpu}), CPython {platform.python_version()}, {platform.system()}",
            f"sessions opened and held:         {result['held']} of {result['sessions']} "
            f"(refused {result['refused']})",
            f"handshakes/s, client average:     {result['handshakes_per_s_avg']:.0f}",
            f"handshakes/s, simulator peak:     {result['handshakes_per_s_peak_server']}",
            f"configureSession/s:               {result['configure_per_s']:.0f}",
            f"simulator RSS before/after:       {result['rss_before_mib']:.1f} / {result['rss_after_mib']:.1f} MiB",
            f"simulator RSS per connection:     {result['rss_per_conn_kib']:.1f} KiB",
            f"simulator CPU while holding idle: {result['idle_cpu_percent']:.1f} % of one core",
        ]
    )


@pytest.mark.bench
def test_genesys_simulator_holds_5000_sessions_and_300_handshakes_per_second() -> None:
    result = asyncio.run(run(TARGET_SESSIONS, 100))
    print("\n" + report(result))
    assert result["held"] == TARGET_SESSIONS
    assert result["handshakes_per_s_avg"] >= TARGET_HANDSHAKES_PER_S


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=TARGET_SESSIONS)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--json", action="store_true", help="print the raw figures as JSON")
    args = parser.parse_args()
    result = asyncio.run(run(args.sessions, args.concurrency))
    print(json.dumps(result) if args.json else report(result))


if __name__ == "__main__":
    main()
