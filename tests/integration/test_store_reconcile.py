"""Takeover and reconciliation after a ``kill -9``; resumption after a planned restart (docs/store.md).

The daemon (a child process) supervises two Genesys Web Messaging guests and two CXone agent
sessions; it is killed with SIGKILL, and restarted with a configuration that no longer has one of
each. After the restart:

* the sessions still desired are **taken over, never ended**: the guest resumes its kept token
  (``newSession: false``: the same guest session, no new conversation), the CXone session is joined
  (the agent's session is the same one);
* the server sessions the crash left open and nobody wants are **ended where the platform allows**
  (the guest: ``closeSession`` with its kept token; CXone: ``DELETE agent-sessions/{id}``), each
  outcome published (``SESSION_RECONCILED``) and kept in the session ledger.
"""

from __future__ import annotations

import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from supervisor.sim.cxone import CxoneSimulator
from supervisor.sim.genesys import GenesysSimConfig, GenesysSimulator
from tests.harness.config import daemon_config
from tests.harness.process import kill9, running_daemon, server_sessions
from tests.harness.waits import wait_until

pytestmark = [
    pytest.mark.integration,
    pytest.mark.anyio,
    pytest.mark.genesys_sim(GenesysSimConfig(rate_limit=1_000_000), seed=61),
    pytest.mark.cxone_sim(seed=61),
]

AGENTS = ("100001", "100002")


@pytest.fixture
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="ss-rec-", dir="/tmp") as d:
        yield Path(d)


async def test_desired_sessions_are_taken_over_and_orphans_ended_after_kill_9(
    genesys_sim: GenesysSimulator, cxone_sim: CxoneSimulator, workdir: Path
) -> None:
    store = workdir / "store.sqlite3"
    both = daemon_config(
        genesys_sim.urls,
        workdir,
        [("wm-0", None), ("wm-1", None)],
        store=store,
        cxone=cxone_sim.urls,
        cxone_sessions=[("cx-0", AGENTS[0]), ("cx-1", AGENTS[1])],
    )
    async with running_daemon(both) as first:
        await first.wait_ready(4)
        # the session ledger has each server side: guest tokens, the agent sessions' anchors
        await wait_until(
            lambda: (
                all(r["state"] == "open" for r in server_sessions(store).values())
                and len(server_sessions(store)) == 4
            ),
            20,
        )
        kept = server_sessions(store)
        kill9(first)
        with anyio.fail_after(20):
            assert await first.process.wait() == -signal.SIGKILL
    tokens = {sid: kept[sid]["guest_token"] for sid in ("wm-0", "wm-1")}
    assert all(tokens.values()) and all(t in genesys_sim.state.sessions for t in tokens.values())
    agent_sessions = {agent: cxone_sim.state.session_for_agent(agent) for agent in AGENTS}
    assert all(s is not None and s.ended is None for s in agent_sessions.values())
    conversations = len(genesys_sim.state.conversations)

    # wm-1 and cx-1 leave the configuration while the daemon is down
    fewer = daemon_config(
        genesys_sim.urls,
        workdir,
        [("wm-0", None)],
        store=store,
        cxone=cxone_sim.urls,
        cxone_sessions=[("cx-0", AGENTS[0])],
    )
    async with running_daemon(fewer) as second:
        await second.wait_ready(2)
        await wait_until(lambda: len(second.named("SESSION_RECONCILED")) == 2, 30)
        outcomes = {e["sessionId"]: (e["kind"], e["outcome"]) for e in second.named("SESSION_RECONCILED")}
        assert outcomes == {"wm-1": ("webmessaging", "ended"), "cx-1": ("agent-session", "ended")}
        # ended on the platform: the guest session is closed, the agent logged out
        assert tokens["wm-1"] not in genesys_sim.state.sessions
        assert cxone_sim.state.session_for_agent(AGENTS[1]) is None
        # taken over, never ended: the same guest session (no new conversation), the same agent session
        assert tokens["wm-0"] in genesys_sim.state.sessions
        assert len(genesys_sim.state.conversations) == conversations
        assert cxone_sim.state.session_for_agent(AGENTS[0]) is agent_sessions[AGENTS[0]]
        assert not second.named("SESSION_TERMINATED")
        ledger = server_sessions(store)
        assert ledger["wm-1"]["state"] == ledger["cx-1"]["state"] == "closed"
        assert ledger["wm-1"]["guest_token"] is None and ledger["wm-1"]["outcome"].startswith("ended")
        assert ledger["wm-0"]["guest_token"] == tokens["wm-0"]
        assert await second.stop() == 0
    # a planned stop (the drain) with a store hands both over: the guest session resumable, the
    # agent still logged in (tests/integration/test_handover.py has the rest)
    assert tokens["wm-0"] in genesys_sim.state.sessions
    assert server_sessions(store)["wm-0"]["state"] == server_sessions(store)["cx-0"]["state"] == "open"
    assert cxone_sim.state.session_for_agent(AGENTS[0]) is agent_sessions[AGENTS[0]]
    # ... and the planned restart takes them over: the same token, still no new conversation, the same agent session
    async with running_daemon(fewer) as third:
        await third.wait_ready(2)
        assert server_sessions(store)["wm-0"]["guest_token"] == tokens["wm-0"]
        assert len(genesys_sim.state.conversations) == conversations
        assert cxone_sim.state.session_for_agent(AGENTS[0]) is agent_sessions[AGENTS[0]]
        assert not third.named("SESSION_TERMINATED") and not third.named("SESSION_RECONCILED")
        assert await third.stop() == 0
