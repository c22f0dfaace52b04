"""How long a short command takes to start and end, beside ``python -c pass`` (docs/runtime.md, "Floors").

A monitoring script runs ``ctl status`` every few seconds: what it pays is the interpreter's start
plus what the command imports. Each command runs in a fresh process, as a script runs it
(``python -m supervisor ...``, the console script's target); rounds are interleaved (every command
once per round), so a burst of load on the shared machine hits all of them alike. Per command: the
median wall time and CPU time (user + system, of the child) over the rounds, and the median's
difference from ``python -c pass`` measured in the same run, which is what the target is about:
within 150 ms of it.

    ./dev bench -k cli_start                          # asserts the target
    .venv/bin/python tests/bench/bench_cli_start.py   # the table alone (--rounds N, default 15)

``ctl status`` and ``watch`` run with no daemon (a socket path where nothing listens): exit 1,
the path a monitoring script takes when the daemon is down, and the one that needs no daemon here.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TARGET_S = 0.150
ENVELOPE = '{"platform":"genesys","channel":"rest","status":429,"headers":{"Retry-After":"3"}}\n'


@dataclass(frozen=True)
class Command:
    name: str
    args: tuple[str, ...]
    exit_code: int = 0
    stdin: str = ""


def commands(socket: Path) -> list[Command]:
    cli = ("-m", "supervisor")
    return [
        Command("python -c pass", ("-c", "pass")),
        Command("import supervisor", ("-c", "import supervisor")),
        Command("--help", (*cli, "--help")),
        Command("ctl status (no daemon)", (*cli, "ctl", "--socket", str(socket), "status"), exit_code=1),
        Command("watch (no daemon)", (*cli, "watch", "--socket", str(socket)), exit_code=1),
        Command("classify (one envelope)", (*cli, "classify"), stdin=ENVELOPE),
        Command("taxonomy list", (*cli, "taxonomy", "list")),
    ]


@dataclass(frozen=True)
class Figures:
    wall_s: float
    cpu_s: float


def _once(python: str, command: Command) -> Figures:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(
        [python, *command.args],
        input=command.stdin,
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
        timeout=60,
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != command.exit_code:
        raise AssertionError(
            f"{command.name}: exit {done.returncode}, expected {command.exit_code}: {done.stderr}"
        )
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Figures(wall, cpu)


def measure(python: str = sys.executable, rounds: int = 15) -> dict[str, Figures]:
    """The median wall and CPU seconds of each command over ``rounds`` interleaved rounds."""
    with tempfile.TemporaryDirectory() as tmp:
        runs = commands(Path(tmp) / "nobody-listens.sock")
        for command in runs:  # warm the file cache and the bytecode cache first, unmeasured
            _once(python, command)
        samples: dict[str, list[Figures]] = {c.name: [] for c in runs}
        for _ in range(rounds):
            for command in runs:
                samples[command.name].append(_once(python, command))
    return {
        name: Figures(statistics.median(f.wall_s for f in runs), statistics.median(f.cpu_s for f in runs))
        for name, runs in samples.items()
    }


def report(results: dict[str, Figures], rounds: int) -> str:
    base = results["python -c pass"]
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    lines = [
        f"{rounds} rounds, median; load average {load}; {os.cpu_count()} CPUs; Python {sys.version.split()[0]}",
        f"{'command':26} {'wall ms':>8} {'Δ wall ms':>10} {'CPU ms':>8} {'Δ CPU ms':>9}",
    ]
    for name, f in results.items():
        lines.append(
            f"{name:26} {1000 * f.wall_s:8.0f} {1000 * (f.wall_s - base.wall_s):10.0f} "
            f"{1000 * f.cpu_s:8.0f} {1000 * (f.cpu_s - base.cpu_s):9.0f}"
        )
    return "\n".join(lines)


@pytest.mark.bench
def test_short_commands_start_within_150_ms_of_a_bare_interpreter() -> None:
    rounds = 15
    results = measure(rounds=rounds)
    print()
    print(report(results, rounds))
    base = results["python -c pass"].wall_s
    slow = {
        name: round(1000 * (f.wall_s - base)) for name, f in results.items() if f.wall_s - base > TARGET_S
    }
    assert slow == {}, f"more than {1000 * TARGET_S:.0f} ms over python -c pass (ms): {slow}"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--python", default=sys.executable, help="the interpreter to measure")
    args = parser.parse_args(argv)
    print(report(measure(args.python, args.rounds), args.rounds))


if __name__ == "__main__":
    main()
