"""The fence at the write in a running daemon: a fleet member's sessions against both simulators over
loopback, its leases' deadlines set by the test on an injected CLOCK_BOOTTIME source
(docs/runtime.md, "The fence at the write").

* when one shard's deadline passes mid-traffic, its sessions' sockets are reset and the simulators'
  activity log shows nothing more from them (no request, frame or upgrade), while the sessions of
  the other shards keep running; nothing reconnects on the fenced shard until its lease is renewed,
  then its sessions come back (the guest resumed by its token, the agent session polled on);
* a stall of the event loop past ``[fleet] loopLagSeconds`` fences every shard until the renewal.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from supervisor.errors import SessionError
from supervisor.runtime.fence import WriteFence
from supervisor.runtime.targets import SessionTargets
from supervisor.sim.activity import token_key
from supervisor.sim.cxone import CxoneSimulator
from supervisor.sim.genesys import GenesysSimConfig, GenesysSimulator
from supervisor.store.shards import shard_of
from supervisor.transports.cxone import AgentSessionTransport
from supervisor.transports.webmessaging import WebMessagingTransport
from supervisor.vocabulary import Platform, SessionState
from tests.harness.config import daemon_config
from tests.harness.in_process import Harness, supervised
from tests.harness.leases import DeadlineLeases, ManualBoottime

pytestmark = [
    pytest.mark.integration,
    pytest.mark.anyio,
    pytest.mark.genesys_sim(GenesysSimConfig(rate_limit=1_000_000), seed=41),
    pytest.mark.cxone_sim(seed=41),
]

AGENTS = ("100001", "100002")
#: kept: their shards stay leased; fenced: their shard's deadline passes mid-traffic
KEPT, FENCED = ("wm-0", "cx-0"), ("wm-1", "cx-1")
SENT = ("request", "connect", "frame")  # activity kinds that are bytes a client sent


def test_the_sessions_of_this_test_lie_in_the_shards_it_means() -> None:
    assert {shard_of(s) for s in FENCED}.isdisjoint({shard_of(s) for s in KEPT})


@pytest.fixture
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="ss-wf-", dir="/tmp") as d:
        yield Path(d)


def _keys(daemon: Harness, session_ids: tuple[str, ...]) -> set[str]:
    """The activity log's session keys of ``session_ids`` (a guest: its token's key; an agent: its id)."""
    keys = set()
    for sid in session_ids:
        transport = daemon.runners[sid].transport
        if isinstance(transport, WebMessagingTransport):
            keys.add(token_key(transport.guest_token))
        else:
            keys.add(AGENTS[int(sid.split("-")[1])])
    return keys


def _sent_after(
    entries: list[dict[str, Any]], seq: int, keys: set[str], since: float | None = None
) -> list[dict[str, Any]]:
    """What the clients of ``keys`` sent after ``seq`` (a request given up before its answer, 499, was
    sent before: it is written when the simulator sees the connection go), and received at ``since``
    or later when given: a long poll is written when it is answered, after the entries of what came
    in meanwhile (docs/simulators.md, "Activity log"), so one held across the mark was sent before it."""
    return [
        e
        for e in entries
        if e["seq"] > seq
        and (since is None or e["t"] >= since)
        and e["session"] in keys
        and e["kind"] in SENT
        and e.get("status") != 499
    ]


async def test_a_shard_past_its_deadline_sends_nothing_more_and_the_others_run_on(
    genesys_sim: GenesysSimulator, cxone_sim: CxoneSimulator, workdir: Path
) -> None:
    conversation = genesys_sim.create_conversation()
    config = daemon_config(
        genesys_sim.urls,
        workdir,
        [("wm-0", None), ("wm-1", conversation.id)],
        cxone=cxone_sim.urls,
        cxone_sessions=[("cx-0", AGENTS[0]), ("cx-1", AGENTS[1])],
    )
    now = ManualBoottime()
    fenced_shards = {shard_of(s) for s in FENCED}
    kept_shards = {shard_of(s) for s in KEPT}
    leases = DeadlineLeases(fenced_shards | kept_shards, now, margin=100.0)
    fence = WriteFence(now=now, tick_s=0.02, loop_lag_s=2.0)
    async with supervised(config.read_text(), workdir, leases=leases, fence=fence) as daemon:
        await daemon.wait_active(4)
        keys = _keys(daemon, FENCED)
        kept_keys = _keys(daemon, KEPT)
        # traffic on every session: each agent's long polls, a message from each guest
        for sid in ("wm-0", "wm-1"):
            await daemon.runners[sid].send_message(f"hello from {sid}")
        await daemon.wait(lambda: len(cxone_sim.activity.since(0).entries) > 8)

        # -- the fenced shard's deadline passes (1.5 s: within the lag guard's bound)
        for shard in fenced_shards:
            leases.set_deadline(shard, now() + 1.0)
        now.advance(1.5)
        guards = [fence.guard(s) for s in fenced_shards]
        # its sockets are reset (by the watchdog, or by the next write that met the fence) ...
        await daemon.wait(lambda: all(g.sockets == 0 for g in guards))
        await daemon.wait(lambda: all(daemon.runners[s].fenced for s in FENCED))
        mark = {sim: sim.activity.last_seq for sim in (genesys_sim, cxone_sim)}
        marked = {sim: sim.activity.now() for sim in mark}
        # ... and the kept sessions run on: polls, a message, while the fenced ones are waited for
        await daemon.runners["wm-0"].send_message("still here")
        with pytest.raises(SessionError):
            await daemon.runners["wm-1"].send_message("fenced")
        cx_seq = mark[cxone_sim]
        await daemon.wait(
            lambda: len(_sent_after(cxone_sim.activity.since(cx_seq).entries, cx_seq, kept_keys)) >= 3
        )
        entries = {sim: sim.activity.since(mark[sim]).entries for sim in mark}
        assert all(_sent_after(entries[sim], mark[sim], keys, marked[sim]) == [] for sim in mark)
        assert _sent_after(entries[genesys_sim], mark[genesys_sim], kept_keys)
        assert all(daemon.runners[s].state is SessionState.ACTIVE for s in KEPT)
        # nothing reconnected on the fenced shard: no attempt either (the runner waits for the lease)
        assert all(daemon.runners[s].state is not SessionState.TERMINATED for s in FENCED)

        # -- the lease is renewed: the fenced sessions come back (the guest resumed, the agent polled on)
        leases.renew(fenced_shards)
        await daemon.wait_active(4)
        await daemon.runners["wm-1"].send_message("back")
        back = {sim: sim.activity.since(mark[sim]).entries for sim in mark}
        assert _sent_after(back[genesys_sim], mark[genesys_sim], keys)


async def test_a_loop_stall_past_the_bound_fences_every_shard_until_renewed(
    genesys_sim: GenesysSimulator, cxone_sim: CxoneSimulator, workdir: Path
) -> None:
    config = daemon_config(
        genesys_sim.urls,
        workdir,
        [("wm-0", None)],
        cxone=cxone_sim.urls,
        cxone_sessions=[("cx-0", AGENTS[0])],
    )
    now = ManualBoottime()
    leases = DeadlineLeases({shard_of(s) for s in KEPT}, now, margin=100.0)
    fence = WriteFence(now=now, tick_s=0.02, loop_lag_s=2.0)
    async with supervised(config.read_text(), workdir, leases=leases, fence=fence) as daemon:
        await daemon.wait_active(2)
        keys = _keys(daemon, KEPT)
        # the watchdog wakes 3 s late as CLOCK_BOOTTIME sees it: every deadline is 97 s away, still
        # every shard is fenced
        now.advance(3.0)
        await daemon.wait(lambda: fence.lagging)
        # every session waits for the lease, attempting nothing
        await daemon.wait(lambda: all(daemon.runners[s].fenced for s in KEPT))
        mark = {sim: sim.activity.last_seq for sim in (genesys_sim, cxone_sim)}
        marked = {sim: sim.activity.now() for sim in mark}
        with pytest.raises(SessionError):
            await daemon.runners["wm-0"].send_message("stalled")
        entries = {sim: sim.activity.since(mark[sim]).entries for sim in mark}
        assert all(_sent_after(entries[sim], mark[sim], keys, marked[sim]) == [] for sim in mark)
        assert fence.stalls >= 1 and all(daemon.runners[s].fenced for s in KEPT)
        leases.renew()
        await daemon.wait_active(2)
        assert not fence.lagging and not any(daemon.runners[s].fenced for s in KEPT)


async def test_every_connection_of_a_member_binds_its_local_address(
    genesys_sim: GenesysSimulator, cxone_sim: CxoneSimulator, workdir: Path
) -> None:
    """``[fleet] localAddress``: the source address of the HTTP pools' and the WebSockets' connections
    (three members on one machine each on a loopback address of its own: the simulators tell them apart)."""
    conversation = genesys_sim.create_conversation()
    config = daemon_config(
        genesys_sim.urls,
        workdir,
        [("wm-1", conversation.id)],
        cxone=cxone_sim.urls,
        cxone_sessions=[("cx-1", AGENTS[1])],
        extra='[fleet]\nlocalAddress = "127.0.0.12"\n',
    )
    now = ManualBoottime()
    leases = DeadlineLeases({shard_of(s) for s in FENCED}, now, margin=100.0)
    async with supervised(config.read_text(), workdir, leases=leases, fence=WriteFence(now=now)) as daemon:
        await daemon.wait_active(2)
        await daemon.runners["wm-1"].send_message("from .12")
        # an attribute update of the session goes on its shard's fenced pool (a conversation's alone: its shard's)
        wiring = daemon.supervisor.wiring
        targets = SessionTargets(daemon.supervisor.sessions, wiring, lambda session_id: None)
        target = targets.target("genesys:demo-client", "wm-1", conversation.id)
        assert target is not None
        assert target.pipeline is wiring.shard_pipeline(Platform.GENESYS, shard_of("wm-1"))
        alone = targets.target("genesys:demo-client", None, conversation.id)
        assert alone is not None
        assert alone.pipeline is wiring.shard_pipeline(Platform.GENESYS, shard_of(conversation.id))
        peers = {
            str(e["peer"]).rsplit(":", 1)[0]
            for sim in (genesys_sim, cxone_sim)
            for e in sim.activity.since(0).entries
            if e["peer"] is not None
        }
    assert peers == {"127.0.0.12"}


async def test_one_host_has_no_fence_and_keeps_its_pools(
    genesys_sim: GenesysSimulator, cxone_sim: CxoneSimulator, workdir: Path
) -> None:
    """SoloLeases (leases without deadline): no fence, no watchdog, the platform's pools shared by
    sessions of any shard, websockets' own connection class."""
    config = daemon_config(
        genesys_sim.urls,
        workdir,
        [("wm-0", None), ("wm-1", None)],
        cxone=cxone_sim.urls,
        cxone_sessions=[("cx-0", AGENTS[0]), ("cx-1", AGENTS[1])],
    )
    async with supervised(config.read_text(), workdir) as daemon:
        await daemon.wait_active(4)
        wiring = daemon.supervisor.wiring
        assert daemon.supervisor.fence is None and wiring.fence is None
        assert wiring.channel_pools.fencing is None
        cxone = [daemon.runners[s].transport for s in ("cx-0", "cx-1")]
        assert all(isinstance(t, AgentSessionTransport) for t in cxone)
        assert {id(t.pipeline) for t in cxone if isinstance(t, AgentSessionTransport)} == {
            id(wiring.pipelines[Platform.CXONE])
        }
        # the WebSockets: websockets' own connection, nothing bound
        assert all(wiring.wire_for(s).websocket_options() == {} for s in ("wm-0", "wm-1"))
