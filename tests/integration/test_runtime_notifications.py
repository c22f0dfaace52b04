"""A Genesys notifications channel supervised end to end (issue 5): proactive rollover on socket_closing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from supervisor.sim.faults import Fault, FaultKind
from supervisor.sim.genesys import GenesysSimConfig, GenesysSimulator
from tests.integration.runtime_harness import genesys_config, supervised

pytestmark = [pytest.mark.integration, pytest.mark.anyio]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def sim() -> AsyncIterator[GenesysSimulator]:
    async with GenesysSimulator(GenesysSimConfig(socket_closing_lead_s=5.0), seed=9) as simulator:
        yield simulator


def notifications_config(urls: dict[str, str]) -> str:
    base = genesys_config(urls, 0)
    return (
        base + '[[sessions]]\nid = "n-1"\nplatform = "genesys"\nkind = "notifications"\nagentId = "agent-1"\n'
    )


async def test_socket_closing_rolls_over_to_a_new_channel(sim: GenesysSimulator, tmp_path: Path) -> None:
    """platforms.md section 2: on v2.system.socket_closing, reconnect before the server closes."""
    async with supervised(notifications_config(sim.urls), tmp_path, genesys=sim) as h:
        await h.wait(lambda: len(h.runners) == 1 and h.all_in("active"))
        runner = h.runners["n-1"]
        first_channel = runner.context.platform_session_id
        assert first_channel
        sim.faults.inject(Fault(kind=FaultKind.SOCKET_CLOSING))
        await h.wait(lambda: runner.connects >= 2 and h.all_in("active"))
        assert runner.context.platform_session_id != first_channel
        codes = [e["code"] for e in h.recorded.named("SDK_ERROR_CLASSIFIED")]
        assert codes == ["SOCKET_CLOSING"]  # the server's own close never had to happen
        assert h.terminations() == {}


async def test_channel_evicted_is_state_corrupting(tmp_path: Path) -> None:
    """A `result: 404` on the socket means the subscriptions are gone: the session ends (no blind resume)."""
    async with (
        GenesysSimulator(GenesysSimConfig(max_channels=1), seed=9) as sim,
        supervised(notifications_config(sim.urls), tmp_path, genesys=sim) as h,
        httpx.AsyncClient() as http,
    ):
        await h.wait(lambda: len(h.runners) == 1 and h.all_in("active"))
        # the same OAuth client opens a second channel: over the limit, ours is evicted (platforms.md 2)
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
