"""Benchmark of the machines (docs/machines.md): cost per transition and memory per machine at 10,000.

Run as a script (figures go to docs/benchmarks.md, section "Machines")::

    python tests/bench/bench_machines.py                     # the installed python-statemachine
    python tests/bench/bench_machines.py --compare /tmp/sm26/bin/python
                                                              # side by side with another interpreter
                                                              # (e.g. a venv with python-statemachine 2.6)

or through pytest, which asserts our targets (<= 100 us per transition,
<= 12 KiB per session machine)::

    pytest tests/bench/bench_machines.py -m bench -p no:cacheprovider

Method: time.perf_counter over N full cycles, best of 5 repeats; memory with tracemalloc
as the growth of traced memory while 10,000 instances are alive, divided by 10,000.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

try:
    import pytest
except ImportError:  # the script also runs in a bare venv used only for comparison
    pytest = None  # type: ignore[assignment]

from machines.circuit import Circuit, CircuitMachine
from machines.session import SessionCore, SessionMachine
from supervisor.clock import FakeClock
from supervisor.taxonomy.model import RetryPolicy, Scope, SdkErrorEvent, TaxonomyClass

INSTANCES = 10_000
CYCLES = 2_000
REPEATS = 5
TARGET_US_PER_TRANSITION = 100.0
TARGET_KIB_PER_SESSION = 12.0

_POLICY = RetryPolicy(name="websocket-reconnect", max_retries=10, base_delay_ms=1000, max_delay_ms=30_000)


def _event(cls: TaxonomyClass = TaxonomyClass.TRANSIENT, code: str = "ABNORMAL_CLOSURE") -> SdkErrorEvent:
    return SdkErrorEvent(
        timestamp="2024-05-14T09:32:11.004Z",
        source="GENESYS_WEB_MESSAGING_V4",
        raw_status=None,
        raw_code="1006",
        taxonomy_class=cls,
        retryable=cls is TaxonomyClass.TRANSIENT,
        max_retry_budget=_POLICY.max_retries,
        context={"conversationId": "conv-88472910", "agentId": "agent-19283"},
        code=code,
        scope=Scope.SESSION,
        taxonomy_version="bench",
        policy=_POLICY,
        reconnect=True,
    )


def _best_of(fn: Callable[[], None], repeats: int = REPEATS) -> float:
    best = float("inf")
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def bench_raw_machine_us() -> float:
    """One python-statemachine send, no driver: active → reconnecting → connecting → active."""
    sm = SessionMachine()
    sm.send("validated")
    send = sm.send

    def run() -> None:
        for _ in range(CYCLES):
            send("connection_lost")
            send("reconnect")
            send("validated")

    return _best_of(run) / (CYCLES * 3) * 1e6


def bench_session_us() -> float:
    """SessionCore end to end (routing, backoff, effects, timestamps): 3 transitions per cycle."""
    clock = FakeClock()
    core = SessionCore("bench", clock, random.Random(7))
    core.session_response(None)
    drop = _event()

    def run() -> None:
        for _ in range(CYCLES):
            core.failure(drop)
            core.reconnect_due(None)
            core.session_response(None)

    return _best_of(run) / (CYCLES * 3) * 1e6


def bench_circuit_us() -> float:
    """Circuit trip → probe → close: 3 transitions plus 5 counted failures per cycle."""
    clock = FakeClock()
    circuit = Circuit("bench", clock, random.Random(7))
    failure = _event()

    def run() -> None:
        for _ in range(CYCLES):
            for _ in range(5):
                circuit.record_failure(failure)
            clock.advance(30.0)
            admission = circuit.admit()
            circuit.record_success(admission.probe_id)

    return _best_of(run) / (CYCLES * 3) * 1e6


def bench_admit_closed_ns() -> float:
    """The hot path: admit() on a closed circuit plus record_success() with nothing to reset."""
    circuit = Circuit("bench", FakeClock(), random.Random(7))
    admit, success = circuit.admit, circuit.record_success
    n = CYCLES * 50

    def run() -> None:
        for _ in range(n):
            admit()
            success()

    return _best_of(run) / n * 1e9


def kib_per_instance(factory: Callable[[int], object], n: int = INSTANCES) -> float:
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        alive = [factory(i) for i in range(n)]
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    del alive
    return (after - before) / n / 1024


def measure() -> dict[str, Any]:
    clock = FakeClock()
    rng = random.Random(7)
    ids = [f"session-{i:05d}" for i in range(INSTANCES)]
    return {
        "python_statemachine": version("python-statemachine"),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "raw_machine_us_per_transition": bench_raw_machine_us(),
        "session_us_per_transition": bench_session_us(),
        "circuit_us_per_transition": bench_circuit_us(),
        "circuit_closed_admit_success_ns": bench_admit_closed_ns(),
        "session_machine_kib": kib_per_instance(lambda i: SessionMachine()),
        "session_core_kib": kib_per_instance(lambda i: SessionCore(ids[i], clock, rng)),
        "circuit_kib": kib_per_instance(lambda i: Circuit(ids[i], clock, rng)),
        "circuit_machine_kib": kib_per_instance(lambda i: CircuitMachine()),
    }


_ROWS = (
    ("python_statemachine", "python-statemachine", "{}"),
    ("raw_machine_us_per_transition", "raw machine send, µs/transition", "{:.1f}"),
    ("session_us_per_transition", "SessionCore, µs/transition (all-in)", "{:.1f}"),
    ("circuit_us_per_transition", "Circuit trip/probe/close, µs/transition", "{:.1f}"),
    ("circuit_closed_admit_success_ns", "closed admit()+record_success(), ns", "{:.0f}"),
    ("session_machine_kib", "SessionMachine alone, KiB/instance @10k", "{:.2f}"),
    ("session_core_kib", "SessionCore (driver+machine), KiB/instance @10k", "{:.2f}"),
    ("circuit_kib", "Circuit (driver+machine), KiB/instance @10k", "{:.2f}"),
)


def _table(results: list[dict[str, Any]]) -> str:
    head = "| measure | " + " | ".join(f"psm {r['python_statemachine']}" for r in results) + " |"
    lines = [head, "|---|" + "---:|" * len(results)]
    for key, label, fmt in _ROWS[1:]:
        lines.append(f"| {label} | " + " | ".join(fmt.format(r[key]) for r in results) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument(
        "--compare",
        action="append",
        default=[],
        metavar="PYTHON",
        help="also run under this interpreter (with machines/ on PYTHONPATH) and show side by side",
    )
    args = parser.parse_args(argv)
    results = [measure()]
    root = str(Path(__file__).resolve().parents[2])
    for python in args.compare:
        env = {**os.environ, "PYTHONPATH": root}
        out = subprocess.run(
            [python, __file__, "--json"], check=True, capture_output=True, text=True, env=env, cwd=root
        )
        results.append(json.loads(out.stdout))
    if args.json:
        print(json.dumps(results[0] if not args.compare else results))
        return 0
    print(
        f"python {results[0]['python']}, {results[0]['cpus']} CPUs, {INSTANCES} instances, "
        f"best of {REPEATS} x {CYCLES} cycles"
    )
    print(_table(results))
    return 0


# -- pytest entry points (tests/bench is not in the default run) ------------------------------


def test_session_transition_cost_within_target() -> None:
    cost = bench_session_us()
    print(f"SessionCore: {cost:.1f} µs per transition")
    assert cost <= TARGET_US_PER_TRANSITION


def test_session_memory_within_target() -> None:
    clock, rng = FakeClock(), random.Random(7)
    kib = kib_per_instance(lambda i: SessionCore(f"s{i}", clock, rng))
    print(f"SessionCore: {kib:.2f} KiB per instance at {INSTANCES}")
    assert kib <= TARGET_KIB_PER_SESSION


def test_circuit_transition_cost_within_target() -> None:
    assert bench_circuit_us() <= TARGET_US_PER_TRANSITION


if pytest is not None:
    pytestmark = pytest.mark.bench


if __name__ == "__main__":
    sys.exit(main())
