"""Reloads that race, files that are not files, a SIGTERM during a reload.

* A FIFO put where the configuration or a credential file was: the reload is refused in one line
  (``CONFIG_RELOAD_FAILED``) while the daemon goes on answering its control socket, the FIFO still
  there and nobody writing it (the daemon as a child process, as users run it).
* ``ctl reload`` and SIGHUP at once, while the file flips between configurations: a property test
  against the daemon in this process, over the real reload paths (a real SIGHUP to this process,
  the control socket's ``Reload`` verb over a real Unix socket), against the simulator on loopback.
* A removal takes out only the runner it stopped; a session the store kept down is removed or
  changed without an error.
* A SIGTERM while a reload waits for a session's close starts the drain at once.
"""

from __future__ import annotations

import contextlib
import os
import signal
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from supervisor.api.protocol import Method
from supervisor.bus import EventBus
from supervisor.clock import SystemClock
from supervisor.config import Config, SocketsConfig, load_config, parse_config
from supervisor.runtime.assembly import socket_api
from supervisor.runtime.durable import Durable
from supervisor.runtime.main import run_daemon
from supervisor.runtime.reload import Reloader, ReloadRequests, answer
from supervisor.runtime.supervisor import Supervisor, session_table
from supervisor.runtime.wiring import Wiring
from supervisor.sim.cxone import CxoneSimulator
from supervisor.sim.faults import Fault, FaultKind
from supervisor.sim.genesys import GenesysSimulator
from supervisor.store import DesiredSession, DesiredState, SqliteStore
from tests.conftest import REAL_DAEMON
from tests.harness.config import cxone_config, daemon_config, genesys_config
from tests.harness.in_process import Recorded, supervised
from tests.harness.process import CLI, running_daemon
from tests.harness.simulators import StartCxone
from tests.harness.waits import wait_until
from tests.integration.api_harness import Conn

pytestmark = [
    pytest.mark.integration,
    pytest.mark.anyio,
    pytest.mark.genesys_sim(seed=23),
    pytest.mark.cxone_sim(seed=23),
]


@contextlib.contextmanager
def short_dir() -> Iterator[Path]:
    """A working directory whose socket paths fit sun_path (pytest's tmp_path may not)."""
    with tempfile.TemporaryDirectory(prefix="ss-rl-", dir="/tmp") as d:
        yield Path(d)


def sessions_text(urls: dict[str, str], agents: dict[str, str], cxone: dict[str, str] | None = None) -> str:
    """Sessions by id -> agentId (a changed agentId is a changed session): Web Messaging ones, and
    CXone agent sessions for the ids starting with "c" (``cxone``: the CXone simulator's URLs)."""
    text = genesys_config(urls, 0)
    if cxone is not None:
        # the harness's CXone table (its credential files: cxone-secret, cxone-password), not its [daemon]
        cx = cxone_config(cxone, 0)
        text += cx[cx.index("[platforms.cxone]") :]
    for session_id, agent in agents.items():
        if session_id.startswith("c"):
            kind = f'platform = "cxone"\nkind = "agent-session"\nstationId = "station-{agent}"'
        else:
            kind = 'platform = "genesys"\nkind = "webmessaging"'
        text += f'[[sessions]]\nid = "{session_id}"\n{kind}\nagentId = "{agent}"\n'
    return text


def replace(path: Path, text: str) -> None:
    """Write ``path`` the way an editor or a configuration manager does: a new file renamed over it."""
    staged = path.with_name(path.name + ".new")
    staged.write_text(text)
    os.replace(staged, path)


# -- point 6: a FIFO in place of a file ------------------------------------------------------------


@pytest.mark.parametrize("which", ["configuration", "credential"])
async def test_a_fifo_in_place_of_a_file_is_one_line_and_the_daemon_goes_on_answering(
    genesys_sim: GenesysSimulator, which: str
) -> None:
    """Formerly the reload blocked the event loop in open(2) (a FIFO's open waits for a
    writer): no control answer, no keepalive, SIGTERM ignored. Now: one line, and the daemon answers
    while the FIFO is still there and nobody writes it."""
    conv = genesys_sim.create_conversation()
    with short_dir() as workdir:
        config = daemon_config(genesys_sim.urls, workdir, [("wm-0", conv.id)])
        target = config if which == "configuration" else workdir / "genesys-secret"
        expected = (
            f"{target}: not a regular file (a FIFO)"
            if which == "configuration"
            else f"platforms.genesys.clientSecretFile: credential file {target} is not a regular file (a FIFO)"
        )
        async with running_daemon(config) as daemon:
            await daemon.wait_ready(1)
            content = target.read_bytes()
            target.unlink()
            os.mkfifo(target)
            daemon.process.send_signal(signal.SIGHUP)
            await wait_until(lambda: bool(daemon.named("CONFIG_RELOAD_FAILED")), 20)
            (failed,) = daemon.named("CONFIG_RELOAD_FAILED")
            assert failed["error"] == expected
            # the FIFO is still there, nobody writes it: the loop is free, the session still served
            status = await daemon.acall(Method.STATUS)
            assert status["sessions"]["byState"] == {"active": 1}
            refused = await anyio.run_process(
                [*CLI, "ctl", "--socket", str(daemon.control), "reload"], check=False
            )
            assert refused.returncode == 1
            assert refused.stderr.decode().splitlines() == [
                f"session-supervisor: error: io.sessionsupervisor.control.v1.ReloadFailed: {expected}"
            ]
            # the file is back: the next reload is applied
            target.unlink()
            target.write_bytes(content)
            daemon.process.send_signal(signal.SIGHUP)
            await wait_until(lambda: bool(daemon.named("CONFIG_RELOADED")), 20)
            assert await daemon.stop() == 0
        assert "Traceback" not in daemon.err


# -- point 7: one reload at a time -------------------------------------------------------------------


async def test_a_removal_takes_out_only_the_runner_it_stopped(
    cxone_sim: CxoneSimulator, tmp_path: Path
) -> None:
    """While a removal waits for its runner's close (a CXone DELETE the platform holds), the session
    is started again (what a second reload re-adding it does): the removal must leave the new
    runner in the table, and stop nothing but its own."""
    async with supervised(cxone_config(cxone_sim.urls, 1), tmp_path) as h:
        supervisor = h.supervisor
        await h.wait(lambda: h.all_in("active"))
        first = supervisor.runners["cx-0"]
        (spec,) = supervisor.config.sessions
        held = cxone_sim.faults.inject(Fault(kind=FaultKind.BLACKHOLE, endpoint="DELETE *"))
        assert held.id is not None
        held_id = held.id
        async with anyio.create_task_group() as tg:
            tg.start_soon(supervisor.remove, "cx-0")
            await h.wait(lambda: cxone_sim.recorder.fault_hits(held_id) == 1)  # its close is held
            second = supervisor.start(spec)
            cxone_sim.faults.clear(held_id)
        assert first.core.terminated and supervisor.runners.get("cx-0") is second
        await h.wait(lambda: second.state.value == "active")
        assert not second.core.terminated


@pytest.mark.parametrize("kind", ["webmessaging", "notifications"])
async def test_a_session_removed_while_it_opens_leaves_no_connection_at_the_platform(
    genesys_sim: GenesysSimulator, tmp_path: Path, kind: str
) -> None:
    """A reload removes a session whose socket is open but whose configureSession (or subscribe)
    is still unanswered: its runner is stopped, which cancels the open. The socket must go with it.
    (Found by the overlapping-reloads property test: the cancelled open left the socket to its
    keepalive pings, connected at the platform with no runner serving it.)"""
    text = genesys_config(
        genesys_sim.urls, 1 if kind == "webmessaging" else 0, notifications=int(kind == "notifications")
    )
    # the socket opens, then nothing it sends is answered (read paused) until the fault is cleared
    held = genesys_sim.faults.inject(Fault(kind=FaultKind.BLACKHOLE, endpoint="WS *"))
    assert held.id is not None
    held_id = held.id
    listener = "webmessaging" if kind == "webmessaging" else "streaming"
    try:
        async with supervised(text, tmp_path) as h:
            await h.wait(lambda: genesys_sim.recorder.fault_hits(held_id) == 1, 20)  # its first frame is held
            (session_id,) = h.runners
            await h.supervisor.remove(session_id)
            assert h.runners == {}
            genesys_sim.faults.clear(held_id)  # the platform reads again: a socket still there stays open
            await h.wait(lambda: genesys_sim.recorder.connections_open(listener) == 0, 20)
    finally:
        genesys_sim.faults.clear(held_id)


async def test_a_session_the_store_kept_down_is_removed_or_changed_without_an_error(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    """A session stopped with `ctl stop` has no runner after a restart (the store keeps it down):
    a reload that changes it keeps it down, one that removes it forgets it; neither raises."""
    store_path = tmp_path / "store.sqlite3"
    store = await SqliteStore.open(store_path, synchronous="normal")
    await store.set_desired(DesiredSession("wm-b", "genesys", DesiredState.STOPPED, "ctl stop", 1.0))
    await store.aclose()
    config_path = tmp_path / "supervisor.toml"
    config_path.write_text(
        sessions_text(genesys_sim.urls, {"wm-a": "a", "wm-b": "b"}) + f'[store]\npath = "{store_path}"\n'
    )
    (tmp_path / "genesys-secret").write_text("not-a-real-secret")
    config = load_config(config_path)
    bus = EventBus()
    recorded = Recorded(SystemClock())
    bus.subscribe(recorded)
    async with Wiring(config, bus=bus, config_dir=tmp_path, environ={}) as wiring:
        sessions = session_table(wiring)
        durable = await Durable.open(
            config, sessions=sessions, wiring=wiring, environ={}, bus=bus, clock=wiring.clock
        )
        supervisor = Supervisor(wiring, durable, sessions=sessions)
        reloader = Reloader(supervisor, lambda: load_config(config_path))
        async with anyio.create_task_group() as tg:
            await tg.start(supervisor.serve)
            assert set(supervisor.runners) == {"wm-a"}  # wm-b stays down
            # wm-b changed (another agent): it stays down, its new settings wait for `ctl start`
            replace(
                config_path,
                sessions_text(genesys_sim.urls, {"wm-a": "a", "wm-b": "b2"})
                + f'[store]\npath = "{store_path}"\n',
            )
            changed = await reloader.reload()
            assert (changed.error, changed.restarted, changed.kept_down) == (None, (), ("wm-b",))
            assert set(supervisor.runners) == {"wm-a"}
            # wm-b removed: forgotten, no runner to stop
            replace(
                config_path,
                sessions_text(genesys_sim.urls, {"wm-a": "a"}) + f'[store]\npath = "{store_path}"\n',
            )
            removed = await reloader.reload()
            assert (removed.error, removed.removed) == (None, ("wm-b",))
            assert "wm-b" not in await durable.store.desired_sessions()  # type: ignore[union-attr]
            await supervisor.shutdown(2.0)
            tg.cancel_scope.cancel()
        await durable.aclose()
    (last,) = recorded.named("CONFIG_RELOADED")[-1:]
    assert last["removed"] == ["wm-b"]
    assert not recorded.named("CONFIG_RELOAD_FAILED")


# the configurations the file flips between: sessions come and go, some change their agent. Web
# Messaging sessions (w*) and CXone agent sessions (c*, agent ids): a CXone session's stop is a DELETE,
# which the test makes slow, so that a reload removing or restarting one is still at work when the
# file flips and the next reloads come
VARIANTS: dict[str, dict[str, str]] = {
    "A": {"w0": "a", "w1": "a", "w2": "a", "c0": "100001"},
    "B": {"w1": "a", "w2": "b", "w3": "a", "c0": "100002", "c1": "100003"},
    "C": {"w0": "a", "w3": "b", "c1": "100003"},
    "D": {},
}
BROKEN = "[daemon]\nshutdownGrace = -1\n"  # refused: the daemon keeps what it had


@dataclass
class InProcess:
    """The daemon's reload paths as ``run`` assembles them (supervisor/runtime/assembly.py), in this
    process: the real lifecycle (run_daemon: real signals, the sockets bound in it), SIGHUP's reload
    requests and the control socket's Reload verb; the parts held here so the test can see them."""

    supervisor: Supervisor
    reloader: Reloader
    requests: ReloadRequests
    recorded: Recorded
    control: Path
    sighups: int = 0
    reads: int = 0  # configuration files the reloads have read
    finished: list[bool] = field(default_factory=list)  # run_daemon's result: forced or not
    ended: anyio.Event = field(default_factory=anyio.Event)


@contextlib.asynccontextmanager
async def in_process_daemon(config_path: Path, workdir: Path) -> AsyncIterator[InProcess]:
    config = load_config(config_path)
    bus = EventBus()
    recorded = Recorded(SystemClock())
    bus.subscribe(recorded)
    paths = (workdir / "subscribe.sock", workdir / "control.sock")
    async with Wiring(config, bus=bus, config_dir=workdir, environ={}) as wiring:
        supervisor = Supervisor(wiring)
        daemon: InProcess | None = None

        def load() -> Config:
            try:
                return load_config(config_path)
            finally:  # read (a broken file too): the count says so
                assert daemon is not None
                daemon.reads += 1

        reloader = Reloader(supervisor, load)
        requests = ReloadRequests(reloader.reload)

        async def reload_for_api() -> Any:
            return answer(await reloader.reload())

        api = socket_api(supervisor, SocketsConfig(), environ={}, paths=paths, reload=reload_for_api)
        stop = anyio.Event()
        daemon = InProcess(supervisor, reloader, requests, recorded, paths[1])

        async def on_reload() -> None:
            daemon.sighups += 1
            await requests.request()

        async def lifecycle() -> None:
            forced = await run_daemon(
                supervisor,
                grace_s=2.0,
                bind=[api],
                services=[requests.serve, *api.services],
                on_reload=on_reload,
                stop=stop,
            )
            daemon.finished.append(forced)
            daemon.ended.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(lifecycle)
            await wait_until(lambda: recorded.named("SOCKET_API_LISTENING") != [], 20)
            try:
                yield daemon
            finally:
                stop.set()
                with anyio.fail_after(20):
                    await daemon.ended.wait()


@contextlib.contextmanager
def sighup_never_kills_the_test_run() -> Iterator[None]:
    """asyncio puts SIGHUP's default action (terminate) back when the daemon's receiver closes;
    a SIGHUP must never reach this process then."""
    previous = signal.getsignal(signal.SIGHUP)
    try:
        yield
    finally:
        signal.signal(signal.SIGHUP, previous)


@settings(REAL_DAEMON, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from([*VARIANTS, "broken"]),
            st.sampled_from(["sighup", "ctl", "both"]),
            # then flip the file again: at once (before anyone read it), once a reload has read it
            # (it is applying what it read while the file changes and the next reloads come), or
            # once a reload has ended
            st.sampled_from(["at-once", "once-read", "after-an-outcome"]),
        ),
        min_size=2,
        max_size=6,
    )
)
async def test_overlapping_reloads_leave_the_table_equal_to_the_last_applied_configuration(
    genesys_sim: GenesysSimulator, cxone_sim: CxoneSimulator, steps: list[tuple[str, str, str]]
) -> None:
    """Reloads from both paths at once while the file flips. Once they stop: the runner table
    equals the configuration of the last reload that reported CONFIG_RELOADED (and the events
    replayed from the start give the same table), every configured session has exactly one
    runner (and one connection at the platform), and the daemon is alive and answers."""
    texts = {
        name: sessions_text(genesys_sim.urls, agents, cxone_sim.urls) for name, agents in VARIANTS.items()
    }
    parsed = {name: parse_config(text, "v.toml") for name, text in texts.items()}
    # a CXone session's DELETE answered 150 ms late: a reload that stops one is at work that long
    slow = cxone_sim.faults.inject(
        Fault(kind=FaultKind.LATENCY, endpoint="DELETE *", params={"latency_ms": 150})
    )
    assert slow.id is not None
    with short_dir() as workdir, sighup_never_kills_the_test_run():
        (workdir / "genesys-secret").write_text("not-a-real-secret")
        (workdir / "cxone-secret").write_text("not-a-real-secret")
        (workdir / "cxone-password").write_text("not-a-real-secret")
        config_path = workdir / "supervisor.toml"
        config_path.write_text(texts["A"])
        async with in_process_daemon(config_path, workdir) as daemon:
            supervisor = daemon.supervisor

            def outcomes() -> int:
                return len(daemon.recorded.named("CONFIG_RELOADED")) + len(
                    daemon.recorded.named("CONFIG_RELOAD_FAILED")
                )

            sent = 0
            async with anyio.create_task_group() as calls:
                for variant, path, then in steps:
                    before, read = outcomes(), daemon.reads
                    replace(config_path, texts.get(variant, BROKEN))
                    if path in ("ctl", "both"):
                        calls.start_soon(ctl_reload, daemon.control)
                    if path in ("sighup", "both"):
                        taken = daemon.sighups
                        os.kill(os.getpid(), signal.SIGHUP)
                        sent += 1
                        # until the lifecycle took it (only asked for a reload): signals of one kind
                        # sent faster than they are handled may arrive as one (signal(7))
                        await wait_until(lambda t=taken: daemon.sighups > t, 30)
                    await anyio.lowlevel.checkpoint()  # let the loop take what was sent
                    if then == "once-read":
                        await wait_until(lambda r=read: daemon.reads > r, 30)
                    elif then == "after-an-outcome":
                        await wait_until(lambda b=before: outcomes() > b, 30)
            # every SIGHUP taken by the lifecycle, and nothing left queued or running
            await wait_until(
                lambda: daemon.sighups == sent and daemon.requests.idle and not daemon.reloader.busy, 30
            )
            assert not daemon.finished, "the daemon ended during the reloads"

            # the table the events describe, replayed from the first configuration
            table = set(VARIANTS["A"])
            for reloaded in daemon.recorded.named("CONFIG_RELOADED"):
                assert set(reloaded["removed"]) <= table and not set(reloaded["added"]) & table
                table = (table - set(reloaded["removed"])) | set(reloaded["added"])
            configured = {spec.id for spec in supervisor.config.sessions}
            assert set(supervisor.runners) == table == configured
            # the configuration held is one the file had (the last one a CONFIG_RELOADED applied)
            assert supervisor.config in parsed.values()
            # one live runner per configured session, on its configured settings, one connection each
            specs = {spec.id: spec for spec in supervisor.config.sessions}
            for session_id, runner in supervisor.runners.items():
                assert not runner.core.terminated, session_id
                assert runner.context.agent_id == specs[session_id].agent_id
            await wait_until(lambda: all(r.state.value == "active" for r in supervisor.runners.values()), 20)
            web = {i for i in configured if not i.startswith("c")}
            await wait_until(lambda: genesys_sim.recorder.connections_open("webmessaging") == len(web), 20)
            # every configured CXone session's agent is logged in. (Not "only those": a session removed
            # while its start request was in flight never learned its platform session id, so nothing
            # ends that agent session; the store's reconciliation reports it not_cleanable, docs/store.md)
            agents = {specs[i].agent_id for i in configured if i.startswith("c")}
            await wait_until(lambda: agents <= live_agents(cxone_sim), 20)
            # alive and answering
            conn = await Conn.open(daemon.control)
            try:
                status = await conn.call(Method.STATUS)
            finally:
                await conn.aclose()
            assert status.error is None
            # (the board keeps a removed session's last row: only the active ones are the table's)
            assert status.parameters["sessions"]["byState"].get("active", 0) == len(configured)
        assert daemon.finished == [False]  # drained, not forced
    cxone_sim.faults.clear(slow.id)
    await wait_until(lambda: genesys_sim.recorder.connections_open("webmessaging") == 0, 20)


def live_agents(cxone: CxoneSimulator) -> set[str]:
    return {session.agent_id for session in cxone.state.sessions() if session.ended is None}


async def ctl_reload(control: Path) -> None:
    conn = await Conn.open(control)
    try:
        await conn.call(Method.RELOAD)  # applied or refused (the broken file): either is an answer
    finally:
        await conn.aclose()


# -- point 10: a SIGTERM during a reload -----------------------------------------------------------------


async def test_a_sigterm_during_a_reload_starts_the_drain_at_once(
    genesys_sim: GenesysSimulator, start_cxone: StartCxone
) -> None:
    """The reload removes a CXone session whose DELETE the platform never answers (the close waits
    up to its bound). A SIGTERM then drains at once: DAEMON_STOPPING comes before the reload has an
    outcome, and the reload reports that the drain interrupted it (formerly the signal loop
    waited for the reload to finish, then the reload reported CONFIG_RELOADED, then the drain)."""
    conv = genesys_sim.create_conversation()
    cxone = await start_cxone(seed=23)
    with short_dir() as workdir:
        config = daemon_config(
            genesys_sim.urls,
            workdir,
            [("wm-0", conv.id)],
            cxone=cxone.urls,
            cxone_sessions=[("cx-0", "100001")],
        )
        async with running_daemon(config) as daemon:
            await daemon.wait_ready(2)
            held = cxone.faults.inject(Fault(kind=FaultKind.BLACKHOLE, endpoint="DELETE *"))
            assert held.id is not None
            held_id = held.id
            replace(config, config.read_text().split('[[sessions]]\nid = "cx-0"')[0])
            daemon.process.send_signal(signal.SIGHUP)
            await wait_until(lambda: cxone.recorder.fault_hits(held_id) == 1, 20)
            daemon.process.send_signal(signal.SIGTERM)
            await wait_until(lambda: bool(daemon.named("DAEMON_STOPPED")), 20)
            with anyio.fail_after(20):
                code = await daemon.process.wait()
        names = [r["event"] for r in daemon.records]
        stopping = names.index("DAEMON_STOPPING")
        assert "CONFIG_RELOADED" not in names
        (interrupted,) = daemon.named("CONFIG_RELOAD_FAILED")
        assert names.index("CONFIG_RELOAD_FAILED") > stopping
        assert "interrupted by the drain" in interrupted["error"]
        assert code == 0
        cxone.faults.clear(held_id)
