"""Socket files and who may connect: paths, binding with a mode, stale files, peer credentials.

* Filesystem sockets only: the abstract namespace has no permissions (unix(7), "Abstract sockets"; docs/robustness.md, "Local sockets").
* A socket file is bound under a temporary name in the same directory, given its mode, then
  renamed over the final path: no moment exists where the final path has the umask's mode.
* A path already there is replaced only when it is a socket nobody listens on (a killed
  daemon's); a live daemon's socket is refused, and a path that is not a socket is never removed.
* Peers are checked on accept, before any byte is read or sent: ``SO_PEERCRED`` gives the
  uid, primary gid and pid at ``connect()`` (unix(7)); ``SO_PEERGROUPS`` (Linux 4.13) gives the
  supplementary groups, so a group allow-list means membership, not just the primary group.
  Nothing is trusted by pid (pids are reused); it is only reported.
"""

from __future__ import annotations

import contextlib
import errno
import grp
import os
import socket
import stat
import struct
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from supervisor.api.events import Peer
from supervisor.api.paths import default_paths
from supervisor.api.roles import ControlRoles
from supervisor.config import SocketsConfig
from supervisor.errors import ConfigError

__all__ = [
    "AccessPolicy",
    "PeerPolicy",
    "bind_unix",
    "default_paths",
    "identity",
    "peer_of",
    "platform_policy",
    "policies",
    "remove_if_ours",
    "resolve_group",
    "socket_paths",
]

# Linux's value (asm-generic/socket.h); Python's socket module does not name it
_SO_PEERGROUPS = getattr(socket, "SO_PEERGROUPS", 59)
_CRED = struct.Struct("3i")
_MAX_GROUPS = 256


def socket_paths(config: SocketsConfig, environ: Mapping[str, str]) -> tuple[Path, Path] | str:
    """The two socket paths, or why the API is off (disabled, or no path and no ``$XDG_RUNTIME_DIR``)."""
    if not config.enabled:
        return "disabled by sockets.enabled = false"
    defaults = default_paths(environ)
    subscribe = Path(config.subscribe) if config.subscribe else (defaults[0] if defaults else None)
    control = Path(config.control) if config.control else (defaults[1] if defaults else None)
    if subscribe is None or control is None:
        return "no sockets.subscribe / sockets.control path and $XDG_RUNTIME_DIR is unset"
    return subscribe, control


class PeerPolicy(Protocol):
    """Who may connect to a socket: asked on accept, before any byte is read or sent."""

    def allows(self, peer: Peer) -> bool: ...


@dataclass(frozen=True, slots=True)
class AccessPolicy:
    """Who may connect to one socket: these uids, or members of these groups."""

    uids: frozenset[int]
    gids: frozenset[int]

    def allows(self, peer: Peer) -> bool:
        if peer.uid in self.uids:
            return True
        return bool(self.gids) and (peer.gid in self.gids or not self.gids.isdisjoint(peer.groups))


def policies(config: SocketsConfig, own_uid: int | None = None) -> tuple[AccessPolicy, ControlRoles]:
    """(subscribe, control): the daemon's own uid and root always, plus what the config adds.

    The control socket's peers each get a role (supervisor/api/roles.py); a peer with none is refused.
    """
    own = frozenset({os.getuid() if own_uid is None else own_uid, 0})
    subscribe = AccessPolicy(own | frozenset(config.allow_uids), frozenset(config.allow_gids))
    control = ControlRoles(
        always=own,
        admin_uids=frozenset(config.control_allow_uids),
        admin_gids=frozenset(config.control_allow_gids),
        operator_uids=frozenset(config.operator_uids),
        operator_gids=frozenset(config.operator_gids),
        observer_uids=frozenset(config.observer_uids),
        observer_gids=frozenset(config.observer_gids),
    )
    return subscribe, control


def platform_policy(config: SocketsConfig, own_uid: int | None = None) -> AccessPolicy:
    """Who may have the subscribe socket's platform stream: the daemon's own uid and root always, plus
    ``platformAllowUids`` and members of ``platformAllowGids`` (customer data: narrower than the socket)."""
    own = frozenset({os.getuid() if own_uid is None else own_uid, 0})
    return AccessPolicy(own | frozenset(config.platform_allow_uids), frozenset(config.platform_allow_gids))


def peer_of(sock: socket.socket) -> Peer:
    """The peer's credentials at connect time; reads nothing from the stream."""
    pid, uid, gid = _CRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CRED.size))
    return Peer(pid, uid, gid, _groups(sock, gid))


def _groups(sock: socket.socket, gid: int) -> tuple[int, ...]:
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, _SO_PEERGROUPS, 4 * _MAX_GROUPS)
    except OSError:
        # an older kernel (or more groups than we asked room for): the primary group only
        return (gid,)
    count = len(raw) // 4
    return tuple(struct.unpack(f"{count}I", raw[: 4 * count])) or (gid,)


def _check_existing(path: Path) -> None:
    """Refuse a path we must not replace; return when it is absent or a dead daemon's socket."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(info.st_mode):
        raise ConfigError(f"{path}: exists and is not a socket; not removing it")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(1.0)
        probe.connect(str(path))
    except (ConnectionRefusedError, FileNotFoundError):
        return  # nobody listens: a socket left behind by a killed daemon
    except OSError as exc:
        if exc.errno in (errno.ECONNREFUSED, errno.ENOENT):
            return
        raise ConfigError(f"{path}: cannot check the existing socket: {exc.strerror}") from None
    finally:
        probe.close()
    raise ConfigError(f"{path}: another daemon is listening on this socket")


def _ensure_directory(path: Path, create: bool) -> None:
    parent = path.parent
    if parent.is_dir():
        return
    if not create:
        raise ConfigError(f"{path}: directory {parent} does not exist")
    try:
        # only the default location is created: private to the user ($XDG_RUNTIME_DIR is already 0700)
        parent.mkdir(mode=0o700, parents=False, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot create {parent}: {exc.strerror}") from None


def resolve_group(group: str | int | None) -> int | None:
    """A group name or gid as a gid; ConfigError for a name the system does not know."""
    if group is None or isinstance(group, int):
        return group
    if group.isdigit():
        return int(group)
    try:
        return grp.getgrnam(group).gr_gid
    except KeyError:
        raise ConfigError(f"sockets.group: no group named '{group}'") from None


def bind_unix(
    path: Path,
    mode: int,
    *,
    group: int | None = None,
    create_directory: bool = False,
    backlog: int = 128,
) -> socket.socket:
    """A listening, non-blocking AF_UNIX stream socket at ``path`` with ``mode`` (and ``group``).

    Raises :class:`ConfigError` (one line naming the path) when the path is held by a live
    daemon, is not a socket, is too long, or its directory is missing or not writable.
    """
    if len(os.fsencode(path)) > 107:
        raise ConfigError(f"{path}: a socket path is limited to 107 bytes")
    _ensure_directory(path, create_directory)
    _check_existing(path)
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(temporary))
        if group is not None:
            # before the rename: the final path never exists with the wrong group
            os.chown(temporary, -1, group)
        os.chmod(temporary, mode)
        os.replace(temporary, path)
        sock.listen(backlog)
    except OSError as exc:
        sock.close()
        _unlink_quietly(temporary)
        raise ConfigError(f"{path}: cannot listen: {exc.strerror or exc}") from None
    sock.setblocking(False)
    return sock


def _unlink_quietly(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()


Identity = tuple[int, int, int]


def identity(path: Path) -> Identity | None:
    """(device, inode, ctime) of a socket file, to remove it at exit only if it is still ours.

    The inode alone is not enough: a file made after ours was unlinked often gets the same number.
    """
    try:
        info = path.lstat()
    except OSError:
        return None
    return (info.st_dev, info.st_ino, info.st_ctime_ns) if stat.S_ISSOCK(info.st_mode) else None


def remove_if_ours(path: Path, ours: Identity | None) -> None:
    if ours is not None and identity(path) == ours:
        _unlink_quietly(path)
