"""A reload does not pretend: what it can apply is applied, the rest is named, a refusal fails.

* ``[sockets]`` access lists and roles, reloaded into a running daemon (a child process, as root so
  that forked clients can drop to other uids and the daemon reads their real ``SO_PEERCRED``): a
  peer made an observer loses the reload verb at its next call, a peer taken off the lists is
  refused at its next connect; the answer names no table to restart for.
* ``[store]`` changed: the reload answers ``restartRequired: ["store"]`` (``ctl reload --json``, and
  the CONFIG_RELOADED line), and the plain ``ctl reload`` says so in its one line.
* A refused reload: ``ctl reload`` (and ``--json``) exits 1 with one line on stderr, nothing on stdout.
* Sessions a reload must restart are stopped concurrently: every CXone session's DELETE is in
  flight at once (the simulator holds them), where one after the other only the first would be.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from supervisor.api.protocol import Method, encode_call
from supervisor.config import load_config
from supervisor.runtime.reload import Reloader
from supervisor.sim.cxone import CxoneSimulator
from supervisor.sim.faults import Fault, FaultKind
from supervisor.sim.genesys import GenesysSimulator
from tests.harness.config import Credentials, config_file, cxone_config, genesys_config, short_dir
from tests.harness.in_process import supervised
from tests.harness.process import CLI, running_daemon
from tests.harness.waits import wait_until
from tests.integration.api_harness import calls_as

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

FILES_GID = 4260  # the socket files' group: every forked client is in it
OTHER = 12201


def sockets_text(directory: Path, **lists: list[int]) -> str:
    sockets = directory / "sockets"
    text = (
        f'[sockets]\nsubscribe = "{sockets / "subscribe.sock"}"\ncontrol = "{sockets / "control.sock"}"\n'
        f"group = {FILES_GID}\n"
    )
    return text + "".join(f"{key} = {json.dumps(ids)}\n" for key, ids in lists.items())


def replace(path: Path, text: str) -> None:
    """As an editor writes a file: a new one renamed over it."""
    staged = path.with_name(path.name + ".new")
    staged.write_text(text)
    os.replace(staged, path)


class Reports:
    """What a forked client says through its pipe, a line at a time."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buffer = b""

    async def line(self, limit_s: float = 20.0) -> str:
        with anyio.fail_after(limit_s):
            while b"\n" not in self.buffer:
                # the daemon may run on this loop: wait for the child without blocking it
                await anyio.wait_readable(self.fd)
                chunk = os.read(self.fd, 4096)
                if not chunk:
                    return "(the child exited)"
                self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line.decode()


@asynccontextmanager
async def subscribed_as(path: Path, uid: int) -> AsyncIterator[Reports]:
    """A subscriber as ``uid`` (a forked child dropping root): it subscribes, says "subscribed"
    once the snapshot arrives, reads until the daemon ends the stream, then says how it ended."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: plain blocking sockets, then _exit (never back into pytest)
        try:
            os.close(read_end)
            os.setgroups([FILES_GID])
            os.setgid(FILES_GID)
            os.setuid(uid)
            client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            client.settimeout(30)
            client.connect(str(path))
            client.sendall(encode_call(Method.SUBSCRIBE, {}, more=True))
            client.recv(65536)
            os.write(write_end, b"subscribed\n")
            try:
                while client.recv(65536):
                    pass
                os.write(write_end, b"ended\n")
            except TimeoutError:
                os.write(write_end, b"still open after 30 s\n")
            except OSError as exc:
                os.write(write_end, f"ended ({type(exc).__name__})\n".encode())
        except BaseException as exc:
            os.write(write_end, f"error {type(exc).__name__}: {exc}\n".encode())
        finally:
            os._exit(0)
    os.close(write_end)
    try:
        yield Reports(read_end)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        os.close(read_end)
        await anyio.to_thread.run_sync(os.waitpid, pid, 0)


async def ctl_reload(control: Path, *args: str) -> tuple[int, str, str]:
    done = await anyio.run_process([*CLI, "ctl", "--socket", str(control), "reload", *args], check=False)
    return done.returncode, done.stdout.decode(), done.stderr.decode()


@pytest.mark.skipif(os.geteuid() != 0, reason="switching to another uid needs root")
@pytest.mark.genesys_sim(seed=41)
async def test_a_reload_applies_the_access_lists_and_roles_of_the_sockets(
    genesys_sim: GenesysSimulator,
) -> None:
    with short_dir("ss-acl-") as directory:
        directory.chmod(0o755)  # the forked clients (other uids) reach the sockets through it
        (directory / "sockets").mkdir(mode=0o755)
        body = genesys_config(genesys_sim.urls, 1)
        admin = sockets_text(directory, allowUids=[OTHER], controlAllowUids=[OTHER])
        config = config_file(directory, admin + body, Credentials(cxone=None, cxone_password=None))
        control = directory / "sockets" / "control.sock"
        async with running_daemon(config) as daemon:
            await daemon.wait_ready(1)

            async def as_other(method: str) -> tuple[str | None, dict[str, Any]] | str:
                """One call as uid OTHER: its (error, parameters), or why there was no answer."""
                replies = await calls_as(
                    control, [(method, {})], uid=OTHER, gid=FILES_GID, groups=[FILES_GID]
                )
                return replies if isinstance(replies, str) else replies[0]

            # an administrator: it may reload
            reloaded = await as_other(Method.RELOAD)
            assert not isinstance(reloaded, str) and reloaded[0] is None
            # made an observer: it still connects and reads, but reloading needs the administrator
            replace(config, sockets_text(directory, allowUids=[OTHER], observerUids=[OTHER]) + body)
            code, out, err = await ctl_reload(control, "--json")
            assert (code, err) == (0, "")
            assert json.loads(out)["result"]["restartRequired"] == []
            refused = await as_other(Method.RELOAD)
            assert not isinstance(refused, str)
            assert refused[0] == "io.sessionsupervisor.control.v1.PermissionDenied"
            assert (refused[1]["role"], refused[1]["granted"]) == ("administrator", "observer")
            # taken off every list: its open subscription ends, and its next connect is refused
            # before any byte
            async with subscribed_as(directory / "sockets" / "subscribe.sock", OTHER) as subscriber:
                assert await subscriber.line() == "subscribed"
                replace(config, sockets_text(directory) + body)
                code, out, err = await ctl_reload(control)
                assert (code, err) == (0, "")
                assert (await subscriber.line()).startswith("ended")
            assert await as_other(Method.STATUS) == "closed after 0 replies"
            assert await daemon.stop() == 0


@pytest.mark.genesys_sim(seed=42)
async def test_a_store_change_is_named_for_a_restart_and_a_refused_reload_fails_ctl(
    genesys_sim: GenesysSimulator,
) -> None:
    with short_dir("ss-tbl-") as directory:
        sockets = directory / "sockets"
        sockets.mkdir()
        head = (
            f'[sockets]\nsubscribe = "{sockets / "subscribe.sock"}"\ncontrol = "{sockets / "control.sock"}"\n'
        )
        body = genesys_config(genesys_sim.urls, 1)
        store = f'[store]\npath = "{directory / "store.sqlite3"}"\n'
        config = config_file(directory, head + store + body, Credentials(cxone=None, cxone_password=None))
        control = sockets / "control.sock"
        async with running_daemon(config) as daemon:
            await daemon.wait_ready(1)
            moved = f'[store]\npath = "{directory / "elsewhere.sqlite3"}"\n'
            replace(config, head + moved + body)
            code, out, err = await ctl_reload(control, "--json")
            assert (code, err) == (0, "")
            result = json.loads(out)["result"]
            assert (result["restartRequired"], result["restarted"], result["unchanged"]) == (["store"], [], 1)
            assert (await daemon.arrived("CONFIG_RELOADED"))[-1]["restartRequired"] == ["store"]
            # the store in use is still the first one: nothing pretended it moved
            assert not (directory / "elsewhere.sqlite3").exists()
            code, out, err = await ctl_reload(control)
            assert (code, err) == (0, "")
            assert (
                out
                == "reloaded: none added, none removed, none restarted, 1 unchanged; restart required for: store\n"
            )
            # a refused reload: exit 1, one line, nothing on stdout (with --json too)
            replace(config, head + "[daemon]\nshutdownGrace = -1\n" + body.replace("[daemon]\n", "", 1))
            for args in ((), ("--json",)):
                code, out, err = await ctl_reload(control, *args)
                assert (code, out) == (1, "")
                (line,) = err.splitlines()
                assert line.startswith(
                    "session-supervisor: error: io.sessionsupervisor.control.v1.ReloadFailed: "
                )
            assert await daemon.stop() == 0


@pytest.mark.cxone_sim(seed=43)
async def test_sessions_a_reload_restarts_are_stopped_concurrently(
    cxone_sim: CxoneSimulator, tmp_path: Path
) -> None:
    """Every session's station changes: each must be stopped (a DELETE) and started again. The
    simulator holds every DELETE until the test lets them go; all of them must be held at once."""
    sessions = 6
    text = cxone_config(cxone_sim.urls, sessions)
    path = tmp_path / "supervisor.toml"
    path.write_text(text)
    async with supervised(text, tmp_path) as h:
        await h.wait(lambda: h.all_in("active"), 20)
        held = cxone_sim.faults.inject(Fault(kind=FaultKind.BLACKHOLE, endpoint="DELETE *"))
        assert held.id is not None
        held_id = held.id
        path.write_text(text.replace('stationId = "station-', 'stationId = "moved-'))
        outcome = []

        async def reload() -> None:
            outcome.append(await Reloader(h.supervisor, lambda: load_config(path)).reload())

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(reload)
                await wait_until(lambda: cxone_sim.recorder.fault_hits(held_id) == sessions, 20)
                cxone_sim.faults.clear(held_id)
        finally:
            cxone_sim.faults.clear(held_id)
        (result,) = outcome
        assert result.error is None
        assert sorted(result.restarted) == [f"cx-{i}" for i in range(sessions)]
        await h.wait(lambda: h.all_in("active"), 20)
