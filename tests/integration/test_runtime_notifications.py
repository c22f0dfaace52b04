"""A Genesys notifications session supervised end to end (docs/runtime.md, "Notifications rollover").

Taxonomy v2 (the default): the session outlives every channel it rides on. Channels are renewed
before they expire or their creating token does, rolled over make-before-break on socket_closing,
re-created on a 404, a revoked token or lost subscriptions; the session never leaves ``active``,
each rollover is a CONNECTION_ROLLED_OVER on the bus, and every event is delivered once. A pinned
v1 still ends the session on a 404. Everything runs against the simulator over loopback; the long
tests run on a FakeClock shared by the daemon and the simulator (the daemon's sleeps wait for the
test to move it: :class:`~tests.harness.clocks.FakeTimers`).

These are a session on a channel of its own (``sharedChannels = false``): the channel is the
session's, so what the platform says on it is the session's to repair. On the shared channels of
the default the channel's own machine answers (tests/integration/test_shared_channels.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest

from supervisor.clock import FakeClock
from supervisor.sim.faults import Fault, FaultKind
from supervisor.sim.genesys import GenesysSimConfig, GenesysSimulator
from supervisor.vocabulary import Platform
from tests.harness.clocks import FakeTimers
from tests.harness.config import genesys_config
from tests.harness.in_process import Harness, supervised
from tests.harness.simulators import StartGenesys

pytestmark = [
    pytest.mark.integration,
    pytest.mark.anyio,
    pytest.mark.genesys_sim(GenesysSimConfig(socket_closing_lead_s=5.0), seed=9),
]

TOPIC = "v2.users.agent-1.conversations"
DAY = 86_400.0


def notifications_config(urls: dict[str, str], taxonomy: str | None = None) -> str:
    base = genesys_config(urls, 0).replace(
        "[platforms.genesys.keepalive]\n", "sharedChannels = false\n[platforms.genesys.keepalive]\n", 1
    )
    if taxonomy is not None:
        base = base.replace("[daemon]\n", f'[daemon]\ntaxonomyVersion = "{taxonomy}"\n', 1)
    return (
        base + '[[sessions]]\nid = "n-1"\nplatform = "genesys"\nkind = "notifications"\nagentId = "agent-1"\n'
    )


class Delivered:
    """The notification sink: every event the daemon handed on, per session."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Mapping[str, Any]]] = []

    def __call__(self, session_id: str, event: Mapping[str, Any]) -> None:
        self.events.append((session_id, event))

    def bodies(self) -> list[Any]:
        return [e["eventBody"] for _, e in self.events]


def left_active(h: Harness) -> list[dict[str, Any]]:
    """Every transition of a session out of ``active``."""
    return [t for t in h.recorded.named("SESSION_TRANSITION") if t["from"] == "active"]


def channel_of(h: Harness) -> str:
    chan = h.runners["n-1"].context.platform_session_id
    assert isinstance(chan, str)
    return chan


async def test_socket_closing_rolls_over_in_place_and_the_session_stays_active(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    """The channel is replaced make-before-break: no reconnection, no gap, one rollover event."""
    async with supervised(notifications_config(genesys_sim.urls), tmp_path) as h:
        await h.wait(lambda: len(h.runners) == 1 and h.all_in("active"))
        runner = h.runners["n-1"]
        first_channel = channel_of(h)
        genesys_sim.faults.inject(Fault(kind=FaultKind.SOCKET_CLOSING))
        await h.wait(lambda: len(h.recorded.named("CONNECTION_ROLLED_OVER")) == 1)
        (rolled,) = h.recorded.named("CONNECTION_ROLLED_OVER")
        second = channel_of(h)
        assert second != first_channel
        assert rolled["previous"] == first_channel and rolled["current"] == second
        assert rolled["platformSessionId"] == second and rolled["sessionId"] == "n-1"
        assert (rolled["reason"], rolled["code"], rolled["makeBeforeBreak"]) == (
            "PLATFORM_SIGNAL",
            "SOCKET_CLOSING",
            True,
        )
        assert runner.connects == 1 and left_active(h) == []  # rolled over, never reconnected
        assert runner.context.platform_session_id == second
        codes = [e["code"] for e in h.recorded.named("SDK_ERROR_CLASSIFIED")]
        assert codes == ["SOCKET_CLOSING"]  # the server's own close never had to happen
        await h.wait(lambda: genesys_sim.recorder.connections_open("streaming") == 1)
        assert h.terminations() == {}


async def test_a_404_mid_session_rolls_over_and_the_session_stays_active(
    tmp_path: Path, start_genesys: StartGenesys
) -> None:
    """{"result":"404"} (here: displaced over the channel quota by the same OAuth client)."""
    sink = Delivered()
    sim = await start_genesys(GenesysSimConfig(max_channels=1), seed=9)
    async with (
        supervised(notifications_config(sim.urls), tmp_path, notification_sink=sink) as h,
        httpx.AsyncClient() as http,
    ):
        await h.wait(lambda: len(h.runners) == 1 and h.all_in("active"))
        first = channel_of(h)
        token = await http.post(
            sim.urls["login"] + "/oauth/token",
            data={"grant_type": "client_credentials"},
            auth=("demo-client", "x"),
        )
        created = await http.post(
            sim.urls["api"] + "/api/v2/notifications/channels",
            headers={"Authorization": f"Bearer {token.json()['access_token']}"},
        )
        assert created.status_code == 200
        await h.wait(lambda: len(h.recorded.named("CONNECTION_ROLLED_OVER")) == 1)
        (rolled,) = h.recorded.named("CONNECTION_ROLLED_OVER")
        assert (rolled["code"], rolled["makeBeforeBreak"], rolled["previous"]) == (
            "CHANNEL_LOST",
            False,
            first,
        )
        assert left_active(h) == [] and h.terminations() == {}
        assert sim.publish(TOPIC, {"after": "404"}) == 1
        await h.wait(lambda: sink.bodies() == [{"after": "404"}])


async def test_a_pinned_v1_still_ends_the_session_on_a_404(
    tmp_path: Path, start_genesys: StartGenesys
) -> None:
    """v1 stays as released: a `result: 404` meant the subscriptions are gone, STATE_CORRUPTING."""
    sim = await start_genesys(GenesysSimConfig(max_channels=1), seed=9)
    async with (
        supervised(notifications_config(sim.urls, "v1"), tmp_path) as h,
        httpx.AsyncClient() as http,
    ):
        await h.wait(lambda: len(h.runners) == 1 and h.all_in("active"))
        token = await http.post(
            sim.urls["login"] + "/oauth/token",
            data={"grant_type": "client_credentials"},
            auth=("demo-client", "x"),
        )
        created = await http.post(
            sim.urls["api"] + "/api/v2/notifications/channels",
            headers={"Authorization": f"Bearer {token.json()['access_token']}"},
        )
        assert created.status_code == 200
        await h.wait(lambda: h.all_in("terminated"))
        termination = h.runners["n-1"].termination
        assert termination is not None
        assert (termination.reason.value, termination.code) == ("STATE_CORRUPTING", "CHANNEL_LOST")
        assert h.recorded.named("CONNECTION_ROLLED_OVER") == []


async def test_a_revoked_token_rolls_over_with_a_fresh_grant(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    """TOKEN_REVOKE: the platform tells the channel (v2.system.token_revoked) and drops it; the
    session drops the revoked token, gets a new one and a new channel, and stays active."""
    sink = Delivered()
    async with supervised(notifications_config(genesys_sim.urls), tmp_path, notification_sink=sink) as h:
        await h.wait(lambda: len(h.runners) == 1 and h.all_in("active"))
        tokens = h.supervisor.wiring.tokens[Platform.GENESYS]
        revoked = tokens.current
        first = channel_of(h)
        fault = genesys_sim.faults.inject(Fault(kind=FaultKind.TOKEN_REVOKE))
        await h.wait(lambda: len(h.recorded.named("CONNECTION_ROLLED_OVER")) == 1)
        genesys_sim.faults.clear(fault.id)
        (rolled,) = h.recorded.named("CONNECTION_ROLLED_OVER")
        assert (rolled["code"], rolled["previous"]) == ("CHANNEL_TOKEN_REVOKED", first)
        assert tokens.current is not revoked and tokens.refreshes == 0  # a new grant, not a refresh
        assert genesys_sim.recorder.events("channel_token_revoked") == 1
        assert left_active(h) == [] and h.terminations() == {}
        assert genesys_sim.publish(TOPIC, {"after": "revoked"}) == 1
        await h.wait(lambda: sink.bodies() == [{"after": "revoked"}])


async def test_no_longer_subscribed_and_subscription_changed(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    """no_longer_subscribed: a new channel takes the topics back; subscription_changed: the list is
    read back and the missing topic put again on the same channel."""
    sink = Delivered()
    async with supervised(notifications_config(genesys_sim.urls), tmp_path, notification_sink=sink) as h:
        await h.wait(lambda: len(h.runners) == 1 and h.all_in("active"))
        first = channel_of(h)
        genesys_sim.faults.inject(Fault(kind=FaultKind.SYSTEM_TOPIC, params={"type": "no_longer_subscribed"}))
        await h.wait(lambda: len(h.recorded.named("CONNECTION_ROLLED_OVER")) == 1)
        assert h.recorded.named("CONNECTION_ROLLED_OVER")[0]["code"] == "SUBSCRIPTION_DISPLACED"
        second = channel_of(h)
        assert second != first
        genesys_sim.faults.inject(Fault(kind=FaultKind.SYSTEM_TOPIC, params={"type": "subscription_changed"}))
        await h.wait(lambda: genesys_sim.state.channels[second].topics == [TOPIC])  # put back
        assert channel_of(h) == second and len(h.recorded.named("CONNECTION_ROLLED_OVER")) == 1
        codes = [e["code"] for e in h.recorded.named("SDK_ERROR_CLASSIFIED")]
        assert codes == ["SUBSCRIPTION_DISPLACED", "SUBSCRIPTION_CHANGED"]
        assert genesys_sim.publish(TOPIC, {"n": 1}) == 1
        await h.wait(lambda: sink.bodies() == [{"n": 1}])
        assert left_active(h) == [] and h.terminations() == {}


async def test_a_replaced_token_renews_the_channel_before_the_old_token_expires(
    tmp_path: Path, start_genesys: StartGenesys
) -> None:
    clock = FakeClock(start=5000.0)
    sleep = FakeTimers(clock)
    config = GenesysSimConfig(token_ttl_s=3600)
    sim = await start_genesys(config, seed=9, clock=clock)
    async with (
        supervised(notifications_config(sim.urls), tmp_path, clock=clock, sleep=sleep) as h,
    ):
        await h.wait(lambda: len(h.runners) == 1 and h.all_in("active"))
        first = channel_of(h)
        tokens = h.supervisor.wiring.tokens[Platform.GENESYS]
        old = tokens.current
        assert old is not None
        await h.wait(lambda: sleep.sleeping >= 1)
        sleep.advance(1000)
        await tokens.refresh(old)  # a refresh for another reason (another user of the credential)
        await h.wait(lambda: sleep.sleeping >= 1)
        sleep.advance(30)
        await h.wait(lambda: len(h.recorded.named("CONNECTION_ROLLED_OVER")) == 1)
        assert h.recorded.named("CONNECTION_ROLLED_OVER")[0]["reason"] == "TOKEN_REPLACED"
        second = channel_of(h)
        sleep.advance(old.expires_at + 1 - clock.monotonic())  # the old token is over: so is its channel
        sim.tick()
        assert first not in sim.state.channels and second in sim.state.channels
        assert h.recorded.named("SDK_ERROR_CLASSIFIED") == []  # no 404 ever reached the session
        assert left_active(h) == [] and h.terminations() == {}


async def test_a_session_stays_active_for_days_with_every_event_delivered_once(
    tmp_path: Path, start_genesys: StartGenesys
) -> None:
    """Three days of 24-hour channels and 36-hour tokens: each channel is renewed before it expires
    and before its token does, make-before-break; an event published every step (and one inside
    each overlap, when both channels carry it) is delivered exactly once, in order."""
    clock = FakeClock(start=10_000.0)
    sleep = FakeTimers(clock)
    sink = Delivered()
    config = GenesysSimConfig(token_ttl_s=int(1.5 * DAY), channel_ttl_s=DAY)
    sim = await start_genesys(config, seed=9, clock=clock)
    async with (
        supervised(
            notifications_config(sim.urls),
            tmp_path,
            clock=clock,
            sleep=sleep,
            notification_sink=sink,
        ) as h,
    ):
        await h.wait(lambda: len(h.runners) == 1 and h.all_in("active"))
        hub = sim.notifications
        published: list[int] = []
        carried: list[int] = []

        def publish() -> None:
            n = len(published)
            published.append(n)
            carried.append(hub.publish(TOPIC, {"n": n}, f"corr-{n}"))

        sockets: list[int] = []
        hub.on_subscribed.append(lambda _: sockets.append(len(hub.by_channel)))
        hub.on_subscribed.append(lambda _: publish())  # inside every overlap
        end = clock.monotonic() + 3 * DAY
        while clock.monotonic() < end:
            # a rollover under way finishes (the old channel closed) before time moves on
            await h.wait(lambda: sim.recorder.connections_open("streaming") == 1)
            chan = sim.state.channels[channel_of(h)]
            assert chan.token is not None
            deadline = min(chan.expires_at, chan.token.expires_at)
            # long strides while the channel has hours left, one-minute steps near its end
            stride = max(60.0, deadline - 600.0 - clock.monotonic())
            await h.wait(lambda: sleep.sleeping >= 1)
            sleep.advance(min(stride, end - clock.monotonic()))
            sim.tick()
            publish()
            await h.wait(lambda: len(sink.events) == len(published))
        rolled = h.recorded.named("CONNECTION_ROLLED_OVER")
        reasons = [r["reason"] for r in rolled]
        # 24 h channels, 36 h tokens: the channel at 24 h, the token at 36 h, the channel at 60 h, the token at 72 h
        assert reasons == ["CHANNEL_EXPIRING", "TOKEN_EXPIRING", "CHANNEL_EXPIRING", "TOKEN_EXPIRING"]
        assert all(r["makeBeforeBreak"] for r in rolled)
        assert sink.bodies() == [{"n": n} for n in published]  # no gap, no duplicate, in order
        # every overlap carried events on both channels (the one published as the new channel was
        # subscribed, and any step that fell inside it), and each was delivered once all the same
        assert len([c for c in carried if c == 2]) >= len(rolled)
        assert sum(r["duplicatesDropped"] for r in rolled) >= 1
        assert h.supervisor.wiring.tokens[Platform.GENESYS].refreshes >= 1
        assert h.recorded.named("SDK_ERROR_CLASSIFIED") == []  # the platform never had to drop one
        assert left_active(h) == [] and h.terminations() == {}
        # never more channels than needed: two during an overlap, one otherwise
        assert max(sockets) == 2
        await h.wait(lambda: sim.recorder.connections_open("streaming") == 1)
