"""What the resyncer tells for a gap without reading anything (supervisor/runtime/resync.py), on the real hub.

The reads themselves (the guest history, a conversation's state) run against the simulators:
tests/integration/test_resync.py, tests/conformance/test_daemon_genesys_wire.py.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any, cast

import pytest

from supervisor.api.platform_events import GapOpened, GapReason, PlatformEvents, PlatformRecord
from supervisor.boundary import SessionContext
from supervisor.clock import FakeClock
from supervisor.runtime.resync import Resyncer, _conversation_of
from supervisor.runtime.sessions import SessionReader
from supervisor.taxonomy import Channel, Platform

CONVERSATION = "0f8fad5b-d9cb-469f-a165-70867728950e"


class Table:
    """The runners by id, each with only the context the resyncer reads."""

    def __init__(self, **channels: tuple[Platform, Channel]) -> None:
        self.runners = {
            sid: SimpleNamespace(context=SessionContext(sid, platform, channel))
            for sid, (platform, channel) in channels.items()
        }


def rig() -> tuple[PlatformEvents, Resyncer, list[dict[str, Any]]]:
    hub = PlatformEvents(boot_id="b-1", clock=FakeClock(start=1000.0))
    told: list[dict[str, Any]] = []

    def keep(record: PlatformRecord) -> None:
        told.append(json.loads(bytes(record.frame).rstrip(b"\0"))["parameters"])

    hub.listen(keep)
    table = Table(
        cx=(Platform.CXONE, Channel.AGENT_SESSION),
        nt=(Platform.GENESYS, Channel.NOTIFICATIONS),
        wm=(Platform.GENESYS, Channel.WEBMESSAGING),
    )
    return hub, Resyncer(hub, cast(SessionReader, table)), told


def gap(session_id: str, reason: GapReason = GapReason.RECONNECTED) -> GapOpened:
    return GapOpened(session_id, "genesys", reason, 4, 2.5)


@pytest.mark.parametrize(
    ("reason", "in_batch", "resync"),
    [
        (GapReason.RECONNECTED, True, "snapshot"),  # a (re)join's first poll carried the snapshot
        (GapReason.STARTED, True, "snapshot"),
        (GapReason.RECONNECTED, False, "none"),  # its first poll was empty: nothing came with it
        (GapReason.RESYNCED, False, "snapshot"),  # the replay's batch follows in the same step
    ],
)
def test_a_cxone_gap_is_snapshot_when_the_platforms_snapshot_brought_the_session_back(
    reason: GapReason, in_batch: bool, resync: str
) -> None:
    _, resyncer, told = rig()
    if in_batch:
        with resyncer.snapshot_batch("cx"):
            resyncer.opened(gap("cx", reason))
    else:
        resyncer.opened(gap("cx", reason))
    (record,) = told
    assert (record["type"], record["resync"], record["reason"], record["fromSeq"]) == (
        "gap",
        resync,
        reason.value,
        4,
    )


def test_a_notifications_gap_without_a_conversation_heard_of_is_none_at_once() -> None:
    _, resyncer, told = rig()
    resyncer.noted("nt", "v2.users.u-1.conversations", {"id": "not-a-conversation-id"})
    resyncer.opened(gap("nt"))
    assert [(r["type"], r["resync"]) for r in told] == [("gap", "none")]


def test_a_gap_that_needs_a_read_is_not_told_before_the_read() -> None:
    _, resyncer, told = rig()
    resyncer.noted("nt", "v2.users.u-1.conversations", {"id": CONVERSATION})
    resyncer.opened(gap("nt"))
    resyncer.opened(gap("wm"))
    assert told == []  # queued for serve(): told with what the read found


def test_an_unknown_session_is_told_none() -> None:
    _, resyncer, told = rig()
    resyncer.opened(gap("gone"))
    assert [r["resync"] for r in told] == ["none"]


@pytest.mark.parametrize(
    ("topic", "body", "expected"),
    [
        ("v2.users.u-1.conversations", {"id": CONVERSATION}, CONVERSATION),
        ("v2.users.u-1.conversations", {"id": 7}, None),
        ("v2.users.u-1.presence", {"id": CONVERSATION}, None),
        (f"v2.conversations.{CONVERSATION}.transcription", {}, CONVERSATION),
        ("v2.conversations.messages.x", {}, None),
        ("v2.system.socket_closing", None, None),
    ],
)
def test_the_conversation_a_notification_names(topic: str, body: object, expected: str | None) -> None:
    assert _conversation_of(topic, body) == expected
