"""Who may connect: peer credentials on accept, before any byte (docs/robustness.md,
"Local sockets" and "Fault matrix" row 15).

A client with another uid is a forked child that drops its privileges with ``os.setuid`` (these
machines run the tests as root) and reports, through a pipe, how many bytes the daemon sent it.
"""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import anyio
import pytest

from supervisor.api.protocol import Method, encode_call
from supervisor.clock import FakeClock
from supervisor.config import SocketsConfig
from supervisor.errors import ConfigError
from supervisor.runtime.assembly import socket_api
from supervisor.sim.genesys import GenesysSimulator
from tests.harness.config import genesys_config
from tests.harness.waits import wait_until
from tests.integration.api_harness import Conn, api_daemon, cli_as

pytestmark = [
    pytest.mark.integration,
    pytest.mark.anyio,
    pytest.mark.skipif(os.geteuid() != 0, reason="switching to another uid needs root"),
    pytest.mark.genesys_sim(seed=3),
]

OTHER_UID = 12345
OPS_GID = 4243


async def as_other_user(path: Path, *, groups: list[int], gid: int | None = None) -> str:
    """Connect to ``path`` as uid OTHER_UID from a forked child; its report: bytes received, or the error."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: plain blocking sockets, then _exit (never back into pytest)
        report = "?"
        try:
            os.close(read_end)
            os.setgroups(groups)
            if gid is not None:
                os.setgid(gid)
            os.setuid(OTHER_UID)
            client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            client.settimeout(20)
            client.connect(str(path))
            received = 0
            try:
                client.sendall(encode_call(Method.SUBSCRIBE, {}, more=True))
                while chunk := client.recv(65536):
                    received += len(chunk)
                    if received:
                        break  # accepted: the snapshot started to arrive
            except (ConnectionResetError, BrokenPipeError):
                pass
            report = f"received {received}"
        except BaseException as exc:
            report = f"error {type(exc).__name__}: {exc}"
        finally:
            os.write(write_end, report.encode())
            os._exit(0)
    os.close(write_end)
    try:
        # the daemon runs on this event loop: wait for the child without blocking it
        await anyio.wait_readable(read_end)
        report = os.read(read_end, 1000).decode()
    finally:
        os.close(read_end)
        await anyio.to_thread.run_sync(os.waitpid, pid, 0)
    return report


def open_directory(h_path: Path) -> None:
    # the test's socket directory is 0700: let the other uid reach the socket files (their mode still applies)
    os.chmod(h_path.parent, 0o711)


async def test_a_peer_whose_uid_is_not_allowed_is_refused_with_zero_bytes(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    async with api_daemon(genesys_config(genesys_sim.urls, 2), tmp_path) as h:
        open_directory(h.subscribe)
        # the socket files: 0660, our group; the child keeps gid 0, so the file lets it connect and
        # only the peer check stands in its way
        assert stat.S_IMODE(h.subscribe.stat().st_mode) == 0o660
        for path in (h.subscribe, h.control):
            assert await as_other_user(path, groups=[]) == "received 0"
        refused = h.recorded.named("SOCKET_PEER_REFUSED")
        assert [(e["socket"], e["peer"]["uid"], e["peer"]["gid"]) for e in refused] == [
            ("subscribe", OTHER_UID, 0),
            ("control", OTHER_UID, 0),
        ]
        assert all(e["peer"]["pid"] > 0 for e in refused)
        # the counters are in the control socket's status; we (root) are allowed
        conn = await Conn.open(h.control)
        status = (await conn.call(Method.STATUS)).parameters
        await conn.aclose()
        assert status["sockets"]["subscribe"]["refusedPeers"] == 1
        assert status["sockets"]["control"]["refusedPeers"] == 1


async def test_an_ops_group_gets_the_subscribe_socket_but_not_the_control_socket(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    """allowGids matches supplementary groups (SO_PEERGROUPS); the control socket stays narrower."""
    # as systemd's SocketGroup= would: the ops group owns the socket files (sockets.group)
    sockets = SocketsConfig(allow_gids=[OPS_GID], group=OPS_GID)
    async with api_daemon(genesys_config(genesys_sim.urls, 2), tmp_path, sockets=sockets) as h:
        await h.wait(lambda: h.all_in("active"))
        open_directory(h.subscribe)
        assert {path.stat().st_gid for path in (h.subscribe, h.control)} == {OPS_GID}
        # primary group 4242, the ops group only as a supplementary one
        accepted = await as_other_user(h.subscribe, groups=[OPS_GID], gid=4242)
        assert accepted.startswith("received ") and accepted != "received 0"
        assert await as_other_user(h.control, groups=[OPS_GID], gid=4242) == "received 0"
        # outside the group the socket file's mode stops it before the peer check could
        assert (await as_other_user(h.subscribe, groups=[], gid=4242)).startswith("error PermissionError")
        refused = [e["socket"] for e in h.recorded.named("SOCKET_PEER_REFUSED")]
        assert refused == ["control"]


async def test_a_second_daemon_cannot_take_the_sockets_of_a_live_one(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    async with api_daemon(genesys_config(genesys_sim.urls, 1), tmp_path) as h:
        inodes = [h.subscribe.lstat().st_ino, h.control.lstat().st_ino]
        second = socket_api(h.supervisor, SocketsConfig(), environ={}, paths=(h.subscribe, h.control))
        with pytest.raises(ConfigError, match="another daemon is listening on this socket"):
            second.bind()
        # the first still answers on both
        conn = await Conn.open(h.control)
        assert (await conn.call(Method.STATUS)).error is None
        await conn.aclose()
        await wait_until(lambda: h.api.control is not None and h.api.control.active == 0)
        assert [h.subscribe.lstat().st_ino, h.control.lstat().st_ino] == inodes


async def test_a_socket_file_the_user_may_not_open_is_exit_1_for_ctl_and_watch(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    """README says 1 when the daemon refuses us; click's readable check made it 2."""
    async with api_daemon(genesys_config(genesys_sim.urls, 1), tmp_path) as h:
        open_directory(h.subscribe)
        # 0660 root:root, and the user is in neither: the file's mode refuses it
        for args in (
            ["ctl", "--socket", str(h.control), "status"],
            ["watch", "--socket", str(h.subscribe), "--json"],
        ):
            code, out, err = await cli_as(args, uid=OTHER_UID, gid=4242, groups=[])
            assert (code, out) == (1, ""), err
            assert (
                err.count("\n") == 1
                and "permission denied: the socket's mode and group do not let you in" in err
            )


async def refused_as(path: Path, uid: int, times: int) -> str:
    """Connect ``times`` times as ``uid`` from a forked child, as fast as it can; its report."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: plain blocking sockets, then _exit (never back into pytest)
        report = "?"
        try:
            os.close(read_end)
            os.setgroups([])
            os.setuid(uid)
            closed = 0
            for _ in range(times):
                client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                client.settimeout(20)
                client.connect(str(path))
                try:
                    if client.recv(1) == b"":
                        closed += 1
                except ConnectionResetError:
                    closed += 1
                client.close()
            report = f"closed {closed}"
        except BaseException as exc:
            report = f"error {type(exc).__name__}: {exc}"
        finally:
            os.write(write_end, report.encode())
            os._exit(0)
    os.close(write_end)
    try:
        await anyio.wait_readable(read_end)
        report = os.read(read_end, 1000).decode()
    finally:
        os.close(read_end)
        await anyio.to_thread.run_sync(os.waitpid, pid, 0)
    return report


async def test_a_peer_refused_thousands_of_times_is_one_line_per_interval(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    """3,000 refusals in a few seconds used to be 3,000 SOCKET_PEER_REFUSED lines."""
    clock = FakeClock()
    async with api_daemon(genesys_config(genesys_sim.urls, 1), tmp_path, clock=clock) as h:
        open_directory(h.control)
        assert await refused_as(h.control, OTHER_UID, 3000) == "closed 3000"

        def lines() -> list[tuple[int, int, int]]:
            return [
                (e["peer"]["uid"], e["count"], e["refused"]) for e in h.recorded.named("SOCKET_PEER_REFUSED")
            ]

        assert lines() == [(OTHER_UID, 1, 1)]  # the first at once, the rest counted
        conn = await Conn.open(h.control)
        status = (await conn.call(Method.STATUS)).parameters
        await conn.aclose()
        assert status["sockets"]["control"]["refusedPeers"] == 3000  # every one counted at once
        # another peer gets its own line at once
        assert await refused_as(h.control, OTHER_UID + 1, 1) == "closed 1"
        assert lines() == [(OTHER_UID, 1, 1), (OTHER_UID + 1, 1, 3001)]
        # the interval ends: the next refusal (of anyone) brings the first peer's count out, one line
        clock.advance(10.0)
        assert await refused_as(h.control, OTHER_UID, 1) == "closed 1"
        assert lines() == [(OTHER_UID, 1, 1), (OTHER_UID + 1, 1, 3001), (OTHER_UID, 2999, 3002)]
