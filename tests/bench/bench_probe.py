"""AIMD or CUBIC (issue 15: "measure which recovers faster here"), on the pacer's model alone.

A platform admitting ``limit`` attempts per clock second and refusing the rest with Retry-After
1 s; N attempts paced by :class:`machines.pacing.Pacer` from its default 20/s start, on a fake
clock (no sockets: this isolates the probe from everything else; ``bench_storm.py`` has the
``ours-cubic`` client for the same question over real sockets). Per limit and N: the share of
attempts refused and the seconds until all N got through, against N / limit.

    .venv/bin/python tests/bench/bench_probe.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from machines.pacing import Pacer, PacingConfig, Probe
from supervisor.clock import FakeClock
from tests.bench.runtime_harness import table

LIMITS = (5, 20, 50, 100, 200, 500)
SIZES = (1000, 5000)


def through(limit: int, n: int, probe: Probe) -> tuple[int, float]:
    """(refused, seconds) for ``n`` attempts against a ``limit`` per clock second."""
    clock = FakeClock(start=0.0, epoch=0.0)
    pacer = Pacer("ep", clock, PacingConfig(probe=probe))
    window, used = -1, 0
    refused = admitted = 0
    while admitted < n:
        wait, booked = pacer.reserve()
        clock.advance(wait)
        if not booked:
            continue
        second = int(clock.time())
        if second != window:
            window, used = second, 0
        if used < limit:
            used += 1
            admitted += 1
            pacer.admitted()
        else:
            refused += 1
            pacer.throttled(1.0)
    return refused, clock.monotonic()


def report() -> tuple[str, dict[Probe, float]]:
    rows = []
    slower = dict.fromkeys(Probe, 0.0)
    for limit in LIMITS:
        for n in SIZES:
            row = [str(limit), str(n), f"{n / limit:.1f}"]
            for probe in Probe:
                refused, seconds = through(limit, n, probe)
                slower[probe] += seconds / (n / limit)
                row += [f"{100 * refused / n:.1f} %", f"{seconds:.1f}"]
            rows.append(row)
    head = ["limit/s", "N", "N/limit s", "AIMD refused", "AIMD s", "CUBIC refused", "CUBIC s"]
    return table(head, rows), slower


@pytest.mark.bench
def test_aimd_is_the_default_because_it_recovers_no_slower() -> None:
    text, slower = report()
    print(text)
    assert PacingConfig().probe is Probe.AIMD
    assert slower[Probe.AIMD] <= slower[Probe.CUBIC]


if __name__ == "__main__":
    text, slower = report()
    print(text)
    cells = len(LIMITS) * len(SIZES)
    for probe, total in slower.items():
        print(f"{probe.value}: on average {total / cells:.2f} x N/limit")
