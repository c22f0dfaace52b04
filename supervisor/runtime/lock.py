"""One daemon per configuration: an exclusive lock taken before anything is started.

Two daemons on one configuration would hold every session twice (two guest connections
knocking each other off, two CXone agent sessions). ``run`` takes an exclusive ``flock`` on a
lock file before it binds a socket or starts a session; a second daemon refuses with one line
naming the holder's pid. The lock dies with the process (kill -9 included), so a stale file
never blocks a restart: only a live holder does.

**The file goes with its daemon.** Lock files piled up (227 from test runs). The daemon
now removes its lock file when it stops, and only while it still holds the lock: unlink first,
close (which drops the flock) after. A daemon starting meanwhile may have opened the old file
before it was unlinked and then get its lock on that unlinked inode, where nobody else can see it;
so after every successful flock the holder checks that the path still names the file it locked
(``fstat`` of the descriptor against ``stat`` of the path, device and inode) and, if not, closes it
and opens the path again. Two daemons can then never both hold "the" lock of one configuration.
A ``kill -9`` still leaves the file: the next daemon takes it over (the flock died with its holder).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

from supervisor.errors import ConfigError

__all__ = ["DaemonLock", "default_lock_path"]


def default_lock_path(config_path: Path, environ: Mapping[str, str]) -> Path:
    """``<runtime dir>/<config name>-<hash of its real path>.lock``.

    The runtime directory is systemd's ``$RUNTIME_DIRECTORY``, else ``$XDG_RUNTIME_DIR/
    session-supervisor``, else ``/tmp/session-supervisor-<uid>``.
    """
    real = str(config_path.resolve())
    digest = hashlib.sha256(real.encode()).hexdigest()[:12]
    runtime = environ.get("RUNTIME_DIRECTORY", "").split(":")[0]
    if runtime:
        base = Path(runtime)
    elif environ.get("XDG_RUNTIME_DIR"):
        base = Path(environ["XDG_RUNTIME_DIR"]) / "session-supervisor"
    else:
        base = Path(tempfile.gettempdir()) / f"session-supervisor-{os.getuid()}"
    return base / f"{config_path.stem}-{digest}.lock"


class DaemonLock:
    """An exclusive, non-blocking ``flock`` on ``path``; the holder's pid is written into the file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock or raise ConfigError naming the holder (and the file)."""
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot create the lock file {self.path}: {exc.strerror or exc}") from None
        for _ in range(_REOPENS):
            fd = self._open()
            self._lock(fd)
            if _names(self.path, fd):
                os.ftruncate(fd, 0)
                os.write(fd, f"{os.getpid()}\n".encode())
                self._fd = fd
                return
            # the holder before us unlinked the file we opened, then let go of it: ours is a lock
            # on an inode nobody else finds; the path names a new file (or none): open it again
            os.close(fd)
        raise ConfigError(f"cannot lock {self.path}: it is replaced faster than it can be locked")

    def _open(self) -> int:
        try:
            return os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise ConfigError(f"cannot create the lock file {self.path}: {exc.strerror or exc}") from None

    def _lock(self, fd: int) -> None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = _read_pid(fd)
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                who = f"pid {holder}" if holder else "another process"
                raise ConfigError(
                    f"another session-supervisor ({who}) already runs this configuration "
                    f"(it holds {self.path})"
                ) from None
            raise ConfigError(f"cannot lock {self.path}: {exc.strerror or exc}") from None

    def release(self) -> None:
        """Remove the lock file while still holding the lock, then let go of it (idempotent)."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        with contextlib.suppress(OSError):
            if _names(self.path, fd):
                # unlinked under the lock: a daemon that opened it before this is told by its own
                # check after its flock (acquire), and opens the path again
                os.unlink(self.path)
        with contextlib.suppress(OSError):
            os.close(fd)  # closing the descriptor drops the flock


#: how often acquire opens the path again when it was replaced under it (each time, by a daemon
#: that held it and stopped: more than a few in a row is not a race but a loop gone wrong)
_REOPENS = 16


def _names(path: Path, fd: int) -> bool:
    """Whether ``path`` still names the file open as ``fd``."""
    try:
        named = os.stat(path)
    except OSError:
        return False
    held = os.fstat(fd)
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
