"""The socket API's framing and calls (supervisor/api/protocol.py), fuzzed: only typed errors ever come out."""

from __future__ import annotations

import re

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from supervisor.api.client import encode
from supervisor.api.messages import parse_subscription
from supervisor.api.protocol import (
    CONTROL,
    MAX_MESSAGE_BYTES,
    SERVICE,
    ApiFault,
    FrameDecoder,
    Method,
    check_method,
    encode_call,
    encode_error,
    encode_reply,
    parse_call,
    parse_reply,
)
from supervisor.errors import ApiError, CallNotSent
from tests.strategies import WRONGLY_TYPED, json_values

KNOWN = {SERVICE: frozenset({Method.GET_INFO.value}), CONTROL: frozenset({Method.STATUS.value})}
STATES = ("connecting", "active", "reconnecting", "terminated")


def feed_in_chunks(data: bytes, cuts: list[int]) -> list[bytes]:
    decoder = FrameDecoder()
    frames: list[bytes] = []
    start = 0
    for cut in sorted(set(cuts)):
        frames += decoder.feed(data[start:cut])
        start = cut
    frames += decoder.feed(data[start:])
    return frames


@given(
    messages=st.lists(st.binary(max_size=300).map(lambda b: b.replace(b"\0", b"")), max_size=20),
    cuts=st.lists(st.integers(min_value=0, max_value=8000), max_size=30),
)
def test_frames_come_out_whole_however_the_stream_is_cut(messages: list[bytes], cuts: list[int]) -> None:
    """Any split of a NUL-delimited stream into reads yields the same messages, in order."""
    data = b"".join(m + b"\0" for m in messages)
    assert feed_in_chunks(data, cuts) == messages


def test_a_truncated_message_stays_pending_and_is_never_returned() -> None:
    decoder = FrameDecoder()
    assert decoder.feed(b'{"method":"a.b.C"}\0{"meth') == [b'{"method":"a.b.C"}']
    assert decoder.pending == len(b'{"meth')


@pytest.mark.parametrize("chunk", [1, 1000, MAX_MESSAGE_BYTES + 1])
def test_a_message_over_the_limit_is_refused_as_soon_as_it_is_too_long(chunk: int) -> None:
    """No NUL within 64 KiB: a fatal MessageTooLarge, whether it arrives in drips or at once."""
    decoder = FrameDecoder()

    def drip() -> None:
        for _ in range(MAX_MESSAGE_BYTES // chunk + 2):
            decoder.feed(b"x" * chunk)

    with pytest.raises(ApiError) as refused:
        drip()
    assert refused.value.name == ApiFault.MESSAGE_TOO_LARGE and refused.value.fatal
    assert decoder.pending <= MAX_MESSAGE_BYTES + chunk


def test_a_message_exactly_at_the_limit_passes() -> None:
    assert FrameDecoder().feed(b"x" * MAX_MESSAGE_BYTES + b"\0") == [b"x" * MAX_MESSAGE_BYTES]


@pytest.mark.parametrize(
    ("frame", "problem"),
    [
        (b"\xff\xfe", "not valid JSON"),
        (b'{"method": "\xc3\x28"}', "not valid JSON"),
        (b"[1, 2]", "a call is a JSON object"),
        (b'{"parameters": {}}', "method: expected a string"),
        (b'{"method": 5}', "method: expected a string"),
        (b'{"method": "a.b.C", "parameters": [1]}', "parameters: expected an object"),
        (b'{"method": "a.b.C", "more": "yes"}', "more: expected true or false"),
        (b'{"method": "a.b.C", "more": true, "oneway": true}', "more and oneway exclude each other"),
        (b"[" * 40_000 + b"]" * 40_000, "nested too deeply"),
        (b'{"method": "a.b.C"', "not valid JSON"),
    ],
)
def test_malformed_calls_get_a_typed_one_line_error(frame: bytes, problem: str) -> None:
    with pytest.raises(ApiError) as refused:
        parse_call(frame)
    assert refused.value.name == ApiFault.INVALID_MESSAGE and not refused.value.fatal
    assert problem in str(refused.value) and "\n" not in str(refused.value)


def test_unknown_fields_are_ignored_and_flags_read() -> None:
    call = parse_call(b'{"method":"a.b.C","parameters":{"x":1},"more":true,"extra":[1,2]}')
    assert (call.method, call.parameters, call.more, call.oneway) == ("a.b.C", {"x": 1}, True, False)


def test_upgrade_is_not_implemented() -> None:
    with pytest.raises(ApiError) as refused:
        parse_call(b'{"method":"a.b.C","upgrade":true}')
    assert refused.value.name == ApiFault.METHOD_NOT_IMPLEMENTED


@pytest.mark.parametrize(
    ("method", "error"),
    [
        ("nonsense", ApiFault.METHOD_NOT_FOUND),
        ("io.sessionsupervisor.control.v1.status", ApiFault.METHOD_NOT_FOUND),
        ("io.example.other.v1.Status", ApiFault.INTERFACE_NOT_FOUND),
        ("io.sessionsupervisor.control.v1.Explode", ApiFault.METHOD_NOT_FOUND),
    ],
)
def test_methods_this_socket_does_not_have_get_varlinks_errors(method: str, error: ApiFault) -> None:
    with pytest.raises(ApiError) as refused:
        check_method(method, KNOWN)
    assert refused.value.name == error


def test_a_known_method_passes() -> None:
    check_method(Method.STATUS, KNOWN)


@given(st.binary(max_size=2000))
def test_arbitrary_bytes_only_ever_raise_typed_errors(data: bytes) -> None:
    """Framing and call parsing of any input: messages or ApiError, never another exception."""
    decoder = FrameDecoder(limit=1024)
    errors: list[ApiError] = []
    try:
        frames = decoder.feed(data)
    except ApiError as error:
        frames = []
        errors.append(error)
    assert all(e.fatal and e.name == ApiFault.MESSAGE_TOO_LARGE for e in errors)
    for frame in frames:
        try:
            parse_call(frame)
        except ApiError as error:
            errors.append(error)
    assert all(e.name in set(ApiFault) for e in errors)


CALL_FIELDS = ("method", "parameters", "more", "oneway", "upgrade", "x")


@given(st.dictionaries(st.sampled_from(CALL_FIELDS), st.sampled_from(WRONGLY_TYPED)))
def test_wrongly_typed_calls_only_ever_raise_typed_errors(obj: dict[str, object]) -> None:
    """Each field of a call with a value of any JSON type: a call, or a typed error.

    Drawn from fixed pools (tests/strategies.py): the strategy is cheap, so it never trips the
    too_slow health check on a fresh clone.
    """
    try:
        call = parse_call(msgspec.json.encode(obj))
    except ApiError:
        return
    assert isinstance(call.method, str) and isinstance(call.parameters, dict)


def test_each_field_of_a_call_with_each_wrong_type_is_a_call_or_a_typed_error() -> None:
    """Every field alone with every value of the pool: the deterministic floor under the property above."""
    refused: list[ApiError] = []
    for field in CALL_FIELDS:
        for value in WRONGLY_TYPED:
            try:
                call = parse_call(msgspec.json.encode({"method": "a.b.C", field: value}))
            except ApiError as error:
                refused.append(error)
                continue
            assert isinstance(call.method, str) and isinstance(call.parameters, dict)
    assert refused  # the pool does hold wrong types
    for error in refused:
        assert error.name in {ApiFault.INVALID_MESSAGE, ApiFault.METHOD_NOT_IMPLEMENTED}
        assert "\n" not in str(error)


@given(json_values())
def test_any_subscription_parameters_are_accepted_or_refused_with_a_typed_error(value: object) -> None:
    errors: list[ApiError] = []
    for parameters in ({"filter": value}, {"streams": value}, {"filter": {"states": value}}):
        try:
            parse_subscription(parameters, known_states=STATES)
        except ApiError as error:
            errors.append(error)
    for error in errors:
        assert error.name == ApiFault.INVALID_PARAMETER
        assert str(error.parameters["problem"]).startswith(str(error.parameters["parameter"]))


def test_replies_round_trip() -> None:
    reply = parse_reply(encode_reply({"a": 1}, continues=True)[:-1])
    assert (reply.parameters, reply.continues, reply.error) == ({"a": 1}, True, None)
    error = parse_reply(encode_error(ApiError(ApiFault.NO_SUCH_SESSION, {"sessionId": "x"}))[:-1])
    assert error.error == ApiFault.NO_SUCH_SESSION and error.parameters == {"sessionId": "x"}
    call = parse_call(encode_call(Method.STATUS, {"k": "v"}, more=True)[:-1])
    assert (call.method, call.parameters, call.more) == (Method.STATUS, {"k": "v"}, True)


@pytest.mark.parametrize(
    ("parameters", "problem"),
    [
        ({"filter": {"platforms": ["genesis"]}}, "unknown platform 'genesis'"),
        ({"filter": {"states": ["asleep"]}}, "unknown state 'asleep'"),
        ({"streams": ["everything"]}, "unknown stream 'everything'"),
        ({"filter": {"sessions": "wm-1"}}, "expected a list of strings"),
        ({"filter": {"sessions": [""]}}, "expected strings of 1 to 200 characters"),
        ({"filter": []}, "filter: expected an object"),
    ],
)
def test_bad_subscriptions_name_the_parameter(parameters: dict[str, object], problem: str) -> None:
    with pytest.raises(ApiError) as refused:
        parse_subscription(parameters, known_states=STATES)
    assert problem in str(refused.value)


def test_streams_select_their_events_and_all_selects_everything() -> None:
    sub = parse_subscription({"streams": ["retries", "circuits"]}, known_states=STATES)
    assert sub.wants_event("RETRY_ATTEMPT") and sub.wants_event("CIRCUIT_BREAKER_OPEN")
    assert not sub.wants_event("SDK_ERROR_CLASSIFIED")
    everything = parse_subscription({"streams": ["all"]}, known_states=STATES)
    assert everything.wants_event("ANY_FUTURE_EVENT")


def test_a_state_filter_matches_entering_and_leaving() -> None:
    sub = parse_subscription({"filter": {"states": ["terminated"]}}, known_states=STATES)
    assert sub.wants_state("terminated", "active")
    assert sub.wants_state("connecting", "terminated")
    assert not sub.wants_state("active", "connecting")


def test_the_client_sends_a_call_up_to_the_limit_and_refuses_one_byte_more() -> None:
    """What the daemon reads is what the client sends: a call past 64 KiB or not UTF-8 is CallNotSent."""
    bare = len(encode_call(Method.SHOW_SESSION, {"sessionId": ""})) - 1
    at_limit = {"sessionId": "x" * (MAX_MESSAGE_BYTES - bare)}
    assert len(encode(Method.SHOW_SESSION, at_limit)) == MAX_MESSAGE_BYTES + 1
    with pytest.raises(CallNotSent, match=f"{MAX_MESSAGE_BYTES + 1} bytes; the daemon reads at most"):
        encode(Method.SHOW_SESSION, {"sessionId": "x" * (MAX_MESSAGE_BYTES - bare + 1)})
    with pytest.raises(CallNotSent, match=re.escape("not valid UTF-8 text (at position 4)")):
        encode(Method.SHOW_SESSION, {"sessionId": "wm-\udcff"})
