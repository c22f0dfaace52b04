"""NotificationsTransport against the Genesys simulator (issue 5): channel, subscribe, faults -> code.

The channel is created through the real RequestPipeline (token cache, circuit ``genesys:api``);
retry waits are skipped with an injected no-op sleep. Waits are protocol waits (a frame, a
close); ``anyio.fail_after`` only bounds a test that would otherwise hang.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import anyio
import msgspec
import pytest

from machines.registry import CircuitRegistry
from supervisor.boundary import SessionContext
from supervisor.config import Keepalive, Secret
from supervisor.errors import OperationError, TransportFailure
from supervisor.rest.executor import RetryExecutor
from supervisor.rest.pipeline import RequestPipeline
from supervisor.rest.tokens import GenesysClientCredentials, TokenCache
from supervisor.sim.faults import Fault, FaultKind
from supervisor.sim.genesys.config import GenesysSimConfig
from supervisor.taxonomy import Channel, Classifier, Platform, RawError, SdkErrorEvent, load_taxonomy
from supervisor.transports.notifications import NotificationsConnection, NotificationsTransport
from tests.integration.conftest import Genesys, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

CLASSIFIER = Classifier(load_taxonomy("v1"))
QUIET = Keepalive(ping_interval=60.0, ping_timeout=30.0, echo_interval=0.0, open_timeout=5.0)
HEALTH = Keepalive(
    ping_interval=60.0, ping_timeout=30.0, echo_interval=0.2, echo_timeout=0.3, open_timeout=5.0
)
TOPIC = "v2.users.u1.presence"
LIMIT_S = 2.0  # hang guard only


class Reports:
    """A Reporter that records what it was told and answers ``keep``."""

    def __init__(self, keep: bool = True) -> None:
        self.keep = keep
        self.raws: list[RawError] = []

    async def __call__(self, raw: RawError) -> bool:
        self.raws.append(raw)
        return self.keep


async def no_sleep(_: float) -> None:
    """Retry waits are the pipeline's business, tested elsewhere."""


@dataclass
class Notif:
    transport: NotificationsTransport
    tokens: TokenCache
    events: list[Mapping[str, Any]]


def make(g: Genesys, keepalive: Keepalive = QUIET, topics: list[str] | None = None) -> Notif:
    tokens = TokenCache(
        GenesysClientCredentials(g.http, g.sim.urls["login"], "client", Secret("secret")), g.clock
    )
    executor = RetryExecutor(CLASSIFIER, CircuitRegistry(g.clock), g.clock, sleep=no_sleep)
    pipeline = RequestPipeline(g.http, executor, tokens=tokens)
    events: list[Mapping[str, Any]] = []
    t = NotificationsTransport(
        SessionContext("notif-1", Platform.GENESYS, Channel.NOTIFICATIONS),
        pipeline=pipeline,
        api_url=g.sim.urls["api"],
        topics=topics or [TOPIC],
        keepalive=keepalive,
        on_event=events.append,
    )
    return Notif(t, tokens, events)


def code_of(raw: RawError) -> str:
    return CLASSIFIER.classify(raw).code


async def serve_to_end(conn: NotificationsConnection, report: Reports) -> RawError:
    with anyio.fail_after(LIMIT_S):
        return await conn.serve(report)


async def serving(conn: NotificationsConnection, report: Reports, result: list[RawError]) -> None:
    result.append(await conn.serve(report))


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


async def test_open_subscribes_and_delivers_events(genesys: Genesys) -> None:
    n = make(genesys)
    conn = await n.transport.open()
    response = conn.session_response
    assert response["status"] == "subscribed"
    # the PY269 Channel as the platform sent it
    assert response["connectUri"] == f"{genesys.sim.urls['streaming']}/channels/{response['id']}"
    event = CLASSIFIER.validate_response(
        response,
        platform=Platform.GENESYS,
        channel=Channel.NOTIFICATIONS,
        kind=n.transport.response_kind,
    )
    assert event is None
    assert conn.learned.platform_session_id == response["id"]
    report = Reports()
    result: list[RawError] = []
    with anyio.fail_after(LIMIT_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(serving, conn, report, result)
            assert genesys.sim.publish(TOPIC, {"presence": "Available"}) == 1
            assert genesys.sim.publish("v2.users.other.presence", {"presence": "Away"}) == 0
            await wait_until(lambda: len(n.events) == 1)
            assert genesys.sim.heartbeat() == 1  # liveness, not an event nor an error
            await wait_until(lambda: conn.heartbeats == 1)
            await conn.close(1000)
    assert n.events[0]["eventBody"] == {"presence": "Available"} and report.raws == []
    assert code_of(result[0]) == "GRACEFUL_CLOSE"


async def test_blackhole_is_ended_by_the_ping_health_check(genesys: Genesys) -> None:
    conn = await make(genesys, HEALTH).transport.open()
    rec = genesys.sim.recorder
    result: list[RawError] = []
    with anyio.fail_after(LIMIT_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(serving, conn, Reports(), result)
            await wait_until(lambda: rec.ws_messages("streaming", "in", "ping") >= 2)  # answered by pongs
            assert not result
            genesys.sim.faults.inject(Fault(kind=FaultKind.BLACKHOLE))
    (raw,) = result
    # no pong in time: the transport aborts the link without a close frame (RFC 6455 §7.1.5)
    assert raw.close_code == 1006 and code_of(raw) == "ABNORMAL_CLOSURE"


# -- the socket ends -------------------------------------------------------------------------------------


async def test_drop_is_an_abnormal_closure(genesys: Genesys) -> None:
    conn = await make(genesys).transport.open()
    genesys.sim.faults.inject(Fault(kind=FaultKind.DROP))
    raw = await serve_to_end(conn, Reports())
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
    conn = await make(genesys).transport.open()
    genesys.sim.faults.inject(Fault(kind=FaultKind.CLOSE, params={"code": close}))
    raw = await serve_to_end(conn, Reports())
    assert raw.close_code == close and code_of(raw) == code


async def test_socket_closing_is_returned_when_the_runtime_moves_on(genesys: Genesys) -> None:
    conn = await make(genesys).transport.open()
    report = Reports(keep=False)
    # the simulator would close 30 s later: the transport must not wait for that
    genesys.sim.faults.inject(Fault(kind=FaultKind.SOCKET_CLOSING, params={"lead_s": 30}))
    raw = await serve_to_end(conn, report)
    assert report.raws == [raw] and raw is report.raws[0]
    assert code_of(raw) == "SOCKET_CLOSING"
    await wait_until(lambda: genesys.sim.recorder.connections_open("streaming") == 0)  # old socket closed


async def test_socket_closing_kept_then_the_server_closes(genesys: Genesys) -> None:
    conn = await make(genesys).transport.open()
    report = Reports(keep=True)
    genesys.sim.faults.inject(Fault(kind=FaultKind.SOCKET_CLOSING, params={"lead_s": 0.05, "code": 1001}))
    raw = await serve_to_end(conn, report)
    assert [code_of(r) for r in report.raws] == ["SOCKET_CLOSING"]
    assert code_of(raw) == "GOING_AWAY"


@pytest.mark.parametrize("sim_config", [GenesysSimConfig(max_channels=1)])
async def test_evicted_channel_is_channel_lost(genesys: Genesys) -> None:
    conn = await make(genesys).transport.open()
    report = Reports(keep=False)
    result: list[RawError] = []
    with anyio.fail_after(LIMIT_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(serving, conn, report, result)
            await genesys.login("client", "secret")  # same client: its 2nd channel evicts ours (§2)
            r = await genesys.http.post(genesys.api("/api/v2/notifications/channels"), headers=genesys.auth)
            assert r.status_code == 200
    assert result == report.raws
    event = CLASSIFIER.classify(result[0])
    assert event.code == "CHANNEL_LOST" and event.raw_status == 404


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
    raw = await open_failure(make(genesys).transport)
    event = CLASSIFIER.classify(raw)
    assert raw.method == "CONNECT" and event.code == "RATE_LIMITED" and event.retry_after_ms == 2000
    await first.close(1001)


async def test_unanswered_subscribe_is_a_network_timeout(genesys: Genesys) -> None:
    short = Keepalive(ping_interval=60.0, ping_timeout=30.0, echo_interval=0.0, open_timeout=0.3)
    genesys.sim.faults.inject(Fault(kind=FaultKind.BLACKHOLE, endpoint="WS /channels"))
    raw = await open_failure(make(genesys, short).transport)
    assert raw.method == "subscribe" and code_of(raw) == "NETWORK_TIMEOUT"


@pytest.mark.parametrize("sim_config", [GenesysSimConfig(max_topics=1)])
async def test_subscribe_refused_fails_the_open(genesys: Genesys) -> None:
    topics = ["v2.users.a.conversations", "v2.users.b.conversations"]
    raw = await open_failure(make(genesys, topics=topics).transport)
    assert raw.method == "subscribe"
    assert CLASSIFIER.classify(raw).raw_status == 400
    assert CLASSIFIER.classify(raw).taxonomy_class == "PERMANENT"


async def test_a_topic_the_platform_does_not_have_fails_the_open(genesys: Genesys) -> None:
    """GN-1: real Genesys rejects unknown topics; the simulator used to permit any string."""
    raw = await open_failure(make(genesys, topics=["v2.users.a.conversations", "v2.bogus"]).transport)
    assert raw.method == "subscribe" and CLASSIFIER.classify(raw).raw_status == 400
    assert isinstance(raw.body, dict) and "v2.bogus" in str(raw.body.get("message"))


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
    n = make(genesys)
    raws: list[RawError] = []
    conn = await n.transport.open()
    report = Reports(keep=True)
    genesys.sim.faults.inject(Fault(kind=FaultKind.SOCKET_CLOSING, params={"lead_s": 0.05, "code": 1011}))
    raws.append(await serve_to_end(conn, report))
    raws += report.raws
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
        assert secret not in msgspec.json.encode(CLASSIFIER.classify(raw))
    assert secret not in msgspec.json.encode(event)
    await kept.close(1001)
