"""The control socket and ``ctl`` on a fleet member (docs/socket-api.md, "A fleet"), as a script sees them.

A daemon in the test's process, on a PostgreSQL store, holds every shard but two in the fleet's lease
table (:class:`~tests.harness.fleet.TableLeases`: rows in ``shard_leases`` and ``fleet_members``); a
peer, ``member-b`` on ``host-b``, holds the other two (written in the tables, no daemon). ``ctl`` runs
as a subprocess against the daemon's real control socket:

* ``show``, ``send`` and ``agent-state`` of the peer's session exit 69 with ``NotOwner {owner, host,
  shard, epoch}`` read from the lease table;
* ``stop`` and ``start`` of it exit 0: the desired row is in PostgreSQL once ``ctl`` returns, and a
  notice on ``ss_desired`` (a LISTEN connection of the test's, as the owner's fleet bus) names it;
  ``AddSession``/``RemoveSession`` of an id in the peer's shard are recorded the same way;
* ``ctl status --json`` has the fleet: both members, and each shard's owner, epoch and ``mine``;
* the owner's side: notices a peer's writes sent, handed to the daemon's follower (what the fleet bus
  calls), stop, start, add and remove sessions of the daemon's own shards;
* two daemons, each with its fleet bus and its follower registered on it: a stop and a start asked of
  one for the other's session are done by the other;
* two ``session-supervisor run`` processes on one store (PgLeases): ``ctl`` of the member that does not
  run a session answers 69 with the one that does, takes a stop for it, and shows both members.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest
from anyio.abc import ObjectReceiveStream

from supervisor.api.client import Client
from supervisor.api.protocol import Method
from supervisor.events import TerminationReason
from supervisor.fleet.desired import FleetDesk
from supervisor.store import DesiredState, ServerSession, ServerState, Submission
from supervisor.store.model import DesiredSession
from supervisor.store.pg import PgStore
from supervisor.store.shards import ALL_SHARDS, shard_of
from supervisor.vocabulary import SessionState
from tests.harness.config import config_file, genesys_config, sockets_table
from tests.harness.fleet import Received, TableLeases, notices, seat
from tests.harness.in_process import ApiSockets, Harness, supervised
from tests.harness.process import CLI, running_daemon

pytestmark = [pytest.mark.integration, pytest.mark.anyio, pytest.mark.postgres]

EX_NOT_OWNER = 69
HERE, PEER = "member-a", "member-b"
#: wm-0 is the daemon's; wm-1 (configured) and wm-added-b (added at run time) are in the peer's shards;
#: wm-added-a is added at run time in a shard of the daemon's
PEERS_SHARDS = frozenset({shard_of("wm-1"), shard_of("wm-added-b")})
PEERS_CONVERSATION = "conv-of-wm-1"


def test_the_sessions_of_this_test_lie_in_the_shards_it_means() -> None:
    assert shard_of("wm-0") not in PEERS_SHARDS and shard_of("wm-added-a") not in PEERS_SHARDS
    assert len(PEERS_SHARDS) == 2


@dataclass
class Fleet:
    daemon: Harness
    leases: TableLeases
    dsn: str
    peer_epochs: dict[int, int]
    told: ObjectReceiveStream[Received]


@pytest.fixture
async def fleet(genesys_sim: Any, tmp_path: Path, pg_dsn: str, pg_url: str) -> AsyncIterator[Fleet]:
    sockets = tmp_path / "sockets"
    sockets.mkdir()
    # wm-0's conversation is configured; wm-1's is the one its owner's session ledger holds
    conversation = genesys_sim.create_conversation().id
    config = sockets_table(sockets / "s.sock", sockets / "c.sock")
    config += genesys_config(genesys_sim.urls, 2, conversations=[conversation])
    config += f'[store]\nurl = "{pg_url}"\n'
    opened = await PgStore.open(pg_url)  # the schema at its newest migration, before any member
    try:  # the peer's session ledger: wm-1 open on its conversation
        await opened.session_opening(
            ServerSession(
                "wm-1",
                "genesys",
                "webmessaging",
                ServerState.OPEN,
                1000.0,
                conversation_id=PEERS_CONVERSATION,
            )
        )
    finally:
        await opened.aclose()
    peer_epochs = await seat(pg_dsn, PEER, "host-b", PEERS_SHARDS)
    leases = TableLeases(pg_dsn, HERE, "host-a", ALL_SHARDS - PEERS_SHARDS)
    api = ApiSockets((sockets / "s.sock", sockets / "c.sock"))
    async with (
        notices(pg_dsn, "ss_desired", "ss_attributes") as told,
        supervised(config, tmp_path, durable=True, sockets=api, leases=leases) as daemon,
    ):
        await daemon.wait_active(1)
        await leases.refresh()  # both members seated: what ctl status says
        yield Fleet(daemon, leases, pg_dsn, peer_epochs, told)


def _ctl(control: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, "ctl", "--socket", str(control), *args],
        capture_output=True,
        text=True,
        timeout=30,
        env=dict(os.environ),
        check=False,
    )


async def ctl(fleet: Fleet, *args: str) -> subprocess.CompletedProcess[str]:
    """``session-supervisor ctl ARGS`` against the daemon's control socket, as a script runs it."""
    control = fleet.daemon.control
    return await anyio.to_thread.run_sync(lambda: _ctl(control, *args))


async def ctls(fleet: Fleet, *asked: tuple[str, ...]) -> list[subprocess.CompletedProcess[str]]:
    """Several ``ctl`` at once (each is a Python start-up), their answers in the order asked."""
    answers: dict[int, subprocess.CompletedProcess[str]] = {}

    async def ask(i: int) -> None:
        answers[i] = await ctl(fleet, *asked[i])

    async with anyio.create_task_group() as tg:
        for i in range(len(asked)):
            tg.start_soon(ask, i)
    return [answers[i] for i in range(len(asked))]


async def call(fleet: Fleet, method: str, parameters: dict[str, Any]) -> dict[str, Any]:
    def run() -> dict[str, Any]:
        with Client(fleet.daemon.control) as client:
            return client.call(method, parameters)

    return await anyio.to_thread.run_sync(run)


async def desired_row(dsn: str, session_id: str) -> tuple[str, str | None, str] | None:
    """(state, reason, origin) of the session's desired row, as another connection reads it."""
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        cur = await conn.execute(
            "SELECT state, reason, origin FROM desired_sessions WHERE session_id = %s", (session_id,)
        )
        row = await cur.fetchone()
    return None if row is None else (row[0], row[1], row[2])


async def next_notice(told: ObjectReceiveStream[Received]) -> Received:
    with anyio.fail_after(5):
        return await told.receive()


async def test_a_verb_that_only_the_owner_can_answer_exits_69_with_the_owner_its_host_and_epoch(
    fleet: Fleet,
) -> None:
    shard = shard_of("wm-1")
    expected = {
        "error": "io.sessionsupervisor.control.v1.NotOwner",
        "sessionId": "wm-1",
        "shard": shard,
        "owner": PEER,
        "host": "host-b",
        "epoch": fleet.peer_epochs[shard],
    }
    asked = [
        ("show", "wm-1", "--json"),
        ("send", "wm-1", "hello", "--json"),
        ("agent-state", "wm-1", "Available", "--json"),
        ("show", "wm-0", "--json"),
    ]
    answers = dict(zip(asked, await ctls(fleet, *asked), strict=True))
    for args in asked[:3]:
        done = answers[args]
        assert done.returncode == EX_NOT_OWNER, (args, done.stderr)
        answer = json.loads(done.stdout)
        assert {k: answer[k] for k in expected} == expected, args
        assert f"owned by {PEER} on host-b" in answer["problem"]
        assert "NotOwner" in done.stderr
    # the daemon's own session answers as ever
    shown = answers[asked[3]]
    assert shown.returncode == 0 and json.loads(shown.stdout)["session"]["state"] == "active"


async def test_stop_and_start_of_a_peers_session_are_recorded_for_it_and_its_owner_told(
    fleet: Fleet,
) -> None:
    shard = shard_of("wm-1")
    assert "wm-1" not in fleet.daemon.runners  # never run here: its shard is the peer's
    # an id no configuration declares and the store does not hold: refused, nothing written
    stopped, unknown = await ctls(fleet, ("stop", "wm-1", "--json"), ("stop", "wm-added-b", "--json"))
    assert unknown.returncode == 1 and json.loads(unknown.stdout)["error"].endswith("NoSuchSession")
    assert await desired_row(fleet.dsn, "wm-added-b") is None
    assert stopped.returncode == 0, stopped.stderr
    answer = json.loads(stopped.stdout)
    assert answer == {
        "sessionId": "wm-1",
        "state": "requested",
        "forwarded": {"owner": PEER, "host": "host-b", "shard": shard, "epoch": fleet.peer_epochs[shard]},
    }
    # durable once ctl returned: another connection reads it
    assert await desired_row(fleet.dsn, "wm-1") == ("stopped", "ctl stop", "config")
    notice = await next_notice(fleet.told)
    assert notice.channel == "ss_desired"
    assert notice.body == {"member": HERE, "sessionId": "wm-1", "shard": shard, "change": "stop"}

    started = await ctl(fleet, "start", "wm-1")
    assert started.returncode == 0, started.stderr
    assert started.stdout.strip() == (
        f"started wm-1: requested (re-authenticating): recorded for {PEER} on host-b, "
        f"shard {shard} epoch {fleet.peer_epochs[shard]}"
    )
    assert await desired_row(fleet.dsn, "wm-1") == ("running", None, "config")
    assert (await next_notice(fleet.told)).body["change"] == "start"
    assert "wm-1" not in fleet.daemon.runners  # the owner acts on it, not this member


async def test_sessions_added_and_removed_in_a_peers_shard_are_recorded_for_it(fleet: Fleet) -> None:
    entry = {"id": "wm-added-b", "kind": "webmessaging"}
    added = await call(fleet, Method.ADD_SESSION, {"sessions": [entry]})
    assert added["added"] == 1
    (result,) = added["results"]
    assert result["state"] == "requested" and result["forwarded"]["owner"] == PEER
    assert await desired_row(fleet.dsn, "wm-added-b") == ("running", None, "api")
    notice = await next_notice(fleet.told)
    assert notice.body == {
        "member": HERE,
        "sessionId": "wm-added-b",
        "shard": shard_of("wm-added-b"),
        "change": "add",
    }
    assert "wm-added-b" not in fleet.daemon.runners
    # the same id again, from this member: it exists (added over a control socket)
    again = await call(fleet, Method.ADD_SESSION, {"sessions": [entry]})
    assert again["refused"] == 1 and again["results"][0]["error"].endswith("SessionExists")

    # as a script removes them: one line each (the configured one refused, exit 1)
    text = await ctl(fleet, "sessions", "remove", "wm-added-b", "wm-1")
    assert text.returncode == 1
    assert text.stdout.splitlines() == [
        f"removed wm-added-b: recorded for {PEER} on host-b, shard {shard_of('wm-added-b')} "
        f"epoch {fleet.peer_epochs[shard_of('wm-added-b')]}"
    ]
    assert "ConfiguredSession" in text.stderr
    assert await desired_row(fleet.dsn, "wm-added-b") is None
    assert (await next_notice(fleet.told)).body["change"] == "remove"
    # added again, and removed as the API answers it: one result per id
    await call(fleet, Method.ADD_SESSION, {"sessions": [entry]})
    assert (await next_notice(fleet.told)).body["change"] == "add"
    removed = await call(fleet, Method.REMOVE_SESSION, {"sessionIds": ["wm-added-b", "wm-1"]})
    first, second = removed["results"]
    assert first == {
        "sessionId": "wm-added-b",
        "removed": True,
        "state": "requested",
        "forwarded": {
            "owner": PEER,
            "host": "host-b",
            "shard": shard_of("wm-added-b"),
            "epoch": fleet.peer_epochs[shard_of("wm-added-b")],
        },
    }
    # a session of the configuration file is removed by editing the file, on any member
    assert second["removed"] is False and second["error"].endswith("ConfiguredSession")
    assert await desired_row(fleet.dsn, "wm-added-b") is None
    assert (await next_notice(fleet.told)).body["change"] == "remove"


async def test_status_shows_the_fleet(fleet: Fleet) -> None:
    done, text = await ctls(fleet, ("status", "--json"), ("status",))
    assert done.returncode == 0, done.stderr
    view = json.loads(done.stdout)["fleet"]
    assert view["member"] == HERE
    members = {m["member"]: m for m in view["members"]}
    assert set(members) == {HERE, PEER}
    assert members[HERE]["shards"] == 254 and members[HERE]["mine"] is True
    assert members[PEER] | {"heartbeatAgeSeconds": 0} == {
        "member": PEER,
        "host": "host-b",
        "state": "active",
        "live": True,
        "shards": 2,
        "heartbeatAgeSeconds": 0,
        "mine": False,
    }
    assert 0 <= members[PEER]["heartbeatAgeSeconds"] < 60 and view["problem"] is None
    shards = view["shards"]
    assert [s["shard"] for s in shards] == list(range(256))
    assert {s["shard"] for s in shards if s["mine"]} == set(ALL_SHARDS - PEERS_SHARDS)
    assert all(
        s["owner"] == PEER and s["epoch"] == fleet.peer_epochs[s["shard"]] for s in shards if not s["mine"]
    )
    assert all(s["owner"] == HERE and s["epoch"] >= 1 for s in shards if s["mine"])

    lines = text.stdout.splitlines()
    assert f"fleet: member {HERE}, 2 members, 254 of 256 shards mine" in lines
    assert any(line.startswith(f"  member {PEER} on host-b: active, 2 shards") for line in lines)


async def test_the_owner_follows_what_a_peer_wrote_for_its_sessions(fleet: Fleet, pg_url: str) -> None:
    """The peer's writes (its FleetDesk, on a store connection of its own) and their notices, as the
    owner's fleet bus delivers them, handed to the daemon's follower."""
    daemon = fleet.daemon
    store = await PgStore.open(pg_url)
    peer = FleetDesk(store, PEER, lambda: 1000.0)

    async def told() -> None:
        notice = await next_notice(fleet.told)
        daemon.supervisor.follower.on_desired(notice)

    try:
        first = daemon.runners["wm-0"]
        # a notice of our own, or malformed, changes nothing
        follower = daemon.supervisor.follower
        dropped = follower.dropped
        follower.on_desired(Received("ss_desired", json.dumps({"member": HERE, "sessionId": "wm-0"}), 0))
        follower.on_desired(Received("ss_desired", "not json", 0))
        assert follower.dropped == dropped + 2

        assert await peer.desire("wm-0", "genesys", DesiredState.STOPPED, "ctl stop") is not None
        await told()
        await daemon.wait(lambda: first.core.terminated)
        assert daemon.durable is not None and daemon.durable.was_down("wm-0")

        await peer.desire("wm-0", "genesys", DesiredState.RUNNING, None)
        await told()
        await daemon.wait(lambda: daemon.runners["wm-0"] is not first)
        await daemon.wait(lambda: daemon.runners["wm-0"].state is SessionState.ACTIVE)

        spec = json.dumps({"id": "wm-added-a", "kind": "webmessaging", "platform": "genesys"})
        row = DesiredSession("wm-added-a", "genesys", DesiredState.RUNNING, None, origin="api", spec=spec)
        assert await peer.add([row]) != [None]
        await told()
        await daemon.wait(lambda: "wm-added-a" in daemon.runners)
        await daemon.wait(lambda: daemon.runners["wm-added-a"].state is SessionState.ACTIVE)

        assert await peer.remove("wm-added-a") is not None
        await told()
        await daemon.wait(lambda: "wm-added-a" not in daemon.runners)
        assert daemon.supervisor.sessions.origin_of("wm-added-a") is None

        # a notice lost (the bus was reconnecting): its reconnection re-reads every owned row
        running = daemon.runners["wm-0"]
        await peer.desire("wm-0", "genesys", DesiredState.STOPPED, "ctl stop")
        follower.on_listening(True)
        await daemon.wait(lambda: running.core.terminated)
    finally:
        await store.aclose()


async def outbox(dsn: str, conversation_id: str) -> list[tuple[str, str]]:
    """(status, tenant) of the conversation's outbox rows."""
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        cur = await conn.execute(
            "SELECT status, tenant FROM outbox WHERE conversation_id = %s ORDER BY id", (conversation_id,)
        )
        return [(str(r[0]), str(r[1])) for r in await cur.fetchall()]


async def test_an_attribute_update_of_a_peers_session_is_kept_for_its_owner_and_the_owner_told(
    fleet: Fleet,
) -> None:
    scheduled = fleet.daemon.service.scheduler.pending()
    done = await ctl(fleet, "attributes", "set", "wm-1", "survey=yes", "--json")
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["accepted"] is True and answer["conversationId"] == PEERS_CONVERSATION
    # in the outbox, for the owner to send; not scheduled here
    assert await outbox(fleet.dsn, PEERS_CONVERSATION) == [("pending", "genesys:demo-client")]
    assert fleet.daemon.service.scheduler.pending() == scheduled
    notice = await next_notice(fleet.told)
    assert notice.channel == "ss_attributes"
    assert notice.body == {
        "member": HERE,
        "sessionId": "wm-1",
        "shard": shard_of("wm-1"),
        "tenant": "genesys:demo-client",
        "conversationId": PEERS_CONVERSATION,
    }


async def test_the_owner_sends_an_update_a_peer_accepted_for_its_session(fleet: Fleet, pg_url: str) -> None:
    daemon = fleet.daemon
    conversation = daemon.runners["wm-0"].context.conversation_id
    assert conversation is not None
    store = await PgStore.open(pg_url)
    try:  # the peer's acceptance: the row in the outbox, and its notice
        submitted = Submission(
            "u-peer", "genesys:demo-client", "wm-0", conversation, {"survey": "yes"}, frozenset(), 1000.0
        )
        assert (await store.submit(submitted, 50)).accepted
        await FleetDesk(store, PEER, lambda: 1000.0).attributes_submitted(
            "wm-0", "genesys:demo-client", conversation
        )
    finally:
        await store.aclose()
    scheduled = daemon.service.scheduler.pending()
    daemon.supervisor.follower.on_attributes(await next_notice(fleet.told))
    assert daemon.service.scheduler.pending() == scheduled + 1
    await daemon.service.run_due()  # sent from here, the owner
    rows = await outbox(fleet.dsn, conversation)
    assert [status for status, _ in rows] in (["accepted"], ["verified"]), rows


async def test_two_members_on_the_fleet_bus_a_stop_asked_of_one_is_done_by_the_other(
    genesys_sim: Any, tmp_path: Path, pg_dsn: str, pg_url: str
) -> None:
    """Two daemons sharing the store, each with its fleet bus (supervisor/fleet/bus.py) and its follower
    registered on it: ``ctl stop``/``ctl start`` asked of member A for member B's session, done by B."""
    from supervisor.fleet.bus import FleetBus

    members = {HERE: ALL_SHARDS - PEERS_SHARDS, PEER: PEERS_SHARDS}
    config = genesys_config(genesys_sim.urls, 2) + f'[store]\nurl = "{pg_url}"\n'
    opened = await PgStore.open(pg_url)
    await opened.aclose()
    async with contextlib.AsyncExitStack() as stack:
        daemons: dict[str, Harness] = {}
        for member, shards in members.items():
            home = tmp_path / member
            (home / "sockets").mkdir(parents=True)
            api = ApiSockets((home / "sockets" / "s.sock", home / "sockets" / "c.sock"))
            leases = TableLeases(pg_dsn, member, f"host-{member}", shards)
            daemon = await stack.enter_async_context(
                supervised(config, home, durable=True, sockets=api, leases=leases)
            )
            bus = FleetBus(pg_dsn, member=member)
            daemon.supervisor.follower.register(bus)  # what the daemon's fleet member does with its bus
            await daemon.tg.start(bus.serve)
            stack.push_async_callback(bus.aclose)
            daemons[member] = daemon
        a, b = daemons[HERE], daemons[PEER]
        await a.wait_active(1)
        await b.wait_active(1)
        assert set(a.runners) == {"wm-0"} and set(b.runners) == {"wm-1"}
        first = b.runners["wm-1"]

        def on_a(*args: str) -> subprocess.CompletedProcess[str]:
            return _ctl(a.control, *args)

        stopped = await anyio.to_thread.run_sync(lambda: on_a("stop", "wm-1", "--json"))
        assert stopped.returncode == 0, stopped.stderr
        assert json.loads(stopped.stdout)["forwarded"]["owner"] == PEER
        await b.wait(lambda: first.core.terminated)
        assert first.termination is not None and first.termination.reason is TerminationReason.STOPPED

        started = await anyio.to_thread.run_sync(lambda: on_a("start", "wm-1", "--json"))
        assert started.returncode == 0, started.stderr
        await b.wait(lambda: b.runners["wm-1"] is not first)
        await b.wait(lambda: b.runners["wm-1"].state is SessionState.ACTIVE)
        assert "wm-1" not in a.runners


async def ctls_at(control: Path, *asked: tuple[str, ...]) -> list[subprocess.CompletedProcess[str]]:
    """``ctl`` calls against ``control``, one after the other, in a worker thread."""
    return await anyio.to_thread.run_sync(lambda: [_ctl(control, *args) for args in asked])


async def test_two_run_processes_on_one_store_answer_for_each_others_sessions(
    genesys_sim: Any, tmp_path: Path, pg_dsn: str, pg_url: str
) -> None:
    """``session-supervisor run`` twice on one PostgreSQL store (two fleet members, PgLeases), as the
    three-member example of docs/store.md runs them: each session runs on one member; the other one's
    ``ctl`` answers 69 with who runs it, takes a stop for it (the owner stops it), and shows the fleet."""
    configs = {}
    for member in ("m1", "m2"):
        home = tmp_path / member
        (home / "sockets").mkdir(parents=True)
        text = sockets_table(home / "sockets" / "subscribe.sock", home / "sockets" / "control.sock")
        text += genesys_config(genesys_sim.urls, 4)
        text += f'[store]\nurl = "{pg_url}"\n[fleet]\nmember = "{member}"\nhost = "host-{member}"\n'
        configs[member] = config_file(home, text)
    async with running_daemon(configs["m1"]) as m1, running_daemon(configs["m2"]) as m2:
        daemons = {"m1": m1, "m2": m2}

        async def everyone_active() -> bool:
            counts = [
                (await d.acall(Method.STATUS))["sessions"]["byState"].get("active", 0) for d in (m1, m2)
            ]
            return sum(counts) == 4

        with anyio.fail_after(45):
            await m1.wait_ready(0)
            await m2.wait_ready(0)
            while True:
                if await everyone_active():
                    break
                await anyio.sleep(0.05)  # polling the daemons' state, not waiting for a timer
        # a member that does not run a session, and the session: asked again should the shard move to
        # it in between (the two balance their shares for a while after they start)
        for _ in range(20):
            views = {name: (await d.acall(Method.STATUS))["fleet"] for name, d in daemons.items()}
            asker, session = next(
                (name, f"wm-{i}")
                for name in ("m2", "m1")
                for i in range(4)
                if not views[name]["shards"][shard_of(f"wm-{i}")]["mine"]
            )
            owner = "m1" if asker == "m2" else "m2"
            control = daemons[asker].control
            shown, status = await ctls_at(control, ("show", session, "--json"), ("status", "--json"))
            if shown.returncode != 0:
                break
        assert shown.returncode == EX_NOT_OWNER, shown.stderr
        refusal = json.loads(shown.stdout)
        assert (refusal["sessionId"], refusal["owner"], refusal["host"]) == (session, owner, f"host-{owner}")
        assert refusal["shard"] == shard_of(session) and refusal["epoch"] >= 1
        fleet = json.loads(status.stdout)["fleet"]
        assert fleet["member"] == asker and {m["member"] for m in fleet["members"]} == {"m1", "m2"}

        stopped = await anyio.to_thread.run_sync(lambda: _ctl(control, "stop", session, "--json"))
        assert stopped.returncode == 0, stopped.stderr
        assert json.loads(stopped.stdout)["forwarded"]["owner"] == owner
        async with await psycopg.AsyncConnection.connect(pg_dsn) as conn:
            cur = await conn.execute("SELECT state FROM desired_sessions WHERE session_id = %s", (session,))
            assert await cur.fetchone() == ("stopped",)

        # the owner heard it on its fleet bus and stopped the session (or, the shard having moved
        # meanwhile as the two balance their shares, the next owner read the row and kept it down)
        async def active_anywhere() -> bool:
            for d in (m1, m2):
                listed = await d.acall(Method.LIST_SESSIONS, {"sessions": [session]})
                if any(row["state"] == "active" for row in listed["sessions"]):
                    return True
            return False

        with anyio.fail_after(20):
            while True:
                if not await active_anywhere():
                    break
                await anyio.sleep(0.05)  # polling the daemons' state, not waiting for a timer
