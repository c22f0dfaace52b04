"""Connection attempts in flight per endpoint (`[admission] connectsInFlight`, docs/runtime.md, "Admission"), end to
end: the Genesys simulator counts the WebSocket upgrades it is answering at once.

Every handshake takes 1 s (a LATENCY fault on the upgrade) and four sessions start at the pacer's
initial 20/s, so without a cap all four are in flight together. Before any handshake has come
back the daemon knows no round trip, and the cap is ``connectsInFlight`` itself
(machines/pacing.py, ``Pacer.in_flight_cap``); once the first answers arrive it may grow to twice
the admitted rate times the shortest handshake (BBR's bound), which lets the last two go.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from supervisor.sim.faults import Fault, FaultKind
from supervisor.sim.genesys import GenesysSimulator
from tests.harness.config import genesys_config
from tests.harness.in_process import supervised

pytestmark = [pytest.mark.integration, pytest.mark.anyio, pytest.mark.genesys_sim(seed=3)]

N = 4


@pytest.mark.parametrize(("cap", "most"), [(2, 2), (N, N)])
async def test_no_more_attempts_are_in_flight_than_the_cap_before_a_round_trip_is_known(
    genesys_sim: GenesysSimulator, tmp_path: Path, cap: int, most: int
) -> None:
    """With ``connectsInFlight = 2`` the platform never answers more than two upgrades at once,
    and every session still comes up; with a cap of four, all four were in flight together (what
    the simulator's count would show were the cap not held)."""
    genesys_sim.faults.inject(Fault(kind=FaultKind.LATENCY, endpoint="WS /*", params={"latency_ms": 1000}))
    config = genesys_config(genesys_sim.urls, N, connects_in_flight=cap)
    async with supervised(config, tmp_path) as h:
        await h.wait(lambda: len(h.runners) == N and h.all_in("active"), limit_s=20)
        assert genesys_sim.recorder.peak_handshakes("webmessaging") == most
        assert genesys_sim.recorder.attempts_total("webmessaging") == {"accepted": N, "refused": 0}
        assert h.terminations() == {}
