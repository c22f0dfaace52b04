"""AIMD or CUBIC (docs/benchmarks.md, "AIMD or CUBIC, and the pacer's numbers": which recovers faster here), on the pacer's model alone.

Also the defaults against TCP's textbook numbers: slow start x 1.5 a second, a cut to 0.7, a 5 %
probe (the pacer's first defaults, which missed the 5,000-session storm targets) beside x 2, 0.85
and 2 % (the defaults now: every probe that finds the limit costs a Retry-After pause, so a
shallow cut and a slow probe lose less).

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
from supervisor.vocabulary import EndpointId, Platform
from tests.bench.runtime_harness import table

LIMITS = (5, 20, 50, 100, 200, 500)
SIZES = (1000, 5000)


# the pacer's first defaults (TCP's textbook numbers), against the defaults now
FIRST = PacingConfig(growth=1.5, backoff=0.7, increase=0.05)
VARIANTS = {
    "AIMD": PacingConfig(probe=Probe.AIMD),
    "CUBIC": PacingConfig(probe=Probe.CUBIC),
    "AIMD x1.5/0.7/5 %": FIRST,
}


def through(limit: int, n: int, config: PacingConfig) -> tuple[int, float]:
    """(refused, seconds) for ``n`` attempts against a ``limit`` per clock second."""
    clock = FakeClock(start=0.0, epoch=0.0)
    pacer = Pacer(EndpointId(Platform.GENESYS, "ep"), clock, config)
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


def report() -> tuple[str, dict[str, float]]:
    rows = []
    slower = dict.fromkeys(VARIANTS, 0.0)
    for limit in LIMITS:
        for n in SIZES:
            row = [str(limit), str(n), f"{n / limit:.1f}"]
            for name, config in VARIANTS.items():
                refused, seconds = through(limit, n, config)
                slower[name] += seconds / (n / limit)
                row += [f"{100 * refused / n:.1f} %", f"{seconds:.1f}"]
            rows.append(row)
    head = ["limit/s", "N", "N/limit s"]
    for name in VARIANTS:
        head += [f"{name} refused", f"{name} s"]
    return table(head, rows), slower


@pytest.mark.bench
def test_the_defaults_recover_no_slower_than_cubic_or_the_first_defaults() -> None:
    text, slower = report()
    print(text)
    assert PacingConfig().probe is Probe.AIMD
    assert slower["AIMD"] <= slower["CUBIC"]
    assert slower["AIMD"] <= slower["AIMD x1.5/0.7/5 %"]


if __name__ == "__main__":
    text, slower = report()
    print(text)
    cells = len(LIMITS) * len(SIZES)
    for name, total in slower.items():
        print(f"{name}: on average {total / cells:.2f} x N/limit")
