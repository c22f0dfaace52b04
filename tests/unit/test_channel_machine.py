"""The shared notifications channel machine (machines/channel.py): pure, driven by the fake clock."""

from __future__ import annotations

import random

import pytest

from machines.channel import (
    ChannelConfig,
    ChannelCore,
    ChannelMachine,
    ChannelMoved,
    ConnectChannel,
    MembersDropped,
    ScheduleChannelReconnect,
)
from machines.diagrams import mermaid
from machines.effects import InputRejected
from supervisor.clock import FakeClock
from supervisor.vocabulary.states import ChannelState


def _open(clock: FakeClock, seed: int = 7, members: tuple[str, ...] = ("a", "b", "c")) -> ChannelCore:
    core = ChannelCore("genesys/0", clock, random.Random(seed))
    for member in members:
        core.join(member)
    core.connected()
    return core


def _schedule(effects: list[object]) -> ScheduleChannelReconnect:
    (schedule,) = [e for e in effects if isinstance(e, ScheduleChannelReconnect)]
    return schedule


def test_a_drop_moves_every_member_and_the_first_reconnection_waits_u_2_8() -> None:
    clock = FakeClock(100.0)
    delays = []
    for seed in range(200):
        core = _open(clock, seed)
        effects = core.dropped()
        assert effects[0] == ChannelMoved(
            "genesys/0", ChannelState.OPEN, ChannelState.RECONNECTING, "dropped"
        )
        assert MembersDropped("genesys/0", ("a", "b", "c")) in effects
        schedule = _schedule(effects)
        assert schedule.first and schedule.attempt == 1
        assert schedule.at == pytest.approx(100.0 + schedule.delay_s)
        delays.append(schedule.delay_s)
    assert all(2.0 <= d <= 8.0 for d in delays)
    # drawn, not fixed: the fleet's channels come back spread over the range
    assert min(delays) < 3.0 and max(delays) > 7.0


def test_one_reconnection_of_the_channel_recovers_it_and_resets_the_count() -> None:
    clock = FakeClock()
    core = _open(clock)
    core.dropped()
    clock.advance(8.0)
    effects = core.reconnect_due(None)
    assert effects == [
        ChannelMoved("genesys/0", ChannelState.RECONNECTING, ChannelState.CONNECTING, "reconnect"),
        ConnectChannel("genesys/0", 1),
    ]
    core.connected()
    assert core.state is ChannelState.OPEN
    assert core.reconnections == 1 and core.attempts == 0
    # the members stay with the channel across its reconnection
    assert core.members == ("a", "b", "c")
    # the next drop waits U(2, 8) again: the count was reset by the success
    assert _schedule(core.dropped()).first


def test_failed_reconnections_back_off_up_to_the_ceiling() -> None:
    clock = FakeClock()
    core = ChannelCore("c", clock, random.Random(3), ChannelConfig(max_delay_s=60.0))
    core.dropped()  # the first connection failed
    ceilings = []
    for _ in range(8):
        core.reconnect_due(None)
        schedule = _schedule(core.dropped())
        assert not schedule.first
        ceilings.append(schedule.delay_s)
    assert all(2.0 <= d <= 60.0 for d in ceilings)
    assert core.attempts == 9


def test_an_open_circuit_defers_the_reconnection_without_counting_it() -> None:
    clock = FakeClock(10.0)
    core = _open(clock)
    core.dropped()
    effects = core.reconnect_due(12.5)
    assert effects == [ScheduleChannelReconnect("genesys/0", 22.5, 1, 12.5, False)]
    assert core.state is ChannelState.RECONNECTING and core.attempts == 1


def test_strict_inputs_and_nothing_leaves_closed() -> None:
    core = _open(FakeClock())
    with pytest.raises(InputRejected):
        core.reconnect_due(None)  # open: no reconnection pending
    with pytest.raises(InputRejected):
        core.connected()  # already open
    core.close()
    assert core.state is ChannelState.CLOSED
    for feed in (core.dropped, core.connected, core.close):
        with pytest.raises(InputRejected):
            feed()
    with pytest.raises(InputRejected):
        core.join("d")
    core.leave("a")  # a member leaving a closed channel is no error
    assert core.members == ("b", "c")


def test_a_drop_without_members_schedules_but_drops_nobody() -> None:
    core = _open(FakeClock(), members=())
    effects = core.dropped()
    assert not [e for e in effects if isinstance(e, MembersDropped)]


def test_config_is_checked() -> None:
    with pytest.raises(ValueError, match="first_delay_s"):
        ChannelConfig(first_delay_s=(8.0, 2.0))
    with pytest.raises(ValueError, match="max_delay_s"):
        ChannelConfig(max_delay_s=1.0)


def test_the_diagram_draws_the_channel_cycle() -> None:
    text = mermaid(ChannelMachine)
    assert "    [*] --> connecting\n" in text
    assert "    connecting --> open : connected\n" in text
    assert "    open --> reconnecting : dropped\n" in text
    assert "    reconnecting --> connecting : reconnect\n" in text
    assert "    reconnecting --> reconnecting : throttled (internal)\n" in text
    assert "    closed --> [*]\n" in text
