"""Taxonomy v2's CXone routing (docs/taxonomy.md, "CXone in taxonomy v2"): the OIDC token endpoint, discovery, the resync.

v2 only: v1 stays byte-identical and keeps its routing, so a configuration that pins v1 still ends a
session on a replayed AgentSessionStart (SESSION_ID_MISMATCH), as v1 documented.
"""

from __future__ import annotations

import pytest

from machines.routing import Route, route
from supervisor.taxonomy import Channel, Classifier, Platform, RawError, TaxonomyClass, load_taxonomy

V1 = Classifier(load_taxonomy("v1"))
V2 = Classifier(load_taxonomy("v2"))


def _raw(method: str, endpoint: str, status: int, body: object = None) -> RawError:
    return RawError(
        platform=Platform.CXONE,
        channel=Channel.REST,
        method=method,
        endpoint=endpoint,
        status=status,
        body=body,
    )


def test_a_replay_for_the_sessions_own_agent_is_session_resynced_in_v2() -> None:
    event = V2.session_resynced(
        "s-1", "s-9", platform=Platform.CXONE, channel=Channel.AGENT_SESSION, endpoint="GET /x"
    )
    assert event.code == "SESSION_RESYNCED" and event.taxonomy_class is TaxonomyClass.TRANSIENT
    assert not event.retryable and event.max_retry_budget == 0  # published, never retried
    assert not event.fail_fast and not event.reconnect
    # the session machine leaves the session alone: the transport took the new id
    assert route(event) is Route.OPERATION
    assert event.details is not None and "s-1" in event.details and "s-9" in event.details


def test_a_pinned_v1_still_ends_the_session_on_a_replay() -> None:
    """v1 has no SESSION_RESYNCED: the same replay is routed as v1 documents it."""
    assert "SESSION_RESYNCED" not in V1.taxonomy.codes
    event = V1.session_resynced(
        "s-1", "s-9", platform=Platform.CXONE, channel=Channel.AGENT_SESSION, endpoint="GET /x"
    )
    assert event.code == "SESSION_ID_MISMATCH" and event.fail_fast
    assert event.taxonomy_version == "v1"


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (
            {"error": "invalid_grant", "error_description": "Invalid username or password"},
            "TOKEN_REFRESH_FAILED",
        ),
        ({"error": "unsupported_grant_type"}, "TOKEN_REFRESH_FAILED"),
    ],
)
def test_the_oidc_token_endpoint_is_the_token_operation(body: object, code: str) -> None:
    event = V2.classify(_raw("POST", "https://cxone.niceincontact.com/auth/token", 400, body))
    assert event.code == code and event.fail_fast and event.revokes_credential


def test_bad_client_credentials_at_the_oidc_token_endpoint() -> None:
    raw = _raw("POST", "/auth/token", 401, {"error": "invalid_client"})
    assert V2.classify(raw).code == "AUTH_CLIENT_INVALID"


@pytest.mark.parametrize("path", ["/.well-known/cxone-configuration", "/.well-known/openid-configuration"])
def test_a_refused_discovery_is_transient_with_the_server_error_policy(path: str) -> None:
    event = V2.classify(_raw("GET", path, 404, {"error": "not_found"}))
    assert event.code == "API_DISCOVERY_FAILED" and event.taxonomy_class is TaxonomyClass.TRANSIENT
    assert event.policy.name == "server_error" and event.retryable
    # 5xx and throttles keep their own codes
    assert V2.classify(_raw("GET", path, 503)).code == "SERVER_ERROR"
    assert V2.classify(_raw("GET", path, 429)).code == "RATE_LIMITED"
    # v1 knows no discovery: a 404 there is any 404
    assert V1.classify(_raw("GET", path, 404)).code == "RESOURCE_NOT_FOUND"
