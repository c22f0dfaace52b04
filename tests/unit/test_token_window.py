"""The 401 rule by time left (docs/taxonomy.md, "The 401 rule"): decided by the taxonomy from an envelope flag.

Both platforms answer an expired and a revoked token alike (CXone ``invalid_token``, Genesys
``bad.credentials``), and a platform may end a token a little before the ``expires_in`` it
announced. A 401 on a token left with at most its early-refresh window (as the token cache
computes it) is TOKEN_EXPIRED in taxonomy v2: refreshed once, replayed once. More left, a 401 on
the replay, or a refused refresh end the session (OAUTH_TOKEN_INVALID, TOKEN_REFRESH_FAILED).
v1 keeps its rule: only a token expired by our clock is replayed.
"""

from __future__ import annotations

import random
from typing import Any

import httpx
import pytest

from machines.circuit import CircuitConfig
from machines.registry import CircuitRegistry, Endpoints
from supervisor.attempts import Attempts
from supervisor.boundary import SessionContext, TokenAge, raw_from_response
from supervisor.clock import FakeClock
from supervisor.config import Secret
from supervisor.errors import OperationError, TransportFailure
from supervisor.rest.executor import RetryExecutor
from supervisor.rest.pipeline import RequestPipeline
from supervisor.rest.tokens import Token, TokenCache
from supervisor.taxonomy import Channel, Classifier, Platform, RawError, SdkErrorEvent, load_taxonomy
from supervisor.vocabulary import EndpointId
from tests.harness.clocks import advancing

V1 = load_taxonomy("v1")
V2 = load_taxonomy("v2")

CXONE_POLL = "/inContactAPI/services/v23.0/agent-sessions/s-1/get-next-event"
GENESYS_READ = "/api/v2/conversations/c-1"


def _token(clock: FakeClock, lifetime: float) -> Token:
    return Token(Secret("tok"), clock.monotonic() + lifetime, lifetime=lifetime)


class _Never:
    async def fetch(self, refresh: Secret | None) -> tuple[Secret, float, Secret | None, dict[str, Any]]:
        raise AssertionError("no fetch expected")


# ---------------------------------------------------------------- the window, as the cache computes it


@pytest.mark.parametrize(
    ("early", "lifetime", "window"),
    [
        (300.0, 3600.0, 300.0),  # the seed's 5 minutes
        (300.0, 300.0, 150.0),  # Genesys' shortest token could never satisfy 300 s: halved
        (1.5, 4.0, 1.5),  # the demo's --fast tokens
        (0.0, 60.0, 0.0),  # no early refresh: the window is the expiry itself
    ],
)
def test_the_refresh_window_is_the_one_the_cache_refreshes_by(
    early: float, lifetime: float, window: float
) -> None:
    clock = FakeClock(start=10.0)
    cache = TokenCache(_Never(), clock, early_refresh_s=early)
    token = _token(clock, lifetime)
    assert cache.refresh_window(token) == window
    clock.advance(lifetime - window - 0.01)
    # just outside the window: the cache still serves it, and a 401 on it is no expiry
    assert not cache.within_refresh_window(token)
    clock.advance(0.01)
    # at the window's edge: the cache no longer serves it, and a 401 on it is its expiry
    assert cache.within_refresh_window(token)
    assert cache.age(token) == TokenAge(expired=window == 0.0, within_refresh_window=True)


def test_the_envelope_carries_what_our_clock_said_of_the_token() -> None:
    ctx = SessionContext("cx-1", Platform.CXONE, Channel.REST)
    response = httpx.Response(401, request=httpx.Request("GET", "http://api.test" + CXONE_POLL))
    assert "tokenWithinRefreshWindow" not in (raw_from_response(response, ctx=ctx).context or {})
    raw = raw_from_response(response, ctx=ctx, token_age=TokenAge(within_refresh_window=True))
    assert raw.context is not None
    assert raw.context["tokenWithinRefreshWindow"] is True and "tokenExpired" not in raw.context
    expired = raw_from_response(response, ctx=ctx, token_age=TokenAge(expired=True))
    assert expired.context is not None
    assert (expired.context["tokenExpired"], expired.context["tokenWithinRefreshWindow"]) == (True, True)


# ---------------------------------------------------------------- the taxonomy's routing of the flag


def _unauthorized(platform: Platform, context: dict[str, Any]) -> RawError:
    if platform is Platform.CXONE:
        return RawError(
            platform=platform,
            channel=Channel.REST,
            method="GET",
            endpoint=CXONE_POLL,
            status=401,
            body={"error": "invalid_token", "error_description": "Token expired"},
            context=context,
        )
    return RawError(
        platform=platform,
        channel=Channel.REST,
        method="GET",
        endpoint=GENESYS_READ,
        status=401,
        body={"message": "Invalid login credentials.", "code": "bad.credentials", "status": 401},
        context=context,
    )


@pytest.mark.parametrize("platform", [Platform.CXONE, Platform.GENESYS])
@pytest.mark.parametrize(
    ("context", "v1_code", "v2_code"),
    [
        ({"tokenWithinRefreshWindow": True}, "OAUTH_TOKEN_INVALID", "TOKEN_EXPIRED"),
        ({}, "OAUTH_TOKEN_INVALID", "OAUTH_TOKEN_INVALID"),
        ({"tokenWithinRefreshWindow": False}, "OAUTH_TOKEN_INVALID", "OAUTH_TOKEN_INVALID"),
        # a recorded (or v1-era) envelope: expired is within the window, in both versions
        ({"tokenExpired": True}, "TOKEN_EXPIRED", "TOKEN_EXPIRED"),
        ({"tokenExpired": True, "tokenWithinRefreshWindow": True}, "TOKEN_EXPIRED", "TOKEN_EXPIRED"),
    ],
)
def test_v2_routes_a_401_within_the_window_to_token_expired_and_v1_keeps_its_rule(
    platform: Platform, context: dict[str, Any], v1_code: str, v2_code: str
) -> None:
    raw = _unauthorized(platform, context)
    v1, v2 = Classifier(V1).classify(raw), Classifier(V2).classify(raw)
    assert (v1.code, v2.code) == (v1_code, v2_code)
    if v2_code == "TOKEN_EXPIRED":
        assert v2.replay_with_fresh_token and not v2.fail_fast
    else:
        assert v2.fail_fast and v2.revokes_credential and v2.trigger is not None
    # the flag is kept in the event's context, never redacted (it says nothing secret)
    assert v2.context.get("tokenWithinRefreshWindow") == context.get("tokenWithinRefreshWindow")


# ---------------------------------------------------------------- the executor: refresh once, replay once


class _Source:
    """A token endpoint handing out tok-1, tok-2, ... of ``lifetime`` seconds, or refusing."""

    def __init__(self, lifetime: float) -> None:
        self.lifetime = lifetime
        self.fetches = 0
        self.refuse = False

    async def fetch(self, refresh: Secret | None) -> tuple[Secret, float, Secret | None, dict[str, Any]]:
        if self.refuse:
            raise TransportFailure(
                RawError(
                    platform=Platform.CXONE,
                    channel=Channel.REST,
                    method="POST",
                    endpoint="/public/authentication/v1/token",
                    status=400,
                    body={"error": "invalid_grant"},
                )
            )
        self.fetches += 1
        return Secret(f"tok-{self.fetches}"), self.lifetime, None, {}


class _Rig:
    """A CXone poll through the real pipeline and executor (taxonomy v2) against a handler."""

    def __init__(self, handler: Any, *, lifetime: float = 3600.0, early: float = 300.0) -> None:
        self.clock = FakeClock(start=100.0)
        self.source = _Source(lifetime)
        self.tokens = TokenCache(self.source, self.clock, early_refresh_s=early, platform=Platform.CXONE)
        self.circuits = CircuitRegistry(self.clock, CircuitConfig(), random.Random(1))
        self.classified: list[SdkErrorEvent] = []
        self.sleeps: list[float] = []
        sleep = advancing(self.clock, self.sleeps)

        self.executor = RetryExecutor(
            Classifier(V2, self.clock),
            Attempts(Endpoints(self.clock, self.circuits)),
            self.clock,
            rng=random.Random(3),
            sleep=sleep,
        )
        self.client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
        self.pipeline = RequestPipeline(self.client, self.executor, tokens=self.tokens)
        self.ctx = SessionContext("cx-1", Platform.CXONE, Channel.AGENT_SESSION, agent_id="100001")

    async def poll(self) -> httpx.Response:
        return await self.pipeline.request(
            "GET",
            "http://api.test" + CXONE_POLL,
            ctx=self.ctx,
            circuit=EndpointId(Platform.CXONE, "api"),
            channel=Channel.REST,
        )


def _invalid_token() -> httpx.Response:
    return httpx.Response(401, json={"error": "invalid_token", "error_description": "Token expired"})


@pytest.mark.anyio
async def test_a_401_with_less_than_the_window_left_is_refreshed_and_replayed_once() -> None:
    """The platform ended the token 5 s before the lifetime it announced: still its expiry."""
    seen: list[str] = []
    rig: _Rig

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers["Authorization"])
        if len(seen) == 1:
            rig.clock.advance(3600.0 - 5.0)  # sent with an hour left, answered with 5 s left
            return _invalid_token()  # the platform says expired: its clock is not ours
        return httpx.Response(200, json={"sessionId": "s-2"})

    rig = _Rig(handler)
    response = await rig.poll()
    assert response.status_code == 200
    assert seen == ["Bearer tok-1", "Bearer tok-2"]  # refreshed once, replayed once
    assert rig.tokens.refreshes == 1 and rig.sleeps == []  # no backoff before a replay


@pytest.mark.anyio
async def test_a_401_with_more_than_the_window_left_is_oauth_token_invalid() -> None:
    """A revoked token: no refresh storm, the session's trigger."""
    rig = _Rig(lambda request: _invalid_token())
    await rig.tokens.get()
    rig.clock.advance(3600.0 - 301.0)  # 301 s left: more than the 300 s window, still served
    with pytest.raises(OperationError) as info:
        await rig.poll()
    event = info.value.event
    assert isinstance(event, SdkErrorEvent)
    assert (event.code, event.trigger, event.revokes_credential) == (
        "OAUTH_TOKEN_INVALID",
        "OAUTH_TOKEN_INVALID",
        True,
    )
    assert rig.source.fetches == 1 and rig.tokens.refreshes == 0


@pytest.mark.anyio
async def test_a_401_on_the_replay_with_the_fresh_token_is_oauth_token_invalid() -> None:
    calls: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.headers["Authorization"])
        if len(calls) == 1:
            rig.clock.advance(3600.0 - 5.0)  # the first token's 401 comes with 5 s left
        return _invalid_token()  # and the fresh one's, with its whole hour left

    rig = _Rig(handler)
    with pytest.raises(OperationError) as info:
        await rig.poll()
    event = info.value.event
    assert isinstance(event, SdkErrorEvent)
    assert calls == ["Bearer tok-1", "Bearer tok-2"]  # one replay, never a second
    assert (event.code, event.trigger) == ("OAUTH_TOKEN_INVALID", "OAUTH_TOKEN_INVALID")


@pytest.mark.anyio
async def test_a_refused_refresh_for_the_replay_is_token_refresh_failed() -> None:
    calls: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.headers["Authorization"])
        rig.clock.advance(3600.0 - 5.0)
        rig.source.refuse = True  # the token endpoint refuses from now on
        return _invalid_token()

    rig = _Rig(handler)
    with pytest.raises(OperationError) as info:
        await rig.poll()
    event = info.value.event
    assert isinstance(event, SdkErrorEvent)
    assert (event.code, event.trigger) == ("TOKEN_REFRESH_FAILED", "TOKEN_REFRESH_FAILED")
    assert calls == ["Bearer tok-1"]  # nothing replayed without a fresh token
