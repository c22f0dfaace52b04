"""systemd's variables as systemd writes them: values it never sends are
a warning and the feature off (WATCHDOG_*, LISTEN_PID, NOTIFY_SOCKET) or, for a hand-over meant for
this process, a located error (LISTEN_FDS); the watchdog never pings more often than its floor."""

from __future__ import annotations

import os

import pytest

from supervisor.bus import EventBus
from supervisor.clock import FakeClock
from supervisor.errors import ConfigError
from supervisor.systemd.activation import listen_fds
from supervisor.systemd.environ import decimal, shown
from supervisor.systemd.notify import Notifier
from supervisor.systemd.watchdog import MIN_PING_PERIOD_S, SAMPLES_PER_PERIOD, Watchdog, watchdog_usec

NEVER_SENT = ["²", "٣٠", "1" * 400, "3e7", "-5", "+30", str(2**64 - 1), str(2**64)]


def test_numbers_are_ascii_digits_of_a_bounded_length() -> None:
    assert decimal("30000000", 20) == 30_000_000
    assert "²".isdigit() and decimal("²", 20) is None  # isdigit says yes, int() says no
    assert decimal("1" * 21, 20) is None and decimal("", 20) is None and decimal(" 1", 20) is None
    assert shown("1" * 400) == f"{'1' * 32!r}... (400 characters)"
    assert shown("²") == "'²'"


@pytest.mark.parametrize("value", NEVER_SENT)
def test_a_watchdog_interval_systemd_never_sends_is_one_warning_and_no_watchdog(value: str) -> None:
    warnings: list[str] = []
    assert watchdog_usec({"WATCHDOG_USEC": value}, pid=42, warn=warnings.append) is None
    (line,) = warnings
    assert line.startswith("WATCHDOG_USEC=") and line.endswith("the watchdog is off")
    assert "\n" not in line and len(line) < 160


def test_a_watchdog_pid_systemd_never_sends_is_one_warning_and_no_watchdog() -> None:
    warnings: list[str] = []
    environ = {"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "4²"}
    assert watchdog_usec(environ, pid=42, warn=warnings.append) is None
    assert warnings == ["WATCHDOG_PID='4²' is not a process id: the watchdog is off"]
    # values systemd does send say nothing: ours, another process's (inherited), 0
    for environ in ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "41"}, {"WATCHDOG_USEC": "0"}):
        assert watchdog_usec(environ, pid=42, warn=warnings.append) is None
    assert watchdog_usec({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "42"}, pid=42) == 30_000_000
    assert len(warnings) == 1


@pytest.mark.parametrize("usec", [1, 1_000, 150_000])
def test_the_ping_period_has_a_floor(usec: int) -> None:
    """WATCHDOG_USEC=1 asked for a ping every half microsecond: the task woke every eighth of one and
    spun (81 % of a CPU, idle). The period, and the lag samples within it, never go below the floor."""
    watchdog = Watchdog(Notifier(None), EventBus(), usec, clock=FakeClock())
    assert watchdog.requested_period_s == usec / 2_000_000
    assert watchdog.period_s == MIN_PING_PERIOD_S == 0.1
    assert watchdog.sample_s == MIN_PING_PERIOD_S / SAMPLES_PER_PERIOD
    assert watchdog.health.max_lag_s == MIN_PING_PERIOD_S


def test_a_watchdog_above_the_floor_pings_at_half_its_interval() -> None:
    watchdog = Watchdog(Notifier(None), EventBus(), 400_000, clock=FakeClock())
    assert watchdog.period_s == watchdog.requested_period_s == 0.2


@pytest.mark.parametrize("value", ["²", "1" * 400, "-1", "12 34"])
def test_a_listen_pid_systemd_never_sends_is_one_warning_and_no_activation(value: str) -> None:
    warnings: list[str] = []
    environ = {"LISTEN_PID": value, "LISTEN_FDS": "2", "LISTEN_FDNAMES": "subscribe:control"}
    assert listen_fds(environ, pid=os.getpid(), warn=warnings.append) == {}
    (line,) = warnings
    assert line.startswith("LISTEN_PID=") and line.endswith("socket activation is off") and len(line) < 160
    assert environ["LISTEN_FDS"] == "2"  # not ours to remove: they named nobody


@pytest.mark.parametrize("value", ["²", "1" * 400, "-2", "0x2"])
def test_a_listen_fds_that_is_no_count_stops_a_hand_over_meant_for_us(value: str) -> None:
    environ = {"LISTEN_PID": str(os.getpid()), "LISTEN_FDS": value, "LISTEN_FDNAMES": "subscribe:control"}
    with pytest.raises(ConfigError) as refused:
        listen_fds(environ)
    message = str(refused.value)
    assert message.startswith("socket activation: LISTEN_FDS=") and "is not a count of descriptors" in message
    assert "\n" not in message and len(message) < 160
    assert "LISTEN_PID" not in environ  # taken (and removed) as sd_listen_fds(unset_environment=1) does


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("vsock:2:1234", "only a path or an @abstract name is supported"),
        ("notify", "only a path or an @abstract name is supported"),
        ("/" + "n" * 107, "longer than a Unix socket address holds (108 bytes)"),
        ("@" + "n" * 108, "longer than a Unix socket address holds (108 bytes)"),
    ],
)
def test_an_unsupported_notify_socket_is_one_line_and_notifications_off(value: str, problem: str) -> None:
    notifier = Notifier.from_environ({"NOTIFY_SOCKET": value})
    assert not notifier.enabled and not notifier.ready()
    assert notifier.problem is not None and problem in notifier.problem
    assert notifier.problem.startswith("NOTIFY_SOCKET=") and "notifications are off" in notifier.problem
    assert "\n" not in notifier.problem and len(notifier.problem) < 250


@pytest.mark.parametrize("value", ["/run/systemd/notify", "/" + "n" * 106, "@" + "n" * 107])
def test_a_notify_socket_systemd_sends_is_taken(value: str) -> None:
    notifier = Notifier.from_environ({"NOTIFY_SOCKET": value})
    assert notifier.enabled and notifier.problem is None
