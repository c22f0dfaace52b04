"""Taxonomy v2's Genesys response checks and Web Messaging codes (docs/platforms.md), against v1.

v2 requires of a response only what the vendor's own model requires (docs/platforms.md): a
conversation read carries no top-level ``state`` (PY269 ``Conversation``: "When reading
conversations, this field will never have a value present"), a resumed SessionResponse may be
``{"connected":true,"newSession":false}`` (GMT ``Response.kt``). v1 stays as it was documented.
"""

from __future__ import annotations

from typing import Any

import pytest

from machines.routing import Route, route
from supervisor.taxonomy import Channel, Classifier, Platform, SdkErrorEvent, load_taxonomy

V1 = Classifier(load_taxonomy("v1"))
V2 = Classifier(load_taxonomy("v2"))
CONVERSATION = "genesys.rest.Conversation"
SESSION_RESPONSE = "genesys.webmessaging.SessionResponse"
CID = "9b1c1e3e-51a8-4b8f-8b7b-1f0b7c0d6a11"
# PY269 Conversation as a read answers it: no top-level state; the participants carry their
# communications (Participant.messages[].state)
READ: dict[str, Any] = {
    "id": CID,
    "startTime": "2026-01-05T10:00:00.000Z",
    "participants": [
        {"id": "p-1", "purpose": "customer", "attributes": {}, "messages": [{"state": "connected"}]},
        {"id": "p-2", "purpose": "agent", "userId": "u-1", "messages": [{"state": "connected"}]},
    ],
    "selfUri": f"/api/v2/conversations/{CID}",
}


def read_check(classifier: Classifier, body: dict[str, Any]) -> SdkErrorEvent | None:
    return classifier.validate_response(
        body,
        platform=Platform.GENESYS,
        channel=Channel.REST,
        kind=CONVERSATION,
        expected_conversation_id=CID,
    )


def session_check(classifier: Classifier, body: dict[str, Any]) -> SdkErrorEvent | None:
    return classifier.validate_response(
        body, platform=Platform.GENESYS, channel=Channel.WEBMESSAGING, kind=SESSION_RESPONSE
    )


# -- point 5: a conversation read ----------------------------------------------------------------------


def test_v2_lets_a_conversation_read_without_state_through() -> None:
    assert "state" not in READ
    assert read_check(V2, READ) is None


def test_v1_still_requires_state_as_it_documented() -> None:
    event = read_check(V1, READ)
    assert event is not None and event.code == "INCOMPLETE_RESPONSE" and "state" in str(event.details)


def test_v2_read_without_participants_is_incomplete() -> None:
    body = {k: v for k, v in READ.items() if k != "participants"}
    event = read_check(V2, body)
    assert event is not None and event.code == "INCOMPLETE_RESPONSE"
    assert event.details == "Missing required fields: participants"


def test_v2_keeps_the_drift_check_on_id() -> None:
    event = read_check(V2, {**READ, "id": "5d9f3f4e-0000-4000-8000-000000000000"})
    assert event is not None and event.code == "CONVERSATION_STATE_DRIFT" and event.fail_fast


@pytest.mark.parametrize("absent", [None, ""])
def test_v2_read_that_names_no_conversation_is_not_drift(absent: str | None) -> None:
    """PY269 marks Conversation.id optional: a read without it contradicts nothing [I]."""
    body = {k: v for k, v in READ.items() if k != "id"}
    if absent is not None:
        body["id"] = absent
    assert read_check(V2, body) is None
    # v1 lists id in required: the same body is incomplete there, never silently accepted
    v1 = read_check(V1, {**body, "state": "connected"})
    assert v1 is not None and v1.code == "INCOMPLETE_RESPONSE"


# -- point 6: the SessionResponse ------------------------------------------------------------------------


def test_v2_accepts_the_vendor_fixture_of_a_resumed_session() -> None:
    # GMT androidUnitTest util/Response.kt configureSuccessWithNewSessionFalse, restated
    assert session_check(V2, {"connected": True, "newSession": False}) is None
    assert session_check(V2, {"connected": True}) is None


def test_v2_still_requires_connected() -> None:
    event = session_check(V2, {"newSession": False, "readOnly": False})
    assert event is not None and event.code == "INCOMPLETE_RESPONSE"
    assert event.details == "Missing required fields: connected"


def test_v1_requires_its_three_fields_as_documented() -> None:
    event = session_check(V1, {"connected": True, "newSession": False})
    assert event is not None and "readOnly" in str(event.details)


def named(classifier: Classifier, code: str) -> SdkErrorEvent:
    return classifier.named(
        code,
        platform=Platform.GENESYS,
        channel=Channel.WEBMESSAGING,
        details="x",
        endpoint="configureSession",
    )


def test_not_connected_is_transient_and_reconnects() -> None:
    event = named(V2, "NOT_CONNECTED")
    assert event.taxonomy_class == "TRANSIENT" and event.reconnect and not event.fail_fast
    assert route(event) is Route.DROP


def test_conversation_ended_ends_the_session_cleanly() -> None:
    event = named(V2, "CONVERSATION_ENDED")
    assert event.graceful and event.taxonomy_class == "NONE" and not event.fail_fast
    assert route(event) is Route.GRACEFUL


def test_v1_has_neither_code_and_still_loads() -> None:
    """The transport names these codes only when the active version has them (a pinned v1 keeps
    its documented behaviour: it never judged ``connected``'s value)."""
    codes = load_taxonomy("v1").codes
    assert "NOT_CONNECTED" not in codes and "CONVERSATION_ENDED" not in codes
