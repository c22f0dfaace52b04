"""What ``[taxonomy] capture`` keeps of a failure: what routes it, nothing else (docs/taxonomy.md, "Capture").

The reduction is checked two ways: every shipped sample, reduced, routes as it did under both
shipped versions (and an overlay) and reads back as a valid envelope; and an envelope full of what
must never be kept (secrets, a guest's message, an attribute value, ids, a URL's query) keeps none.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from supervisor.boundary import kept_headers
from supervisor.taxonomy import Classifier, load_taxonomy
from supervisor.taxonomy.capture import ID, OTHER, CaptureShape, reduce_envelope, route_template
from supervisor.taxonomy.diff import event_routing
from supervisor.taxonomy.envelope import envelope_from_json, envelope_from_object
from supervisor.taxonomy.normalize import require_evidence
from supervisor.taxonomy.samples import sample_envelopes

THROTTLED = Path(__file__).parent.parent / "fixtures" / "taxonomy" / "throttled.toml"
TAXONOMIES = [load_taxonomy("v1"), load_taxonomy("v2"), load_taxonomy(THROTTLED)]
SHAPE = CaptureShape.of(TAXONOMIES, kept_headers())

SECRETS = [
    "s3cr3t-client-secret",
    "Bearer abcdef0123456789",
    "abcdef0123456789",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJndWVzdCJ9.c2lnbmF0dXJl",
    "please call me back on 555-0100",  # a guest's message
    "123-45-6789",  # a sensitive attribute value
    "conv-88472910",
    "agent-19283",
    "00000000-1111-2222-3333-444444444444",
]


def reduced_line(envelope: dict[str, object] | bytes) -> bytes:
    raw = envelope_from_json(envelope) if isinstance(envelope, bytes) else envelope_from_object(envelope)
    return json.dumps(reduce_envelope(raw, SHAPE)).encode()


@pytest.mark.parametrize(
    "line", sample_envelopes(), ids=lambda line: str(json.loads(line).get("status", "-"))
)
def test_every_shipped_sample_routes_as_it_did_once_reduced(line: bytes) -> None:
    captured = reduced_line(line)
    back = envelope_from_json(captured)  # a captured line is a valid envelope: no unknown field
    require_evidence(back)  # and one with something to route by
    original = envelope_from_json(line)
    for taxonomy in TAXONOMIES:
        classifier = Classifier(taxonomy)
        before = event_routing(classifier.classify(original, observe=False))
        after = event_routing(classifier.classify(back, observe=False))
        assert after == before, (taxonomy.version, captured)


def test_nothing_secret_survives_a_reduction() -> None:
    envelopes: list[dict[str, object]] = [
        {
            "platform": "genesys",
            "channel": "rest",
            "method": "PATCH",
            "endpoint": "https://api.example.com/api/v2/conversations/00000000-1111-2222-3333-444444444444"
            "/participants/conv-88472910/attributes?access_token=abcdef0123456789",
            "status": 503,
            "headers": {
                "Authorization": "Bearer abcdef0123456789",
                "Set-Cookie": "s=s3cr3t-client-secret",
                "Retry-After": "3",
            },
            "body": {
                "message": "ssn 123-45-6789 please call me back on 555-0100",
                "code": "service.unavailable",
                "contextId": "agent-19283",
                "details": [{"token": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJndWVzdCJ9.c2lnbmF0dXJl"}],
            },
            "context": {"conversationId": "conv-88472910", "agentId": "agent-19283", "tokenExpired": True},
        },
        {
            "platform": "genesys",
            "channel": "rest",
            "method": "POST",
            "endpoint": "/oauth/token",
            "status": 401,
            "body": {"error": "s3cr3t-client-secret", "error_description": "Bearer abcdef0123456789"},
        },
        {
            "platform": "genesys",
            "channel": "webmessaging",
            "method": "onMessage",
            "endpoint": "wss://webmessaging.example.com/v1?deploymentId=dep&token=abcdef0123456789",
            "body": {
                "type": "response",
                "class": "string",
                "code": 5000,
                "body": "please call me back on 555-0100 eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJndWVzdCJ9.c2lnbmF0dXJl",
            },
        },
        {
            "platform": "genesys",
            "channel": "notifications",
            "body": {
                "topicName": "v2.system.token_revoked",
                "eventBody": {"systemTopicType": "token_revoked", "oauthClientId": "s3cr3t-client-secret"},
            },
        },
        {"platform": "cxone", "channel": "agent-session", "status": 429, "body": "123-45-6789"},
    ]
    for envelope in envelopes:
        captured = reduced_line(envelope).decode()
        for secret in SECRETS:
            assert secret not in captured, (secret, captured)
    first = json.loads(reduced_line(envelopes[0]))
    assert first == {
        "platform": "genesys",
        "channel": "rest",
        "method": "PATCH",
        "endpoint": f"/api/v2/conversations/{ID}/participants/{ID}/attributes",
        "status": 503,
        "headers": {"retry-after": "3"},
        "body": {"code": OTHER},
        "context": {"tokenExpired": True},
    }
    # a value a rule names is kept as it is: the token endpoint's own codes
    named = {"platform": "genesys", "channel": "rest", "status": 401, "body": {"error": "invalid_client"}}
    assert json.loads(reduced_line(named))["body"] == {"error": "invalid_client"}
    revoked = json.loads(reduced_line(envelopes[3]))
    assert revoked["body"] == {"topicName": "v2.system.token_revoked"}


def test_a_route_template_keeps_words_and_the_taxonomies_literals_only() -> None:
    assert route_template("/inContactAPI/services/v31.0/agent-sessions/5bd2-77/get-next-event", SHAPE) == (
        f"/inContactAPI/services/v31.0/agent-sessions/{ID}/get-next-event"
    )
    assert route_template("/api/v2/notifications/channels/streaming-0-abc123/subscriptions", SHAPE) == (
        f"/api/v2/notifications/channels/{ID}/subscriptions"
    )
    assert route_template("/.well-known/openid-configuration", SHAPE) == "/.well-known/openid-configuration"
    assert route_template("configureSession", SHAPE) == "configureSession"
    assert route_template("eyJhbGciOiJIUzI1NiJ9", SHAPE) is None
    # the operation a template names is the one its path named, under every loaded taxonomy
    path = "/api/v2/conversations/c0ffee00-1111/participants/p-1/attributes"
    template = route_template(path, SHAPE)
    for taxonomy in TAXONOMIES:
        assert (
            taxonomy.operation_of("genesys", "rest", "PATCH", template)
            == taxonomy.operation_of("genesys", "rest", "PATCH", path)
            == "attributes.update"
        )


def test_the_body_fields_kept_are_derived_from_the_loaded_rules(tmp_path: Path) -> None:
    """A rawCode only a loaded overlay's rule names is kept when, and only when, it is loaded."""
    overlay = tmp_path / "site.toml"
    overlay.write_text(
        'extends = "v2"\nversion = "site"\n[[rules]]\nstatus = 400\nrawCode = "site.code"\n'
        'code = "BAD_REQUEST"\n'
    )
    v2 = load_taxonomy("v2")
    site = envelope_from_object(
        {"platform": "genesys", "channel": "rest", "status": 400, "body": {"code": "site.code"}}
    )
    assert reduce_envelope(site, CaptureShape.of([v2], kept_headers()))["body"] == {"code": OTHER}
    with_site = CaptureShape.of([v2, load_taxonomy(overlay)], kept_headers())
    assert reduce_envelope(site, with_site)["body"] == {"code": "site.code"}


def test_the_capture_file_is_under_the_state_directory_or_the_daemon_does_not_start(tmp_path: Path) -> None:
    from supervisor.errors import ConfigError
    from supervisor.runtime.taxonomy_tap import capture_path, state_directory

    state = state_directory(None, {"STATE_DIRECTORY": f"{tmp_path}:/elsewhere"})
    assert state == tmp_path
    assert state_directory(str(tmp_path / "db" / "store.sqlite3"), {}) == tmp_path / "db"
    assert capture_path("errors.ndjson", state) == tmp_path / "errors.ndjson"
    assert capture_path(str(tmp_path / "sub" / "e.ndjson"), state) == tmp_path / "sub" / "e.ndjson"
    for outside in ("../errors.ndjson", "/tmp/errors.ndjson", ".", "sub/../../x"):
        with pytest.raises(
            ConfigError, match=r"^taxonomy\.capture: .*: must be a file under the state directory"
        ):
            capture_path(outside, state)
    with pytest.raises(ConfigError, match=r"^taxonomy\.capture: needs a state directory"):
        capture_path("errors.ndjson", state_directory(None, {}))
