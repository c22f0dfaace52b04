"""The simulator's record of its own stalls (supervisor/sim/loop_stalls.py)."""

from __future__ import annotations

from supervisor.sim.loop_stalls import RECENT, STALL_S, LoopStalls
from supervisor.sim.recorder import Recorder


def test_only_wakes_later_than_the_bound_count_and_the_totals_cover_every_one() -> None:
    stalls = LoopStalls()
    stalls.record(100.0, STALL_S)  # at the bound: a busy loop, not a stall
    stalls.record(101.0, 0.3)
    stalls.record(102.0, 0.1)
    assert (stalls.count, round(stalls.total_s, 6), stalls.longest_s) == (2, 0.4, 0.3)
    assert stalls.snapshot()["recent"] == [[101.0, 0.3], [102.0, 0.1]]
    for i in range(RECENT + 10):
        stalls.record(200.0 + i, 0.06)
    snapshot = stalls.snapshot()
    assert snapshot["count"] == RECENT + 12 and len(snapshot["recent"]) == RECENT
    assert snapshot["recent"][-1] == [200.0 + RECENT + 9, 0.06]


def test_the_recorder_says_whether_stalls_are_watched_and_a_reset_forgets_them() -> None:
    recorder = Recorder()
    assert recorder.snapshot()["loop_stalls"] == {"watched": False}
    recorder.loop_stalls = LoopStalls()
    recorder.loop_stalls.record(5.0, 0.2)
    assert recorder.snapshot()["loop_stalls"]["count"] == 1
    recorder.reset()
    assert recorder.snapshot()["loop_stalls"] == {
        "watched": True,
        "count": 0,
        "total_s": 0.0,
        "longest_s": 0.0,
        "recent": [],
    }


def test_a_watch_keeping_every_stall_keeps_more_than_the_ring() -> None:
    # the fleet's harness keeps each stall with its evidence (tests/harness/fleet_run.py)
    stalls = LoopStalls(keep=None)
    for i in range(RECENT + 10):
        stalls.record(float(i), 0.06)
    assert len(stalls.recent) == stalls.count == RECENT + 10
