"""Taxonomy files are schema-checked on load; errors name the file, the key and the problem."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

import pytest

from supervisor.errors import TaxonomyError
from supervisor.taxonomy import (
    ENV_VAR,
    Classifier,
    compile_taxonomy,
    load_taxonomy,
    resolve_version,
    shipped_versions,
)

V1 = (resources.files("supervisor.taxonomy") / "data" / "v1.toml").read_text()


def edited(old: str, new: str, count: int = 1) -> str:
    assert old in V1, old
    return V1.replace(old, new, count)


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_every_shipped_version_is_valid(version: str) -> None:
    assert version in shipped_versions()
    tax = load_taxonomy(version)
    assert tax.version == version
    assert tax.rules[-1].is_catch_all


def test_v2_is_the_default_and_v1_stays_shipped() -> None:
    """v1 stays for configurations that pin it; a configuration that names none gets v2."""
    assert load_taxonomy().version == "v2" and load_taxonomy("v1").version == "v1"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            edited("[policies.network]\nmaxRetries = 3", '[policies.network]\nmaxRetries = "three"'),
            r"^bad\.toml: policies\.network\.maxRetries: expected `int`, got `str`$",
        ),
        (
            edited('[codes.RATE_LIMITED]\nclass = "TRANSIENT"', '[codes.RATE_LIMITED]\nclass = "TRANSITORY"'),
            r"^bad\.toml: codes\.RATE_LIMITED\.class: invalid enum value 'TRANSITORY'$",
        ),
        (
            edited('policy = "rate_limit"\ndescription = "429', 'policy = "ratelimit"\ndescription = "429'),
            r"^bad\.toml: codes\.RATE_LIMITED\.policy: unknown policy 'ratelimit' \(known: .*\)$",
        ),
        (
            edited('code = "SESSION_OPENED_ELSEWHERE"', 'code = "NO_SUCH_CODE"'),
            r"^bad\.toml: rules\[1\]\.code: unknown code 'NO_SUCH_CODE'$",
        ),
        (
            edited('"1006" = "ABNORMAL_CLOSURE"', '"906" = "ABNORMAL_CLOSURE"'),
            r"^bad\.toml: closeCodes\.906: a close code is an integer from 1000 to 4999, or '\*'$",
        ),
        (
            edited("status = 4006", 'status = "4xy"'),
            r"^bad\.toml: rules\[5\]\.status: '4xy' is not a status, 'Nxx' or 'low-high'$",
        ),
        (
            edited(
                'channel = "webmessaging"\nrawCode = "SessionExpiredEvent"',
                'channel = "fax"\nrawCode = "SessionExpiredEvent"',
            ),
            r"^bad\.toml: rules\[0\]\.channel: unknown value 'fax' \(known: .*\)$",
        ),
        (
            edited(
                '[codes.DUPLICATE_MESSAGE_ID]\nclass = "STATE_CORRUPTING"\nscope = "session"\npolicy = "fail_fast"',
                '[codes.DUPLICATE_MESSAGE_ID]\nclass = "STATE_CORRUPTING"\nscope = "session"\npolicy = "network"',
            ),
            r"^bad\.toml: codes\.DUPLICATE_MESSAGE_ID\.policy: a STATE_CORRUPTING code must not retry",
        ),
        (edited("schema = 1", "schema = 2"), r"^bad\.toml: schema: unsupported schema 2"),
        (
            edited('[[rules]]\ncode = "UNKNOWN_ERROR"', '[[rules]]\nstatus = 999\ncode = "UNKNOWN_ERROR"'),
            r"^bad\.toml: rules: the last rule must be a catch-all",
        ),
        (
            edited("[codes.INCOMPLETE_RESPONSE]", "[codes.INCOMPLETE_RESPONSE_X]").replace(
                'code = "INCOMPLETE_RESPONSE"', 'code = "INCOMPLETE_RESPONSE_X"'
            ),
            r"^bad\.toml: codes\.INCOMPLETE_RESPONSE: missing \(the classifier emits it\)$",
        ),
        (
            edited("[policies.network]", "[policies.network]\nmaxretries = 3"),
            r"^bad\.toml: policies\.network: object contains unknown field `maxretries`$",
        ),
        ("schema = 1\nversion = ", r"^bad\.toml: not valid TOML: "),
    ],
)
def test_invalid_files_are_located(text: str, message: str) -> None:
    with pytest.raises(TaxonomyError) as info:
        compile_taxonomy(text, "bad.toml")
    assert re.search(message, str(info.value)), str(info.value)
    assert "\n" not in str(info.value)


def test_missing_file_and_unknown_version(tmp_path: Path) -> None:
    with pytest.raises(TaxonomyError, match=r"no-such\.toml: no such taxonomy file"):
        load_taxonomy(str(tmp_path / "no-such.toml"))
    with pytest.raises(TaxonomyError, match=r"taxonomy version 'v9' is not shipped \(shipped: v1"):
        load_taxonomy("v9")


def test_a_renamed_platform_code_is_a_one_line_change(tmp_path: Path) -> None:
    """Seed section 1: CONVERSATION_NOT_FOUND renamed RESOURCE_MISSING changes one line of data."""
    env = {
        "platform": "genesys",
        "channel": "rest",
        "status": 404,
        "method": "GET",
        "endpoint": "/api/v2/users/u",
        "body": {"code": "RESOURCE_MISSING", "message": "gone"},
    }
    assert Classifier(load_taxonomy("v1")).classify_object(env).code == "RESOURCE_NOT_FOUND"
    v2 = tmp_path / "v2.toml"
    v2.write_text(
        edited('version = "v1"', 'version = "v2"').replace(
            '[[rules]]\nstatus = 404\ncode = "RESOURCE_NOT_FOUND"',
            '[[rules]]\nstatus = 404\nrawCode = "RESOURCE_MISSING"\ncode = "CONVERSATION_NOT_FOUND"\n\n'
            '[[rules]]\nstatus = 404\ncode = "RESOURCE_NOT_FOUND"',
        )
    )
    event = Classifier(load_taxonomy(str(v2))).classify_object(env)
    assert (event.code, event.taxonomy_version) == ("CONVERSATION_NOT_FOUND", "v2")


def test_environment_override_wins_for_staged_rollout() -> None:
    """The seed's feature flag: config chooses, the environment overrides."""
    assert resolve_version(None, {}) == "v2"
    assert resolve_version("v1", {}) == "v1"
    assert resolve_version("v1", {ENV_VAR: "/etc/ss/v2.toml"}) == "/etc/ss/v2.toml"
    assert resolve_version("v3", {ENV_VAR: "  "}) == "v3"


# -- [responses]: what each platform's response must carry (docs/taxonomy.md, "Response validation") ------------------------------------

_HDR = '[responses."genesys.webmessaging.SessionResponse"]'
_REQ = 'required = ["connected", "newSession", "readOnly"]'


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            edited(_REQ, "required = []"),
            r"^bad\.toml: responses\.genesys\.webmessaging\.SessionResponse\.required: name at least one field$",
        ),
        (
            edited(_REQ, 'required = ["connected", "connected"]'),
            r"^bad\.toml: responses\.genesys\.webmessaging\.SessionResponse\.required: a field is named twice$",
        ),
        (
            edited(_REQ, 'required = ["a b"]'),
            r"^bad\.toml: responses\.genesys\.webmessaging\.SessionResponse: 'a b' is not a field name$",
        ),
        (
            edited(_HDR, '[responses."genesys.fax.SessionResponse"]'),
            r"^bad\.toml: responses\.genesys\.fax\.SessionResponse: unknown platform or channel 'genesys\.fax'$",
        ),
        (
            edited(_HDR, "[responses.SessionResponse]"),
            r"^bad\.toml: responses\.SessionResponse: a response is named platform\.channel\.Response$",
        ),
        (
            edited(_HDR, '[responses."genesys.webmessaging.Other"]'),
            r'^bad\.toml: responses\."genesys\.webmessaging\.SessionResponse": missing \(a transport validates it\)$',
        ),
        (
            edited(_REQ, _REQ + '\nextra = "x"'),
            r"^bad\.toml: responses\.genesys\.webmessaging\.SessionResponse: object contains unknown field `extra`$",
        ),
    ],
)
def test_responses_are_checked_on_load(text: str, message: str) -> None:
    with pytest.raises(TaxonomyError, match=message):
        compile_taxonomy(text, "bad.toml")


def test_validation_follows_the_response_kind() -> None:
    classifier = Classifier(load_taxonomy("v1"))
    from supervisor.taxonomy import Channel, Platform

    wm = {"connected": True, "newSession": False, "readOnly": False}
    ok = classifier.validate_response(
        wm,
        platform=Platform.GENESYS,
        channel=Channel.WEBMESSAGING,
        kind="genesys.webmessaging.SessionResponse",
    )
    assert ok is None
    # a configured conversation cannot drift on a response that names none
    assert (
        classifier.validate_response(
            wm,
            platform=Platform.GENESYS,
            channel=Channel.WEBMESSAGING,
            kind="genesys.webmessaging.SessionResponse",
            expected_conversation_id="c-1",
        )
        is None
    )
    missing = classifier.validate_response(
        {"connected": True, "newSession": False},
        platform=Platform.GENESYS,
        channel=Channel.WEBMESSAGING,
        kind="genesys.webmessaging.SessionResponse",
    )
    assert (
        missing is not None and missing.code == "INCOMPLETE_RESPONSE" and "readOnly" in str(missing.details)
    )
    drift = classifier.validate_response(
        {"id": "c-2", "state": "connected", "participants": [{}]},
        platform=Platform.GENESYS,
        channel=Channel.REST,
        kind="genesys.rest.Conversation",
        expected_conversation_id="c-1",
    )
    assert drift is not None and drift.code == "CONVERSATION_STATE_DRIFT"
    with pytest.raises(TaxonomyError):
        classifier.validate_response(
            {}, platform=Platform.GENESYS, channel=Channel.REST, kind="genesys.rest.Nope"
        )


def test_v1_stays_byte_identical() -> None:
    """A configuration that pins v1 keeps exactly the routing it was tested with: v2's changes
    (docs/taxonomy.md "Versions") never edit a shipped version. The digest is v1.toml as released."""
    import hashlib
    from importlib import resources

    data = (resources.files("supervisor.taxonomy") / "data" / "v1.toml").read_bytes()
    assert hashlib.sha256(data).hexdigest() == (
        "ece6dbc678be2661ed35667400fc4f40600404b5a0d7fac17b7ca9a65f5594be"
    )
