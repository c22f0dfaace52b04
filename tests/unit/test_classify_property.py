"""classify never raises on arbitrary JSON: it classifies, or names what is wrong (EnvelopeError)."""

from __future__ import annotations

import contextlib
import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from supervisor.clock import FakeClock
from supervisor.errors import EnvelopeError
from supervisor.taxonomy import Channel, Classifier, Platform, SdkErrorEvent, TaxonomyClass, load_taxonomy
from tests import strategies
from tests.strategies import text

CLASSIFIER = Classifier(load_taxonomy("v1"), FakeClock())

json_values = strategies.json_values(max_text=30)

# envelopes that are valid in shape but arbitrary in content
envelopes = st.fixed_dictionaries(
    {
        "platform": st.sampled_from([p.value for p in Platform]),
        "channel": st.sampled_from([c.value for c in Channel]),
    },
    optional={
        "method": st.sampled_from(["GET", "POST", "PATCH", "REGISTER", "onMessage", "CONNECT", "x"])
        | text(max_size=8),
        "endpoint": st.sampled_from(["/oauth/token", "/api/v2/conversations/x", "POST /a?b=c", "http://h/p"])
        | text(max_size=20),
        "status": st.integers(0, 9999),
        "headers": st.dictionaries(
            st.sampled_from(["Retry-After", "retry-after", "X"]), json_values, max_size=3
        ),
        "body": json_values | st.builds(json.dumps, json_values),
        "closeCode": st.integers(0, 65535),
        "exception": st.sampled_from(["httpx.ReadTimeout", "socket.gaierror", "builtins.X", "a.b.c"])
        | text(max_size=20),
        "context": st.dictionaries(text(max_size=10), json_values, max_size=4),
        "timestamp": st.sampled_from(["2024-05-14T09:32:11.004Z", "nope"]) | text(max_size=25),
    },
)


def _check(event: SdkErrorEvent) -> None:
    out = event.as_json()
    json.dumps(out)  # always serialisable
    assert out["event"] == "SDK_ERROR_CLASSIFIED"
    assert out["taxonomyClass"] in {c.value for c in TaxonomyClass}
    assert out["code"] in CLASSIFIER.taxonomy.codes
    assert out["retryable"] == (
        event.taxonomy_class is TaxonomyClass.TRANSIENT and event.max_retry_budget > 0
    )


@given(json_values)
def test_arbitrary_json_never_raises(value: Any) -> None:
    outcome: SdkErrorEvent | EnvelopeError
    try:
        outcome = CLASSIFIER.classify_json(json.dumps(value))
    except EnvelopeError as exc:
        outcome = exc
    if isinstance(outcome, EnvelopeError):
        message = str(outcome)
        assert message.startswith(("not a valid envelope", "not JSON"))
        assert "\n" not in message
    else:
        _check(outcome)


@given(envelopes)
def test_arbitrary_envelopes_always_classify(envelope: dict[str, Any]) -> None:
    try:
        event = CLASSIFIER.classify_object(envelope)
    except EnvelopeError:
        # only out-of-range numbers and over-long strings may be refused, by name
        return
    _check(event)


@given(st.binary(max_size=60))
def test_arbitrary_bytes_never_raise(data: bytes) -> None:
    with contextlib.suppress(EnvelopeError):
        _check(CLASSIFIER.classify_json(data))
