"""The simulators' activity ring and the stamp header's value (supervisor/sim/activity.py, supervisor/stamp.py): no sockets."""

from __future__ import annotations

import pytest

from supervisor.clock import FakeClock
from supervisor.sim.activity import ActivityKind, ActivityLog, token_key
from supervisor.stamp import Stamp, format_stamp, parse_stamp


def fill(log: ActivityLog, n: int) -> None:
    for i in range(n):
        log.record(ActivityKind.REQUEST, listener="api", peer="127.0.0.1:1", conn=1, session=f"s{i}")


def test_entries_after_the_cursor_in_order(clock: FakeClock) -> None:
    log = ActivityLog(clock, capacity=10)
    fill(log, 4)
    page = log.since(1)
    assert [e["seq"] for e in page.entries] == [2, 3, 4]
    assert page.lost == 0 and page.next == 4
    assert page.lines(1) == page.entries  # no gap line when nothing was lost
    assert log.since(4).entries == [] and log.since(4).next == 4
    assert [e["seq"] for e in log.since(0, limit=2).entries] == [1, 2]
    assert log.since(0, limit=2).next == 2


def test_a_reader_behind_the_ring_is_told_what_it_lost(clock: FakeClock) -> None:
    log = ActivityLog(clock, capacity=3)
    fill(log, 7)  # 1..4 dropped, 5..7 kept
    page = log.since(2)
    assert [e["seq"] for e in page.entries] == [5, 6, 7]
    assert page.lost == 2  # 3 and 4: never seen by this reader
    gap, *rest = page.lines(2)
    assert gap == {"kind": "gap", "from": 3, "to": 4, "lost": 2}
    assert rest == page.entries
    # a reader that read up to what was kept loses nothing
    assert log.since(4).lost == 0


def test_reset_keeps_counting_and_reports_the_forgotten_as_lost(clock: FakeClock) -> None:
    log = ActivityLog(clock, capacity=10)
    fill(log, 3)
    log.reset()
    page = log.since(1)
    assert page.entries == [] and page.lost == 2 and page.next == 3
    fill(log, 1)
    assert [e["seq"] for e in log.since(3).entries] == [4]


def test_entry_fields_and_receive_time(clock: FakeClock) -> None:
    log = ActivityLog(clock)
    clock.advance(5.0)
    log.record(
        ActivityKind.REQUEST,
        t=123.5,
        listener="api",
        peer="127.0.0.1:40000",
        conn=3,
        session="100001",
        stamp=Stamp("m1", 4),
        extra={"status": 200, "handle": "h"},
    )
    (entry,) = log.since(0).entries
    assert entry == {
        "seq": 1,
        "t": 123.5,
        "kind": "request",
        "listener": "api",
        "peer": "127.0.0.1:40000",
        "conn": 3,
        "session": "100001",
        "member": "m1",
        "epoch": 4,
        "status": 200,
        "handle": "h",
    }


def test_capacity_must_be_positive() -> None:
    with pytest.raises(ValueError, match="capacity"):
        ActivityLog(capacity=0)


def test_connection_numbers_follow_the_transport() -> None:
    log = ActivityLog()

    class Transport:
        pass

    a, b = Transport(), Transport()
    assert log.conn_id(a) == log.conn_id(a) == 1
    assert log.conn_id(b) == 2
    assert log.conn_id(None) is None


def test_token_key_hides_the_token() -> None:
    key = token_key("guest-token-secret")
    assert key.startswith("wm:") and len(key) == 3 + 16
    assert "secret" not in key
    assert key == token_key("guest-token-secret") != token_key("guest-token-other")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("member=m1; epoch=7", Stamp("m1", 7)),
        ("epoch=7;member=node-2.a", Stamp("node-2.a", 7)),
        ("member=m1", Stamp("m1", None)),
        ("member=m 1; epoch=-3", Stamp(None, None)),
        ("member=m1; epoch=7x", Stamp("m1", None)),
        ("garbage", Stamp()),
        ("", Stamp()),
        (None, Stamp()),
        ("member=" + "m" * 300, Stamp()),
    ],
)
def test_parse_stamp(value: str | None, expected: Stamp) -> None:
    assert parse_stamp(value) == expected


def test_format_then_parse_round_trips() -> None:
    assert parse_stamp(format_stamp("m-3", 12)) == Stamp("m-3", 12)
