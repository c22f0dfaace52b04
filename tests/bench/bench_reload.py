"""A reload that restarts many sessions: concurrently (the default) against one after the other.

Every session's settings change (a CXone session's station, a Web Messaging guest's agent), so the
reload stops each (a CXone DELETE, a WebSocket close 1000) and starts it again. Each CXone DELETE is
answered 100 ms late (a platform's round trip; loopback has none), the guests' closes as loopback
answers them. Per kind and mode: the reload's own time (until ``ctl reload`` would answer) and the
time until every session is active again (the new connection attempts paced by admission, from
``admission.initialRate``). "serial" is the same reload with one stop at a time
(``Reloader(restarts_in_flight=1)``), which is what every reload did before.

    ./dev bench -k reload                           # asserts concurrent < serial / 5 for CXone
    .venv/bin/python tests/bench/bench_reload.py    # the table alone (--sessions N, default 50)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import anyio
import pytest

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from supervisor.config import load_config
from supervisor.runtime.reload import Reloader
from supervisor.sim.cxone import CxoneSimulator
from supervisor.sim.faults import Fault, FaultKind
from supervisor.sim.genesys import GenesysSimulator
from tests.harness.config import cxone_config, genesys_config
from tests.harness.in_process import supervised

DELETE_LATENCY_MS = 100


async def measure(kind: str, sessions: int, serial: bool) -> tuple[float, float]:
    """(seconds the reload took, seconds until every session was active again)."""
    with tempfile.TemporaryDirectory(prefix="ss-bench-reload-") as d:
        directory = Path(d)
        if kind == "cxone":
            async with CxoneSimulator(seed=5) as sim:
                sim.faults.inject(
                    Fault(
                        kind=FaultKind.LATENCY, endpoint="DELETE *", params={"latency_ms": DELETE_LATENCY_MS}
                    )
                )
                text = cxone_config(sim.urls, sessions)
                changed = text.replace('stationId = "station-', 'stationId = "moved-')
                return await _run(text, changed, directory, serial)
        async with GenesysSimulator(seed=5) as gen:
            text = genesys_config(gen.urls, sessions)
            changed = text.replace('agentId = "a-', 'agentId = "b-')
            return await _run(text, changed, directory, serial)


async def _run(text: str, changed: str, directory: Path, serial: bool) -> tuple[float, float]:
    path = directory / "supervisor.toml"
    path.write_text(text)
    async with supervised(text, directory, record=False) as h:
        await h.wait(lambda: h.all_in("active"), 60)
        path.write_text(changed)
        reloader = Reloader(h.supervisor, lambda: load_config(path), restarts_in_flight=1 if serial else None)
        started = time.perf_counter()
        result = await reloader.reload()
        reloaded = time.perf_counter() - started
        assert result.error is None and len(result.restarted) == len(h.runners)
        await h.wait(lambda: h.all_in("active"), 120)
        return reloaded, time.perf_counter() - started


async def table(sessions: int) -> dict[tuple[str, str], tuple[float, float]]:
    out = {}
    for kind in ("cxone", "webmessaging"):
        for mode in ("concurrent", "serial"):
            out[kind, mode] = await measure(kind, sessions, mode == "serial")
    return out


def render(sessions: int, figures: dict[tuple[str, str], tuple[float, float]]) -> str:
    lines = [
        f"{sessions} sessions restarted by one reload",
        "kind          mode        reload s  all active s",
    ]
    for (kind, mode), (reloaded, active) in figures.items():
        lines.append(f"{kind:<13} {mode:<11} {reloaded:>8.2f}  {active:>12.2f}")
    return "\n".join(lines)


@pytest.mark.bench
@pytest.mark.anyio
async def test_a_reload_restarts_sessions_concurrently() -> None:
    figures = await table(50)
    print("\n" + render(50, figures))
    concurrent, serial = figures["cxone", "concurrent"][0], figures["cxone", "serial"][0]
    # 50 DELETEs of 100 ms each one after the other take 5 s at least; at once, a few tenths
    assert serial >= 50 * DELETE_LATENCY_MS / 1000 and concurrent < serial / 5


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=50)
    args = parser.parse_args()
    print(render(args.sessions, anyio.run(table, args.sessions)))


if __name__ == "__main__":
    main()
