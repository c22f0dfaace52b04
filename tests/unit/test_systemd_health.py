"""Degraded conditions, the status line's text and throttle, the watchdog's health verdict (docs/systemd.md).

Time is a FakeClock: the throttle and the conditions' durations are decided on it, nothing sleeps.
"""

from __future__ import annotations

import random
import socket
import tempfile
from pathlib import Path
from typing import Any

import anyio
import pytest

from supervisor.bus import EventBus
from supervisor.clock import FakeClock
from supervisor.config import parse_config
from supervisor.events import CircuitClosed, CircuitOpened, Published, wire
from supervisor.runtime.supervisor import Supervisor
from supervisor.runtime.wiring import Wiring
from supervisor.systemd.conditions import CircuitConditions, StateDirectoryProbe, state_directory
from supervisor.systemd.degraded import Degraded
from supervisor.systemd.notify import Notifier
from supervisor.systemd.service import FLUSH_MARGIN_S, Systemd
from supervisor.systemd.status import compose
from supervisor.systemd.watchdog import Health, Watchdog, watchdog_usec

pytestmark = pytest.mark.anyio


def recorded(bus: EventBus) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    bus.subscribe(lambda p: seen.append(wire(p)))
    return seen


# -- degraded conditions ---------------------------------------------------------------------------------


def test_a_condition_is_published_once_per_change_and_its_recovery_with_how_long() -> None:
    bus, clock = EventBus(), FakeClock()
    seen = recorded(bus)
    degraded = Degraded(bus, clock)
    degraded.raise_condition("store", "state directory full (ENOSPC)")
    degraded.raise_condition("store", "state directory full (ENOSPC)")  # refused again: nothing new
    clock.advance(30)
    degraded.raise_condition("store", "state directory read-only (EROFS)")  # a new reason: published
    clock.advance(12.5)
    degraded.clear("store")
    degraded.clear("store")  # not raised any more: nothing
    assert [(e["event"], e.get("reason"), e.get("degradedS")) for e in seen] == [
        ("DAEMON_DEGRADED", "state directory full (ENOSPC)", None),
        ("DAEMON_DEGRADED", "state directory read-only (EROFS)", None),
        ("DAEMON_RECOVERED", None, 42.5),  # since it was first raised, not since the new reason
    ]
    assert not degraded and degraded.active == {}


def test_a_reason_stays_one_bounded_line() -> None:
    degraded = Degraded(EventBus(), FakeClock())
    degraded.raise_condition("x", "line one\nline two\tand " + "y" * 500)
    (reason,) = degraded.active.values()
    assert "\n" not in reason and "\t" not in reason and len(reason) <= 160


def test_an_open_circuit_is_a_degraded_condition_until_it_closes() -> None:
    bus, clock = EventBus(), FakeClock()
    degraded = Degraded(bus, clock)
    bus.subscribe(CircuitConditions(degraded))
    bus.publish(CircuitOpened("circuit:genesys:webmessaging", "THRESHOLD", 5, 30.0, 1, timestamp="t"))
    bus.publish(CircuitOpened("cxone:api", "THRESHOLD", 3, 30.0, 1, timestamp="t"))  # named either way
    assert degraded.active == {
        "circuit:genesys:webmessaging": "open after 5 failures",
        "circuit:cxone:api": "open after 3 failures",
    }
    bus.publish(CircuitClosed("circuit:genesys:webmessaging", 1, timestamp="t"))
    bus.publish(CircuitClosed("cxone:api", 1, timestamp="t"))
    assert degraded.active == {}


def test_the_state_directory_probe_sees_a_full_filesystem(tmp_path: Path) -> None:
    """Real statvfs: a bar above the free space counts as full; back under it, recovered."""
    bus = EventBus()
    seen = recorded(bus)
    degraded = Degraded(bus, FakeClock())
    assert state_directory({"STATE_DIRECTORY": f"{tmp_path}:/other"}) == tmp_path
    assert state_directory({}) is None and state_directory({"STATE_DIRECTORY": "relative"}) is None
    full = StateDirectoryProbe(tmp_path, degraded, min_free_bytes=2**62)  # more than any disk has
    problem = full.probe()
    assert problem is not None and "is full" in problem
    StateDirectoryProbe(tmp_path, degraded).probe()
    assert [e["event"] for e in seen] == ["DAEMON_DEGRADED", "DAEMON_RECOVERED"]
    missing = StateDirectoryProbe(tmp_path / "gone", degraded).probe()
    assert missing is not None and "No such file" in missing


# -- the status line -------------------------------------------------------------------------------------


def test_the_status_line_reads_like_the_issue_asks() -> None:
    states = {"active": 1834, "reconnecting": 3, "connecting": 163}
    assert (
        compose(states, open_circuits=1, degraded={}, outbox=12)
        == "1834/2000 active · 163 connecting · 3 reconnecting · circuits open: 1 · outbox 12"
    )
    line = compose(
        {"active": 2, "terminated": 1},
        open_circuits=0,
        degraded={"store": "state directory full"},
        phase="draining",
    )
    assert line == (
        "draining · 2/3 active · 0 reconnecting · 1 terminated · circuits open: 0 · degraded: store (state directory full)"
    )
    assert "outbox" not in line  # no store yet: no outbox part


CONFIG = """
[daemon]
seed = 1
[platforms.genesys]
loginUrl = "http://127.0.0.1:9/login"
apiUrl = "http://127.0.0.1:9/api"
webmessagingUrl = "ws://127.0.0.1:9/wm"
deploymentId = "d"
[reconnect]
firstDelayMin = 30.0
firstDelayMax = 30.0
[[sessions]]
id = "wm-0"
platform = "genesys"
kind = "webmessaging"
"""


class NotifySocket:
    def __init__(self) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="ss-h-", dir="/tmp")
        self.path = str(Path(self._dir.name) / "notify")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)

    def messages(self) -> list[dict[str, str]]:
        out = []
        while True:
            try:
                data = self.sock.recv(4096, socket.MSG_DONTWAIT)
            except BlockingIOError:
                return out
            out.append(dict(line.split("=", 1) for line in data.decode().splitlines()))

    def close(self) -> None:
        self.sock.close()
        self._dir.cleanup()


async def test_ready_reload_and_stopping_in_order_and_the_status_throttled_on_the_clock() -> None:
    """READY=1 with a status, RELOADING=1/READY=1 around a reload, STOPPING=1 with the drain's extension;
    a change within a second of the last send waits for the throttle (decided on the injected clock)."""
    notify = NotifySocket()
    clock = FakeClock()
    try:
        async with Wiring(parse_config(CONFIG, "t.toml"), rng=random.Random(1), environ={}) as wiring:
            supervisor = Supervisor(wiring)
            glue = Systemd(
                supervisor.sessions,
                wiring.circuits,
                bus=wiring.bus,
                environ={"NOTIFY_SOCKET": notify.path},
                grace_s=10.0,
                clock=clock,
            )
            assert glue.watchdog is None and glue.state_probe is None  # neither asked for
            async with anyio.create_task_group() as tg:
                await tg.start(supervisor.serve)
                glue.ready()
                (ready,) = notify.messages()
                assert ready == {
                    "READY": "1",
                    "STATUS": "0/1 active · 1 connecting · 0 reconnecting · circuits open: 0",
                }
                # a change right after READY=1: throttled until the clock says a second has passed
                glue.degraded.raise_condition("store", "disk full")
                assert glue.status.wait_s() == 1.0
                clock.advance(0.4)
                assert glue.status.wait_s() == pytest.approx(0.6)
                clock.advance(0.6)
                assert glue.status.wait_s() == 0.0 and glue.status.refresh()
                (status,) = notify.messages()
                assert status["STATUS"].endswith("degraded: store (disk full)")
                assert not glue.status.refresh()  # unchanged: nothing sent

                calls: list[str] = []

                async def reload() -> str:
                    calls.append("reload")
                    return "applied"

                assert await glue.reloading(reload)() == "applied"
                reloading, again = notify.messages()
                assert reloading["RELOADING"] == "1" and int(reloading["MONOTONIC_USEC"]) > 0
                assert reloading["STATUS"].startswith("reloading · ")
                assert again["READY"] == "1" and not again["STATUS"].startswith("reloading")
                glue.stopping()
                (stopping,) = notify.messages()
                assert stopping["STOPPING"] == "1"
                assert int(stopping["EXTEND_TIMEOUT_USEC"]) == int((10.0 + FLUSH_MARGIN_S) * 1_000_000)
                assert stopping["STATUS"].startswith("draining · ")
                # a reload through the control socket while draining: no READY=1 after STOPPING=1
                await glue.reloading(reload)()
                assert notify.messages() == [] and calls == ["reload", "reload"]
                await supervisor.shutdown(1.0)
                tg.cancel_scope.cancel()
    finally:
        notify.close()


# -- the watchdog's verdict ---------------------------------------------------------------------------------


def test_watchdog_usec_is_taken_only_when_meant_for_this_process() -> None:
    assert watchdog_usec({"WATCHDOG_USEC": "30000000"}, pid=42) == 30_000_000
    assert watchdog_usec({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "42"}, pid=42) == 30_000_000
    assert watchdog_usec({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "41"}, pid=42) is None
    assert watchdog_usec({"WATCHDOG_USEC": "0"}, pid=42) is None
    assert watchdog_usec({"WATCHDOG_USEC": "soon"}, pid=42) is None


def test_one_slow_wake_up_is_tolerated_a_starved_loop_is_not() -> None:
    health = Health(max_lag_s=1.0)
    for lag in (0.01, 7.0, 0.02):  # one blocking callback among prompt wake-ups
        health.observe_lag(lag)
    assert health.verdict(events=10, failed_deliveries=0) is None
    for lag in (2.5, 3.0, 1.5):  # every wake-up of the period late: starved
        health.observe_lag(lag)
    reason = health.verdict(events=10, failed_deliveries=0)
    assert reason is not None and "starved" in reason
    assert health.verdict(events=0, failed_deliveries=0) is None  # a new window


def test_a_bus_whose_every_event_fails_in_a_sink_is_unhealthy() -> None:
    health = Health(max_lag_s=1.0)
    assert health.verdict(events=5, failed_deliveries=4) is None
    reason = health.verdict(events=5, failed_deliveries=5)
    assert reason is not None and "not delivering" in reason


def test_the_watchdog_withholds_pings_while_unhealthy_and_says_so_once() -> None:
    """A real bus with a sink that fails on everything: no WATCHDOG=1, one WATCHDOG_WITHHELD; then back."""
    notify = NotifySocket()
    try:
        bus = EventBus()
        seen = recorded(bus)
        clock = FakeClock()
        notifier = Notifier.from_environ({"NOTIFY_SOCKET": notify.path})
        watchdog = Watchdog(notifier, bus, 2_000_000, clock=clock)
        assert watchdog.period_s == 1.0  # half of WATCHDOG_USEC
        assert watchdog.decide() and notify.messages() == [{"WATCHDOG": "1"}]

        broken = True

        def sink(published: Published) -> None:
            if broken:
                raise RuntimeError("a sink that lost its mind")

        bus.subscribe(sink)
        degraded = Degraded(bus, clock)
        degraded.raise_condition("store", "disk full")  # degraded is not unhealthy ...
        assert watchdog.decide() is False  # ... but a bus that delivers nothing is
        bus.publish(CircuitClosed("genesys:api", 1, timestamp="t"))
        assert not watchdog.decide()  # still failing: still withheld, and said only once
        assert notify.messages() == []
        assert watchdog.decide()  # a quiet period proves nothing either way: pinged
        broken = False
        degraded.clear("store")
        assert watchdog.decide() and notify.messages() == [{"WATCHDOG": "1"}, {"WATCHDOG": "1"}]
        names = [e["event"] for e in seen]
        assert names.count("WATCHDOG_WITHHELD") == 1 and "WATCHDOG_RESUMED" in names
        withheld = next(e for e in seen if e["event"] == "WATCHDOG_WITHHELD")
        assert "not delivering" in withheld["reason"]
    finally:
        notify.close()


def test_a_degraded_daemon_keeps_pinging() -> None:
    notify = NotifySocket()
    try:
        bus, clock = EventBus(), FakeClock()
        watchdog = Watchdog(
            Notifier.from_environ({"NOTIFY_SOCKET": notify.path}), bus, 2_000_000, clock=clock
        )
        Degraded(bus, clock).raise_condition("state-directory", "read-only")
        assert watchdog.decide() and notify.messages() == [{"WATCHDOG": "1"}]
    finally:
        notify.close()
