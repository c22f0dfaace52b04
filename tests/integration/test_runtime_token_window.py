"""A 401 just past a token's expiry keeps the session (docs/taxonomy.md, "The 401 rule"), over loopback.

The platform's clock is not ours: it may end a token a few seconds before the ``expires_in`` it
announced, and it answers an expired and a revoked token alike (CXone ``invalid_token``, Genesys
``bad.credentials``). The daemon judges a 401 by the time the token had left by its own clock: at
most the early-refresh window, the token lapsed (TOKEN_EXPIRED: refresh once, replay once, the
session stays); more, it was revoked (OAUTH_TOKEN_INVALID: the session ends).

The daemon only sends a token that late when a request waits between taking its token and going
out: a retry (signed again only when the token expires within ``tokens.refreshBeforeRetry``) or
a paced slot. These tests take the retry: a poll answered 503, its backoff (on the shared fake
clock) brings the token to 3 s before its end, past the platform's early end, and the retry goes
out with it (``refreshBeforeRetry = 1``). No sleep waits for a timer: the clock is injected.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from supervisor.clock import FakeClock
from supervisor.rest.tokens import TokenCache
from supervisor.sim.cxone import CxoneSimConfig, CxoneSimulator
from supervisor.sim.faults import Fault, FaultKind
from supervisor.sim.genesys import GenesysSimConfig, GenesysSimulator
from supervisor.transports.webmessaging import WebMessagingTransport
from supervisor.vocabulary import Platform
from tests.harness.config import cxone_config, genesys_config
from tests.harness.in_process import Harness, supervised

POLL = "GET *get-next-event"
# the platform ends tokens this long before the lifetime it announced
EARLY_S = 5.0

pytestmark = [
    pytest.mark.integration,
    pytest.mark.anyio,
    # both simulators on the test's fake clock, which the daemon shares
    pytest.mark.cxone_sim(
        CxoneSimConfig(token_ttl_s=120, token_early_expiry_s=EARLY_S), seed=4, fake_clock=True
    ),
    pytest.mark.genesys_sim(GenesysSimConfig(token_ttl_s=300), seed=5, fake_clock=True),
]
# what the token has left by our clock when the retry goes out: past the platform's end
LEFT_S = 3.0


def _cxone_daemon(sim: CxoneSimulator) -> str:
    # a 120 s token: the 30 s early refresh is its window; retries re-sign only within 1 s of the end
    return (
        cxone_config(sim.urls, 1, poll_timeout=1)
        + "[tokens]\nearlyRefresh = 30.0\nrefreshBeforeRetry = 1.0\n"
    )


def _backoff_to_the_end(
    h: Harness, tokens: TokenCache, clock: FakeClock, *, then: object = None
) -> list[float]:
    """The executor's backoff (only it): the first one takes the clock to LEFT_S before the token's end."""
    waits: list[float] = []

    async def backoff(seconds: float) -> None:
        waits.append(seconds)
        token = tokens.current
        if len(waits) == 1 and token is not None:
            clock.advance(max(token.remaining(clock.monotonic()) - LEFT_S, 0.0))
            if callable(then):
                then()

    h.supervisor.wiring.executor._sleep = backoff
    return waits


async def test_a_cxone_token_the_platform_ends_early_is_replayed_and_the_session_stays(
    cxone_sim: CxoneSimulator, clock: FakeClock, tmp_path: Path
) -> None:
    async with supervised(_cxone_daemon(cxone_sim), tmp_path, clock=clock) as h:
        await h.wait(lambda: len(h.runners) == 1 and h.all_in("active"))
        tokens = h.supervisor.wiring.tokens[Platform.CXONE]
        waits = _backoff_to_the_end(h, tokens, clock)
        cxone_sim.faults.inject(Fault(kind=FaultKind.SERVER_ERROR_BURST, count=1, endpoint=POLL))
        await h.wait(lambda: tokens.refreshes == 1)
        # the next poll, with the fresh token, goes through: the session never left active
        polls = cxone_sim.recorder.request_count("GET", status=304) + cxone_sim.recorder.request_count(
            "GET", status=200
        )
        await h.wait(lambda: cxone_sim.recorder.request_count("GET", status=304) > polls, 15.0)
        assert len(waits) == 1
        # the platform did refuse the token, as expired, while we held it 3 s from its end
        assert cxone_sim.recorder.tokens()["expired"] == 1
        (expired,) = [e for e in h.recorded.named("SDK_ERROR_CLASSIFIED") if e["rawStatus"] == 401]
        assert (expired["code"], expired["rawCode"]) == ("TOKEN_EXPIRED", "invalid_token")
        assert (
            expired["context"]["tokenWithinRefreshWindow"] is True
            and "tokenExpired" not in expired["context"]
        )
        assert expired["circuitNeutral"] is True
        runner = h.runners["cx-0"]
        assert runner.state.value == "active" and h.terminations() == {}
        assert runner.connects == 1  # not even reconnected: the poll was replayed in place
        # the replay is reported as such
        replays = [e for e in h.recorded.named("RETRY_ATTEMPT") if e.get("tokenRefreshed")]
        assert [(r["code"], r["delayS"]) for r in replays] == [("TOKEN_EXPIRED", 0.0)]


async def test_a_cxone_token_revoked_mid_life_ends_the_session_with_oauth_token_invalid(
    cxone_sim: CxoneSimulator, clock: FakeClock, tmp_path: Path
) -> None:
    """The control: the same 401 on a token with more than its window left (here all of it)."""
    async with supervised(_cxone_daemon(cxone_sim), tmp_path, clock=clock) as h:
        await h.wait(lambda: len(h.runners) == 1 and h.all_in("active"))
        tokens = h.supervisor.wiring.tokens[Platform.CXONE]
        token = tokens.current
        assert token is not None and token.remaining(clock.monotonic()) > tokens.refresh_window(token)
        cxone_sim.faults.inject(Fault(kind=FaultKind.TOKEN_REVOKE))
        await h.wait(lambda: h.all_in("terminated"))
        termination = h.runners["cx-0"].termination
        assert termination is not None
        assert (termination.reason.value, termination.trigger, termination.raw_code) == (
            "FAIL_FAST_TRIGGER",
            "OAUTH_TOKEN_INVALID",
            "invalid_token",
        )
        assert tokens.refreshes == 0  # no refresh storm on a revoked token
        assert tokens.current is None  # the shared credential's token is dropped (revokesCredential)


# ---------------------------------------------------------------- a Genesys REST call too


async def test_a_genesys_call_whose_token_the_platform_ends_early_is_replayed(
    genesys_sim: GenesysSimulator, clock: FakeClock, tmp_path: Path
) -> None:
    """Genesys answers 401 bad.credentials; the simulator's TOKEN_EXPIRE fault ends the token
    while we hold it 3 s from its end (within the 100 s window of a 300 s token)."""
    config = genesys_config(genesys_sim.urls, 1, early_refresh=100.0).replace(
        "earlyRefresh = 100.0\n", "earlyRefresh = 100.0\nrefreshBeforeRetry = 1.0\n"
    )
    async with supervised(config, tmp_path, clock=clock) as h:
        await h.wait(lambda: len(h.runners) == 1 and h.all_in("active"))
        transport = h.runners["wm-0"].transport
        assert isinstance(transport, WebMessagingTransport)
        conversation = genesys_sim.conversation_of(transport.guest_token)
        assert conversation is not None
        url = genesys_sim.urls["api"] + f"/api/v2/conversations/{conversation.id}"
        await h.supervisor.request("wm-0", "GET", url)  # signed with the cached token
        tokens = h.supervisor.wiring.tokens[Platform.GENESYS]
        # count=1: the clock stands still, so the fresh token too is "issued when the fault started"
        expire_it = Fault(kind=FaultKind.TOKEN_EXPIRE, count=1)
        waits = _backoff_to_the_end(h, tokens, clock, then=lambda: genesys_sim.faults.inject(expire_it))
        genesys_sim.faults.inject(
            Fault(kind=FaultKind.SERVER_ERROR_BURST, count=1, endpoint="GET /api/v2/conversations/*")
        )
        response = await h.supervisor.request("wm-0", "GET", url)
        assert response.status_code == 200 and len(waits) == 1
        (expired,) = [e for e in h.recorded.named("SDK_ERROR_CLASSIFIED") if e["rawStatus"] == 401]
        assert (expired["code"], expired["rawCode"]) == ("TOKEN_EXPIRED", "bad.credentials")
        assert tokens.refreshes == 1
        assert h.runners["wm-0"].state.value == "active" and h.terminations() == {}
