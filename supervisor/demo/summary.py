"""The demo's summary: one JSON object (``--json``) or a table for people.

Attempt figures are what the simulators counted from the second of the injection on:
Genesys WebSocket handshakes (both listeners, accepted or refused) and CXone agent-session
starts (``POST .../agent-sessions``). ``peakAttemptsPerSecond`` is the busiest second of the
Genesys handshakes, the figure the storm's admission limit bounds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.table import Table

from supervisor.demo.observe import Observer
from supervisor.demo.scenarios import Fleet, Scenario
from supervisor.runtime.assembly import DaemonView
from supervisor.sim.cxone import CxoneSimulator
from supervisor.sim.genesys import GenesysSimulator
from supervisor.sim.recorder import Recorder
from supervisor.vocabulary import CircuitState


@dataclass(frozen=True, slots=True)
class Baseline:
    """Simulator counters at the moment of injection (the summary reports what came after)."""

    second: int
    # handshakes already counted in that second (accepted, refused), before the injection
    in_second: tuple[int, int]
    cxone_starts: tuple[int, int]  # (all, refused)

    @classmethod
    def take(cls, genesys: GenesysSimulator, cxone: CxoneSimulator) -> Baseline:
        second = int(genesys.clock.time())
        row = next((r for r in genesys.recorder.attempts_per_second() if r["t"] == second), None)
        counted = (row["accepted"], row["refused"]) if row is not None else (0, 0)
        return cls(second, counted, _starts(cxone.recorder))


def _starts(recorder: Recorder) -> tuple[int, int]:
    total = refused = 0
    for row in recorder.snapshot()["requests"]:
        if row["method"] == "POST" and str(row["endpoint"]).endswith("/agent-sessions"):
            total += row["count"]
            if row["status"] >= 300:
                refused += row["count"]
    return total, refused


def collect(
    *,
    scenario: Scenario,
    fleet: Fleet,
    seed: int,
    fast: bool,
    daemon: DaemonView,
    genesys: GenesysSimulator,
    cxone: CxoneSimulator,
    observer: Observer,
    baseline: Baseline | None,
    admission: int | None,
    elapsed_s: float,
    faults: list[dict[str, Any]],
) -> dict[str, Any]:
    """Everything the expected outcome is judged on, JSON-able (no secret in it)."""
    second = baseline.second if baseline is not None else 0
    rows = [dict(r) for r in genesys.recorder.attempts_per_second() if r["t"] >= second]
    if baseline is not None and rows and rows[0]["t"] == second:
        rows[0]["accepted"] -= baseline.in_second[0]
        rows[0]["refused"] -= baseline.in_second[1]
    ws_accepted = sum(r["accepted"] for r in rows)
    ws_refused = sum(r["refused"] for r in rows)
    peak = max((r["accepted"] + r["refused"] for r in rows), default=0)
    starts, starts_refused = _starts(cxone.recorder)
    if baseline is not None:
        starts -= baseline.cxone_starts[0]
        starts_refused -= baseline.cxone_starts[1]
    terminated: list[dict[str, Any]] = []
    after = 0
    for session_id, runner in sorted(daemon.sessions.runners.items()):
        ended = runner.termination
        if ended is None:
            continue
        terminated.append(
            {
                "sessionId": session_id,
                "reason": ended.reason.value,
                "trigger": None if ended.trigger is None else ended.trigger.value,
                "code": ended.code,
            }
        )
        at_end = observer.connects_at_termination.get(session_id, runner.connects)
        after += max(0, runner.connects - at_end)
    return {
        "scenario": scenario.name,
        "sessions": fleet.sessions,
        "states": {state.value: n for state, n in sorted(daemon.sessions.states().items())},
        "terminated": terminated,
        "connectAttempts": ws_accepted + ws_refused + starts,
        "rejectedAttempts": ws_refused + starts_refused,
        "peakAttemptsPerSecond": peak,
        "recoverySeconds": observer.recovery_seconds(),
        "tokenRefreshes": sum(t.refreshes for t in daemon.tokens.values()),
        "admissionRatePerSecond": admission,
        "reconnectsAfterTermination": after,
        "rateLimit": {
            "responses": observer.rate_limited,
            "retries": observer.rate_limit_retries,
            "minRetryDelayS": observer.min_retry_delay_s,
            "earlierThanRetryAfter": observer.early_retries,
        },
        "attempts": {
            "genesysWebSocket": {"accepted": ws_accepted, "refused": ws_refused},
            "cxoneSessionStarts": {"all": starts, "refused": starts_refused},
        },
        "simulatorTokens": {"genesys": genesys.recorder.tokens(), "cxone": cxone.recorder.tokens()},
        "platforms": {
            "genesysWebMessaging": fleet.webmessaging,
            "genesysNotifications": fleet.notifications,
            "cxoneAgentSessions": fleet.cxone,
        },
        "openCircuits": sorted(
            c for c, b in daemon.circuits.all().items() if b.state is not CircuitState.CLOSED
        ),
        "faults": faults,
        "events": observer.events,
        "elapsedSeconds": round(elapsed_s, 3),
        "seed": seed,
        "fast": fast,
        "expected": scenario.expected,
    }


def render(console: Console, summary: dict[str, Any]) -> None:
    """The summary as a table for people, then the outcome."""
    table = Table(title=f"session-supervisor demo: {summary['scenario']}", show_header=False)
    table.add_column("what", style="bold")
    table.add_column("value")
    states = ", ".join(f"{k} {v}" for k, v in summary["states"].items()) or "-"
    rows: list[tuple[str, str]] = [
        ("sessions", str(summary["sessions"])),
        ("final states", states),
        ("terminated", str(len(summary["terminated"]))),
        ("connect attempts (refused)", f"{summary['connectAttempts']} ({summary['rejectedAttempts']})"),
        ("peak attempts/s", str(summary["peakAttemptsPerSecond"])),
        (
            "admission rate/s",
            "-" if summary["admissionRatePerSecond"] is None else str(summary["admissionRatePerSecond"]),
        ),
        ("recovery", "-" if summary["recoverySeconds"] is None else f"{summary['recoverySeconds']:.2f} s"),
        ("token refreshes", str(summary["tokenRefreshes"])),
        ("429s / retries", f"{summary['rateLimit']['responses']} / {summary['rateLimit']['retries']}"),
        ("open circuits", ", ".join(summary["openCircuits"]) or "none"),
        ("events", str(summary["events"])),
        ("elapsed", f"{summary['elapsedSeconds']:.1f} s"),
    ]
    attributes = summary.get("attributes")
    if attributes is not None:
        # the attributes scenario (docs/attributes.md): what became of the burst
        names = ("submitted", "acknowledged", "refused", "sent", "verified", "repaired", "flagged", "lost")
        rows.append(("attribute updates", ", ".join(f"{n} {attributes[n]}" for n in names)))
        rows.append(("silently dropped (simulator)", str(attributes["silentlyDropped"])))
    for what, value in rows:
        table.add_row(what, value)
    console.print(table)
    reasons: dict[str, int] = {}
    for item in summary["terminated"]:
        key = f"{item['reason']}/{item['trigger']}" if item["trigger"] else item["reason"]
        reasons[key] = reasons.get(key, 0) + 1
    for key, n in sorted(reasons.items()):
        console.print(f"  terminated {key}: {n}")
    console.print(f"expected: {summary['expected']}")
    outcome = summary["outcome"]
    if outcome["ok"]:
        console.print("[green]outcome: as expected[/green]")
    else:
        console.print("[red]outcome: NOT as expected[/red]")
        for problem in outcome["problems"]:
            console.print(f"  - {problem}")
