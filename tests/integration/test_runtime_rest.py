"""REST calls made for supervised sessions, end to end against the Genesys simulator (docs/runtime.md).

Token rotation (seed edge case 3), fail-fast triggers on operations (QUEUE_FULL, 409 on
message creation, a revoked token), and what the simulator recorded.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from supervisor.clock import FakeClock
from supervisor.errors import OperationError, SessionError
from supervisor.sim.faults import Fault, FaultKind
from supervisor.sim.genesys import GenesysSimConfig, GenesysSimulator
from supervisor.transports.webmessaging import WebMessagingTransport
from supervisor.vocabulary import Platform
from tests.harness.clocks import advancing
from tests.harness.config import genesys_config
from tests.harness.in_process import Harness, supervised

pytestmark = [
    pytest.mark.integration,
    pytest.mark.anyio,
    pytest.mark.genesys_sim(GenesysSimConfig(token_ttl_s=300), seed=5, fake_clock=True),
]


async def active_session(h: Harness, sim: GenesysSimulator) -> str:
    """The conversation of the active guest session wm-0, as the agent side knows it: a guest
    cannot learn it (docs/taxonomy.md, "What the daemon can and cannot verify"), so the test asks the simulator, as an agent desktop would ask
    Genesys."""
    await h.wait(lambda: len(h.runners) == 1 and h.all_in("active"))
    transport = h.runners["wm-0"].transport
    assert isinstance(transport, WebMessagingTransport)
    conv = sim.conversation_of(transport.guest_token)
    assert conv is not None
    return conv.id


def api(sim: GenesysSimulator, path: str) -> str:
    return sim.urls["api"] + path


async def test_token_expiring_before_a_retry_is_refreshed_and_the_retry_carries_it(
    genesys_sim: GenesysSimulator, clock: FakeClock, tmp_path: Path
) -> None:
    """Seed edge case 3: before a retry, a token expiring within 60 s is refreshed; the clone is re-signed."""
    waits: list[float] = []

    async def backoff(seconds: float) -> None:
        # the backoff of the failed attempt takes us to 40 s before the token's end
        waits.append(seconds)
        clock.advance(260.0)

    async with supervised(genesys_config(genesys_sim.urls, 1), tmp_path, clock=clock) as h:
        cid = await active_session(h, genesys_sim)
        h.supervisor.wiring.executor._sleep = (
            backoff  # the retry executor's backoff only; the sessions keep real time
        )
        genesys_sim.faults.inject(
            Fault(kind=FaultKind.SERVER_ERROR_BURST, count=1, endpoint="GET /api/v2/conversations/*")
        )
        response = await h.supervisor.request("wm-0", "GET", api(genesys_sim, f"/api/v2/conversations/{cid}"))
        assert response.status_code == 200
        assert len(waits) == 1
        tokens = list(genesys_sim.state.tokens.values())
        # two tokens, each used by exactly one attempt: the retry went out with the new one
        assert sorted(t.window_count for t in tokens) == [1, 1]
        assert (
            genesys_sim.recorder.tokens().get("issued", 0) + genesys_sim.recorder.tokens().get("refreshed", 0)
            == 2
        )
        assert h.supervisor.wiring.tokens[Platform.GENESYS].refreshes == 1
        assert h.runners["wm-0"].state.value == "active"
        assert h.terminations() == {}
        names = [n for _, n, _ in h.recorded.events]
        assert "RETRY_ATTEMPT" in names and "RETRY_SUCCESS" in names


async def test_revoked_token_terminates_with_oauth_token_invalid_and_calls_stop(
    genesys_sim: GenesysSimulator, clock: FakeClock, tmp_path: Path
) -> None:
    async with supervised(genesys_config(genesys_sim.urls, 1), tmp_path, clock=clock) as h:
        cid = await active_session(h, genesys_sim)
        await h.supervisor.request("wm-0", "GET", api(genesys_sim, f"/api/v2/conversations/{cid}"))
        genesys_sim.faults.inject(Fault(kind=FaultKind.TOKEN_REVOKE))
        with pytest.raises(OperationError) as info:
            await h.supervisor.request("wm-0", "GET", api(genesys_sim, f"/api/v2/conversations/{cid}"))
        assert info.value.event.code == "OAUTH_TOKEN_INVALID"  # type: ignore[attr-defined]
        await h.wait(lambda: h.all_in("terminated"))
        termination = h.runners["wm-0"].termination
        assert termination is not None
        assert termination.as_json() | {"timestamp": "t"} == {
            "event": "SESSION_TERMINATED",
            "reason": "FAIL_FAST_TRIGGER",
            "trigger": "OAUTH_TOKEN_INVALID",
            "rawStatus": 401,
            "rawCode": "invalid_token",
            "timestamp": "t",
            "action": "REVOKE_LOCAL_STORAGE_AND_REAUTHENTICATE",
        }
        # local storage revoked: no cached token (the durable store's side: tests/integration/test_store_crash.py)
        assert h.supervisor.wiring.tokens[Platform.GENESYS].current is None
        requests = genesys_sim.recorder.request_count()
        with pytest.raises(SessionError, match="terminated"):
            await h.supervisor.request("wm-0", "GET", api(genesys_sim, f"/api/v2/conversations/{cid}"))
        assert genesys_sim.recorder.request_count() == requests  # no further call reached the platform
        assert not [e for e in h.recorded.named("RETRY_ATTEMPT") if e.get("kind") == "reconnect"]


async def test_queue_full_terminates_with_its_trigger(
    genesys_sim: GenesysSimulator, clock: FakeClock, tmp_path: Path
) -> None:
    async with supervised(genesys_config(genesys_sim.urls, 1), tmp_path, clock=clock) as h:
        cid = await active_session(h, genesys_sim)
        genesys_sim.faults.inject(Fault(kind=FaultKind.QUEUE_FULL, endpoint="PATCH */attributes"))
        with pytest.raises(OperationError) as info:
            await h.supervisor.request(
                "wm-0",
                "PATCH",
                api(genesys_sim, f"/api/v2/conversations/{cid}/participants/p-1/attributes"),
                json={"attributes": {"survey": "yes"}},
            )
        assert info.value.event.code == "QUEUE_FULL", info.value.event  # type: ignore[attr-defined]
        await h.wait(lambda: h.all_in("terminated"))
        termination = h.runners["wm-0"].termination
        assert termination is not None
        assert (termination.reason.value, termination.trigger) == ("FAIL_FAST_TRIGGER", "QUEUE_FULL")
        # the seed's trap: QUEUE_FULL is not retried like a rate limit
        assert genesys_sim.recorder.request_count(method="PATCH") == 1


async def test_duplicate_message_id_terminates_with_its_trigger(
    genesys_sim: GenesysSimulator, clock: FakeClock, tmp_path: Path
) -> None:
    async with supervised(genesys_config(genesys_sim.urls, 1), tmp_path, clock=clock) as h:
        cid = await active_session(h, genesys_sim)
        conv = genesys_sim.state.conversations.get(cid)
        assert conv is not None
        comm = conv.agent().communication.id  # the agent's communication sends (GMT UI helper)
        url = api(genesys_sim, f"/api/v2/conversations/messages/{cid}/communications/{comm}/messages")
        sent = await h.supervisor.request("wm-0", "POST", url, json={"textBody": "hello"})
        assert sent.status_code == 200
        genesys_sim.faults.inject(Fault(kind=FaultKind.DUPLICATE_MESSAGE, endpoint="POST */messages"))
        with pytest.raises(OperationError) as info:
            await h.supervisor.request("wm-0", "POST", url, json={"textBody": "hello"})
        assert info.value.event.code == "DUPLICATE_MESSAGE_ID"  # type: ignore[attr-defined]
        await h.wait(lambda: h.all_in("terminated"))
        termination = h.runners["wm-0"].termination
        assert termination is not None
        assert (termination.reason.value, termination.trigger, termination.raw_status) == (
            "FAIL_FAST_TRIGGER",
            "DUPLICATE_MESSAGE_ID",
            409,
        )


async def test_rate_limited_call_waits_at_least_retry_after(
    genesys_sim: GenesysSimulator, clock: FakeClock, tmp_path: Path
) -> None:
    """A 429 with Retry-After is never retried earlier than it says (seed edge case 2)."""
    waits: list[float] = []
    backoff = advancing(clock, waits)

    async with supervised(genesys_config(genesys_sim.urls, 1), tmp_path, clock=clock) as h:
        cid = await active_session(h, genesys_sim)
        h.supervisor.wiring.executor._sleep = backoff
        genesys_sim.faults.inject(
            Fault(kind=FaultKind.RATE_LIMIT_STORM, count=2, params={"retry_after": "7"}, endpoint="GET *")
        )
        response = await h.supervisor.request("wm-0", "GET", api(genesys_sim, f"/api/v2/conversations/{cid}"))
        assert response.status_code == 200
        assert len(waits) == 2 and all(w >= 7.0 for w in waits)
        assert genesys_sim.recorder.request_count(method="GET", status=429) == 2


async def test_an_operation_that_spends_its_retries_leaves_the_session_alone(
    genesys_sim: GenesysSimulator, clock: FakeClock, tmp_path: Path
) -> None:
    """Only a fail-fast reaches the session: a REST call out of retries fails that call, nothing else."""
    backoff = advancing(clock)

    async with supervised(genesys_config(genesys_sim.urls, 1), tmp_path, clock=clock) as h:
        cid = await active_session(h, genesys_sim)
        h.supervisor.wiring.executor._sleep = backoff
        genesys_sim.faults.inject(
            Fault(kind=FaultKind.SERVER_ERROR_BURST, endpoint="GET /api/v2/conversations/*")
        )
        with pytest.raises(OperationError) as info:
            await h.supervisor.request("wm-0", "GET", api(genesys_sim, f"/api/v2/conversations/{cid}"))
        assert info.value.exhausted
        assert h.runners["wm-0"].state.value == "active"
        assert not [e for e in h.recorded.named("RETRY_ATTEMPT") if e.get("kind") == "reconnect"]
