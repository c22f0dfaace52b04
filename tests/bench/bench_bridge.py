"""WebSocket bridge benchmark (docs/bridge.md): N bridge clients of N agents, p99 delivery latency and bridge CPU.

Three processes, as deployed:

* this one, the daemon side: the real bus, state board, hub and subscribe socket (``SocketApi``) with N
  sessions ``s-i`` of agents ``a-i``, fed by a publisher that puts one ``SessionTransition`` on the bus every
  1/``--rate`` s, the sessions in rotation. No session runs: the transitions are synthetic (as in
  bench_socket_fanout.py), so what is measured is the socket API, the bridge and the clients' reads;
* the bridge: the ``session-supervisor bridge`` command, one subscriber of that socket, with a tokens file
  of N tokens, token i scoped to agent ``a-i``;
* the clients (``--clients``): one asyncio loop with N ``websockets`` connections, client i authenticated
  with token i (``Authorization: Bearer``). Each delta carries the publisher's ``time.monotonic()`` in its
  ``reason`` (CLOCK_MONOTONIC is one clock for all processes): the client process measures publish ->
  receive latency itself, and checks each client got its own agent's session only.

Reported: delivered deltas, latency p50/p99/max, the bridge's CPU (``/proc/PID/stat``, user + system)
over the measured phase, per delivery and as a share of one core, and the client process's CPU (it must
keep up for the latencies to mean anything).

    .venv/bin/python tests/bench/bench_bridge.py [--clients 1000] [--rate 1000] [--seconds 30]
    ./dev bench -k bench_bridge
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from supervisor.bus import EventBus
from supervisor.config import SocketsConfig, parse_config
from supervisor.events import Correlation, SessionTransition
from supervisor.runtime.assembly import socket_api
from supervisor.runtime.supervisor import Supervisor
from supervisor.runtime.wiring import Wiring
from supervisor.vocabulary import SessionState

CYCLE = (SessionState.ACTIVE, SessionState.RECONNECTING, SessionState.CONNECTING)
CONFIG = """
[platforms.genesys]
loginUrl = "http://127.0.0.1:9"
apiUrl = "http://127.0.0.1:9"
webmessagingUrl = "ws://127.0.0.1:9"
deploymentId = "dep"
"""
P99_TARGET_MS = 50.0


def token(i: int) -> str:
    return f"bench-token-{i:05d}"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def _more_files() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 65536)), hard))


# -- the clients process ------------------------------------------------------------------------------


async def clients(url: str, n: int) -> None:
    from websockets.asyncio.client import connect

    latencies: list[float] = []
    foreign = 0
    measuring = False
    connections = []
    for i in range(n):
        ws = await connect(url, additional_headers={"Authorization": f"Bearer {token(i)}"}, max_size=None)
        connections.append(ws)

    async def read(i: int, ws: Any) -> None:
        nonlocal foreign
        async for message in ws:
            record = json.loads(message)
            if record.get("type") != "delta":
                continue
            if record["sessionId"] != f"s-{i}":
                foreign += 1
            if measuring and record["reason"].startswith("bench "):
                latencies.append((time.monotonic() - float(record["reason"][6:])) * 1000.0)

    readers = [asyncio.ensure_future(read(i, ws)) for i, ws in enumerate(connections)]
    loop = asyncio.get_running_loop()
    stdin = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)
    print("ready", flush=True)
    cpu0 = time.process_time()
    while True:
        command = (await stdin.readline()).decode().strip()
        if command == "measure":
            measuring = True
            cpu0 = time.process_time()
            print("measuring", flush=True)
        elif command in ("done", ""):
            break
    measuring = False
    cpu = time.process_time() - cpu0
    for task in readers:
        task.cancel()
    print(
        json.dumps(
            {
                "n": len(latencies),
                "p50": percentile(latencies, 0.5),
                "p99": percentile(latencies, 0.99),
                "max": max(latencies, default=float("nan")),
                "foreign": foreign,
                "clientCpuS": cpu,
            }
        ),
        flush=True,
    )


# -- the daemon side ------------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def publish_for(bus: EventBus, n: int, seconds: float, rate: int, start: int) -> int:
    period = 1.0 / rate
    begin = time.monotonic()
    count = 0
    i = start
    while time.monotonic() - begin < seconds:
        due = begin + count * period
        now = time.monotonic()
        if due > now:
            await anyio.sleep(due - now)
        session = f"s-{i % n}"
        step = (i // n) % len(CYCLE)
        source, target = CYCLE[step], CYCLE[(step + 1) % len(CYCLE)]
        bus.publish(
            SessionTransition(
                session, source, target, "bench", f"bench {time.monotonic():.6f}", "2026-01-01T00:00:00.000Z"
            ),
            Correlation(session, agent_id=f"a-{i % n}"),
        )
        count += 1
        i += 1
    return count


async def _lines(stream: Any) -> Any:
    buffer = b""
    async for chunk in stream:
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            yield line.decode()


async def daemon(n: int, rate: int, seconds: float) -> dict[str, Any]:
    _more_files()  # the bridge and the clients inherit it: each holds N sockets
    with tempfile.TemporaryDirectory(prefix="ss-bench-", dir="/tmp") as d:
        paths = (Path(d) / "s.sock", Path(d) / "c.sock")
        tokens = Path(d) / "tokens"
        tokens.write_text(
            "".join(
                json.dumps({"sha256": hashlib.sha256(token(i).encode()).hexdigest(), "agents": [f"a-{i}"]})
                + "\n"
                for i in range(n)
            )
        )
        config = parse_config(CONFIG, "bench.toml")
        async with Wiring(config, bus=EventBus(), environ={}) as wiring:
            supervisor = Supervisor(wiring)
            api = socket_api(supervisor, SocketsConfig(), environ={}, paths=paths)
            async with anyio.create_task_group() as tg:
                await tg.start(api.serve)
                for i in range(n):  # every session (and its agent) on the board before the bridge subscribes
                    wiring.bus.publish(
                        SessionTransition(
                            f"s-{i}",
                            SessionState.CONNECTING,
                            SessionState.ACTIVE,
                            "bench",
                            "warm",
                            "2026-01-01T00:00:00.000Z",
                        ),
                        Correlation(f"s-{i}", agent_id=f"a-{i}"),
                    )
                bridge = await anyio.open_process(
                    [
                        sys.executable,
                        "-m",
                        "supervisor",
                        "bridge",
                        "--socket",
                        str(paths[0]),
                        "--tokens",
                        str(tokens),
                        "--listen",
                        "127.0.0.1:0",
                        "--max-connections",
                        str(n + 16),
                    ],
                    stdout=subprocess.PIPE,
                    stderr=None,
                )
                assert bridge.stdout is not None
                out = _lines(bridge.stdout)
                url = ""
                while not url:
                    record = json.loads(await out.__anext__())
                    if record["event"] == "BRIDGE_LISTENING":
                        url = record["url"]
                proc = await anyio.open_process(
                    [sys.executable, __file__, "--client-process", url, str(n)],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=None,
                )
                assert proc.stdin is not None and proc.stdout is not None
                lines = _lines(proc.stdout)
                with anyio.fail_after(300):
                    assert await lines.__anext__() == "ready"
                # a short warm-up, unmeasured
                start = await publish_for(wiring.bus, n, min(2.0, seconds), rate, 0)
                await proc.stdin.send(b"measure\n")
                assert await lines.__anext__() == "measuring"
                cpu0 = cpu_seconds(bridge.pid)
                begin = time.monotonic()
                published = await publish_for(wiring.bus, n, seconds, rate, start)
                await anyio.sleep(0.5)  # the last deltas in flight
                wall = time.monotonic() - begin
                bridge_cpu = cpu_seconds(bridge.pid) - cpu0
                await proc.stdin.send(b"done\n")
                results: dict[str, Any] = json.loads(await lines.__anext__())
                await proc.wait()
                bridge.terminate()
                await bridge.wait()
                tg.cancel_scope.cancel()
    results.update(published=published, bridgeCpuS=bridge_cpu, wallS=wall, clients=n, rate=rate)
    return results


def report(r: dict[str, Any]) -> str:
    return "\n".join(
        [
            f"bridge: {r['clients']} clients of {r['clients']} agents, {r['rate']} transitions/s, {r['wallS']:.1f} s measured",
            "| published | delivered | p50, ms | p99, ms | max, ms | bridge CPU, s | % of a core | CPU µs/delivery | clients' CPU, s |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            f"| {r['published']:,} | {r['n']:,} | {r['p50']:.2f} | {r['p99']:.2f} | {r['max']:.1f} | {r['bridgeCpuS']:.2f} "
            f"| {100 * r['bridgeCpuS'] / r['wallS']:.0f} | {r['bridgeCpuS'] / max(r['n'], 1) * 1e6:.0f} | {r['clientCpuS']:.1f} |",
            f"records of another agent's session received: {r['foreign']} (must be 0); p99 target <= {P99_TARGET_MS:g} ms",
        ]
    )


def check(r: dict[str, Any]) -> list[str]:
    problems = []
    if r["foreign"]:
        problems.append(f"{r['foreign']} records reached another agent's client")
    if r["n"] < 0.99 * r["published"]:
        problems.append(f"delivered {r['n']} of {r['published']}")
    if r["p99"] > P99_TARGET_MS:
        problems.append(f"p99 {r['p99']:.2f} ms > {P99_TARGET_MS:g} ms")
    return problems


def run(n: int = 1000, rate: int = 1000, seconds: float = 30.0) -> dict[str, Any]:
    return anyio.run(daemon, n, rate, seconds, backend="asyncio")


@pytest.mark.bench
def test_bench_bridge() -> None:
    results = run()
    print(report(results))
    assert check(results) == []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--client-process", nargs=2, metavar=("URL", "N"), help=argparse.SUPPRESS)
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args(argv)
    if args.client_process:
        asyncio.run(clients(args.client_process[0], int(args.client_process[1])))
        return 0
    results = run(args.clients, args.rate, args.seconds)
    print(report(results))
    problems = check(results)
    print("targets met" if not problems else "NOT MET: " + "; ".join(problems))
    return 0 if not problems else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    raise SystemExit(main())
