"""One daemon per configuration, and lock files that do not pile up.

The daemon removes its lock file when it stops, only while it holds the lock; a daemon that locked
the file just before it was removed sees that the path no longer names what it locked and opens
it again, so two daemons never both hold the lock of one configuration. Real files, real flock(2);
the one interleaving a test cannot time from outside (another daemon's release between our open
and our flock) is put there by a wrapper around flock that runs the release first.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from supervisor.errors import ConfigError
from supervisor.runtime import lock as lock_module
from supervisor.runtime.lock import DaemonLock, default_lock_path

HOLD = """
import sys, time
from pathlib import Path
from supervisor.runtime.lock import DaemonLock
lock = DaemonLock(Path(sys.argv[1]))
lock.acquire()
print("held", flush=True)
sys.stdin.read()  # until the test closes our stdin
lock.release()
"""


def test_release_removes_the_file_and_the_next_daemon_locks_a_new_one(tmp_path: Path) -> None:
    path = tmp_path / "run" / "supervisor-abc.lock"
    first = DaemonLock(path)
    first.acquire()
    assert path.read_text() == f"{os.getpid()}\n"
    first.release()
    assert not path.exists()  # no lock file left behind by a daemon that stopped
    second = DaemonLock(path)
    second.acquire()
    try:
        assert path.exists()
    finally:
        second.release()
    first.release()  # idempotent: a second release removes nothing (the file is gone already)
    assert not path.exists()


def test_a_lock_taken_on_a_file_removed_meanwhile_is_taken_again_on_the_new_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """We open the file; before our flock, its holder removes it and lets go; our flock then
    succeeds on an inode nobody else can find. The check after the flock opens the path again."""
    path = tmp_path / "supervisor-abc.lock"
    holder = DaemonLock(path)
    holder.acquire()
    real_flock = fcntl.flock
    calls: list[int] = []

    def flock_after_the_holder_let_go(fd: int, operation: int) -> Any:
        calls.append(fd)
        if len(calls) == 1:
            holder.release()  # the other daemon stops right between our open and our flock
        return real_flock(fd, operation)

    monkeypatch.setattr(lock_module.fcntl, "flock", flock_after_the_holder_let_go)
    ours = DaemonLock(path)
    ours.acquire()
    try:
        assert len(calls) == 2  # the first lock was on the removed file: opened and locked again
        held = os.stat(path)
        assert ours._fd is not None and (os.fstat(ours._fd).st_ino, os.fstat(ours._fd).st_dev) == (
            held.st_ino,
            held.st_dev,
        )
        monkeypatch.setattr(lock_module.fcntl, "flock", real_flock)
        # a third daemon finds the path locked: by us, on the file the path names
        with pytest.raises(ConfigError, match=f"pid {os.getpid()}"):
            DaemonLock(path).acquire()
    finally:
        ours.release()


def holder_process(path: Path) -> subprocess.Popen[str]:
    """Another process holding the lock (it prints "held" once it does)."""
    return subprocess.Popen(
        [sys.executable, "-c", HOLD, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )


def test_a_live_holder_in_another_process_is_named_and_its_file_stays(tmp_path: Path) -> None:
    path = tmp_path / "supervisor-abc.lock"
    with holder_process(path) as other:
        assert other.stdout is not None and other.stdout.readline() == "held\n"
        try:
            with pytest.raises(ConfigError) as refused:
                DaemonLock(path).acquire()
            assert str(refused.value) == (
                f"another session-supervisor (pid {other.pid}) already runs this configuration (it holds {path})"
            )
            assert path.exists()  # a refused daemon removes nothing
        finally:
            assert other.stdin is not None
            other.stdin.close()
            assert other.wait(timeout=20) == 0
    assert not path.exists()  # the holder removed it when it stopped


def test_a_killed_holders_file_is_taken_over(tmp_path: Path) -> None:
    path = tmp_path / "supervisor-abc.lock"
    with holder_process(path) as other:
        assert other.stdout is not None and other.stdout.readline() == "held\n"
        other.kill()  # kill -9: the flock dies with it, the file stays
        other.wait(timeout=20)
    assert path.exists()
    taken = DaemonLock(path)
    taken.acquire()
    try:
        assert path.read_text() == f"{os.getpid()}\n"
    finally:
        taken.release()


def test_the_default_lock_path_follows_the_runtime_directories(tmp_path: Path) -> None:
    config = tmp_path / "supervisor.toml"
    systemd = default_lock_path(config, {"RUNTIME_DIRECTORY": "/run/ss:/run/other"})
    assert systemd.parent == Path("/run/ss") and systemd.name.startswith("supervisor-")
    user = default_lock_path(config, {"XDG_RUNTIME_DIR": "/run/user/1000"})
    assert user.parent == Path("/run/user/1000/session-supervisor")
    assert default_lock_path(config, {}).parent.name == f"session-supervisor-{os.getuid()}"
