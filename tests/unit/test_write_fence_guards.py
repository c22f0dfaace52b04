"""The write fence's decisions (supervisor/runtime/fence.py), on a CLOCK_BOOTTIME source the test
moves: which writes a shard's guard and a shared channel's guard refuse, and when."""

from __future__ import annotations

import pytest

from supervisor.errors import Fenced
from supervisor.runtime.fence import WriteFence
from supervisor.runtime.leases import Lease
from tests.harness.leases import ManualBoottime


def _fence(now: ManualBoottime, deadlines: dict[int, float | None]) -> WriteFence:
    fence = WriteFence(now=now)
    fence.follow({s: Lease(s, 1, d) for s, d in deadlines.items()})
    return fence


def test_a_shard_guard_refuses_from_its_deadline_on_and_a_renewal_lifts_it() -> None:
    now = ManualBoottime(100.0)
    fence = _fence(now, {1: 106.0, 2: 110.0})
    one = fence.guard(1)
    assert fence.guard(1) is one  # one guard per shard: every socket of its sessions shares it
    one.check()
    now.advance(5.999)
    one.check()
    now.advance(0.001)  # at the deadline itself: refused
    with pytest.raises(Fenced) as refused:
        one.check()
    assert refused.value.shards == (1,) and refused.value.deadline == 106.0
    fence.guard(2).check()  # another shard's deadline is its own
    fence.follow({1: Lease(1, 1, 112.0), 2: Lease(2, 1, 110.0)})
    one.check()


def test_a_shard_not_held_is_fenced_and_a_lease_without_deadline_never_is() -> None:
    now = ManualBoottime()
    fence = _fence(now, {1: None})
    now.advance(1e9)
    fence.guard(1).check()
    with pytest.raises(Fenced) as refused:
        fence.guard(2).check()
    assert refused.value.deadline is None


def test_a_stall_past_the_bound_fences_every_shard_until_the_next_word_of_the_leases() -> None:
    now = ManualBoottime()
    fence = _fence(now, {1: now() + 100, 2: now() + 100})
    fence.stalled(2.0)  # at the bound: not a stall
    fence.guard(1).check()
    fence.stalled(2.01)
    assert fence.lagging and fence.stalls == 1
    for shard in (1, 2):
        with pytest.raises(Fenced):
            fence.guard(shard).check()
    fence.follow({1: Lease(1, 1, now() + 100), 2: Lease(2, 1, now() + 100)})
    fence.guard(1).check()


def test_a_channels_guard_stops_at_the_earliest_deadline_of_the_shards_it_carries() -> None:
    now = ManualBoottime(0.0)
    fence = _fence(now, {1: 10.0, 2: 5.0, 3: 20.0, 9: 2.0})
    carried = {1, 3}
    channel = fence.earliest(lambda: carried)
    assert channel.deadline() == 10.0  # shard 9's earlier deadline is not the channel's business
    carried.add(2)
    assert channel.deadline() == 5.0
    # a shard lost is left out (its sessions are leaving the channel); none held at all: fenced
    fence.follow({1: Lease(1, 1, 10.0), 3: Lease(3, 1, 20.0), 9: Lease(9, 1, 2.0)})
    assert channel.deadline() == 10.0
    carried.clear()
    assert channel.deadline() == 2.0  # carrying nothing yet: the member's earliest
    carried.add(7)
    with pytest.raises(Fenced):
        channel.check()
    carried.clear()
    carried.add(1)
    now.advance(10.0)
    with pytest.raises(Fenced) as refused:
        channel.check()
    assert refused.value.shards == (1,) and refused.value.deadline == 10.0


def test_the_watchdog_aborts_the_sockets_of_a_guard_past_its_deadline_only() -> None:
    now = ManualBoottime(0.0)
    fence = _fence(now, {1: 5.0, 2: 50.0})
    aborted: list[str] = []
    fence.guard(1).adopt(lambda: aborted.append("a1"))
    release = fence.guard(1).adopt(lambda: aborted.append("a2"))
    fence.guard(2).adopt(lambda: aborted.append("b"))
    release()  # closed on its own: nothing to abort
    assert fence.enforce() == 0
    now.advance(5.0)
    assert fence.enforce() == 1 and aborted == ["a1"]
    assert fence.guard(1).sockets == 0 and fence.guard(2).sockets == 1
    # a shard lost: its sockets are aborted at once
    fence.follow({})
    assert aborted == ["a1", "b"]
