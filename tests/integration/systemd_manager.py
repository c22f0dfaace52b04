"""A real systemd manager for the unit tests that need one (docs/systemd.md,
"Tested for real").

PID 1 on these machines is not systemd, so there is no system manager and ``systemd-run`` has nobody
to talk to. What does run is systemd's own manager binary (``/lib/systemd/systemd``, 252) in *user*
mode, as root, confined so that it can touch nothing outside the test:

* a private mount namespace (``unshare -m``): a tmpfs on ``/run`` with the ``/run/systemd/system``
  marker a user manager wants to see (sd_booted(3)) and the ``/run/systemd/inaccessible`` nodes PID 1
  normally creates (the sandbox directives mount them over hidden paths);
* its own cgroup: a fresh child of the caller's cgroup in the cgroup2 hierarchy, entered *before* a
  private cgroup namespace (``unshare -C``) in which cgroup2 is mounted again. The manager believes it
  owns the root and migrates "every process in the root" into ``init.scope``: in this namespace that
  is itself alone. (Without this, a manager started at the real root moves every process of the
  machine, PID 1 included, into its ``init.scope``: learnt the hard way.)

``systemctl --user`` reaches it from outside through ``/proc/<pid>/root/run/ss-user``.
What a user manager does differently from the system manager, and what the tests adapt in drop-ins,
is listed in docs/systemd.md ("Tested for real").
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

__all__ = ["UserManager", "manager_unavailable", "user_manager"]

SYSTEMD = next((p for p in ("/lib/systemd/systemd", "/usr/lib/systemd/systemd") if Path(p).is_file()), None)
RUNTIME = "/run/ss-user"  # XDG_RUNTIME_DIR inside the manager's namespace

STAGE = r"""
set -e
mount --make-rprivate /
mount -t cgroup2 cgroup2 /sys/fs/cgroup
mount -t tmpfs -o mode=0755 tmpfs /run
mkdir -p /run/systemd/system /run/systemd/inaccessible "$XDG_RUNTIME_DIR" /run/ss-test
# as the system manager's /run/systemd: services running as another uid (DynamicUser=) reach it
chmod 0755 "$XDG_RUNTIME_DIR"
cd /run/systemd/inaccessible
mkdir dir && touch reg && mkfifo fifo && mknod chr c 0 0 && mknod blk b 0 0
"$PYTHON" -c 'import socket; socket.socket(socket.AF_UNIX).bind("sock")'
chmod 0000 dir reg fifo chr blk sock
cd /
exec "$SYSTEMD" --user
"""


def _cgroup2() -> tuple[Path, str] | None:
    """(cgroup2 mount point, this process's cgroup2 path), or None without a cgroup2 hierarchy."""
    mount = None
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        if right.split()[0] == "cgroup2":
            mount = Path(left.split()[4])
            break
    own = next(
        (line[3:] for line in Path("/proc/self/cgroup").read_text().splitlines() if line.startswith("0::")),
        None,
    )
    return (mount, own) if mount is not None and own is not None else None


def _die_with_parent() -> None:
    """PR_SET_PDEATHSIG (prctl(2)): a test run killed outright takes its manager with it."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG


def manager_unavailable() -> str | None:
    """Why a confined user manager cannot run here, or None when it can."""
    if os.geteuid() != 0:
        return "running systemd's manager in private mount and cgroup namespaces needs root"
    if SYSTEMD is None:
        return "no systemd manager binary (/lib/systemd/systemd)"
    if Path("/run/systemd/system").exists():
        return (
            "PID 1 is systemd here: its own tests belong on a real unit (systemd-run), not a private manager"
        )
    missing = [tool for tool in ("unshare", "systemctl", "mount") if shutil.which(tool) is None]
    if missing:
        return f"missing {', '.join(missing)}"
    if _cgroup2() is None:
        return "no cgroup2 hierarchy to give the manager a cgroup of its own"
    return None


class UserManager:
    """A running, confined ``systemd --user`` (see the module docstring)."""

    def __init__(self, process: subprocess.Popen[bytes], cgroup: Path, home: Path) -> None:
        self.process = process
        self.cgroup = cgroup
        self.home = home
        self.units = home / "config" / "systemd" / "user"
        self.units.mkdir(parents=True, exist_ok=True)

    @property
    def root(self) -> Path:
        """The manager's view of the filesystem (its private /run included), from outside."""
        return Path(f"/proc/{self.process.pid}/root")

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "XDG_RUNTIME_DIR": f"{self.root}{RUNTIME}"}

    def systemctl(self, *args: str, check: bool = True, timeout: float = 50) -> str:
        result = subprocess.run(
            ["systemctl", "--user", "--no-pager", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"systemctl {' '.join(args)}: {result.returncode}\n{result.stdout}{result.stderr}"
            )
        return result.stdout

    def show(self, unit: str, *properties: str) -> dict[str, str]:
        out = self.systemctl("show", unit, *(f"--property={p}" for p in properties))
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def wait_running(self, limit_s: float = 30) -> None:
        deadline = time.monotonic() + limit_s
        while True:
            if self.process.poll() is not None:
                raise AssertionError(f"the manager exited with {self.process.returncode}")
            state = subprocess.run(
                ["systemctl", "--user", "show", "--property=SystemState", "--value"],
                env=self.env,
                capture_output=True,
                text=True,
                check=False,
            ).stdout.strip()
            if state in ("running", "degraded"):
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"the manager is not running after {limit_s}s (state {state!r})")
            time.sleep(0.05)  # polling the manager's start-up, bounded by limit_s

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)  # a user manager stops its units and exits
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        # the manager's own subtree, leaves first (it empties it on exit)
        for directory in sorted(self.cgroup.rglob("*"), key=lambda p: len(p.parts), reverse=True):
            if directory.is_dir():
                with contextlib.suppress(OSError):
                    directory.rmdir()
        with contextlib.suppress(OSError):
            self.cgroup.rmdir()


@contextlib.contextmanager
def user_manager() -> Iterator[UserManager]:
    found = _cgroup2()
    assert SYSTEMD is not None and found is not None
    mount, own = found
    cgroup = mount / own.lstrip("/") / f"ss-test-{uuid.uuid4().hex[:12]}"
    cgroup.mkdir()
    with tempfile.TemporaryDirectory(prefix="ss-um-", dir="/tmp") as home_dir:
        home = Path(home_dir)
        env = {
            "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
            "HOME": str(home),
            "XDG_CONFIG_HOME": str(home / "config"),
            "XDG_STATE_HOME": str(home / "state"),
            "XDG_RUNTIME_DIR": RUNTIME,
            "SYSTEMD": SYSTEMD,
            "PYTHON": sys.executable,
        }
        # enter the new cgroup first, then the namespaces: the cgroup namespace is rooted at it
        command = 'echo $$ > "$0/cgroup.procs" && exec unshare -m -C sh -c "$1"'
        process = subprocess.Popen(
            ["sh", "-c", command, str(cgroup), STAGE],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=_die_with_parent,
        )
        manager = UserManager(process, cgroup, home)
        try:
            manager.wait_running()
            # the system manager's notify socket takes datagrams from any uid (its own checks the
            # sender's pid); a user manager's is its user's only: open it as PID 1's is
            (manager.root / RUNTIME.lstrip("/") / "systemd" / "notify").chmod(0o777)
            yield manager
        finally:
            manager.stop()
