"""The owner's side of commands other fleet members wrote (supervisor/fleet/follow.py): what a row asks,
and which notices are followed, once each."""

from __future__ import annotations

import json

import anyio
import pytest

from supervisor.fleet.follow import DesiredFollower, Follow, decide
from supervisor.store.model import DesiredSession, DesiredState
from tests.harness.fleet import Received


def _row(state: DesiredState) -> DesiredSession:
    return DesiredSession("wm-1", "genesys", state)


@pytest.mark.parametrize(
    ("row", "running", "added", "expected"),
    [
        (_row(DesiredState.RUNNING), False, False, Follow.START),
        (_row(DesiredState.RUNNING), True, False, Follow.NOTHING),
        (_row(DesiredState.STOPPED), True, False, Follow.STOP),
        (_row(DesiredState.STOPPED), False, False, Follow.NOTHING),
        # a fail-fast's verdict is the owner's own: never a peer's command
        (_row(DesiredState.TERMINATED), False, False, Follow.NOTHING),
        (_row(DesiredState.TERMINATED), True, False, Follow.NOTHING),
        # a row gone: an added session is removed; a configured one is the file's
        (None, True, True, Follow.REMOVE),
        (None, True, False, Follow.NOTHING),
    ],
)
def test_what_a_row_asks_of_its_owner(
    row: DesiredSession | None, running: bool, added: bool, expected: Follow
) -> None:
    assert decide(row, running=running, added=added) is expected


def _notice(member: str, session_id: str, channel: str = "ss_desired", **more: str) -> Received:
    return Received(channel, json.dumps({"member": member, "sessionId": session_id, **more}), 1)


@pytest.mark.anyio
async def test_notices_of_owned_sessions_are_followed_once_each_in_order() -> None:
    followed: list[str] = []
    done = anyio.Event()

    async def follow(session_id: str) -> None:
        followed.append(session_id)
        if session_id == "wm-3":
            done.set()

    follower = DesiredFollower("me", owns=lambda s: s != "theirs", follow=follow)
    for notice in [
        _notice("peer", "wm-1"),
        _notice("peer", "wm-2"),
        _notice("peer", "wm-1"),  # before its re-read: followed once (the re-read sees the last write)
        _notice("me", "wm-9"),  # our own
        _notice("peer", "theirs"),  # a shard not owned here
        Received("ss_desired", "[1, 2]", 1),
        Received("ss_desired", "{", 1),
        _notice("peer", "wm-3"),
    ]:
        follower.on_desired(notice)
    async with anyio.create_task_group() as tg:
        await tg.start(follower.serve)
        with anyio.fail_after(5):
            await done.wait()
        tg.cancel_scope.cancel()
    assert followed == ["wm-1", "wm-2", "wm-3"]
    assert (follower.followed, follower.dropped) == (3, 4)


def test_an_attribute_notice_schedules_the_send_of_an_owned_session_only() -> None:
    sent: list[tuple[str, str, str]] = []

    async def follow(session_id: str) -> None:
        raise AssertionError("an attribute notice re-reads no desired row")

    follower = DesiredFollower(
        "me", owns=lambda s: s == "wm-1", follow=follow, attributes=lambda *a: sent.append(a)
    )
    follower.on_attributes(_notice("peer", "wm-1", "ss_attributes", tenant="genesys:c", conversationId="k"))
    follower.on_attributes(_notice("peer", "wm-2", "ss_attributes", tenant="genesys:c", conversationId="k"))
    follower.on_attributes(_notice("peer", "wm-1", "ss_attributes", tenant="genesys:c"))  # no conversation
    assert sent == [("wm-1", "genesys:c", "k")]
    assert follower.dropped == 2


@pytest.mark.anyio
async def test_a_reconnection_of_the_bus_follows_every_owned_row_again() -> None:
    everything = anyio.Event()

    async def follow(session_id: str) -> None:
        raise AssertionError(session_id)

    async def again() -> None:
        everything.set()

    follower = DesiredFollower("me", owns=lambda s: True, follow=follow, everything=again)
    follower.on_listening(False)  # the first LISTEN: nothing was missed
    async with anyio.create_task_group() as tg:
        await tg.start(follower.serve)
        await anyio.wait_all_tasks_blocked()
        assert not everything.is_set()
        follower.on_listening(True)
        with anyio.fail_after(5):
            await everything.wait()
        tg.cancel_scope.cancel()
