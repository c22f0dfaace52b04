"""CXone agent sessions through the runtime, against the CXone simulator (docs/runtime.md)."""

from __future__ import annotations

import contextlib
import json
import signal
import sqlite3
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import Process
from anyio.streams.text import TextReceiveStream

from supervisor.sim.cxone import CxoneSimulator
from supervisor.sim.faults import Fault, FaultKind
from tests.harness.config import cxone_config
from tests.harness.in_process import supervised
from tests.harness.waits import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.anyio, pytest.mark.cxone_sim(seed=4)]


async def test_rolling_session_id_is_followed_across_polls(cxone_sim: CxoneSimulator, tmp_path: Path) -> None:
    """docs/platforms.md, "NICE CXone": every get-next-event answer carries the id the next poll must use."""
    async with supervised(cxone_config(cxone_sim.urls, 1, poll_timeout=0), tmp_path) as h:
        await h.wait(lambda: len(h.runners) == 1 and h.all_in("active"))
        runner = h.runners["cx-0"]
        seen = [runner.context.platform_session_id]
        for _ in range(3):
            # an event makes the next poll a 200, which carries the next sessionId
            cxone_sim.push_event(
                {"Type": "AgentState", "CurrentState": "Available"}, agent_id=runner.context.agent_id
            )
            await h.wait(lambda: runner.context.platform_session_id != seen[-1])
            seen.append(runner.context.platform_session_id)
        assert len(set(seen)) == len(seen)  # a new id every time
        # the simulator never replayed AgentSessionStart for a stale id, and nothing failed
        assert not [e for e in h.recorded.named("SDK_ERROR_CLASSIFIED") if e["code"] == "SESSION_ID_MISMATCH"]
        assert runner.state.value == "active"
        assert h.terminations() == {}


async def test_session_ended_by_the_platform_terminates(cxone_sim: CxoneSimulator, tmp_path: Path) -> None:
    """A 409 on get-next-event means the platform ended the session: no reconnection."""
    async with supervised(cxone_config(cxone_sim.urls, 1, poll_timeout=0), tmp_path) as h:
        await h.wait(lambda: len(h.runners) == 1 and h.all_in("active"))
        cxone_sim.faults.inject(Fault(kind=FaultKind.SESSION_ENDED))
        await h.wait(lambda: h.all_in("terminated"))
        termination = h.runners["cx-0"].termination
        assert termination is not None
        assert (termination.reason.value, termination.code, termination.raw_status) == (
            "PERMANENT_SESSION_ERROR",
            "AGENT_SESSION_ENDED",
            409,
        )
        assert not [e for e in h.recorded.named("RETRY_ATTEMPT") if e.get("kind") == "reconnect"]


async def test_queue_full_on_a_poll_terminates_with_its_trigger(
    cxone_sim: CxoneSimulator, tmp_path: Path
) -> None:
    async with supervised(cxone_config(cxone_sim.urls, 2, poll_timeout=0), tmp_path) as h:
        await h.wait(lambda: len(h.runners) == 2 and h.all_in("active"))
        cxone_sim.faults.inject(Fault(kind=FaultKind.QUEUE_FULL, endpoint="GET *get-next-event"))
        await h.wait(lambda: h.all_in("terminated"))
        for termination in h.terminations().values():
            assert (termination.reason.value, termination.trigger) == ("FAIL_FAST_TRIGGER", "QUEUE_FULL")


JOIN = "/inContactAPI/services/v{N}.0/agent-sessions/join"
START = "/inContactAPI/services/v{N}.0/agent-sessions"


async def test_an_outage_ends_no_cxone_session_and_all_come_back(
    cxone_sim: CxoneSimulator, tmp_path: Path
) -> None:
    """Polls and starts black-holed past the network budget: nobody terminates."""
    config = cxone_config(cxone_sim.urls, 2, poll_timeout=1, watchdog=3.0, horizon=45.0, open_for=1.0)
    async with supervised(config, tmp_path) as h:
        await h.wait(lambda: h.all_in("active"))
        hole = cxone_sim.faults.inject(Fault(kind=FaultKind.BLACKHOLE)).id or ""
        await h.wait(lambda: not any(r.state.value == "active" for r in h.runners.values()), 15.0)
        await anyio.sleep(8.0)  # the outage lasts (the scenario), longer than the network budget
        assert h.terminations() == {}
        cxone_sim.faults.clear(hole)
        await h.wait(lambda: h.all_in("active"), 30.0)
        assert h.terminations() == {}


def open_rows(path: Path) -> int:
    """The agent sessions the store holds open, read as another process would (read-only)."""
    query = "SELECT count(*) FROM server_sessions WHERE state = 'open' AND kind = 'agent-session'"
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
            return int(conn.execute(query).fetchone()[0])
    except sqlite3.OperationalError:  # the file or its tables not created yet, or a write under way
        return 0


@pytest.mark.parametrize("store", [False, True], ids=["no-store", "store"])
async def test_a_daemon_restarted_after_kill_9_takes_over_its_cxone_sessions(
    cxone_sim: CxoneSimulator, tmp_path: Path, store: bool
) -> None:
    """The first daemon dies without a DELETE; the second joins the agents' live sessions: without a
    store it learns of them from the start's 409, with one from its rows (open, not handed over), and
    joins at once: one request per session, no start."""
    config = tmp_path / "supervisor.toml"
    text = cxone_config(cxone_sim.urls, 2, poll_timeout=1)
    if store:
        text += f'[store]\npath = "{tmp_path / "store.sqlite3"}"\n'
    config.write_text(text)
    (tmp_path / "cxone-secret").write_text("not-a-real-secret")
    (tmp_path / "cxone-password").write_text("not-a-real-access-key-secret")
    for attempt in ("first", "second"):
        process = await anyio.open_process(
            [sys.executable, "-m", "supervisor", "run", "--config", str(config)], stderr=None
        )
        lines: list[dict[str, Any]] = []

        async def pump(proc: Process = process, out: list[dict[str, Any]] = lines) -> None:
            assert proc.stdout is not None
            buffer = ""
            async for chunk in TextReceiveStream(proc.stdout):
                buffer += chunk
                *complete, buffer = buffer.split("\n")
                out.extend(json.loads(line) for line in complete)

        def active(out: list[dict[str, Any]] = lines) -> int:
            return len([r for r in out if r["event"] == "SESSION_TRANSITION" and r["to"] == "active"])

        async with anyio.create_task_group() as tg:
            tg.start_soon(pump)
            await wait_until(lambda: active() >= 2, 20.0)
            if attempt == "first":
                assert cxone_sim.recorder.request_count("POST", START, 202) == 2
                if store:
                    # the row says "open" in a commit just after the transition is told; a kill before
                    # it leaves "opening", which the next start rightly starts (409) and then joins
                    await wait_until(lambda: open_rows(tmp_path / "store.sqlite3") == 2, 20.0)
                process.kill()  # kill -9: no drain, no DELETE; the agent sessions stay on the platform
            else:
                process.send_signal(signal.SIGTERM)
            with anyio.fail_after(15):
                await process.wait()
            tg.cancel_scope.cancel()
    # the second daemon found the agents' sessions alive and took them over
    assert cxone_sim.recorder.request_count("POST", START, 409) == (0 if store else 2)
    assert cxone_sim.recorder.request_count("POST", JOIN, 202) == 2
    assert not [r for r in lines if r["event"] == "SESSION_TERMINATED" and r["reason"] != "STOPPED"]
