"""Refused peers reported once per peer per interval with a count (supervisor/api/refusals.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from supervisor.api.events import Peer
from supervisor.api.refusals import RefusalLog, Report

A = Peer(100, 5000, 5000)
B = Peer(200, 5001, 5001)


def test_the_first_refusal_is_reported_at_once_the_rest_of_the_interval_as_one_count() -> None:
    log = RefusalLog(10.0)
    assert log.refused(A, 0.0) == [Report(A, 1)]
    # 2,999 more within 4 s: nothing to publish
    for i in range(2999):
        assert log.refused(Peer(100 + i, 5000, 5000), 4.0 * i / 2999) == []
    # the interval ends: one line with the count (the last pid seen), and a new window opens
    assert log.due(10.0) == [Report(Peer(3098, 5000, 5000), 2999)]
    assert log.due(15.0) == []
    assert log.refused(A, 16.0) == []
    assert log.due(20.0) == [Report(A, 1)]
    # an interval with no refusal closes the window: the next refusal is reported at once again
    assert log.due(30.0) == [] and log.open_windows == 0
    assert log.refused(A, 31.0) == [Report(A, 1)]


def test_each_peer_has_its_own_window_and_an_ended_one_is_reported_on_anyones_refusal() -> None:
    log = RefusalLog(10.0)
    assert log.refused(A, 0.0) == [Report(A, 1)]
    assert log.refused(A, 1.0) == []
    assert log.refused(B, 2.0) == [Report(B, 1)]
    # B's refusal at 12 reports A's ended window first, then counts B's in its own
    assert log.refused(B, 12.0) == [Report(A, 1), Report(B, 1)]


def test_a_peer_is_its_uid_and_gid_not_its_pid() -> None:
    log = RefusalLog(1.0)
    assert log.refused(Peer(1, 7, 7), 0.0) == [Report(Peer(1, 7, 7), 1)]
    assert log.refused(Peer(2, 7, 7), 0.1) == []
    assert log.refused(Peer(3, 7, 8), 0.2) == [Report(Peer(3, 7, 8), 1)]


def test_the_interval_is_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        RefusalLog(0.0)


@given(st.lists(st.tuples(st.sampled_from([A, B]), st.floats(0.0, 5.0)), max_size=200))
def test_every_refusal_is_in_exactly_one_report(steps: list[tuple[Peer, float]]) -> None:
    """Nothing is lost or counted twice: the reports add up to the refusals, per peer."""
    log = RefusalLog(2.0)
    now = 0.0
    reported = {A.uid: 0, B.uid: 0}
    refused = {A.uid: 0, B.uid: 0}
    for peer, gap in steps:
        now += gap
        refused[peer.uid] += 1
        for report in log.refused(peer, now):
            reported[report.peer.uid] += report.count
    for report in log.due(now + 2.0):
        reported[report.peer.uid] += report.count
    assert reported == refused
