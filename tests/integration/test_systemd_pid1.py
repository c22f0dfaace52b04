"""Under a real systemd as PID 1: the documented install, then what an operator does with it.

A Debian 12 root booted by systemd-nspawn (tests/integration/nspawn.py) with journald and
systemd-sysusers, where the user-manager tests (test_systemd_manager.py) have neither. The project
goes in as docs/systemd.md says: ``systemd/install.sh --wheel`` with a wheel built from this
checkout. The daemon talks to the simulators, run on the host's loopback (the container shares the
host's network), which accept only the secrets the credential files hold: a session that comes up
read its secret from ``$CREDENTIALS_DIRECTORY``. The tests run in order on one booted system.

Without what it needs (root, systemd-nspawn and debootstrap, cgroup v2) the suite skips with one
line naming what is missing; in CI (``CI=true``) it fails with that line instead, after trying to
apt-get install the two packages. Its CI step and budget: .ci/heavy-suites (``systemd_pid1``).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.harness.config import cxone_table, genesys_config
from tests.integration import nspawn
from tests.integration.nspawn import Container, poll

pytestmark = [pytest.mark.systemd_pid1, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
IN_CI = os.environ.get("CI", "").lower() == "true"
PROGRAM = "/opt/session-supervisor/venv/bin/session-supervisor"
SERVICE = "session-supervisor.service"
CONFIG = "/etc/session-supervisor/supervisor.toml"
CREDENTIALS = "/etc/session-supervisor/credentials"
SUBSCRIBE = "/run/session-supervisor/subscribe.sock"
#: the secrets the simulators accept, and the only place they are written: the credential files
GENESYS_SECRET = "genesys-secret-from-a-credential-file"
CXONE_SECRET = "cxone-client-secret-from-a-credential-file"
CXONE_PASSWORD = "cxone-access-key-secret-from-a-credential-file"
GUESTS = 2
AGENTS = 2
SESSIONS = GUESTS + AGENTS
#: exposure of the shipped units (docs/systemd.md; tests/unit/test_systemd_units.py gates it offline)
EXPOSURE_GATE = 1.2
BRIDGE_EXPOSURE_GATE = 1.3


@dataclass
class System:
    container: Container
    genesys: dict[str, str]
    cxone: dict[str, str]
    config: str
    #: install.sh's arguments and environment: the wheel built from this checkout, pip's settings
    install: tuple[str, ...]
    #: how long the root, the wheel, the boot and install.sh took (docs/benchmarks.md, "CI steps")
    timings: dict[str, float]

    def journal(self, unit: str = SERVICE, *args: str) -> list[str]:
        out = self.container.run("journalctl", "--no-pager", "-u", unit, *args).stdout
        return out.splitlines()

    def entries(self, unit: str = SERVICE, *args: str) -> list[dict[str, Any]]:
        """The unit's journal entries with their fields (``-o json``)."""
        return [json.loads(line) for line in self.journal(unit, "-o", "json", *args)]

    def events(self, unit: str = SERVICE, *args: str) -> list[dict[str, Any]]:
        """The daemon's event lines, as the docs' pipeline keeps them (``jq -R 'fromjson?'``, with an
        ``event``): not systemd's own lines, nor ``systemctl reload``'s answer."""
        out = []
        for line in self.journal(unit, "_TRANSPORT=stdout", "-o", "cat", *args):
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                if isinstance(record, dict) and "event" in record:
                    out.append(record)
        return out

    def named(self, event: str, unit: str = SERVICE) -> list[dict[str, Any]]:
        return [e for e in self.events(unit) if e.get("event") == event]

    def status(self) -> str:
        return self.container.show(SERVICE, "StatusText")["StatusText"]

    def all_active(self) -> bool:
        return self.status().startswith(f"{SESSIONS}/{SESSIONS} active")

    def cxone_posts(self) -> int:
        """``POST .../agent-sessions`` the CXone simulator answered (a session started anew)."""
        with urllib.request.urlopen(f"{self.cxone['admin']}/stats", timeout=10) as answer:
            stats = json.load(answer)
        return sum(
            r["count"]
            for r in stats["requests"]
            if r["method"] == "POST" and r["endpoint"].rstrip("/").endswith("/agent-sessions")
        )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.contextmanager
def simulator(kind: str, config: Path) -> Iterator[dict[str, str]]:
    """``session-supervisor sim KIND`` on the host's loopback; its URLs."""
    process = subprocess.Popen(
        [sys.executable, "-m", "supervisor", "sim", kind, "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        urls: dict[str, str] = json.loads(process.stdout.readline())
        yield urls
    finally:
        process.terminate()
        process.wait(10)
        if process.stdout is not None:
            process.stdout.close()


def daemon_config(
    genesys: dict[str, str], cxone: dict[str, str], telemetry_port: int, gid: int | None
) -> str:
    """Guests and CXone agents, the credential files named as the units' LoadCredential= names
    them, the default sockets (the socket group's gid admitted) and a collector nobody listens on."""
    allow = f"allowGids = [{gid}]\n" if gid is not None else ""
    head = (
        f'[telemetry]\nendpoint = "http://127.0.0.1:{telemetry_port}"\n'
        f'[sockets]\nsubscribe = "{SUBSCRIBE}"\ncontrol = "/run/session-supervisor/control.sock"\n{allow}'
    )
    text = genesys_config(genesys, GUESTS).replace('"genesys-secret"', '"genesys-client-secret"')
    cx = cxone_table(cxone).replace('"cxone-secret"', '"cxone-client-secret"')
    for i in range(AGENTS):
        cx += (
            f'[[sessions]]\nid = "cx-{i}"\nplatform = "cxone"\nkind = "agent-session"\n'
            f'stationId = "station-{i}"\nagentId = "{100001 + i}"\n'
        )
    return head + text + cx


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    problem = nspawn.missing(install=IN_CI)
    if problem is not None:
        if IN_CI:
            pytest.fail(problem, pytrace=False)
        pytest.skip(problem)
    work = tmp_path_factory.mktemp("pid1")
    timings: dict[str, float] = {}
    start = time.monotonic()
    root, cold = nspawn.cached_root()
    timings["root (cold)" if cold else "root (cached)"] = time.monotonic() - start

    start = time.monotonic()
    wheels = work / "wheel"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(wheels), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = wheels.glob("session_supervisor-*.whl")
    timings["wheel"] = time.monotonic() - start

    (work / "genesys.toml").write_text(f'[clients]\n"demo-client" = "{GENESYS_SECRET}"\n')
    (work / "cxone.toml").write_text(f'password = "{CXONE_PASSWORD}"\n')
    binds = {wheels: "/mnt/wheel", ROOT / "systemd": "/mnt/systemd"}
    # pip inside reaches the registry the host reaches, with the host's CA bundle and wheel cache
    pip_env = [f"PIP_DEFAULT_TIMEOUT={os.environ.get('PIP_DEFAULT_TIMEOUT', '60')}"]
    if Path("/etc/ssl/certs/ca-certificates.crt").exists():
        binds[Path("/etc/ssl/certs/ca-certificates.crt")] = "/mnt/host-ca.crt"
        pip_env.append("PIP_CERT=/mnt/host-ca.crt")
    find_links = os.environ.get("PIP_FIND_LINKS")
    if find_links and Path(find_links).is_dir():
        binds[Path(find_links)] = "/mnt/wheels"
        pip_env.append("PIP_FIND_LINKS=/mnt/wheels")
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "no_proxy", "NO_PROXY"):
        if name in os.environ:
            pip_env.append(f"{name}={os.environ[name]}")

    with (
        simulator("genesys", work / "genesys.toml") as genesys,
        simulator("cxone", work / "cxone.toml") as cxone,
        nspawn.booted(root, binds=binds, log=work / "nspawn.log") as container,
    ):
        timings["boot"] = container.boot_s
        telemetry_port = _free_port()
        # the configuration and the secrets first (install.sh never overwrites them), then the install
        container.write(CONFIG, daemon_config(genesys, cxone, telemetry_port, None))
        for name, value in (
            ("genesys-client-secret", GENESYS_SECRET),
            ("cxone-client-secret", CXONE_SECRET),
            ("cxone-password", CXONE_PASSWORD),
        ):
            container.write(f"{CREDENTIALS}/{name}", value, mode="0600")
        start = time.monotonic()
        install = ("env", *pip_env, "/mnt/systemd/install.sh", "--wheel", f"/mnt/wheel/{wheel.name}")
        installed = container.run(*install, timeout=600)
        timings["install.sh"] = time.monotonic() - start
        # the ops group's gid is sysusers' choice: now the configuration admits it (docs, step 5)
        gid = int(container.run("getent", "group", "session-supervisor").stdout.split(":")[2])
        config = daemon_config(genesys, cxone, telemetry_port, gid)
        container.write(CONFIG, config)
        system = System(container, genesys, cxone, config, install, timings)
        (work / "install.log").write_text(installed.stdout + installed.stderr)
        try:
            yield system
        finally:
            print(f"systemd_pid1 timings: {json.dumps(timings)}")  # the benchmark's figures (pytest -s)


def test_install_sh_installs_the_venv_units_groups_and_checks_the_configuration(system: System) -> None:
    c = system.container
    unit = c.run("cat", f"/etc/systemd/system/{SERVICE}").stdout
    assert f"ExecStart={PROGRAM} run --config {CONFIG}" in unit.splitlines()
    assert (
        f"ExecReload=+{PROGRAM} ctl --socket /run/session-supervisor/control.sock reload --json"
        in unit.splitlines()
    )
    for group in ("session-supervisor", "session-supervisor-admin"):
        assert c.run("getent", "group", group, check=False).returncode == 0, group
    assert c.run("stat", "-c", "%a %U", CREDENTIALS).stdout.split() == ["700", "root"]
    # the sockets are listening (install.sh enabled them), the service is not started yet
    for sock in ("session-supervisor-subscribe.socket", "session-supervisor-control.socket"):
        assert c.show(sock, "ActiveState")["ActiveState"] == "active"
    assert c.show(SERVICE, "ActiveState")["ActiveState"] == "inactive"


def test_the_service_starts_ready_as_its_dynamic_user_with_a_live_status_line(system: System) -> None:
    c = system.container
    # returns once READY=1 arrived (Type=notify)
    c.run("systemctl", "enable", "--now", SERVICE)
    state = c.show(SERVICE, "ActiveState", "SubState", "Type", "NotifyAccess", "User", "MainPID")
    assert (state["ActiveState"], state["SubState"], state["Type"]) == ("active", "running", "notify")
    assert state["User"] == "session-supervisor-daemon"
    uid = c.run("stat", "-c", "%u", f"/proc/{state['MainPID']}").stdout.strip()
    assert uid != "0"
    poll(system.all_active, 60, f"STATUS= says {SESSIONS}/{SESSIONS} active (now: {system.status()!r})")
    assert system.named("DAEMON_STARTED")


def test_secrets_come_through_load_credential(system: System) -> None:
    c = system.container
    # every session is up against simulators that accept only the credential files' secrets
    assert system.all_active()
    # $CREDENTIALS_DIRECTORY as the service sees it, in its own mount namespace
    pid = c.show(SERVICE, "MainPID")["MainPID"]
    assert pid != "0", "\n".join(system.journal(SERVICE, "-n", "40", "-o", "short-monotonic"))
    listed = c.run(
        "nsenter", f"--target={pid}", "--mount", "ls", f"/run/credentials/{SERVICE}"
    ).stdout.split()
    assert sorted(listed) == ["cxone-client-secret", "cxone-password", "genesys-client-secret"]
    # and nowhere in what the daemon wrote
    text = "\n".join(system.journal())
    for secret in (GENESYS_SECRET, CXONE_SECRET, CXONE_PASSWORD):
        assert secret not in text


def test_a_reload_and_a_refused_reload_that_fails_systemctl_reload(system: System) -> None:
    c = system.container
    assert c.run("systemctl", "reload", SERVICE, check=False).returncode == 0
    poll(lambda: bool(system.named("CONFIG_RELOADED")), 30, "CONFIG_RELOADED")
    c.write(CONFIG, system.config.replace("shutdownGrace = 2.0", 'shutdownGrace = "soon"'))
    refused = c.run("systemctl", "reload", SERVICE, check=False)
    c.write(CONFIG, system.config)
    assert refused.returncode != 0, refused
    poll(lambda: bool(system.named("CONFIG_RELOAD_FAILED")), 30, "CONFIG_RELOAD_FAILED")
    # the old configuration keeps running
    assert c.show(SERVICE, "ActiveState")["ActiveState"] == "active"
    assert system.all_active()


def test_the_watchdog_restarts_a_stopped_daemon(system: System) -> None:
    c = system.container
    before = c.show(SERVICE, "MainPID", "NRestarts")
    c.run("kill", "-STOP", before["MainPID"])
    # WatchdogSec=30s as shipped: SIGABRT, then Restart=on-failure after RestartSec=2s
    poll(
        lambda: c.show(SERVICE, "NRestarts")["NRestarts"] == str(int(before["NRestarts"]) + 1),
        75,
        "the watchdog restarts the SIGSTOPped daemon",
    )
    poll(lambda: c.show(SERVICE, "ActiveState")["ActiveState"] == "active", 30, "active again")
    assert c.show(SERVICE, "MainPID")["MainPID"] != before["MainPID"]
    poll(system.all_active, 60, "every session active again")


def test_a_stop_then_socket_activation_by_watch_as_a_member_of_the_socket_group(system: System) -> None:
    c = system.container
    c.run("systemctl", "stop", SERVICE)
    state = c.show(SERVICE, "ActiveState", "Result", "ExecMainStatus")
    assert (state["ActiveState"], state["Result"], state["ExecMainStatus"]) == ("inactive", "success", "0")
    assert system.named("DAEMON_STOPPED")
    c.run("useradd", "--no-create-home", "--groups", "session-supervisor", "ops")
    first = c.sh(
        f"timeout 60 runuser -u ops -- {PROGRAM} watch --socket {SUBSCRIBE} --json | head -n 1", timeout=90
    ).stdout
    assert json.loads(first)["type"] == "snapshot", first
    assert c.show(SERVICE, "ActiveState")["ActiveState"] == "active"  # the connection started it
    poll(system.all_active, 60, "every session active after socket activation")


def test_a_restart_is_a_handover_that_keeps_every_cxone_agent_session(system: System) -> None:
    c = system.container
    poll(system.all_active, 60, "every session active")
    before = system.cxone_posts()
    c.run("systemctl", "restart", SERVICE)
    poll(system.all_active, 60, "every session active after the restart")
    assert system.cxone_posts() == before  # no agent session started anew: none was ended
    assert not [e for e in system.named("SESSION_TERMINATED") if e.get("sessionId", "").startswith("cx-")]


def test_the_journal_lines_are_json_with_their_priority(system: System) -> None:
    c = system.container
    # a start, an export failure (the collector's port is closed), a stop: then the docs' pipeline
    c.run("systemctl", "restart", SERVICE)
    poll(
        lambda: any(
            e.get("event") == "LOG_RECORD" and e.get("logger", "").startswith("opentelemetry")
            for e in system.events()
        ),
        60,
        "the OpenTelemetry exporter's failure as a LOG_RECORD line",
    )
    c.run("systemctl", "stop", SERVICE)
    piped = c.sh(f"journalctl --no-pager -u {SERVICE} -o cat | jq -c -R 'fromjson?'")
    objects = [json.loads(line) for line in piped.stdout.splitlines()]
    names = {o.get("event") for o in objects}
    assert {"DAEMON_STARTED", "LOG_RECORD", "DAEMON_STOPPED"} <= names
    # every line a daemon wrote (not systemd's own, nor ExecReload's) is one JSON object, whatever the run
    entries = system.entries()
    daemons = {e["_PID"] for e in entries if '"event":"DAEMON_STARTED"' in str(e.get("MESSAGE"))}
    own = [e["MESSAGE"] for e in entries if e.get("_PID") in daemons]
    assert len(daemons) >= 3 and own  # the starts of the tests above, this one's
    for line in own:
        assert isinstance(json.loads(line), dict), line
    # each with its priority: -p warning has the export failure and no session transition
    warnings = system.events(SERVICE, "-p", "warning")
    assert any(e["event"] == "LOG_RECORD" for e in warnings)
    assert not any(e["event"] == "SESSION_TRANSITION" for e in warnings)
    notices = {e["event"] for e in system.events(SERVICE, "-p", "notice")}
    assert {"DAEMON_STARTED", "DAEMON_STOPPED"} <= notices


def test_the_start_limit_stops_the_sockets_and_the_documented_recovery_starts_them(system: System) -> None:
    c = system.container
    # StartLimitBurst=5 in 300 s: the starts above count; start until the limit refuses one
    for _ in range(6):
        if c.run("systemctl", "restart", SERVICE, check=False).returncode != 0:
            break
    assert c.show(SERVICE, "Result")["Result"] == "start-limit-hit"
    for sock in ("session-supervisor-subscribe.socket", "session-supervisor-control.socket"):
        state = c.show(sock, "ActiveState", "Result")
        assert (state["ActiveState"], state["Result"]) == ("failed", "service-start-limit-hit"), sock
    assert c.run("test", "-e", SUBSCRIBE, check=False).returncode == 1  # RemoveOnStop=yes
    # docs/systemd.md, "Install": the recovery
    c.run(
        "systemctl",
        "reset-failed",
        SERVICE,
        "session-supervisor-subscribe.socket",
        "session-supervisor-control.socket",
    )
    c.run(
        "systemctl",
        "start",
        "session-supervisor-subscribe.socket",
        "session-supervisor-control.socket",
        SERVICE,
    )
    assert c.show(SERVICE, "ActiveState")["ActiveState"] == "active"
    assert c.run("test", "-S", SUBSCRIBE, check=False).returncode == 0


def test_an_instance_beside_the_plain_unit_shows_a_degraded_store_at_warning(system: System) -> None:
    c = system.container
    # the template's instance on the same host as the plain unit (they once failed 238/STATE_DIRECTORY);
    # its store on a path the sandbox keeps read-only: degraded, never a crash loop
    instance = "deg"
    config = system.config.replace("/run/session-supervisor/", f"/run/session-supervisor/{instance}/")
    config = f'[store]\npath = "/etc/session-supervisor/{instance}-store.sqlite3"\n' + config
    c.write(f"/etc/session-supervisor/{instance}.toml", config)
    for name, value in (
        ("genesys-client-secret", GENESYS_SECRET),
        ("cxone-client-secret", CXONE_SECRET),
        ("cxone-password", CXONE_PASSWORD),
    ):
        c.write(f"{CREDENTIALS}/{instance}/{name}", value, mode="0600")
    # what the template kept before: the instance's state under the plain unit's (the cause of 238)
    c.write(f"/var/lib/private/session-supervisor/{instance}/kept", "the store of before\n")
    c.run(*system.install, "--instance", instance, "--start", timeout=600)
    # moved where the template keeps it now, and found there by the instance
    assert c.run("cat", f"/var/lib/session-supervisor-{instance}/kept").stdout == "the store of before\n"
    assert c.run("test", "-e", f"/var/lib/private/session-supervisor/{instance}", check=False).returncode == 1
    unit = f"session-supervisor@{instance}.service"
    assert c.show(unit, "ActiveState")["ActiveState"] == "active"
    assert c.show(SERVICE, "ActiveState")["ActiveState"] == "active"
    degraded = [
        json.loads(line) for line in system.journal(unit, "_TRANSPORT=stdout", "-p", "warning", "-o", "cat")
    ]
    assert any(e["event"] == "DAEMON_DEGRADED" and e["condition"] == "store" for e in degraded), degraded
    assert c.show(unit, "NRestarts")["NRestarts"] == "0"
    c.run("systemctl", "stop", unit)


def test_the_exposure_score_under_the_real_manager(system: System) -> None:
    c = system.container
    # the bridge's unit, installed by install.sh beside the daemon's, has its own gate (docs/bridge.md)
    gates = {SERVICE: EXPOSURE_GATE, "session-supervisor@deg.service": EXPOSURE_GATE}
    gates["session-supervisor-bridge.service"] = BRIDGE_EXPOSURE_GATE
    for unit, gate in gates.items():
        text = c.run("systemd-analyze", "security", "--no-pager", unit, check=False).stdout
        assert nspawn.exposure(text, unit) <= gate, text[-1500:]
