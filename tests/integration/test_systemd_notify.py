"""``run`` under systemd's protocols, for real (docs/systemd.md): the daemon is a child process, the test plays
systemd: a datagram ``NOTIFY_SOCKET`` it binds (a path, or an abstract name), ``WATCHDOG_USEC``, and
listening sockets passed as descriptors 3 and 4 with ``LISTEN_FDS``/``LISTEN_FDNAMES``/``LISTEN_PID``
naming the daemon's own pid. The platform is the in-process Genesys simulator over loopback.

Nothing waits for a timer: each step waits for its outcome (a notification, an event line) within a
bounded deadline. The one window that asserts an *absence* (no ping while the loop is wedged) is
measured in ping periods the watchdog would have used, so a slow machine cannot make it pass falsely.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import shutil
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from supervisor.api.protocol import Method
from supervisor.runtime.testhooks import BLOCK_LOOP_ENV
from supervisor.sim.faults import Fault, FaultKind
from supervisor.sim.genesys import GenesysSimConfig, GenesysSimulator
from tests.harness.config import (
    Credentials,
    config_file,
    daemon_config,
    genesys_config,
    short_dir,
    sockets_table,
)
from tests.harness.process import CLI, Output
from tests.harness.simulators import StartGenesys
from tests.harness.waits import wait_until
from tests.integration.api_harness import Conn, Watcher
from tests.integration.systemd_harness import Notice, NotifyReceiver, listening_unix, notify_receiver, spawn
from tests.integration.test_api_security import OTHER_UID, as_other_user

SECRET = "s3cr3t-value-never-printed"

pytestmark = [
    pytest.mark.integration,
    pytest.mark.anyio,
    pytest.mark.genesys_sim(GenesysSimConfig(clients={"demo-client": SECRET}), seed=12),
]
# a platform nobody answers for: the start must fail before any session would need one
UNREACHABLE = {
    "login": "http://127.0.0.1:9",
    "api": "http://127.0.0.1:9",
    "webmessaging": "ws://127.0.0.1:9",
    "streaming": "ws://127.0.0.1:9",
}


def write_config(directory: Path, text: str, *, sockets: tuple[Path, Path] | None = None) -> Path:
    if sockets is not None:
        text += sockets_table(*sockets)
    return config_file(directory, text, Credentials(genesys=SECRET))


def status_counts(notice: Notice) -> dict[str, int]:
    """``{"active": 3, "total": 3, "reconnecting": 0}`` from a STATUS= line."""
    text = notice["STATUS"]
    out: dict[str, int] = {}
    for part in text.split(" · "):
        words = part.split()
        if part.endswith(" active") and "/" in words[0]:
            active, total = words[0].split("/")
            out["active"], out["total"] = int(active), int(total)
        elif len(words) == 2 and words[0].isdigit():
            out[words[1]] = int(words[0])
    return out


@contextlib.asynccontextmanager
async def reading(process: anyio.abc.Process) -> AsyncIterator[Output]:
    lines = Output(process)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(lines.pump)
            yield lines
            tg.cancel_scope.cancel()
    finally:
        if process.returncode is None:
            process.kill()
            with anyio.CancelScope(shield=True):
                await process.wait()


async def stop(process: anyio.abc.Process) -> int:
    process.send_signal(signal.SIGTERM)
    with anyio.fail_after(30):
        return await process.wait()


async def arrived(
    lines: Output, event: str, n: int = 1, where: Callable[[dict[str, Any]], bool] = lambda _: True
) -> list[dict[str, Any]]:
    """The stdout lines named ``event`` (and matching ``where``) once ``n`` of them were read.

    Event lines and notifications travel by different channels (the daemon's stdout writer thread
    and a pipe; a datagram socket): at the moment a notice is read, a line published at the same
    instant, or before it, may still be on its way. Asserting on ``lines`` right after a notice
    failed 2 runs in 4 on a loaded machine; every read of a line waits for it.
    """
    await wait_until(lambda: len([e for e in lines.named(event) if where(e)]) >= n, 30)
    return [e for e in lines.named(event) if where(e)]


def connects_now(path: Path) -> bool:
    """A blocking connect() attempted once, at this instant: does anything listen at ``path``?"""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(str(path))
    except OSError:
        return False
    finally:
        probe.close()
    return True


# -- READY, STATUS, STOPPING -------------------------------------------------------------------------------


async def test_ready_comes_once_the_sockets_answer_then_status_and_stopping_then_exit_zero(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    """READY=1 at the readiness moment: at that instant both sockets accept (the daemon bound them)
    and every session is handed over (STATUS counts all 3); the line goes live; SIGTERM: STOPPING=1
    with a stop timeout covering the drain, then exit 0; every notice comes from the daemon's pid."""
    with short_dir() as sockets:
        paths = (sockets / "subscribe.sock", sockets / "control.sock")
        config = write_config(tmp_path, genesys_config(genesys_sim.urls, 3), sockets=paths)
        async with notify_receiver("path") as notify:
            process = await spawn(config, env=notify.env)
            async with reading(process) as lines:
                _, ready = await notify.wait_for(lambda n: n.get("READY") == "1")
                # the very moment READY=1 is read: both sockets are bound and listening
                assert connects_now(paths[0]) and connects_now(paths[1])
                assert status_counts(ready)["total"] == 3  # every configured session handed over
                assert (await arrived(lines, "SOCKET_API_LISTENING"))[0]["subscribe"] == str(paths[0])
                await notify.wait_for(lambda n: "STATUS" in n.fields and status_counts(n).get("active") == 3)
                assert await stop(process) == 0
            stops = notify.having("STOPPING")
            assert len(stops) == 1
            stopping = stops[0]
            assert int(stopping["EXTEND_TIMEOUT_USEC"]) >= 2_000_000  # shutdownGrace = 2.0 and the flush
            assert stopping["STATUS"].startswith("draining · ")
            after = notify.notices[notify.notices.index(stopping) :]
            assert not [n for n in after if "READY" in n.fields]  # never ready again once stopping
            assert {n.pid for n in notify.notices} == {process.pid}  # NotifyAccess=main holds
            assert await arrived(
                lines, "DAEMON_STOPPED"
            )  # the process ended; its last lines may be in the pipe


async def test_status_follows_a_storm_live(genesys_sim: GenesysSimulator, tmp_path: Path) -> None:
    """Every connection dropped at once: STATUS shows sessions reconnecting, then all active again
    (abstract ``@`` NOTIFY_SOCKET)."""
    n = 12
    # reconnections wait U(1.5 s, 2.5 s): the storm outlasts the status line's one-second throttle
    config = write_config(tmp_path, genesys_config(genesys_sim.urls, n, first_min=1.5, first_max=2.5))
    async with notify_receiver("abstract") as notify:
        process = await spawn(config, env=notify.env)
        async with reading(process):
            all_active = lambda m: "STATUS" in m.fields and status_counts(m).get("active") == n  # noqa: E731
            first, _ = await notify.wait_for(all_active)
            genesys_sim.faults.inject(Fault(kind=FaultKind.DROP, count=n))
            storm, during = await notify.wait_for(
                lambda m: "STATUS" in m.fields and status_counts(m).get("reconnecting", 0) > 0,
                since=first + 1,
            )
            assert status_counts(during)["active"] < n
            await notify.wait_for(all_active, since=storm + 1)
            assert await stop(process) == 0


# -- RELOADING / READY ----------------------------------------------------------------------------------


async def test_sighup_is_announced_with_reloading_and_monotonic_usec_then_ready(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    config = write_config(tmp_path, genesys_config(genesys_sim.urls, 1))
    async with notify_receiver("path") as notify:
        process = await spawn(config, env=notify.env)
        async with reading(process) as lines:
            first, _ = await notify.wait_for(lambda m: m.get("READY") == "1")
            before = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
            process.send_signal(signal.SIGHUP)
            at, reloading = await notify.wait_for(lambda m: m.get("RELOADING") == "1", since=first + 1)
            after = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
            # CLOCK_MONOTONIC is one clock for the whole machine: the daemon's stamp lies in our window
            assert before <= int(reloading["MONOTONIC_USEC"]) <= after
            await notify.wait_for(lambda m: m.get("READY") == "1", since=at + 1)
            await wait_until(lambda: bool(lines.named("CONFIG_RELOADED")), 30)
            assert await stop(process) == 0


# -- the watchdog --------------------------------------------------------------------------------------------

WATCHDOG_USEC = 400_000  # pings every 0.2 s
PERIOD_S = WATCHDOG_USEC / 1_000_000 / 2


async def test_the_watchdog_pings_from_the_loop_stops_while_it_is_wedged_and_resumes(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    """A real wedge: the loop blocked in a read while the process, and its stdout thread, live on.
    Nothing the daemon reads can block its loop any more (files are opened O_NONBLOCK and
    a FIFO is refused), so the wedge is the runtime's test hook: on SIGHUP the reload reads a FIFO
    on the event loop and blocks there until it is written (supervisor/runtime/testhooks.py).
    The pings stop (they come from a task on that loop, not from a thread); once the FIFO is
    written, the reload finishes (READY=1) and the pings resume."""
    config = write_config(tmp_path, genesys_config(genesys_sim.urls, 1))
    wedge = tmp_path / "wedge"
    os.mkfifo(wedge)
    async with notify_receiver("path") as notify:
        env = {**notify.env, "WATCHDOG_USEC": str(WATCHDOG_USEC), BLOCK_LOOP_ENV: str(wedge)}
        process = await spawn(config, env=env)
        async with reading(process) as lines:
            first, _ = await notify.wait_for(lambda m: m.get("READY") == "1")
            await notify.count("WATCHDOG", 3, since=first)
            process.send_signal(signal.SIGHUP)
            writer = await _fifo_writer_once_the_daemon_reads(wedge)
            try:
                wedged_at = len(notify.notices)  # anything queued before this was sent before the wedge
                await _drain(notify)
                wedged_at = len(notify.notices)
                # ten ping periods of the watchdog: a live loop would have pinged every one of them
                with anyio.move_on_after(10 * PERIOD_S):
                    await notify.count("WATCHDOG", 1, since=wedged_at, limit_s=60)
                assert notify.having("WATCHDOG", wedged_at) == []
                assert process.returncode is None  # alive, only its loop is stuck
                os.write(writer, b"unblock\n")
            finally:
                os.close(writer)
            ready_at, _ = await notify.wait_for(lambda m: m.get("READY") == "1", since=wedged_at)
            await notify.count("WATCHDOG", 3, since=ready_at)
            await wait_until(lambda: bool(lines.named("CONFIG_RELOADED")), 30)
            assert {n.pid for n in notify.having("WATCHDOG")} == {process.pid}
            assert await stop(process) == 0


async def _fifo_writer_once_the_daemon_reads(fifo: Path) -> int:
    """Open the FIFO for writing the moment the daemon has it open for reading (ENXIO until then)."""
    with anyio.fail_after(30):
        while True:
            try:
                return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as exc:
                if exc.errno != errno.ENXIO:
                    raise
            await anyio.sleep(0.005)  # polling for the reader, not a timer


async def _drain(notify: NotifyReceiver) -> None:
    """Let the pump take what is already queued in the socket (sent before the wedge)."""
    while True:
        try:
            pending = notify.sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except BlockingIOError:
            return
        if not pending:
            return
        await anyio.sleep(0.005)


async def test_a_platform_outage_is_degraded_shown_in_status_and_the_pings_go_on(
    tmp_path: Path, start_genesys: StartGenesys
) -> None:
    """Handshakes refused: the endpoint's circuit opens, DAEMON_DEGRADED names it, STATUS shows it,
    and the watchdog keeps pinging (a restart would only repeat the storm)."""
    sim = await start_genesys(seed=4)
    text = genesys_config(sim.urls, 2, open_for=60.0).replace(
        "[circuit]\n", "[circuit]\nfailureThreshold = 2\n"
    )
    config = write_config(tmp_path, text)
    async with notify_receiver("abstract") as notify:
        process = await spawn(config, env={**notify.env, "WATCHDOG_USEC": str(WATCHDOG_USEC)})
        async with reading(process) as lines:
            await notify.wait_for(lambda m: "STATUS" in m.fields and status_counts(m).get("active") == 2)
            # every handshake refused with 503, then both connections dropped
            sim.faults.inject(Fault(kind=FaultKind.ADMISSION_LIMIT, params={"rate_per_s": 0, "status": 503}))
            sim.faults.inject(Fault(kind=FaultKind.DROP, count=2))
            at, _ = await notify.wait_for(
                lambda m: "degraded: circuit:genesys:webmessaging" in (m.get("STATUS") or "")
            )
            await notify.count("WATCHDOG", 5, since=at)  # degraded, not unhealthy: the pings go on
            (raised,) = (
                await arrived(lines, "DAEMON_DEGRADED", where=lambda e: e["condition"].startswith("circuit:"))
            )[:1]
            assert raised["condition"] == "circuit:genesys:webmessaging"
            assert not lines.named("WATCHDOG_WITHHELD")
            assert await stop(process) == 0


needs_mounts = pytest.mark.skipif(
    os.geteuid() != 0 or not (shutil.which("unshare") and shutil.which("nsenter")),
    reason="a private tmpfs for the state directory needs root, unshare and nsenter",
)


@needs_mounts
async def test_a_full_or_read_only_state_directory_is_degraded_and_never_a_crash_loop(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    """Test matrix row 21 with a real filesystem: $STATE_DIRECTORY on a 4 MiB tmpfs in the daemon's own
    mount namespace. Filled: DAEMON_DEGRADED and STATUS say so, the pings go on; emptied: recovered;
    remounted read-only: degraded again. One process throughout, exit 0 at SIGTERM: no restart.

    The store itself lives elsewhere here (a tmpfs holding an open database cannot be remounted
    read-only); the next test fills the store's own directory."""
    state = tmp_path / "state"
    state.mkdir()
    mount = 'mount --make-rprivate / && mount -t tmpfs -o size=4m tmpfs "$0" && exec "$@"'
    store = f'[store]\npath = "{tmp_path / "store.sqlite3"}"\n'
    config = write_config(tmp_path, genesys_config(genesys_sim.urls, 1) + store)
    async with notify_receiver("path") as notify:
        process = await spawn(
            config,
            env={**notify.env, "WATCHDOG_USEC": str(WATCHDOG_USEC), "STATE_DIRECTORY": str(state)},
            prefix=["unshare", "-m", "sh", "-c", mount, str(state)],
        )
        async with reading(process) as lines:
            await notify.wait_for(lambda m: m.get("READY") == "1")
            inside = Path(f"/proc/{process.pid}/root") / state.relative_to("/")
            (inside / "fill").write_bytes(b"\0" * (3 * 1024 * 1024 + 512 * 1024))  # < 1 MiB left
            at, full = await notify.wait_for(lambda m: "degraded: state-directory" in (m.get("STATUS") or ""))
            assert "is full" in full["STATUS"]
            await notify.count("WATCHDOG", 5, since=at)  # degraded, not unhealthy: the pings go on
            (inside / "fill").unlink()
            await wait_until(lambda: bool(lines.named("DAEMON_RECOVERED")), 30)
            remount = await anyio.run_process(
                ["nsenter", "-t", str(process.pid), "-m", "mount", "-o", "remount,ro", str(state)]
            )
            assert remount.returncode == 0
            at, _ = await notify.wait_for(lambda m: "read-only" in (m.get("STATUS") or ""), since=at + 1)
            await notify.count("WATCHDOG", 5, since=at)
            degraded = await arrived(
                lines, "DAEMON_DEGRADED", 2, where=lambda e: e["condition"] == "state-directory"
            )
            assert [("is full" in e["reason"], "read-only" in e["reason"]) for e in degraded] == [
                (True, False),
                (False, True),
            ]
            assert process.returncode is None and not lines.named("WATCHDOG_WITHHELD")
            assert await stop(process) == 0
        assert len({e["bootId"] for e in lines.records}) == 1  # one process, never restarted


@needs_mounts
async def test_a_full_store_refuses_acknowledgements_and_the_pings_go_on(
    genesys_sim: GenesysSimulator,
) -> None:
    """The durable store (docs/store.md) in $STATE_DIRECTORY on a 4 MiB tmpfs: STATUS counts the outbox;
    filled, `ctl attributes set` is refused (exit 1, StoreUnavailable), DAEMON_DEGRADED names the
    `store` condition, STATUS shows it, and the watchdog keeps pinging: a restart cures no full disk."""
    conv = genesys_sim.create_conversation()
    with short_dir() as workdir:
        state = workdir / "state"
        state.mkdir()
        credentials = Credentials(genesys=SECRET)
        config = daemon_config(
            genesys_sim.urls, workdir, [("wm-0", conv.id)], queue_depth=10_000, credentials=credentials
        )
        control = workdir / "sockets" / "control.sock"
        mount = 'mount --make-rprivate / && mount -t tmpfs -o size=4m tmpfs "$0" && exec "$@"'
        async with notify_receiver("path") as notify:
            process = await spawn(
                config,
                env={**notify.env, "WATCHDOG_USEC": str(WATCHDOG_USEC), "STATE_DIRECTORY": str(state)},
                prefix=["unshare", "-m", "sh", "-c", mount, str(state)],
            )
            async with reading(process) as lines:
                await notify.wait_for(lambda m: "outbox 0" in (m.get("STATUS") or ""))

                async def set_attributes(*pairs: str) -> tuple[int, str]:
                    done = await anyio.run_process(
                        [*CLI, "ctl", "--socket", str(control), "attributes", "set", "wm-0", *pairs],
                        check=False,
                    )
                    return done.returncode, done.stderr.decode()

                assert (await set_attributes("survey=first"))[0] == 0
                inside = Path(f"/proc/{process.pid}/root") / state.relative_to("/")
                free = shutil.disk_usage(inside).free
                (inside / "filler").write_bytes(b"\0" * max(0, free - 96 * 1024))
                big = [f"k{i}={'x' * 4000}" for i in range(12)]
                for _ in range(40):
                    code, err = await set_attributes(*big)
                    if code != 0:
                        break
                assert code == 1 and "StoreUnavailable" in err and err.count("\n") == 1, err
                at, shown = await notify.wait_for(lambda m: "store (" in (m.get("STATUS") or ""))
                assert "acknowledgements refused" in shown["STATUS"]
                await notify.count("WATCHDOG", 5, since=at)  # degraded, not unhealthy: the pings go on
                await arrived(lines, "DAEMON_DEGRADED", where=lambda e: e["condition"] == "store")
                # announced once per episode: on a nearly full disk a small write (an outbox row
                # delivered) may still commit and clear the condition, the next big one raise it again;
                # what must not happen is the same DAEMON_DEGRADED said twice with no recovery between
                told = [
                    (e["event"], e.get("reason"))
                    for e in lines.records
                    if e["event"] in ("DAEMON_DEGRADED", "DAEMON_RECOVERED") and e.get("condition") == "store"
                ]
                assert told[0][0] == "DAEMON_DEGRADED"
                assert all(a != b for a, b in itertools.pairwise(told)), told
                assert process.returncode is None and not lines.named("WATCHDOG_WITHHELD")
                assert await stop(process) == 0


# -- socket activation --------------------------------------------------------------------------------------


async def test_a_subscriber_connects_through_the_inherited_descriptors(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    """LISTEN_FDS=2 (fds 3 and 4, named subscribe and control), LISTEN_PID the daemon's: it serves the
    sockets it was given, never binds or removes a file of its own, and leaves them to their owner."""
    with short_dir() as directory:
        paths = (directory / "subscribe.sock", directory / "control.sock")
        handed = [listening_unix(p) for p in paths]
        # configured elsewhere on purpose: with activation the handed sockets decide
        config = write_config(
            tmp_path,
            genesys_config(genesys_sim.urls, 2),
            sockets=(directory / "unused-s.sock", directory / "unused-c.sock"),
        )
        try:
            async with notify_receiver("path") as notify:
                process = await spawn(
                    config,
                    env={**notify.env, "LISTEN_FDNAMES": "subscribe:control"},
                    listeners=handed,
                )
                async with reading(process) as lines:
                    await notify.wait_for(lambda m: m.get("READY") == "1")
                    watcher = await Watcher.subscribe(paths[0])
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(watcher.run)
                        await wait_until(lambda: bool(watcher.messages), 30)
                        assert {s["sessionId"] for s in watcher.snapshot["sessions"]} == {"wm-0", "wm-1"}
                        conn = await Conn.open(paths[1])
                        reply = await conn.call(Method.STATUS)
                        assert reply.error is None and reply.parameters["sessions"]["total"] == 2
                        await conn.aclose()
                        tg.cancel_scope.cancel()
                    if os.geteuid() == 0:
                        # the peer check applies to a handed-over socket as to one the daemon bound
                        os.chmod(directory, 0o711)
                        assert await as_other_user(paths[0], groups=[]) == "received 0"
                        await wait_until(lambda: bool(lines.named("SOCKET_PEER_REFUSED")), 30)
                        (refused,) = lines.named("SOCKET_PEER_REFUSED")
                        assert (refused["socket"], refused["peer"]["uid"]) == ("subscribe", OTHER_UID)
                    (listening,) = await arrived(lines, "SOCKET_API_LISTENING")
                    assert (listening["subscribe"], listening["control"]) == (str(paths[0]), str(paths[1]))
                    assert not (directory / "unused-s.sock").exists()  # nothing bound of its own
                    assert await stop(process) == 0
            # the files and the listening sockets are still the owner's: a client queues for the next start
            assert all(p.exists() for p in paths) and connects_now(paths[0])
        finally:
            for sock in handed:
                sock.close()


@pytest.mark.skipif(
    shutil.which("systemd-socket-activate") is None, reason="systemd-socket-activate is absent"
)
async def test_systemd_socket_activate_starts_the_daemon_on_the_first_connection(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    """systemd's own implementation of the protocol (systemd-socket-activate(1)) holds both sockets and
    starts the daemon when a subscriber connects; that very connection gets its snapshot."""
    config = write_config(tmp_path, genesys_config(genesys_sim.urls, 2))
    with short_dir() as directory:
        paths = (directory / "subscribe.sock", directory / "control.sock")
        async with notify_receiver("path") as notify:
            process = await anyio.open_process(
                [
                    "systemd-socket-activate",
                    *("-l", str(paths[0]), "-l", str(paths[1])),
                    "--fdname=subscribe:control",
                    f"--setenv=NOTIFY_SOCKET={notify.value}",
                    *(sys.executable, "-m", "supervisor", "run", "--config", str(config)),
                ],
            )
            async with reading(process):
                await wait_until(lambda: paths[0].exists() and paths[1].exists(), 30)
                assert notify.notices == []  # nothing runs until somebody connects
                watcher = await Watcher.subscribe(paths[0])
                async with anyio.create_task_group() as tg:
                    tg.start_soon(watcher.run)
                    await wait_until(lambda: bool(watcher.messages), 30)
                    assert {s["sessionId"] for s in watcher.snapshot["sessions"]} == {"wm-0", "wm-1"}
                    tg.cancel_scope.cancel()
                _, ready = await notify.wait_for(lambda m: m.get("READY") == "1")
                assert ready.pid == process.pid  # it exec'ed the daemon: LISTEN_PID named it
                assert await stop(process) == 0


@pytest.mark.parametrize(
    ("names", "kinds", "problem"),
    [
        ("subscribe:control", ("stream", "datagram"), "descriptor 4 ('control') is not a Unix stream socket"),
        ("subscribe:control", ("stream", "bound"), "descriptor 4 ('control') is not listening"),
        ("subscribe:events", ("stream", "stream"), "descriptor 4 is named 'events'"),
        ("subscribe:subscribe", ("stream", "stream"), "two descriptors are named 'subscribe'"),
        ("subscribe", ("stream",), "systemd passed subscribe but not control"),
    ],
)
async def test_a_wrong_handover_stops_the_start_with_one_line(
    tmp_path: Path, names: str, kinds: tuple[str, ...], problem: str
) -> None:
    with short_dir() as directory:
        handed = []
        for i, kind in enumerate(kinds):
            path = directory / f"{i}.sock"
            if kind == "datagram":
                handed.append(listening_unix(path, kind=socket.SOCK_DGRAM))
            elif kind == "bound":
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.bind(str(path))  # bound, never listen()ed
                handed.append(sock)
            else:
                handed.append(listening_unix(path))
        config = write_config(
            tmp_path,
            genesys_config(UNREACHABLE, 1),
        )
        try:
            process = await spawn(config, env={"LISTEN_FDNAMES": names}, listeners=handed)
            async with reading(process) as lines:
                with anyio.fail_after(30):
                    code = await process.wait()
                err = await lines.stderr()
        finally:
            for sock in handed:
                sock.close()
    assert code == 1
    assert err.count("\n") == 1 and err.startswith("session-supervisor: error: socket activation: ")
    assert problem in err and "Traceback" not in err


# -- credentials -------------------------------------------------------------------------------------------


async def test_secrets_come_from_the_credentials_directory_and_never_show(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    """LoadCredential= as the daemon sees it: $CREDENTIALS_DIRECTORY with one file per secret, the
    config naming it. The simulator accepts only that secret, so an active notifications session
    proves it was used; a missing credential is one line naming the file; the value never appears."""
    credentials = tmp_path / "credentials"
    credentials.mkdir()
    (credentials / "genesys-client-secret").write_text(SECRET + "\n")
    text = genesys_config(genesys_sim.urls, 0, notifications=1).replace(
        'clientSecretFile = "genesys-secret"', 'clientSecretFile = "genesys-client-secret"'
    )
    config = tmp_path / "supervisor.toml"
    config.write_text(text)  # nothing beside the config: only the credentials directory has it
    async with notify_receiver("path") as notify:
        process = await spawn(config, env={**notify.env, "CREDENTIALS_DIRECTORY": str(credentials)})
        async with reading(process) as lines:
            await notify.wait_for(lambda m: "STATUS" in m.fields and status_counts(m).get("active") == 1)
            assert await stop(process) == 0
            err = await lines.stderr()
        assert SECRET not in "\n".join(lines.raw) + err
        assert SECRET not in "".join(str(n.fields) for n in notify.notices)
    (credentials / "genesys-client-secret").unlink()
    process = await spawn(config, env={"CREDENTIALS_DIRECTORY": str(credentials)})
    async with reading(process) as lines:
        with anyio.fail_after(30):
            code = await process.wait()
        err = await lines.stderr()
    assert code == 1
    assert (
        f"platforms.genesys.clientSecretFile: credential file not found ({credentials}/genesys-client-secret"
        in err
    )
    assert SECRET not in err and err.count("\n") == 1
