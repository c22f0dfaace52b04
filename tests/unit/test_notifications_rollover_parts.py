"""The parts of a notifications rollover that decide without I/O (docs/runtime.md, "Notifications rollover"): which event of
an overlap is a duplicate, when a channel is renewed, and how many channels one OAuth client holds."""

from __future__ import annotations

import anyio
import pytest

from supervisor.events import RolloverReason
from supervisor.transports.channel_quota import ChannelQuota
from supervisor.transports.overlap import OverlapDedupe, event_digest
from supervisor.transports.renewal import MIN_GAP_S, RENEW_LEAD_S, renewal_due


def event(topic: str, body: dict[str, object], correlation: str | None = "c-1") -> dict[str, object]:
    frame: dict[str, object] = {"topicName": topic, "version": "2", "eventBody": body}
    if correlation is not None:
        frame["metadata"] = {"CorrelationId": correlation}
    return frame


# -- the overlap ------------------------------------------------------------------------------------------


def test_an_event_on_both_channels_is_delivered_once_whichever_comes_first() -> None:
    dedupe = OverlapDedupe()
    first = event("v2.users.u.conversations", {"id": "c", "state": "connected"})
    assert dedupe.admit("old", first)
    assert not dedupe.admit("new", dict(first))  # the new channel's copy
    second = event("v2.users.u.conversations", {"id": "c", "state": "disconnected"}, "c-2")
    assert dedupe.admit("new", second)
    assert not dedupe.admit("old", dict(second))  # the old channel's late copy
    assert dedupe.dropped == 2


def test_a_repeat_on_one_channel_and_distinct_events_sharing_a_correlation_id_pass() -> None:
    dedupe = OverlapDedupe()
    frame = event("v2.users.u.presence", {"presence": "Available"})
    assert dedupe.admit("ch", frame) and dedupe.admit("ch", dict(frame))  # the platform's repeat: not ours
    # one request can publish two different updates under one CorrelationId: both are events
    assert dedupe.admit("new", event("v2.users.u.presence", {"presence": "Away"}))
    assert dedupe.admit("new", event("v2.users.u.routingStatus", {"presence": "Available"}))
    assert dedupe.dropped == 0


def test_the_digest_ignores_key_order_and_frames_without_metadata_are_compared_by_body() -> None:
    a = {"topicName": "t", "eventBody": {"a": 1, "b": [1, 2]}}
    b = {"eventBody": {"b": [1, 2], "a": 1}, "topicName": "t"}
    assert event_digest(a) == event_digest(b)
    assert event_digest(a) != event_digest({"topicName": "t", "eventBody": {"a": 2, "b": [1, 2]}})
    dedupe = OverlapDedupe()
    assert dedupe.admit("old", a) and not dedupe.admit("new", b)


def test_only_the_last_two_channels_are_remembered_and_each_is_bounded() -> None:
    dedupe = OverlapDedupe(capacity=2)
    frames = [event("t", {"n": n}) for n in range(3)]
    for frame in frames:
        dedupe.admit("a", frame)
    assert dedupe.admit("b", frames[0])  # pushed out of a's last two: forgotten, delivered
    assert not dedupe.admit("b", frames[2])
    dedupe.admit("c", event("t", {"n": 9}))
    assert dedupe.channels() == ("b", "c")  # a is two rollovers ago
    assert dedupe.admit("c", frames[1])  # only a had delivered it
    with pytest.raises(ValueError, match="capacity"):
        OverlapDedupe(capacity=0)


# -- the renewal schedule ---------------------------------------------------------------------------------


def test_a_day_long_channel_with_a_day_long_token_is_renewed_five_minutes_before_the_earlier() -> None:
    due = renewal_due(1000.0, channel_expires_at=1000.0 + 86_400, token_expires_at=1000.0 + 86_000)
    assert due is not None
    assert (due.at, due.reason) == (1000.0 + 86_000 - RENEW_LEAD_S, RolloverReason.TOKEN_EXPIRING)
    due = renewal_due(0.0, channel_expires_at=3600.0, token_expires_at=7200.0)
    assert due is not None and (due.at, due.reason) == (
        3600.0 - RENEW_LEAD_S,
        RolloverReason.CHANNEL_EXPIRING,
    )


def test_a_short_lived_token_keeps_three_quarters_of_its_life() -> None:
    due = renewal_due(0.0, channel_expires_at=86_400.0, token_expires_at=300.0)
    assert due is not None and due.at == 225.0 and due.reason is RolloverReason.TOKEN_EXPIRING


def test_a_deadline_already_past_is_renewed_after_the_minimum_gap_and_none_without_deadlines() -> None:
    due = renewal_due(50.0, channel_expires_at=None, token_expires_at=40.0)
    assert due is not None and due.at == 50.0 + MIN_GAP_S
    assert renewal_due(0.0, channel_expires_at=None, token_expires_at=None) is None


# -- the 20-channel quota ---------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_rollover_overlap_waits_for_a_place_another_rollover_frees() -> None:
    quota = ChannelQuota(limit=3)
    sessions = [await quota.reserve() for _ in range(2)]
    first = await quota.reserve(overlap=True)  # the spare place
    assert first.granted and quota.held == 3 and quota.overlaps == 1
    granted: list[bool] = []

    async def second_rollover() -> None:
        place = await quota.reserve(overlap=True)
        granted.append(place.granted)

    async with anyio.create_task_group() as tg:
        tg.start_soon(second_rollover)
        await anyio.wait_all_tasks_blocked()
        assert granted == []  # waiting, not refused: the first rollover ends soon
        sessions[0].release()  # the first rollover closed its old channel...
        first.settle()  # ...and its new one is now the session's own
    assert granted == [True] and quota.held == 3 and quota.overlaps == 1
    assert all(s.granted for s in sessions)


@pytest.mark.anyio
async def test_sessions_filling_the_quota_refuse_an_overlap_at_once_and_release_is_idempotent() -> None:
    quota = ChannelQuota(limit=2)
    a, b = await quota.reserve(), await quota.reserve()
    refused = await quota.reserve(overlap=True)
    assert not refused.granted and quota.held == 2  # break-before-make: nothing would free a place
    refused.release()
    a.release()
    a.release()
    assert quota.held == 1
    again = await quota.reserve()
    assert again.granted and quota.held == 2
    b.release()
    again.release()
    assert quota.held == 0 and quota.overlaps == 0
    with pytest.raises(ValueError, match="limit"):
        ChannelQuota(limit=0)


# -- what the bus and the socket API carry ----------------------------------------------------------------


def test_a_rollover_event_in_its_wire_form_and_its_stream() -> None:
    from supervisor.api.messages import parse_subscription
    from supervisor.events import ConnectionRolledOver, Correlation, Published, wire

    event = ConnectionRolledOver(
        "n-1",
        RolloverReason.PLATFORM_SIGNAL,
        "streaming-1-old",
        "streaming-2-new",
        True,
        0.01234,
        1,
        "2026-12-01T10:00:00.000Z",
        "SOCKET_CLOSING",
    )
    line = wire(Published(7, "boot", event, Correlation("n-1", platform_session_id="streaming-2-new")))
    assert line == {
        "event": "CONNECTION_ROLLED_OVER",
        "sessionId": "n-1",
        "platformSessionId": "streaming-2-new",
        "timestamp": "2026-12-01T10:00:00.000Z",
        "reason": "PLATFORM_SIGNAL",
        "previous": "streaming-1-old",
        "current": "streaming-2-new",
        "makeBeforeBreak": True,
        "overlapS": 0.012,
        "duplicatesDropped": 1,
        "code": "SOCKET_CLOSING",
        "seq": 7,
        "bootId": "boot",
    }
    sub = parse_subscription({"streams": ["rollovers"]}, known_states=frozenset({"active"}))
    assert sub.wants_event("CONNECTION_ROLLED_OVER") and not sub.wants_event("RETRY_ATTEMPT")
