"""The daemon's own CXone transport and token cache, held against the vendors' wire shapes
(docs/platforms.md, "NICE CXone").

A loopback server (:mod:`tests.conformance.cxone_platform`) answers from fixtures that restate NICE's
agent SDK and an independent client (Cognigy's CXone extension), and records every request. The
tests drive the daemon's real objects (:class:`CxoneLogin`, :class:`TokenCache`, :class:`CxoneApi`,
the retry executor, :class:`AgentSessionTransport`, the session runner) and compare what they sent:
method, path and query, content type, form or JSON fields, the Authorization scheme and principal.
Time is a :class:`FakeClock`; the executor's backoff sleeps advance it instead of waiting.
"""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx
import pytest

from machines.registry import CircuitRegistry, Endpoints
from supervisor.attempts import Attempts
from supervisor.boundary import SessionContext
from supervisor.bus import EventBus, Published
from supervisor.clock import FakeClock
from supervisor.config import Secret
from supervisor.errors import OperationError
from supervisor.events import wire
from supervisor.rest.cxone_auth import CxoneApi, CxoneLogin
from supervisor.rest.executor import RetryExecutor
from supervisor.rest.pipeline import RequestPipeline
from supervisor.rest.tokens import Token, TokenCache
from supervisor.runtime.session_runner import SessionRunner
from supervisor.taxonomy import Channel, Classifier, Platform, SdkErrorEvent, load_taxonomy
from supervisor.telemetry.scrub import Scrubber
from supervisor.transports.cxone import AgentSessionTransport
from supervisor.vocabulary import CXONE_AGENT_SESSIONS, SessionState
from tests.conformance.cxone_platform import AGENT, TENANT, Answer, CxonePlatform, Seen, token_answer
from tests.harness.clocks import advancing

pytestmark = [pytest.mark.integration, pytest.mark.anyio, pytest.mark.timeout(30)]

CLIENT_ID = "a1b2c3d4-0000-4000-8000-00000000beef"
CLIENT_SECRET = "c+S/e=cr%t"  # RFC 6749 section 2.3.1 form-encodes each of these before Basic
ACCESS_KEY_ID = "AKIDEXAMPLE0123"
ACCESS_KEY_SECRET = "ak/S+ecret=="
FORM = "application/x-www-form-urlencoded"
SESSIONS = "/inContactAPI/services/v23.0/agent-sessions"


@dataclass
class Daemon:
    """The daemon's CXone objects, wired as runtime/wiring.py wires them."""

    platform: CxonePlatform
    http: httpx.AsyncClient
    clock: FakeClock
    version: str
    bus: EventBus = field(default_factory=EventBus)
    published: list[dict[str, Any]] = field(default_factory=list)
    slept: list[float] = field(default_factory=list)
    ctx: SessionContext = field(
        default_factory=lambda: SessionContext("cx-1", Platform.CXONE, Channel.AGENT_SESSION)
    )

    def __post_init__(self) -> None:
        self.sleep = advancing(self.clock, self.slept)
        self.classifier = Classifier(load_taxonomy(self.version), self.clock)
        self.executor = RetryExecutor(
            self.classifier,
            Attempts(Endpoints(self.clock, CircuitRegistry(self.clock))),
            self.clock,
            rng=random.Random(3),
            sleep=self.sleep,
        )
        self.login = CxoneLogin(
            self.http,
            self.platform.url,
            CLIENT_ID,
            Secret(CLIENT_SECRET),
            ACCESS_KEY_ID,
            Secret(ACCESS_KEY_SECRET),
        )
        self.tokens = TokenCache(self.login, self.clock, early_refresh_s=300.0, platform=Platform.CXONE)
        self.pipeline = RequestPipeline(self.http, self.executor, tokens=self.tokens)
        self.bus.subscribe(self._keep)

    def _keep(self, published: Published) -> None:
        self.published.append(wire(published))

    def api(self, api_url: str | None = None) -> CxoneApi:
        return CxoneApi(self.tokens, RequestPipeline(self.http, self.executor), api_url=api_url)

    def transport(self, api: CxoneApi | None = None, **overrides: Any) -> AgentSessionTransport:
        kwargs: dict[str, Any] = {
            "pipeline": self.pipeline,
            "api": api or self.api(),
            "station_phone_number": "5551234",
            "poll_timeout": 30,
            "poll_watchdog": 90.0,
            "sleep": self.sleep,
        }
        kwargs.update(overrides)
        return AgentSessionTransport(self.ctx, **kwargs)

    async def token(self) -> Token:
        return await self.executor.token(self.ctx, self.tokens, self.tokens.get)


@pytest.fixture
def version() -> str:
    return "v2"


@pytest.fixture
async def daemon(version: str, clock: FakeClock) -> AsyncIterator[Daemon]:
    async with (
        CxonePlatform(CLIENT_ID, CLIENT_SECRET, ACCESS_KEY_ID, ACCESS_KEY_SECRET) as platform,
        httpx.AsyncClient(timeout=10.0) as http,
    ):
        yield Daemon(platform, http, clock, version)


def _login_form() -> dict[str, str]:
    return {"grant_type": "password", "username": ACCESS_KEY_ID, "password": ACCESS_KEY_SECRET}


def _basic_client(seen: Seen) -> tuple[str | None, str | None, str | None]:
    return seen.auth_scheme, seen.principal, seen.secret


def _event(error: BaseException) -> SdkErrorEvent:
    assert isinstance(error, OperationError), error
    assert isinstance(error.event, SdkErrorEvent)
    return error.event


# --------------------------------------------------------------------------- point 1: the login


async def test_login_is_the_openid_password_grant_with_basic_client_authentication(daemon: Daemon) -> None:
    """COG cxone-api-client.ts getOpenIdConfig + getToken; NICE cxone-auth.js getOpenIDConfiguration."""
    token = await daemon.token()

    discovery, grant = daemon.platform.seen
    assert (discovery.method, discovery.path, discovery.query) == (
        "GET",
        "/.well-known/openid-configuration",
        {},
    )
    assert discovery.auth_scheme is None  # a public document
    assert (grant.method, grant.path, grant.query) == ("POST", "/auth/token", {})
    assert grant.content_type == FORM and grant.json is None
    assert grant.form == _login_form()
    # RFC 6749 section 2.3.1: the client id and secret, each form-encoded, as HTTP Basic
    assert _basic_client(grant) == ("Basic", CLIENT_ID, CLIENT_SECRET)
    assert token.access.reveal() == "AT-1" and token.refresh is not None
    assert token.remaining(daemon.clock.monotonic()) == 3600.0


async def test_the_id_token_never_leaves_the_login(daemon: Daemon) -> None:
    """The id_token is a credential: not in the cached token (whose repr shows ``extra``), not in an
    event; the telemetry scrubber and the classifier's context redaction know its name and shape."""
    token = await daemon.token()
    issued = token_answer(1, daemon.platform.url, CLIENT_ID)["id_token"]
    assert issued not in repr(token) and issued not in repr(token.extra)
    assert "id_token" not in token.extra
    assert token.extra["tenantId"] == TENANT and token.extra["agent_id"] == AGENT  # what it located
    assert issued not in Scrubber().text(f"id_token={issued}") and issued not in Scrubber().text(issued)
    assert "[REDACTED]" in Scrubber().text('{"idToken": "abc"}')
    event = daemon.classifier.incomplete_response(
        ("x",), platform=Platform.CXONE, channel=Channel.REST, context={"id_token": issued, "note": issued}
    )
    assert issued not in json.dumps(event.as_json())


# --------------------------------------------------------------------------- point 2: discovery


async def test_open_discovers_the_agent_api_from_the_id_token_tenant(daemon: Daemon) -> None:
    """NICE cxone-user.js (tenantId claim) + getCXoneConfiguration; COG getApiEndpoint({iss}, tenantId)."""
    transport = daemon.transport()
    connection = await transport.open()

    methods = [(s.method, s.path) for s in daemon.platform.seen]
    assert methods == [
        ("GET", "/.well-known/openid-configuration"),
        ("POST", "/auth/token"),
        ("GET", "/.well-known/cxone-configuration"),
        ("POST", SESSIONS),
        ("GET", f"{SESSIONS}/S0/get-next-event"),
    ]
    _, _, where, start, poll = daemon.platform.seen
    assert where.query == {"tenantId": TENANT} and where.auth_scheme is None
    # acd-session-manager.js startSession: a JSON StartSessionRequest, the bearer token
    assert start.json == {"stationId": "", "stationPhoneNumber": "5551234"} and start.form is None
    assert (start.auth_scheme, start.principal) == ("Bearer", "AT-1")
    assert poll.query == {"timeout": "0"} and (poll.auth_scheme, poll.principal) == ("Bearer", "AT-1")
    assert connection.session_response == {"sessionId": "S0", "agentId": AGENT, "status": "Unavailable"}

    # the credential's other sessions use what this login found: no second login, no second discovery
    await daemon.transport(api=transport.api).open()
    assert len(daemon.platform.requests("GET", "/.well-known/cxone-configuration")) == 1
    assert len(daemon.platform.requests("POST", "/auth/token")) == 1


@pytest.mark.parametrize("suffix", ["", "/", "/inContactAPI", "/incontactapi/"])
async def test_a_configured_api_url_skips_discovery(daemon: Daemon, suffix: str) -> None:
    await daemon.transport(api=daemon.api(daemon.platform.url + suffix)).open()
    assert daemon.platform.requests("GET", "/.well-known/cxone-configuration") == []
    assert len(daemon.platform.requests("POST", SESSIONS)) == 1


async def test_each_login_discovers_again_and_concurrent_opens_share_one(daemon: Daemon) -> None:
    api = daemon.api()
    async with anyio.create_task_group() as tg:
        for _ in range(5):
            tg.start_soon(api.base, daemon.ctx)
    assert len(daemon.platform.requests("GET", "/.well-known/cxone-configuration")) == 1
    daemon.tokens.revoke()  # a fail-fast condemned the token: the next use logs in again
    assert await api.base(daemon.ctx) == daemon.platform.url + "/inContactAPI/services/v23.0/"
    assert len(daemon.platform.requests("GET", "/.well-known/cxone-configuration")) == 2
    assert [s.form["grant_type"] for s in daemon.platform.requests("POST", "/auth/token") if s.form] == [
        "password",
        "password",
    ]


async def test_a_discovery_without_api_endpoint_is_incomplete_response(daemon: Daemon) -> None:
    daemon.platform.answer("discovery", Answer(200, {"area": "na1", "cluster": "C32"}))
    with pytest.raises(OperationError) as caught:
        await daemon.transport().open()
    event = _event(caught.value)
    assert event.code == "INCOMPLETE_RESPONSE" and event.fail_fast
    assert event.details == "Missing required fields: api_endpoint"
    assert daemon.platform.requests("POST", SESSIONS) == []


@pytest.mark.parametrize("api_endpoint", [42, "ftp://api.example", "", None])
async def test_a_discovered_api_endpoint_that_is_no_http_url_is_incomplete_response(
    daemon: Daemon, api_endpoint: object
) -> None:
    daemon.platform.answer("discovery", Answer(200, {"api_endpoint": api_endpoint, "area": "na1"}))
    with pytest.raises(OperationError) as caught:
        await daemon.transport().open()
    assert _event(caught.value).code == "INCOMPLETE_RESPONSE"
    assert daemon.platform.requests("POST", SESSIONS) == []


@pytest.mark.parametrize("document", [{"issuer": "x"}, {"token_endpoint": "not a url"}, ["a list"]])
async def test_an_openid_configuration_without_a_token_endpoint_is_no_login(
    daemon: Daemon, document: object
) -> None:
    """Nothing to log in at: a contract violation (MALFORMED_RESPONSE), as a token answer without a token."""
    daemon.platform.answer("openid", Answer(200, document))
    with pytest.raises(OperationError) as caught:
        await daemon.token()
    assert _event(caught.value).code == "MALFORMED_RESPONSE"
    assert daemon.platform.requests("POST", "/auth/token") == []


async def test_a_login_whose_id_token_names_no_tenant_is_incomplete_response(daemon: Daemon) -> None:
    answer = token_answer(1, daemon.platform.url, CLIENT_ID, tenantId=None)
    daemon.platform.answer("password", Answer(200, answer))
    with pytest.raises(OperationError) as caught:
        await daemon.transport().open()
    event = _event(caught.value)
    assert event.code == "INCOMPLETE_RESPONSE" and "id_token.tenantId" in (event.details or "")
    assert daemon.platform.requests("GET", "/.well-known/cxone-configuration") == []


async def test_a_refused_discovery_is_transient_and_retried(daemon: Daemon) -> None:
    daemon.platform.answer("discovery", Answer(404, {"error": "not_found"}))
    await daemon.transport().open()
    assert len(daemon.platform.requests("GET", "/.well-known/cxone-configuration")) == 2
    assert len(daemon.slept) == 1  # the server_error policy's first backoff


async def test_a_discovery_refused_past_its_retries_fails_the_attempt_as_transient(daemon: Daemon) -> None:
    daemon.platform.answer("discovery", *[Answer(404, {"error": "not_found"})] * 4)
    with pytest.raises(OperationError) as caught:
        await daemon.transport().open()
    event = _event(caught.value)
    assert event.code == "API_DISCOVERY_FAILED" and event.taxonomy_class.value == "TRANSIENT"
    assert event.policy.name == "server_error" and caught.value.exhausted and not event.fail_fast


async def test_sessions_waiting_for_a_discovery_share_its_failure(daemon: Daemon) -> None:
    """Like the token cache's single flight: the sessions that waited for a discovery that gave up
    get its failure, and do not each ask again (a thousand sessions would make a thousand tries)."""
    daemon.platform.answer("discovery", *[Answer(404, {"error": "not_found"})] * 4)
    api = daemon.api()
    failures: list[BaseException] = []

    async def open_one() -> None:
        try:
            await api.base(daemon.ctx)
        except OperationError as exc:
            failures.append(exc)

    async with anyio.create_task_group() as tg:
        for _ in range(5):
            tg.start_soon(open_one)
    assert len(failures) == 5 and {_event(f).code for f in failures} == {"API_DISCOVERY_FAILED"}
    assert len(daemon.platform.requests("GET", "/.well-known/cxone-configuration")) == 4  # 1 + 3 retries


# --------------------------------------------------------------------------- point 3: the refresh


async def test_the_refresh_is_the_openid_refresh_grant(daemon: Daemon) -> None:
    """NICE cxone-auth.js getRefreshToken: `grant_type=refresh_token&scope=openid&refresh_token=…` to
    the discovered tokenEndpoint; the client authenticates as for the login (RFC 6749 section 6)."""
    first = await daemon.token()
    daemon.clock.advance(3600 - 299)  # inside the 5-minute early-refresh window
    second = await daemon.token()

    _, refresh = daemon.platform.requests("POST", "/auth/token")
    assert refresh.content_type == FORM and refresh.json is None
    assert refresh.form == {"grant_type": "refresh_token", "scope": "openid", "refresh_token": "RT-1"}
    assert _basic_client(refresh) == ("Basic", CLIENT_ID, CLIENT_SECRET)
    assert second.access.reveal() == "AT-2" and first is not second
    assert second.extra["login"] == first.extra["login"]  # a refresh is not a login: no new discovery
    assert daemon.tokens.refreshes == 1 and daemon.login.logins == 1


async def test_a_refused_refresh_falls_back_to_one_login_for_every_session(daemon: Daemon) -> None:
    await daemon.token()
    daemon.platform.answer("refresh_token", Answer(400, {"error": "invalid_grant"}))
    daemon.clock.advance(3600 - 299)
    got: list[Token] = []

    async def session_needs_a_token() -> None:
        got.append(await daemon.token())

    async with anyio.create_task_group() as tg:
        for _ in range(20):
            tg.start_soon(session_needs_a_token)

    grants = [s.form["grant_type"] for s in daemon.platform.requests("POST", "/auth/token") if s.form]
    assert grants == ["password", "refresh_token", "password"]  # single-flight: one refresh, one login
    assert {t.access.reveal() for t in got} == {"AT-2"}
    assert daemon.login.refused_refreshes == 1 and daemon.login.logins == 2


async def test_refresh_and_login_both_refused_is_token_refresh_failed(daemon: Daemon) -> None:
    await daemon.token()
    daemon.platform.answer("refresh_token", Answer(400, {"error": "invalid_grant"}))
    daemon.platform.answer("password", Answer(400, {"error": "invalid_grant"}))
    daemon.clock.advance(3600 - 299)
    with pytest.raises(OperationError) as caught:
        await daemon.token()
    event = _event(caught.value)
    assert event.code == "TOKEN_REFRESH_FAILED" and event.fail_fast and event.revokes_credential
    grants = [s.form["grant_type"] for s in daemon.platform.requests("POST", "/auth/token") if s.form]
    assert grants == ["password", "refresh_token", "password"]  # fail-fast: nothing retried


async def test_a_token_endpoint_outage_retries_the_refresh_not_a_login(daemon: Daemon) -> None:
    await daemon.token()
    daemon.platform.answer("refresh_token", Answer(503, {"error": "temporarily_unavailable"}))
    daemon.clock.advance(3600 - 299)
    assert (await daemon.token()).access.reveal() == "AT-2"
    grants = [s.form["grant_type"] for s in daemon.platform.requests("POST", "/auth/token") if s.form]
    assert grants == ["password", "refresh_token", "refresh_token"]
    assert daemon.login.logins == 1 and len(daemon.slept) == 1


# --------------------------------------------------------------------------- point 4 and the hour


def _runner(daemon: Daemon, transport: AgentSessionTransport) -> SessionRunner:
    return SessionRunner(
        transport,
        classifier=daemon.classifier,
        gate=daemon.executor.attempts.connect(CXONE_AGENT_SESSIONS),
        bus=daemon.bus,
        clock=daemon.clock,
        rng=random.Random(5),
        tokens=daemon.tokens,
        sleep=daemon.sleep,
    )


def _classified(daemon: Daemon) -> list[str]:
    return [str(e["code"]) for e in daemon.published if e["event"] == "SDK_ERROR_CLASSIFIED"]


async def test_an_hour_of_login_discovery_polls_a_refresh_and_a_lost_answer_stays_active(
    daemon: Daemon,
) -> None:
    """One CXone session for a simulated hour: it logs in, discovers its API, polls (each poll held
    a minute), refreshes at 55 minutes, loses one poll answer at 20 minutes and is resynchronised by
    the platform's replay: still active at the end, on its first platform session, never terminated."""
    polls: list[Seen] = []
    start = daemon.clock.monotonic()
    an_hour_passed = anyio.Event()

    def a_minute_per_poll(seen: Seen) -> None:
        polls.append(seen)
        if len(polls) == 20:
            daemon.platform.lose_next_poll = True
        daemon.clock.advance(60.0)
        if daemon.clock.monotonic() - start >= 3600 + 120:
            an_hour_passed.set()

    daemon.platform.on_poll = a_minute_per_poll
    runner = _runner(daemon, daemon.transport())
    async with anyio.create_task_group() as tg:
        tg.start_soon(runner.run)
        with anyio.fail_after(20):
            await an_hour_passed.wait()
        assert runner.state is SessionState.ACTIVE
        await runner.stop()

    assert runner.termination is not None and runner.termination.reason.value == "STOPPED"
    grants = [s.form["grant_type"] for s in daemon.platform.requests("POST", "/auth/token") if s.form]
    assert grants == ["password", "refresh_token"]  # one login, one refresh at 55 minutes
    assert len(daemon.platform.requests("GET", "/.well-known/cxone-configuration")) == 1
    assert len(daemon.platform.requests("POST", SESSIONS)) == 1  # one platform session throughout
    # the lost answer: the retry polled the id it held, the platform replayed and handed out a new one
    lost, retried, after = polls[19], polls[20], polls[21]
    assert retried.path == lost.path and after.path != lost.path
    assert _classified(daemon).count("SESSION_RESYNCED") == 1
    terminated = [e for e in daemon.published if e["event"] == "SESSION_TERMINATED"]
    assert [e["reason"] for e in terminated] == ["STOPPED"]  # only our own stop ended it
    # polls after the refresh carry the new token
    assert polls[-1].principal == "AT-2" and polls[0].principal == "AT-1"
    assert daemon.platform.seen[-1].method == "DELETE"  # stopped: the agent session is ended


async def test_a_replay_naming_another_agent_ends_the_session(daemon: Daemon) -> None:
    polls: list[Seen] = []

    def lose_the_second(seen: Seen) -> None:
        polls.append(seen)
        if len(polls) == 2:
            daemon.platform.lose_next_poll = True
            daemon.platform.replay_agent = "999999"

    daemon.platform.on_poll = lose_the_second
    runner = _runner(daemon, daemon.transport())
    with anyio.fail_after(10):
        await runner.run()
    assert runner.termination is not None
    assert runner.termination.code == "SESSION_ID_MISMATCH"
    assert "SESSION_RESYNCED" not in _classified(daemon)


@pytest.mark.parametrize("version", ["v1"])
async def test_a_pinned_v1_ends_the_session_on_the_platforms_replay(daemon: Daemon) -> None:
    polls: list[Seen] = []

    def lose_the_second(seen: Seen) -> None:
        polls.append(seen)
        if len(polls) == 2:
            daemon.platform.lose_next_poll = True

    daemon.platform.on_poll = lose_the_second
    runner = _runner(daemon, daemon.transport())
    with anyio.fail_after(10):
        await runner.run()
    assert runner.termination is not None and runner.termination.code == "SESSION_ID_MISMATCH"
    assert _classified(daemon).count("SESSION_ID_MISMATCH") == 1  # published once
