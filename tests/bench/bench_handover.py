"""Handover restart benchmark (docs/runtime.md, "Lifecycle"): a daemon holding thousands of sessions, SIGTERM, start again.

Everything runs as an operator has it: both simulators in their own processes
(``session-supervisor sim genesys`` and ``sim cxone``), the daemon as a process
(``python -m supervisor run --config ...``) with a real SQLite store, stopped with SIGTERM (a stop with a
store hands every session over), then a second ``run`` on the same configuration and store, which takes
the sessions over. The Genesys simulator admits at most ``--rate`` WebSocket handshakes per second
(more are refused with 503 + Retry-After: 1), through both starts.

Counted at the simulators, from the moment the first daemon had every session active (their records):

* CXone: ``POST agent-sessions`` (a start), ``POST agent-sessions/join``, any DELETE (an ended session);
* Genesys: guest sessions answered ``newSession: true`` / ``false``, handshakes per second (accepted and
  refused) and the busiest second.

Timed at the second daemon (its control socket's ``Status``, polled): from its spawn until every session
is active. Targets: no agent session ended or started anew, no guest answered ``newSession: true``, all
active within 1.25 x (8 s + N / rate), peak <= 1.1 x rate. N is every session the takeover brings back,
guests and agent sessions alike (7,000 at full size: 53.8 s at 200/s). Only the guests' handshakes are
paced connection attempts (an agent session taken over is polled on, and a poll is not one: docs/runtime.md,
"Admission"), so N = the guests alone (41.2 s) is a stricter reading, printed beside it. The rate is
the platform's limit set at the simulator: the first daemon starts at ``admission.initialRate`` (20/s)
and grows by slow start until the platform refuses; the limit it learned is kept in the store, and the
second daemon's slow start stops below it (docs/runtime.md, "A restart starts from the limit it learned").
The timeline has both daemons' PACING_CHANGED lines.

    .venv/bin/python tests/bench/bench_handover.py [--wm 5000] [--cxone 2000] [--rate 200] [--timeline DIR]

``--profile FILE`` samples the second daemon with py-spy (``pip install py-spy``; not a dependency: off by
default, and the sampler takes CPU from the same cores) from its spawn until every session is active, raw
stacks of the thread holding the interpreter's lock (``--gil``): where the take-over's CPU goes.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from supervisor.api.protocol import Method
from supervisor.errors import ApiError, ApiUnavailable
from tests.bench.runtime_harness import SimProcess, raise_nofile, table
from tests.harness.config import Credentials, config_file
from tests.harness.process import Daemon, running_daemon

# the route templates the CXone simulator records (supervisor/sim/cxone/routing.py)
START = "/inContactAPI/services/v{N}.0/agent-sessions"
JOIN = "/inContactAPI/services/v{N}.0/agent-sessions/join"
LISTENER = "webmessaging"


def fleet_toml(
    genesys: dict[str, str],
    cxone: dict[str, str],
    workdir: Path,
    wm: int,
    cx: int,
    on_stop: str,
    initial_rate: float | None = None,
) -> Path:
    """The daemon's configuration: the defaults but for the sockets, the store and the platforms' URLs
    (``handover.onStop``; ``admission.initialRate`` when given)."""
    sockets = workdir / "sockets"
    sockets.mkdir(exist_ok=True)
    lines = [
        "[daemon]",
        "seed = 1",
        "[sockets]",
        f'subscribe = "{sockets / "subscribe.sock"}"',
        f'control = "{sockets / "control.sock"}"',
        "[store]",
        f'path = "{workdir / "store.sqlite3"}"',
        "[handover]",
        f'onStop = "{on_stop}"',
        *(["[admission]", f"initialRate = {initial_rate}"] if initial_rate is not None else []),
        "[platforms.genesys]",
        f'loginUrl = "{genesys["login"]}"',
        f'apiUrl = "{genesys["api"]}"',
        f'webmessagingUrl = "{genesys["webmessaging"]}"',
        'deploymentId = "bench-deployment"',
        "[platforms.cxone]",
        f'authUrl = "{cxone["auth"]}"',
        'clientId = "bench-app@bench-vendor"',
        'clientSecretFile = "cxone-secret"',
        'username = "bench.agent@example.com"',
        'passwordFile = "cxone-password"',
    ]
    for i in range(wm):
        lines += ["[[sessions]]", f'id = "wm-{i:05d}"', 'platform = "genesys"', 'kind = "webmessaging"']
    for i in range(cx):
        lines += [
            "[[sessions]]",
            f'id = "cx-{i:05d}"',
            'platform = "cxone"',
            'kind = "agent-session"',
            f'agentId = "{300001 + i}"',
            f'stationPhoneNumber = "55{i:05d}"',
        ]
    return config_file(workdir, "\n".join(lines) + "\n", Credentials(genesys=None))


def _count(stats: dict[str, Any], method: str, endpoint: str | None = None) -> int:
    return sum(
        r["count"]
        for r in stats["requests"]
        if r["method"] == method and (endpoint is None or r["endpoint"] == endpoint)
    )


def _configured(stats: dict[str, Any], new: bool) -> int:
    return sum(
        e["count"] for e in stats["events"] if e["event"] == "session_configured" and e["newSession"] is new
    )


async def _active(daemon: Daemon) -> int:
    try:
        status = await daemon.acall(Method.STATUS)
    except (ApiUnavailable, ApiError):
        return -1
    return int(status["sessions"]["byState"].get("active", 0))


async def _until_active(daemon: Daemon, total: int, limit_s: float) -> float | None:
    """Seconds until ``total`` sessions are active (polling the control socket), None after ``limit_s``."""
    started = time.monotonic()
    with anyio.move_on_after(limit_s):
        while await _active(daemon) < total:
            if daemon.process.returncode is not None:
                raise RuntimeError(f"the daemon exited {daemon.process.returncode}: {daemon.err[-500:]}")
            await anyio.sleep(0.1)  # sampling a daemon under load: there is no event to await
        return time.monotonic() - started
    return None


@dataclass
class Result:
    wm: int
    cx: int
    rate: int
    first_start_s: float = 0.0
    stop_s: float = 0.0
    stop_code: int | None = None
    handed_over: int = 0
    takeover_s: float | None = None
    since_sigterm_s: float | None = None
    starts: int = 0
    joins: int = 0
    deletes: int = 0
    new_guests: int = 0
    resumed_guests: int = 0
    peak: int = 0
    accepted: int = 0
    refused: int = 0
    terminated: int = 0
    reconciled: int = 0
    load: str = ""
    #: the second daemon's CPU (user + system) from its spawn until every session was active: what the
    #: take-over cost its one process, whatever else the machine ran meanwhile
    takeover_cpu_s: float | None = None
    #: seconds from the second daemon's spawn to the last guest / agent session going active (its event lines)
    guests_active_s: float | None = None
    agents_active_s: float | None = None
    #: the Genesys simulator's own loop stalls over the take-over (GET /stats's loop_stalls): the
    #: judge of the peak; attempts sent during one are stamped together after it
    sim_stalls: int = 0
    sim_longest_stall_s: float = 0.0
    timeline: list[dict[str, Any]] = field(default_factory=list)

    @property
    def bound_s(self) -> float:
        """The target: 1.25 x (8 s + N / rate), N every session taken over."""
        return 1.25 * (8.0 + (self.wm + self.cx) / self.rate)

    @property
    def guests_bound_s(self) -> float:
        """The stricter reading: N the guests' paced handshakes alone."""
        return 1.25 * (8.0 + self.wm / self.rate)

    def problems(self) -> list[str]:
        out = []
        if self.starts or self.joins or self.deletes:
            out.append(f"agent sessions: {self.starts} started, {self.joins} joined, {self.deletes} deleted")
        if self.new_guests:
            out.append(f"{self.new_guests} guests answered newSession: true")
        if self.resumed_guests < self.wm:
            out.append(f"{self.resumed_guests} of {self.wm} guests resumed")
        if self.takeover_s is None or self.takeover_s > self.bound_s:
            out.append(f"all active after {self.takeover_s} s > {self.bound_s:.1f} s")
        if self.peak > 1.1 * self.rate:
            out.append(f"peak {self.peak}/s > {1.1 * self.rate:.0f}/s")
        if self.terminated or self.reconciled:
            out.append(f"{self.terminated} terminated, {self.reconciled} reconciled at the takeover")
        if self.handed_over != self.wm + self.cx or self.stop_code != 0:
            out.append(f"the stop handed over {self.handed_over} and exited {self.stop_code}")
        return out


def _epoch(timestamp: str) -> float:
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


def _last_active(records: list[dict[str, Any]], prefix: str, epoch0: float) -> float | None:
    """Seconds from ``epoch0`` to the last ``prefix*`` session's transition to active (its event line)."""
    times = [
        _epoch(r["timestamp"])
        for r in records
        if r.get("event") == "SESSION_TRANSITION"
        and r["to"] == "active"
        and r["machineId"].startswith(prefix)
    ]
    return round(max(times) - epoch0, 1) if times else None


def _active_per_second(records: list[dict[str, Any]], epoch0: float) -> list[dict[str, Any]]:
    """Sessions going active per second since ``epoch0``, guests and agent sessions apart (event lines)."""
    counts: Counter[tuple[int, str]] = Counter()
    for r in records:
        if r.get("event") == "SESSION_TRANSITION" and r["to"] == "active":
            second = int(_epoch(r["timestamp"]) - epoch0)
            counts[(second, "guests" if r["machineId"].startswith("wm-") else "agents")] += 1
    seconds = sorted({s for s, _ in counts})
    return [
        {"second": s, "guests_active": counts[(s, "guests")], "agents_active": counts[(s, "agents")]}
        for s in seconds
    ]


def _pacing(records: list[dict[str, Any]], daemon: str) -> list[dict[str, Any]]:
    """A daemon's PACING_CHANGED lines for the timeline, said to be the ``first`` or ``second`` one's."""
    keys = ("timestamp", "endpoint", "rate", "previous", "reason")
    return [{"event": "PACING_CHANGED", "daemon": daemon, **{k: r.get(k) for k in keys}} for r in records]


def _cpu_s(pid: int) -> float | None:
    """A process's CPU time so far (user + system, seconds) from /proc; None where there is none."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    # proc(5): utime and stime are fields 14 and 15, in clock ticks (the 3rd and 4th after ") state ppid ...")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def _profiler(pid: int, out: Path) -> subprocess.Popen[bytes]:
    """py-spy sampling ``pid`` (100 Hz, raw stacks of the thread holding the GIL, without pausing it) into
    ``out`` until interrupted."""
    exe = shutil.which("py-spy")
    if exe is None:
        raise RuntimeError("--profile needs py-spy on PATH")
    command = [exe, "record", "--pid", str(pid), "--rate", "100", "--format", "raw", "--nonblocking", "--gil"]
    return subprocess.Popen([*command, "--output", str(out)], stdout=subprocess.DEVNULL)


def _end_profiler(profiler: subprocess.Popen[bytes]) -> None:
    """Interrupt py-spy (it writes its file on SIGINT) and wait for it."""
    profiler.send_signal(signal.SIGINT)
    try:
        profiler.wait(timeout=60)
    except subprocess.TimeoutExpired:
        profiler.kill()
        profiler.wait()


async def restart_once(
    wm: int,
    cx: int,
    rate: int,
    limit_s: float,
    on_stop: str,
    initial_rate: float | None,
    profile: Path | None = None,
) -> Result:
    stop_limit_s = 900.0  # measured, not bounded: the stop's own duration is a figure
    total = wm + cx
    result = Result(wm, cx, rate)
    with (
        SimProcess(seed=1, kind="genesys", start_limit_s=60.0) as genesys,
        SimProcess(seed=1, kind="cxone", start_limit_s=60.0) as cxone,
        tempfile.TemporaryDirectory(prefix="ss-hob-", dir="/tmp") as tmp,
    ):
        config = fleet_toml(genesys.urls, cxone.urls, Path(tmp), wm, cx, on_stop, initial_rate)
        async with httpx.AsyncClient(timeout=60.0) as admin:
            limit = {"rate_per_s": rate, "status": 503}
            await genesys.inject(admin, {"kind": "admission_limit", "endpoint": "WS /*", "params": limit})
            async with running_daemon(config) as first:
                started = await _until_active(first, total, limit_s)
                if started is None:
                    raise RuntimeError(f"the first daemon did not start every session in {limit_s} s")
                result.first_start_s = started
                await genesys.reset(admin)
                await cxone.reset(admin)
                sigterm = time.monotonic()
                result.stop_code = await first.stop(limit_s=stop_limit_s)
                result.stop_s = time.monotonic() - sigterm
            result.handed_over = len(first.named("SESSION_HANDED_OVER"))
            # the first start's pace: what it learned of the limit is what the second starts from
            first_pacing = _pacing(first.named("PACING_CHANGED"), "first")
            result.load = _load()
            async with running_daemon(config) as second:
                epoch0 = time.time()
                profiler = None if profile is None else _profiler(second.process.pid, profile)
                try:
                    result.takeover_s = await _until_active(second, total, limit_s)
                    result.takeover_cpu_s = _cpu_s(second.process.pid)
                finally:
                    if profiler is not None:
                        await anyio.to_thread.run_sync(_end_profiler, profiler)
                if result.takeover_s is not None:
                    result.since_sigterm_s = time.monotonic() - sigterm
                g = await genesys.stats(admin)
                c = await cxone.stats(admin)
                result.guests_active_s = _last_active(second.records, "wm-", epoch0)
                result.agents_active_s = _last_active(second.records, "cx-", epoch0)
                result.terminated = len(second.named("SESSION_TERMINATED"))
                result.reconciled = len(second.named("SESSION_RECONCILED"))
                pacing = first_pacing + _pacing(second.named("PACING_CHANGED"), "second")
                assert await second.stop(limit_s=stop_limit_s) == 0
    result.starts = _count(c, "POST", START)
    result.joins = _count(c, "POST", JOIN)
    result.deletes = _count(c, "DELETE")
    result.new_guests = _configured(g, True)
    result.resumed_guests = _configured(g, False)
    rows = g["attempts"].get(LISTENER, [])
    result.accepted = sum(r["accepted"] for r in rows)
    result.refused = sum(r["refused"] for r in rows)
    result.peak = int(g["peak_attempts_per_second"].get(LISTENER, {"all": 0})["all"])
    stalls = g["loop_stalls"]
    result.sim_stalls, result.sim_longest_stall_s = stalls["count"], stalls["longest_s"]
    result.timeline = (
        [
            {"since_spawn": round(r["t"] - epoch0, 1), "accepted": r["accepted"], "refused": r["refused"]}
            for r in rows
        ]
        + _active_per_second(second.records, epoch0)
        + pacing
        + [{"since_spawn": round(t - epoch0, 2), "simulator_stalled_s": s} for t, s in stalls["recent"]]
    )
    return result


def report(results: list[Result]) -> str:
    head = [
        "CXone + guests",
        "rate/s",
        "handed over",
        "stop, s",
        "POST agent-sessions",
        "join",
        "DELETE",
        "newSession true",
        "newSession false",
        "all active after, s",
        "daemon CPU, s",
        "last guest / agent active, s",
        "target (guests only), s",
        "peak/s",
        "refused",
        "simulator stalls (longest, s)",
        "load avg",
    ]
    rows = [
        [
            f"{r.cx} + {r.wm}",
            str(r.rate),
            str(r.handed_over),
            f"{r.stop_s:.1f}",
            str(r.starts),
            str(r.joins),
            str(r.deletes),
            str(r.new_guests),
            str(r.resumed_guests),
            "-" if r.takeover_s is None else f"{r.takeover_s:.1f}",
            "-" if r.takeover_cpu_s is None else f"{r.takeover_cpu_s:.1f}",
            f"{r.guests_active_s} / {r.agents_active_s}",
            f"{r.bound_s:.1f} ({r.guests_bound_s:.1f})",
            str(r.peak),
            str(r.refused),
            f"{r.sim_stalls} ({r.sim_longest_stall_s:.2f})",
            r.load,
        ]
        for r in results
    ]
    return table(head, rows)


def run(
    wm: int,
    cx: int,
    rate: int,
    limit_s: float,
    timeline: Path | None,
    on_stop: str = "handover",
    initial_rate: float | None = None,
    profile: Path | None = None,
) -> Result:
    need = 2 * (wm + cx) + 1024  # the daemon's sockets (one per guest, one per poll) and the simulators'
    got = raise_nofile(need)
    if got < need:
        print(f"note: RLIMIT_NOFILE {got} < {need} wanted", file=sys.stderr)
    result = anyio.run(restart_once, wm, cx, rate, limit_s, on_stop, initial_rate, profile, backend="asyncio")
    if timeline is not None:
        path = timeline / f"handover-{cx}-{wm}-{rate}.jsonl"
        with path.open("w") as out:
            for row in result.timeline:
                out.write(json.dumps(row) + "\n")
    return result


@pytest.mark.bench
def test_handover_restart_targets() -> None:
    result = run(5000, 2000, 200, 600.0, None)
    print(report([result]))
    assert result.problems() == []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--wm", type=int, default=5000, help="Web Messaging guests")
    parser.add_argument("--cxone", type=int, default=2000, help="CXone agent sessions")
    parser.add_argument(
        "--rate", type=int, default=200, help="handshakes per second the Genesys simulator admits"
    )
    parser.add_argument(
        "--limit", type=float, default=600.0, help="seconds to wait for every session, per start"
    )
    parser.add_argument(
        "--timeline",
        type=Path,
        default=None,
        help="directory for the takeover's handshakes per second and pacing events",
    )
    parser.add_argument(
        "--on-stop",
        choices=("handover", "end"),
        default="handover",
        help="handover.onStop of the daemon: `end` shows what the counts look like when a stop ends every session",
    )
    parser.add_argument(
        "--initial-rate",
        type=float,
        default=None,
        help="admission.initialRate of the daemon (default: the daemon's own, 20/s)",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        default=None,
        help="py-spy's raw stacks of the second daemon, from its spawn until every session is active "
        "(needs py-spy on PATH; off by default: the sampler shares the machine's cores)",
    )
    args = parser.parse_args(argv)
    if args.initial_rate is not None and args.initial_rate <= 0:
        parser.error("--initial-rate must be positive")
    if args.wm < 1 or args.cxone < 0 or args.rate < 1:
        parser.error("--wm and --rate must be at least 1, --cxone at least 0")
    if args.timeline is not None:
        try:
            args.timeline.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            parser.error(f"--timeline {args.timeline}: cannot make the directory: {exc.strerror}")
    result = run(
        args.wm,
        args.cxone,
        args.rate,
        args.limit,
        args.timeline,
        args.on_stop,
        args.initial_rate,
        args.profile,
    )
    print(
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.machine()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}; first start {result.first_start_s:.1f} s, "
        f"all active {result.since_sigterm_s} s after the SIGTERM"
    )
    print(report([result]))
    for problem in result.problems():
        print(f"MISSED: {problem}")
    return 1 if result.problems() else 0


if __name__ == "__main__":
    raise SystemExit(main())
