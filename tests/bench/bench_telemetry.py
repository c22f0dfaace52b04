"""Telemetry's cost (docs/telemetry.md): the wrapper on a successful call, and a 1,000-session storm, off / sampling 0 / 1.

**Wrapper.** ``RetryExecutor.call`` around a trivial coroutine, best of 7 × ``--calls``, µs per
call, with the hooks the daemon really installs:

* ``off``: ``BusHooks`` alone (what ``Wiring`` installs without telemetry);
* ``on, sampling 0``: ``HookChain([BusHooks, OperationTracer])``, ratio 0: a successful call is
  decided against and never reaches the SDK;
* ``on, sampling 1``: the same, ratio 1: every call's INTERNAL + CLIENT spans are built and
  queued; a collector process (``--collector``, a bare 200 answerer) takes the exports.

Targets: a sampled-out successful call adds ≤ 2 µs over ``off``; ``off`` itself adds nothing
measurable (compare ``bench_wrapper.py`` on a tree without telemetry).

**Storm.** 1,000 Web Messaging sessions dropped at once, the simulator (its own process)
admitting 200 handshakes/s, the collector **down** (a refused port): per mode the event-loop
lag (a probe task sleeping 10 ms, overshoot percentiles, from the drop until all are active),
the daemon's CPU seconds (``time.process_time``: the exporter's threads included), the time
until all are active, and the spans it tried to export. Target: loop-lag p99 moves by < 5 ms
against telemetry off. ``--hanging`` adds a row with a collector that accepts and never answers.

    .venv/bin/python tests/bench/bench_telemetry.py [--calls 20000] [--sessions 1000] [--rate 200] [--repeats 3] [--hanging]
    .venv/bin/python -m pytest tests/bench/bench_telemetry.py -m bench -o addopts="" -p no:cacheprovider -s
"""

from __future__ import annotations

import argparse
import contextlib
import random
import socket
import statistics
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from machines.registry import CircuitRegistry, Endpoints
from supervisor.attempts import Attempts
from supervisor.boundary import SessionContext
from supervisor.bus import EventBus
from supervisor.clock import SystemClock
from supervisor.config import Config
from supervisor.demo.observe import Observer
from supervisor.rest.executor import RetryExecutor
from supervisor.rest.hooks import ExecutorHooks, HookChain
from supervisor.runtime.hooks import BusHooks
from supervisor.taxonomy import Channel, Classifier, Platform, load_taxonomy
from supervisor.telemetry import ExportSettings, Telemetry, shapes_of
from supervisor.vocabulary import EndpointId
from tests.bench.runtime_harness import SimProcess, raise_nofile, table, wait_for, webmessaging_config

REPEATS = 7
SAMPLED_OUT_TARGET_US = 2.0
LAG_TARGET_MS = 5.0

# a collector in its own process: answers every OTLP request 200 (or holds it, with "hang")
_COLLECTOR = textwrap.dedent(
    """
    import sys, time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    HANG = sys.argv[1] == "hang"

    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if HANG:
                time.sleep(3600)
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()
        def log_message(self, *a):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), H)
    server.daemon_threads = True
    print(server.server_address[1], flush=True)
    server.serve_forever()
    """
)


@contextlib.contextmanager
def collector(mode: str) -> Iterator[str]:
    """An OTLP/HTTP endpoint: ``ok`` (answers 200), ``hang`` (never answers), ``down`` (refused)."""
    if mode == "down":
        with socket.socket() as s:  # a port nobody listens on once this closes
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        yield f"http://127.0.0.1:{port}"
        return
    proc = subprocess.Popen([sys.executable, "-c", _COLLECTOR, mode], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait(5)
        if proc.stdout is not None:
            proc.stdout.close()


def settings(url: str, ratio: float) -> ExportSettings:
    return ExportSettings(
        traces_endpoint=f"{url}/v1/traces",
        metrics_endpoint=f"{url}/v1/metrics",
        sample_ratio=ratio,
        export_timeout_s=10.0,
    )


# -- wrapper ----------------------------------------------------------------------------------------------


async def best_us(call: Callable[[], Awaitable[object]], calls: int) -> float:
    best = float("inf")
    for _ in range(REPEATS):
        start = time.perf_counter_ns()
        for _ in range(calls):
            await call()
        best = min(best, (time.perf_counter_ns() - start) / calls / 1000.0)
    return best


async def wrapper(calls: int, url: str) -> dict[str, float]:
    clock = SystemClock()
    classifier = Classifier(load_taxonomy("v1"), clock)
    ctx = SessionContext("bench", Platform.GENESYS, Channel.REST)

    async def op() -> int:
        return 1

    async def once(token: object) -> int:
        return await op()

    def executor(hooks: ExecutorHooks) -> Callable[[], Awaitable[object]]:
        ex = RetryExecutor(classifier, Attempts(Endpoints(clock, CircuitRegistry(clock))), clock, hooks=hooks)

        async def call() -> object:
            return await ex.call(
                once,
                ctx=ctx,
                circuit=EndpointId(Platform.GENESYS, "bench"),
                operation="bench",
                route="/bench",
            )

        return call

    out = {"bare": await best_us(op, calls)}
    out["off (BusHooks)"] = await best_us(executor(BusHooks(EventBus())), calls)
    for ratio in (0.0, 1.0):
        bus = EventBus()
        telemetry = Telemetry(settings(url, ratio), boot_id=bus.boot_id)
        out[f"on, sampling {ratio:g}"] = await best_us(
            executor(HookChain([BusHooks(bus), *telemetry.hooks])), calls
        )
        await telemetry.close(5.0)
    return out


def wrapper_report(figures: dict[str, float]) -> str:
    off = figures["off (BusHooks)"]
    rows = [
        [name, f"{us:.2f}", f"{us - figures['bare']:.2f}", "-" if name == "bare" else f"{us - off:+.2f}"]
        for name, us in figures.items()
    ]
    head = ["hooks", "us/call", "over bare, us", "over off, us"]
    return f"successful call through RetryExecutor.call; best of {REPEATS}\n" + table(head, rows)


# -- storm ------------------------------------------------------------------------------------------------


@dataclass
class StormResult:
    mode: str
    lag_p50_ms: float
    lag_p99_ms: float
    lag_max_ms: float
    cpu_s: float
    recovery_s: float | None
    terminated: int
    spans_dropped_or_failed: str
    circuit_opens: int = 0


@contextlib.asynccontextmanager
async def daemon(config: Config, bus: EventBus, telemetry: Telemetry | None, seed: int) -> AsyncIterator[Any]:
    from supervisor.runtime.supervisor import Supervisor
    from supervisor.runtime.wiring import Wiring

    hooks = [] if telemetry is None else telemetry.hooks
    async with (
        Wiring(config, bus=bus, rng=random.Random(seed), environ={}, hooks=hooks) as wiring,
        anyio.create_task_group() as tg,
    ):
        if telemetry is not None:
            bus.subscribe(telemetry)
            telemetry.observe(tokens=wiring.tokens, sink_failures=bus)
        supervisor = Supervisor(wiring)
        await tg.start(supervisor.serve)
        try:
            yield supervisor
        finally:
            tg.cancel_scope.cancel()


async def storm_once(
    mode: str, ratio: float | None, collector_mode: str, sessions: int, rate: int, seed: int
) -> StormResult:
    with SimProcess(seed=seed) as sim, collector(collector_mode) as url:
        config = webmessaging_config(sim.urls, sessions, seed=seed)
        bus = EventBus()
        telemetry = None
        if ratio is not None:
            telemetry = Telemetry(settings(url, ratio), boot_id=bus.boot_id, shapes=shapes_of(config))
            bus.trace_context = telemetry.trace_context
        runners: dict[str, Any] = {}
        observer = Observer(SystemClock(), lambda sid: int(getattr(runners.get(sid), "connects", 0)))
        bus.subscribe(observer)
        opens = [0]

        def count_opens(published: Any) -> None:
            if published.event.name == "CIRCUIT_BREAKER_OPEN":
                opens[0] += 1

        bus.subscribe(count_opens)
        lags: list[float] = []
        async with (
            httpx.AsyncClient(timeout=30.0) as admin,
            daemon(config, bus, telemetry, seed) as supervisor,
        ):
            runners.update(supervisor.runners)
            if not await wait_for(lambda: supervisor.states() == {"active": sessions}, 180.0):
                raise RuntimeError(f"{mode}: sessions did not all start: {supervisor.states()}")
            recording = [False]

            async def probe() -> None:
                while True:
                    started = time.perf_counter()
                    await anyio.sleep(0.01)
                    if recording[0]:
                        lags.append((time.perf_counter() - started - 0.01) * 1000.0)

            async with anyio.create_task_group() as tg:
                tg.start_soon(probe)
                await sim.reset(admin)
                observer.mark_fault()
                cpu0 = time.process_time()
                recording[0] = True
                await sim.inject(
                    admin,
                    {
                        "kind": "admission_limit",
                        "endpoint": "WS /*",
                        "params": {"rate_per_s": rate, "status": 429},
                    },
                    {"kind": "drop", "endpoint": "WS /*"},
                )

                def settled() -> bool:
                    return len(observer.disrupted) >= sessions and observer.all_survivors_active()

                ok = await wait_for(settled, 120.0)
                recording[0] = False
                cpu = time.process_time() - cpu0
                tg.cancel_scope.cancel()
            terminated = supervisor.states().get("terminated", 0)
        exported = "-"
        if telemetry is not None:
            spans = telemetry.pipeline.spans
            await telemetry.close(2.0)
            exported = "-" if spans is None else f"{spans.exported} exported, {spans.failures} failed batches"
    lags.sort()
    return StormResult(
        mode,
        statistics.median(lags),
        lags[min(len(lags) - 1, int(len(lags) * 0.99))],
        lags[-1],
        cpu,
        observer.recovery_seconds() if ok else None,
        terminated,
        exported,
        opens[0],
    )


def storm(sessions: int, rate: int, seed: int, hanging: bool, repeats: int) -> list[list[StormResult]]:
    """Every mode ``repeats`` times, interleaved (off, on-0, on-1, off, ...): a storm's loop lag
    varies from run to run more than telemetry moves it, so modes are compared by medians."""
    raise_nofile(4 * sessions + 1024)
    modes: list[tuple[str, float | None, str]] = [
        ("off", None, "down"),
        ("on, sampling 0, collector down", 0.0, "down"),
        ("on, sampling 1, collector down", 1.0, "down"),
    ]
    if hanging:
        modes.append(("on, sampling 1, collector hanging", 1.0, "hang"))
    runs: list[list[StormResult]] = [[] for _ in modes]
    for _ in range(repeats):
        for i, (mode, ratio, where) in enumerate(modes):
            runs[i].append(anyio.run(storm_once, mode, ratio, where, sessions, rate, seed, backend="asyncio"))
    return runs


def storm_report(runs: list[list[StormResult]], sessions: int, rate: int) -> str:
    rows = []
    for results in runs:
        recoveries = [r.recovery_s for r in results if r.recovery_s is not None]
        rows.append(
            [
                results[0].mode,
                f"{statistics.median(r.lag_p50_ms for r in results):.2f}",
                f"{statistics.median(r.lag_p99_ms for r in results):.2f}",
                " / ".join(f"{r.lag_p99_ms:.1f}" for r in results),
                f"{statistics.median(r.lag_max_ms for r in results):.0f}",
                f"{statistics.median(r.cpu_s for r in results):.2f}",
                "-" if not recoveries else f"{statistics.median(recoveries):.1f}",
                " / ".join("-" if r.recovery_s is None else f"{r.recovery_s:.0f}" for r in results),
                str(sum(r.circuit_opens for r in results)),
                str(sum(r.terminated for r in results)),
                results[-1].spans_dropped_or_failed,
            ]
        )
    head = ["telemetry", "lag p50 ms", "lag p99 ms", "p99 per run", "lag max ms", "daemon CPU s"]
    head += ["all active after, s", "per run", "circuit opens", "terminated", "spans (last run)"]
    title = f"storm: {sessions} sessions dropped at once, admission {rate}/s; medians of {len(runs[0])} runs"
    return title + "\n" + table(head, rows)


def check(wrap: dict[str, float], runs: list[list[StormResult]]) -> list[str]:
    problems = []
    added = wrap["on, sampling 0"] - wrap["off (BusHooks)"]
    if added > SAMPLED_OUT_TARGET_US:
        problems.append(f"a sampled-out call adds {added:.2f} us > {SAMPLED_OUT_TARGET_US} us")
    off = statistics.median(r.lag_p99_ms for r in runs[0])
    for results in runs[1:]:
        p99 = statistics.median(r.lag_p99_ms for r in results)
        if p99 - off >= LAG_TARGET_MS:
            problems.append(f"{results[0].mode}: loop-lag p99 {p99:.2f} ms vs off {off:.2f} ms")
        terminated = sum(r.terminated for r in results)
        if terminated:
            problems.append(f"{results[0].mode}: {terminated} sessions terminated")
    return problems


def run(
    calls: int, sessions: int, rate: int, seed: int, hanging: bool, repeats: int
) -> tuple[dict[str, float], list[list[StormResult]]]:
    with collector("ok") as url:
        wrap = anyio.run(wrapper, calls, url, backend="asyncio")
    return wrap, storm(sessions, rate, seed, hanging, repeats)


@pytest.mark.bench
def test_telemetry_costs() -> None:
    wrap, runs = run(20_000, 1000, 200, 1, False, 3)
    print(wrapper_report(wrap))
    print(storm_report(runs, 1000, 200))
    assert check(wrap, runs) == []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="telemetry costs")
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--rate", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--hanging", action="store_true", help="add a row with a collector that never answers"
    )
    parser.add_argument("--repeats", type=int, default=3, help="storm runs per mode (medians are reported)")
    parser.add_argument("--wrapper-only", action="store_true")
    args = parser.parse_args(argv)
    if args.wrapper_only:
        with collector("ok") as url:
            wrap = anyio.run(wrapper, args.calls, url, backend="asyncio")
        print(wrapper_report(wrap))
        return 0
    wrap, runs = run(args.calls, args.sessions, args.rate, args.seed, args.hanging, args.repeats)
    print(wrapper_report(wrap))
    print(storm_report(runs, args.sessions, args.rate))
    problems = check(wrap, runs)
    for problem in problems:
        print("MISSED:", problem)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
