"""The fleet's acceptance scenario and its checks, shared by its short form and its full form (the benchmark).

:func:`run_scenario` drives a running fleet (:mod:`tests.harness.fleet_run`) through its faults, one after
the other, each waited out on what the activity and ``shard_leases`` show (never a fixed sleep but the
faults' own holds): ``kills`` × kill -9 of the member holding most shards (restarted once its
sessions were taken over), ``pauses`` × SIGSTOP for ``pause_s`` (then SIGCONT), ``db_restarts`` ×
PostgreSQL stopped and held down ``db_hold_s``, then one SIGTERM. :func:`check` turns what it collected
into the :class:`~tests.harness.fleet_invariants.Finding` s the acceptance reports, each a figure.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.harness.fleet_invariants import (
    Failure,
    Finding,
    admission_peak,
    before_retry_after,
    ended_peer_sessions,
    epochs_decreasing,
    handover,
    latency_finding,
    sent_after_deadline,
    stale_fenced_writes,
    stamps_match_addresses,
    takeover_latencies,
    takeovers_between,
    two_members_at_once,
    unattributed,
)
from tests.harness.fleet_run import Evidence, Fleet, FleetSpec

__all__ = [
    "GENESYS_ATTEMPTS",
    "HANDOVER_WITHIN_S",
    "RETRY_AFTER_GRACE_S",
    "Record",
    "check",
    "handover_limit",
    "run_scenario",
]

#: the connection attempts the admission limit paces (WebSocket handshakes): listener and kind
GENESYS_ATTEMPTS = (("webmessaging", "connect"), ("streaming", "connect"))
#: attempts already on their way when a refusal was answered (sent before any member read it)
RETRY_AFTER_GRACE_S = 0.25
#: the SIGTERM handover: the first session resumed elsewhere within this (docs/runtime.md), every one
#: within this plus the sessions moved ÷ the admission rate (:func:`handover_limit`)
HANDOVER_WITHIN_S = 3.0


@dataclass
class Takeover:
    """A failure and the sessions the failed member held at that moment."""

    failure: Failure
    kind: str
    moved: set[str]


@dataclass
class Record:
    """What the scenario did, beside what the fleet saw (:class:`~tests.harness.fleet_run.Evidence`)."""

    takeovers: list[Takeover] = field(default_factory=list)
    database_restarts: list[tuple[float, float]] = field(default_factory=list)
    handover: Takeover | None = None
    keys_before: dict[str, str] = field(default_factory=dict)
    keys_after: dict[str, str] = field(default_factory=dict)
    #: the window after which a database restart's consequences are all in the audit
    quiet_until: float = 0.0
    timings: dict[str, float] = field(default_factory=dict)


def _takeover_limit(spec: FleetSpec, moved: int) -> float:
    return spec.lease_seconds + 2.0 + moved / spec.admission_rate


def handover_limit(spec: FleetSpec, moved: int) -> float:
    """When the last of ``moved`` sessions a SIGTERM handed over must have resumed: the handover's own
    bound plus their reconnections at the fleet's admission rate (the takeover bound's shape)."""
    return HANDOVER_WITHIN_S + moved / spec.admission_rate


async def _taken_over(
    fleet: Fleet, failure: Failure, moved: set[str], limit_s: float, say: Callable[[str], None]
) -> float:
    """The wait for a takeover; one that does not complete is said and the scenario goes on (the
    check reports the sessions never resumed, beside every other figure)."""
    try:
        return await fleet.wait_taken_over(failure, moved, limit_s)
    except AssertionError as exc:
        say(str(exc))
        return float("inf")


async def run_scenario(
    fleet: Fleet,
    *,
    kills: int,
    pauses: int,
    db_restarts: int,
    sigterm: bool = True,
    pause_s: float = 12.0,
    db_hold_s: float = 15.0,
    settle_limit_s: float = 120.0,
) -> Record:
    """Drive ``fleet`` through the faults (module docstring); the fleet must be all active already."""
    spec = fleet.spec
    record = Record()
    # the slack past the bound a wait allows before giving up: the check, not the wait, judges
    slack = 2 * spec.lease_seconds
    began = time.monotonic()

    def say(what: str) -> None:  # the timeline, shown with a failure (pytest prints captured output)
        print(f"fleet +{time.monotonic() - began:6.1f}s {what}")

    for i in range(kills):
        victim = await fleet.holder_of_most()
        moved = await fleet.sessions_of(victim)
        failure = await fleet.kill9(victim)
        say(f"kill -9 {i + 1}: {victim}, {len(moved)} sessions")
        record.takeovers.append(Takeover(failure, "kill9", moved))
        took = await _taken_over(fleet, failure, moved, _takeover_limit(spec, len(moved)) + slack, say)
        say(f"kill -9 {i + 1}: taken over after {took:.1f}s")
        await fleet.restart(victim)
        await fleet.wait_shards_held(settle_limit_s)
        say(f"kill -9 {i + 1}: {victim} restarted, every shard held")
    for i in range(pauses):
        victim = await fleet.holder_of_most()
        moved = await fleet.sessions_of(victim)
        say(f"SIGSTOP {i + 1}: {victim}, {len(moved)} sessions")
        failure = await fleet.pause(victim, pause_s)
        record.takeovers.append(Takeover(failure, "sigstop", moved))
        took = await _taken_over(fleet, failure, moved, _takeover_limit(spec, len(moved)) + slack, say)
        await fleet.wait_shards_held(settle_limit_s)
        say(f"SIGSTOP {i + 1}: continued, taken over after {took:.1f}s, every shard held")
    for i in range(db_restarts):
        say(f"database restart {i + 1}")
        at, until = await fleet.restart_database(db_hold_s)
        record.database_restarts.append((at, until))
        await fleet.wait_shards_held(settle_limit_s)
        record.quiet_until = until + spec.lease_seconds + 2 * spec.renew_seconds
        say(f"database restart {i + 1}: back, every shard held")
        # every session acting again: each member lost its shards at their deadlines while the database
        # was down and reconnects all their sessions once it has them back (through the admission, at
        # 100 a second); a SIGTERM before that measures this queue, not the handover
        everyone = set(spec.session_ids())

        def acting_again(back: float = until, everyone: set[str] = everyone) -> bool:
            return fleet.acted_since(everyone, back) == everyone

        try:
            took = await fleet.wait(
                "every session acting again after the database restart", acting_again, settle_limit_s
            )
            say(f"database restart {i + 1}: every session acting again after {took:.1f}s")
        except AssertionError as exc:  # said; the SIGTERM comes anyway
            say(str(exc))
    if sigterm:
        victim = await fleet.holder_of_most()
        moved = await fleet.sessions_of(victim)
        await fleet.refresh()
        record.keys_before = {s: k for s, k in fleet.keys().items() if s in moved}
        failure, code = await fleet.terminate(victim)
        say(f"SIGTERM: {victim} exited {code}, {len(moved)} sessions")
        record.handover = Takeover(failure, "sigterm", moved)
        try:
            took = await fleet.wait(
                "the handover resumed",
                lambda: fleet.acted_since(moved, failure.at, not_by=victim) == moved,
                handover_limit(spec, len(moved)) + slack,
            )
            say(f"SIGTERM: resumed elsewhere after {took:.1f}s")
        except AssertionError as exc:  # said; the check reports the sessions not resumed
            say(str(exc))
    # every consequence of a database restart is in the audit once a lease's time has passed after it
    await fleet.wait(
        "the database restart's lease time", lambda: time.time() > record.quiet_until, settle_limit_s
    )
    say("done")
    if record.handover is not None:  # read last: a guest session made anew has stored its token by now
        record.keys_after = {s: k for s, k in fleet.keys().items() if s in record.handover.moved}
    return record


def check(spec: FleetSpec, evidence: Evidence, record: Record) -> list[Finding]:
    """Every acceptance figure (tests/harness/fleet_invariants.py), from what the run collected."""
    found = evidence.acts()
    leases = evidence.leases()
    findings = [
        two_members_at_once(found, leases),
        epochs_decreasing(found, leases, evidence.acquisitions),
        sent_after_deadline(found, evidence.pauses(), leases),
    ]
    for i, takeover in enumerate(record.takeovers):
        latencies = takeover_latencies(found, takeover.failure, takeover.moved, leases)
        findings.append(
            latency_finding(
                f"takeover {i + 1} ({takeover.kind} of {takeover.failure.member})",
                latencies,
                first_within=spec.lease_seconds + 2.0,
                all_within=_takeover_limit(spec, len(takeover.moved)),
            )
        )
    findings.append(admission_peak(evidence.entries, GENESYS_ATTEMPTS, spec.admission_rate))
    findings.append(
        before_retry_after(
            evidence.entries, [listener for listener, _ in GENESYS_ATTEMPTS], 1.0, grace=RETRY_AFTER_GRACE_S
        )
    )
    handed = record.handover
    # the SIGTERM's handover, which may fall in a restart's lease time, is not the restart's doing
    audit = [
        a
        for a in evidence.acquisitions
        if handed is None or a.previous_owner != handed.failure.member or a.at < handed.failure.at
    ]
    for at, _until in record.database_restarts:
        restart = takeovers_between(audit, at, record.quiet_until)
        restart.name = "takeovers caused by the database restart"
        findings.append(restart)
    if handed is not None:
        findings.append(
            handover(
                found,
                evidence.entries,
                member=handed.failure.member,
                at=handed.failure.at,
                moved=handed.moved,
                keys_before=record.keys_before,
                keys_after=record.keys_after,
                first_within=HANDOVER_WITHIN_S,
                all_within=handover_limit(spec, len(handed.moved)),
            )
        )
    findings.append(ended_peer_sessions(found, leases))
    fenced = stale_fenced_writes(evidence.writes, leases)
    if not evidence.audited:
        fenced.add("row writes not recorded: the store has no fleet tables or no epoch column")
    findings.append(fenced)
    if spec.addresses:
        findings.append(
            stamps_match_addresses(evidence.entries, dict(zip(spec.names(), spec.addresses, strict=True)))
        )
    coverage = Finding("activity seen whole")
    if evidence.lost:
        coverage.add(f"{evidence.lost} activity entries lost before they were read (the ring wrapped)")
    coverage.figures["entries"] = float(len(evidence.entries))
    coverage.figures["acts"] = float(len(found))
    # entries of our sessions that no member stamped (or under a key never learned): not checked above
    coverage.figures["unattributed"] = float(unattributed(evidence.entries, evidence.session_of))
    # the judge's own lateness (tests/harness/fleet_run.py, Fleet.loop_stalls): a figure, not a finding
    coverage.figures["simulators_stalled_s"] = round(sum(late for _at, late in evidence.stalls), 3)
    coverage.figures["simulators_longest_stall_s"] = round(
        max((late for _at, late in evidence.stalls), default=0.0), 3
    )
    findings.append(coverage)
    return findings


def summary(findings: list[Finding]) -> dict[str, Any]:
    """The findings as JSON: name -> violations, figures, examples."""
    return {
        f.name: {"violations": f.violations, **f.figures, **({"examples": f.examples} if f.examples else {})}
        for f in findings
    }
