"""Restarts that log nobody out: a stop with a store hands the sessions over (docs/runtime.md, "Lifecycle").

The daemon runs as a child process (``python -m supervisor run``) against both simulators over loopback,
with a real SQLite store, and is stopped with SIGTERM or ``ctl drain`` as an operator stops it:

* with a store, a stop **hands every session over**: each is left alive on the platform (no CXone
  DELETE, no guest ``closeSession``), SESSION_HANDED_OVER is published with no ``action`` and no
  SESSION_TERMINATED, and the ledger records ``left_at``; the next start **takes them over**: no
  ``POST agent-sessions`` (no start, no join: the agent session is polled on with its last id), no
  guest answered ``newSession: true`` (the same conversations);
* a session left longer ago than ``handover.maxAgeSeconds`` is **ended first** at the next start
  (SESSION_RECONCILED ``ended``, before any session goes active) and started anew;
* ``ctl drain --end-sessions`` (administrator) ends them on the platform, store or not;
* without a store a stop ends the sessions as it always did (CXone DELETE), and ``run --check`` says so.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from supervisor.sim.cxone import CxoneSimulator
from supervisor.sim.genesys import GenesysSimConfig, GenesysSimulator
from tests.harness.config import daemon_config
from tests.harness.process import CLI, control_socket, running_daemon, server_sessions

pytestmark = [
    pytest.mark.integration,
    pytest.mark.anyio,
    pytest.mark.genesys_sim(GenesysSimConfig(rate_limit=1_000_000), seed=73),
    pytest.mark.cxone_sim(seed=73),
]

AGENTS = ("100001", "100002")
START = "/inContactAPI/services/v{N}.0/agent-sessions"
JOIN = "/inContactAPI/services/v{N}.0/agent-sessions/join"
GUESTS = [("wm-0", None), ("wm-1", None)]
AGENT_SESSIONS = [("cx-0", AGENTS[0]), ("cx-1", AGENTS[1])]
IDS = {"wm-0", "wm-1", "cx-0", "cx-1"}


@pytest.fixture
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="ss-ho-", dir="/tmp") as d:
        yield Path(d)


def _config(
    genesys: GenesysSimulator, cxone: CxoneSimulator, workdir: Path, store: Path | None, extra: str = ""
) -> Path:
    return daemon_config(
        genesys.urls,
        workdir,
        GUESTS,
        store=store,
        cxone=cxone.urls,
        cxone_sessions=AGENT_SESSIONS,
        extra=extra,
    )


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``session-supervisor ARGS`` as a script runs it (run it in a worker thread)."""
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, timeout=30, env=env or dict(os.environ), check=False
    )


async def _run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return await anyio.to_thread.run_sync(lambda: _cli(*args, env=env))


def _agent_sessions(cxone: CxoneSimulator) -> dict[str, object]:
    return {agent: cxone.state.session_for_agent(agent) for agent in AGENTS}


async def test_a_restart_with_a_store_hands_every_session_over_and_takes_it_back(
    genesys_sim: GenesysSimulator, cxone_sim: CxoneSimulator, workdir: Path
) -> None:
    store = workdir / "store.sqlite3"
    config = _config(genesys_sim, cxone_sim, workdir, store)
    rec = cxone_sim.recorder
    async with running_daemon(config) as first:
        await first.wait_ready(4)
        starts = rec.request_count("POST", START)
        assert starts == 2
        conversations = len(genesys_sim.state.conversations)
        tokens = {sid: server_sessions(store)[sid]["guest_token"] for sid in ("wm-0", "wm-1")}
        live = _agent_sessions(cxone_sim)
        assert await first.stop() == 0
    # the stop ended nothing on the platform: no DELETE, every guest session and agent still there
    assert rec.request_count("DELETE") == 0
    assert _agent_sessions(cxone_sim) == live and all(
        s is not None and s.ended is None for s in live.values()
    )
    assert all(t in genesys_sim.state.sessions for t in tokens.values())
    handed = {e["sessionId"]: e for e in first.named("SESSION_HANDED_OVER")}
    assert set(handed) == IDS
    assert all("action" not in e and e["previous"] == "active" for e in handed.values())
    assert not first.named("SESSION_TERMINATED")
    ledger = server_sessions(store)
    assert all(ledger[sid]["state"] == "open" and ledger[sid]["left_at"] is not None for sid in IDS)

    async with running_daemon(config) as second:
        await second.wait_ready(4)
        # taken over: no agent session started or joined anew, no new guest session or conversation
        assert rec.request_count("POST", START) == starts
        assert rec.request_count("POST", JOIN) == 0
        assert rec.request_count("DELETE") == 0
        assert len(genesys_sim.state.conversations) == conversations
        assert _agent_sessions(cxone_sim) == live
        # read up to the four taken over going active: nothing ended or reconciled before them
        await second.arrived("SESSION_TRANSITION", lambda r: r["to"] == "active", count=4)
        assert not second.named("SESSION_TERMINATED") and not second.named("SESSION_RECONCILED")
        # the agent sessions are polled on: events still reach the daemon through the kept chain
        assert all(server_sessions(store)[sid]["left_at"] is None for sid in IDS)
        assert await second.stop() == 0
    assert rec.request_count("DELETE") == 0 and _agent_sessions(cxone_sim) == live
    assert {e["sessionId"] for e in second.named("SESSION_HANDED_OVER")} == IDS


async def test_ctl_drain_end_sessions_ends_them_on_the_platform_with_a_store(
    genesys_sim: GenesysSimulator, cxone_sim: CxoneSimulator, workdir: Path
) -> None:
    """The administrator's drain, as a script runs it: every session ended (guests closeSession, CXone
    DELETE), SESSION_TERMINATED for each, the ledger closed; nothing handed over."""
    store = workdir / "store.sqlite3"
    config = _config(genesys_sim, cxone_sim, workdir, store)
    rec = cxone_sim.recorder
    async with running_daemon(config) as daemon:
        await daemon.wait_ready(4)
        tokens = [server_sessions(store)[sid]["guest_token"] for sid in ("wm-0", "wm-1")]
        ended = await _run_cli(
            "ctl", "--socket", str(control_socket(config)), "drain", "--end-sessions", "--json"
        )
        assert ended.returncode == 0, ended.stderr
        assert json.loads(ended.stdout) == {"draining": True, "handover": False}
        with anyio.fail_after(30):
            assert await daemon.process.wait() == 0
    assert rec.request_count("DELETE") == 2
    assert all(cxone_sim.state.session_for_agent(a) is None for a in AGENTS)
    assert not any(t in genesys_sim.state.sessions for t in tokens)
    assert {e["sessionId"] for e in daemon.named("SESSION_TERMINATED")} == IDS
    assert not daemon.named("SESSION_HANDED_OVER")
    assert all(r["state"] == "closed" for r in server_sessions(store).values())


async def test_a_session_left_longer_ago_than_max_age_is_ended_at_start_then_started_anew(
    genesys_sim: GenesysSimulator, cxone_sim: CxoneSimulator, workdir: Path
) -> None:
    store = workdir / "store.sqlite3"
    config = _config(genesys_sim, cxone_sim, workdir, store, extra="[handover]\nmaxAgeSeconds = 60\n")
    rec = cxone_sim.recorder
    async with running_daemon(config) as first:
        await first.wait_ready(4)
        assert await first.stop() == 0
    assert rec.request_count("DELETE") == 0
    old = _agent_sessions(cxone_sim)
    # the stop happened 61 s before this start, as far as the ledger knows (no waiting for a clock)
    conn = sqlite3.connect(store, isolation_level=None)
    try:
        conn.execute("UPDATE server_sessions SET left_at = left_at - 61")
    finally:
        conn.close()
    conversations = len(genesys_sim.state.conversations)

    async with running_daemon(config) as second:
        await second.wait_ready(4)
        # (the lines of those four going active are read, not only their status)
        await second.arrived("SESSION_TRANSITION", lambda r: r["to"] == "active", count=4)
        reconciled = {e["sessionId"]: e["outcome"] for e in second.named("SESSION_RECONCILED")}
        assert reconciled == {"wm-0": "ended", "wm-1": "ended", "cx-0": "ended", "cx-1": "ended"}
        # ended before any session went active again
        first_active = next(
            i
            for i, r in enumerate(second.records)
            if r.get("event") == "SESSION_TRANSITION" and r["to"] == "active"
        )
        last_reconciled = max(
            i for i, r in enumerate(second.records) if r.get("event") == "SESSION_RECONCILED"
        )
        assert last_reconciled < first_active
        assert rec.request_count("DELETE") == 2
        assert all(s is not None and s.ended is not None for s in old.values())
        # started anew: a new agent session each, new guest sessions (new conversations)
        assert rec.request_count("POST", START) == 4
        fresh = _agent_sessions(cxone_sim)
        assert all(fresh[a] is not None and fresh[a] is not old[a] for a in AGENTS)
        assert len(genesys_sim.state.conversations) == conversations + 2
        assert await second.stop() == 0


async def test_without_a_store_a_stop_ends_the_sessions_and_run_check_says_so(
    genesys_sim: GenesysSimulator, cxone_sim: CxoneSimulator, workdir: Path
) -> None:
    config = _config(genesys_sim, cxone_sim, workdir, None)
    env = {k: v for k, v in os.environ.items() if k != "STATE_DIRECTORY"}
    check = await _run_cli("run", "--config", str(config), "--check", env=env)
    assert check.returncode == 0, check.stderr
    assert "stop: no store" in check.stdout and "a stop ends every session" in check.stdout
    rec = cxone_sim.recorder
    async with running_daemon(config, env=env) as daemon:
        await daemon.wait_ready(4)
        assert await daemon.stop() == 0
    assert rec.request_count("DELETE") == 2
    assert all(cxone_sim.state.session_for_agent(a) is None for a in AGENTS)
    assert not daemon.named("SESSION_HANDED_OVER")
    assert {e["sessionId"] for e in daemon.named("SESSION_TERMINATED")} == IDS


async def test_a_configured_end_at_stop_ends_the_sessions_with_a_store(
    genesys_sim: GenesysSimulator, cxone_sim: CxoneSimulator, workdir: Path
) -> None:
    store = workdir / "store.sqlite3"
    config = _config(genesys_sim, cxone_sim, workdir, store, extra='[handover]\nonStop = "end"\n')
    check = await _run_cli("run", "--config", str(config), "--check")
    assert check.returncode == 0 and 'stop: ends every session (handover.onStop = "end"' in check.stdout
    async with running_daemon(config) as daemon:
        await daemon.wait_ready(4)
        tokens = [server_sessions(store)[sid]["guest_token"] for sid in ("wm-0", "wm-1")]
        assert await daemon.stop() == 0
    assert cxone_sim.recorder.request_count("DELETE") == 2
    assert not any(t in genesys_sim.state.sessions for t in tokens)
    assert not daemon.named("SESSION_HANDED_OVER")
    assert all(r["state"] == "closed" for r in server_sessions(store).values())
