"""The brownout on a model (docs/runtime.md, "Admission"): which retry budget keeps the share that succeeds
within 5 points of unlimited retries?

No sockets: the open-loop workload of ``bench_brownout.py`` (1,000 sessions, a call every 5 s each,
half of them failing for 60 s) as events on a fake clock, with the server_error class policy's
schedule (3 retries, 1 s base doubling, additive jitter up to 1 s) and :class:`RetryBudget`. Four
ways to spend the budget:

* ``decision``: the budget is asked when a failure comes back; refused, the operation ends (as
  shipped until the skip replaced it);
* ``throttle``: the same, plus gRPC's retry throttling (gRFC A6: a failure costs a token, a success
  returns 0.1, no retry at or below half of 10 tokens);
* ``skip``: as shipped (supervisor/rest/backoff.py, ``Backoff.wait``): the budget is asked when a retry
  comes due; a refused retry is skipped (not sent, but counted against the policy's three) and the
  operation waits for its next one;
* ``skip+throttle``: both.

Its ``decision``, ``skip`` and ``unlimited`` rows land within two points of the measured benchmark
(docs/benchmarks.md, the brownout), which is what makes the other rows worth reading.

    .venv/bin/python tests/bench/bench_brownout_model.py
"""

from __future__ import annotations

import heapq
import itertools
import random
import sys
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from machines.retry_budget import RetryBudget
from supervisor.clock import FakeClock
from tests.bench.runtime_harness import table

MODES = ("unlimited", "decision", "throttle", "skip", "skip+throttle")


@dataclass
class Operation:
    session: int
    counted: bool
    attempts: int = 0
    retries: int = 0


def run(mode: str, ratio: float, *, seed: int = 1, sessions: int = 1000) -> tuple[float, float]:
    """(amplification, % succeeded) of the operations that started in the brownout."""
    period, begin, length = 5.0, 10.0, 60.0
    rng = random.Random(seed)
    clock = FakeClock(start=0.0, epoch=0.0)
    budget = RetryBudget(clock, ratio=ratio, min_per_s=5.0, window_s=10.0)
    tokens = 10.0
    events: list[tuple[float, int, str, int]] = []
    order = itertools.count()
    for i in range(sessions):
        t = period * i / sessions
        while t < begin + length + 30.0:
            heapq.heappush(events, (t, next(order), "start", i))
            t += period
    ops: dict[int, Operation] = {}
    counted = succeeded = attempts = 0

    def allowed() -> bool:
        if mode == "unlimited":
            return True
        if "throttle" in mode and tokens <= 5.0:
            return False  # throttled: the budget is not asked, so nothing of it is spent
        return budget.allow_retry()

    def finish(key: int, ok: bool) -> None:
        nonlocal counted, succeeded, attempts
        op = ops.pop(key)
        if op.counted:
            counted += 1
            succeeded += ok
            attempts += op.attempts

    def plan(key: int, now: float) -> None:
        op = ops[key]
        if op.retries >= 3:
            finish(key, False)
            return
        delay = min(12.0, 2.0**op.retries) + rng.uniform(0.0, 1.0)
        op.retries += 1
        if mode.startswith("skip") or mode == "unlimited":
            heapq.heappush(events, (now + delay, next(order), "due", key))
        elif allowed():
            heapq.heappush(events, (now + delay, next(order), "send", key))
        else:
            finish(key, False)

    def send(key: int, now: float) -> None:
        nonlocal tokens
        op = ops[key]
        op.attempts += 1
        if op.session % 2 == 0 and begin <= now < begin + length:
            tokens = max(0.0, tokens - 1.0)
            plan(key, now)
        else:
            tokens = min(10.0, tokens + 0.1)
            finish(key, True)

    key_of = itertools.count()
    while events:
        now, _, kind, data = heapq.heappop(events)
        clock.advance(max(0.0, now - clock.monotonic()))
        if kind == "start":
            key = next(key_of)
            ops[key] = Operation(data, begin <= now < begin + length)
            budget.call()
            send(key, now)
        elif kind == "send" or allowed():
            send(data, now)
        else:
            plan(data, now)  # skipped: wait for the policy's next retry
    return attempts / counted, 100.0 * succeeded / counted


def report() -> str:
    rows = []
    base = run("unlimited", 0.1)
    rows.append(["-", "unlimited", f"{base[0]:.3f}", f"{base[1]:.1f} %", "-"])
    for ratio, mode in itertools.product((0.1, 0.15, 0.2), MODES[1:]):
        amplification, share = run(mode, ratio)
        rows.append(
            [f"{ratio:.2f}", mode, f"{amplification:.3f}", f"{share:.1f} %", f"{base[1] - share:.1f}"]
        )
    return table(["ratio", "budget", "amplification", "succeeded", "points below unlimited"], rows)


if __name__ == "__main__":
    print(report())
