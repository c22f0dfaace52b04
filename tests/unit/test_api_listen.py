"""Socket files and who may connect (supervisor/api/listen.py), and the [sockets] table."""

from __future__ import annotations

import os
import socket
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from supervisor.api.events import Peer
from supervisor.api.listen import (
    AccessPolicy,
    bind_unix,
    default_paths,
    identity,
    peer_of,
    policies,
    remove_if_ours,
    resolve_group,
    socket_paths,
)
from supervisor.config import SocketsConfig, parse_config
from supervisor.errors import ConfigError


@pytest.fixture
def short_dir() -> Iterator[Path]:
    # sun_path holds 107 bytes: pytest's tmp_path can be longer than that
    with tempfile.TemporaryDirectory(prefix="ss-", dir="/tmp") as d:
        yield Path(d)


def test_the_socket_file_gets_the_configured_mode(short_dir: Path) -> None:
    path = short_dir / "s.sock"
    listener = bind_unix(path, 0o640)
    try:
        info = path.lstat()
        assert stat.S_ISSOCK(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o640
        # nothing else is left in the directory (the temporary name was renamed over)
        assert [p.name for p in short_dir.iterdir()] == ["s.sock"]
    finally:
        listener.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another group needs root or membership")
def test_the_socket_file_can_belong_to_an_ops_group(short_dir: Path) -> None:
    path = short_dir / "s.sock"
    listener = bind_unix(path, 0o660, group=resolve_group("4243"))
    try:
        assert path.lstat().st_gid == 4243
    finally:
        listener.close()


def test_groups_are_named_or_numbered() -> None:
    assert resolve_group("root") == 0 and resolve_group(7) == 7 and resolve_group(None) is None
    with pytest.raises(ConfigError, match=r"sockets\.group: no group named 'no-such-group-x'"):
        resolve_group("no-such-group-x")


def test_a_dead_daemons_socket_is_replaced(short_dir: Path) -> None:
    path = short_dir / "s.sock"
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(path))
    stale.close()  # the file stays, nobody listens: what `kill -9` leaves behind
    listener = bind_unix(path, 0o660)
    try:
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.connect(str(path))
        client.close()
    finally:
        listener.close()


def test_a_live_daemons_socket_is_never_taken_over(short_dir: Path) -> None:
    path = short_dir / "s.sock"
    first = bind_unix(path, 0o660)
    try:
        inode = path.lstat().st_ino
        with pytest.raises(ConfigError, match="another daemon is listening on this socket"):
            bind_unix(path, 0o660)
        assert path.lstat().st_ino == inode
    finally:
        first.close()


@pytest.mark.parametrize("kind", ["file", "directory"])
def test_a_path_that_is_not_a_socket_is_never_removed(short_dir: Path, kind: str) -> None:
    path = short_dir / "s.sock"
    if kind == "file":
        path.write_text("precious")
    else:
        path.mkdir()
    with pytest.raises(ConfigError, match="exists and is not a socket; not removing it"):
        bind_unix(path, 0o660)
    assert path.exists()
    if kind == "file":
        assert path.read_text() == "precious"


def test_at_exit_only_our_own_socket_file_is_removed(short_dir: Path) -> None:
    path = short_dir / "s.sock"
    ours = bind_unix(path, 0o660)
    mine = identity(path)
    ours.close()
    path.unlink()
    theirs = bind_unix(path, 0o660)  # another daemon took the path after us
    try:
        remove_if_ours(path, mine)
        assert path.exists()
        remove_if_ours(path, identity(path))
        assert not path.exists()
    finally:
        theirs.close()


def test_a_missing_directory_or_a_long_path_is_one_line(short_dir: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        bind_unix(short_dir / "missing" / "s.sock", 0o660)
    with pytest.raises(ConfigError, match="limited to 107 bytes"):
        bind_unix(short_dir / ("x" * 120), 0o660)


def test_the_default_directory_is_created_private(short_dir: Path) -> None:
    paths = default_paths({"XDG_RUNTIME_DIR": str(short_dir)})
    assert paths is not None
    listener = bind_unix(paths[0], 0o660, create_directory=True)
    try:
        assert stat.S_IMODE(paths[0].parent.stat().st_mode) == 0o700
    finally:
        listener.close()


def test_without_a_path_and_without_xdg_runtime_dir_the_api_is_off() -> None:
    assert default_paths({}) is None
    assert "XDG_RUNTIME_DIR is unset" in str(socket_paths(SocketsConfig(), {}))
    assert "disabled" in str(socket_paths(SocketsConfig(enabled=False), {"XDG_RUNTIME_DIR": "/run/user/1"}))
    configured = SocketsConfig(subscribe="/run/a/s.sock", control="/run/a/c.sock")
    assert socket_paths(configured, {}) == (Path("/run/a/s.sock"), Path("/run/a/c.sock"))


def test_peer_credentials_are_read_without_reading_the_stream() -> None:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        a.sendall(b"still unread")
        peer = peer_of(b)
        assert (peer.uid, peer.gid, peer.pid) == (os.getuid(), os.getgid(), os.getpid())
        assert os.getgid() in peer.groups
        assert b.recv(100) == b"still unread"
    finally:
        a.close()
        b.close()


def test_policies_allow_own_uid_and_root_and_what_the_config_adds() -> None:
    config = SocketsConfig(allow_uids=[1001], allow_gids=[900], control_allow_gids=[900])
    subscribe, control = policies(config, own_uid=4242)
    assert subscribe.allows(Peer(1, 4242, 4242)) and subscribe.allows(Peer(1, 0, 0))
    assert subscribe.allows(Peer(1, 1001, 1001)) and not control.allows(Peer(1, 1001, 1001))
    # a supplementary group counts, not only the primary one
    assert control.allows(Peer(1, 2000, 2000, (2000, 900)))
    assert not control.allows(Peer(1, 2000, 2000, (2000,)))
    assert not AccessPolicy(frozenset({1}), frozenset()).allows(Peer(1, 2, 2, (2,)))


@pytest.mark.parametrize(
    ("table", "problem"),
    [
        ('mode = "0666"', "sockets: mode 0666 is world-writable"),
        ('mode = "rw"', "sockets.mode: expected `str` matching regex"),
        ("controlAllowUids = [5]", "controlAllowUids must be a subset of allowUids"),
        ("allowGids = [7]\ncontrolAllowGids = [8]", "controlAllowGids must be a subset of allowGids"),
        ('subscribe = "relative.sock"', "sockets.subscribe: expected `str` matching regex '^/'"),
        ('subscribe = "/a.sock"\ncontrol = "/a.sock"', "two different paths"),
        ("subscriberBufferBytes = 100", "sockets.subscriberBufferBytes: expected `int` >= 4096"),
        ("laggedDisconnectAfter = -1", "sockets.laggedDisconnectAfter: expected `float` >= 0.0"),
        ("maxConnection = 3", "unknown field `maxConnection`"),
        ("controlIdleTimeout = 0", "sockets.controlIdleTimeout: expected `float` > 0.0"),
    ],
)
def test_bad_sockets_tables_are_one_located_line(table: str, problem: str) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config(f"[platforms]\n[sockets]\n{table}\n", "s.toml")
    assert problem in str(refused.value) and str(refused.value).startswith("s.toml: sockets")


def test_the_sockets_table_defaults() -> None:
    sockets = parse_config("[platforms]\n", "s.toml").sockets
    assert sockets.enabled and sockets.mode_bits == 0o660
    assert sockets.subscriber_buffer_bytes == 1 << 20 and sockets.lagged_disconnect_after == 10.0
    assert (sockets.max_connections, sockets.handshake_timeout) == (128, 5.0)
    assert sockets.control_idle_timeout == 60.0
    assert (
        parse_config(
            "[platforms]\n[sockets]\ncontrolIdleTimeout = 2.5\n", "s.toml"
        ).sockets.control_idle_timeout
        == 2.5
    )
