"""How taxonomy v2 routes what a Genesys notifications channel says (docs/runtime.md, "Notifications rollover"), and that a
pinned v1 routes it as v1 always did.

v2: a channel that ends ({"result":"404"}, v2.system.socket_closing, v2.system.token_revoked,
v2.system.no_longer_subscribed) or whose subscriptions changed is a TRANSIENT failure of the
*channel* (operation scope, no reconnect, no retry of the call): the session stays active and the
transport rolls over to a new channel. v1: the 404 ended the session, socket_closing reconnected.
Wire shapes restated from PY269 (``SystemMessageSystemMessage``) and GN3P (``{"result":"404"}``).
"""

from __future__ import annotations

from typing import Any

import pytest

from machines.routing import Route, route
from supervisor.clock import FakeClock
from supervisor.taxonomy import Classifier, Scope, TaxonomyClass, load_taxonomy

V1 = Classifier(load_taxonomy("v1"), FakeClock())
V2 = Classifier(load_taxonomy("v2"), FakeClock())


def frame(body: dict[str, Any]) -> dict[str, Any]:
    return {"platform": "genesys", "channel": "notifications", "body": body}


def system(kind: str, topic: str | None = None, reason: str | None = None) -> dict[str, Any]:
    """A v2.system message: PY269 SystemMessageSystemMessage in the eventBody."""
    body: dict[str, Any] = {"channelId": "streaming-1-abc", "systemTopicType": kind, "message": "m"}
    if reason is not None:
        body["reason"] = reason
    return frame(
        {
            "topicName": topic or f"v2.system.{kind}",
            "version": "2",
            "eventBody": body,
            "metadata": {"CorrelationId": "c"},
        }
    )


def rest_404(path: str, method: str = "PUT") -> dict[str, Any]:
    return {
        "platform": "genesys",
        "channel": "rest",
        "method": method,
        "endpoint": path,
        "status": 404,
        "body": {"message": "The requested resource was not found.", "code": "not.found", "status": 404},
    }


GONE = frame({"result": "404", "message": "Channel was removed: over the channel limit."})
CLOSING = frame(
    {"topicName": "v2.system.socket_closing", "version": "2", "eventBody": {"message": "closing"}}
)
SUBS = "/api/v2/notifications/channels/streaming-1-abc/subscriptions"

V2_ROLLOVER = [
    ("result 404", GONE, "CHANNEL_LOST"),
    ("socket_closing", CLOSING, "SOCKET_CLOSING"),
    ("token_revoked", system("token_revoked", reason="user_tokens_revoked"), "CHANNEL_TOKEN_REVOKED"),
    (
        "no_longer_subscribed",
        system("no_longer_subscribed", reason="another_channel_subscribed"),
        "SUBSCRIPTION_DISPLACED",
    ),
    (
        "no_longer_subscribed, topic with a suffix",
        system("no_longer_subscribed", topic="v2.system.no_longer_subscribed.streaming-1-abc"),
        "SUBSCRIPTION_DISPLACED",
    ),
    ("subscription_changed", system("subscription_changed"), "SUBSCRIPTION_CHANGED"),
    ("PUT subscriptions 404", rest_404(SUBS), "CHANNEL_LOST"),
    ("GET subscriptions 404", rest_404(SUBS, "GET"), "CHANNEL_LOST"),
]


@pytest.mark.parametrize(("envelope", "code"), [r[1:] for r in V2_ROLLOVER], ids=[r[0] for r in V2_ROLLOVER])
def test_v2_a_channel_that_ends_is_a_transient_failure_of_the_channel_alone(
    envelope: dict[str, Any], code: str
) -> None:
    event = V2.classify_object(envelope)
    assert (event.code, event.taxonomy_class, event.scope) == (code, TaxonomyClass.TRANSIENT, Scope.OPERATION)
    # the session goes on (the transport rolls over), and the call itself is not retried
    assert not event.reconnect and not event.fail_fast and not event.retryable
    assert event.policy.name == "rollover" and event.max_retry_budget == 0
    assert route(event) is Route.OPERATION


def test_v2_a_404_elsewhere_and_a_result_400_keep_their_v1_codes() -> None:
    elsewhere = V2.classify_object(rest_404("/api/v2/conversations/c-1/participants", "GET"))
    assert elsewhere.code == "RESOURCE_NOT_FOUND"
    refused = V2.classify_object(frame({"result": "400", "status": "error", "message": "Bad topic"}))
    assert (refused.code, refused.taxonomy_class) == ("BAD_REQUEST", TaxonomyClass.PERMANENT)


def test_a_pinned_v1_routes_the_channel_as_v1_did() -> None:
    gone = V1.classify_object(GONE)
    assert (gone.code, gone.taxonomy_class, gone.fail_fast) == (
        "CHANNEL_LOST",
        TaxonomyClass.STATE_CORRUPTING,
        True,
    )
    closing = V1.classify_object(CLOSING)
    assert (closing.code, closing.scope, closing.reconnect) == ("SOCKET_CLOSING", Scope.SESSION, True)
    assert route(closing) is Route.DROP
    for kind in ("token_revoked", "no_longer_subscribed", "subscription_changed"):
        unknown = V1.classify_object(system(kind))
        assert (unknown.code, unknown.taxonomy_class) == ("UNKNOWN_ERROR", TaxonomyClass.PERMANENT)
        assert unknown.raw_code == f"v2.system.{kind}"
    assert V1.classify_object(rest_404(SUBS)).code == "RESOURCE_NOT_FOUND"


def test_a_system_topic_without_a_type_is_named_by_its_topic() -> None:
    untyped = frame({"topicName": "v2.system.token_revoked", "eventBody": {"message": "m"}})
    assert V2.classify_object(untyped).code == "CHANNEL_TOKEN_REVOKED"
    odd = system("not a type!", topic="v2.system.subscription_changed")
    assert V2.classify_object(odd).raw_code == "v2.system.subscription_changed"
