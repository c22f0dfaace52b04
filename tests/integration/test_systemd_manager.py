"""The shipped units under a real systemd manager (docs/systemd.md): systemd 252's own manager, in user mode,
confined (tests/integration/systemd_manager.py), runs systemd/session-supervisor.service and its two
socket units as shipped, hardening included, with drop-ins only for what this machine differs in:

* ``ExecStart=``: the console script of this test environment and a test configuration;
* the socket paths (``ListenStream=``) in a temporary directory, and ``SocketGroup=root`` (the
  sysusers.d groups are not created on a test machine);
* ``LoadCredential=`` cleared: a user manager running as root does not populate
  ``$CREDENTIALS_DIRECTORY`` here (docs/systemd.md; credentials are tested with the daemon as a child);
* ``ProtectHome=tmpfs`` + ``BindReadOnlyPaths=`` the interpreter, only when the interpreter lives
  under a home directory (a pyenv under /root); an installed package lives in /usr;
* ``StandardOutput=`` to a file (no journald here).

Everything else — ``Type=notify``, ``NotifyAccess=main``, ``WatchdogSec=``, ``Restart=on-failure``,
``DynamicUser=yes``, the system-call filter, ``MemoryDenyWriteExecute=``, the namespaces — is the
shipped unit, so these tests show the daemon works under each directive it keeps.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from supervisor.sim.genesys import GenesysSimulator
from tests.harness.config import genesys_config, short_dir
from tests.harness.waits import wait_until
from tests.integration.api_harness import Watcher
from tests.integration.systemd_manager import UserManager, manager_unavailable, user_manager

UNAVAILABLE = manager_unavailable()
pytestmark = [
    pytest.mark.integration,
    pytest.mark.anyio,
    pytest.mark.skipif(UNAVAILABLE is not None, reason=f"no systemd manager: {UNAVAILABLE}"),
    pytest.mark.genesys_sim(seed=21),
]

ROOT = Path(__file__).resolve().parents[2]
SERVICE = "session-supervisor.service"
SOCKETS = ("session-supervisor-subscribe.socket", "session-supervisor-control.socket")
HOMES = ("/root", "/home", "/run/user")


@pytest.fixture(scope="module")
def manager() -> Iterator[UserManager]:
    with user_manager() as running:
        yield running


class Installed:
    """The shipped units in the manager, with this machine's drop-ins; their events file."""

    def __init__(self, manager: UserManager, events: Path, sockets: tuple[Path, Path]) -> None:
        self.manager = manager
        self.events = events
        self.sockets = sockets

    def records(self) -> list[dict[str, Any]]:
        if not self.events.exists():
            return []
        lines = [json.loads(line) for line in self.events.read_text().splitlines() if line.endswith("}")]
        # the daemon's event lines; ExecReload='s `ctl reload --json` answers into the same file
        return [r for r in lines if "event" in r]

    def named(self, event: str) -> list[dict[str, Any]]:
        return [r for r in self.records() if r.get("event") == event]

    def show(self, *properties: str) -> dict[str, str]:
        return self.manager.show(SERVICE, *properties)

    async def systemctl(self, *args: str) -> str:
        return await anyio.to_thread.run_sync(lambda: self.manager.systemctl(*args))


def install(manager: UserManager, sim: GenesysSimulator, work: Path, sockets: Path, *extra: str) -> Installed:
    """Copy the shipped units, write the drop-ins and the configuration, reload the manager."""
    for name in (SERVICE, *SOCKETS):
        (manager.units / name).write_text((ROOT / "systemd" / name).read_text())
    # the configuration and its secret where the sandboxed daemon can read them: the manager's /run
    private = manager.root / "run" / "ss-test"
    text = genesys_config(sim.urls, 2).replace(
        'clientSecretFile = "genesys-secret"', 'clientSecretFile = "/run/ss-test/secret"'
    )
    (private / "supervisor.toml").write_text(text)
    (private / "secret").write_text("not-a-real-secret")
    for path in private.iterdir():
        path.chmod(0o644)  # DynamicUser=: another uid reads them
    events = work / "events.jsonl"
    paths = (sockets / "subscribe.sock", sockets / "control.sock")
    program = Path(sys.executable).parent / "session-supervisor"
    service = [
        "[Service]",
        "ExecStart=",
        f"ExecStart={program} run --config /run/ss-test/supervisor.toml",
        # as shipped, with this environment's program and the test's control socket
        "ExecReload=",
        f"ExecReload=+{program} ctl --socket {paths[1]} reload --json",
        "LoadCredential=",
        f"StandardOutput=append:{events}",
        f"StandardError=append:{work / 'stderr.txt'}",
        *extra,
    ]
    # the interpreter, the test environment and the checkout (an editable install) must be visible
    # to the sandboxed daemon: ProtectHome= hides homes and PrivateTmp= hides /tmp, where a CI
    # clone may live; bind exactly these paths read-only into its namespace
    visible: list[Path] = []
    hide_homes = False
    for path in dict.fromkeys(
        (Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve(), Path(__file__).resolve().parents[2])
    ):
        if path.is_relative_to("/root") or any(path.is_relative_to(h) for h in HOMES):
            hide_homes = True
            visible.append(path)
        elif path.is_relative_to("/tmp") or path.is_relative_to("/var/tmp"):
            visible.append(path)
    if hide_homes:
        service.append("ProtectHome=tmpfs")
    service += [f"BindReadOnlyPaths={path}" for path in visible]
    dropins = {SERVICE: service}
    for name, path in zip(SOCKETS, paths, strict=True):
        dropins[name] = ["[Socket]", "ListenStream=", f"ListenStream={path}", "SocketGroup=root"]
    for name, lines in dropins.items():
        directory = manager.units / f"{name}.d"
        directory.mkdir(exist_ok=True)
        (directory / "test.conf").write_text("\n".join(lines) + "\n")
    manager.systemctl("daemon-reload")
    return Installed(manager, events, paths)


@pytest.fixture
def work(manager: UserManager) -> Iterator[Path]:
    with short_dir() as directory:
        try:
            yield directory
        finally:
            manager.systemctl("stop", SERVICE, *SOCKETS, check=False)
            manager.systemctl("reset-failed", check=False)


async def test_socket_activated_notify_service_status_reload_and_stop(
    manager: UserManager, genesys_sim: GenesysSimulator, work: Path
) -> None:
    """A subscriber's connection starts the service through its socket unit; the manager calls it
    active only after READY=1; STATUS= shows live in `systemctl show`; `systemctl reload` (SIGHUP)
    reloads; `systemctl stop` drains and the run ends in success."""
    with short_dir() as sockets:
        unit = install(manager, genesys_sim, work, sockets)
        await unit.systemctl("start", *SOCKETS)
        assert unit.show("ActiveState")["ActiveState"] == "inactive"  # nothing started yet
        watcher = await Watcher.subscribe(unit.sockets[0])  # this connection activates the service
        async with anyio.create_task_group() as tg:
            tg.start_soon(watcher.run)
            await wait_until(lambda: bool(watcher.messages), 45)
            assert {s["sessionId"] for s in watcher.snapshot["sessions"]} == {"wm-0", "wm-1"}
            tg.cancel_scope.cancel()
        state = unit.show("ActiveState", "SubState", "Type", "NotifyAccess", "User", "MainPID")
        assert (state["ActiveState"], state["Type"], state["NotifyAccess"]) == ("active", "notify", "main")
        assert state["User"] == "session-supervisor-daemon"  # DynamicUser=yes, User= as shipped
        main_pid = int(state["MainPID"])
        assert os.stat(f"/proc/{main_pid}").st_uid != 0  # ... really another uid
        await wait_until(lambda: unit.show("StatusText")["StatusText"].startswith("2/2 active"), 45)
        await unit.systemctl("reload", SERVICE)  # returns once the daemon said READY=1 again
        await wait_until(lambda: bool(unit.named("CONFIG_RELOADED")), 45)
        assert unit.show("ActiveState")["ActiveState"] == "active"
        await unit.systemctl("stop", SERVICE)
        done = unit.show("ActiveState", "Result", "ExecMainStatus", "NRestarts")
        assert (done["ActiveState"], done["Result"], done["ExecMainStatus"]) == ("inactive", "success", "0")
        assert done["NRestarts"] == "0"
        assert unit.named("DAEMON_STOPPED") and len({r["bootId"] for r in unit.records()}) == 1


async def test_a_wedged_daemon_is_killed_by_the_watchdog_and_restarted(
    manager: UserManager, genesys_sim: GenesysSimulator, work: Path
) -> None:
    """Test matrix row 17: SIGSTOP (a loop that never runs again) stops the pings; the manager's
    watchdog fires (WatchdogSignal=SIGABRT: no drain, nothing but the watchdog could end a stopped
    process), and Restart=on-failure brings up a new daemon (a new bootId), within StartLimitBurst."""
    with short_dir() as sockets:
        unit = install(
            manager, genesys_sim, work, sockets, "WatchdogSec=3s", "TimeoutAbortSec=2s", "RestartSec=1s"
        )
        await unit.systemctl("start", SERVICE)
        first = unit.show("MainPID", "WatchdogUSec")
        assert first["WatchdogUSec"] == "3s"
        # healthy: it keeps pinging, so it outlives several watchdog periods
        await wait_until(
            lambda: unit.show("WatchdogTimestampMonotonic")["WatchdogTimestampMonotonic"] != "0", 45
        )
        os.kill(int(first["MainPID"]), 19)  # SIGSTOP: the whole daemon, its event loop with it
        await wait_until(lambda: unit.show("NRestarts")["NRestarts"] == "1", 50)
        await wait_until(lambda: unit.show("ActiveState")["ActiveState"] == "active", 50)
        assert unit.show("MainPID")["MainPID"] != first["MainPID"]
        await wait_until(lambda: len({r["bootId"] for r in unit.named("DAEMON_STARTED")}) == 2, 45)
        first_boot = unit.named("DAEMON_STARTED")[0]["bootId"]
        assert not [
            r for r in unit.named("DAEMON_STOPPING") if r["bootId"] == first_boot
        ]  # killed, not drained
        assert unit.show("StartLimitBurst")["StartLimitBurst"] == "5"
