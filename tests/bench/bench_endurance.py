"""Endurance: one daemon holding 5,000 Web Messaging and 2,000 CXone sessions for ten minutes.

Two runs, each against both simulators in their own processes (so the daemon's CPU and memory
are its own), sessions at the default settings (pings every 15 s, echo every 30 s, CXone long
polls of 30 s):

* **steady**: ten minutes with no fault. Reports terminated sessions (target 0), the daemon's CPU
  over the window (per session and as a share of one core) and its memory per session (RSS delta
  after every session became active, divided by the sessions).
* **outage**: after a minute of steady state, both platforms go down for ten minutes (every
  WebSocket dropped and new handshakes left unanswered; every CXone request held unanswered; the
  Genesys REST API and token endpoint answering 503), then come back. Reports terminated sessions
  (target 0) and the time from the platforms' return until every session is active again. The
  reconnection horizon is set to 720 s for this run: the horizon runs from the loss to the return
  of a session, so a ten-minute outage needs a horizon past ten minutes plus the recovery (with
  the default 600 s a session lost for 600 s is, by design, given up).

    .venv/bin/python tests/bench/bench_endurance.py [--wm 5000] [--cxone 2000] [--minutes 10] [--only steady|outage]
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from supervisor.bus import EventBus
from supervisor.config import Config, parse_config
from tests.bench.runtime_harness import (
    SimProcess,
    raise_nofile,
    rss_bytes,
    running_supervisor,
    table,
    wait_for,
)

SECRETS = Path("/tmp/session-supervisor-bench-secrets")


def fleet_config(genesys: dict[str, str], cxone: dict[str, str], wm: int, cx: int, horizon: float) -> Config:
    SECRETS.mkdir(exist_ok=True)
    (SECRETS / "cx-secret").write_text("bench-secret\n")
    (SECRETS / "cx-password").write_text("bench-password\n")
    sessions: list[dict[str, Any]] = [
        {"id": f"wm-{i:05d}", "platform": "genesys", "kind": "webmessaging"} for i in range(wm)
    ]
    sessions += [
        {
            "id": f"cx-{i:05d}",
            "platform": "cxone",
            "kind": "agent-session",
            "agentId": str(300001 + i),
            "stationPhoneNumber": f"55{i:05d}",
        }
        for i in range(cx)
    ]
    data: dict[str, Any] = {
        "platforms": {
            "genesys": {
                "loginUrl": genesys["login"],
                "apiUrl": genesys["api"],
                "webmessagingUrl": genesys["webmessaging"],
                "deploymentId": "bench-deployment",
            },
            "cxone": {
                "authUrl": cxone["auth"],
                "clientId": "bench-app@bench-vendor",
                "clientSecretFile": str(SECRETS / "cx-secret"),
                "username": "bench.agent@example.com",
                "passwordFile": str(SECRETS / "cx-password"),
            },
        },
        "sessions": sessions,
        "daemon": {"seed": 1},
        "reconnect": {"horizon": horizon},
    }
    return parse_config(data, "bench")


def states_of(supervisor: Any) -> dict[str, int]:
    return dict(supervisor.states())


async def run_once(mode: str, wm: int, cx: int, minutes: float) -> dict[str, Any]:
    total = wm + cx
    window_s = minutes * 60.0
    horizon = 600.0 if mode == "steady" else window_s + 120.0
    with (
        SimProcess(seed=1, kind="genesys", start_limit_s=60.0) as genesys,
        SimProcess(seed=1, kind="cxone", start_limit_s=60.0) as cxone,
    ):
        config = fleet_config(genesys.urls, cxone.urls, wm, cx, horizon)
        bus = EventBus()
        gc.collect()
        before = rss_bytes()
        async with (
            httpx.AsyncClient(timeout=60.0) as admin,
            running_supervisor(config, bus=bus, seed=1) as supervisor,
        ):
            t0 = time.monotonic()
            if not await wait_for(lambda: states_of(supervisor).get("active", 0) == total, 600.0, poll_s=0.5):
                why = Counter(
                    f"{r.termination.reason.value}/{r.termination.code}"
                    for r in supervisor.runners.values()
                    if r.termination is not None
                )
                raise RuntimeError(
                    f"not all sessions became active: {states_of(supervisor)}; terminated: {dict(why)}"
                )
            startup_s = time.monotonic() - t0
            await anyio.sleep(2.0)  # handshake buffers settle before memory is read
            gc.collect()
            after = rss_bytes()
            out: dict[str, Any] = {
                "mode": mode,
                "sessions": total,
                "startup_s": round(startup_s, 1),
                "kib_per_session": round((after - before) / total / 1024, 1),
            }
            cpu0 = time.process_time()
            if mode == "steady":
                await anyio.sleep(window_s)  # the endurance window itself
                cpu = time.process_time() - cpu0
                out["cpu_s"] = round(cpu, 1)
                out["cpu_percent_of_core"] = round(cpu / window_s * 100.0, 2)
                out["cpu_us_per_session_s"] = round(cpu / window_s / total * 1e6, 2)
            else:
                await anyio.sleep(60.0)  # a minute of steady state first
                await genesys.inject(
                    admin,
                    {"kind": "drop", "count": wm},
                    {"kind": "blackhole"},
                    {"kind": "server_error_burst", "params": {"status": 503}},
                )
                await cxone.inject(admin, {"kind": "blackhole"})
                await anyio.sleep(window_s)  # the outage itself
                out["active_during_outage"] = states_of(supervisor).get("active", 0)
                await genesys.clear(admin)
                await cxone.clear(admin)
                back = time.monotonic()
                recovered = await wait_for(
                    lambda: (
                        states_of(supervisor).get("active", 0) + states_of(supervisor).get("terminated", 0)
                        == total
                    ),
                    600.0,
                    poll_s=0.5,
                )
                out["all_back_after_s"] = round(time.monotonic() - back, 1) if recovered else None
                out["cpu_s"] = round(time.process_time() - cpu0, 1)
            states = states_of(supervisor)
            out["terminated"] = states.get("terminated", 0)
            out["active_at_end"] = states.get("active", 0)
            why = Counter(
                f"{r.termination.reason.value}/{r.termination.code}"
                for r in supervisor.runners.values()
                if r.termination is not None
            )
            out["terminated_why"] = ", ".join(f"{k} {n}" for k, n in why.most_common()) or "-"
            out["events"] = bus.seq
    return out


def report(rows: list[dict[str, Any]]) -> str:
    columns = [
        "mode",
        "sessions",
        "startup_s",
        "kib_per_session",
        "cpu_s",
        "cpu_percent_of_core",
        "cpu_us_per_session_s",
        "active_during_outage",
        "all_back_after_s",
        "terminated",
        "active_at_end",
        "terminated_why",
        "events",
    ]
    return table(columns, [[str(r.get(c, "-")) for c in columns] for r in rows])


@pytest.mark.bench
def test_endurance() -> None:
    raise_nofile(65536)
    rows = [anyio.run(run_once, mode, 5000, 2000, 10.0, backend="asyncio") for mode in ("steady", "outage")]
    print(report(rows))
    assert all(r["terminated"] == 0 for r in rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="endurance and outage of a daemon holding many sessions")
    parser.add_argument("--wm", type=int, default=5000)
    parser.add_argument("--cxone", type=int, default=2000)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--only", choices=("steady", "outage"))
    args = parser.parse_args(argv)
    raise_nofile(65536)
    modes = [args.only] if args.only else ["steady", "outage"]
    rows = []
    for mode in modes:
        rows.append(anyio.run(run_once, mode, args.wm, args.cxone, args.minutes, backend="asyncio"))
        print(report(rows[-1:]), flush=True)
    print(report(rows))
    return 0 if all(r["terminated"] == 0 for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
