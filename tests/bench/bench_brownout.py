"""Brownout (docs/runtime.md, "Admission"): REST calls while the endpoint fails half of them with 503 for 60 s.

1,000 sessions each GET their own conversation every 5 s through the daemon's request pipeline
(the one retry executor: class policy ``server_error``, 3 retries, Retry-After honoured) against
the Genesys simulator in its own process, on a fixed schedule: open loop, a call starts every 5 s
whether the previous one has finished or is still retrying, as calls driven by agents' and
customers' actions do (a closed loop lets the run that retries longer start fewer calls, which
skews the share that succeeds). For 60 s the simulator answers 503 for half of the
conversations (``server_error_burst``, ``share`` 0.5: the same half every time, as a brownout
of some back ends is). Two runs side by side: with the default retry budget (retries may add 10 %
of an endpoint's calls within 10 s, plus 5 per second) and without one (unlimited: the class
policy alone); the circuit is held back in both (it would open and fail every call fast, which a
third run, with the seed's circuit on, shows). Reported for the operations that started during
the brownout: amplification (attempts / first attempts) and the share that eventually succeeded.

Targets: amplification <= 1.2 with the budget, and the share that succeeds drops by no more than
5 points against unlimited retries (a retry of a call that fails the same way again buys nothing).

    .venv/bin/python tests/bench/bench_brownout.py [--sessions 1000] [--period 5] [--brownout 60]
"""

from __future__ import annotations

import argparse
import contextvars
import itertools
import sys
import time
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import httpx
import pytest

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from supervisor.boundary import SessionContext
from supervisor.config import parse_config
from supervisor.errors import CircuitOpenError, OperationError
from supervisor.rest.hooks import AttemptDetails, NoHooks
from supervisor.runtime.collector import tuned_collector
from supervisor.runtime.wiring import Wiring
from supervisor.taxonomy import Channel, Platform
from supervisor.vocabulary import EndpointId
from tests.bench.runtime_harness import SimProcess, raise_nofile, table, wait_for

SECRET = Path("/tmp/session-supervisor-bench-secrets")


# the attempts of the operation running in this task (each operation is its own task)
_ATTEMPTS: contextvars.ContextVar[list[int]] = contextvars.ContextVar("attempts")


class Count(NoHooks):
    """Counts each operation's attempts into the cell its task set (several operations of one
    session may overlap in an open loop, so counting by session would mix them)."""

    def attempt(self, details: AttemptDetails) -> AbstractContextManager[object] | None:
        cell = _ATTEMPTS.get(None)
        if cell is not None:
            cell[0] += 1
        return None


async def run_once(
    label: str, sessions: int, period_s: float, brownout_s: float, budget: bool, circuit: bool = False
) -> dict[str, Any]:
    with SimProcess(seed=1, config={"rate_limit": 100_000_000}, start_limit_s=60.0) as sim:
        async with httpx.AsyncClient(timeout=30.0) as admin:
            ids = []
            for _ in range(sessions):
                r = await admin.post(sim.admin + "/conversations", json={})
                r.raise_for_status()
                ids.append(r.json()["id"])
            admission = {} if budget else {"retryBudgetRatio": 10.0, "retryBudgetMinPerSecond": 100000.0}
            config = parse_config(
                {
                    "platforms": {
                        "genesys": {
                            "loginUrl": sim.urls["login"],
                            "apiUrl": sim.urls["api"],
                            "clientId": "bench",
                            "clientSecretFile": str(SECRET / "genesys-secret"),
                            "webmessagingUrl": sim.urls["webmessaging"],
                            "deploymentId": "bench-deployment",
                        }
                    },
                    "admission": admission,
                    # the sessions making the calls: configured, so the HTTP connection pools are
                    # sized and sharded as the daemon sizes them for 1,000 sessions (they are not
                    # started: the benchmark makes their calls itself)
                    "sessions": [
                        {
                            "id": f"s-{i}",
                            "platform": "genesys",
                            "kind": "webmessaging",
                        }
                        for i in range(sessions)
                    ],
                    # the seed's circuit (5 consecutive failures open the endpoint for 30 s) opens within
                    # seconds when half the calls fail, and then fails every call fast, budget or not:
                    # it is held back (threshold 1000) to measure what the retry budget does, and shown
                    # on in a third run
                    "circuit": {} if circuit else {"failureThreshold": 1000},
                },
                "bench",
            )
            counter = Count()
            stats = {"operations": 0, "succeeded": 0, "attempts": 0, "in_flight": 0}
            window = {"open": False}
            async with Wiring(config, environ={}, hooks=[counter]) as wiring:

                async def operation(ctx: SessionContext, url: str, counted: bool) -> None:
                    cell = [0]
                    _ATTEMPTS.set(cell)
                    stats["in_flight"] += counted
                    pipeline = wiring.pipeline_for(Platform.GENESYS, ctx.session_id)
                    try:
                        await pipeline.request("GET", url, ctx=ctx, circuit=EndpointId.api(Platform.GENESYS))
                        ok = True
                    except (OperationError, CircuitOpenError):
                        ok = False
                    if counted:
                        stats["in_flight"] -= 1
                        stats["operations"] += 1
                        stats["succeeded"] += ok
                        stats["attempts"] += cell[0]

                async def session(i: int, tg: anyio.abc.TaskGroup) -> None:
                    ctx = SessionContext(f"s-{i}", Platform.GENESYS, Channel.REST)
                    url = f"{sim.urls['api']}/api/v2/conversations/{ids[i]}"
                    await anyio.sleep(period_s * i / sessions)  # spread the sessions over one period
                    start = anyio.current_time()
                    for k in itertools.count():
                        # open loop: each call on its own schedule, not after the previous one
                        tg.start_soon(operation, ctx, url, window["open"])
                        await anyio.sleep(max(0.0, start + (k + 1) * period_s - anyio.current_time()))

                async def progress() -> None:
                    # progress on long work, and the first thing to look at when a run stalls
                    started = time.monotonic()
                    while True:
                        await anyio.sleep(5.0)
                        print(
                            f"  {label}: {time.monotonic() - started:5.0f} s, brownout "
                            f"{'on ' if window['open'] else 'off'}, in flight {stats['in_flight']}, "
                            f"counted {stats['operations']} ({stats['succeeded']} succeeded)",
                            file=sys.stderr,
                            flush=True,
                        )

                async with anyio.create_task_group() as tg:
                    tg.start_soon(progress)
                    for i in range(sessions):
                        tg.start_soon(session, i, tg)
                    await anyio.sleep(2 * period_s)  # steady state first
                    fault = {"kind": "server_error_burst", "share": 0.5, "params": {"status": 503}}
                    injected = await sim.inject(admin, fault)
                    window["open"] = True
                    cpu0 = time.process_time()
                    await anyio.sleep(brownout_s)  # the brownout itself
                    window["open"] = False
                    await sim.clear(admin)
                    cpu = time.process_time() - cpu0
                    # the operations started in the window finish (their retries end within the
                    # class policy's budget: 3 retries, at most 12 s apart)
                    await wait_for(lambda: stats["in_flight"] == 0, 60.0)
                    unfinished = stats["in_flight"]
                    tg.cancel_scope.cancel()
            del injected
    operations = max(stats["operations"], 1)
    return {
        "run": label,
        "operations": stats["operations"],
        "attempts": stats["attempts"],
        "amplification": round(stats["attempts"] / operations, 3),
        "succeeded": round(100.0 * stats["succeeded"] / operations, 1),
        "cpu_s": round(cpu, 2),
        "unfinished": unfinished,
    }


def report(rows: list[dict[str, Any]]) -> str:
    head = ["run", "operations", "attempts", "amplification", "succeeded", "cpu_s", "unfinished"]
    return table(head, [[str(r[h]) + ("%" if h == "succeeded" else "") for h in head] for r in rows])


def measure(sessions: int, period_s: float, brownout_s: float) -> list[dict[str, Any]]:
    raise_nofile(4 * sessions + 1024)
    SECRET.mkdir(exist_ok=True)
    (SECRET / "genesys-secret").write_text("bench\n")
    with tuned_collector():  # as the daemon's process (supervisor/runtime/collector.py)
        return _runs(sessions, period_s, brownout_s)


def _runs(sessions: int, period_s: float, brownout_s: float) -> list[dict[str, Any]]:
    return [
        anyio.run(run_once, "with the budget", sessions, period_s, brownout_s, True, backend="asyncio"),
        anyio.run(run_once, "without (unlimited)", sessions, period_s, brownout_s, False, backend="asyncio"),
        anyio.run(
            run_once,
            "with the budget and the seed's circuit",
            sessions,
            period_s,
            brownout_s,
            True,
            True,
            backend="asyncio",
        ),
    ]


def problems(rows: list[dict[str, Any]]) -> list[str]:
    budget, unlimited = rows[:2]
    out = []
    if budget["amplification"] > 1.2:
        out.append(f"amplification {budget['amplification']} > 1.2")
    if unlimited["succeeded"] - budget["succeeded"] > 5.0:
        out.append(f"success share drops {unlimited['succeeded'] - budget['succeeded']:.1f} points > 5")
    return out


@pytest.mark.bench
def test_brownout() -> None:
    rows = measure(1000, 5.0, 60.0)
    print(report(rows))
    assert problems(rows) == []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--period", type=float, default=5.0)
    parser.add_argument("--brownout", type=float, default=60.0)
    args = parser.parse_args(argv)
    rows = measure(args.sessions, args.period, args.brownout)
    print(report(rows))
    missed = problems(rows)
    for problem in missed:
        print("MISSED:", problem)
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
