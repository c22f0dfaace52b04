"""Sessions survive a platform outage up to the reconnection horizon, and not past it.

The outage is what a client sees when a platform restarts or its edge goes down: every socket
dropped, new handshakes accepted but never answered (they hang until the client's open timeout),
the token endpoint and the REST API answering 503, and the session's token expiring meanwhile.
The daemon runs with a short horizon (the per-test timeout is 60 s); the benchmark
(tests/bench/bench_endurance.py --only outage) runs the full 10 minutes.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from supervisor.sim.faults import Fault, FaultKind
from supervisor.sim.genesys import GenesysSimConfig, GenesysSimulator
from tests.harness.config import genesys_config
from tests.harness.in_process import Harness, supervised

TOKEN_TTL_S = 12

pytestmark = [
    pytest.mark.integration,
    pytest.mark.anyio,
    pytest.mark.genesys_sim(GenesysSimConfig(token_ttl_s=TOKEN_TTL_S), seed=5),
]


def outage(sim: GenesysSimulator, connections: int) -> list[str]:
    """Take the platform down; returns the fault ids to clear when it comes back."""
    faults = [
        # every open socket drops (the client sees 1006) ...
        Fault(kind=FaultKind.DROP, count=connections),
        # ... and new handshakes are accepted but never answered (only handshakes: a black hole
        # over REST too would hold the channel create past its token's expiry, and the channel
        # the platform then creates is removed with that token before the socket reaches it)
        Fault(kind=FaultKind.BLACKHOLE, endpoint="WS /*"),
        # the token endpoint and the REST API are down
        Fault(kind=FaultKind.SERVER_ERROR_BURST, params={"status": 503}),
    ]
    return [sim.faults.inject(f).id or "" for f in faults]


def live_sessions(h: Harness) -> int:
    return sum(1 for r in h.runners.values() if r.state.value == "active")


async def test_an_outage_longer_than_the_old_budgets_ends_no_session(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    """Sockets dropped, handshakes hanging, token endpoint down, the token expiring: all come back."""
    config = genesys_config(genesys_sim.urls, 3, notifications=2, horizon=40.0, open_timeout=1.0)
    async with supervised(config, tmp_path) as h:
        await h.wait(lambda: live_sessions(h) == 5)
        issued_before = genesys_sim.recorder.tokens().get("issued", 0) + genesys_sim.recorder.tokens().get(
            "refreshed", 0
        )
        ids = outage(genesys_sim, connections=5)
        await h.wait(lambda: live_sessions(h) == 0)
        # longer than the seed's network budget (3 retries, ~8 s with these delays) and than the
        # token's lifetime: every session outlives its class budget and its token expires meanwhile
        await anyio.sleep(TOKEN_TTL_S + 2.0)  # the outage's duration (the scenario), not a timer wait
        assert h.terminations() == {}
        reconnects = [e for e in h.recorded.named("RETRY_ATTEMPT") if e["kind"] == "reconnect"]
        assert max(e["attempt"] for e in reconnects) > 3  # past the network policy's 3 retries
        assert h.recorded.named("CIRCUIT_BREAKER_OPEN")  # the circuit paused them meanwhile
        for fid in ids:
            genesys_sim.faults.clear(fid)
        await h.wait(lambda: live_sessions(h) == 5, limit_s=30.0)
        assert h.terminations() == {}
        tokens = genesys_sim.recorder.tokens()
        # the expired token was fetched again once when the endpoint returned, for every session
        assert tokens.get("issued", 0) + tokens.get("refreshed", 0) - issued_before == 1


async def test_past_the_horizon_sessions_end_retry_exhausted_with_give_up_horizon(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    config = genesys_config(genesys_sim.urls, 3, notifications=1, horizon=6.0, open_timeout=1.0)
    async with supervised(config, tmp_path) as h:
        await h.wait(lambda: live_sessions(h) == 4)
        outage(genesys_sim, connections=4)
        await h.wait(lambda: len(h.terminations()) == 4, limit_s=40.0)
        reasons = {t.reason.value for t in h.terminations().values()}
        assert reasons == {"RETRY_EXHAUSTED"}
        exhausted = h.recorded.named("RETRY_EXHAUSTED")
        assert {e["sessionId"] for e in exhausted} == {"wm-0", "wm-1", "wm-2", "nt-0"}
        assert {e["giveUp"] for e in exhausted} == {"HORIZON"}
        assert {e["kind"] for e in exhausted} == {"reconnect"}
