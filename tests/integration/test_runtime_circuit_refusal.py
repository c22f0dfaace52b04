"""No SDK_ERROR_CLASSIFIED for a failure that did not happen, against the CXone simulator.

When the ``cxone:api`` circuit opens, the other sessions' next polls are refused by it before
anything is sent. Those sessions did not fail: the runner used to publish a made-up
CONNECTION_FAILED with ``rawCode: "OSError"`` and no endpoint for each of them (28-45 per
``demo --scenario mixed --fast`` run, 11-15 in ours). Now they wait for the circuit, as a
refused reconnection does: RECONNECTION_THROTTLED, and nothing classified.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

from supervisor.sim.cxone import CxoneSimulator
from supervisor.sim.faults import Fault, FaultKind
from tests.harness.config import cxone_config
from tests.harness.in_process import supervised

pytestmark = [pytest.mark.integration, pytest.mark.anyio, pytest.mark.cxone_sim(seed=4)]


async def test_polls_refused_by_the_open_circuit_publish_no_failure(
    cxone_sim: CxoneSimulator, tmp_path: Path
) -> None:
    # two 503s in a row open cxone:api (so the sessions' own polls trip it whatever their order);
    # a session whose poll spent its retries waits 20 s or more before reconnecting (off stage)
    config = (
        cxone_config(cxone_sim.urls, 3, poll_timeout=1, open_for=30.0)
        .replace("openFor = 30.0\n", "openFor = 30.0\nfailureThreshold = 2\n")
        .replace("firstDelayMin = 0.2\nfirstDelayMax = 0.8\n", "firstDelayMin = 20.0\nfirstDelayMax = 30.0\n")
    )
    assert "failureThreshold = 2" in config and "firstDelayMin = 20.0" in config
    async with supervised(config, tmp_path) as h:
        await h.wait(lambda: len(h.runners) == 3 and h.all_in("active"))

        async def at_once(seconds: float) -> None:
            await anyio.lowlevel.checkpoint()  # the executor's backoff only: retries go out at once

        h.supervisor.wiring.executor._sleep = at_once
        cxone_sim.faults.inject(Fault(kind=FaultKind.SERVER_ERROR_BURST, endpoint="GET *get-next-event"))

        def refused_while_serving() -> list[str]:
            return [
                e["machineId"]
                for e in h.recorded.named("SESSION_TRANSITION")
                if (e["from"], e["to"], e["reason"]) == ("active", "reconnecting", "CIRCUIT_OPEN")
            ]

        # every session leaves active: its poll spent its retries, or met the open circuit
        await h.wait(
            lambda: bool(h.recorded.named("CIRCUIT_BREAKER_OPEN")) and h.all_in("reconnecting"), 20.0
        )
        # once the circuit is open, the sessions still polling meet it: at least one did, and
        # none of them published a failure for it
        assert refused_while_serving()
        classified = h.recorded.named("SDK_ERROR_CLASSIFIED")
        assert classified and {e["code"] for e in classified} == {"SERVER_ERROR"}
        assert [e for e in classified if e["rawCode"] == "OSError" or e["context"]["endpoint"] is None] == []
        # they wait for the circuit instead, not counted as an attempt
        throttled = {e["sessionId"]: e for e in h.recorded.named("RECONNECTION_THROTTLED")}
        for session in refused_while_serving():
            assert throttled[session]["attempt"] == 0 and throttled[session]["retryInS"] > 20.0
        assert h.terminations() == {}
