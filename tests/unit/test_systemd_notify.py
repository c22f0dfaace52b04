"""sd_notify in the project (docs/systemd.md): real datagrams to a real socket, path and abstract; activation's env rules."""

from __future__ import annotations

import os
import socket
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from supervisor.errors import ConfigError
from supervisor.systemd.activation import listen_fds
from supervisor.systemd.notify import Notifier, encode, monotonic_usec, notify_address


class Receiver:
    """A datagram socket standing in for systemd's notify socket."""

    def __init__(self, sock: socket.socket, value: str) -> None:
        self.sock = sock
        self.value = value  # what $NOTIFY_SOCKET says

    def messages(self) -> list[dict[str, str]]:
        """Every datagram queued so far (sendto on AF_UNIX delivers before it returns)."""
        out = []
        while True:
            try:
                data = self.sock.recv(4096, socket.MSG_DONTWAIT)
            except BlockingIOError:
                return out
            out.append(dict(line.split("=", 1) for line in data.decode().splitlines()))


@pytest.fixture(params=["path", "abstract"])
def receiver(request: pytest.FixtureRequest) -> Iterator[Receiver]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    with tempfile.TemporaryDirectory(prefix="ss-n-", dir="/tmp") as directory:
        if request.param == "path":
            path = os.path.join(directory, "notify")
            sock.bind(path)
            value = path
        else:
            name = f"ss-test-{uuid.uuid4().hex}"
            sock.bind(b"\0" + name.encode())
            value = "@" + name
        try:
            yield Receiver(sock, value)
        finally:
            sock.close()


def test_messages_reach_the_socket_path_and_abstract(receiver: Receiver) -> None:
    notifier = Notifier.from_environ({"NOTIFY_SOCKET": receiver.value})
    assert notifier.enabled and notifier.problem is None
    assert notifier.ready("3/3 active")
    assert notifier.watchdog()
    assert notifier.stopping(extend_usec=15_000_000, status="draining")
    assert receiver.messages() == [
        {"READY": "1", "STATUS": "3/3 active"},
        {"WATCHDOG": "1"},
        {"STOPPING": "1", "EXTEND_TIMEOUT_USEC": "15000000", "STATUS": "draining"},
    ]
    assert notifier.sent == 3 and notifier.failures == 0


def test_reloading_carries_the_monotonic_clock_systemd_253_asks_for(receiver: Receiver) -> None:
    before = monotonic_usec()
    Notifier.from_environ({"NOTIFY_SOCKET": receiver.value}).reloading("reloading")
    after = monotonic_usec()
    (message,) = receiver.messages()
    assert message["RELOADING"] == "1" and message["STATUS"] == "reloading"
    assert before <= int(message["MONOTONIC_USEC"]) <= after  # CLOCK_MONOTONIC, microseconds


def test_a_status_cannot_forge_another_assignment() -> None:
    """A value is cut at its first line break: one live line, and no READY=1 smuggled in."""
    assert encode({"STATUS": "fine\nREADY=1"}) == b"STATUS=fine\n"
    assert encode({"STATUS": "a\rREADY=1", "WATCHDOG": 1}) == b"STATUS=a\nWATCHDOG=1\n"


def test_without_a_manager_nothing_is_sent_and_nothing_raises() -> None:
    assert not Notifier.from_environ({}).ready()
    gone = Notifier.from_environ({"NOTIFY_SOCKET": "/nonexistent/notify"})
    assert gone.enabled and not gone.ready() and gone.failures == 1  # counted, never raised
    vsock = Notifier.from_environ({"NOTIFY_SOCKET": "vsock:2:1234"})
    assert not vsock.enabled and vsock.problem is not None and "vsock" in vsock.problem
    assert notify_address("@name") == b"\0name" and notify_address("relative") is None


def test_a_full_notify_queue_never_blocks(receiver: Receiver) -> None:
    """The sender is non-blocking: past the receiver's queue, sends fail (counted) instead of waiting."""
    notifier = Notifier.from_environ({"NOTIFY_SOCKET": receiver.value})
    results = [notifier.status("x" * 2000) for _ in range(5000)]
    assert results[0] and not all(results)  # the queue filled up; no send waited for room
    assert notifier.failures == results.count(False)


# -- socket activation: which environment is ours ------------------------------------------------------


def test_listen_fds_meant_for_another_process_are_left_alone() -> None:
    environ = {"LISTEN_PID": str(os.getpid() + 1), "LISTEN_FDS": "2", "LISTEN_FDNAMES": "subscribe:control"}
    assert listen_fds(environ) == {}
    assert environ["LISTEN_FDS"] == "2"  # not ours: not consumed either
    assert listen_fds({"LISTEN_FDS": "2"}) == {}  # no LISTEN_PID: never taken (sd_listen_fds(3))


def test_listen_fds_for_us_are_consumed_and_checked() -> None:
    environ = {"LISTEN_PID": str(os.getpid()), "LISTEN_FDS": "2", "LISTEN_FDNAMES": "subscribe"}
    with pytest.raises(ConfigError, match="LISTEN_FDS=2 but LISTEN_FDNAMES names 1"):
        listen_fds(environ)
    assert not any(k.startswith("LISTEN_") for k in environ)  # unset, as sd_listen_fds(1) does
    assert listen_fds({"LISTEN_PID": str(os.getpid()), "LISTEN_FDS": "0"}) == {}


def test_the_notify_module_is_stdlib_only() -> None:
    """It sits on floor 3: a pure builder plus one socket call, importing nothing of the daemon but the
    reader of systemd's variables, itself stdlib only."""
    systemd = Path(__file__).resolve().parents[2] / "supervisor" / "systemd"
    ours = [
        line
        for line in (systemd / "notify.py").read_text().splitlines()
        if "import" in line and "supervisor" in line
    ]
    assert ours == ["from supervisor.systemd.environ import shown"]
    assert "supervisor" not in "".join(
        line
        for line in (systemd / "environ.py").read_text().splitlines()
        if line.startswith(("import", "from"))
    )
