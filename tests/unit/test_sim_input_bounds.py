"""What the simulators parse, property-tested: bodies, frames, fault values, configs."""

from __future__ import annotations

import contextlib
import json
import math
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from supervisor.errors import SimulatorError
from supervisor.sim.bodies import MAX_FORM_FIELDS, MAX_JSON_DEPTH, MalformedBody, parse_form, parse_json
from supervisor.sim.cxone import CxoneSimConfig
from supervisor.sim.faults import FaultKind, decode_fault
from supervisor.sim.genesys.config import GenesysSimConfig
from tests.strategies import text

non_finite = st.sampled_from([math.nan, math.inf, -math.inf])
absurd = st.sampled_from([1e300, 1e20, 10**12, 2**63, 10**30])


@given(text(max_size=3 * MAX_JSON_DEPTH, alphabet="ao"))
def test_parse_json_refuses_exactly_past_the_nesting_cap(shape: str) -> None:
    text = "".join("[" if c == "a" else '{"k":' for c in shape) + "0"
    text += "".join("]" if c == "a" else "}" for c in reversed(shape))
    if len(shape) > MAX_JSON_DEPTH:
        with pytest.raises(MalformedBody, match=f"nested deeper than {MAX_JSON_DEPTH} levels"):
            parse_json(text)
    else:
        assert parse_json(text) == json.loads(text)


@given(st.sampled_from(["NaN", "Infinity", "-Infinity"]))
def test_parse_json_is_strict_unless_asked(constant: str) -> None:
    with pytest.raises(MalformedBody, match="is not JSON"):
        parse_json('{"x": ' + constant + "}")
    value = parse_json('{"x": ' + constant + "}", constants=True)["x"]
    assert not math.isfinite(value)


@given(st.binary(max_size=200))
def test_parse_json_and_parse_form_never_raise_anything_else(data: bytes) -> None:
    for parse in (parse_json, parse_form):
        with contextlib.suppress(MalformedBody):
            parse(data)


def test_parse_form_keeps_the_first_value_and_bounds_the_fields() -> None:
    assert parse_form(b"a=1&a=2&b=%C3%A9") == {"a": "1", "b": "é"}
    with pytest.raises(MalformedBody, match="not UTF-8"):
        parse_form(b"a=%FF")
    with pytest.raises(MalformedBody, match=f"more than {MAX_FORM_FIELDS} form fields"):
        parse_form(b"&".join(b"f%d=1" % i for i in range(MAX_FORM_FIELDS + 1)))


NUMERIC_FIELDS: list[tuple[dict[str, Any], str]] = [
    ({"kind": "drop", "at": 0}, "at"),
    ({"kind": "drop", "duration_s": 1}, "duration_s"),
    ({"kind": "drop", "share": 0.5}, "share"),
    ({"kind": "latency", "params": {"latency_ms": 1}}, "params.latency_ms"),
    ({"kind": "admission_limit", "params": {"rate_per_s": 1}}, "params.rate_per_s"),
    ({"kind": "socket_closing", "params": {"lead_s": 1}}, "params.lead_s"),
    ({"kind": "rate_limit_storm", "params": {"retry_after": 1}}, "params.retry_after"),
    ({"kind": "silent_drop_attributes", "params": {"after": 1}}, "params.after"),
    ({"kind": "drop", "count": 1}, "count"),
]


def with_value(fault: dict[str, Any], field: str, value: object) -> dict[str, Any]:
    out = json.loads(json.dumps(fault))
    if field.startswith("params."):
        out["params"][field.removeprefix("params.")] = value
    else:
        out[field] = value
    return out


@given(st.sampled_from(NUMERIC_FIELDS), non_finite | absurd)
def test_every_fault_number_refuses_non_finite_and_absurd_values_by_name(
    case: tuple[dict[str, Any], str], value: float
) -> None:
    fault, field = case
    assert decode_fault(with_value(fault, field, 1 if field != "share" else 0.5)).kind in FaultKind
    with pytest.raises(SimulatorError) as info:
        decode_fault(with_value(fault, field, value))
    message = str(info.value)
    assert message.startswith(f"fault.{field}: ")
    assert any(ch.isdigit() for ch in message.partition(": ")[2])  # it says the bounds


@given(
    st.sampled_from(
        [
            (GenesysSimConfig, f)
            for f in ("rate_window_s", "heartbeat_interval_s", "channel_ttl_s", "read_timeout_s")
        ]
        + [(CxoneSimConfig, f) for f in ("inactivity_timeout_s", "read_timeout_s")]
    ),
    non_finite | absurd,
)
def test_simulator_configs_refuse_non_finite_and_absurd_numbers(
    case: tuple[type[msgspec.Struct], str], value: float
) -> None:
    cls, field = case
    with pytest.raises(msgspec.ValidationError, match=field):
        msgspec.convert({field: value}, cls)
