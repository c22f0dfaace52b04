"""Retry-wrapper overhead on a successful async call: ours beside tenacity and stamina, one run (issue 5).

Target (design.md): <= 5 us per successful call, beside tenacity (~31 us) and stamina (~24 us).

:class:`~supervisor.pipeline.RequestPipeline` is httpx-specific and has no generic
"call this coroutine" entry point, so ours is measured two ways:

* ``ours: circuit + loop`` -- the pipeline's hot path on a trivial coroutine: registry
  lookup, ``Circuit.admit()``, the call, ``record_success()`` and the retry loop around
  them (the code of ``RequestPipeline.request`` minus httpx; a retry never happens);
* ``ours: RequestPipeline.request`` -- the real pipeline around an ``httpx.MockTransport``
  request, minus the same request made directly on the same client.

tenacity and stamina wrap the trivial coroutine with 3 attempts and exponential jitter,
their documented defaults otherwise. Figures: best of 7 repeats, microseconds per call,
overhead = wrapped - bare.

    .venv/bin/python tests/bench/bench_wrapper.py [--calls 20000]
    .venv/bin/python -m pytest tests/bench/bench_wrapper.py -m bench -o addopts="" -p no:cacheprovider
"""

from __future__ import annotations

import argparse
import importlib.metadata
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import httpx
import pytest
import stamina
import tenacity

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from supervisor.clock import SystemClock
from supervisor.errors import CircuitOpenError
from supervisor.pipeline import RequestPipeline
from supervisor.runtime.circuits import CircuitRegistry
from supervisor.taxonomy import Channel, Classifier, Platform, load_taxonomy
from supervisor.transports.base import SessionContext

TARGET_US = 5.0
REPEATS = 7
Call = Callable[[], Awaitable[object]]


async def op() -> int:
    return 1


async def best_us(call: Call, calls: int) -> float:
    """Best per-call time over ``REPEATS`` runs of ``calls`` awaited calls, in microseconds."""
    best = float("inf")
    for _ in range(REPEATS):
        start = time.perf_counter_ns()
        for _ in range(calls):
            await call()
        best = min(best, (time.perf_counter_ns() - start) / calls / 1000.0)
    return best


def ours_loop() -> Call:
    registry = CircuitRegistry(SystemClock())

    async def call() -> object:
        breaker = registry.get("bench:endpoint")
        while True:
            admission = breaker.admit()
            if not admission.allowed:
                raise CircuitOpenError(breaker.circuit_id, admission.retry_in_s)
            result = await op()
            breaker.record_success(admission.probe_id)
            return result

    return call


def tenacity_call() -> Call:
    @tenacity.retry(
        stop=tenacity.stop_after_attempt(3),
        wait=tenacity.wait_exponential_jitter(initial=1, max=16),
        retry=tenacity.retry_if_exception_type(Exception),
        reraise=True,
    )
    async def call() -> object:
        return await op()

    return call


def stamina_call() -> Call:
    @stamina.retry(on=Exception, attempts=3)
    async def call() -> object:
        return await op()

    return call


async def measure(calls: int) -> dict[str, float]:
    out: dict[str, float] = {"bare": await best_us(op, calls)}
    out["ours: circuit + loop"] = await best_us(ours_loop(), calls)
    out["tenacity"] = await best_us(tenacity_call(), calls)
    out["stamina"] = await best_us(stamina_call(), calls)
    # the real pipeline around an in-memory httpx transport, minus the bare request
    clock = SystemClock()
    transport = httpx.MockTransport(lambda request: httpx.Response(200, json={"ok": True}))
    async with httpx.AsyncClient(transport=transport) as client:
        pipeline = RequestPipeline(
            client, Classifier(load_taxonomy("v1"), clock), CircuitRegistry(clock), clock
        )
        ctx = SessionContext("bench", Platform.GENESYS, Channel.REST)
        url = "http://sim.invalid/api/v2/conversations/c1"
        http_calls = max(1, calls // 10)

        async def direct() -> object:
            return await client.request("GET", url)

        async def piped() -> object:
            return await pipeline.request("GET", url, ctx=ctx, circuit="genesys:api")

        out["httpx request (bare)"] = await best_us(direct, http_calls)
        out["ours: RequestPipeline.request"] = await best_us(piped, http_calls)
    return out


def report(figures: dict[str, float]) -> str:
    bare = figures["bare"]
    http_bare = figures["httpx request (bare)"]
    versions = (
        f"tenacity {importlib.metadata.version('tenacity')}, stamina {importlib.metadata.version('stamina')}"
    )
    lines = [
        f"retry wrapper on a successful async call ({versions}); us per call, best of {REPEATS}",
        "| wrapper | us/call | overhead, us |",
        "|---|---:|---:|",
    ]
    for name in ("bare", "ours: circuit + loop", "tenacity", "stamina"):
        lines.append(f"| {name} | {figures[name]:.2f} | {figures[name] - bare:.2f} |")
    for name in ("httpx request (bare)", "ours: RequestPipeline.request"):
        lines.append(f"| {name} | {figures[name]:.2f} | {figures[name] - http_bare:.2f} |")
    lines.append(f"target: ours <= {TARGET_US:.0f} us overhead")
    return "\n".join(lines)


def overheads(figures: dict[str, float]) -> tuple[float, float]:
    return (
        figures["ours: circuit + loop"] - figures["bare"],
        figures["ours: RequestPipeline.request"] - figures["httpx request (bare)"],
    )


@pytest.mark.bench
def test_wrapper_overhead() -> None:
    figures = anyio.run(measure, 20_000, backend="asyncio")
    print(report(figures))
    loop, pipeline = overheads(figures)
    assert loop <= TARGET_US
    assert pipeline <= TARGET_US


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="retry wrapper overhead")
    parser.add_argument("--calls", type=int, default=20_000)
    args = parser.parse_args(argv)
    figures = anyio.run(measure, args.calls, backend="asyncio")
    print(report(figures))
    loop, pipeline = overheads(figures)
    return 0 if loop <= TARGET_US and pipeline <= TARGET_US else 1


if __name__ == "__main__":
    raise SystemExit(main())
