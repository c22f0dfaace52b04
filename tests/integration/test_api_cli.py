"""``watch`` and ``ctl`` as a script runs them: subprocesses against ``run`` as a subprocess (docs/socket-api.md).

The names asserted here are the interface scripts rely on: ``watch --socket PATH --json``
prints one object per line, each with a ``type`` (snapshot, delta, event, lagged), and exits 0
when the daemon closes the stream; ``ctl --socket PATH status --json`` prints one object with
``bootId``, ``uptimeSeconds``, ``sessions`` (``total``, ``byState``) and ``circuits``
(``endpoint``, ``state``). Bad input is one ``session-supervisor: ...`` line and exit 1 or 2.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import stat
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import Process
from anyio.streams.text import TextReceiveStream

from supervisor.api.protocol import ApiFault, Method, encode_call, parse_reply
from supervisor.sim.faults import Fault, FaultKind
from supervisor.sim.genesys import GenesysSimulator
from tests.harness.config import genesys_config
from tests.harness.waits import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.anyio, pytest.mark.genesys_sim(seed=21)]

CLI = [sys.executable, "-m", "supervisor"]
WATCHED = ("--session", "wm-1", "--session", "wm-2", "--events", "terminations")
ISO_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


@pytest.fixture
def sockets() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="ss-", dir="/tmp") as d:
        yield Path(d)


class Output:
    """A process's stdout lines as they arrive (JSON decoded when ``json``), and its stderr."""

    def __init__(self, process: Process, *, json_lines: bool = True) -> None:
        self.process = process
        self.json_lines = json_lines
        self.lines: list[str] = []
        self.records: list[dict[str, Any]] = []
        self.err = ""

    async def pump(self) -> None:
        assert self.process.stdout is not None and self.process.stderr is not None
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._err)
            buffer = ""
            async for chunk in TextReceiveStream(self.process.stdout):
                buffer += chunk
                *lines, buffer = buffer.split("\n")
                for line in lines:
                    self.lines.append(line)
                    if self.json_lines:
                        self.records.append(json.loads(line))

    async def _err(self) -> None:
        assert self.process.stderr is not None
        async for chunk in TextReceiveStream(self.process.stderr):
            self.err += chunk

    def typed(self, kind: str) -> list[dict[str, Any]]:
        return [r for r in self.records if r.get("type") == kind]


def write_config(
    sim: GenesysSimulator, tmp_path: Path, sockets: Path, sessions: int = 3, *, table_extra: str = ""
) -> Path:
    config = tmp_path / "supervisor.toml"
    table = f'[sockets]\nsubscribe = "{sockets / "subscribe.sock"}"\ncontrol = "{sockets / "control.sock"}"\n'
    table += table_extra
    # the [sockets] table first: the [[sessions]] array of tables ends the file
    config.write_text(table + genesys_config(sim.urls, sessions))
    (tmp_path / "genesys-secret").write_text("s3cr3t-value")
    return config


async def ctl(sockets: Path, *args: str) -> tuple[int, str, str]:
    done = await anyio.run_process(
        [*CLI, "ctl", "--socket", str(sockets / "control.sock"), *args], check=False
    )
    return done.returncode, done.stdout.decode(), done.stderr.decode()


async def start_daemon(config: Path) -> tuple[Process, Output]:
    process = await anyio.open_process([*CLI, "run", "--config", str(config)])
    return process, Output(process)


def active(daemon: Output, n: int) -> bool:
    return (
        len([r for r in daemon.records if r.get("event") == "SESSION_TRANSITION" and r["to"] == "active"])
        >= n
    )


async def test_watch_json_and_ctl_status_json_as_a_script_uses_them(
    genesys_sim: GenesysSimulator, tmp_path: Path, sockets: Path
) -> None:
    config = write_config(genesys_sim, tmp_path, sockets)
    process, daemon = await start_daemon(config)
    async with anyio.create_task_group() as tg:
        tg.start_soon(daemon.pump)
        await wait_until(lambda: active(daemon, 3), 20)
        listening = [r for r in daemon.records if r.get("event") == "SOCKET_API_LISTENING"]
        assert listening and listening[0]["subscribe"] == str(sockets / "subscribe.sock")

        code, out, err = await ctl(sockets, "status", "--json")
        assert (code, err) == (0, "") and out.count("\n") == 1
        status = json.loads(out)
        assert status["bootId"] == daemon.records[0]["bootId"]
        assert isinstance(status["uptimeSeconds"], float) and status["uptimeSeconds"] >= 0
        assert status["sessions"] == {"total": 3, "byState": {"active": 3}}
        assert status["circuits"] == [
            {
                "endpoint": "genesys:webmessaging",
                "circuitId": "circuit:genesys:webmessaging",
                "state": "closed",
            }
        ]

        watch_process = await anyio.open_process(
            [
                *CLI,
                "watch",
                "--socket",
                str(sockets / "subscribe.sock"),
                "--json",
                "--platform",
                "genesys",
                *WATCHED,
            ]
        )
        watch = Output(watch_process)
        tg.start_soon(watch.pump)
        await wait_until(lambda: bool(watch.records), 10)
        snapshot = watch.records[0]
        assert snapshot["type"] == "snapshot" and snapshot["bootId"] == status["bootId"]
        assert isinstance(snapshot["seq"], int)
        assert sorted(s["sessionId"] for s in snapshot["sessions"]) == ["wm-1", "wm-2"]
        for session in snapshot["sessions"]:
            assert session["state"] == "active" and session["platform"] == "genesys"
            assert ISO_UTC.match(session["since"])

        genesys_sim.faults.inject(Fault(kind=FaultKind.DROP))
        await wait_until(lambda: len(watch.typed("delta")) == 6, 20)
        for delta in watch.typed("delta"):
            assert {"seq", "sessionId", "state", "previous", "at", "reason"} <= set(delta)
            assert delta["sessionId"] in ("wm-1", "wm-2") and ISO_UTC.match(delta["at"])
        seqs = [d["seq"] for d in watch.typed("delta")]
        assert seqs == sorted(seqs) and seqs[0] > snapshot["seq"]

        code, out, err = await ctl(sockets, "stop", "wm-2")
        assert (code, err) == (0, "") and "stopped wm-2: terminated" in out
        await wait_until(lambda: bool(watch.typed("event")), 10)
        ended = watch.typed("event")[0]
        assert (ended["event"], ended["sessionId"], ended["reason"]) == (
            "SESSION_TERMINATED",
            "wm-2",
            "STOPPED",
        )
        assert ended["action"] == "REVOKE_LOCAL_STORAGE_AND_REAUTHENTICATE"

        code, out, err = await ctl(sockets, "drain", "--json")
        assert (code, json.loads(out), err) == (0, {"draining": True, "handover": False}, "")
        with anyio.fail_after(20):
            assert await process.wait() == 0
            assert await watch_process.wait() == 0  # the daemon closed the stream: exit 0
    assert watch.err == "" and daemon.err == ""
    assert watch.records[-1] == {"type": "end", "reason": "daemon stopping"}
    drain = [r for r in daemon.records if r.get("event") == "CONTROL_COMMAND"]
    assert [(r["verb"], r["ok"]) for r in drain] == [("stop", True), ("drain", True)]
    # the daemon removed its socket files
    assert not (sockets / "subscribe.sock").exists() and not (sockets / "control.sock").exists()

    # a restarted daemon has a new bootId: a reconnecting script knows
    process, daemon = await start_daemon(config)
    async with anyio.create_task_group() as tg:
        tg.start_soon(daemon.pump)
        await wait_until(lambda: active(daemon, 3), 20)
        code, out, _ = await ctl(sockets, "status", "--json")
        assert code == 0 and json.loads(out)["bootId"] not in (status["bootId"], "")
        await ctl(sockets, "drain")
        with anyio.fail_after(20):
            assert await process.wait() == 0


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (
            ["ctl", "--socket", "/tmp/ss-nowhere/control.sock", "status"],
            1,
            "no such socket: is the daemon running?",
        ),
        (["watch", "--socket", "/tmp/ss-nowhere/subscribe.sock", "--json"], 1, "no such socket"),
        (["ctl", "--socket", "/etc/hostname", "status"], 1, "/etc/hostname: not a socket"),
        (["watch", "--socket", "/tmp/x.sock", "--state", "asleep"], 2, "usage error"),
        (["ctl", "--socket", "/tmp/x.sock", "start"], 2, "usage error"),
        (["ctl", "--socket", "/tmp/x.sock", "explode"], 2, "usage error"),
        (["ctl", "--socket", "/tmp/x.sock", "taxonomy", "use"], 2, "usage error"),
        # both resolutions at once used to send the last one given
        (
            ["ctl", "--socket", "/tmp/x.sock", "resolve", "3", "--resend", "--accept-server"],
            2,
            "--resend and --accept-server exclude each other",
        ),
        (["ctl", "--socket", "/tmp/x.sock", "resolve", "3"], 2, "give --resend or --accept-server"),
    ],
)
async def test_bad_usage_and_no_daemon_are_one_line(args: list[str], code: int, message: str) -> None:
    done = await anyio.run_process([*CLI, *args], check=False)
    err = done.stderr.decode()
    assert done.returncode == code
    assert err.count("\n") == 1 and err.startswith("session-supervisor: ") and message in err
    assert "Traceback" not in err and done.stdout == b""


async def test_refusals_by_the_daemon_are_one_line_with_exit_1(
    genesys_sim: GenesysSimulator, tmp_path: Path, sockets: Path
) -> None:
    config = write_config(genesys_sim, tmp_path, sockets, sessions=1)
    process, daemon = await start_daemon(config)
    async with anyio.create_task_group() as tg:
        tg.start_soon(daemon.pump)
        await wait_until(lambda: active(daemon, 1), 20)
        # the configuration is broken on disk: `ctl reload` is refused and the daemon keeps the old one
        good = config.read_text()
        config.write_text(good.replace("[reconnect]", "[reconnect]\nhorizon = -1", 1))
        for args, error in [
            (["stop", "wm-9"], "io.sessionsupervisor.control.v1.NoSuchSession: no configured session 'wm-9'"),
            (["start", "wm-0"], "io.sessionsupervisor.control.v1.SessionRunning: session 'wm-0' is active"),
            (["taxonomy", "use", "v9"], "io.sessionsupervisor.control.v1.InvalidTaxonomy"),
            (["reload"], "io.sessionsupervisor.control.v1.ReloadFailed: "),
            (["show", "wm-9"], "io.sessionsupervisor.control.v1.NoSuchSession: no configured session 'wm-9'"),
        ]:
            code, out, err = await ctl(sockets, *args)
            assert (code, out) == (1, "") and err.count("\n") == 1
            assert err.startswith(f"session-supervisor: error: {error}")
        config.write_text(good)
        # a second daemon on the same sockets refuses to start, and the first keeps them; its own
        # lock file, so that the socket (not the lock on one configuration) is what refuses it
        other = tmp_path / "other.toml"
        other.write_text(good.replace("[daemon]", f'[daemon]\nlockFile = "{tmp_path / "other.lock"}"', 1))
        second = await anyio.run_process([*CLI, "run", "--config", str(other)], check=False)
        assert second.returncode == 1
        assert "another daemon is listening on this socket" in second.stderr.decode()
        assert second.stderr.decode().count("\n") == 1
        code, _, _ = await ctl(sockets, "status")
        assert code == 0
        await ctl(sockets, "drain")
        with anyio.fail_after(20):
            assert await process.wait() == 0


async def test_demo_runs_with_the_sockets_on_and_prints_the_watch_command() -> None:
    # token-expiry holds for its short-lived tokens (several seconds even with --fast): time enough
    # for a second process to start and attach before the demo ends
    demo = await anyio.open_process(
        [*CLI, "demo", "--scenario", "token-expiry", "--fast", "--sessions", "5", "--json", "--no-progress"]
    )
    output = Output(demo)
    async with anyio.create_task_group() as tg:
        tg.start_soon(output.pump)
        await wait_until(lambda: "watch it from another terminal: " in output.err, 20)
        # the printed command goes through ./dev when the tests run under it, else this interpreter
        match = re.search(r"watch it from another terminal: .* watch --socket (\S+)", output.err)
        assert match is not None
        watch_process = await anyio.open_process([*CLI, "watch", "--socket", match.group(1), "--json"])
        watch = Output(watch_process)
        tg.start_soon(watch.pump)
        with anyio.fail_after(50):
            assert await demo.wait() == 0
            assert await watch_process.wait() == 0
    assert watch.records[0]["type"] == "snapshot" and len(watch.records[0]["sessions"]) == 5
    # it followed the run to its end: the drain stopped every session, then the stream ended
    stopped = {d["sessionId"] for d in watch.typed("delta") if d["state"] == "terminated"}
    assert len(stopped) == 5 and watch.records[-1] == {"type": "end", "reason": "daemon stopping"}
    assert json.loads(output.lines[0])["outcome"]["ok"] is True


async def test_demo_in_a_tmpdir_too_long_for_a_socket_runs_without_its_sockets(tmp_path: Path) -> None:
    """A $TMPDIR whose socket paths would pass sun_path's 107 bytes: one line says the demo runs
    without its sockets (and why), the scenario still runs to its expected outcome, exit 0."""
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    done = await anyio.run_process(
        [
            *CLI,
            "demo",
            "--scenario",
            "graceful-close",
            "--fast",
            "--sessions",
            "5",
            "--json",
            "--no-progress",
        ],
        env={**os.environ, "TMPDIR": str(deep)},
        check=False,
    )
    err = done.stderr.decode()
    assert done.returncode == 0, err
    (line,) = [x for x in err.splitlines() if "without its sockets" in x]
    assert line.startswith("session-supervisor: demo without its sockets: ") and "Traceback" not in err
    assert "watch --socket" not in err
    assert json.loads(done.stdout)["outcome"]["ok"] is True


async def test_without_a_sockets_table_the_sockets_are_under_xdg_runtime_dir(
    genesys_sim: GenesysSimulator, tmp_path: Path, sockets: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A user's daemon: no [sockets] paths, so $XDG_RUNTIME_DIR/session-supervisor/; ctl finds it unaided."""
    # a user's shell has no $RUNTIME_DIRECTORY (the integration tests' conftest sets one for the lock)
    monkeypatch.delenv("RUNTIME_DIRECTORY")
    config = tmp_path / "supervisor.toml"
    config.write_text(genesys_config(genesys_sim.urls, 1))
    (tmp_path / "genesys-secret").write_text("x")
    env = {**os.environ, "XDG_RUNTIME_DIR": str(sockets)}
    process = await anyio.open_process([*CLI, "run", "--config", str(config)], env=env)
    daemon = Output(process)
    async with anyio.create_task_group() as tg:
        tg.start_soon(daemon.pump)
        await wait_until(lambda: active(daemon, 1), 20)
        directory = sockets / "session-supervisor"
        # beside the sockets, the daemon's lock on this configuration
        names = sorted(p.name for p in directory.iterdir())
        assert names[:2] == ["control.sock", "subscribe.sock"]
        assert len(names) == 3 and re.fullmatch(r"supervisor-[0-9a-f]{12}\.lock", names[2])
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700
        done = await anyio.run_process([*CLI, "ctl", "status", "--json"], env=env, check=False)
        assert done.returncode == 0 and json.loads(done.stdout)["sessions"]["total"] == 1
        await anyio.run_process([*CLI, "ctl", "drain"], env=env, check=False)
        with anyio.fail_after(20):
            assert await process.wait() == 0
    # it removed its own socket files, and its lock file while it still held the lock (a
    # daemon starting meanwhile checks that the path still names what it locked, else opens it again)
    assert list(directory.iterdir()) == []


async def test_without_paths_or_xdg_runtime_dir_the_daemon_runs_with_the_api_off(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    config = tmp_path / "supervisor.toml"
    config.write_text(genesys_config(genesys_sim.urls, 1))
    (tmp_path / "genesys-secret").write_text("x")
    process, daemon = await start_daemon(config)
    async with anyio.create_task_group() as tg:
        tg.start_soon(daemon.pump)
        await wait_until(lambda: active(daemon, 1), 20)
        off = [r for r in daemon.records if r.get("event") == "SOCKET_API_LISTENING"]
        assert off and off[0]["subscribe"] is None and "XDG_RUNTIME_DIR is unset" in off[0]["off"]
        process.send_signal(signal.SIGTERM)
        with anyio.fail_after(20):
            assert await process.wait() == 0
    assert daemon.err == ""


@pytest.fixture
def listener(sockets: Path) -> Iterator[socket.socket]:
    """A socket nobody answers on: the client gets as far as sending its call (or not at all)."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(sockets / "any.sock"))
    server.listen(16)
    server.setblocking(False)
    try:
        yield server
    finally:
        server.close()


def connections(server: socket.socket) -> int:
    """How many clients connected to ``server`` so far (each is accepted and closed)."""
    count = 0
    while True:
        try:
            client, _ = server.accept()
        except BlockingIOError:
            return count
        client.close()
        count += 1


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["ctl", "show", b"wm-\xff"], "'ID'"),
        (["ctl", "start", b"\xc3("], "'[ID]...'"),
        (["ctl", "stop", b"wm-\xff"], "'[ID]...'"),
        (["ctl", "sessions", "--session", b"\xff"], "'--session'"),
        (["ctl", "taxonomy", "use", b"/etc/tax\xff.toml"], "'VERSION|PATH'"),
        (["ctl", "attributes", "set", b"wm-\xff", "k=v"], "'SESSION_ID'"),
        (["ctl", "attributes", "set", "wm-1", b"k=\xfe"], "'KEY=VALUE...'"),
        (["ctl", "attributes", "set", "wm-1", b"\xfe=v"], "'KEY=VALUE...'"),
        (["watch", "--json", "--session", b"wm-\xff"], "'--session'"),
    ],
)
async def test_a_byte_that_is_not_utf8_in_an_argument_is_one_usage_line(
    listener: socket.socket, args: list[str | bytes], named: str
) -> None:
    """The client used to connect, then die in the JSON encoder with a traceback."""
    command = [*CLI, args[0], "--socket", listener.getsockname(), *args[1:]]
    done = await anyio.run_process(command, check=False)
    err = done.stderr.decode()
    assert (done.returncode, done.stdout) == (2, b"")
    assert err.count("\n") == 1 and err.startswith("session-supervisor: usage error: ")
    assert named in err and "not valid UTF-8" in err and "Traceback" not in err
    assert connections(listener) == 0


async def test_an_update_past_one_message_is_refused_before_it_is_sent(listener: socket.socket) -> None:
    """50 values of 4,096 characters are within the per-key limits but not within
    the 64 KiB message: `ctl attributes set` says so (exit 2) instead of the daemon closing on it."""
    pairs = [f"k{i}={'v' * 4096}" for i in range(50)]
    done = await anyio.run_process(
        [*CLI, "ctl", "--socket", listener.getsockname(), "attributes", "set", "wm-1", *pairs], check=False
    )
    err = done.stderr.decode()
    assert (done.returncode, done.stdout) == (2, b"")
    assert err.count("\n") == 1 and err.startswith("session-supervisor: usage error: ")
    assert "bytes; the daemon reads at most 65536 bytes per message" in err and "split" in err
    assert connections(listener) == 0
    # one update that fits is sent (and waits for the answer nobody gives: the test stops it)
    fits = [f"k{i}={'v' * 1000}" for i in range(50)]
    process = await anyio.open_process(
        [*CLI, "ctl", "--socket", listener.getsockname(), "attributes", "set", "wm-1", *fits]
    )
    try:
        await wait_until(lambda: connections(listener) == 1, 20)
    finally:
        process.kill()
        await process.wait()
        await process.aclose()


async def test_reload_prints_what_changed_and_its_json_for_scripts(
    genesys_sim: GenesysSimulator, tmp_path: Path, sockets: Path
) -> None:
    """`ctl reload` used to print a Python dict; now a line a person reads, and --json for scripts."""
    config = write_config(genesys_sim, tmp_path, sockets, sessions=2)
    process, daemon = await start_daemon(config)
    async with anyio.create_task_group() as tg:
        tg.start_soon(daemon.pump)
        await wait_until(lambda: active(daemon, 2), 20)
        # one session more: wm-2 is added, wm-0 and wm-1 are not touched
        config.write_text(write_config(genesys_sim, tmp_path, sockets, sessions=3).read_text())
        code, out, err = await ctl(sockets, "reload")
        assert (code, err) == (0, "")
        assert out == "reloaded: 1 added (wm-2), none removed, none restarted, 2 unchanged\n"
        config.write_text(write_config(genesys_sim, tmp_path, sockets, sessions=1).read_text())
        code, out, err = await ctl(sockets, "reload", "--json")
        assert (code, err) == (0, "")
        assert json.loads(out) == {
            "result": {
                "added": [],
                "removed": ["wm-1", "wm-2"],
                "restarted": [],
                "keptDown": [],
                "unchanged": 1,
                "restartRequired": [],
                "credentialsRotated": [],
            }
        }
        await ctl(sockets, "drain")
        with anyio.fail_after(20):
            assert await process.wait() == 0


async def test_control_idle_timeout_from_the_config_file(
    genesys_sim: GenesysSimulator, tmp_path: Path, sockets: Path
) -> None:
    """`[sockets] controlIdleTimeout`, by its name, in a `run` daemon: a client that asked and went quiet is closed."""
    config = write_config(
        genesys_sim, tmp_path, sockets, sessions=1, table_extra="controlIdleTimeout = 0.5\n"
    )
    process, daemon = await start_daemon(config)
    async with anyio.create_task_group() as tg:
        tg.start_soon(daemon.pump)
        await wait_until(lambda: active(daemon, 1), 20)
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.settimeout(20)
        client.connect(str(sockets / "control.sock"))
        try:
            client.sendall(encode_call(Method.STATUS))
            received = b""
            while received.count(b"\0") < 2:  # the answer, then the daemon's word on closing
                chunk = await anyio.to_thread.run_sync(client.recv, 1 << 16)
                assert chunk, received
                received += chunk
            answer, closing = (parse_reply(f) for f in received.split(b"\0")[:2])
            assert answer.error is None and answer.parameters["sessions"]["total"] == 1
            assert closing.error == ApiFault.IDLE_TIMEOUT and closing.parameters["seconds"] == 0.5
            assert await anyio.to_thread.run_sync(client.recv, 1 << 16) == b""
        finally:
            client.close()
        await ctl(sockets, "drain")
        with anyio.fail_after(20):
            assert await process.wait() == 0
