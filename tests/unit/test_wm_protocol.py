"""The pure pieces of the Web Messaging transport: which request an error reply answers (GMT's
``MessagingClientImpl.handleError`` / ``MessageStore.onMessageError``) and when the echo health check
goes out (GMT ``HealthCheckProvider``: a 30 s cool-down). The wire tests are in
tests/conformance/test_daemon_genesys_wire.py."""

from __future__ import annotations

from typing import Any

import pytest

from supervisor.transports.wm_health import ECHO_COOL_DOWN_S, EchoSchedule
from supervisor.transports.wm_replies import answers_oldest_message, is_failure


def string_error(code: Any, kind: str = "response") -> dict[str, Any]:
    return {"type": kind, "class": "string", "code": code, "body": "x"}


TOO_MANY = {
    "type": "response",
    "class": "TooManyRequestsErrorMessage",
    "code": 429,
    "body": {"retryAfter": 3},
}


@pytest.mark.parametrize(
    ("frame", "answers"),
    [
        # GMT handleError -> MessageStore.onMessageError
        (string_error(4011), True),
        (string_error(4013), True),
        (string_error(4029), True),
        (TOO_MANY, True),
        # GMT handleError -> transitionToStateError: the session's
        (string_error(4006), False),
        (string_error(4007), False),
        (string_error(4017), False),
        # [I] any other error reply answers the oldest request waiting
        (string_error(5000), True),
        (string_error(400), True),
        (string_error(4001), True),
        # not a reply: pushed, or not an error envelope at all
        (string_error(400, kind="message"), False),
        ({"type": "message", "class": "SessionExpiredEvent", "code": 200, "body": {}}, False),
        ({"type": "message", "class": "ConnectionClosedEvent", "code": 200, "body": {}}, False),
        (string_error("4011"), False),
        (string_error(True), False),
        (string_error(None), False),
    ],
)
def test_which_errors_answer_the_oldest_message(frame: dict[str, Any], answers: bool) -> None:
    assert is_failure(frame)
    assert answers_oldest_message(frame) is answers


def test_a_structured_message_is_not_a_failure() -> None:
    assert not is_failure({"type": "message", "class": "StructuredMessage", "code": 200, "body": {}})


def test_the_first_echo_waits_only_for_a_quiet_link() -> None:
    schedule = EchoSchedule(interval=30.0, last_inbound=100.0)
    assert schedule.due() == 130.0
    schedule.heard(120.0)
    assert schedule.due() == 150.0
    schedule.heard(110.0)  # a late report never moves the last frame back
    assert schedule.due() == 150.0


def test_echoes_keep_the_cool_down_whatever_the_interval() -> None:
    assert ECHO_COOL_DOWN_S == 30.0  # GMT HEALTH_CHECK_COOL_DOWN_MILLISECONDS
    schedule = EchoSchedule(interval=5.0, last_inbound=0.0)
    assert schedule.due() == 5.0
    schedule.sent(5.0)
    schedule.heard(5.1)  # answered at once
    assert schedule.due() == 35.0  # not 10.1
    schedule.heard(40.0)
    assert schedule.due() == 45.0  # past the cool-down, the quiet interval decides again
