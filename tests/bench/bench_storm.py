"""Storm benchmark (seed edge case 1; docs/runtime.md, "Admission"): N sessions dropped at once, the platform admitting R/s.

Four clients side by side in one run, each against a fresh simulator subprocess
(``session-supervisor sim genesys``, refusing handshakes past R per second with 503 +
Retry-After: 1) so each client's CPU is measured alone:

* ``ours``: this daemon as configured by default: the seed's first delay U(2 s, 8 s), taxonomy
  v1, the circuit, and adaptive pacing with the endpoint-wide Retry-After (docs/runtime.md, "Admission");
* ``ours-cubic``: the same with ``[admission] probe = "cubic"`` (which probe recovers
  faster; tests/bench/bench_probe.py compares them on the model alone);
* ``ours-uncapped``: ``ours`` with ``[admission] connectsInFlight`` at its maximum (100,000), so
  nothing but the rate holds the attempts in flight: the daemon before the in-flight cap;
* ``full``: first delay U(0 s, 8 s), every v1 policy with ``full`` jitter, no pacing;
* ``immediate``: first delay 0, backoff delays 0, Retry-After ignored, no pacing (what an SDK's
  default reconnect loop does); budgets and the circuit stay as in v1;
* ``websockets``: the peer a Python user would pick: websockets' own reconnect loop
  (``async for ws in connect(...)``), one per guest, sending ``configureSession`` on each
  connection.

Per client: the simulator's peak attempts in one second and refused attempts (its own counts),
seconds from the drop until every session is connected again, sessions terminated, and the
client's CPU seconds over that period. Targets for ``ours`` at every rate: all active within
1.25 x (8 s + N / R), peak <= 1.1 x R, refused <= 5 % of N, none terminated.

    .venv/bin/python tests/bench/bench_storm.py [--sessions 1000,5000] [--rates 50,100,200,500] [--clients ours,full,immediate,websockets]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import websockets.exceptions as wsx
from websockets.asyncio.client import connect

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from supervisor.bus import EventBus
from supervisor.clock import SystemClock
from supervisor.demo.observe import Observer
from supervisor.events import CircuitClosed, CircuitHalfOpened, CircuitOpened, PacingChanged, Published
from tests.bench.runtime_harness import (
    SimProcess,
    raise_nofile,
    running_supervisor,
    table,
    taxonomy_variant,
    wait_for,
    webmessaging_config,
)

CLIENTS = ("ours", "ours-cubic", "ours-uncapped", "full", "immediate", "websockets")
# what runs when --clients is not given, and in `test_storm_targets` (./dev bench)
DEFAULT_CLIENTS = ("ours", "ours-cubic", "full", "immediate", "websockets")


@dataclass(frozen=True)
class Policy:
    name: str
    first_delay: tuple[float, float]
    jitter: str | None = None
    delay_scale: float = 1.0
    honor_retry_after: bool = True
    adaptive: bool = False
    probe: str = "aimd"
    connects_in_flight: int | None = None


POLICIES = {
    "ours": Policy("ours", (2.0, 8.0), adaptive=True),
    "ours-cubic": Policy("ours-cubic", (2.0, 8.0), adaptive=True, probe="cubic"),
    "ours-uncapped": Policy("ours-uncapped", (2.0, 8.0), adaptive=True, connects_in_flight=100_000),
    "full": Policy("full", (0.0, 8.0), jitter="full"),
    "immediate": Policy("immediate", (0.0, 0.0), delay_scale=0.0, honor_retry_after=False),
}


@dataclass
class Result:
    client: str
    sessions: int
    rate: int
    peak: int
    refused: int
    recovery_s: float | None
    terminated: int
    cpu_s: float
    active: int
    reasons: str

    def problems(self) -> list[str]:
        out = []
        bound = 1.25 * (8.0 + self.sessions / self.rate)
        if self.terminated:
            out.append(f"{self.terminated} terminated")
        if self.peak > 1.1 * self.rate:
            out.append(f"peak {self.peak}/s > {1.1 * self.rate:.0f}/s")
        if self.refused > 0.05 * self.sessions:
            out.append(f"refused {self.refused} > {0.05 * self.sessions:.0f}")
        if self.recovery_s is None or self.recovery_s > bound:
            out.append(f"all active after {self.recovery_s} s > {bound:.1f} s")
        return out


def _admission(rate: int) -> list[dict[str, Any]]:
    return [
        {"kind": "admission_limit", "endpoint": "WS /*", "params": {"rate_per_s": rate, "status": 503}},
        {"kind": "drop", "endpoint": "WS /*"},
    ]


def _totals(stats: dict[str, Any]) -> tuple[int, int]:
    totals = stats["attempts_total"].get("webmessaging", {"accepted": 0, "refused": 0})
    peak = stats["peak_attempts_per_second"].get("webmessaging", {"all": 0})["all"]
    return int(peak), int(totals["refused"])


class Timeline:
    """What to look at when a target is missed: pacing and circuit events, with the simulator's seconds."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def __call__(self, published: Published) -> None:
        event = published.event
        if isinstance(event, PacingChanged):
            row = {
                "rate": event.rate,
                "previous": event.previous,
                "reason": event.reason,
                "pause": event.paused_for_s,
            }
        elif isinstance(event, CircuitOpened | CircuitHalfOpened | CircuitClosed):
            row = {"circuit": event.name}
        else:
            return
        self.events.append({"t": round(time.time(), 3), "event": event.name, **row})

    def write(self, path: Path, stats: dict[str, Any], fault_at: float) -> None:
        rows = [
            {"t": r["t"], "accepted": r["accepted"], "refused": r["refused"]}
            for r in stats["attempts"].get("webmessaging", [])
        ]
        merged = sorted([*rows, *self.events], key=lambda r: (r["t"], "event" in r))
        with path.open("w") as out:
            for row in merged:
                out.write(json.dumps({**row, "since_drop": round(row["t"] - fault_at, 3)}) + "\n")


async def daemon_once(
    policy: Policy, sessions: int, rate: int, limit_s: float, workdir: Path, timeline: Path | None = None
) -> Result:
    taxonomy = taxonomy_variant(
        workdir,
        policy.name,
        jitter=policy.jitter,
        delay_scale=policy.delay_scale,
        honor_retry_after=policy.honor_retry_after,
    )
    with SimProcess(seed=1, start_limit_s=60.0) as sim:
        config = webmessaging_config(
            sim.urls,
            sessions,
            first_delay=policy.first_delay,
            taxonomy=taxonomy,
            adaptive=policy.adaptive,
            probe=policy.probe,
            connects_in_flight=policy.connects_in_flight,
        )
        bus = EventBus()
        clock = SystemClock()
        runners: dict[str, Any] = {}

        def connects(session_id: str) -> int:
            runner = runners.get(session_id)
            return 0 if runner is None else int(runner.connects)

        observer = Observer(clock, connects)
        bus.subscribe(observer)
        events = Timeline()
        bus.subscribe(events)
        async with (
            httpx.AsyncClient(timeout=30.0) as admin,
            running_supervisor(config, bus=bus, clock=clock, seed=1) as supervisor,
        ):
            runners.update(supervisor.runners)
            if not await wait_for(lambda: supervisor.states() == {"active": sessions}, 300.0):
                raise RuntimeError(f"{policy.name}: sessions did not all start: {supervisor.states()}")
            await sim.reset(admin)
            observer.mark_fault()
            fault_at = time.time()
            cpu0 = time.process_time()
            await sim.inject(admin, *_admission(rate))

            def settled() -> bool:
                return len(observer.disrupted) >= sessions and observer.all_survivors_active()

            await wait_for(settled, limit_s)
            cpu = time.process_time() - cpu0
            stats = await sim.stats(admin)
            peak, refused = _totals(stats)
            if timeline is not None:
                events.write(timeline / f"{policy.name}-{sessions}-{rate}.jsonl", stats, fault_at)
            states = supervisor.states()
            why = Counter(
                f"{r.termination.reason.value}/{r.termination.code}"
                for r in supervisor.runners.values()
                if r.termination is not None
            )
            recovery = observer.recovery_seconds() if settled() else None
    return Result(
        policy.name,
        sessions,
        rate,
        peak,
        refused,
        recovery,
        states.get("terminated", 0),
        cpu,
        states.get("active", 0),
        ", ".join(f"{k} {n}" for k, n in why.most_common()) or "-",
    )


async def websockets_once(sessions: int, rate: int, limit_s: float) -> Result:
    """websockets' reconnect loop, one per guest, against the same simulator and fault."""
    with SimProcess(seed=1, start_limit_s=60.0) as sim:
        url = f"{sim.urls['webmessaging']}/v1?deploymentId=bench-deployment&application=peer"
        active: set[int] = set()
        disrupted: set[int] = set()
        fault_at: list[float] = []
        recovered_at: list[float] = []

        async def guest(i: int) -> None:
            token = str(uuid.uuid4())
            frame = json.dumps(
                {
                    "action": "configureSession",
                    "token": token,
                    "deploymentId": "bench-deployment",
                    "startNew": False,
                }
            )
            async for ws in connect(
                url, open_timeout=10, ping_interval=15, ping_timeout=10, compression=None
            ):
                try:
                    await ws.send(frame)
                    while True:
                        answer = json.loads(await ws.recv())
                        if answer.get("class") == "SessionResponse":
                            break
                    active.add(i)
                    if fault_at and len(active) == sessions and not recovered_at:
                        recovered_at.append(time.monotonic())
                    await ws.wait_closed()
                except wsx.ConnectionClosed:
                    pass
                finally:
                    if i in active:
                        active.discard(i)
                        if fault_at:
                            disrupted.add(i)

        async with httpx.AsyncClient(timeout=30.0) as admin, anyio.create_task_group() as tg:
            for i in range(sessions):
                tg.start_soon(guest, i)
            if not await wait_for(lambda: len(active) == sessions, 300.0):
                raise RuntimeError(f"websockets: guests did not all connect: {len(active)}")
            await sim.reset(admin)
            fault_at.append(time.monotonic())
            cpu0 = time.process_time()
            await sim.inject(admin, *_admission(rate))
            done = await wait_for(lambda: bool(recovered_at) and len(disrupted) >= sessions, limit_s)
            cpu = time.process_time() - cpu0
            peak, refused = _totals(await sim.stats(admin))
            tg.cancel_scope.cancel()
    recovery = round(recovered_at[0] - fault_at[0], 3) if done and recovered_at else None
    return Result("websockets", sessions, rate, peak, refused, recovery, 0, cpu, len(active), "-")


def run(
    sessions: list[int], rates: list[int], clients: list[str], limit_s: float, timeline: Path | None = None
) -> list[Result]:
    raise_nofile(4 * max(sessions) + 1024)
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="bench-storm-") as tmp:
        for n in sessions:
            for rate in rates:
                for client in clients:
                    if client == "websockets":
                        result = anyio.run(websockets_once, n, rate, limit_s, backend="asyncio")
                    else:
                        result = anyio.run(
                            daemon_once,
                            POLICIES[client],
                            n,
                            rate,
                            limit_s,
                            Path(tmp),
                            timeline,
                            backend="asyncio",
                        )
                    results.append(result)
                    print(report([result]), flush=True)
    return results


def report(results: list[Result]) -> str:
    head = [
        "N",
        "rate/s",
        "client",
        "peak/s",
        "peak/rate",
        "refused",
        "all active after, s",
        "target, s",
        "terminated",
        "CPU s",
        "terminated why",
    ]
    rows = [
        [
            str(r.sessions),
            str(r.rate),
            r.client,
            str(r.peak),
            f"{r.peak / r.rate:.2f}",
            str(r.refused),
            "-" if r.recovery_s is None else f"{r.recovery_s:.1f}",
            f"{1.25 * (8.0 + r.sessions / r.rate):.1f}",
            str(r.terminated),
            f"{r.cpu_s:.2f}",
            r.reasons,
        ]
        for r in results
    ]
    return table(head, rows)


@pytest.mark.bench
def test_storm_targets() -> None:
    results = run([1000, 5000], [50, 100, 200, 500], list(DEFAULT_CLIENTS), 300.0)
    print(report(results))
    assert [(r.sessions, r.rate, r.problems()) for r in results if r.client == "ours" and r.problems()] == []


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def _clients(text: str) -> list[str]:
    names = [x for x in text.split(",") if x]
    unknown = [x for x in names if x not in CLIENTS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown client {', '.join(unknown) or '(none given)'}; known: {', '.join(CLIENTS)}"
        )
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sessions", type=_ints, default=[1000, 5000])
    parser.add_argument("--rates", type=_ints, default=[50, 100, 200, 500])
    parser.add_argument(
        "--clients",
        type=_clients,
        default=list(DEFAULT_CLIENTS),
        help=f"comma-separated, of {', '.join(CLIENTS)} (default: {','.join(DEFAULT_CLIENTS)})",
    )
    parser.add_argument("--limit", type=float, default=300.0, help="seconds to wait for recovery, per run")
    parser.add_argument(
        "--timeline",
        type=Path,
        default=None,
        help="directory to write, per daemon run, the simulator's attempts per second with the pacing and circuit events",
    )
    args = parser.parse_args(argv)
    if args.timeline is not None:
        try:
            args.timeline.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            parser.error(f"--timeline {args.timeline}: cannot make the directory: {exc.strerror}")
    results = run(args.sessions, args.rates, args.clients, args.limit, args.timeline)
    print("\n" + report(results))
    missed = [(r.sessions, r.rate, r.problems()) for r in results if r.client == "ours" and r.problems()]
    for n, rate, problems in missed:
        print(f"MISSED ours N={n} rate={rate}: " + "; ".join(problems))
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
