"""Method signatures parsed from the interface descriptions, and parameters checked against them."""

from __future__ import annotations

from typing import Any

import pytest

from supervisor.api.idl import DESCRIPTIONS
from supervisor.api.protocol import CONTROL, SERVICE, STATE, ApiFault, Method
from supervisor.api.signatures import (
    INT_MAX,
    INT_MIN,
    SIGNATURES,
    Kind,
    check_parameters,
    parse_interface,
)
from supervisor.errors import ApiError

EXAMPLE = """\
# a comment
interface org.example.test

type Pair (first: int, second: ?string)

# a method
method Do(
  flag: bool,
  count: int,
  ratio: ?float,
  name: string,
  extra: ?object,
  mode: (fast, slow),
  tags: ?[]string,
  labels: [string]string,
  pair: ?Pair,
  inline: ?(a: int)
) -> (done: bool)
method Nothing() -> ()
error Failed (why: string)
"""


def test_a_description_parses_into_each_methods_parameters() -> None:
    parsed = parse_interface(EXAMPLE)
    assert parsed.name == "org.example.test"
    assert set(parsed.methods) == {"Do", "Nothing"} and parsed.methods["Nothing"] == ()
    kinds = {f.name: f.type.kind for f in parsed.methods["Do"]}
    assert kinds == {
        "flag": Kind.BOOL,
        "count": Kind.INT,
        "ratio": Kind.NULLABLE,
        "name": Kind.STRING,
        "extra": Kind.NULLABLE,
        "mode": Kind.ENUM,
        "tags": Kind.NULLABLE,
        "labels": Kind.MAP,
        "pair": Kind.NULLABLE,
        "inline": Kind.NULLABLE,
    }
    pair = parsed.types["Pair"]
    assert [(f.name, f.type.kind) for f in pair.fields] == [("first", Kind.INT), ("second", Kind.NULLABLE)]


@pytest.mark.parametrize(
    "broken", ["", "interface", "interface a.b\nmethod X(a: ) -> ()", "interface a.b\nfoo X"]
)
def test_a_broken_description_is_a_value_error(broken: str) -> None:
    with pytest.raises(ValueError, match=r"expected|unknown"):
        parse_interface(broken)


def test_every_method_of_the_daemon_has_a_signature_and_every_signature_a_method() -> None:
    """A verb added to Method without a description (or the reverse) fails here."""
    assert set(SIGNATURES) == {m.value for m in Method}
    for interface in (SERVICE, STATE, CONTROL):
        assert interface in DESCRIPTIONS


def test_the_daemons_descriptions_say_what_the_verbs_take() -> None:
    def kinds(method: Method) -> dict[str, Kind]:
        return {f.name: f.type.kind for f in SIGNATURES[method]}

    assert kinds(Method.RESOLVE_MISMATCH) == {"mismatchId": Kind.INT, "resolution": Kind.STRING}
    # a session's update, or a conversation's by id with no session: exactly one of the two ids
    assert kinds(Method.SET_ATTRIBUTES) == {
        "sessionId": Kind.NULLABLE,
        "conversationId": Kind.NULLABLE,
        "platform": Kind.NULLABLE,
        "attributes": Kind.MAP,
        # the tenant whose credential writes a conversation given by id
        "tenant": Kind.NULLABLE,
    }
    assert kinds(Method.SUBSCRIBE) == {
        "filter": Kind.NULLABLE,
        "streams": Kind.NULLABLE,
        "since": Kind.NULLABLE,
    }
    assert kinds(Method.STATUS) == {}


@pytest.mark.parametrize(
    ("method", "parameters", "parameter", "problem"),
    [
        (
            Method.RESOLVE_MISMATCH,
            {"mismatchId": 1, "resolution": ["resend"]},
            "resolution",
            "expected a string",
        ),
        (
            Method.RESOLVE_MISMATCH,
            {"mismatchId": 1, "resolution": {"a": 1}},
            "resolution",
            "expected a string",
        ),
        (Method.RESOLVE_MISMATCH, {"mismatchId": 2**63, "resolution": "resend"}, "mismatchId", "64-bit"),
        (
            Method.RESOLVE_MISMATCH,
            {"mismatchId": INT_MIN - 1, "resolution": "resend"},
            "mismatchId",
            "64-bit",
        ),
        (Method.RESOLVE_MISMATCH, {"mismatchId": True, "resolution": "resend"}, "mismatchId", "integer"),
        (Method.RESOLVE_MISMATCH, {"mismatchId": 1.0, "resolution": "resend"}, "mismatchId", "integer"),
        (Method.RESOLVE_MISMATCH, {"resolution": "resend"}, "mismatchId", "mismatchId: required"),
        (
            Method.SET_ATTRIBUTES,
            {"sessionId": "a", "attributes": {"k": 1}},
            "attributes",
            "attributes.k: expected a string",
        ),
        (
            Method.SET_ATTRIBUTES,
            {"sessionId": "a", "attributes": ["k"]},
            "attributes",
            "an object of strings",
        ),
        (Method.LIST_SESSIONS, {"states": ["active", 3]}, "states", "states[1]: expected a string"),
        (Method.LIST_MISMATCHES, {"includeResolved": "yes"}, "includeResolved", "true or false"),
        (
            Method.SUBSCRIBE,
            {"filter": {"platforms": "genesys"}},
            "filter",
            "filter.platforms: expected a list",
        ),
        (Method.SUBSCRIBE, {"filter": 3}, "filter", "filter: expected an object"),
        (Method.GET_INTERFACE_DESCRIPTION, {"interface": None}, "interface", "required"),
    ],
)
def test_a_wrong_type_is_an_invalid_parameter_naming_it(
    method: Method, parameters: dict[str, Any], parameter: str, problem: str
) -> None:
    with pytest.raises(ApiError) as refused:
        check_parameters(method, parameters)
    assert refused.value.name == ApiFault.INVALID_PARAMETER
    assert refused.value.parameters["parameter"] == parameter
    assert problem in str(refused.value.parameters["problem"])
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize(
    ("method", "parameters"),
    [
        (Method.RESOLVE_MISMATCH, {"mismatchId": INT_MAX, "resolution": "whatever"}),
        (Method.SET_ATTRIBUTES, {"sessionId": "", "attributes": {}, "unknown": [1]}),
        (Method.LIST_SESSIONS, {"states": None}),
        (Method.LIST_SESSIONS, {}),
        (Method.SUBSCRIBE, {"filter": {"states": ["x"], "other": 1}}),
        (Method.STATUS, {"anything": "ignored"}),
        ("io.example.unknown.v1.Method", {"x": 1}),
    ],
)
def test_the_right_types_pass_whatever_their_values(method: str, parameters: dict[str, Any]) -> None:
    """Values are the verb's to judge (an empty id, an unknown resolution); unknown fields are ignored."""
    check_parameters(method, parameters)


def test_a_float_parameter_takes_any_finite_number() -> None:
    declared = {"M": parse_interface("interface a.b\nmethod M(x: float) -> ()").methods["M"]}

    def passes(value: object) -> bool:
        try:
            check_parameters("M", {"x": value}, declared)
        except ApiError:
            return False
        return True

    assert [passes(v) for v in (1, 1.5, -0.0)] == [True, True, True]
    assert [passes(v) for v in (True, "1", float("inf"), None)] == [False, False, False, False]
