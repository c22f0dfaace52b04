"""Sessions as data, as a script uses them: ``ctl sessions add`` / ``remove``, selectors, origins.

Every process is a real one (the daemon, each ``ctl``), against the Genesys simulator over loopback
sockets, with a real SQLite store. The names and exit codes asserted are the interface scripts rely
on: ``ctl sessions add ID --kind K [--json]``, ``--spec JSON``, ``--from -`` (exit 0 only when every
entry was added, 1 when any was refused), ``ctl sessions remove ID...``, the ``origin`` field
(``config`` or ``api``) of ``ctl sessions --json`` and the snapshot, and the selectors of ``start``.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from supervisor.api.protocol import Method
from supervisor.config import SessionKind, SessionSpec, load_config
from supervisor.runtime.durable import Durable
from supervisor.runtime.supervisor import Supervisor, session_table
from supervisor.runtime.wiring import SESSIONS_PER_CLIENT, Wiring
from supervisor.sim.genesys import GenesysSimConfig, GenesysSimulator
from supervisor.vocabulary import Platform
from tests.harness.config import daemon_config
from tests.harness.process import CLI, Daemon, running_daemon

pytestmark = [
    pytest.mark.integration,
    pytest.mark.anyio,
    pytest.mark.genesys_sim(GenesysSimConfig(rate_limit=1_000_000), seed=71),
]


@pytest.fixture
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="ss-add-", dir="/tmp") as d:
        yield Path(d)


async def ctl(
    daemon: Daemon, *args: str, stdin: bytes | None = None
) -> tuple[int, list[dict[str, Any]], str]:
    """``ctl ARGS``: exit code, every JSON object printed (one per line), stderr."""
    done = await anyio.run_process(
        [*CLI, "ctl", "--socket", str(daemon.control), *args], input=stdin, check=False
    )
    lines = [json.loads(line) for line in done.stdout.decode().splitlines() if line.startswith("{")]
    return done.returncode, lines, done.stderr.decode()


async def origins(daemon: Daemon) -> dict[str, str]:
    rows = (await daemon.acall(Method.LIST_SESSIONS))["sessions"]
    return {row["sessionId"]: row["origin"] for row in rows}


async def active(daemon: Daemon, session_id: str, limit_s: float = 30.0) -> None:
    with anyio.fail_after(limit_s):
        while True:
            row = (await daemon.acall(Method.SHOW_SESSION, {"sessionId": session_id}))["session"]
            if row["state"] == "active":
                return
            await anyio.sleep(0.05)  # polling the daemon's state, not waiting for a timer


def guest_sessions(sim: GenesysSimulator) -> int:
    """How many guest sessions the platform opened (a configureSession with a new token)."""
    return sim.recorder.ws_messages("webmessaging", "in", "configureSession")


async def test_an_added_session_runs_survives_a_restart_and_a_reload_and_is_removed_for_good(
    genesys_sim: GenesysSimulator, workdir: Path
) -> None:
    store = workdir / "store.sqlite3"
    config = daemon_config(genesys_sim.urls, workdir, [("wm-0", None)], store=store)
    async with running_daemon(config) as daemon:
        await daemon.wait_ready(1)
        code, (answer,), err = await ctl(
            daemon, "sessions", "add", "wm-9", "--kind", "webmessaging", "--json"
        )
        assert code == 0, err
        assert answer["added"] is True and answer["sessionId"] == "wm-9"
        assert (answer["platform"], answer["kind"], answer["origin"]) == ("genesys", "webmessaging", "api")
        await active(daemon, "wm-9")
        assert await origins(daemon) == {"wm-0": "config", "wm-9": "api"}
        # the selector by origin, as a script lists them
        code, (listed,), err = await ctl(daemon, "sessions", "--origin", "api", "--json")
        assert code == 0, err
        assert [row["sessionId"] for row in listed["sessions"]] == ["wm-9"]

        # a reload of a file that changed leaves the added session alone (no new guest session)
        opened = guest_sessions(genesys_sim)
        config.write_text(config.read_text().replace("seed = 7", "seed = 8"))
        code, _, err = await ctl(daemon, "reload", "--json")
        assert code == 0, err
        assert guest_sessions(genesys_sim) == opened
        assert await origins(daemon) == {"wm-0": "config", "wm-9": "api"}
        await daemon.stop()

    # a restart: the added session comes back from the store, still the control socket's
    async with running_daemon(config) as daemon:
        await daemon.wait_ready(2)
        assert await origins(daemon) == {"wm-0": "config", "wm-9": "api"}
        code, (removed,), err = await ctl(daemon, "sessions", "remove", "wm-9", "--json")
        assert code == 0, err
        assert removed == {"sessionId": "wm-9", "removed": True}
        # closed cleanly, as stop closes it: close 1000 (the daemon's own record of its end)
        ended = await daemon.arrived("SESSION_TERMINATED", lambda e: e.get("sessionId") == "wm-9")
        assert ended and ended[-1]["reason"] == "STOPPED"
        # the file's session cannot be removed this way; an unknown id neither (exit 1, typed)
        code, refused, err = await ctl(daemon, "sessions", "remove", "wm-0", "nope", "--json")
        assert code == 1
        assert [(r["sessionId"], r["error"]) for r in refused] == [
            ("wm-0", "io.sessionsupervisor.control.v1.ConfiguredSession"),
            ("nope", "io.sessionsupervisor.control.v1.NoSuchSession"),
        ]
        await daemon.stop()

    # it stays gone after a restart
    async with running_daemon(config) as daemon:
        await daemon.wait_ready(1)
        assert await origins(daemon) == {"wm-0": "config"}
        await daemon.stop()


async def test_ids_are_unique_across_origins_both_ways_and_bad_entries_are_located(
    genesys_sim: GenesysSimulator, workdir: Path
) -> None:
    store = workdir / "store.sqlite3"
    config = daemon_config(genesys_sim.urls, workdir, [("wm-0", None)], store=store)
    async with running_daemon(config) as daemon:
        await daemon.wait_ready(1)
        # the file's id, refused over the control socket
        code, (refused,), err = await ctl(
            daemon, "sessions", "add", "wm-0", "--kind", "webmessaging", "--json"
        )
        assert code == 1
        assert refused["error"] == "io.sessionsupervisor.control.v1.SessionExists"
        assert refused["origin"] == "config"
        assert "SessionExists" in err and "wm-0" in err
        # NDJSON: one added, one located refusal per bad line, one duplicate of an earlier line
        lines = [
            {"id": "wm-5", "kind": "webmessaging"},
            {"id": "wm-6", "kind": "chat"},
            {"id": "wm-7", "kind": "agent-session", "platform": "genesys"},
            {"id": "wm-5", "kind": "webmessaging"},
        ]
        stdin = ("\n".join(json.dumps(line) for line in lines) + "\nnot json\n").encode()
        code, answers, err = await ctl(daemon, "sessions", "add", "--from", "-", "--json", stdin=stdin)
        assert code == 1, err
        by_line = {a["line"]: a for a in answers}
        assert by_line[1]["added"] is True
        assert by_line[2]["error"].endswith("InvalidSessionSpec")
        assert by_line[2]["problem"].startswith("AddSession: sessions[1].kind: invalid enum value 'chat'")
        assert (
            by_line[3]["problem"]
            == "AddSession: sessions[2].kind: a genesys session is 'webmessaging' or 'notifications'"
        )
        assert by_line[4]["error"].endswith("SessionExists") and by_line[4]["origin"] == "api"
        assert by_line[5]["problem"].startswith("stdin line 5: not JSON")
        await active(daemon, "wm-5")
        # the other way: a file that now declares an added id is refused, with one line naming it
        config.write_text(
            config.read_text() + '[[sessions]]\nid = "wm-5"\nplatform = "genesys"\nkind = "webmessaging"\n'
        )
        code, _, err = await ctl(daemon, "reload")
        assert code == 1
        (line,) = [x for x in err.splitlines() if x]
        assert "sessions[1].id: session 'wm-5' was added over the control socket" in line
        assert await origins(daemon) == {"wm-0": "config", "wm-5": "api"}
        await daemon.stop()


async def test_adding_without_a_store_is_refused(genesys_sim: GenesysSimulator, workdir: Path) -> None:
    config = daemon_config(genesys_sim.urls, workdir, [("wm-0", None)])
    async with running_daemon(config, env={"STATE_DIRECTORY": ""}) as daemon:
        await daemon.wait_ready(1)
        code, (refused,), err = await ctl(
            daemon, "sessions", "add", "--spec", '{"id": "wm-1", "kind": "webmessaging"}', "--json"
        )
        assert code == 1
        assert refused["error"] == "io.sessionsupervisor.control.v1.NoStore"
        assert "nothing was added" in err
        assert await origins(daemon) == {"wm-0": "config"}
        await daemon.stop()


async def test_the_http_pools_grow_with_the_sessions_added(
    genesys_sim: GenesysSimulator, workdir: Path
) -> None:
    """One pool per 32 sessions of a platform, whatever their origin: a file with one session has one
    pool; 70 sessions added make it three, each sized for its share (a pool made for the one session
    keeps room for 32). The sessions' calls are spread over all of them."""
    store = workdir / "store.sqlite3"
    path = daemon_config(genesys_sim.urls, workdir, [("wm-0", None)], store=store)
    config = load_config(path)
    async with Wiring(config, config_dir=path.parent, environ={}) as wiring:
        sessions = session_table(wiring)
        durable = await Durable.open(
            config, sessions=sessions, wiring=wiring, environ={}, bus=wiring.bus, clock=wiring.clock
        )
        supervisor = Supervisor(wiring, durable, sessions=sessions)
        try:
            async with anyio.create_task_group() as tg:
                await tg.start(supervisor.serve)
                assert wiring.pool_sizes(Platform.GENESYS) == [2 * SESSIONS_PER_CLIENT + 20]
                specs = [
                    SessionSpec(f"wm-a{i}", Platform.GENESYS, SessionKind.WEBMESSAGING) for i in range(70)
                ]
                await supervisor.add_sessions(specs)
                assert wiring.pool_sizes(Platform.GENESYS) == [2 * SESSIONS_PER_CLIENT + 20] * 3
                pools = {id(wiring.pipeline_for(Platform.GENESYS, s.id).client) for s in specs}
                assert len(pools) == 3
                # removing sessions leaves the pools (the next sessions added use them)
                await supervisor.remove_session("wm-a0")
                assert len(wiring.pool_sizes(Platform.GENESYS)) == 3
                await supervisor.shutdown(2.0)
                tg.cancel_scope.cancel()
        finally:
            await durable.aclose()


async def test_a_notifications_session_past_the_clients_channels_is_refused_channel_limit(
    genesys_sim: GenesysSimulator, workdir: Path
) -> None:
    """``ChannelLimit`` as a script sees it: with one topic a channel the client's 20 channels carry
    20 agents; the 21st entry of one ``ctl sessions add --from -`` is refused, exit 1, the others added."""
    store = workdir / "store.sqlite3"
    config = daemon_config(genesys_sim.urls, workdir, [], store=store)
    text = config.read_text().replace(
        "[platforms.genesys.keepalive]\n",
        "sharedChannels = true\ntopicsPerChannel = 1\n[platforms.genesys.keepalive]\n",
        1,
    )
    config.write_text(text)
    async with running_daemon(config) as daemon:
        await daemon.wait_ready(0)
        lines = [{"id": f"nt-{i}", "kind": "notifications", "agentId": f"a-{i}"} for i in range(21)]
        stdin = ("\n".join(json.dumps(line) for line in lines) + "\n").encode()
        code, answers, err = await ctl(daemon, "sessions", "add", "--from", "-", "--json", stdin=stdin)
        assert code == 1, err
        by_line = {a["line"]: a for a in answers}
        assert all(by_line[i]["added"] is True for i in range(1, 21))
        refused = by_line[21]
        assert refused["error"] == "io.sessionsupervisor.control.v1.ChannelLimit"
        assert (refused["sessionId"], refused["channels"], refused["topics"]) == ("nt-20", 20, 1)
        assert "ChannelLimit" in err and "nt-20" in err
        assert "nt-20" not in await origins(daemon)
        await daemon.stop()
