"""NotificationsTransport against the Genesys simulator (docs/runtime.md, "Notifications rollover"): the channel, its rollover, faults.

The channel is created and subscribed through the real RequestPipeline (token cache, circuit
``genesys:api``); retry waits are skipped with an injected no-op sleep. The transport's renewal
timer sleeps on the simulator's FakeClock (:class:`~tests.harness.clocks.FakeTimers`): a
test moves the clock, nothing waits for a timer. Other waits are protocol waits (a frame, a close);
``anyio.fail_after`` only bounds a test that would otherwise hang.

``Runtime`` answers reports the way the session runner does (the connection goes on unless the
taxonomy says the failure ends or moves the session), with the taxonomy version under test.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
import msgspec
import pytest

from machines.circuit import CircuitConfig
from machines.registry import CircuitRegistry, Endpoints
from supervisor.attempts import Attempts
from supervisor.boundary import SessionContext
from supervisor.config import Keepalive, Secret
from supervisor.errors import CircuitOpenError, OperationError, TransportFailure
from supervisor.events import RolloverReason
from supervisor.rest.executor import RetryExecutor
from supervisor.rest.pipeline import RequestPipeline
from supervisor.rest.tokens import GenesysClientCredentials, TokenCache
from supervisor.sim.faults import Fault, FaultKind
from supervisor.sim.genesys.config import GenesysSimConfig
from supervisor.taxonomy import Channel, Classifier, Platform, RawError, SdkErrorEvent, load_taxonomy
from supervisor.transports.base import Rollover
from supervisor.transports.channel_quota import ChannelQuota
from supervisor.transports.notifications import TOKEN_CHECK_S, NotificationsConnection, NotificationsTransport
from supervisor.vocabulary import CloseCode
from tests.harness.clocks import FakeTimers
from tests.harness.simulators import Genesys
from tests.harness.waits import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

V1 = Classifier(load_taxonomy("v1"))
V2 = Classifier(load_taxonomy("v2"))
QUIET = Keepalive(ping_interval=60.0, ping_timeout=30.0, echo_interval=0.0, open_timeout=5.0)
HEALTH = Keepalive(
    ping_interval=60.0, ping_timeout=30.0, echo_interval=0.2, echo_timeout=0.3, open_timeout=5.0
)
TOPIC = "v2.users.u1.presence"
SUBSCRIPTIONS = "/api/v2/notifications/channels/{channelId}/subscriptions"
LIMIT_S = 5.0  # hang guard only


class Runtime:
    """A Reporter answering as SessionRunner._report does, and recording the codes it was told."""

    def __init__(self, classifier: Classifier) -> None:
        self.classifier = classifier
        self.raws: list[RawError] = []
        self.codes: list[str] = []

    async def __call__(self, raw: RawError) -> bool:
        event = self.classifier.classify(raw)
        self.raws.append(raw)
        self.codes.append(event.code)
        return not (event.fail_fast or event.reconnect or event.graceful)


async def no_sleep(_: float) -> None:
    """Retry waits are the pipeline's business, tested elsewhere."""


@dataclass
class Notif:
    transport: NotificationsTransport
    tokens: TokenCache
    sleep: FakeTimers
    runtime: Runtime
    events: list[Mapping[str, Any]] = field(default_factory=list)
    rollovers: list[Rollover] = field(default_factory=list)


def make(
    g: Genesys,
    keepalive: Keepalive = QUIET,
    topics: list[str] | None = None,
    *,
    classifier: Classifier = V2,
    quota: ChannelQuota | None = None,
    circuits: CircuitConfig | None = None,
) -> Notif:
    tokens = TokenCache(
        GenesysClientCredentials(g.http, g.sim.urls["login"], "client", Secret("secret")), g.clock
    )
    executor = RetryExecutor(
        classifier, Attempts(Endpoints(g.clock, CircuitRegistry(g.clock, circuits))), g.clock, sleep=no_sleep
    )
    pipeline = RequestPipeline(g.http, executor, tokens=tokens)
    sleep = FakeTimers(g.clock)
    events: list[Mapping[str, Any]] = []
    t = NotificationsTransport(
        SessionContext("notif-1", Platform.GENESYS, Channel.NOTIFICATIONS),
        pipeline=pipeline,
        api_url=g.sim.urls["api"],
        topics=topics or [TOPIC],
        keepalive=keepalive,
        clock=g.clock,
        sleep=sleep,
        quota=quota,
        on_event=events.append,
    )
    return Notif(t, tokens, sleep, Runtime(classifier), events)


def code_of(raw: RawError, classifier: Classifier = V2) -> str:
    return classifier.classify(raw).code


async def serve_to_end(conn: NotificationsConnection, report: Runtime) -> RawError:
    with anyio.fail_after(LIMIT_S):
        return await conn.serve(report)


@dataclass
class Served:
    conn: NotificationsConnection
    result: list[RawError] = field(default_factory=list)
    failure: list[BaseException] = field(default_factory=list)


@pytest.fixture
async def served() -> AsyncIterator[Callable[[Notif], Any]]:
    """Open a connection and serve it in the background; the test closes it (or it ends itself)."""
    async with anyio.create_task_group() as tg:

        async def start(n: Notif) -> Served:
            conn = await n.transport.open()
            conn.on_rolled_over = n.rollovers.append
            out = Served(conn)

            async def run() -> None:
                try:
                    out.result.append(await conn.serve(n.runtime))
                except (OperationError, TransportFailure, CircuitOpenError) as exc:
                    out.failure.append(exc)  # as itself: an exception group would fail the test

            tg.start_soon(run)
            return out

        with anyio.fail_after(30.0):
            yield start
        tg.cancel_scope.cancel()


def subscribed_channels(g: Genesys) -> list[tuple[str, frozenset[str]]]:
    """(channel id, the channels with an open socket) at each subscription the simulator stores."""
    seen: list[tuple[str, frozenset[str]]] = []
    hub = g.sim.notifications
    hub.on_subscribed.append(lambda chan_id: seen.append((chan_id, frozenset(hub.by_channel))))
    return seen


async def open_failure(t: NotificationsTransport) -> RawError:
    with pytest.raises(TransportFailure) as info:
        await t.open()
    assert isinstance(info.value.raw, RawError)
    return info.value.raw


async def operation_failure(t: NotificationsTransport) -> SdkErrorEvent:
    with pytest.raises(OperationError) as info:
        await t.open()
    assert isinstance(info.value.event, SdkErrorEvent)
    return info.value.event


# -- open, events, liveness ------------------------------------------------------------------------------


async def test_open_subscribes_every_topic_in_one_request_and_delivers_events(genesys: Genesys) -> None:
    topics = [TOPIC, "v2.users.u1.conversations"]
    n = make(genesys, topics=topics)
    conn = await n.transport.open()
    response = conn.session_response
    assert response["status"] == "subscribed"
    # the PY269 Channel as the platform sent it
    assert response["connectUri"] == f"{genesys.sim.urls['streaming']}/channels/{response['id']}"
    event = V2.validate_response(
        response, platform=Platform.GENESYS, channel=Channel.NOTIFICATIONS, kind=n.transport.response_kind
    )
    assert event is None
    assert conn.learned.platform_session_id == response["id"]
    rec = genesys.sim.recorder
    # PY269 put_notifications_channel_subscriptions: one REST request, nothing on the socket
    assert rec.request_count(method="PUT", endpoint=SUBSCRIPTIONS, status=200) == 1
    assert rec.ws_messages("streaming", "in", "subscribe") == 0
    assert genesys.sim.state.channels[response["id"]].topics == topics
    result: list[RawError] = []
    with anyio.fail_after(LIMIT_S):
        async with anyio.create_task_group() as tg:

            async def serving() -> None:
                result.append(await conn.serve(n.runtime))

            tg.start_soon(serving)
            assert genesys.sim.publish(TOPIC, {"presence": "Available"}) == 1
            assert genesys.sim.publish("v2.users.other.presence", {"presence": "Away"}) == 0
            await wait_until(lambda: len(n.events) == 1)
            assert genesys.sim.heartbeat() == 1  # liveness, not an event nor an error
            await wait_until(lambda: conn.heartbeats == 1)
            await conn.close(CloseCode.NORMAL_CLOSURE)
    assert n.events[0]["eventBody"] == {"presence": "Available"} and n.runtime.raws == []
    assert code_of(result[0]) == "GRACEFUL_CLOSE"


async def test_blackhole_is_ended_by_the_ping_health_check(genesys: Genesys) -> None:
    n = make(genesys, HEALTH)
    conn = await n.transport.open()
    rec = genesys.sim.recorder
    result: list[RawError] = []
    with anyio.fail_after(LIMIT_S):
        async with anyio.create_task_group() as tg:

            async def serving() -> None:
                result.append(await conn.serve(n.runtime))

            tg.start_soon(serving)
            await wait_until(lambda: rec.ws_messages("streaming", "in", "ping") >= 2)  # answered by pongs
            assert not result
            genesys.sim.faults.inject(Fault(kind=FaultKind.BLACKHOLE))
    (raw,) = result
    # no pong in time: the transport aborts the link without a close frame (RFC 6455 §7.1.5)
    assert raw.close_code == 1006 and code_of(raw) == "ABNORMAL_CLOSURE"


# -- the socket ends -------------------------------------------------------------------------------------


async def test_abandon_closes_the_socket_with_1001_and_leaves_the_channel_to_expire(genesys: Genesys) -> None:
    """A handover: the channel socket goes with 1001; nothing is asked of the REST API (no channel or
    subscription is deleted: the channel expires with its token)."""
    n = make(genesys)
    conn = await n.transport.open()
    rec = genesys.sim.recorder
    requests = rec.request_count()
    await conn.abandon()
    await wait_until(lambda: rec.events("client_close", listener="streaming", code=1001) == 1)
    assert rec.request_count() == requests
    assert rec.request_count(method="DELETE") == 0


async def test_drop_is_an_abnormal_closure(genesys: Genesys) -> None:
    n = make(genesys)
    conn = await n.transport.open()
    genesys.sim.faults.inject(Fault(kind=FaultKind.DROP))
    raw = await serve_to_end(conn, n.runtime)
    assert raw.close_code == 1006 and code_of(raw) == "ABNORMAL_CLOSURE"


@pytest.mark.parametrize(
    ("close", "code"),
    [
        (1000, "GRACEFUL_CLOSE"),
        (1001, "GOING_AWAY"),
        (1011, "WS_INTERNAL_ERROR"),
        (1012, "SERVICE_RESTART"),
        (1013, "TRY_AGAIN_LATER"),
    ],
)
async def test_server_close_code_is_classified(genesys: Genesys, close: int, code: str) -> None:
    n = make(genesys)
    conn = await n.transport.open()
    genesys.sim.faults.inject(Fault(kind=FaultKind.CLOSE, params={"code": close}))
    raw = await serve_to_end(conn, n.runtime)
    assert raw.close_code == close and code_of(raw) == code


# -- taxonomy v1, pinned: what the transport did before the rollover -------------------------------------


async def test_v1_socket_closing_lets_the_runtime_reconnect(genesys: Genesys) -> None:
    n = make(genesys, classifier=V1)
    conn = await n.transport.open()
    # the simulator would close 30 s later: the transport must not wait for that
    genesys.sim.faults.inject(Fault(kind=FaultKind.SOCKET_CLOSING, params={"lead_s": 30}))
    raw = await serve_to_end(conn, n.runtime)
    assert n.runtime.raws == [raw] and n.runtime.codes == ["SOCKET_CLOSING"]
    await wait_until(lambda: genesys.sim.recorder.connections_open("streaming") == 0)  # old socket closed
    assert genesys.sim.recorder.request_count(method="POST", endpoint="/api/v2/notifications/channels") == 1


@pytest.mark.genesys_sim(GenesysSimConfig(max_channels=1))
async def test_v1_evicted_channel_is_channel_lost_and_ends_the_connection(genesys: Genesys) -> None:
    n = make(genesys, classifier=V1)
    conn = await n.transport.open()
    with anyio.fail_after(LIMIT_S):
        async with anyio.create_task_group() as tg:
            result: list[RawError] = []

            async def serving() -> None:
                result.append(await conn.serve(n.runtime))

            tg.start_soon(serving)
            await genesys.login("client", "secret")  # same client: its 2nd channel evicts ours (§2)
            r = await genesys.http.post(genesys.api("/api/v2/notifications/channels"), headers=genesys.auth)
            assert r.status_code == 200
    event = V1.classify(result[0])
    assert result == n.runtime.raws
    assert event.code == "CHANNEL_LOST" and event.raw_status == 404 and event.fail_fast


async def test_v1_reports_the_other_system_topics_and_repairs_nothing(genesys: Genesys, served: Any) -> None:
    n = make(genesys, classifier=V1)
    s = await served(n)
    chan = s.conn.channel_id
    assert genesys.sim.system_message(chan, "subscription_changed", topics=[])
    await wait_until(lambda: n.runtime.codes == ["UNKNOWN_ERROR"])
    assert genesys.sim.state.channels[chan].topics == []  # left as it is: v1 knows no repair
    assert genesys.sim.recorder.request_count(method="GET", endpoint=SUBSCRIPTIONS) == 0
    assert not s.result and s.conn.rollovers == 0
    await s.conn.close(CloseCode.NORMAL_CLOSURE)


# -- taxonomy v2: the rollover ---------------------------------------------------------------------------


async def test_socket_closing_rolls_over_make_before_break_and_delivers_an_overlap_event_once(
    genesys: Genesys, served: Any
) -> None:
    n = make(genesys)
    s = await served(n)
    old = s.conn.channel_id
    seen = subscribed_channels(genesys)
    carried: list[int] = []
    hub = genesys.sim.notifications
    # an event published while both channels are subscribed (the new one has just been): both carry it
    hub.on_subscribed.append(lambda _: carried.append(hub.publish(TOPIC, {"n": 2}, "corr-2")))
    assert genesys.sim.publish(TOPIC, {"n": 1}, "corr-1") == 1
    await wait_until(lambda: len(n.events) == 1)
    genesys.sim.faults.inject(Fault(kind=FaultKind.SOCKET_CLOSING, params={"lead_s": 30}))
    await wait_until(lambda: len(n.rollovers) == 1)
    assert genesys.sim.publish(TOPIC, {"n": 3}, "corr-3") == 1  # only the new channel now
    await wait_until(lambda: len(n.events) == 3)
    new = s.conn.channel_id
    assert new != old and s.conn.learned.platform_session_id == new
    # made before broken: the new channel was subscribed while the old socket was still open
    assert [(chan, old in open_) for chan, open_ in seen] == [(new, True)]
    assert carried == [2]
    assert [e["eventBody"]["n"] for e in n.events] == [1, 2, 3]  # no gap, no duplicate
    (rollover,) = n.rollovers
    assert (rollover.reason, rollover.code, rollover.previous, rollover.current) == (
        RolloverReason.PLATFORM_SIGNAL,
        "SOCKET_CLOSING",
        old,
        new,
    )
    assert rollover.make_before_break and rollover.duplicates_dropped == 1 and rollover.overlap_s >= 0
    # the old socket was closed by us (1000) long before the platform's 30 s, never reported twice
    rec = genesys.sim.recorder
    await wait_until(lambda: rec.connections_open("streaming") == 1)
    assert rec.events("client_close", listener="streaming", code=1000) == 1
    assert n.runtime.codes == ["SOCKET_CLOSING"] and not s.result
    assert n.transport.quota.held == 1 and n.transport.quota.overlaps == 0
    await s.conn.close(CloseCode.NORMAL_CLOSURE)
    assert n.transport.quota.held == 0


@pytest.mark.genesys_sim(GenesysSimConfig(max_channels=1))
async def test_a_404_mid_session_rolls_over_to_a_new_channel(genesys: Genesys, served: Any) -> None:
    n = make(genesys)
    s = await served(n)
    old = s.conn.channel_id
    # the same OAuth client creates another channel: over the (one-channel) quota, ours is removed
    await genesys.login("client", "secret")
    r = await genesys.http.post(genesys.api("/api/v2/notifications/channels"), headers=genesys.auth)
    assert r.status_code == 200
    await wait_until(lambda: len(n.rollovers) == 1)
    (rollover,) = n.rollovers
    assert (rollover.code, rollover.make_before_break, rollover.previous) == ("CHANNEL_LOST", False, old)
    assert n.runtime.codes == ["CHANNEL_LOST"] and not s.result and not s.failure
    assert genesys.sim.publish(TOPIC, {"after": True}) == 1
    await wait_until(lambda: len(n.events) == 1)
    await s.conn.close(CloseCode.NORMAL_CLOSURE)


@pytest.mark.genesys_sim(GenesysSimConfig(channel_ttl_s=3600))
async def test_a_channel_is_renewed_before_it_expires(genesys: Genesys, served: Any) -> None:
    n = make(genesys)
    s = await served(n)
    old = s.conn.channel_id
    await wait_until(lambda: n.sleep.sleeping >= 1)  # the renewal timer is waiting on the clock
    n.sleep.advance(3600 - 300 - 1)
    await anyio.wait_all_tasks_blocked()
    assert n.rollovers == []  # not yet: 5 minutes before the hour
    n.sleep.advance(1)
    await wait_until(lambda: len(n.rollovers) == 1)
    (rollover,) = n.rollovers
    assert (rollover.reason, rollover.previous, rollover.make_before_break) == (
        RolloverReason.CHANNEL_EXPIRING,
        old,
        True,
    )
    n.sleep.advance(301)  # the old channel's hour is over: the platform drops it
    genesys.sim.tick()
    assert old not in genesys.sim.state.channels and s.conn.channel_id in genesys.sim.state.channels
    assert genesys.sim.publish(TOPIC, {"still": "here"}) == 1
    await wait_until(lambda: len(n.events) == 1)
    assert n.runtime.raws == [] and not s.result  # never saw a 404
    await s.conn.close(CloseCode.NORMAL_CLOSURE)


@pytest.mark.genesys_sim(GenesysSimConfig(channel_ttl_s=3600))
async def test_a_channel_that_expired_unnoticed_is_replaced_on_its_404(genesys: Genesys, served: Any) -> None:
    """The host slept through the renewal (the clock jumps past the hour, the timer is not woken):
    the platform's 404 on the expired channel is answered by a new channel all the same."""
    n = make(genesys)
    s = await served(n)
    old = s.conn.channel_id
    await wait_until(lambda: n.sleep.sleeping >= 1)  # the renewal timer is parked on the clock
    genesys.clock.advance(3600)  # not through the sleep: the renewal timer does not run first
    genesys.sim.tick()
    await wait_until(lambda: len(n.rollovers) == 1)
    (rollover,) = n.rollovers
    assert (rollover.reason, rollover.code, rollover.previous, rollover.make_before_break) == (
        RolloverReason.PLATFORM_SIGNAL,
        "CHANNEL_LOST",
        old,
        False,
    )
    assert n.runtime.codes == ["CHANNEL_LOST"] and not s.result and not s.failure
    assert genesys.sim.publish(TOPIC, {"after": "expiry"}) == 1
    await wait_until(lambda: len(n.events) == 1)
    await s.conn.close(CloseCode.NORMAL_CLOSURE)


@pytest.mark.genesys_sim(GenesysSimConfig(token_ttl_s=3600))
async def test_a_replaced_token_renews_the_channel_before_the_old_token_expires(
    genesys: Genesys, served: Any
) -> None:
    n = make(genesys)
    s = await served(n)
    old = s.conn.channel_id
    old_token = genesys.sim.state.channels[old].token
    assert old_token is not None
    await wait_until(lambda: n.sleep.sleeping >= 1)
    n.sleep.advance(2000)  # t = 3000; the old token expires at 4600 (renewal planned at 4300)
    stale = n.tokens.current
    assert stale is not None
    await n.tokens.refresh(stale)  # another session (or a 401 replay) replaced the credential's token
    await wait_until(lambda: n.sleep.sleeping >= 1)
    n.sleep.advance(TOKEN_CHECK_S)
    await wait_until(lambda: len(n.rollovers) == 1)
    assert n.rollovers[0].reason is RolloverReason.TOKEN_REPLACED
    new_token = genesys.sim.state.channels[s.conn.channel_id].token
    assert new_token is not None and new_token is not old_token
    n.sleep.advance(4601 - genesys.clock.monotonic())  # the old token expires: its channel would go
    genesys.sim.tick()
    assert old not in genesys.sim.state.channels and len(n.rollovers) == 1
    assert s.conn.channel_id in genesys.sim.state.channels
    assert n.runtime.raws == [] and not s.result
    await s.conn.close(CloseCode.NORMAL_CLOSURE)


@pytest.mark.genesys_sim(GenesysSimConfig(token_ttl_s=600))
async def test_an_expiring_token_is_replaced_and_its_channel_with_it(genesys: Genesys, served: Any) -> None:
    n = make(genesys)
    s = await served(n)
    old = s.conn.channel_id
    await wait_until(lambda: n.sleep.sleeping >= 1)
    n.sleep.advance(600 - 150)  # a quarter of a 600 s token's life before it ends
    await wait_until(lambda: len(n.rollovers) == 1)
    assert n.rollovers[0].reason is RolloverReason.TOKEN_EXPIRING
    assert n.tokens.refreshes == 1
    n.sleep.advance(200)
    genesys.sim.tick()
    assert old not in genesys.sim.state.channels and s.conn.channel_id in genesys.sim.state.channels
    assert n.runtime.raws == [] and not s.result
    await s.conn.close(CloseCode.NORMAL_CLOSURE)


async def test_token_revoked_rolls_over_with_a_fresh_grant(genesys: Genesys, served: Any) -> None:
    n = make(genesys)
    s = await served(n)
    old = s.conn.channel_id
    revoked = n.tokens.current
    assert genesys.sim.system_message(old, "token_revoked")
    await wait_until(lambda: len(n.rollovers) == 1)
    assert n.rollovers[0].code == "CHANNEL_TOKEN_REVOKED"
    assert n.runtime.codes == ["CHANNEL_TOKEN_REVOKED"]
    # not a refresh of the revoked token's grant: a new client-credentials grant
    assert n.tokens.current is not revoked and n.tokens.refreshes == 0
    new_chan = genesys.sim.state.channels[s.conn.channel_id]
    assert new_chan.token is not None and not new_chan.token.revoked
    assert genesys.sim.publish(TOPIC, {"x": 1}) == 1
    await wait_until(lambda: len(n.events) == 1)
    assert not s.result and not s.failure
    await s.conn.close(CloseCode.NORMAL_CLOSURE)


async def test_no_longer_subscribed_rolls_over_and_another_channels_notice_is_ignored(
    genesys: Genesys, served: Any
) -> None:
    n = make(genesys)
    s = await served(n)
    old = s.conn.channel_id
    assert genesys.sim.system_message(old, "no_longer_subscribed")
    await wait_until(lambda: len(n.rollovers) == 1)
    assert n.rollovers[0].code == "SUBSCRIPTION_DISPLACED"
    assert genesys.sim.publish(TOPIC, {"back": True}) == 1
    await wait_until(lambda: len(n.events) == 1)
    # a notice naming another channel than ours (the one before, say) is not ours to act on
    hub = genesys.sim.notifications
    frame = hub._system_frame("streaming-9-somebody-else", "no_longer_subscribed")
    await hub.by_channel[s.conn.channel_id].send(frame.decode())
    assert genesys.sim.heartbeat() == 1
    await wait_until(lambda: s.conn.heartbeats >= 1)  # frames are read in order: the notice was read
    assert n.runtime.codes == ["SUBSCRIPTION_DISPLACED"] and len(n.rollovers) == 1
    await s.conn.close(CloseCode.NORMAL_CLOSURE)


async def test_a_channel_displaced_again_and_again_is_let_go(genesys: Genesys, served: Any) -> None:
    """Genesys' streaming client: at most two new channels for no_longer_subscribed in 10 minutes."""
    n = make(genesys)
    s = await served(n)
    for expected in (1, 2):
        assert genesys.sim.system_message(s.conn.channel_id, "no_longer_subscribed")
        await wait_until(lambda expected=expected: len(n.rollovers) == expected)  # type: ignore[misc]
    assert genesys.sim.system_message(s.conn.channel_id, "no_longer_subscribed")
    await wait_until(lambda: len(s.result) == 1)
    assert code_of(s.result[0]) == "SUBSCRIPTION_DISPLACED" and len(n.rollovers) == 2
    await wait_until(lambda: genesys.sim.recorder.connections_open("streaming") == 0)


async def test_subscription_changed_restores_missing_topics_only(genesys: Genesys, served: Any) -> None:
    topics = [TOPIC, "v2.users.u1.conversations"]
    n = make(genesys, topics=topics)
    s = await served(n)
    chan = s.conn.channel_id
    rec = genesys.sim.recorder
    assert genesys.sim.system_message(chan, "subscription_changed", topics=[TOPIC])
    await wait_until(lambda: rec.request_count(method="PUT", endpoint=SUBSCRIPTIONS) == 2)
    assert rec.request_count(method="GET", endpoint=SUBSCRIPTIONS) == 1
    assert genesys.sim.state.channels[chan].topics == topics
    assert genesys.sim.system_message(chan, "subscription_changed", topics=list(reversed(topics)))
    await wait_until(lambda: rec.request_count(method="GET", endpoint=SUBSCRIPTIONS) == 2)
    await anyio.wait_all_tasks_blocked()
    assert rec.request_count(method="PUT", endpoint=SUBSCRIPTIONS) == 2  # nothing missing: nothing put
    assert n.rollovers == [] and s.conn.channel_id == chan
    await s.conn.close(CloseCode.NORMAL_CLOSURE)


async def test_a_full_quota_breaks_the_old_channel_before_making_the_new_one(
    genesys: Genesys, served: Any
) -> None:
    n = make(genesys, quota=ChannelQuota(limit=1))
    s = await served(n)
    old = s.conn.channel_id
    seen = subscribed_channels(genesys)
    genesys.sim.faults.inject(Fault(kind=FaultKind.SOCKET_CLOSING, params={"lead_s": 30}))
    await wait_until(lambda: len(n.rollovers) == 1)
    assert not n.rollovers[0].make_before_break
    assert [(chan, old in open_) for chan, open_ in seen] == [(s.conn.channel_id, False)]
    assert n.transport.quota.held == 1
    await s.conn.close(CloseCode.NORMAL_CLOSURE)


async def test_a_rollover_that_cannot_create_a_channel_ends_the_connection(
    genesys: Genesys, served: Any
) -> None:
    n = make(genesys)
    s = await served(n)
    genesys.sim.faults.inject(
        Fault(kind=FaultKind.SERVER_ERROR_BURST, count=10, endpoint="POST /api/v2/notifications/channels")
    )
    genesys.sim.faults.inject(Fault(kind=FaultKind.SOCKET_CLOSING, params={"lead_s": 30}))
    await wait_until(lambda: len(s.failure) == 1)
    failure = s.failure[0]
    assert isinstance(failure, OperationError) and isinstance(failure.event, SdkErrorEvent)
    assert failure.event.code == "SERVER_ERROR"
    await s.conn.close(CloseCode.GOING_AWAY)  # the runtime closes what is left, then reconnects
    await wait_until(lambda: genesys.sim.recorder.connections_open("streaming") == 0)
    assert n.transport.quota.held == 0 and n.transport.quota.overlaps == 0


async def test_a_rollover_refused_by_an_open_circuit_raises_that_refusal(
    genesys: Genesys, served: Any
) -> None:
    n = make(genesys, circuits=CircuitConfig(failure_threshold=1))
    s = await served(n)
    genesys.sim.faults.inject(
        Fault(kind=FaultKind.SERVER_ERROR_BURST, count=1, endpoint="POST /api/v2/notifications/channels")
    )
    genesys.sim.faults.inject(Fault(kind=FaultKind.SOCKET_CLOSING, params={"lead_s": 30}))
    await wait_until(lambda: len(s.failure) == 1)
    assert isinstance(s.failure[0], CircuitOpenError)  # the runtime defers the reconnection on it
    await s.conn.close(CloseCode.GOING_AWAY)
    assert n.transport.quota.held == 0


async def test_a_failing_event_sink_does_not_end_the_channel(genesys: Genesys, served: Any) -> None:
    n = make(genesys)

    def broken(event: Mapping[str, Any]) -> None:
        n.events.append(event)
        raise RuntimeError("the embedder's sink failed")

    n.transport.on_event = broken
    s = await served(n)
    for i in range(2):
        assert genesys.sim.publish(TOPIC, {"n": i}) == 1
    await wait_until(lambda: len(n.events) == 2)
    assert s.conn.sink_failures == 2 and not s.result and not s.failure
    await s.conn.close(CloseCode.NORMAL_CLOSURE)


# -- open fails ------------------------------------------------------------------------------------------


async def test_admission_limit_on_the_channel_socket(genesys: Genesys) -> None:
    genesys.sim.faults.inject(
        Fault(
            kind=FaultKind.ADMISSION_LIMIT,
            endpoint="WS /channels",
            params={"rate_per_s": 1, "retry_after": "2"},
        )
    )
    first = await make(genesys).transport.open()  # the one handshake of this clock second
    t = make(genesys).transport
    raw = await open_failure(t)
    event = V2.classify(raw)
    assert raw.method == "CONNECT" and event.code == "RATE_LIMITED" and event.retry_after_ms == 2000
    assert t.quota.held == 0  # the failed open gave its place back
    await first.close(CloseCode.GOING_AWAY)


@pytest.mark.genesys_sim(GenesysSimConfig(max_topics=1))
async def test_subscribe_refused_fails_the_open(genesys: Genesys) -> None:
    topics = ["v2.users.a.conversations", "v2.users.b.conversations"]
    event = await operation_failure(make(genesys, topics=topics).transport)
    assert (event.raw_status, event.taxonomy_class, event.channel) == (400, "PERMANENT", "rest")
    await wait_until(lambda: genesys.sim.recorder.connections_open("streaming") == 0)  # socket let go


async def test_a_topic_the_platform_does_not_have_fails_the_open(genesys: Genesys) -> None:
    """GN-1: real Genesys rejects unknown topics; the simulator used to permit any string."""
    event = await operation_failure(make(genesys, topics=["v2.users.a.conversations", "v2.bogus"]).transport)
    assert event.raw_status == 400 and event.details is not None and "v2.bogus" in event.details


@pytest.mark.genesys_sim(GenesysSimConfig(denied_topics=("v2.users.*.presence",)))
async def test_a_topic_without_permission_fails_the_open_with_403(genesys: Genesys) -> None:
    event = await operation_failure(make(genesys).transport)
    assert (event.raw_status, event.raw_code) == (403, "missing.permissions")


async def test_rest_rate_limit_propagates_as_operation_error(genesys: Genesys) -> None:
    genesys.sim.faults.inject(Fault(kind=FaultKind.RATE_LIMIT_STORM, endpoint="POST /api/v2/notifications"))
    event = await operation_failure(make(genesys).transport)
    assert event.code == "RATE_LIMITED" and event.channel == "rest"


async def test_channel_without_connect_uri_is_incomplete(genesys: Genesys) -> None:
    fault = Fault(
        kind=FaultKind.MISSING_FIELDS,
        endpoint="POST /api/v2/notifications",
        params={"fields": ["connectUri"]},
    )
    genesys.sim.faults.inject(fault)
    event = await operation_failure(make(genesys).transport)
    assert event.code == "INCOMPLETE_RESPONSE" and event.details is not None and "connectUri" in event.details


# -- secrets -------------------------------------------------------------------------------------------


async def test_no_bearer_token_in_any_raw_error(genesys: Genesys) -> None:
    n = make(genesys, classifier=V1)
    raws: list[RawError] = []
    conn = await n.transport.open()
    genesys.sim.faults.inject(Fault(kind=FaultKind.SOCKET_CLOSING, params={"lead_s": 0.05, "code": 1011}))
    raws.append(await serve_to_end(conn, n.runtime))
    raws += n.runtime.raws
    genesys.sim.faults.inject(Fault(kind=FaultKind.ADMISSION_LIMIT, params={"rate_per_s": 1, "status": 503}))
    kept = await n.transport.open()
    raws.append(await open_failure(n.transport))
    genesys.sim.faults.inject(Fault(kind=FaultKind.SERVER_ERROR_BURST, count=10, endpoint="POST /api/v2"))
    event = await operation_failure(n.transport)
    assert n.tokens.current is not None
    secret = n.tokens.current.access.reveal().encode()
    assert len(raws) == 3
    for raw in raws:
        assert secret not in msgspec.json.encode(raw)
        assert secret not in msgspec.json.encode(V1.classify(raw))
    assert secret not in msgspec.json.encode(event)
    await kept.close(CloseCode.GOING_AWAY)
