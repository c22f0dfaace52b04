"""Platform events benchmark (docs/socket-api.md, "The platform stream"): 5,000 sessions, 100 subscribers.

The daemon side is this process: the real wiring's platform events hub (``Wiring.platform_events``:
per-session numbering, the windows), the socket API's fan-out, outboxes and writer tasks, and the
subscribe socket (``SocketApi``), fed by a publisher that hands the hub one CXone ``AgentState`` event
every 1/rate s, the sessions in rotation, exactly as the CXone sink does. No session runs and no
simulator is polled: what is measured is the path from the sink to the subscribers' sockets.

The subscribers live in a second process (``--reader``): one selector loop over 100 Unix sockets,
each subscribed to the ``platform`` stream. Each event's body carries the publisher's
``time.monotonic()`` (CLOCK_MONOTONIC is one clock in both processes); a sample of the subscribers
decodes every frame and measures publish -> read latency, the others count frames (one reader
process decoding 100 x 5,000 messages a second would measure itself, not the daemon).

Reported: events published and delivered per second (target >= 5,000 delivered, every subscriber
all of them), latency p50/p99/max (target p99 <= 50 ms), the daemon's CPU per event per subscriber
(``time.process_time`` / deliveries), the windows' memory (their frames' bytes, and the process's
resident memory grown while they filled), lagged notices.

    .venv/bin/python tests/bench/bench_platform_events.py [--sessions 5000] [--subscribers 100] [--rate 5000] [--seconds 20]
    ./dev bench -k platform_events
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
import anyio.lowlevel
import msgspec
import pytest

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from supervisor.api.protocol import Method, encode_call
from supervisor.bus import EventBus
from supervisor.config import SocketsConfig, parse_config
from supervisor.runtime.assembly import socket_api
from supervisor.runtime.platform_sinks import cxone_sink
from supervisor.runtime.supervisor import Supervisor
from supervisor.runtime.wiring import Wiring
from tests.bench.runtime_harness import wait_for

CONFIG = """
[platforms.genesys]
loginUrl = "http://127.0.0.1:9"
apiUrl = "http://127.0.0.1:9"
webmessagingUrl = "ws://127.0.0.1:9"
deploymentId = "dep"
"""
#: subscribers per reader that decode every frame (latency); the rest count frames
SAMPLED = 10


class Body(msgspec.Struct):
    t: float = 0.0


class Record(msgspec.Struct):
    type: str
    body: Body | None = None


class Reply(msgspec.Struct):
    parameters: Record


def percentile(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


# -- the reader process ---------------------------------------------------------------------------------


def reader(path: str, subscribers: int) -> None:
    """Subscribers in this process; "done" on stdin ends it with a JSON summary."""
    decode = msgspec.json.Decoder(type=Reply).decode
    selector = selectors.DefaultSelector()
    for index in range(subscribers):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        sock.connect(path)
        sock.sendall(encode_call(Method.SUBSCRIBE, {"streams": ["platform"]}, more=True))
        sock.setblocking(False)
        # [pending bytes, sampled, frames counted, heard from]
        selector.register(sock, selectors.EVENT_READ, [b"", index < SAMPLED, 0, False])
    selector.register(sys.stdin, selectors.EVENT_READ, None)
    latencies: list[float] = []
    lagged = 0
    counts: list[list[Any]] = []
    cpu0 = time.process_time()
    ready = False
    done = False
    target: int | None = None
    deadline = 0.0
    while not done:
        for key, _ in selector.select(timeout=1.0):
            state = key.data
            if state is None:
                # "done N": read on until every subscriber has N frames (or 30 s)
                command, _, count = sys.stdin.readline().strip().partition(" ")
                if command == "done":
                    target = int(count)
                    deadline = time.monotonic() + 30
                    selector.unregister(sys.stdin)
                continue
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            data = sock.recv(1 << 20)
            now = time.monotonic()
            if not data:
                selector.unregister(sock)
                continue
            if state[1]:
                *frames, state[0] = (state[0] + data).split(b"\0")
                state[2] += len(frames)
                for frame in frames:
                    message = decode(frame).parameters
                    if message.type == "platform" and message.body is not None:
                        latencies.append(now - message.body.t)
                    elif message.type == "lagged":
                        lagged += 1
            else:
                state[2] += data.count(b"\0")
                if b'"type":"lagged"' in data:
                    lagged += 1
            if not state[3]:
                state[3] = True
                counts.append(state)
            if not ready and len(counts) == subscribers:
                ready = True
                print("ready", flush=True)
        if target is not None and (
            all(state[2] >= target for state in counts) or time.monotonic() > deadline
        ):
            done = True
    latencies.sort()
    frames = [state[2] for state in counts]
    print(
        json.dumps(
            {
                "lagged": lagged,
                "readerCpuS": time.process_time() - cpu0,
                "n": len(latencies),
                "p50": percentile(latencies, 0.5) * 1e3,
                "p99": percentile(latencies, 0.99) * 1e3,
                "max": (latencies[-1] if latencies else float("nan")) * 1e3,
                "framesMin": min(frames),
                "framesMax": max(frames),
            }
        ),
        flush=True,
    )


# -- the daemon side ------------------------------------------------------------------------------------


async def daemon(sessions: int, subscribers: int, rate: int, seconds: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="ss-bench-", dir="/tmp") as d:
        paths = (Path(d) / "s.sock", Path(d) / "c.sock")
        config = parse_config(CONFIG, "bench.toml")
        async with Wiring(config, bus=EventBus(), environ={}) as wiring:
            supervisor = Supervisor(wiring)
            api = socket_api(
                supervisor, SocketsConfig(subscriber_buffer_bytes=8 << 20), environ={}, paths=paths
            )
            hub = wiring.platform_events
            sinks = [cxone_sink(hub, f"cx-{i}") for i in range(sessions)]
            async with anyio.create_task_group() as tg:
                await tg.start(api.serve)
                # every session seen once before anyone subscribes: its start-up gap told, its window begun
                for sink in sinks:
                    sink([{"Type": "AgentSessionStart", "t": 0.0}])
                proc = await anyio.open_process(
                    [sys.executable, __file__, "--reader", str(paths[0]), str(subscribers)],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=None,
                )
                assert proc.stdin is not None and proc.stdout is not None
                lines = _lines(proc.stdout)
                assert await lines.__anext__() == "ready"
                rss0 = rss_bytes()
                cpu0 = time.process_time()
                period = 1.0 / rate
                begin = time.monotonic()
                published = 0
                while (now := time.monotonic()) - begin < seconds:
                    # every event due by now (the loop's timers tick in about a millisecond: one
                    # sleep per event would cap the rate near 1,000/s), yielding every 8 so the
                    # writers run as they would between a transport's awaits
                    due = min(int((now - begin) * rate) + 1, int(seconds * rate))
                    while published < due:
                        # what get-next-event carries (docs/platforms.md, "NICE CXone"), stamped for the reader
                        event = {
                            "Type": "AgentState",
                            "CurrentState": "Available",
                            "CurrentOutReason": "",
                            "StartTimeUTC": "2026-12-02T04:00:00.000Z",
                            "AcwTimeout": "0",
                            "IsAcw": "False",
                            "NextStates": [],
                            "NextIsAcw": "False",
                            "t": time.monotonic(),
                        }
                        sinks[published % sessions]([event])
                        published += 1
                        if published % 8 == 0:
                            await anyio.lowlevel.checkpoint()
                    await anyio.sleep(period)
                elapsed = time.monotonic() - begin
                # until every subscriber has read everything (or 30 s)
                # until every subscriber's writer handed everything to its socket (or 30 s)
                await wait_for(lambda: all(s.delivered > published for s in api.hub.subscribers), 30)
                cpu = time.process_time() - cpu0
                stats = hub.stats()
                rss = rss_bytes() - rss0
                # the reader reads on until it has the snapshot and every event on every socket
                await proc.stdin.send(f"done {published + 1}\n".encode())
                reader_ = json.loads(await lines.__anext__())
                await proc.wait()
                tg.cancel_scope.cancel()
    return {
        "sessions": sessions,
        "subscribers": subscribers,
        "published": published,
        "elapsedS": elapsed,
        "cpuS": cpu,
        "windowBytes": stats["windowBytes"],
        "windowEntries": stats["windowEntries"],
        "rssGrowthBytes": rss,
        "laggedNotices": api.hub.lagged_notices,
        "reader": reader_,
    }


async def _lines(stream: Any) -> Any:
    buffer = b""
    async for chunk in stream:
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            yield line.decode()


def report(r: dict[str, Any]) -> str:
    reader_ = r["reader"]
    deliveries = r["published"] * r["subscribers"]
    return "\n".join(
        [
            f"platform events: {r['sessions']:,} sessions, {r['subscribers']} subscribers, "
            f"{r['published'] / r['elapsedS']:,.0f} events/s published for {r['elapsedS']:.1f} s",
            "| delivered events/s (each subscriber) | frames per subscriber, min..max | p50, ms | p99, ms "
            "| max, ms | daemon CPU, s | CPU µs per event per subscriber | windows: frames' bytes, entries "
            "| RSS grown | lagged |",
            "|---:|---|---:|---:|---:|---:|---:|---|---:|---:|",
            f"| {(reader_['framesMin'] - 1) / r['elapsedS']:,.0f} | {reader_['framesMin'] - 1:,}..{reader_['framesMax'] - 1:,} "
            f"| {reader_['p50']:.2f} | {reader_['p99']:.2f} | {reader_['max']:.1f} | {r['cpuS']:.1f} "
            f"| {r['cpuS'] / deliveries * 1e6:.2f} | {r['windowBytes'] / 2**20:.1f} MiB, {r['windowEntries']:,} "
            f"| {r['rssGrowthBytes'] / 2**20:.1f} MiB | {r['laggedNotices']} |",
            f"reader process CPU: {reader_['readerCpuS']:.1f} s ({SAMPLED} subscribers decoded, the rest counted)",
        ]
    )


def check(r: dict[str, Any]) -> list[str]:
    reader_ = r["reader"]
    problems = []
    # the snapshot is each subscriber's first frame, then one frame per event
    if reader_["framesMin"] - 1 < r["published"]:
        problems.append(f"a subscriber got {reader_['framesMin'] - 1:,} of {r['published']:,} events")
    if r["published"] / r["elapsedS"] < 5000:
        problems.append(f"{r['published'] / r['elapsedS']:,.0f} events/s < 5,000")
    if reader_["p99"] > 50.0:
        problems.append(f"p99 {reader_['p99']:.1f} ms > 50 ms")
    if r["laggedNotices"]:
        problems.append("a subscriber lagged")
    return problems


def run(
    sessions: int = 5000, subscribers: int = 100, rate: int = 5000, seconds: float = 20.0
) -> dict[str, Any]:
    return anyio.run(daemon, sessions, subscribers, rate, seconds, backend="asyncio")


@pytest.mark.bench
def test_platform_events() -> None:
    results = run()
    print(report(results))
    assert check(results) == []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reader", nargs=2, metavar=("PATH", "N"), help=argparse.SUPPRESS)
    parser.add_argument("--sessions", type=int, default=5000)
    parser.add_argument("--subscribers", type=int, default=100)
    parser.add_argument("--rate", type=int, default=5000)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args(argv)
    if args.reader:
        reader(args.reader[0], int(args.reader[1]))
        return 0
    results = run(args.sessions, args.subscribers, args.rate, args.seconds)
    print(report(results))
    problems = check(results)
    print("targets met" if not problems else "NOT MET: " + "; ".join(problems))
    return 0 if not problems else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    raise SystemExit(main())
