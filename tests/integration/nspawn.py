"""A Debian root booted by systemd-nspawn, systemd as its PID 1, for the ``systemd_pid1`` suite.

The suite runs the daemon as an operator does (docs/systemd.md, "Install"): a Debian 12 system with
systemd as PID 1, journald and systemd-sysusers, the project installed by ``systemd/install.sh``.
This module makes that system:

* :func:`missing`: what this machine lacks for it, as one line (root, ``systemd-nspawn`` from
  Debian's ``systemd-container`` at the host's systemd version, ``debootstrap``), after installing the two packages with apt-get when ``install`` says so (CI);
* :func:`cached_root`: a debootstrapped root, built once and kept outside the clone under
  ``$XDG_CACHE_HOME/session-supervisor/nspawn-<key>`` (``~/.cache``), the key a digest of the
  Debian release, its packages, the mirror and the unit files (a changed unit builds a new root);
* :class:`Container`: that root booted read-only with a tmpfs overlay (``--volatile=overlay``: the
  cache is never written), sharing the host's network (the simulators listen on the host's
  loopback), ``--keep-unit --register=no`` since PID 1 here is not systemd (no machined to register
  with, no manager to make a scope); commands run inside with ``nsenter`` into its namespaces.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

__all__ = ["RELEASE", "Container", "cached_root", "missing", "poll"]

ROOT = Path(__file__).resolve().parents[2]
RELEASE = "bookworm"
#: what the root holds beyond debootstrap's minbase: systemd as init, journald's jq-able output,
#: a Python that makes a venv (install.sh), the CA bundle pip uses, useradd and runuser (the socket
#: group's member), ps and kill
PACKAGES = (
    "systemd",
    "systemd-sysv",
    "dbus",
    "python3",
    "python3-venv",
    "ca-certificates",
    "jq",
    "procps",
    "passwd",
    "util-linux",
)
DEFAULT_MIRROR = "http://deb.debian.org/debian"
#: a cold root: debootstrap downloads and unpacks ~120 MB
DEBOOTSTRAP_LIMIT_S = 480.0
BOOT_LIMIT_S = 60.0
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def poll(predicate: Callable[[], bool], limit_s: float, what: str) -> None:
    """Wait for a state of another system (the container's manager) that cannot be awaited."""
    deadline = time.monotonic() + limit_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {limit_s:.0f} s: {what}")
        time.sleep(0.2)  # polling another system's state, bounded by the deadline


def _host_systemd_version() -> str | None:
    try:
        out = subprocess.run(
            ["dpkg-query", "-W", "-f=${Version}", "systemd"], capture_output=True, text=True, check=False
        ).stdout
    except OSError:
        return None
    return out.strip() or None


def _package_version(package: str) -> str | None:
    try:
        done = subprocess.run(
            ["dpkg-query", "-W", "-f=${Status} ${Version}", package],
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError:
        return None
    status, _, version = done.stdout.rpartition(" ")
    return version if done.returncode == 0 and status.endswith("installed") else None


def _apt_install(packages: Sequence[str]) -> str | None:
    """``apt-get install -y`` the packages (CI: Debian's registry is reachable); why it failed, or None."""
    if shutil.which("apt-get") is None:
        return "apt-get is absent"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", *packages]):
        done = subprocess.run(command, capture_output=True, text=True, env=env, check=False, timeout=600)
        if done.returncode != 0:
            tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
            return f"{' '.join(command[:2])} failed: {tail}"
    return None


def missing(*, install: bool) -> str | None:
    """What this machine lacks to boot the container, as one line; None when nothing is missing.
    ``install``: first apt-get install systemd-container and debootstrap when they are absent."""
    if os.geteuid() != 0:
        return "systemd_pid1: needs root (systemd-nspawn boots a container)"
    absent = [
        package
        for package, program in (("systemd-container", "systemd-nspawn"), ("debootstrap", "debootstrap"))
        if shutil.which(program) is None
    ]
    if absent and install:
        problem = _apt_install(absent)
        if problem is not None:
            return f"systemd_pid1: cannot install {' '.join(absent)}: {problem}"
        absent = [
            p for p in absent if shutil.which({"systemd-container": "systemd-nspawn"}.get(p, p)) is None
        ]
    if absent:
        return f"systemd_pid1: missing {' and '.join(absent)} (apt-get install {' '.join(absent)})"
    host, nspawn = _host_systemd_version(), _package_version("systemd-container")
    if host is not None and nspawn is not None and host != nspawn:
        return f"systemd_pid1: systemd-container {nspawn} is not the host's systemd {host}"
    return None


def mirror() -> str:
    """The host's Debian mirror (the registry CI can reach), else deb.debian.org."""
    for path in sorted(Path("/etc/apt").glob("sources.list.d/*.sources")):
        for line in path.read_text().splitlines():
            if line.startswith("URIs:") and "security" not in line:
                return line.split()[1]
    sources = Path("/etc/apt/sources.list")
    if sources.exists():
        for line in sources.read_text().splitlines():
            fields = line.split()
            if len(fields) >= 3 and fields[0] == "deb" and "security" not in fields[1]:
                return fields[1]
    return DEFAULT_MIRROR


def cache_key() -> str:
    digest = hashlib.sha256()
    digest.update(f"{RELEASE}\n{' '.join(PACKAGES)}\n{mirror()}\n".encode())
    for unit in sorted((ROOT / "systemd").iterdir()):
        digest.update(unit.name.encode() + b"\0" + unit.read_bytes())
    return digest.hexdigest()[:16]


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "session-supervisor"


def cached_root() -> tuple[Path, bool]:
    """The root for this release and these units, and whether it was built now (cold)."""
    target = cache_dir() / f"nspawn-{cache_key()}"
    if (target / "etc" / "os-release").exists():
        return target, False
    target.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f"{target.name}.building-", dir=target.parent))
    try:
        command = [
            "debootstrap",
            "--variant=minbase",
            f"--include={','.join(PACKAGES)}",
            RELEASE,
            str(building),
            mirror(),
        ]
        done = subprocess.run(
            command, capture_output=True, text=True, check=False, timeout=DEBOOTSTRAP_LIMIT_S
        )
        if done.returncode != 0:
            tail = "\n".join(done.stdout.splitlines()[-5:] + done.stderr.splitlines()[-5:])
            raise RuntimeError(f"debootstrap failed ({done.returncode}):\n{tail}")
        # no login prompt on the console, and the machine id made at each boot (the overlay is tmpfs)
        (building / "etc" / "machine-id").write_text("")
        for old in target.parent.glob("nspawn-*"):  # the roots of other keys: outdated units
            if old != target and ".building-" not in old.name:
                shutil.rmtree(old, ignore_errors=True)
        building.rename(target)
    finally:
        if building.exists():
            shutil.rmtree(building, ignore_errors=True)
    return target, True


class Container:
    """The root booted with systemd as PID 1; :meth:`run` executes a command inside."""

    def __init__(self, root: Path, *, binds: Mapping[Path, str], log: Path) -> None:
        self.root = root
        self.name = f"ssv-{os.getpid()}"
        self.binds = binds
        self.log = log
        #: systemd-nspawn's pid (a session leader, not our child)
        self.pid: int | None = None
        self.leader: int | None = None
        #: seconds from systemd-nspawn's start to a booted system
        self.boot_s = 0.0

    def boot(self) -> None:
        command = [
            "systemd-nspawn",
            "--quiet",
            f"--directory={self.root}",
            "--volatile=overlay",
            f"--machine={self.name}",
            # PID 1 of this machine is not systemd: no scope to make, no machined to register with
            "--keep-unit",
            "--register=no",
            "--console=read-only",
            *(f"--bind-ro={host}:{inside}" for host, inside in self.binds.items()),
            "--boot",
        ]
        start = time.monotonic()
        # not a descendant of pytest: the suite's per-test reaper (tests/conftest.py) kills what a test
        # started, and every service the container's systemd starts would be one; setsid and a shell
        # that exits leave systemd-nspawn to the host's init
        launched = subprocess.run(
            ["sh", "-c", 'setsid "$@" </dev/null >"$LOG" 2>&1 & echo $!', "sh", *command],
            env={**os.environ, "LOG": str(self.log)},
            capture_output=True,
            text=True,
            check=True,
        )
        self.pid = int(launched.stdout)
        poll(
            self._found_leader, BOOT_LIMIT_S, f"systemd-nspawn starts the container's PID 1 (log: {self.log})"
        )
        poll(self._booted, BOOT_LIMIT_S, f"the container's systemd finishes booting (log: {self.log})")
        self.boot_s = time.monotonic() - start

    def _alive(self) -> bool:
        if self.pid is None:
            return False
        try:
            state = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return False
        return state != "Z"

    def _found_leader(self) -> bool:
        assert self.pid is not None
        if not self._alive():
            raise AssertionError(f"systemd-nspawn exited: {self.log.read_text()[-2000:]}")
        for child in _children(self.pid):
            with contextlib.suppress(OSError):
                if Path(f"/proc/{child}/comm").read_text().strip() == "systemd":
                    self.leader = child
                    return True
        return False

    def _booted(self) -> bool:
        state = self.run("systemctl", "is-system-running", check=False).stdout.strip()
        return state in ("running", "degraded")

    def run(
        self, *command: str, check: bool = True, input: str | None = None, timeout: float = 120.0
    ) -> subprocess.CompletedProcess[str]:
        """``command`` inside the container as root, in all its namespaces, with a clean environment."""
        assert self.leader is not None, "the container is not booted"
        full = [
            "nsenter",
            f"--target={self.leader}",
            "--mount",
            "--uts",
            "--ipc",
            "--net",
            "--pid",
            "--cgroup",
            "--root",
            "--",
            "env",
            "-i",
            # inside the container's root: nsenter's --wd would name a directory of the host's
            "--chdir=/",
            f"PATH={PATH}",
            "LANG=C.UTF-8",
            "HOME=/root",
            *command,
        ]
        done = subprocess.run(full, capture_output=True, text=True, input=input, timeout=timeout, check=False)
        if check and done.returncode != 0:
            raise AssertionError(
                f"{' '.join(command)} exited {done.returncode}\nstdout: {done.stdout[-3000:]}\n"
                f"stderr: {done.stderr[-3000:]}"
            )
        return done

    def sh(
        self, script: str, *, check: bool = True, timeout: float = 120.0
    ) -> subprocess.CompletedProcess[str]:
        return self.run("sh", "-c", script, check=check, timeout=timeout)

    def write(self, path: str, text: str, mode: str = "0644") -> None:
        self.run("install", "-D", f"-m{mode}", "/dev/stdin", path, input=text)

    def show(self, unit: str, *properties: str) -> dict[str, str]:
        out = self.run("systemctl", "show", unit, *(f"--property={p}" for p in properties)).stdout
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def shutdown(self) -> None:
        if self.pid is None or not self._alive():
            return
        # SIGTERM to systemd-nspawn: the container's systemd powers off in order
        os.kill(self.pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        while self._alive() and time.monotonic() < deadline:
            time.sleep(0.2)  # another process's exit, bounded
        if self._alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGKILL)


def _children(pid: int) -> list[int]:
    out: list[int] = []
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError):
                out += [int(c) for c in (task / "children").read_text().split()]
    return out


@contextlib.contextmanager
def booted(root: Path, *, binds: Mapping[Path, str], log: Path) -> Iterator[Container]:
    container = Container(root, binds=binds, log=log)
    try:
        container.boot()
        yield container
    finally:
        container.shutdown()


def exposure(text: str, unit: str) -> float:
    """The overall exposure ``systemd-analyze security UNIT`` prints."""
    found = re.search(rf"Overall exposure level for {re.escape(unit)}: ([0-9.]+)", text)
    assert found is not None, text[-2000:]
    return float(found.group(1))
