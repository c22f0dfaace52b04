"""Socket API fan-out benchmark (docs/socket-api.md): 100 subscribers, 1,000 transitions/s, then one stalled subscriber.

The daemon side is this process: the real bus, state board, hub, per-subscriber outboxes and
writer tasks, and the subscribe socket (``SocketApi``), fed by a publisher that puts one
``SessionTransition`` on the bus every millisecond (1,000 sessions in rotation). No session
runs: the transitions are synthetic, so what is measured is the socket API alone.

The subscribers live in a second process (``--reader``): one selector loop over 100 Unix
sockets, each subscribed to every session's deltas. Each delta carries the publisher's
``time.monotonic()`` in its ``reason`` (CLOCK_MONOTONIC is the same clock in both processes),
so the reader measures publish -> read latency itself, per phase:

* phase A, unstalled: the 100 subscribers, ``--seconds`` at ``--rate``;
* phase B, stalled: a 101st subscriber subscribes and never reads; the same load again.

The two phases alternate in ``--rounds`` rounds (A, B, A, B, ...; a new stalled subscriber in
each B round, closed at its end), so load from other processes drifting over the run weighs on
both phases alike.

Reported: latency p50/p99/max per phase and the others' p99 ratio B/A (target ≤ 1.5), the
daemon's CPU per delivered event (``time.process_time`` over each phase / deliveries), what
happened to the stalled subscriber (conflated, held bytes, lagged, disconnected), and the
reader's own CPU (it must keep up for the latencies to mean anything).

    .venv/bin/python tests/bench/bench_socket_fanout.py [--subscribers 100] [--rate 1000] [--seconds 30]
    ./dev bench -k socket_fanout
"""

from __future__ import annotations

import argparse
import json
import os
import selectors
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from supervisor.api.protocol import Method, encode_call
from supervisor.bus import EventBus
from supervisor.config import SocketsConfig, parse_config
from supervisor.events import Correlation, SessionTransition
from supervisor.runtime.assembly import socket_api
from supervisor.runtime.supervisor import Supervisor
from supervisor.runtime.wiring import Wiring
from supervisor.vocabulary import SessionState
from tests.bench.runtime_harness import wait_for

SESSIONS = 1000
CYCLE = (SessionState.ACTIVE, SessionState.RECONNECTING, SessionState.CONNECTING)
CONFIG = """
[platforms.genesys]
loginUrl = "http://127.0.0.1:9"
apiUrl = "http://127.0.0.1:9"
webmessagingUrl = "ws://127.0.0.1:9"
deploymentId = "dep"
"""


# -- the reader process ---------------------------------------------------------------------------------


class Message(msgspec.Struct):
    type: str
    reason: str = ""


class Reply(msgspec.Struct):
    parameters: Message


def percentile(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def reader(path: str, subscribers: int) -> None:
    """Subscribers in this process; commands on stdin: "stall" (open the stalled one), "done"."""
    decode = msgspec.json.Decoder(type=Reply).decode
    selector = selectors.DefaultSelector()
    socks = []
    for _ in range(subscribers):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(path)
        sock.sendall(encode_call(Method.SUBSCRIBE, {}, more=True))
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ, [b""])
        socks.append(sock)
    selector.register(sys.stdin, selectors.EVENT_READ, None)
    latencies: dict[str, list[float]] = {}
    lagged = 0
    snapshots = 0
    stalled: socket.socket | None = None
    cpu0 = time.process_time()
    done = False
    while not done:
        for key, _ in selector.select():
            if key.data is None:
                line = sys.stdin.readline().strip()
                if line == "stall":
                    stalled = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                    stalled.connect(path)
                    stalled.sendall(encode_call(Method.SUBSCRIBE, {}, more=True))
                    print("stalled", flush=True)
                elif line == "unstall" and stalled is not None:
                    stalled.close()
                    stalled = None
                    print("unstalled", flush=True)
                else:
                    done = True
                continue
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            data = sock.recv(1 << 18)
            now = time.monotonic()
            if not data:
                selector.unregister(sock)
                continue
            *frames, key.data[0] = (key.data[0] + data).split(b"\0")
            for frame in frames:
                message = decode(frame).parameters
                if message.type == "delta":
                    phase, _, sent = message.reason.partition(" ")
                    if sent:
                        latencies.setdefault(phase, []).append(now - float(sent))
                elif message.type == "lagged":
                    lagged += 1
                elif message.type == "snapshot":
                    snapshots += 1
            if snapshots == subscribers and not getattr(reader, "ready", False):
                reader.ready = True  # type: ignore[attr-defined]
                print("ready", flush=True)
    summary: dict[str, Any] = {"lagged": lagged, "readerCpuS": time.process_time() - cpu0}
    for phase in ("A", "B"):
        rounds = sorted(label for label in latencies if label.startswith(phase))
        merged = sorted(v for label in rounds for v in latencies[label])
        summary[phase] = _stats(merged)
        summary[phase]["rounds"] = [_stats(sorted(latencies[label]))["p99"] for label in rounds]
    print(json.dumps(summary), flush=True)


def _stats(values: list[float]) -> dict[str, Any]:
    return {
        "n": len(values),
        "p50": percentile(values, 0.50) * 1e3,
        "p99": percentile(values, 0.99) * 1e3,
        "max": (values[-1] if values else float("nan")) * 1e3,
    }


# -- the daemon side ------------------------------------------------------------------------------------


async def publish_for(bus: EventBus, phase: str, seconds: float, rate: int, start_seq: int) -> int:
    """One transition every 1/rate s (late ones are published at once, never skipped)."""
    period = 1.0 / rate
    begin = time.monotonic()
    count = 0
    i = start_seq
    while True:
        now = time.monotonic()
        if now - begin >= seconds:
            return count
        due = begin + count * period
        if due > now:
            await anyio.sleep(due - now)
        session = f"s-{i % SESSIONS}"
        step = (i // SESSIONS) % len(CYCLE)
        source, target = CYCLE[step], CYCLE[(step + 1) % len(CYCLE)]
        stamp = f"{phase} {time.monotonic():.6f}"
        bus.publish(
            SessionTransition(session, source, target, "bench", stamp, "2026-01-01T00:00:00.000Z"),
            Correlation(session),
        )
        count += 1
        i += 1


async def daemon(subscribers: int, rate: int, seconds: float, rounds: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="ss-bench-", dir="/tmp") as d:
        paths = (Path(d) / "s.sock", Path(d) / "c.sock")
        config = parse_config(CONFIG, "bench.toml")
        async with Wiring(config, bus=EventBus(), environ={}) as wiring:
            supervisor = Supervisor(wiring)
            api = socket_api(supervisor, SocketsConfig(), environ={}, paths=paths)
            async with anyio.create_task_group() as tg:
                await tg.start(api.serve)
                # every session on the board before anyone subscribes (a full snapshot each)
                for i in range(SESSIONS):
                    wiring.bus.publish(
                        SessionTransition(
                            f"s-{i}",
                            SessionState.CONNECTING,
                            SessionState.ACTIVE,
                            "bench",
                            "warm",
                            "2026-01-01T00:00:00.000Z",
                        ),
                        Correlation(f"s-{i}"),
                    )
                proc = await anyio.open_process(
                    [sys.executable, __file__, "--reader", str(paths[0]), str(subscribers)],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=None,
                )
                assert proc.stdin is not None and proc.stdout is not None
                lines = _lines(proc.stdout)
                assert await lines.__anext__() == "ready"
                results: dict[str, Any] = {
                    "A": {"published": 0, "cpuS": 0.0},
                    "B": {"published": 0, "cpuS": 0.0},
                    "stalled": [],
                }
                seq = SESSIONS
                # the phases alternate in short rounds, so background load drifting over the run
                # weighs on both alike; each stalled round has a new subscriber that never reads
                for round_ in range(1, rounds + 1):
                    for phase in ("A", "B"):
                        if phase == "B":
                            await proc.stdin.send(b"stall\n")
                            assert await lines.__anext__() == "stalled"
                            assert await wait_for(lambda: len(api.hub.subscribers) > subscribers, 10)
                        cpu0 = time.process_time()
                        published = await publish_for(
                            wiring.bus, f"{phase}{round_}", seconds / rounds, rate, seq
                        )
                        results[phase]["cpuS"] += time.process_time() - cpu0
                        results[phase]["published"] += published
                        seq += published
                        if phase == "B":
                            # the last to subscribe (gone from the hub if it was disconnected)
                            stalled = list(api.hub.subscribers[subscribers:])
                            results["stalled"].append(
                                {
                                    "conflated": stalled[0].outbox.conflated,
                                    "heldBytes": stalled[0].outbox.pending_bytes,
                                    "lags": stalled[0].outbox.lags,
                                }
                                if stalled
                                else None
                            )
                            await proc.stdin.send(b"unstall\n")
                            assert await lines.__anext__() == "unstalled"
                            assert await wait_for(lambda: len(api.hub.subscribers) == subscribers, 10)
                results["lagDisconnects"] = api.hub.lag_disconnects
                await proc.stdin.send(b"done\n")
                results["reader"] = json.loads(await lines.__anext__())
                await proc.wait()
                tg.cancel_scope.cancel()
    return results


async def _lines(stream: Any) -> Any:
    buffer = b""
    async for chunk in stream:
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            yield line.decode()


def report(results: dict[str, Any], subscribers: int, rate: int, seconds: float) -> str:
    reader_ = results["reader"]
    rows = []
    for phase, label in (("A", "unstalled"), ("B", "one stalled")):
        r, lat = results[phase], reader_[phase]
        deliveries = r["published"] * subscribers
        rounds = ", ".join(f"{p:.2f}" for p in lat["rounds"])
        rows.append(
            f"| {label:<11} | {r['published']:>9,} | {lat['n']:>10,} | {lat['p50']:>7.2f} | {lat['p99']:>7.2f} "
            f"| {rounds} | {lat['max']:>7.1f} | {r['cpuS']:>6.2f} | {r['cpuS'] / deliveries * 1e6:>8.2f} |"
        )
    ratio = reader_["B"]["p99"] / reader_["A"]["p99"]
    stalled = [
        "disconnected"
        if s is None
        else f"{s['conflated']:,} conflated, {s['heldBytes']:,} B held, lagged {s['lags']}x"
        for s in results["stalled"]
    ]
    return "\n".join(
        [
            f"socket fan-out: {subscribers} subscribers, {rate} transitions/s, {seconds:g} s per phase "
            f"in {len(reader_['A']['rounds'])} alternating rounds",
            "| phase | published | deliveries | p50, ms | p99, ms | p99 per round, ms | max, ms | daemon CPU, s "
            "| CPU µs/delivery |",
            "|---|---:|---:|---:|---:|---|---:|---:|---:|",
            *rows,
            f"others' p99 stalled / unstalled: {ratio:.2f} (target <= 1.5); p99 target <= 20 ms",
            f"stalled subscribers (one per stalled round): {'; '.join(stalled)}; "
            f"lag disconnects {results['lagDisconnects']}; the readers were told they lagged {reader_['lagged']} times",
            f"reader process CPU: {reader_['readerCpuS']:.1f} s over the run",
        ]
    )


def check(results: dict[str, Any]) -> list[str]:
    reader_ = results["reader"]
    problems = []
    if reader_["A"]["p99"] > 20.0:
        problems.append(f"unstalled p99 {reader_['A']['p99']:.2f} ms > 20 ms")
    if reader_["B"]["p99"] > 1.5 * reader_["A"]["p99"]:
        problems.append("stalled p99 > 1.5 x unstalled p99")
    if reader_["lagged"]:
        problems.append("a reading subscriber lagged")
    return problems


def run(subscribers: int = 100, rate: int = 1000, seconds: float = 30.0, rounds: int = 3) -> dict[str, Any]:
    return anyio.run(daemon, subscribers, rate, seconds, rounds, backend="asyncio")


@pytest.mark.bench
def test_socket_fanout() -> None:
    results = run()
    print(report(results, 100, 1000, 30.0))
    assert check(results) == []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reader", nargs=2, metavar=("PATH", "N"), help=argparse.SUPPRESS)
    parser.add_argument("--subscribers", type=int, default=100)
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=30.0, help="per phase (unstalled, stalled)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds the phases are split into")
    args = parser.parse_args(argv)
    if args.reader:
        reader(args.reader[0], int(args.reader[1]))
        return 0
    results = run(args.subscribers, args.rate, args.seconds, args.rounds)
    print(report(results, args.subscribers, args.rate, args.seconds))
    problems = check(results)
    print("targets met" if not problems else "NOT MET: " + "; ".join(problems))
    return 0 if not problems else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    raise SystemExit(main())
