"""The library's transport against the Genesys simulator over loopback: the sync shell from a worker thread and
the async shell, on the simulator's fake clock (the library's sleeps move it: nothing is slept)."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import anyio.to_thread
import httpx
import pytest

from supervisor.clock import FakeClock
from supervisor.errors import SdkError
from supervisor.http import EVENT_EXTENSION, ResilientTransport
from supervisor.sim.faults import Fault, FaultKind
from supervisor.taxonomy import Trigger
from tests.harness.simulators import Genesys

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

ATTRS = "/api/v2/conversations/{conversationId}/participants/{participantId}/attributes"


def library(genesys: Genesys, slept: list[float], **kwargs: object) -> ResilientTransport:
    clock: FakeClock = genesys.clock

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock.advance(seconds)

    async def async_sleep(seconds: float) -> None:
        sleep(seconds)
        await anyio.lowlevel.checkpoint()

    async def fetch() -> tuple[str, float]:
        body = await genesys.login()
        return body["access_token"], clock.time() + body["expires_in"]

    def fetch_sync() -> tuple[str, float]:
        answer = httpx.post(
            genesys.sim.urls["login"] + "/oauth/token",
            data={"grant_type": "client_credentials"},
            auth=("client", "secret"),
        )
        body = answer.json()
        return body["access_token"], clock.time() + body["expires_in"]

    token = fetch_sync if kwargs.pop("sync", False) else fetch
    return ResilientTransport(
        "genesys",
        clock=clock,
        sleep=sleep,
        async_sleep=async_sleep,
        token=token,
        **kwargs,  # type: ignore[arg-type]
    )


async def test_a_sync_client_patches_attributes_through_a_429_storm(genesys: Genesys) -> None:
    conversation = genesys.sim.create_conversation(agent_user_id="agent-1")
    path = f"/api/v2/conversations/{conversation.id}/participants/{conversation.customer().id}/attributes"
    fault = genesys.sim.faults.inject(
        Fault(kind=FaultKind.RATE_LIMIT_STORM, endpoint="*/attributes", count=2, params={"retry_after": "1"})
    )
    slept: list[float] = []
    transport = library(genesys, slept, sync=True)

    def patch() -> httpx.Response:
        with httpx.Client(transport=transport, base_url=genesys.sim.urls["api"]) as client:
            return client.patch(path, json={"attributes": {"crmCaseId": "42"}})

    response = await anyio.to_thread.run_sync(patch)
    assert response.is_success, response.text
    assert genesys.sim.recorder.attributes(conversation.id)["crmCaseId"] == "42"
    assert genesys.sim.recorder.fault_hits(fault.id) == 2
    assert genesys.sim.recorder.request_count("PATCH", ATTRS) == 3
    assert len(slept) >= 2 and all(s >= 1.0 for s in slept)  # never before the Retry-After


async def test_an_async_client_gets_a_revoked_token_raised_as_its_fail_fast_trigger(genesys: Genesys) -> None:
    conversation = genesys.sim.create_conversation(agent_user_id="agent-1")
    slept: list[float] = []
    async with httpx.AsyncClient(
        transport=library(genesys, slept), base_url=genesys.sim.urls["api"]
    ) as client:
        ok = await client.get(f"/api/v2/conversations/{conversation.id}")
        assert ok.status_code == 200 and EVENT_EXTENSION not in ok.extensions
        genesys.sim.faults.inject(Fault(kind=FaultKind.TOKEN_REVOKE))
        with pytest.raises(SdkError) as raised:
            await client.get(f"/api/v2/conversations/{conversation.id}")
    assert raised.value.event.trigger is Trigger.OAUTH_TOKEN_INVALID
    assert slept == []  # fail-fast: no retry
