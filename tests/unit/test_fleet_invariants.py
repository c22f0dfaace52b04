"""The fleet's invariants (tests/harness/fleet_invariants.py) on synthetic logs: each check passes a
clean log and catches the violation it is for."""

from __future__ import annotations

import itertools
from typing import Any

from supervisor.store.shards import shard_of
from tests.harness.fleet_invariants import (
    CXONE_END,
    CXONE_START,
    Acquisition,
    Failure,
    LeaseTimeline,
    Pause,
    RowWrite,
    acts,
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

S1, S2 = "wm-1", "cx-7"
KEYS = {"wm:aaaa": S1, "100007": S2}
_seq = itertools.count(1)


def frame(
    t: float, member: str | None, key: str = "wm:aaaa", action: str = "echo", **more: Any
) -> dict[str, Any]:
    return {
        "seq": next(_seq),
        "t": t,
        "kind": "frame",
        "listener": "webmessaging",
        "session": key,
        "member": member,
        "epoch": more.pop("epoch", 1),
        "action": action,
        **more,
    }


def request(
    t: float, member: str, method: str, endpoint: str, key: str = "100007", status: int = 200
) -> dict[str, Any]:
    return {
        "seq": next(_seq),
        "t": t,
        "kind": "request",
        "listener": "api",
        "session": key,
        "member": member,
        "epoch": 1,
        "method": method,
        "endpoint": endpoint,
        "status": status,
    }


def connect(t: float, member: str, status: int = 101, listener: str = "webmessaging") -> dict[str, Any]:
    return {
        "seq": next(_seq),
        "t": t,
        "kind": "connect",
        "listener": listener,
        "session": None,
        "member": member,
        "epoch": 1,
        "status": status,
    }


def acquired(session: str, member: str, epoch: int, at: float, previous: str | None = None) -> Acquisition:
    return Acquisition(shard_of(session), member, epoch, previous, "expired" if previous else "free", at)


# A clean takeover: m1 holds wm-1 from 0, is killed at 10.5; m2 acquires at 20 and carries on.
CLEAN_AUDIT = [acquired(S1, "m1", 1, 0.0), acquired(S1, "m2", 2, 20.0, previous="m1")]
CLEAN_LOG = [
    frame(1.0, "m1", action="configureSession"),
    frame(5.0, "m1"),
    frame(10.0, "m1"),
    frame(20.5, "m2", action="configureSession"),
    frame(25.0, "m2"),
]


def test_acts_attribute_stamped_entries_of_known_sessions_and_count_the_rest() -> None:
    log = [*CLEAN_LOG, frame(3.0, None), frame(4.0, "m1", key="wm:unknown"), connect(2.0, "m1")]
    log.append(request(4.5, "m1", *CXONE_START))  # keyed by its token's agent, not by the session
    found = acts(log, KEYS)
    assert [(a.member, a.t, a.shard) for a in found] == [
        ("m1", 1.0, shard_of(S1)),
        ("m1", 5.0, shard_of(S1)),
        ("m1", 10.0, shard_of(S1)),
        ("m2", 20.5, shard_of(S1)),
        ("m2", 25.0, shard_of(S1)),
    ]
    assert unattributed(log, KEYS) == 2  # the unstamped frame and the unknown key; a connect has no key


def test_lease_timeline_says_who_held_what_when() -> None:
    leases = LeaseTimeline(CLEAN_AUDIT)
    shard = shard_of(S1)
    assert leases.latest(shard, 19.9) == CLEAN_AUDIT[0]
    assert leases.latest(shard, 20.0) == CLEAN_AUDIT[1]
    assert leases.held("m1", shard, 30.0) == CLEAN_AUDIT[0]
    assert leases.held("m2", shard, 19.0) is None
    assert leases.next_after(shard, 1) == CLEAN_AUDIT[1]
    assert leases.next_after(shard, 2) is None


def test_two_members_at_once_passes_a_clean_takeover_and_a_return() -> None:
    audit = [*CLEAN_AUDIT, acquired(S1, "m1", 3, 40.0, previous="m2")]
    log = [*CLEAN_LOG, frame(41.0, "m1", action="configureSession")]
    assert two_members_at_once(acts(log, KEYS), LeaseTimeline(audit)).ok


def test_two_members_at_once_catches_a_woken_member_acting_after_the_takeover() -> None:
    log = [*CLEAN_LOG, frame(26.0, "m1")]  # m1 under epoch 1 after m2 took epoch 2
    finding = two_members_at_once(acts(log, KEYS), LeaseTimeline(CLEAN_AUDIT))
    assert finding.violations == 1
    assert "m1 (epoch 1)" in finding.examples[0] and "m2 (epoch 2)" in finding.examples[0]


def test_two_members_at_once_catches_an_act_without_any_lease() -> None:
    log = [*CLEAN_LOG, frame(6.0, "m3")]
    finding = two_members_at_once(acts(log, KEYS), LeaseTimeline(CLEAN_AUDIT))
    assert finding.violations == 1 and "holding no lease" in finding.examples[0]


def test_epochs_decreasing_passes_a_clean_log() -> None:
    assert epochs_decreasing(acts(CLEAN_LOG, KEYS), LeaseTimeline(CLEAN_AUDIT), CLEAN_AUDIT).ok


def test_epochs_decreasing_catches_an_audit_that_goes_back() -> None:
    audit = [*CLEAN_AUDIT, acquired(S1, "m3", 2, 30.0, previous="m2")]
    finding = epochs_decreasing([], LeaseTimeline(audit), audit)
    assert finding.violations == 1 and "epoch 2 after epoch 2" in finding.examples[0]


def test_epochs_decreasing_catches_an_act_under_an_older_epoch() -> None:
    log = [*CLEAN_LOG, frame(26.0, "m1")]
    finding = epochs_decreasing(acts(log, KEYS), LeaseTimeline(CLEAN_AUDIT), CLEAN_AUDIT)
    assert (
        finding.violations == 1
        and "echo at 26.000 under epoch 1 after m2 under epoch 2" in finding.examples[0]
    )


def test_epochs_decreasing_catches_a_stamp_that_goes_back() -> None:
    log = [frame(1.0, "m1", epoch=4), frame(2.0, "m1", epoch=3)]
    finding = epochs_decreasing(acts(log, KEYS), LeaseTimeline(CLEAN_AUDIT), CLEAN_AUDIT)
    assert finding.violations == 1 and "stamped epoch 3 after 4" in finding.examples[0]


PAUSE = Pause("m1", paused_at=10.5, resumed_at=22.5, deadline=16.0)


def test_sent_after_deadline_passes_when_the_woken_member_acts_only_after_acquiring_again() -> None:
    audit = [*CLEAN_AUDIT, acquired(S1, "m1", 3, 40.0, previous="m2")]
    log = [*CLEAN_LOG, frame(41.0, "m1", action="configureSession")]
    finding = sent_after_deadline(acts(log, KEYS), [PAUSE], LeaseTimeline(audit))
    assert finding.ok and finding.figures["latest_s"] == 0.0


def test_sent_after_deadline_catches_a_frame_of_the_lost_shard() -> None:
    log = [*CLEAN_LOG, frame(22.6, "m1")]
    finding = sent_after_deadline(acts(log, KEYS), [PAUSE], LeaseTimeline(CLEAN_AUDIT))
    assert finding.violations == 1
    assert abs(finding.figures["latest_s"] - 6.6) < 1e-9


def test_takeover_latencies_count_from_the_failure_to_the_first_act_under_a_new_acquisition() -> None:
    latencies = takeover_latencies(
        acts(CLEAN_LOG, KEYS), Failure("m1", 10.5), [S1, S2], LeaseTimeline(CLEAN_AUDIT)
    )
    assert latencies == {S1: 10.0, S2: None}
    finding = latency_finding("takeover", latencies, first_within=12.0, all_within=13.0)
    assert finding.violations == 1 and finding.examples == [f"{S2} never resumed"]
    assert finding.figures["first_s"] == 10.0


def test_latency_finding_catches_a_late_first_and_a_late_last() -> None:
    late = latency_finding("takeover", {S1: 12.5, S2: 14.0}, first_within=12.0, all_within=13.0)
    assert late.violations == 2
    assert latency_finding("takeover", {S1: 11.0, S2: 12.9}, first_within=12.0, all_within=13.0).ok


def test_admission_peak_counts_every_member_in_a_sliding_second() -> None:
    log = [connect(0.1 * i, f"m{i % 3}") for i in range(10)]  # 10 in 0.0 .. 0.9
    log += [connect(1.5, "m1"), request(1.6, "m2", *CXONE_START, status=202)]
    attempts = [("webmessaging", "connect"), ("api", " ".join(CXONE_START))]
    held = admission_peak(log, attempts, rate=10.0)
    assert held.ok and held.figures["peak_per_s"] == 10
    over = admission_peak(log, attempts, rate=8.0)  # 10 > 8.8
    assert over.violations == 1
    assert admission_peak(log, [("streaming", "connect")], rate=1.0).figures["peak_per_s"] == 0


def test_before_retry_after_passes_a_fleet_that_waits() -> None:
    log = [connect(1.0, "m1", status=429), connect(1.02, "m2"), connect(3.1, "m3"), connect(3.2, "m1")]
    log.append(frame(1.5, "m2"))  # traffic on a socket already open: not an attempt
    finding = before_retry_after(log, ["webmessaging"], retry_after=2.0, grace=0.05)
    assert finding.ok


def test_before_retry_after_catches_another_member_sending_during_the_hold() -> None:
    log = [connect(1.0, "m1", status=429), connect(2.0, "m2"), connect(1.5, "m1", listener="streaming")]
    finding = before_retry_after(log, ["webmessaging", "streaming"], retry_after=2.0, grace=0.05)
    assert finding.violations == 1 and "m2 connect on webmessaging" in finding.examples[0]


def test_takeovers_between_counts_only_shards_taken_from_another_member_in_the_window() -> None:
    audit = [
        acquired(S1, "m1", 1, 0.0),
        acquired(S1, "m1", 2, 31.0, previous="m1"),  # its own again: not a takeover
        acquired(S2, "m2", 5, 32.0, previous="m3"),
        acquired(S2, "m3", 6, 80.0, previous="m2"),  # after the window
    ]
    finding = takeovers_between(audit, 30.0, 60.0)
    assert finding.violations == 1 and "m2 took it from m3" in finding.examples[0]
    assert takeovers_between(audit[:2], 30.0, 60.0).ok


def test_handover_passes_a_join_and_a_kept_token() -> None:
    audit = [acquired(S2, "m1", 1, 0.0), acquired(S2, "m2", 2, 100.5, previous="m1"), *CLEAN_AUDIT]
    log = [
        request(101.0, "m2", "POST", CXONE_START[1] + "/join"),  # keyed by the token's agent: not an act
        request(101.1, "m2", "GET", CXONE_START[1] + "/{sessionId}/get-next-event"),
        frame(101.2, "m2", action="configureSession"),
    ]
    found = acts(log, KEYS)
    finding = handover(
        found,
        log,
        member="m1",
        at=100.0,
        moved=[S1, S2],
        keys_before={S1: "wm:aaaa"},
        keys_after={S1: "wm:aaaa"},
        first_within=3.0,
        all_within=3.02,
    )
    assert finding.ok and abs(finding.figures["last_s"] - 1.2) < 1e-9
    assert abs(finding.figures["first_s"] - 1.1) < 1e-9
    assert two_members_at_once(found, LeaseTimeline(audit)).ok


def test_handover_catches_a_new_agent_session_a_new_guest_and_a_late_resume() -> None:
    log = [
        request(101.0, "m2", *CXONE_START, status=202),
        request(101.5, "m2", "GET", CXONE_START[1] + "/{sessionId}/get-next-event"),
        frame(104.5, "m2", key="wm:bbbb"),
    ]
    keys = {**KEYS, "wm:bbbb": S1}
    finding = handover(
        acts(log, keys),
        log,
        member="m1",
        at=100.0,
        moved=[S1, S2],
        keys_before={S1: "wm:aaaa"},
        keys_after={S1: "wm:bbbb"},
        first_within=3.0,
        all_within=3.02,
    )
    assert finding.violations == 3
    assert any("a new CXone agent session started by m2 1.000 s after" in e for e in finding.examples)
    assert any("new guest session" in e for e in finding.examples)
    assert any("resumed 4.500 s after" in e for e in finding.examples)


def test_handover_bounds_the_first_resumption_by_the_handover_and_the_rest_by_the_admission_rate() -> None:
    # two guests: the first back 2.5 s after the SIGTERM, the second, admitted after it, at 4.5 s
    keys = {**KEYS, "wm:bbbb": "wm-2"}
    log = [frame(102.5, "m2", action="configureSession"), frame(104.5, "m2", key="wm:bbbb")]

    def judged(first_within: float, all_within: float) -> list[str]:
        finding = handover(
            acts(log, keys),
            log,
            member="m1",
            at=100.0,
            moved=[S1, "wm-2"],
            keys_before={},
            keys_after={},
            first_within=first_within,
            all_within=all_within,
        )
        assert finding.figures["first_s"] == 2.5 and finding.figures["last_s"] == 4.5
        assert finding.figures["limit_s"] == all_within
        return finding.examples

    # the tail within the handover's bound plus the moved sessions at the admission rate: held
    assert judged(3.0, 5.0) == []
    # the same tail past a bound with no room for the admission: the late one named
    assert judged(3.0, 4.0) == ["wm-2 resumed 4.500 s after the SIGTERM > 4.000 s"]
    # a handover whose first resumption came late fails however roomy the tail's bound is
    assert judged(2.0, 10.0) == ["first session resumed 2.500 s after the SIGTERM > 2.000 s"]


def test_the_scenario_bounds_a_handovers_tail_by_the_sessions_moved_at_the_admission_rate() -> None:
    from tests.harness.fleet_run import FleetSpec
    from tests.harness.fleet_scenario import HANDOVER_WITHIN_S, handover_limit

    spec = FleetSpec(members=3, web_messaging=300, cxone=300, admission_rate=100.0)
    assert HANDOVER_WITHIN_S == 3.0
    assert handover_limit(spec, 218) == 3.0 + 2.18
    assert handover_limit(spec, 0) == 3.0


def test_ended_peer_sessions_passes_an_owner_ending_its_own() -> None:
    audit = [acquired(S2, "m1", 1, 0.0)]
    log = [request(5.0, "m1", *CXONE_END), frame(6.0, "m1", action="closeSession")]
    keys = {**KEYS}
    assert ended_peer_sessions(acts(log, keys), LeaseTimeline([*audit, CLEAN_AUDIT[0]])).ok


def test_ended_peer_sessions_catches_a_delete_of_a_session_another_member_holds() -> None:
    audit = [acquired(S2, "m1", 1, 0.0), acquired(S2, "m2", 2, 20.0, previous="m1")]
    log = [request(21.0, "m1", *CXONE_END), request(22.0, "m1", "GET", CXONE_START[1])]
    finding = ended_peer_sessions(acts(log, KEYS), LeaseTimeline(audit))
    assert finding.violations == 1 and "m2 holds shard" in finding.examples[0]


def test_stale_fenced_writes_passes_writes_before_the_next_epoch_and_counts_unfenced_rows() -> None:
    writes = [RowWrite("server_sessions", S1, 1, 19.9), RowWrite("server_sessions", S1, 2, 20.1)]
    writes.append(RowWrite("outbox", S1, None, 21.0))
    finding = stale_fenced_writes(writes, LeaseTimeline(CLEAN_AUDIT))
    assert finding.ok and finding.figures["unfenced"] == 1


def test_stale_fenced_writes_catches_a_write_at_the_old_epoch_after_the_takeover() -> None:
    finding = stale_fenced_writes([RowWrite("outbox", S1, 1, 20.4)], LeaseTimeline(CLEAN_AUDIT))
    assert finding.violations == 1 and "m2 took shard" in finding.examples[0]


def test_stamps_match_addresses_passes_each_member_from_its_own_address_and_catches_a_mismatch() -> None:
    addresses = {"m1": "127.0.0.11", "m2": "127.0.0.12"}
    log = [
        frame(1.0, "m1", peer="127.0.0.11:40001"),
        frame(2.0, "m2", peer="127.0.0.12:40002"),
        frame(3.0, None),
    ]
    held = stamps_match_addresses(log, addresses)
    assert held.ok and held.figures["checked"] == 2
    wrong = stamps_match_addresses([*log, frame(4.0, "m1", peer="127.0.0.12:40003")], addresses)
    assert wrong.violations == 1 and "stamped m1, sent from 127.0.0.12 (m2)" in wrong.examples[0]


def test_the_scenario_check_passes_a_clean_run_and_blames_the_database_restart_only_for_its_own() -> None:
    from tests.harness.fleet_run import Evidence, FleetSpec
    from tests.harness.fleet_scenario import Record, Takeover, check

    spec = FleetSpec(members=2, web_messaging=2, cxone=8)
    audit = [*CLEAN_AUDIT, acquired(S2, "m1", 1, 0.0), acquired(S2, "m2", 2, 100.5, previous="m1")]
    log = [
        *CLEAN_LOG,
        connect(0.5, "m1"),
        request(2.0, "m1", "GET", CXONE_START[1] + "/{sessionId}/get-next-event"),
        request(101.0, "m2", "POST", CXONE_START[1] + "/join"),
        request(101.2, "m2", "GET", CXONE_START[1] + "/{sessionId}/get-next-event"),
    ]
    record = Record(
        takeovers=[Takeover(Failure("m1", 10.5), "kill9", {S1})],
        database_restarts=[(50.0, 65.0)],
        handover=Takeover(Failure("m1", 100.0), "sigterm", {S2}),
        quiet_until=79.0,
    )
    evidence = Evidence(log, 0, dict(KEYS), audit, [RowWrite("outbox", S1, 2, 30.0)], [], audited=True)
    findings = {f.name: f for f in check(spec, evidence, record)}
    assert all(f.ok for f in findings.values()), [str(f) for f in findings.values() if not f.ok]
    assert findings["takeover 1 (kill9 of m1)"].figures["first_s"] == 10.0
    # a shard taken from a live member while the database was down is the restart's doing
    restart = [*audit, acquired("wm-9", "m2", 7, 60.0, previous="m1")]
    evidence = Evidence(log, 0, dict(KEYS), restart, [], [], audited=False)
    findings = {f.name: f for f in check(spec, evidence, record)}
    assert findings["takeovers caused by the database restart"].violations == 1
    assert not findings["fenced row written after its shard's next epoch"].ok  # no write audit, said so
