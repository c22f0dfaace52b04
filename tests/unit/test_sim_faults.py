"""The shared fault controller and recorder (supervisor/sim/faults.py, recorder.py): fake clock, no sockets."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from supervisor.clock import FakeClock
from supervisor.errors import SimulatorError
from supervisor.sim.faults import (
    PARAM_SPECS,
    Fault,
    FaultController,
    FaultKind,
    decode_fault,
    retry_after_header,
    retry_after_seconds,
)
from supervisor.sim.recorder import Recorder
from tests.strategies import text


@pytest.fixture
def faults(clock: FakeClock) -> FaultController:
    return FaultController(clock, seed=42)


# -- validation ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"kind": "nope"}, "fault.kind:"),
        ({"kind": "drop", "share": 1.5}, "fault.share:"),
        ({"kind": "drop", "share": "half"}, "fault.share:"),
        ({"kind": "drop", "at": -1}, "fault.at:"),
        ({"kind": "drop", "duration_s": 0}, "fault.duration_s:"),
        ({"kind": "drop", "count": 0}, "fault.count:"),
        ({"kind": "drop", "endpoint": " "}, "fault.endpoint:"),
        ({"kind": "drop", "colour": "red"}, "fault.colour:"),
        ({"kind": "drop", "params": {"code": 1000}}, "fault.params.code:"),
        ({"kind": "close"}, "fault.params.code:"),
        ({"kind": "close", "params": {"code": 1005}}, "fault.params.code:"),
        ({"kind": "close", "params": {"code": True}}, "fault.params.code:"),
        ({"kind": "admission_limit", "params": {"rate_per_s": -1}}, "fault.params.rate_per_s:"),
        ({"kind": "admission_limit", "params": {"rate_per_s": 5, "status": 500}}, "fault.params.status:"),
        ({"kind": "rate_limit_storm", "params": {"retry_after": "soon"}}, "fault.params.retry_after:"),
        ({"kind": "server_error_burst", "params": {"status": 404}}, "fault.params.status:"),
        ({"kind": "latency", "params": {}}, "fault.params.latency_ms:"),
        ({"kind": "missing_fields", "params": {"fields": []}}, "fault.params.fields:"),
        ({"kind": "silent_drop_attributes", "params": {"after": -1}}, "fault.params.after:"),
        ({"kind": "session_expired", "params": {"mode": "later"}}, "fault.params.mode:"),
        ({"kind": "queue_full", "params": {"body": "xml"}}, "fault.params.body:"),
        ({"kind": "drop", "id": "f1"}, "fault.id:"),
    ],
)
def test_validation_names_the_field_in_one_line(data: dict[str, object], field: str) -> None:
    with pytest.raises(SimulatorError) as err:
        decode_fault(data)
    message = str(err.value)
    assert message.startswith(field), message
    assert "\n" not in message


def test_decode_from_json_fills_param_defaults() -> None:
    fault = decode_fault(b'{"kind": "admission_limit", "params": {"rate_per_s": 200}}')
    assert fault.params == {"rate_per_s": 200, "status": 429, "retry_after": "1", "body": None}
    # one field each platform's session response really carries (taxonomy v1 [responses])
    assert decode_fault('{"kind":"missing_fields"}').params["fields"] == ["connected", "id", "sessionId"]
    with pytest.raises(SimulatorError, match="invalid JSON"):
        decode_fault(b"{nope")


def test_every_kind_has_a_param_spec() -> None:
    assert set(PARAM_SPECS) == set(FaultKind)


@pytest.mark.parametrize(
    ("value", "header"),
    [("5", "5"), (7, "7"), (None, None), ("http-date", "Thu, 01 Jan 1970 00:00:05 GMT")],
)
def test_retry_after_forms(value: object, header: str | None) -> None:
    assert retry_after_header(value, 0.0) == header
    assert retry_after_header("http-date:60", 0.0) == "Thu, 01 Jan 1970 00:01:00 GMT"
    assert retry_after_seconds("http-date:60") == 60
    assert retry_after_seconds(None) is None


# -- matching, scheduling, counting ----------------------------------------------------------------


def test_match_counts_hits_and_count_spends_the_fault(faults: FaultController) -> None:
    cleared: list[str | None] = []
    faults.on_clear(lambda f: cleared.append(f.id))
    fault = faults.inject(Fault(kind=FaultKind.SERVER_ERROR_BURST, count=2))
    assert fault.id == "f1"
    assert faults.match(FaultKind.SERVER_ERROR_BURST, "s") is fault
    assert faults.match(FaultKind.RATE_LIMIT_STORM, "s") is None  # other kinds untouched
    assert faults.match(FaultKind.SERVER_ERROR_BURST, "s") is fault
    assert faults.match(FaultKind.SERVER_ERROR_BURST, "s") is None
    assert faults.active() == []
    assert cleared == ["f1"]


def test_schedule_and_duration_follow_the_injected_clock(clock: FakeClock, faults: FaultController) -> None:
    started: list[str | None] = []
    faults.on_activate(lambda f: started.append(f.id))
    faults.inject(Fault(kind=FaultKind.LATENCY, at=10, duration_s=5, params={"latency_ms": 1}))
    assert faults.describe()[0]["state"] == "pending"
    assert faults.match(FaultKind.LATENCY, "s") is None
    clock.advance(10)
    faults.fire_due()
    assert started == ["f1"]
    assert faults.describe()[0]["state"] == "active"
    assert faults.match(FaultKind.LATENCY, "s") is not None
    clock.advance(5)
    assert faults.match(FaultKind.LATENCY, "s") is None
    assert faults.active() == []


def test_one_shot_connection_faults_leave_after_activation(faults: FaultController) -> None:
    seen: list[FaultKind] = []
    faults.on_activate(lambda f: seen.append(f.kind))
    faults.inject(Fault(kind=FaultKind.DROP))
    faults.inject(Fault(kind=FaultKind.CLOSE, params={"code": 1012}))
    hole = faults.inject(Fault(kind=FaultKind.BLACKHOLE))
    lasting = faults.inject(Fault(kind=FaultKind.DROP, duration_s=30))
    assert seen == [FaultKind.DROP, FaultKind.CLOSE, FaultKind.BLACKHOLE, FaultKind.DROP]
    assert faults.active() == [hole, lasting]  # black hole is a state; a duration keeps it


def test_endpoint_filter_accepts_patterns_and_substrings(faults: FaultController) -> None:
    faults.inject(Fault(kind=FaultKind.QUEUE_FULL, endpoint="PATCH */attributes"))
    faults.inject(Fault(kind=FaultKind.RATE_LIMIT_STORM, endpoint="get-next-event"))
    assert faults.match(FaultKind.QUEUE_FULL, "s", "PATCH /api/v2/conversations/{id}/attributes")
    assert faults.match(FaultKind.QUEUE_FULL, "s", "GET /api/v2/conversations/{id}") is None
    assert faults.match(FaultKind.RATE_LIMIT_STORM, "s", "GET /x/agent-sessions/{s}/get-next-event")


def test_clear_one_or_all(faults: FaultController) -> None:
    a = faults.inject(Fault(kind=FaultKind.SERVER_ERROR_BURST))
    faults.inject(Fault(kind=FaultKind.QUEUE_FULL))
    assert a.id is not None
    assert faults.clear("f999") == 0
    assert faults.clear(a.id) == 1
    assert faults.clear() == 1
    assert faults.active() == []


@given(share=st.floats(min_value=0.0, max_value=1.0), keys=st.lists(text(max_size=12), max_size=30))
def test_share_selection_is_deterministic_and_order_free(share: float, keys: list[str]) -> None:
    one = FaultController(FakeClock(), seed=5)
    two = FaultController(FakeClock(), seed=5)
    f1 = one.inject(Fault(kind=FaultKind.QUEUE_FULL, share=share))
    f2 = two.inject(Fault(kind=FaultKind.QUEUE_FULL, share=share))
    forward = [one.selected(f1, k) for k in keys]
    backward = [two.selected(f2, k) for k in reversed(keys)][::-1]
    assert forward == backward
    if share == 1.0:
        assert all(forward)
    if share == 0.0:
        assert not any(forward)


def test_share_is_roughly_the_share() -> None:
    faults = FaultController(FakeClock(), seed=1)
    fault = faults.inject(Fault(kind=FaultKind.DROP, share=0.3, duration_s=1))
    hits = sum(faults.selected(fault, f"session-{i}") for i in range(2000))
    assert 500 < hits < 700


def test_admission_limit_windows_are_whole_clock_seconds(clock: FakeClock, faults: FaultController) -> None:
    faults.inject(Fault(kind=FaultKind.ADMISSION_LIMIT, params={"rate_per_s": 3}))
    first = [faults.admission(f"k{i}", "WS /v1") for i in range(5)]
    assert [f is None for f in first] == [True, True, True, False, False]
    clock.advance(1.0)
    assert faults.admission("k", "WS /v1") is None
    assert faults.hits("f1") == 2


def test_admission_limit_zero_refuses_every_handshake(clock: FakeClock, faults: FaultController) -> None:
    faults.inject(Fault(kind=FaultKind.ADMISSION_LIMIT, count=3, params={"rate_per_s": 0}))
    refused = [faults.admission(f"k{i}", "WS /v1") is not None for i in range(4)]
    # refused until the fault's three hits are spent, then the door opens again
    assert refused == [True, True, True, False]


# -- recorder --------------------------------------------------------------------------------------


def test_recorder_snapshot_is_json_and_secret_free(clock: FakeClock) -> None:
    rec = Recorder(clock)
    rec.record_attempt("webmessaging", accepted=True)
    rec.record_attempt("webmessaging", accepted=False)
    clock.advance(1)
    rec.record_attempt("webmessaging", accepted=True)
    rec.record_request("GET", "/api/v2/conversations/{conversationId}", 200, idempotency_key="k1")
    rec.record_request("GET", "/api/v2/conversations/{conversationId}", 429)
    rec.record_token("issued", grant="client_credentials")
    rec.record_attributes("c1", {"a": "1"})
    rec.record_attributes("c1", {"b": "2"})
    rec.record_attributes_dropped("c1", {"c": "3"})
    rec.record_ws_message("webmessaging", "in", "echo")
    rec.record_event("close", listener="webmessaging", code=1001)
    rec.connection_opened("webmessaging")
    snap = rec.snapshot()
    json.dumps(snap)
    assert rec.peak_attempts_per_second("webmessaging") == 2
    assert rec.peak_attempts_per_second(which="refused") == 1
    assert rec.attempts_total() == {"accepted": 2, "refused": 1}
    assert rec.request_count(endpoint="/api/v2/conversations/{conversationId}") == 2
    assert rec.request_count(status=429) == 1
    assert rec.idempotency_keys() == {"k1": 1}
    assert rec.tokens()["issued"] == 1
    assert rec.attributes("c1") == {"a": "1", "b": "2"}
    assert rec.attributes_dropped("c1") == 1
    assert rec.ws_messages(kind="echo") == 1
    assert rec.events("close", code=1001) == 1
    assert snap["connections_open"] == {"webmessaging": 1}
    rec.reset()
    assert rec.snapshot()["requests"] == []
    assert rec.connections_open("webmessaging") == 1  # open connections survive a reset


def test_recorder_keeps_the_most_upgrades_answered_at_once_and_a_reset_starts_from_those_in_progress(
    clock: FakeClock,
) -> None:
    rec = Recorder(clock)
    assert rec.peak_handshakes() == 0
    for _ in range(3):
        rec.handshake_started("webmessaging")
    rec.handshake_ended("webmessaging")
    rec.handshake_started("webmessaging")  # 3 again, never 4
    rec.handshake_started("streaming")
    assert rec.peak_handshakes("webmessaging") == 3
    assert rec.peak_handshakes() == 3
    assert rec.snapshot()["peak_handshakes"] == {"streaming": 1, "webmessaging": 3}
    rec.handshake_ended("webmessaging")
    rec.reset()
    # two upgrades are still being answered: the new peak starts from them, not from zero
    assert rec.peak_handshakes("webmessaging") == 2
    rec.handshake_started("webmessaging")
    assert rec.peak_handshakes("webmessaging") == 3
