"""The pool of one OAuth client's shared channels: which channel a session joins, and ChannelLimit
(supervisor/transports/channel_pool.py). The channels' own I/O is the integration tests' business
(tests/integration/test_shared_channels.py); here no channel runs."""

from __future__ import annotations

import random
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from supervisor.clock import FakeClock
from supervisor.errors import ChannelLimit, SessionError
from supervisor.transports.channel_pool import ChannelPool, ChannelPools, Member


class UnservedPools(ChannelPools):
    """Pools whose channels are counted, not run."""

    def __init__(self, **limits: int) -> None:
        super().__init__(clock=FakeClock(), rng=random.Random(1), sleep=_never, **limits)
        self.spawned: list[Callable[[], Coroutine[Any, Any, None]]] = []

    def spawn(self, run: Callable[[], Coroutine[Any, Any, None]]) -> None:
        self.spawned.append(run)


async def _never(seconds: float) -> None:
    raise AssertionError("nothing sleeps here")


def pool(channels: int, topics: int) -> ChannelPool:
    pools = UnservedPools(channel_limit=channels, topic_limit=topics)
    return pools._pools.setdefault(
        "client-a", ChannelPool("client-a", pools, topic_limit=topics, channel_limit=channels)
    )


def member(i: int, *topics: str) -> Member:
    return Member(f"s-{i}", topics or (f"v2.users.{i}.conversations",), None)


def test_sessions_fill_a_channel_before_the_next_is_opened() -> None:
    p = pool(channels=3, topics=2)
    joined = [p.join(member(i)) for i in range(5)]
    assert [c.key for c in joined] == ["client-a#1"] * 2 + ["client-a#2"] * 2 + ["client-a#3"]
    assert [c.topic_count for c in p.channels] == [2, 2, 1]


def test_a_topic_two_sessions_share_is_held_once() -> None:
    p = pool(channels=1, topics=1)
    first = p.join(member(1, "v2.users.x.conversations"))
    # the same agent's topic: no room needed
    assert p.join(member(2, "v2.users.x.conversations")) is first
    assert first.topic_count == 1


def test_the_session_that_would_need_one_channel_too_many_is_refused() -> None:
    p = pool(channels=2, topics=2)
    for i in range(4):
        p.join(member(i))
    with pytest.raises(ChannelLimit) as refused:
        p.join(member(4))
    assert isinstance(refused.value, SessionError)  # in the one exception tree, a session's refusal
    assert (refused.value.client, refused.value.channels, refused.value.topics) == ("client-a", 2, 2)
    assert "client-a" in str(refused.value) and "2 notification channels" in str(refused.value)
    assert len(p.channels) == 2  # nothing was opened for it
    # a session that leaves makes room again
    leaving = next(iter(p.channels[0].members.values()))
    p.channels[0].remove(leaving, quietly=True)
    assert p.join(member(5)) is p.channels[0]
