"""Every row of the fault matrix (reference/platforms.md) and every fail-fast trigger, from wire shapes."""

from __future__ import annotations

from typing import Any

import pytest

from supervisor.clock import FakeClock
from supervisor.taxonomy import (
    Channel,
    Classifier,
    Platform,
    Scope,
    TaxonomyClass,
    Trigger,
    envelope_from_object,
    load_taxonomy,
)

T, P, S, N = (
    TaxonomyClass.TRANSIENT,
    TaxonomyClass.PERMANENT,
    TaxonomyClass.STATE_CORRUPTING,
    TaxonomyClass.NONE,
)
NOW = "2024-05-14T09:32:11.000Z"
MSG_ENDPOINT = "/api/v2/conversations/messages/9b5f/communications/c-1/messages"
POLL = "/inContactAPI/services/v23.0/agent-sessions/s-1/get-next-event?timeout=30"


def gen_error(status: int, code: str, message: str = "m") -> dict[str, Any]:
    """A Genesys ErrorBody (docs/platforms.md, "Errors, limits and ids")."""
    return {"message": message, "code": code, "status": status, "contextId": "c", "details": [], "errors": []}


def wm(cls: str, code: int, body: Any) -> dict[str, Any]:
    """A Web Messaging server envelope (docs/platforms.md, "Genesys Cloud Web Messaging")."""
    return {"type": "response", "class": cls, "code": code, "body": body}


# (id, envelope, code, class, trigger, expected retryAfterMs or None)
MATRIX: list[tuple[str, dict[str, Any], str, TaxonomyClass, Trigger | None, int | None]] = [
    # 429 with Retry-After as seconds, as an HTTP-date, absent; and Web Messaging 4029
    (
        "429 retry-after seconds",
        {
            "platform": "genesys",
            "channel": "rest",
            "status": 429,
            "headers": {"Retry-After": "7"},
            "body": gen_error(429, "too.many.requests"),
        },
        "RATE_LIMITED",
        T,
        None,
        7000,
    ),
    (
        "429 retry-after http-date",
        {
            "platform": "genesys",
            "channel": "rest",
            "status": 429,
            "headers": {"retry-after": "Tue, 14 May 2024 09:32:20 GMT"},
            "timestamp": NOW,
            "body": gen_error(429, "too.many.requests.retry.after"),
        },
        "RATE_LIMITED",
        T,
        None,
        9000,
    ),
    (
        "429 retry-after absent (cxone, empty body)",
        {"platform": "cxone", "channel": "rest", "status": 429, "body": ""},
        "RATE_LIMITED",
        T,
        None,
        None,
    ),
    (
        "429 retry-after garbage ignored",
        {"platform": "cxone", "channel": "rest", "status": 429, "headers": {"Retry-After": "soon"}},
        "RATE_LIMITED",
        T,
        None,
        None,
    ),
    (
        "wm 4029 TooManyRequestsErrorMessage",
        {
            "platform": "genesys",
            "channel": "webmessaging",
            "method": "onMessage",
            "body": wm(
                "TooManyRequestsErrorMessage",
                429,
                {"retryAfter": 3, "errorCode": 4029, "errorMessage": "rate"},
            ),
        },
        "RATE_LIMITED",
        T,
        None,
        3000,
    ),
    (
        "wm string 4029",
        {"platform": "genesys", "channel": "webmessaging", "body": wm("string", 4029, "rate")},
        "RATE_LIMITED",
        T,
        None,
        None,
    ),
    # 503 +/- Retry-After, 502
    (
        "503 service.unavailable + retry-after",
        {
            "platform": "genesys",
            "channel": "rest",
            "status": 503,
            "headers": {"Retry-After": "4"},
            "body": gen_error(503, "service.unavailable"),
        },
        "SERVER_ERROR",
        T,
        None,
        4000,
    ),
    ("503 bare", {"platform": "cxone", "channel": "rest", "status": 503}, "SERVER_ERROR", T, None, None),
    ("502", {"platform": "genesys", "channel": "rest", "status": 502}, "SERVER_ERROR", T, None, None),
    (
        "500 internal",
        {
            "platform": "genesys",
            "channel": "rest",
            "status": 500,
            "body": gen_error(500, "internal.server.error"),
        },
        "SERVER_ERROR",
        T,
        None,
        None,
    ),
    (
        "wm 5000",
        {"platform": "genesys", "channel": "webmessaging", "body": wm("string", 5000, "Request failed.")},
        "SERVER_ERROR",
        T,
        None,
        None,
    ),
    # 504: transient; a non-idempotent create must reconcile first
    (
        "504 request.timeout GET",
        {
            "platform": "genesys",
            "channel": "rest",
            "status": 504,
            "method": "GET",
            "endpoint": "/api/v2/conversations/abc",
            "body": gen_error(504, "request.timeout"),
        },
        "SERVER_ERROR",
        T,
        None,
        None,
    ),
    (
        "504 on message create",
        {"platform": "genesys", "channel": "rest", "status": 504, "method": "POST", "endpoint": MSG_ENDPOINT},
        "OUTCOME_UNKNOWN",
        T,
        None,
        None,
    ),
    # WebSocket drops and close codes
    (
        "abrupt drop 1006",
        {
            "platform": "genesys",
            "channel": "webmessaging",
            "closeCode": 1006,
            "exception": "websockets.exceptions.ConnectionClosedError",
        },
        "ABNORMAL_CLOSURE",
        T,
        None,
        None,
    ),
    (
        "close 1001",
        {"platform": "genesys", "channel": "notifications", "closeCode": 1001},
        "GOING_AWAY",
        T,
        None,
        None,
    ),
    (
        "close 1011",
        {"platform": "genesys", "channel": "webmessaging", "closeCode": 1011},
        "WS_INTERNAL_ERROR",
        T,
        None,
        None,
    ),
    (
        "close 1012",
        {"platform": "genesys", "channel": "webmessaging", "closeCode": 1012},
        "SERVICE_RESTART",
        T,
        None,
        None,
    ),
    (
        "close 1013",
        {"platform": "genesys", "channel": "webmessaging", "closeCode": 1013},
        "TRY_AGAIN_LATER",
        T,
        None,
        None,
    ),
    (
        "close 1000 graceful",
        {"platform": "genesys", "channel": "webmessaging", "closeCode": 1000},
        "GRACEFUL_CLOSE",
        N,
        None,
        None,
    ),
    (
        "close 1002",
        {"platform": "genesys", "channel": "webmessaging", "closeCode": 1002},
        "WS_PROTOCOL_ERROR",
        P,
        None,
        None,
    ),
    (
        "close 1003",
        {"platform": "genesys", "channel": "webmessaging", "closeCode": 1003},
        "WS_PROTOCOL_ERROR",
        P,
        None,
        None,
    ),
    (
        "close 1007",
        {"platform": "genesys", "channel": "webmessaging", "closeCode": 1007},
        "WS_PROTOCOL_ERROR",
        P,
        None,
        None,
    ),
    (
        "close 1008",
        {"platform": "genesys", "channel": "webmessaging", "closeCode": 1008},
        "POLICY_VIOLATION",
        P,
        None,
        None,
    ),
    (
        "close 1009",
        {"platform": "genesys", "channel": "webmessaging", "closeCode": 1009},
        "MESSAGE_TOO_BIG",
        P,
        None,
        None,
    ),
    (
        "close 4321 unknown",
        {"platform": "genesys", "channel": "webmessaging", "closeCode": 4321},
        "UNKNOWN_CLOSE",
        P,
        None,
        None,
    ),
    (
        "socket_closing",
        {
            "platform": "genesys",
            "channel": "notifications",
            "body": {
                "topicName": "v2.system.socket_closing",
                "version": "2",
                "eventBody": {"message": "closing"},
            },
        },
        "SOCKET_CLOSING",
        T,
        None,
        None,
    ),
    (
        "handshake 403",
        {
            "platform": "genesys",
            "channel": "webmessaging",
            "method": "CONNECT",
            "status": 403,
            "exception": "websockets.exceptions.InvalidStatus",
        },
        "HANDSHAKE_REJECTED",
        P,
        None,
        None,
    ),
    (
        "handshake 429",
        {
            "platform": "genesys",
            "channel": "webmessaging",
            "method": "CONNECT",
            "status": 429,
            "headers": {"Retry-After": "2"},
        },
        "RATE_LIMITED",
        T,
        None,
        2000,
    ),
    (
        "handshake 503",
        {"platform": "genesys", "channel": "notifications", "method": "CONNECT", "status": 503},
        "SERVER_ERROR",
        T,
        None,
        None,
    ),
    # token expiry mid-transaction: once-transient when expired by our clock; a failed refresh ends the session
    (
        "401 bad.credentials on expired token",
        {
            "platform": "genesys",
            "channel": "rest",
            "status": 401,
            "body": gen_error(401, "bad.credentials"),
            "context": {"tokenExpired": True},
        },
        "TOKEN_EXPIRED",
        T,
        None,
        None,
    ),
    (
        "refresh refused",
        {
            "platform": "genesys",
            "channel": "rest",
            "status": 400,
            "method": "POST",
            "endpoint": "/oauth/token",
            "body": {"error": "invalid_grant", "description": "expired"},
        },
        "TOKEN_REFRESH_FAILED",
        P,
        Trigger.TOKEN_REFRESH_FAILED,
        None,
    ),
    (
        "cxone refresh refused",
        {
            "platform": "cxone",
            "channel": "rest",
            "status": 401,
            "method": "POST",
            "endpoint": "https://cxone.example/public/authentication/v1/refresh",
            "body": {"error": "invalid_grant"},
        },
        "TOKEN_REFRESH_FAILED",
        P,
        Trigger.TOKEN_REFRESH_FAILED,
        None,
    ),
    (
        "token endpoint 503 is retried",
        {
            "platform": "genesys",
            "channel": "rest",
            "status": 503,
            "method": "POST",
            "endpoint": "/oauth/token",
        },
        "SERVER_ERROR",
        T,
        None,
        None,
    ),
    (
        "invalid_client",
        {
            "platform": "genesys",
            "channel": "rest",
            "status": 401,
            "method": "POST",
            "endpoint": "/oauth/token",
            "body": {"error": "invalid_client", "description": "bad secret"},
        },
        "AUTH_CLIENT_INVALID",
        P,
        None,
        None,
    ),
    # Web Messaging session errors
    (
        "wm 4006",
        {"platform": "genesys", "channel": "webmessaging", "body": wm("string", 4006, "session expired")},
        "SESSION_EXPIRED",
        S,
        None,
        None,
    ),
    (
        "wm SessionExpiredEvent",
        {
            "platform": "genesys",
            "channel": "webmessaging",
            "body": {"type": "message", "class": "SessionExpiredEvent", "code": 200, "body": {}},
        },
        "SESSION_EXPIRED",
        S,
        None,
        None,
    ),
    (
        "wm 4007",
        {"platform": "genesys", "channel": "webmessaging", "body": wm("string", 4007, "session not found")},
        "SESSION_NOT_FOUND",
        S,
        None,
        None,
    ),
    (
        "wm ConnectionClosedEvent",
        {
            "platform": "genesys",
            "channel": "webmessaging",
            "body": {
                "type": "message",
                "class": "ConnectionClosedEvent",
                "code": 200,
                "body": {"reason": "signedIn"},
            },
        },
        "SESSION_OPENED_ELSEWHERE",
        P,
        None,
        None,
    ),
    (
        "wm 4011 fails one message",
        {
            "platform": "genesys",
            "channel": "webmessaging",
            "method": "onMessage",
            "body": wm("string", 4011, "message too long"),
        },
        "MESSAGE_REJECTED",
        P,
        None,
        None,
    ),
    (
        "wm 403 session auth",
        {
            "platform": "genesys",
            "channel": "webmessaging",
            "method": "configureSession",
            "body": wm("string", 403, "Session authentication failed"),
        },
        "WEB_MESSAGING_AUTH_FAILED",
        P,
        None,
        None,
    ),
    (
        "wm 400",
        {"platform": "genesys", "channel": "webmessaging", "body": wm("string", 400, "Request failed.")},
        "BAD_REQUEST",
        P,
        None,
        None,
    ),
    # malformed JSON in a 200
    (
        "malformed json",
        {"platform": "cxone", "channel": "agent-session", "exception": "json.decoder.JSONDecodeError"},
        "MALFORMED_RESPONSE",
        S,
        None,
        None,
    ),
    # 409s
    (
        "409 duplicate message",
        {
            "platform": "genesys",
            "channel": "rest",
            "status": 409,
            "method": "POST",
            "endpoint": MSG_ENDPOINT,
            "body": {"status": 409, "code": "conflict", "message": "dup"},
        },
        "DUPLICATE_MESSAGE_ID",
        S,
        Trigger.DUPLICATE_MESSAGE_ID,
        None,
    ),
    (
        "409 attributes conflict",
        {
            "platform": "genesys",
            "channel": "rest",
            "status": 409,
            "method": "PATCH",
            "endpoint": "/api/v2/conversations/c/participants/p/attributes",
        },
        "CONFLICT",
        P,
        None,
        None,
    ),
    (
        "cxone 409 on get-next-event",
        {"platform": "cxone", "channel": "agent-session", "status": 409, "method": "GET", "endpoint": POLL},
        "AGENT_SESSION_ENDED",
        P,
        None,
        None,
    ),
    # 304 and a long poll that never returns
    (
        "cxone 304 empty poll",
        {"platform": "cxone", "channel": "agent-session", "status": 304, "method": "GET", "endpoint": POLL},
        "EMPTY_POLL",
        N,
        None,
        None,
    ),
    (
        "poll watchdog timeout",
        {
            "platform": "cxone",
            "channel": "agent-session",
            "method": "GET",
            "endpoint": POLL,
            "exception": "httpx.ReadTimeout",
        },
        "NETWORK_TIMEOUT",
        T,
        None,
        None,
    ),
    # plain permanent errors
    (
        "404 not.found",
        {
            "platform": "genesys",
            "channel": "rest",
            "status": 404,
            "method": "GET",
            "endpoint": "/api/v2/users/u-1",
            "body": gen_error(404, "not.found"),
        },
        "RESOURCE_NOT_FOUND",
        P,
        None,
        None,
    ),
    (
        "404 own conversation",
        {
            "platform": "genesys",
            "channel": "rest",
            "status": 404,
            "method": "GET",
            "endpoint": "/api/v2/conversations/abc",
            "body": gen_error(404, "not.found"),
        },
        "CONVERSATION_NOT_FOUND",
        P,
        None,
        None,
    ),
    (
        "400 bad.request",
        {"platform": "genesys", "channel": "rest", "status": 400, "body": gen_error(400, "bad.request")},
        "BAD_REQUEST",
        P,
        None,
        None,
    ),
    (
        "403 missing.permissions",
        {
            "platform": "genesys",
            "channel": "rest",
            "status": 403,
            "body": gen_error(403, "missing.permissions"),
        },
        "FORBIDDEN",
        P,
        None,
        None,
    ),
    (
        "401 authentication.required",
        {
            "platform": "genesys",
            "channel": "rest",
            "status": 401,
            "body": gen_error(401, "authentication.required"),
        },
        "AUTH_REQUIRED",
        P,
        None,
        None,
    ),
    # channel eviction on the notifications socket
    (
        "notifications result 404",
        {
            "platform": "genesys",
            "channel": "notifications",
            "body": {"result": "404", "message": "channel not found"},
        },
        "CHANNEL_LOST",
        S,
        None,
        None,
    ),
    (
        "notifications result 400",
        {
            "platform": "genesys",
            "channel": "notifications",
            "body": {"result": "400", "status": "error", "message": "Required data missing"},
        },
        "BAD_REQUEST",
        P,
        None,
        None,
    ),
    # the seed's trap and the fail-fast triggers
    (
        "408 is transient",
        {"platform": "genesys", "channel": "rest", "status": 408},
        "REQUEST_TIMEOUT",
        T,
        None,
        None,
    ),
    (
        "401 invalid_token",
        {
            "platform": "genesys",
            "channel": "rest",
            "status": 401,
            "body": {"error": "invalid_token", "description": "revoked"},
        },
        "OAUTH_TOKEN_INVALID",
        P,
        Trigger.OAUTH_TOKEN_INVALID,
        None,
    ),
    (
        "401 bad.credentials on a token we held valid",
        {"platform": "genesys", "channel": "rest", "status": 401, "body": gen_error(401, "bad.credentials")},
        "OAUTH_TOKEN_INVALID",
        P,
        Trigger.OAUTH_TOKEN_INVALID,
        None,
    ),
    (
        "cxone 401 invalid_token",
        {
            "platform": "cxone",
            "channel": "rest",
            "status": 401,
            "body": {"error": "invalid_token", "error_description": "expired"},
        },
        "OAUTH_TOKEN_INVALID",
        P,
        Trigger.OAUTH_TOKEN_INVALID,
        None,
    ),
    (
        "SIP REGISTER 403",
        {"platform": "genesys", "channel": "sip", "method": "REGISTER", "status": 403},
        "SIP_REGISTRATION_FAILED",
        P,
        Trigger.SIP_REGISTRATION_FAILED,
        None,
    ),
    (
        "SIP REGISTER 408",
        {"platform": "cxone", "channel": "sip", "method": "REGISTER", "status": 408},
        "SIP_REGISTRATION_FAILED",
        P,
        Trigger.SIP_REGISTRATION_FAILED,
        None,
    ),
    (
        "SIP INVITE 408 stays transient",
        {"platform": "cxone", "channel": "sip", "method": "INVITE", "status": 408},
        "REQUEST_TIMEOUT",
        T,
        None,
        None,
    ),
    (
        "cxone 429 QUEUE_FULL",
        {
            "platform": "cxone",
            "channel": "rest",
            "status": 429,
            "body": {"error_code": "QUEUE_FULL", "error_message": "full"},
        },
        "QUEUE_FULL",
        P,
        Trigger.QUEUE_FULL,
        None,
    ),
    (
        "genesys 429 QUEUE_FULL",
        {"platform": "genesys", "channel": "rest", "status": 429, "body": gen_error(429, "QUEUE_FULL")},
        "QUEUE_FULL",
        P,
        Trigger.QUEUE_FULL,
        None,
    ),
    # network and TLS failures
    (
        "dns",
        {"platform": "cxone", "channel": "rest", "exception": "socket.gaierror"},
        "DNS_RESOLUTION_FAILED",
        T,
        None,
        None,
    ),
    (
        "connect refused",
        {"platform": "genesys", "channel": "rest", "exception": "builtins.ConnectionRefusedError"},
        "CONNECTION_FAILED",
        T,
        None,
        None,
    ),
    (
        "tls cert",
        {"platform": "genesys", "channel": "rest", "exception": "ssl.SSLCertVerificationError"},
        "TLS_CERTIFICATE_INVALID",
        P,
        None,
        None,
    ),
    (
        "httpx private module name",
        {"platform": "genesys", "channel": "rest", "exception": "httpx._exceptions.ConnectTimeout"},
        "NETWORK_TIMEOUT",
        T,
        None,
        None,
    ),
    (
        "unknown exception",
        {"platform": "genesys", "channel": "rest", "exception": "KeyError"},
        "UNKNOWN_ERROR",
        P,
        None,
        None,
    ),
]


@pytest.fixture(scope="module")
def classifier() -> Classifier:
    return Classifier(load_taxonomy("v1"), FakeClock())


@pytest.mark.parametrize(
    ("envelope", "code", "cls", "trigger", "retry_after"), [m[1:] for m in MATRIX], ids=[m[0] for m in MATRIX]
)
def test_fault_matrix_row(
    classifier: Classifier,
    envelope: dict[str, Any],
    code: str,
    cls: TaxonomyClass,
    trigger: Trigger | None,
    retry_after: int | None,
) -> None:
    """Each documented wire shape routes to the expected semantic code, class and trigger."""
    event = classifier.classify_object(envelope)
    assert (event.code, event.taxonomy_class, event.trigger) == (code, cls, trigger)
    assert event.retry_after_ms == retry_after
    assert event.retryable is (cls is TaxonomyClass.TRANSIENT)
    assert event.fail_fast is (trigger is not None or cls is S or (cls is P and event.scope is Scope.SESSION))
    if trigger is not None:
        assert event.as_json()["trigger"] == trigger.value
    else:
        assert "trigger" not in event.as_json()


def test_every_trigger_is_covered_by_the_matrix_or_validation() -> None:
    """The matrix plus response validation exercise all seven fail-fast triggers."""
    from_matrix = {m[4] for m in MATRIX if m[4] is not None}
    from_validation = {Trigger.INCOMPLETE_RESPONSE, Trigger.CONVERSATION_STATE_DRIFT}
    assert from_matrix | from_validation == set(Trigger)


def test_seed_budgets_are_the_defaults(classifier: Classifier) -> None:
    """Seed section 2: timeouts 3/1 s/16 s; 429 2/2 s/8 s with Retry-After; 5xx 3/1 s/12 s; corrupting 0."""
    pol = {
        name: (p.max_retries, p.base_delay_ms, p.max_delay_ms, p.honors_retry_after)
        for name, p in classifier.taxonomy.policies.items()
    }
    assert pol["network"] == (3, 1000, 16000, False)
    assert pol["rate_limit"] == (2, 2000, 8000, True)
    assert pol["server_error"][:3] == (3, 1000, 12000)
    for code, spec in classifier.taxonomy.codes.items():
        if spec.taxonomy_class is TaxonomyClass.STATE_CORRUPTING:
            assert spec.policy.max_retries == 0, code


def test_seed_example_event_fields(classifier: Classifier) -> None:
    """The seed's SdkErrorEvent example: exactly its field names, 504 → TRANSIENT with a budget of 3."""
    event = classifier.classify_object(
        {
            "platform": "genesys",
            "channel": "rest",
            "status": 504,
            "endpoint": "POST /api/v2/conversations/webmessaging/messages",
            "context": {"conversationId": "conv-88472910", "agentId": "agent-19283"},
            "timestamp": "2024-05-14T09:32:11.004Z",
        }
    )
    out = event.as_json()
    seed_fields = [
        "event",
        "timestamp",
        "source",
        "rawStatus",
        "rawCode",
        "taxonomyClass",
        "retryable",
        "maxRetryBudget",
        "context",
    ]
    assert list(out)[: len(seed_fields)] == seed_fields
    assert out["event"] == "SDK_ERROR_CLASSIFIED"
    assert out["timestamp"] == "2024-05-14T09:32:11.004Z"
    assert (out["rawStatus"], out["rawCode"], out["taxonomyClass"]) == (504, "GATEWAY_TIMEOUT", "TRANSIENT")
    assert (out["retryable"], out["maxRetryBudget"]) == (True, 3)
    assert out["context"] == {
        "conversationId": "conv-88472910",
        "agentId": "agent-19283",
        "endpoint": "POST /api/v2/conversations/webmessaging/messages",
    }
    assert out["taxonomyVersion"] == "v1" and out["scope"] == "operation"


def test_secrets_in_context_are_redacted(classifier: Classifier) -> None:
    """A guest token or bearer token given in context never appears in the event."""
    event = classifier.classify_object(
        {
            "platform": "genesys",
            "channel": "webmessaging",
            "closeCode": 1006,
            "context": {"token": "guest-secret-uuid", "Authorization": "Bearer eyJabc", "agentId": "a"},
        }
    )
    text = str(event.as_json())
    assert "guest-secret-uuid" not in text and "eyJabc" not in text
    assert event.context["agentId"] == "a"


class TestResponseValidation:
    """Seed section 3: a 200 without its anchor fields is STATE_CORRUPTING, never active."""

    def test_complete_response_passes(self, classifier: Classifier) -> None:
        ok = {"conversationId": "c-1", "agentId": "a-1", "status": "connected"}
        assert (
            classifier.validate_response(ok, platform=Platform.GENESYS, channel=Channel.WEBMESSAGING) is None
        )

    @pytest.mark.parametrize(
        ("response", "missing"),
        [
            ({"agentId": "a", "status": "s"}, "conversationId"),
            ({"conversationId": "c", "status": "s"}, "agentId"),
            ({"conversationId": "c", "agentId": "a"}, "status"),
            ({"conversationId": None, "agentId": "", "status": "s"}, "conversationId, agentId"),
            ({}, "conversationId, agentId, status"),
            ("not an object", "conversationId, agentId, status"),
        ],
    )
    def test_missing_fields_are_named(self, classifier: Classifier, response: object, missing: str) -> None:
        event = classifier.validate_response(
            response, platform=Platform.GENESYS, channel=Channel.REST, context={"agentId": "a"}
        )
        assert event is not None
        assert (event.code, event.taxonomy_class, event.trigger) == (
            "INCOMPLETE_RESPONSE",
            S,
            Trigger.INCOMPLETE_RESPONSE,
        )
        assert event.details == f"Missing required fields: {missing}"
        assert event.fail_fast and not event.retryable and event.max_retry_budget == 0

    def test_conversation_drift(self, classifier: Classifier) -> None:
        response = {"conversationId": "other", "agentId": "a", "status": "s"}
        event = classifier.validate_response(
            response, platform=Platform.GENESYS, channel=Channel.REST, expected_conversation_id="mine"
        )
        assert event is not None
        assert (event.code, event.trigger) == ("CONVERSATION_STATE_DRIFT", Trigger.CONVERSATION_STATE_DRIFT)
        assert "mine" in (event.details or "") and "other" in (event.details or "")

    def test_custom_required_fields(self, classifier: Classifier) -> None:
        event = classifier.validate_response(
            {"events": []}, platform=Platform.CXONE, channel=Channel.AGENT_SESSION, required=("sessionId",)
        )
        assert event is not None and event.details == "Missing required fields: sessionId"

    def test_session_id_mismatch(self, classifier: Classifier) -> None:
        event = classifier.session_id_mismatch(
            "s-9", "s-1", platform=Platform.CXONE, channel=Channel.AGENT_SESSION
        )
        assert (event.code, event.taxonomy_class) == ("SESSION_ID_MISMATCH", S)


@pytest.mark.parametrize(
    "envelope",
    [
        {"platform": "genesys", "channel": "notifications", "body": {"result": "²"}},
        {
            "platform": "genesys",
            "channel": "webmessaging",
            "body": {"class": "string", "code": "³", "body": "x"},
        },
        {"platform": "genesys", "channel": "rest", "status": 429, "headers": {"Retry-After": "٣"}},
        {
            "platform": "genesys",
            "channel": "rest",
            "status": 400,
            "context": {"deep": {"auth": {"token": "s3"}}},
        },
    ],
)
def test_unicode_digits_and_nested_secrets(classifier: Classifier, envelope: dict[str, Any]) -> None:
    """Found in review: "²".isdigit() is True but int("²") raises; secrets can hide in nested context.

    The normalizer is what must not raise: it is classified as the daemon classifies (``classify``
    itself refuses the first two, which carry nothing to route by: docs/taxonomy.md, "The RawError
    envelope").
    """
    event = classifier.classify(envelope_from_object(envelope))
    assert event.code in classifier.taxonomy.codes
    assert "s3" not in str(event.as_json())


def test_envelope_errors_name_the_field() -> None:
    """A bad envelope names the field and the problem."""
    from supervisor.errors import EnvelopeError

    with pytest.raises(EnvelopeError, match="field 'channel'"):
        envelope_from_object({"platform": "genesys", "channel": "fax"})
    with pytest.raises(EnvelopeError, match="field 'status'"):
        envelope_from_object({"platform": "genesys", "channel": "rest", "status": "429"})
    with pytest.raises(EnvelopeError, match="required field `platform`"):
        envelope_from_object({"channel": "rest"})
