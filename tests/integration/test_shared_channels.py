"""Notifications sessions as subscriptions on channels their OAuth client shares (docs/runtime.md,
"Shared notification channels"), supervised end to end against the Genesys simulator over loopback.

The simulator enforces what the platform does: at most ``max_topics`` topics per channel, 20
channels per OAuth client (a 21st removes the oldest, unconnected first), the subscription verbs
with their bodies. Smaller limits than the platform's keep these tests fast; the acceptance test with
2,000 agents on two channels runs the platform's own numbers.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from websockets.asyncio.client import connect

from supervisor.events import RolloverReason
from supervisor.sim.faults import Fault, FaultKind
from supervisor.sim.genesys import GenesysSimConfig, GenesysSimulator
from supervisor.transports.channel_pool import ChannelPool, SharedChannel
from supervisor.vocabulary import GENESYS_STREAMING
from supervisor.vocabulary.states import ChannelState
from tests.harness.config import genesys_config
from tests.harness.in_process import Harness, supervised
from tests.harness.simulators import StartGenesys
from tests.harness.waits import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

CLIENT = "demo-client"


def shared_config(urls: dict[str, str], agents: int, topics: int = 1000, **overrides: Any) -> str:
    base = genesys_config(urls, 0, notifications=agents, **overrides)
    shared = f"sharedChannels = true\ntopicsPerChannel = {topics}\n"
    return base.replace("[platforms.genesys.keepalive]\n", shared + "[platforms.genesys.keepalive]\n", 1)


def topic(i: int) -> str:
    return f"v2.users.n-{i}.conversations"


class Delivered:
    """The notification sink: the events each session was handed."""

    def __init__(self) -> None:
        self.by_session: dict[str, list[Mapping[str, Any]]] = {}

    def __call__(self, session_id: str, event: Mapping[str, Any]) -> None:
        self.by_session.setdefault(session_id, []).append(event)

    def count(self) -> int:
        return sum(len(v) for v in self.by_session.values())


def pool_of(h: Harness) -> ChannelPool:
    return h.supervisor.wiring.channel_pools.pools[CLIENT]


def sim_channels(sim: GenesysSimulator) -> dict[str, list[str]]:
    """The platform's channels of our client and the topics each holds."""
    return {c.id: list(c.topics) for c in sim.state.channels.values() if c.owner == CLIENT}


async def test_agents_share_channels_up_to_the_topic_limit_and_each_gets_its_own_events(
    tmp_path: Path, start_genesys: StartGenesys
) -> None:
    sim = await start_genesys(GenesysSimConfig(max_topics=4), seed=3)
    sink = Delivered()
    async with supervised(shared_config(sim.urls, 10, topics=4), tmp_path, notification_sink=sink) as h:
        await h.wait(lambda: len(h.runners) == 10 and h.all_in("active"))
        channels = sim_channels(sim)
        # 10 agents of 4 topics a channel: 3 channels, every agent's topic held by exactly one
        assert len(channels) == 3
        held = sorted(t for topics in channels.values() for t in topics)
        assert held == sorted(topic(i) for i in range(10))
        assert all(len(topics) <= 4 for topics in channels.values())
        for i in range(10):
            assert sim.publish(topic(i), {"for": i}) == 1
        await h.wait(lambda: sink.count() == 10)
        assert {sid: [e["eventBody"] for e in evs] for sid, evs in sink.by_session.items()} == {
            f"nt-{i}": [{"for": i}] for i in range(10)
        }
        assert h.terminations() == {}


def channel_of_topic(h: Harness, wanted: str) -> SharedChannel:
    (channel,) = [c for c in pool_of(h).channels if any(wanted in m.topics for m in c.members.values())]
    return channel


def left_active(h: Harness) -> set[str]:
    return {t["sessionId"] for t in h.recorded.named("SESSION_TRANSITION") if t["from"] == "active"}


@pytest.mark.parametrize("how", ["abort", "close-1000"])
async def test_a_channel_drop_recovers_all_its_agents_through_one_reconnection_of_the_channel(
    tmp_path: Path, start_genesys: StartGenesys, how: str
) -> None:
    """However the channel ended (the link died: 1006; the server closed it normally: 1000, which for
    a session of its own is a graceful end), its agents reconnect: the channel's end is not theirs."""
    sim = await start_genesys(GenesysSimConfig(), seed=4)
    sink = Delivered()
    async with supervised(shared_config(sim.urls, 6, topics=3), tmp_path, notification_sink=sink) as h:
        await h.wait(lambda: len(h.runners) == 6 and h.all_in("active"))
        dropped = channel_of_topic(h, topic(0))
        other = next(c for c in pool_of(h).channels if c is not dropped)
        on_dropped = set(dropped.members)
        assert len(on_dropped) == 3 and len(other.members) == 3
        link = dropped.link
        assert link is not None
        old_id = link.channel_id
        conn = sim.notifications.by_channel[old_id]
        if how == "abort":
            conn.transport.abort()  # the platform side of the socket dies (no close frame: 1006)
        else:
            await conn.close(1000)
        await h.wait(lambda: dropped.last_drop is not None)
        assert dropped.last_drop is not None
        assert dropped.last_drop.close_code == (1006 if how == "abort" else 1000)
        # the channel's end is classified and published once, as the channel's
        own = [
            e
            for e in h.recorded.named("SDK_ERROR_CLASSIFIED")
            if e["context"].get("sessionId") == dropped.key
        ]
        assert [e["code"] for e in own] == ["ABNORMAL_CLOSURE" if how == "abort" else "GRACEFUL_CLOSE"]
        await h.wait(lambda: dropped.core.reconnections == 1 and dropped.core.state is ChannelState.OPEN)
        await h.wait(lambda: h.all_in("active"))
        # its agents went to reconnecting and came back; the other channel's never left active
        assert left_active(h) == on_dropped
        assert dropped.connections == 2 and other.connections == 1
        assert other.core.reconnections == 0
        # the new channel holds the three topics again, in the reconnection's one PUT
        new = dropped.link
        assert new is not None and new.channel_id != old_id
        assert sorted(sim.state.channels[new.channel_id].topics) == sorted(
            t for m in dropped.members.values() for t in m.topics
        )
        assert h.terminations() == {}
        for i in range(6):
            assert sim.publish(topic(i), {"after": i}) == 1
        await h.wait(lambda: sink.count() == 6)


async def test_a_channel_evicted_by_another_integrations_21st_recovers_all_its_agents_paced(
    tmp_path: Path, start_genesys: StartGenesys
) -> None:
    """Another integration on the same OAuth client opens channels until the platform removes the
    oldest (ours): its agents move to a new channel, each reconnection admitted on its own."""
    sim = await start_genesys(GenesysSimConfig(max_channels=4), seed=5)
    sink = Delivered()
    async with (
        supervised(shared_config(sim.urls, 6, topics=3), tmp_path, notification_sink=sink) as h,
        httpx.AsyncClient() as http,
    ):
        await h.wait(lambda: len(h.runners) == 6 and h.all_in("active"))
        by_id = {c.link.channel_id: c for c in pool_of(h).channels if c.link is not None}
        ours = set(by_id)
        assert len(ours) == 2
        token = await http.post(
            sim.urls["login"] + "/oauth/token", data={"grant_type": "client_credentials"}, auth=(CLIENT, "x")
        )
        auth = {"Authorization": f"Bearer {token.json()['access_token']}"}
        sockets = []
        try:
            # the other integration's channels, connected (an unconnected one would be removed first)
            for _ in range(3):
                created = await http.post(sim.urls["api"] + "/api/v2/notifications/channels", headers=auth)
                assert created.status_code == 200
                sockets.append(await connect(created.json()["connectUri"]))
            # its third is the client's fifth over a limit of four: the oldest, one of ours, is removed
            await h.wait(lambda: len(ours & set(sim_channels(sim))) == 1)
        finally:
            # the other integration goes away: its channels, unconnected, are the first the platform
            # removes when ours is created again (else each creation would remove the next oldest)
            for ws in sockets:
                await ws.close()
        (evicted_id,) = ours - set(sim_channels(sim))
        evicted = by_id[evicted_id]
        await h.wait(lambda: evicted.core.reconnections == 1 and h.all_in("active"), limit_s=20.0)
        moved = left_active(h)
        assert moved == set(evicted.members)
        # paced: each of its agents reconnected once, at its own drawn delay, admitted by the
        # streaming endpoint; not in one instant
        attempts = [(t, e) for t, e in h.recorded.timed("RETRY_ATTEMPT") if e["sessionId"] in moved]
        assert len(attempts) == len(moved) == 3
        assert len({round(e["delayS"], 3) for _, e in attempts}) == 3
        assert h.terminations() == {}
        for i in range(6):
            assert sim.publish(topic(i), {"after": i}) == 1
        await h.wait(lambda: sink.count() == 6)


@pytest.mark.parametrize(
    ("agents", "topics"),
    [
        # the default suite's: the same shape, smaller (one second)
        pytest.param(300, 150, id="300-agents"),
        # the platform's own numbers: 1,000 topics a channel (about 5 s idle, 13 s loaded)
        pytest.param(2000, 1000, id="2000-agents", marks=pytest.mark.channels_scale),
    ],
)
async def test_agents_of_one_client_ride_two_channels_each_with_its_own_events(
    tmp_path: Path, start_genesys: StartGenesys, agents: int, topics: int
) -> None:
    """Twice a channel's topics of agents on two channels, every agent's topic subscribed (in a
    few requests, not one each) and its events delivered to it, to it alone."""
    sim = await start_genesys(GenesysSimConfig(), seed=6)
    sink = Delivered()
    async with supervised(
        shared_config(sim.urls, agents, topics=topics, adaptive=False),
        tmp_path,
        notification_sink=sink,
        record=False,
    ) as h:
        await h.wait(lambda: len(h.runners) == agents and h.all_in("active"), limit_s=30.0)
        channels = sim_channels(sim)
        assert len(channels) == 2
        assert sorted(t for topics in channels.values() for t in topics) == sorted(
            topic(i) for i in range(agents)
        )
        pool = pool_of(h)
        # batched: the topics went in far fewer requests than there are agents
        assert sum(c.batches + c.connections for c in pool.channels) < agents // 10
        for i in range(agents):
            assert sim.publish(topic(i), {"for": i}) == 1
        await h.wait(lambda: sink.count() == agents, limit_s=30.0)
        assert all(
            [e["eventBody"] for e in sink.by_session[f"nt-{i}"]] == [{"for": i}] for i in range(agents)
        )
        assert h.terminations() == {}


async def test_a_planned_renewal_is_make_before_break_and_its_agents_never_notice(
    tmp_path: Path, start_genesys: StartGenesys
) -> None:
    """A channel about to expire (here: 2 s) is replaced by a new one, subscribed with every topic
    before the old one is closed: an event published at any moment reaches its session once."""
    sim = await start_genesys(GenesysSimConfig(channel_ttl_s=2), seed=7)
    sink = Delivered()
    async with supervised(shared_config(sim.urls, 3), tmp_path, notification_sink=sink) as h:
        await h.wait(lambda: len(h.runners) == 3 and h.all_in("active"))
        (channel,) = pool_of(h).channels
        first = channel.link
        assert first is not None
        assert not h.recorded.named("CONNECTION_ROLLED_OVER")
        sent = after = 0
        with anyio.fail_after(10):
            # events spread over the renewal and 50 after it (the publisher's pace, not a timer)
            while after < 50:
                # never 0: at every moment a socket carries the topic
                assert sim.publish(topic(1), {"n": sent}) >= 1
                sent += 1
                after += channel.rollovers
                await anyio.sleep(0.005)
        await h.wait(lambda: len(sink.by_session.get("nt-1", [])) == sent)
        assert [e["eventBody"]["n"] for e in sink.by_session["nt-1"]] == list(range(sent))
        assert channel.link is not None and channel.link.channel_id != first.channel_id
        # each session's platform id is the channel it rides on now
        assert {r.context.platform_session_id for r in h.runners.values()} == {channel.link.channel_id}
        assert channel.core.reconnections == 0 and left_active(h) == set()
        assert sorted(sim.state.channels[channel.link.channel_id].topics) == sorted(
            topic(i) for i in range(3)
        )
        # each session is told, as a session on a channel of its own is: the first renewal, from
        # the first channel to the next, make-before-break, both open for a while
        rolled = [e for e in h.recorded.named("CONNECTION_ROLLED_OVER") if e["previous"] == first.channel_id]
        assert sorted(e["sessionId"] for e in rolled) == ["nt-0", "nt-1", "nt-2"]
        assert {e["reason"] for e in rolled} == {"CHANNEL_EXPIRING"}
        assert all(e["makeBeforeBreak"] and e["overlapS"] > 0 for e in rolled)
        assert len({e["current"] for e in rolled}) == 1 and rolled[0]["current"] != first.channel_id


async def test_a_stopped_session_takes_its_topic_off_and_the_last_one_closes_the_channel(
    tmp_path: Path, start_genesys: StartGenesys
) -> None:
    sim = await start_genesys(GenesysSimConfig(), seed=8)
    async with supervised(shared_config(sim.urls, 3), tmp_path) as h:
        await h.wait(lambda: len(h.runners) == 3 and h.all_in("active"))
        (channel,) = pool_of(h).channels
        assert channel.link is not None
        chan_id = channel.link.channel_id
        socket = sim.notifications.by_channel[chan_id]
        await h.supervisor.stop("nt-0")
        # one PUT of the topics that stay (no verb removes one topic)
        await h.wait(lambda: sorted(sim.state.channels[chan_id].topics) == [topic(1), topic(2)])
        assert sim.publish(topic(0), {"gone": True}) == 0
        await h.supervisor.stop("nt-1")
        await h.supervisor.stop("nt-2")
        await h.wait(lambda: pool_of(h).channels == [] and chan_id not in sim.notifications.by_channel)
        assert channel.core.state is ChannelState.CLOSED
        assert socket.close_code == 1000  # stopped: a normal closure


async def test_a_renewal_due_after_every_member_left_makes_no_channel(
    tmp_path: Path, start_genesys: StartGenesys
) -> None:
    """The renewal and the last member's leaving race: when the renewal comes first to a channel whose
    members have all gone (its batches task not yet run), it carries nothing over and makes no channel
    (the platform has no channel without a topic); it once raised "needs at least one topic"."""
    sim = await start_genesys(GenesysSimConfig(), seed=9)
    async with supervised(shared_config(sim.urls, 1), tmp_path) as h:
        await h.wait(lambda: len(h.runners) == 1 and h.all_in("active"))
        (channel,) = pool_of(h).channels
        link = channel.link
        assert link is not None
        before = set(sim.state.channels)
        # the moment of the race: the member gone from the channel, the renewal due
        channel.members.clear()
        channel._by_topic.clear()
        await channel._roll_over(RolloverReason.CHANNEL_EXPIRING)
        assert channel.link is link and channel.rollovers == 0
        assert set(sim.state.channels) == before


async def test_a_shutdown_closes_the_channel_going_away_and_removes_no_topic(
    tmp_path: Path, start_genesys: StartGenesys
) -> None:
    sim = await start_genesys(GenesysSimConfig(), seed=10)
    async with supervised(shared_config(sim.urls, 3), tmp_path) as h:
        await h.wait(lambda: len(h.runners) == 3 and h.all_in("active"))
        (channel,) = pool_of(h).channels
        assert channel.link is not None
        chan_id = channel.link.channel_id
        socket = sim.notifications.by_channel[chan_id]
    # the block's end drains the daemon: its sessions stop with 1001 and leave without a request
    await wait_until(lambda: socket.close_code is not None)
    assert socket.close_code == 1001
    assert sorted(sim.state.channels[chan_id].topics) == sorted(topic(i) for i in range(3))


async def test_the_channels_reconnection_waits_for_its_endpoints_circuit(
    tmp_path: Path, start_genesys: StartGenesys
) -> None:
    """The streaming endpoint isolated by an operator admits nothing: a dropped channel stays in
    reconnecting without an attempt, and one reconnection follows the circuit's close."""
    sim = await start_genesys(GenesysSimConfig(), seed=9)
    async with supervised(shared_config(sim.urls, 2), tmp_path) as h:
        await h.wait(lambda: len(h.runners) == 2 and h.all_in("active"))
        (channel,) = pool_of(h).channels
        assert channel.link is not None
        created = len(sim_channels(sim))
        h.supervisor.manual_circuits.isolate(GENESYS_STREAMING)
        sim.notifications.by_channel[channel.link.channel_id].transport.abort()
        # its reconnection comes due (0.2-0.8 s) and is deferred by the circuit (each open period), not attempted
        await h.wait(lambda: channel.deferrals >= 1, limit_s=10.0)
        assert channel.core.state is ChannelState.RECONNECTING and channel.core.attempts == 1
        assert len(sim_channels(sim)) == created and channel.connections == 1
        h.supervisor.manual_circuits.close(GENESYS_STREAMING)
        await h.wait(lambda: channel.core.reconnections == 1 and h.all_in("active"), limit_s=30.0)
        assert channel.connections == 2


@pytest.mark.parametrize(
    ("kind", "code"),
    [("no_longer_subscribed", "SUBSCRIPTION_DISPLACED"), ("subscription_changed", "SUBSCRIPTION_CHANGED")],
)
async def test_a_channels_own_platform_messages_are_classified_and_published_once_as_the_channels(
    tmp_path: Path, start_genesys: StartGenesys, kind: str, code: str
) -> None:
    """What the platform says about a shared channel is the channel's: one SDK_ERROR_CLASSIFIED under
    the channel's key (a session on a channel of its own publishes the same under its own id), none
    for its sessions, which stay active; the channel puts its topics back."""
    sim = await start_genesys(GenesysSimConfig(), seed=11)
    async with supervised(shared_config(sim.urls, 3), tmp_path) as h:
        await h.wait(lambda: len(h.runners) == 3 and h.all_in("active"))
        (channel,) = pool_of(h).channels
        assert channel.link is not None
        chan_id = channel.link.channel_id
        assert sim.notifications.system_message(chan_id, kind)
        await h.wait(lambda: bool(h.recorded.named("SDK_ERROR_CLASSIFIED")))
        await h.wait(lambda: sorted(sim.state.channels[chan_id].topics) == [topic(i) for i in range(3)])
        (event,) = h.recorded.named("SDK_ERROR_CLASSIFIED")
        assert event["context"]["sessionId"] == channel.key and event["code"] == code
        assert event["taxonomyClass"] == "TRANSIENT"
        assert channel.core.state is ChannelState.OPEN and left_active(h) == set()


async def test_a_handover_takes_every_session_over_onto_one_new_channel(
    tmp_path: Path, start_genesys: StartGenesys
) -> None:
    """A stop with a store hands the sessions over: the channel goes with the daemon (1001, its
    topics left); the next start takes each over, all on one new channel whose connection puts
    every topic in one request, and ends none."""
    sim = await start_genesys(GenesysSimConfig(), seed=12)
    text = shared_config(sim.urls, 3) + f'[store]\npath = "{tmp_path / "store.sqlite3"}"\n'
    async with supervised(text, tmp_path, durable=True) as first:
        await first.wait(lambda: len(first.runners) == 3 and first.all_in("active"))
        (channel,) = pool_of(first).channels
        assert channel.link is not None
        old_id = channel.link.channel_id
        socket = sim.notifications.by_channel[old_id]
    await wait_until(lambda: socket.close_code is not None)
    assert socket.close_code == 1001
    assert {e["sessionId"] for e in first.recorded.named("SESSION_HANDED_OVER")} == {"nt-0", "nt-1", "nt-2"}
    assert not first.recorded.named("SESSION_TERMINATED")
    # nothing removed: the old channel still holds every topic
    assert sorted(sim.state.channels[old_id].topics) == [topic(i) for i in range(3)]
    subs = "/api/v2/notifications/channels/{channelId}/subscriptions"
    created = sim.recorder.request_count("POST", "/api/v2/notifications/channels")
    puts = sim.recorder.request_count("PUT", subs)
    async with supervised(text, tmp_path, durable=True) as second:
        await second.wait(lambda: len(second.runners) == 3 and second.all_in("active"))
        (taken,) = pool_of(second).channels
        assert taken.link is not None and taken.link.channel_id != old_id
        assert sorted(sim.state.channels[taken.link.channel_id].topics) == [topic(i) for i in range(3)]
        # one channel created; its connection's PUT carries the topics of the sessions taken over by
        # then, the others joined in (at most) one batch: never a request a session
        assert sim.recorder.request_count("POST", "/api/v2/notifications/channels") == created + 1
        assert taken.connections == 1 and taken.batches <= 1
        assert sim.recorder.request_count("PUT", subs) == puts + 1
        assert not second.recorded.named("SESSION_TERMINATED")
        assert second.terminations() == {}
        for i in range(3):
            assert sim.publish(topic(i), {"after": i}) == 1


@pytest.mark.parametrize("taxonomy", ["v2", "v1"])
async def test_socket_closing_rolls_the_channel_over_in_place_under_v2_and_drops_it_under_v1(
    tmp_path: Path, start_genesys: StartGenesys, taxonomy: str
) -> None:
    """v2 calls socket_closing TRANSIENT (the channel lives a minute more): the channel is replaced
    make-before-break, its sessions stay active and each is told (PLATFORM_SIGNAL, SOCKET_CLOSING),
    the message classified once, as the channel's. A pinned v1 reconnects on it: the channel drops
    and one reconnection brings its sessions back."""
    sim = await start_genesys(GenesysSimConfig(socket_closing_lead_s=5.0), seed=13)
    text = shared_config(sim.urls, 3).replace("[daemon]\n", f'[daemon]\ntaxonomyVersion = "{taxonomy}"\n', 1)
    async with supervised(text, tmp_path) as h:
        await h.wait(lambda: len(h.runners) == 3 and h.all_in("active"))
        (channel,) = pool_of(h).channels
        assert channel.link is not None
        first = channel.link.channel_id
        sim.faults.inject(Fault(kind=FaultKind.SOCKET_CLOSING))
        await h.wait(lambda: bool(h.recorded.named("SDK_ERROR_CLASSIFIED")))
        classified = h.recorded.named("SDK_ERROR_CLASSIFIED")[0]
        assert classified["context"]["sessionId"] == channel.key and classified["code"] == "SOCKET_CLOSING"
        if taxonomy == "v2":
            await h.wait(lambda: len(h.recorded.named("CONNECTION_ROLLED_OVER")) == 3)
            rolled = h.recorded.named("CONNECTION_ROLLED_OVER")
            assert {(e["reason"], e["code"], e["makeBeforeBreak"], e["previous"]) for e in rolled} == {
                ("PLATFORM_SIGNAL", "SOCKET_CLOSING", True, first)
            }
            assert channel.core.reconnections == 0 and left_active(h) == set()
            assert [e["code"] for e in h.recorded.named("SDK_ERROR_CLASSIFIED")] == ["SOCKET_CLOSING"]
        else:
            await h.wait(lambda: channel.core.reconnections == 1 and h.all_in("active"), limit_s=10.0)
            assert left_active(h) == {"nt-0", "nt-1", "nt-2"}
            assert not h.recorded.named("CONNECTION_ROLLED_OVER")
        assert channel.link is not None and channel.link.channel_id != first
        assert sorted(sim.state.channels[channel.link.channel_id].topics) == [topic(i) for i in range(3)]
        assert h.terminations() == {}


@pytest.mark.parametrize("shared", [True, False])
async def test_the_channel_client_is_where_a_clients_identity_enters(
    tmp_path: Path, start_genesys: StartGenesys, monkeypatch: pytest.MonkeyPatch, shared: bool
) -> None:
    """``Wiring.channel_client(spec)`` alone says whose channels a session's are: keyed by it, the
    shared pools (and, one channel a session, the 20-channel quotas) split the sessions by client,
    as a tenant's own client will."""
    from supervisor.config import SessionSpec
    from supervisor.runtime.wiring import Wiring

    def by_parity(self: Wiring, spec: SessionSpec) -> str:
        return "client-even" if int(spec.id.rsplit("-", 1)[1]) % 2 == 0 else "client-odd"

    monkeypatch.setattr(Wiring, "channel_client", by_parity)
    sim = await start_genesys(GenesysSimConfig(), seed=14)
    text = shared_config(sim.urls, 4)
    if not shared:
        text = text.replace("sharedChannels = true", "sharedChannels = false")
    async with supervised(text, tmp_path) as h:
        await h.wait(lambda: len(h.runners) == 4 and h.all_in("active"))
        wiring = h.supervisor.wiring
        if shared:
            pools = wiring.channel_pools.pools
            assert set(pools) == {"client-even", "client-odd"}
            members = {key: sorted(m for c in p.channels for m in c.members) for key, p in pools.items()}
            assert members == {"client-even": ["nt-0", "nt-2"], "client-odd": ["nt-1", "nt-3"]}
        else:
            assert set(wiring.channel_quotas) == {"client-even", "client-odd"}
            assert wiring.channel_pools.pools == {}


async def test_a_session_started_again_while_its_topic_comes_off_is_added_back(
    tmp_path: Path, start_genesys: StartGenesys
) -> None:
    """A session stopped (its topic off the channel, one PUT of the others) and started again while
    that PUT is out is not taken as held: it is added back once the PUT returns."""
    sim = await start_genesys(GenesysSimConfig(), seed=15)
    async with supervised(shared_config(sim.urls, 2), tmp_path) as h:
        await h.wait(lambda: len(h.runners) == 2 and h.all_in("active"))
        (channel,) = pool_of(h).channels
        assert channel.link is not None
        chan = sim.state.channels[channel.link.channel_id]
        subs = "/api/v2/notifications/channels/{channelId}/subscriptions"
        sim.faults.inject(
            Fault(kind=FaultKind.LATENCY, endpoint="PUT *subscriptions", count=1, params={"latency_ms": 1000})
        )
        (spec,) = [s for s in h.config.sessions if s.id == "nt-0"]
        puts = sim.recorder.request_count("PUT", subs)
        await h.supervisor.stop("nt-0")
        await h.wait(lambda: channel.batches == 1)  # the PUT without nt-0's topic is out
        h.supervisor.start(spec)
        await h.wait(lambda: "nt-0" in channel.members)
        assert sim.recorder.request_count("PUT", subs) == puts  # rejoined while the PUT is out
        await h.wait(lambda: sim.recorder.request_count("PUT", subs) == puts + 1)
        await h.wait(lambda: sorted(chan.topics) == [topic(0), topic(1)])
        await h.wait(lambda: h.all_in("active"))
        assert sim.publish(topic(0), {"back": True}) == 1
