"""The platform events hub (supervisor/api/platform_events.py): numbering, gaps, windows, since, lags. Pure."""

from __future__ import annotations

import json
from typing import Any

import pytest

from supervisor.api.messages import parse_subscription
from supervisor.api.outbox import Outbox
from supervisor.api.platform_events import (
    GapOpened,
    GapReason,
    PlatformEvents,
    PlatformRecord,
    Resync,
    WindowLimits,
)
from supervisor.clock import FakeClock
from supervisor.errors import ApiError
from supervisor.events import Correlation, Published, SessionTransition
from supervisor.vocabulary import SessionState

BOOT = "boot-1"
STATES = frozenset(s.value for s in SessionState)


def hub(
    limits: WindowLimits | None = None, clock: FakeClock | None = None
) -> tuple[PlatformEvents, list[dict[str, Any]]]:
    events = PlatformEvents(
        boot_id=BOOT,
        clock=clock or FakeClock(),
        limits=limits,
        describe=lambda s: ("cxone" if s.startswith("cx") else "genesys", f"agent-{s}"),
    )
    seen: list[dict[str, Any]] = []
    events.listen(lambda r: seen.append(decode(r.frame)))
    return events, seen


def decode(frame: bytes) -> dict[str, Any]:
    assert frame.endswith(b"\0")
    reply = json.loads(frame[:-1])
    assert reply["continues"] is True
    parameters: dict[str, Any] = reply["parameters"]
    return parameters


def moved(
    events: PlatformEvents, session_id: str, source: SessionState, target: SessionState, seq: int = 1
) -> None:
    transition = SessionTransition(session_id, source, target, "t", "r", "2024-05-14T09:32:11.004Z")
    events(Published(seq, BOOT, transition, Correlation(session_id)))


def test_each_session_numbers_its_records_from_one_with_no_hole_and_the_body_passes_through() -> None:
    events, seen = hub()
    body = {"Type": "AgentState", "CurrentState": "Available", "NextStates": [{"State": "x"}]}
    assert events.delivered("cx-1", "cxone", "AgentState", body, {"contactId": "c-9"}) == 1
    assert events.delivered("cx-1", "cxone", "AgentState", body, {}) == 2
    assert events.delivered("cx-2", "cxone", "CallContactEvent", {"a": 1}, {}) == 1
    records = [m for m in seen if m["type"] == "platform"]
    assert [(r["sessionId"], r["sessionSeq"]) for r in records] == [("cx-1", 1), ("cx-1", 2), ("cx-2", 1)]
    first = records[0]
    assert first["body"] == body  # as the platform sent it
    assert first["contactId"] == "c-9" and first["agentId"] == "agent-cx-1" and first["bootId"] == BOOT
    assert (first["platform"], first["eventType"]) == ("cxone", "AgentState")
    assert first["receivedAt"] == "2024-05-14T09:32:11.004Z"
    assert "replayed" not in first and "snapshot" not in first


def test_a_session_first_seen_is_told_as_a_started_gap_before_its_first_record() -> None:
    events, seen = hub()
    events.delivered("cx-1", "cxone", "AgentSessionStart", {}, {})
    gap, record = seen
    assert gap["type"] == "gap" and record["type"] == "platform"
    assert (gap["sessionId"], gap["fromSeq"], gap["seconds"], gap["resync"], gap["reason"]) == (
        "cx-1",
        1,
        None,
        "none",
        "started",
    )
    assert gap["platform"] == "cxone" and gap["agentId"] == "agent-cx-1"


def test_a_reconnection_is_a_gap_with_how_long_told_when_the_session_is_active_again() -> None:
    clock = FakeClock()
    events, seen = hub(clock=clock)
    moved(events, "wm-1", SessionState.CONNECTING, SessionState.ACTIVE)
    events.delivered("wm-1", "genesys", "StructuredMessage", {"id": "m1"}, {"messageId": "m1"})
    seen.clear()
    moved(events, "wm-1", SessionState.ACTIVE, SessionState.RECONNECTING)
    clock.advance(12.5)
    moved(events, "wm-1", SessionState.RECONNECTING, SessionState.CONNECTING)
    assert seen == []  # not told while the daemon still cannot hear the platform
    clock.advance(0.5)
    moved(events, "wm-1", SessionState.CONNECTING, SessionState.ACTIVE)
    (gap,) = seen
    assert (gap["reason"], gap["fromSeq"], gap["seconds"], gap["resync"]) == ("reconnected", 2, 13.0, "none")


def test_a_resyncer_tells_the_gap_itself_and_a_replayed_message_is_never_delivered_twice() -> None:
    events, seen = hub()
    opened: list[GapOpened] = []
    events.resync_with(opened.append)
    moved(events, "wm-1", SessionState.CONNECTING, SessionState.ACTIVE)
    assert [o.reason for o in opened] == [GapReason.STARTED] and seen == []
    events.delivered("wm-1", "genesys", "StructuredMessage", {"id": "m1"}, {"messageId": "m1"})
    moved(events, "wm-1", SessionState.ACTIVE, SessionState.RECONNECTING)
    moved(events, "wm-1", SessionState.RECONNECTING, SessionState.ACTIVE)
    assert opened[-1].reason is GapReason.RECONNECTED and opened[-1].from_seq == 2
    seen.clear()
    events.gap("wm-1", seconds=opened[-1].seconds, resync=Resync.REPLAYED, from_seq=opened[-1].from_seq)
    # the history holds what was delivered before the drop too: that one is not delivered again
    assert (
        events.delivered(
            "wm-1", "genesys", "StructuredMessage", {"id": "m1"}, {"messageId": "m1"}, replayed=True
        )
        is None
    )
    assert (
        events.delivered(
            "wm-1", "genesys", "StructuredMessage", {"id": "m2"}, {"messageId": "m2"}, replayed=True
        )
        == 2
    )
    assert (
        events.delivered(
            "wm-1", "genesys", "StructuredMessage", {"id": "m2"}, {"messageId": "m2"}, replayed=True
        )
        is None
    )
    assert [(m["type"], m.get("sessionSeq"), m.get("replayed"), m.get("resync")) for m in seen] == [
        ("gap", None, None, "replayed"),
        ("platform", 2, True, None),
    ]
    assert events.stats()["duplicatesDropped"] == 2


def test_the_window_keeps_the_last_records_and_since_gets_what_was_missed_or_a_gap_naming_what_fell_out() -> (
    None
):
    events, _ = hub(WindowLimits(events=4, bytes=1 << 20, total_bytes=1 << 30))
    for n in range(1, 9):
        events.delivered("cx-1", "cxone", "AgentState", {"n": n}, {})
    everything = parse_subscription({"streams": ["platform"]}, known_states=STATES)

    def wants(r: PlatformRecord) -> bool:
        return everything.wants_platform(r.session_id, r.platform, r.agent_id, r.event_type)

    caught_up = [decode(r.frame) for r in events.replay({"cx-1": (BOOT, 6)}, wants)]
    assert [m["sessionSeq"] for m in caught_up] == [7, 8]
    behind = [decode(r.frame) for r in events.replay({"cx-1": (BOOT, 2)}, wants)]
    assert behind[0]["type"] == "gap" and (behind[0]["reason"], behind[0]["fromSeq"], behind[0]["toSeq"]) == (
        "window",
        3,
        4,
    )
    assert [m["sessionSeq"] for m in behind[1:]] == [5, 6, 7, 8]
    restarted = [decode(r.frame) for r in events.replay({"cx-1": ("boot-0", 99)}, wants)]
    assert (restarted[0]["reason"], restarted[0]["fromSeq"]) == ("restarted", 1)
    assert restarted[1]["reason"] == "window" and restarted[1]["toSeq"] == 4
    assert [m["sessionSeq"] for m in restarted[2:]] == [5, 6, 7, 8]


def test_the_daemon_wide_cap_takes_the_oldest_record_of_any_session_first() -> None:
    events, _ = hub(WindowLimits(events=100, bytes=1 << 20, total_bytes=1 << 20))
    events.delivered("cx-a", "cxone", "X", {"pad": "a" * 300}, {})
    events.delivered("cx-b", "cxone", "X", {"pad": "b" * 300}, {})
    size = events.stats()["windowBytes"]
    events.limits = WindowLimits(events=100, bytes=1 << 20, total_bytes=size)
    events.delivered("cx-b", "cxone", "X", {"pad": "c" * 300}, {})
    assert events.stats()["windowBytes"] <= size
    # cx-a went first (its gap, then its record): the oldest of the daemon, though cx-b grew
    everything = parse_subscription({"streams": ["platform"]}, known_states=STATES)
    replayed = events.replay(
        {"cx-a": (BOOT, 0)},
        lambda r: everything.wants_platform(r.session_id, r.platform, r.agent_id, r.event_type),
    )
    assert [decode(r.frame)["reason"] for r in replayed] == ["window"]
    kept = events.replay(
        {"cx-b": (BOOT, 0)},
        lambda r: everything.wants_platform(r.session_id, r.platform, r.agent_id, r.event_type),
    )
    assert [decode(r.frame).get("sessionSeq") for r in kept][-2:] == [1, 2]


def test_a_lagged_subscriber_is_told_which_records_it_lost_never_a_silent_drop() -> None:
    events, _ = hub()
    records: list[PlatformRecord] = []
    events.listen(records.append)
    for n in range(1, 4):
        events.delivered("cx-1", "cxone", "AgentState", {"n": n}, {})
    outbox = Outbox(400, lambda: b"snapshot\0", lagged_gap=events.lagged_gap)
    outbox.start(b"head\0")
    outbox.take()
    for record in records:
        outbox.push_platform(record)  # the gap and three records: past the cap
    assert outbox.lagged
    frames, recovery = outbox.take()
    assert recovery
    lagged, snapshot, old_gap, gap = frames
    assert decode(lagged)["type"] == "lagged" and snapshot == b"snapshot\0"
    assert decode(old_gap)["reason"] == "started"
    told = decode(gap)
    assert (told["type"], told["reason"], told["fromSeq"], told["toSeq"], told["sessionId"]) == (
        "gap",
        "lagged",
        1,
        3,
        "cx-1",
    )


def test_the_platform_stream_is_opt_in_and_never_part_of_all() -> None:
    assert not parse_subscription({"streams": ["all"]}, known_states=STATES).platform
    sub = parse_subscription(
        {
            "streams": ["platform"],
            "filter": {"agents": ["a-1"], "eventTypes": ["AgentState"]},
            "since": {"cx-1": {"bootId": BOOT, "seq": 3}},
        },
        known_states=STATES,
    )
    assert sub.platform and sub.since == {"cx-1": (BOOT, 3)}
    assert sub.wants_platform("cx-1", "cxone", "a-1", "AgentState")
    assert not sub.wants_platform("cx-1", "cxone", "a-2", "AgentState")
    assert not sub.wants_platform("cx-1", "cxone", "a-1", "CallContactEvent")
    assert sub.wants_platform("cx-1", "cxone", "a-1", None)  # a gap passes the event-type filter


@pytest.mark.parametrize(
    ("parameters", "problem"),
    [
        ({"since": {"cx-1": {"bootId": BOOT, "seq": 1}}}, "since: since resumes the platform stream"),
        ({"streams": ["platform"], "since": []}, "since: expected an object"),
        ({"streams": ["platform"], "since": {"cx-1": 3}}, "since: cx-1: expected an object"),
        ({"streams": ["platform"], "since": {"cx-1": {"bootId": BOOT, "seq": -1}}}, "since: cx-1.seq"),
        ({"streams": ["platform"], "since": {"cx-1": {"seq": 1}}}, "since: cx-1.bootId"),
        ({"streams": ["platform"], "filter": {"agents": [1]}}, "filter.agents: expected strings"),
    ],
)
def test_a_bad_since_or_filter_is_named(parameters: dict[str, Any], problem: str) -> None:
    with pytest.raises(ApiError) as caught:
        parse_subscription(parameters, known_states=STATES)
    assert str(caught.value.parameters["problem"]).startswith(problem)
