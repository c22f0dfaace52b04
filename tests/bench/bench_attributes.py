"""Slowing down before the 429 (docs/runtime.md, "Admission"): attribute updates against the simulator's own limit.

200 attribute updates over 20 conversations (10 each, every key its own), submitted at a steady
pace through the attribute service of a daemon in this process (its durable store in a temporary
directory, its sender running as in ``run``), against the Genesys simulator in its own process. The
simulator counts every REST call in its per-token fixed window (``rate_limit`` calls per
``rate_window_s``; no fault is injected) and answers past it with 429 and Retry-After; every answer
carries ``inin-ratelimit-allowed``, ``-count`` and ``-reset``. Two runs side by side: the daemon
reading those headers (``[admission] rateLimitHeaders = true``, the default: once half the window is
spent, what is left of it is spread over the time left) and ignoring them (only a 429 slows it).

Reported: the 429s the simulator answered, the time from the first submission until every update
is verified (the drain), and REST requests per update. Targets: at least 80 % fewer 429s with the
headers, and a drain within 10 % of the run without them.

    .venv/bin/python tests/bench/bench_attributes.py [--updates 200] [--conversations 20]
        [--limit 40] [--window 5] [--pace 20]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from supervisor.attributes import Backpressured
from supervisor.store import UpdateOutcome
from tests.bench.runtime_harness import SimProcess, table
from tests.harness.config import attributes_config
from tests.harness.in_process import supervised


def _config(urls: dict[str, str], conversations: list[str], store: Path, headers: bool) -> str:
    text = attributes_config(urls, conversations, store=store, queue_depth=200)
    return text.replace(
        "[admission]\n", f"[admission]\nrateLimitHeaders = {'true' if headers else 'false'}\n", 1
    )


def _conversation_requests(stats: dict[str, Any]) -> tuple[int, int]:
    """(REST requests on conversations, 429 answers) the simulator recorded."""
    rows = [r for r in stats["requests"] if "/conversations" in r["endpoint"]]
    return sum(r["count"] for r in rows), sum(r["count"] for r in stats["requests"] if r["status"] == 429)


async def run_once(
    label: str, headers: bool, updates: int, conversations: int, limit: int, window_s: float, pace: float
) -> dict[str, Any]:
    sim_config = {"rate_limit": limit, "rate_window_s": window_s}
    with (
        SimProcess(seed=3, config=sim_config) as sim,
        tempfile.TemporaryDirectory(prefix="bench-attr-") as tmp,
    ):
        directory = Path(tmp)
        async with httpx.AsyncClient(timeout=30.0) as admin:
            ids = []
            for _ in range(conversations):
                r = await admin.post(sim.admin + "/conversations", json={})
                r.raise_for_status()
                ids.append(r.json()["id"])
            text = _config(sim.urls, ids, directory / "store.sqlite3", headers)
            async with supervised(text, directory, durable=True, record=False) as h:
                await h.wait_active(conversations, limit_s=60.0)
                await sim.reset(admin)  # the count starts with the first update
                service = h.service
                h.tg.start_soon(service.serve)
                started = time.monotonic()
                for k in range(updates):
                    session = f"wm-{k % conversations}"
                    while True:
                        try:
                            await service.submit(session, {f"k{k}": f"v{k}"})
                            break
                        except Backpressured as full:
                            await anyio.sleep(full.retry_after_s)
                    await anyio.sleep(1.0 / pace)  # a steady stream, as agents' wrap-ups arrive

                async def verified() -> bool:
                    outcomes = await service.outcomes()
                    return len(outcomes) == updates and all(
                        o is UpdateOutcome.VERIFIED for o in outcomes.values()
                    )

                done = False
                deadline = time.monotonic() + 600.0
                while not done and time.monotonic() < deadline:
                    done = await verified()
                    if not done:
                        await anyio.sleep(0.1)
                drained = time.monotonic() - started
                outcomes = await service.outcomes()
                stats = await sim.stats(admin)
    requests, refused = _conversation_requests(stats)
    return {
        "run": label,
        "429s": refused,
        "drain_s": round(drained, 2),
        "requests_per_update": round(requests / updates, 3),
        "verified": sum(1 for o in outcomes.values() if o is UpdateOutcome.VERIFIED),
    }


def report(rows: list[dict[str, Any]]) -> str:
    head = ["run", "429s", "drain_s", "requests_per_update", "verified"]
    return table(head, [[str(r[h]) for h in head] for r in rows])


def measure(
    updates: int, conversations: int, limit: int, window_s: float, pace: float
) -> list[dict[str, Any]]:
    args = (updates, conversations, limit, window_s, pace)
    return [
        anyio.run(run_once, "with the ratelimit headers", True, *args, backend="asyncio"),
        anyio.run(run_once, "without (429s only)", False, *args, backend="asyncio"),
    ]


def problems(rows: list[dict[str, Any]]) -> list[str]:
    read, blind = rows
    out = []
    if read["verified"] != blind["verified"] or read["verified"] == 0:
        out.append(f"verified {read['verified']} and {blind['verified']}: not every update went through")
    if blind["429s"] == 0:
        out.append("no 429 without the headers: the limit does not bind, nothing is measured")
    elif read["429s"] > 0.2 * blind["429s"]:
        out.append(f"429s {read['429s']} against {blind['429s']}: less than 80 % fewer")
    if read["drain_s"] > 1.1 * blind["drain_s"]:
        out.append(f"drain {read['drain_s']} s against {blind['drain_s']} s: more than 10 % longer")
    return out


@pytest.mark.bench
def test_attributes() -> None:
    rows = measure(200, 20, 40, 5.0, 20.0)
    print(report(rows))
    assert problems(rows) == []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--updates", type=int, default=200)
    parser.add_argument("--conversations", type=int, default=20)
    parser.add_argument("--limit", type=int, default=40, help="the simulator's calls per window and token")
    parser.add_argument("--window", type=float, default=5.0, help="the simulator's window, in seconds")
    parser.add_argument("--pace", type=float, default=20.0, help="updates submitted per second")
    args = parser.parse_args(argv)
    rows = measure(args.updates, args.conversations, args.limit, args.window, args.pace)
    print(report(rows))
    missed = problems(rows)
    for problem in missed:
        print("MISSED:", problem)
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
