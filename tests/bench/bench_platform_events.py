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
import cProfile
import json
import os
import selectors
import socket
import subprocess
import sys
import tempfile
import time
from datetime import datetime
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
#: the two shapes of subscribers: each watches its share of the sessions, or each takes everything
FILTERED = "filtered"
ALL = "all"


class Record(msgspec.Struct):
    type: str
    receivedAt: str | None = None


class Reply(msgspec.Struct):
    parameters: Record


def percentile(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def epoch_of(iso: str, cache: dict[str, float]) -> float:
    """``receivedAt`` (ISO-8601 UTC, milliseconds) as epoch seconds; the same millisecond recurs, so cached."""
    epoch = cache.get(iso)
    if epoch is None:
        epoch = cache[iso] = datetime.fromisoformat(iso).timestamp()
    return epoch


def shares(sessions: int, subscribers: int) -> list[list[str]]:
    """The ``filtered`` shape: subscriber i watches its own ``sessions // subscribers`` sessions."""
    each = sessions // subscribers
    return [[f"cx-{i * each + j}" for j in range(each)] for i in range(subscribers)]


def expected(published: int, sessions: int, share: list[str] | None) -> int:
    """How many of the ``published`` events (sessions in rotation) one subscriber's filter passes."""
    if share is None:
        return published
    owned = {int(s.removeprefix("cx-")) for s in share}
    rounds, rest = divmod(published, sessions)
    return rounds * len(owned) + sum(1 for n in owned if n < rest)


def rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


# -- the reader process ---------------------------------------------------------------------------------


def reader(path: str, subscribers: int, filters: list[list[str]] | None) -> None:
    """Subscribers in this process; "done" on stdin ends it with a JSON summary.

    ``filters``: each subscriber's sessions (the ``filtered`` shape), or None (each takes everything).
    """
    decode = msgspec.json.Decoder(type=Reply).decode
    epochs: dict[str, float] = {}
    selector = selectors.DefaultSelector()
    for index in range(subscribers):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        sock.connect(path)
        parameters: dict[str, Any] = {"streams": ["platform"]}
        if filters is not None:
            parameters["filter"] = {"sessions": filters[index]}
        sock.sendall(encode_call(Method.SUBSCRIBE, parameters, more=True))
        sock.setblocking(False)
        # [pending bytes, sampled, frames counted, heard from, index]
        sampled = filters is not None or index < SAMPLED
        selector.register(sock, selectors.EVENT_READ, [b"", sampled, 0, False, index])
    selector.register(sys.stdin, selectors.EVENT_READ, None)
    latencies: list[float] = []
    lagged = 0
    counts: list[list[Any]] = []
    cpu0 = time.process_time()
    ready = False
    done = False
    target: list[int] | None = None
    deadline = 0.0
    while not done:
        for key, _ in selector.select(timeout=1.0):
            state = key.data
            if state is None:
                # "done [N, ...]": read on until subscriber i has N[i] frames (or 30 s)
                command, _, count = sys.stdin.readline().strip().partition(" ")
                if command == "done":
                    target = json.loads(count)
                    deadline = time.monotonic() + 30
                    selector.unregister(sys.stdin)
                continue
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            data = sock.recv(1 << 20)
            now = time.time()
            if not data:
                selector.unregister(sock)
                continue
            if state[1]:
                *frames, state[0] = (state[0] + data).split(b"\0")
                state[2] += len(frames)
                for frame in frames:
                    message = decode(frame).parameters
                    if message.type == "platform" and message.receivedAt is not None:
                        latencies.append(now - epoch_of(message.receivedAt, epochs))
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
            all(state[2] >= target[state[4]] for state in counts) or time.monotonic() > deadline
        ):
            done = True
    latencies.sort()
    frames = [state[2] for state in counts]
    short = sum(1 for state in counts if target is not None and state[2] < target[state[4]])
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
                "frames": sum(frames),
                "short": short,
            }
        ),
        flush=True,
    )


# -- the daemon side ------------------------------------------------------------------------------------


async def daemon(sessions: int, subscribers: int, rate: int, seconds: float, shape: str) -> dict[str, Any]:
    filters = shares(sessions, subscribers) if shape == FILTERED else None
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
                    [
                        sys.executable,
                        __file__,
                        "--reader",
                        str(paths[0]),
                        str(subscribers),
                        str(sessions),
                        shape,
                    ],
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
                total = int(seconds * rate)
                # every event of the run is published: a daemon that cannot keep the pace takes longer
                # (the published rate says so), not fewer events
                while published < total:
                    now = time.monotonic()
                    # every event due by now, then one yield: what 5,000 transports' tasks do in one
                    # turn of the loop (each reads what its socket got; the writers they wake run in
                    # the next turn). The loop's timers tick in about a millisecond: one sleep per
                    # event would cap the rate near 1,000/s; a daemon that falls behind reads more
                    # per turn, as a real one would
                    due = min(int((now - begin) * rate) + 1, total)
                    while published < due:
                        # what get-next-event carries (docs/platforms.md, "NICE CXone")
                        event = {
                            "Type": "AgentState",
                            "CurrentState": "Available",
                            "CurrentOutReason": "",
                            "StartTimeUTC": "2026-12-02T04:00:00.000Z",
                            "AcwTimeout": "0",
                            "IsAcw": "False",
                            "NextStates": [],
                            "NextIsAcw": "False",
                        }
                        sinks[published % sessions]([event])
                        published += 1
                    await anyio.sleep(period)
                elapsed = time.monotonic() - begin
                # each subscriber's snapshot, then every event its filter passes
                targets = [
                    1 + expected(published, sessions, None if filters is None else filters[i])
                    for i in range(subscribers)
                ]
                # until the writers handed everything to the sockets (or 30 s)
                await wait_for(lambda: sum(s.delivered for s in api.hub.subscribers) >= sum(targets), 30)
                cpu = time.process_time() - cpu0
                stats = hub.stats()
                rss = rss_bytes() - rss0
                # the reader reads on until every subscriber has what it was sent
                await proc.stdin.send(f"done {json.dumps(targets)}\n".encode())
                reader_ = json.loads(await lines.__anext__())
                await proc.wait()
                tg.cancel_scope.cancel()
    return {
        "shape": shape,
        "deliveries": sum(targets) - subscribers,
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
    deliveries = r["deliveries"]
    elapsed = r["elapsedS"]
    return "\n".join(
        [
            f"platform events, shape {r['shape']}: {r['sessions']:,} sessions, {r['subscribers']} subscribers, "
            f"{r['published'] / elapsed:,.0f} events/s published for {elapsed:.1f} s",
            "| shape | published events/s | deliveries/s (all subscribers) | frames per subscriber, min..max "
            "| p50, ms | p99, ms | max, ms | daemon CPU, s | CPU µs per event | CPU µs per event per subscriber "
            "| windows: frames' bytes, entries | RSS grown | lagged |",
            "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---|---:|---:|",
            f"| {r['shape']} | {r['published'] / elapsed:,.0f} | {(reader_['frames'] - r['subscribers']) / elapsed:,.0f} "
            f"| {reader_['framesMin'] - 1:,}..{reader_['framesMax'] - 1:,} "
            f"| {reader_['p50']:.2f} | {reader_['p99']:.2f} | {reader_['max']:.1f} | {r['cpuS']:.1f} "
            f"| {r['cpuS'] / r['published'] * 1e6:.1f} | {r['cpuS'] / deliveries * 1e6:.2f} "
            f"| {r['windowBytes'] / 2**20:.1f} MiB, {r['windowEntries']:,} "
            f"| {r['rssGrowthBytes'] / 2**20:.1f} MiB | {r['laggedNotices']} |",
            f"reader process CPU: {reader_['readerCpuS']:.1f} s ({reader_['n']:,} latencies sampled)",
        ]
    )


def check(r: dict[str, Any], rate: int) -> list[str]:
    reader_ = r["reader"]
    problems = []
    if reader_["short"] or reader_["frames"] - r["subscribers"] < r["deliveries"]:
        problems.append(
            f"{reader_['short']} subscribers short: {reader_['frames'] - r['subscribers']:,} of "
            f"{r['deliveries']:,} deliveries"
        )
    if r["published"] / r["elapsedS"] < 0.98 * rate:
        problems.append(f"{r['published'] / r['elapsedS']:,.0f} events/s published < {rate:,}")
    if reader_["p99"] > 50.0:
        problems.append(f"p99 {reader_['p99']:.1f} ms > 50 ms")
    if r["laggedNotices"]:
        problems.append("a subscriber lagged")
    return problems


def run(
    sessions: int = 5000,
    subscribers: int = 100,
    rate: int = 5000,
    seconds: float = 20.0,
    shape: str = ALL,
    profile: str | None = None,
) -> dict[str, Any]:
    if profile is None:
        return anyio.run(daemon, sessions, subscribers, rate, seconds, shape, backend="asyncio")
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        return anyio.run(daemon, sessions, subscribers, rate, seconds, shape, backend="asyncio")
    finally:
        profiler.disable()
        profiler.dump_stats(profile)


@pytest.mark.bench
@pytest.mark.parametrize("shape", [FILTERED, ALL])
def test_platform_events(shape: str) -> None:
    results = run(shape=shape)
    print(report(results))
    assert check(results, 5000) == []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--reader", nargs=4, metavar=("PATH", "N", "SESSIONS", "SHAPE"), help=argparse.SUPPRESS
    )
    parser.add_argument("--sessions", type=int, default=5000)
    parser.add_argument("--subscribers", type=int, default=100)
    parser.add_argument("--rate", type=int, default=5000)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument(
        "--shape",
        choices=(FILTERED, ALL),
        default=ALL,
        help=f"{FILTERED}: each subscriber watches its own sessions // subscribers sessions; "
        f"{ALL}: each takes every event",
    )
    parser.add_argument("--profile", metavar="FILE", help="write the daemon side's cProfile stats to FILE")
    args = parser.parse_args(argv)
    if args.reader:
        path, n, sessions, shape = args.reader
        reader(path, int(n), shares(int(sessions), int(n)) if shape == FILTERED else None)
        return 0
    results = run(args.sessions, args.subscribers, args.rate, args.seconds, args.shape, args.profile)
    print(report(results))
    problems = check(results, args.rate)
    print("targets met" if not problems else "NOT MET: " + "; ".join(problems))
    return 0 if not problems else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    raise SystemExit(main())
