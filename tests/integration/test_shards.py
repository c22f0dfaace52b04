"""One host in the fleet's shape: sessions by shard, leases that come and go (docs/runtime.md, "Shards and leases").

The daemon runs in the test's process against both simulators over loopback, with a real SQLite store
and the socket API on real Unix sockets, and a :class:`FlakyLeases` the test moves by hand (what a
fleet's lease table would do: a shard lost to another member, then given back):

* at start only the owned shards are loaded and reconciled: an orphan of an owned shard is ended, an
  orphan of a shard not owned is left alone (its owner's to end);
* a lost shard's sessions are **abandoned**: no CXone DELETE, no guest ``closeSession`` (the guest
  session and the agent session stay alive on the simulators), and nothing written to the store;
* while it is lost, every verb on its sessions answers ``NotOwner`` (``ctl`` exits 69, ``--json``
  gives the error and its parameters), and the verbs on the other sessions answer as ever;
* when it is given back, its sessions are **taken over**: the guest resumes its kept token (no new
  guest session, no new conversation), the agent's live session is joined (the same agent session),
  and the orphans of the shards just acquired are ended then.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

import anyio
import pytest
from anyio.abc import TaskStatus

from supervisor.api.client import Client
from supervisor.api.protocol import ApiFault, Method
from supervisor.errors import ApiError
from supervisor.runtime.leases import Lease, LeaseHolder
from supervisor.sim.cxone import CxoneSimulator
from supervisor.sim.genesys import GenesysSimConfig, GenesysSimulator
from supervisor.store import ServerSession, ServerState, SqliteStore, Submission
from supervisor.store.shards import ALL_SHARDS, shard_of
from supervisor.vocabulary import SessionState
from tests.harness.config import daemon_config
from tests.harness.in_process import ApiSockets, supervised
from tests.harness.process import CLI, server_sessions

pytestmark = [
    pytest.mark.integration,
    pytest.mark.anyio,
    pytest.mark.genesys_sim(GenesysSimConfig(rate_limit=1_000_000), seed=34),
    pytest.mark.cxone_sim(seed=34),
]

AGENTS = ("100001", "100002")
START = "/inContactAPI/services/v{N}.0/agent-sessions"
JOIN = "/inContactAPI/services/v{N}.0/agent-sessions/join"
#: kept: their shards are owned throughout; moved: their shards are lost, then given back
KEPT = ("wm-0", "cx-0")
MOVED = ("wm-1", "cx-1")
#: server sessions a crash left open that nobody wants: one in an owned shard, one in a shard owned later
ORPHAN_OWNED, ORPHAN_LATER = "orphan-a", "orphan-b"
EX_NOT_OWNER = 69


def test_the_sessions_of_this_test_lie_in_the_shards_it_means() -> None:
    moved = {shard_of(s) for s in MOVED}
    assert not moved & {shard_of(s) for s in (*KEPT, ORPHAN_OWNED)}
    assert shard_of(ORPHAN_LATER) not in {shard_of(s) for s in (*KEPT, *MOVED, ORPHAN_OWNED)}


class FlakyLeases:
    """A :class:`~supervisor.runtime.leases.Leases` the test moves: :meth:`lose` and :meth:`give`
    tell the holder as a fleet's lease table would."""

    identity = "member-under-test"

    def __init__(self, shards: Collection[int], epoch: int = 7) -> None:
        self._owned = {s: Lease(s, epoch, deadline=None) for s in shards}
        self._epoch = epoch
        self._holder: LeaseHolder | None = None

    def owned(self) -> Mapping[int, Lease]:
        return MappingProxyType(self._owned)

    def subscribe_deadlines(self, callback: Callable[[Mapping[int, Lease]], None]) -> None:
        """Its leases have no deadline: nothing to renew, so nothing to tell (the holder is told)."""

    async def serve(
        self, holder: LeaseHolder, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        self._holder = holder
        await holder.acquired(sorted(self._owned.values(), key=lambda lease: lease.shard))
        task_status.started()
        await anyio.sleep_forever()

    async def lose(self, shards: Collection[int]) -> None:
        assert self._holder is not None
        for shard in shards:
            del self._owned[shard]
        await self._holder.lost(frozenset(shards))

    async def give(self, shards: Collection[int]) -> None:
        assert self._holder is not None
        self._epoch += 1
        leases = [Lease(s, self._epoch) for s in sorted(shards)]
        self._owned.update((lease.shard, lease) for lease in leases)
        await self._holder.acquired(leases)


@pytest.fixture
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="ss-sh-", dir="/tmp") as d:
        yield Path(d)


def _ctl(control: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``session-supervisor ctl --socket CONTROL ARGS`` as a script runs it (in a worker thread)."""
    return subprocess.run(
        [*CLI, "ctl", "--socket", str(control), *args],
        capture_output=True,
        text=True,
        timeout=30,
        env=dict(os.environ),
        check=False,
    )


def _call(control: Path, method: str, parameters: dict[str, Any]) -> dict[str, Any]:
    with Client(control) as client:
        return client.call(method, parameters)


async def _run_ctl(control: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return await anyio.to_thread.run_sync(lambda: _ctl(control, *args))


async def _orphans(store: Path, ids: Sequence[str]) -> None:
    """Server sessions left open by a crash, of sessions no longer configured (a guest whose token
    was never confirmed: ended as ``not_cleanable``, with no request to any platform), each with an
    attribute update still queued."""
    opened = await SqliteStore.open(store, synchronous="normal")
    try:
        for session_id in ids:
            await opened.session_opening(
                ServerSession(session_id, "genesys", "webmessaging", ServerState.OPENING, 1000.0)
            )
            await opened.submit(
                Submission(
                    f"u-{session_id}", "t", session_id, f"conv-{session_id}", {"k": "v"}, frozenset(), 1000.0
                ),
                50,
            )
    finally:
        await opened.aclose()


async def test_a_lost_shard_is_abandoned_refused_and_taken_over_when_it_comes_back(
    genesys_sim: GenesysSimulator, cxone_sim: CxoneSimulator, workdir: Path
) -> None:
    store = workdir / "store.sqlite3"
    conversation = genesys_sim.create_conversation()  # wm-1's: its attribute updates go there
    config = daemon_config(
        genesys_sim.urls,
        workdir,
        [("wm-0", None), ("wm-1", conversation.id)],
        store=store,
        cxone=cxone_sim.urls,
        cxone_sessions=[("cx-0", AGENTS[0]), ("cx-1", AGENTS[1])],
    )
    await _orphans(store, [ORPHAN_OWNED, ORPHAN_LATER])
    later = shard_of(ORPHAN_LATER)
    moved = {shard_of(s) for s in MOVED}
    leases = FlakyLeases(ALL_SHARDS - {later})
    sockets = ApiSockets((workdir / "sockets" / "s.sock", workdir / "sockets" / "c.sock"))
    rec = cxone_sim.recorder
    async with supervised(
        config.read_text(), workdir, durable=True, sockets=sockets, leases=leases
    ) as daemon:
        await daemon.wait_active(4)
        # reconcile ended only the orphan of an owned shard
        await daemon.wait(lambda: bool(daemon.recorded.named("SESSION_RECONCILED")))
        assert [e["sessionId"] for e in daemon.recorded.named("SESSION_RECONCILED")] == [ORPHAN_OWNED]
        await daemon.wait(lambda: server_sessions(store)[ORPHAN_OWNED]["state"] == "closed")
        assert server_sessions(store)[ORPHAN_LATER]["state"] == "opening"
        # the queued attribute updates of the owned shards only are loaded (the store read by shard)
        scheduled = daemon.service.scheduler
        assert scheduled.pending() == 1

        await daemon.wait(
            lambda: all(
                r["state"] == "open"
                for r in server_sessions(store).values()
                if r["session_id"] in (*KEPT, *MOVED)
            )
        )
        before = server_sessions(store)
        tokens = {sid: before[sid]["guest_token"] for sid in ("wm-0", "wm-1")}
        assert all(tokens.values())
        agent_sessions = {a: cxone_sim.state.session_for_agent(a) for a in AGENTS}
        conversations = len(genesys_sim.state.conversations)
        starts = rec.request_count("POST", START)
        old = {sid: daemon.runners[sid] for sid in MOVED}
        # an attribute update of wm-1, acknowledged (kept in the outbox) and scheduled here
        told = await anyio.to_thread.run_sync(
            _call,
            daemon.control,
            Method.SET_ATTRIBUTES,
            {"sessionId": "wm-1", "attributes": {"survey": "yes"}},
        )
        assert told["accepted"] is True and scheduled.pending() == 2

        # -- the shards of wm-1 and cx-1 are lost: abandoned, nothing ended, nothing written
        await leases.lose(moved)
        # until their tasks ended: whatever an end writes to the store would be written by then
        await daemon.wait(lambda: all(daemon.supervisor.finished(r) for r in old.values()))
        assert all(r.state is SessionState.HANDED_OVER for r in old.values())
        assert rec.request_count("DELETE") == 0
        assert all(t in genesys_sim.state.sessions for t in tokens.values())  # no closeSession
        assert {a: cxone_sim.state.session_for_agent(a) for a in AGENTS} == agent_sessions
        assert all(s is not None and s.ended is None for s in agent_sessions.values())
        after = server_sessions(store)
        assert {sid: after[sid] for sid in MOVED} == {sid: before[sid] for sid in MOVED}  # no store write
        assert all(daemon.runners[sid].state is SessionState.ACTIVE for sid in KEPT)
        assert scheduled.pending() == 1  # wm-1's update dropped here: the shard's next owner loads it

        # -- verbs on a session of a lost shard answer NotOwner, as a script sees them (at once:
        # each ctl is a Python start-up), and a session of an owned shard answers as ever
        asked = {
            "show": ("show", "wm-1", "--json"),
            "attributes": ("attributes", "set", "wm-1", "k=v", "--json"),
            # several ids, every one refused NotOwner: 69 too (one refusal of another kind would be 1)
            "stop": ("stop", "wm-1", "cx-1", "--json"),
        }
        answers: dict[str, subprocess.CompletedProcess[str]] = {}

        async def ask(name: str) -> None:
            answers[name] = await _run_ctl(daemon.control, *asked[name])

        async with anyio.create_task_group() as tg:
            for name in asked:
                tg.start_soon(ask, name)
        shown = answers["show"]
        assert shown.returncode == EX_NOT_OWNER, shown.stderr
        refusal = json.loads(shown.stdout)
        assert refusal == {
            "error": "io.sessionsupervisor.control.v1.NotOwner",
            "sessionId": "wm-1",
            "shard": shard_of("wm-1"),
            "owner": None,
            "host": None,
            "epoch": None,
            "problem": refusal["problem"],
        }
        assert "NotOwner" in shown.stderr and f"shard {shard_of('wm-1')}" in shown.stderr
        update = answers["attributes"]
        assert update.returncode == EX_NOT_OWNER and json.loads(update.stdout)["error"].endswith("NotOwner")
        stopped = answers["stop"]
        assert stopped.returncode == EX_NOT_OWNER, stopped.stderr
        # those two ids only: formerly several ids with no selector stopped every session
        assert [json.loads(line)["sessionId"] for line in stopped.stdout.splitlines()] == ["wm-1", "cx-1"]
        # the other verbs on a session, over the control socket
        for method, parameters in [
            (Method.START_SESSION, {"sessionId": "cx-1"}),
            (Method.SEND_MESSAGE, {"sessionId": "wm-1", "text": "hello"}),
            (Method.SET_AGENT_STATE, {"sessionId": "cx-1", "state": "Available"}),
            (Method.REMOVE_SESSION, {"sessionIds": ["wm-1"]}),
        ]:
            with pytest.raises(ApiError) as refused:
                await anyio.to_thread.run_sync(_call, daemon.control, method, parameters)
            assert refused.value.fault is ApiFault.NOT_OWNER, method
        # an entry added in a lost shard: refused NotOwner (nothing kept: this process records for no owner)
        assert shard_of("added-33") == shard_of("wm-1")
        added = await anyio.to_thread.run_sync(
            _call,
            daemon.control,
            Method.ADD_SESSION,
            {"sessions": [{"id": "added-33", "kind": "webmessaging", "platform": "genesys"}]},
        )
        assert added["added"] == 0 and added["results"][0]["error"].endswith("NotOwner")
        assert added["results"][0]["shard"] == shard_of("wm-1") and "added-33" not in daemon.runners
        for session_id in KEPT:
            kept = await anyio.to_thread.run_sync(
                _call, daemon.control, Method.SHOW_SESSION, {"sessionId": session_id}
            )
            assert kept["session"]["state"] == "active", session_id
        # what a script asked of the lost shard changed nothing
        assert rec.request_count("DELETE") == 0 and rec.request_count("POST", START) == starts

        # -- the shards come back, with the orphan's: taken over, and that orphan ended now
        await leases.give(moved | {later})
        await daemon.wait(lambda: all(daemon.runners[sid] is not old[sid] for sid in MOVED))
        await daemon.wait_active(4)
        assert rec.request_count("DELETE") == 0
        # the guest resumed its kept token (no new guest session, no new conversation)
        assert len(genesys_sim.state.conversations) == conversations
        assert server_sessions(store)["wm-1"]["guest_token"] == tokens["wm-1"]
        # the agent's live session was joined: the same agent session, none started anew
        assert {a: cxone_sim.state.session_for_agent(a) for a in AGENTS} == agent_sessions
        assert rec.request_count("POST", JOIN) == 1
        await daemon.wait(lambda: len(daemon.recorded.named("SESSION_RECONCILED")) == 2)
        assert (
            scheduled.pending() == 3
        )  # the acquired shards' updates, loaded from the store: wm-1's, orphan-b's
        assert [e["sessionId"] for e in daemon.recorded.named("SESSION_RECONCILED")] == [
            ORPHAN_OWNED,
            ORPHAN_LATER,
        ]
        shown_again = await anyio.to_thread.run_sync(
            _call, daemon.control, Method.SHOW_SESSION, {"sessionId": "wm-1"}
        )
        assert shown_again["session"]["state"] == "active"
