"""Secrets never leave ``classify``: by key name in dicts and lists, and by shape anywhere."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from supervisor.clock import FakeClock
from supervisor.taxonomy import Classifier, load_taxonomy
from supervisor.taxonomy.envelope import MAX_NESTING, RawError
from supervisor.taxonomy.model import Channel, Platform

CLASSIFIER = Classifier(load_taxonomy("v1"), FakeClock())
ROOT = Path(__file__).resolve().parents[2]

SECRET_KEYS = [
    "token",
    "access_token",
    "refresh_token",
    "id_token",
    "accessToken",
    "client_secret",
    "clientSecret",
    "password",
    "passwd",
    "pwd",
    "Authorization",
    "proxy-authorization",
    "apiKey",
    "api_key",
    "X-Api-Key",
    "cookie",
    "Set-Cookie",
    "private_key",
    "privateKey",
    "jwt",
    "sessionKey",
    "session_key",
    "sessionToken",
    "credentials",
    "signature",
    "client_assertion",
    "PASSPHRASE",
]
KEPT = {"conversationId": "conv-1", "agentId": "agent-7", "note": "keep-me", "sessionId": "s-9"}


def context_of(context: dict[str, Any]) -> str:
    event = CLASSIFIER.classify_object(
        {"platform": "genesys", "channel": "rest", "status": 401, "context": context}
    )
    return json.dumps(event.as_json())


@pytest.mark.parametrize("key", SECRET_KEYS)
def test_each_secret_key_name_is_redacted(key: str) -> None:
    text = context_of({key: "Zq9-secret-value", "nested": [{key: "Zq9-secret-value"}]})
    assert "Zq9-secret-value" not in text
    assert text.count("[REDACTED]") == 2


@pytest.mark.parametrize(
    ("value", "kept"),
    [
        ("Bearer abcdef123456", "Bearer [REDACTED]"),
        ("sent Basic dXNlcjpwYXNz to the token endpoint", "sent Basic [REDACTED] to the token endpoint"),
        ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl", "[REDACTED]"),
        ("https://h/p?access_token=abc123&page=2", "https://h/p?access_token=[REDACTED]&page=2"),
        ("client_secret=s3cr3t&grant_type=x", "client_secret=[REDACTED]&grant_type=x"),
    ],
)
def test_secret_looking_values_are_redacted_under_any_key(value: str, kept: str) -> None:
    event = CLASSIFIER.classify_object(
        {
            "platform": "genesys",
            "channel": "rest",
            "status": 401,
            "context": {"message": value, "list": [value]},
        }
    )
    assert event.context["message"] == kept
    assert event.context["list"] == [kept]


def test_what_only_says_whether_is_kept() -> None:
    event = CLASSIFIER.classify_object(
        {
            "platform": "genesys",
            "channel": "rest",
            "status": 401,
            "context": {**KEPT, "tokenExpired": True, "hasPassword": False, "cookie": None},
        }
    )
    assert {k: event.context[k] for k in KEPT} == KEPT
    assert (event.context["tokenExpired"], event.context["hasPassword"], event.context["cookie"]) == (
        True,
        False,
        None,
    )


# -- hypothesis: secrets planted anywhere in dicts and lists, at any nesting -------------------------

secret_values = st.builds(
    lambda kind, n: {
        "plain": f"Sx{n:08d}plain",
        "bearer": f"Bearer Sx{n:08d}bearer",
        "jwt": f"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ{n:08d}.Sx{n:08d}",
        "query": f"https://h/cb?token=Sx{n:08d}q&x=1",
    }[kind],
    st.sampled_from(["plain", "bearer", "jwt", "query"]),
    st.integers(0, 10**8 - 1),
)


def planted(value: str) -> st.SearchStrategy[tuple[Any, list[str]]]:
    """A value holding one secret; a plain one only under a secret key, a shaped one anywhere."""
    if "plain" in value:
        return st.sampled_from(SECRET_KEYS).map(lambda key: ({key: value}, [value]))
    return st.sampled_from(["message", "detail", "url", "x"]).map(lambda key: ({key: value}, [value]))


leaves = st.sampled_from(["keep-me", 1, None, True, 2.5]).map(lambda v: (v, []))
with_secret = secret_values.flatmap(planted)


def wrap(children: st.SearchStrategy[tuple[Any, list[str]]]) -> st.SearchStrategy[tuple[Any, list[str]]]:
    def as_list(items: list[tuple[Any, list[str]]]) -> tuple[Any, list[str]]:
        return [v for v, _ in items], [s for _, ss in items for s in ss]

    def as_dict(items: list[tuple[str, tuple[Any, list[str]]]]) -> tuple[Any, list[str]]:
        return {k: v for k, (v, _) in items}, [s for _, (_, ss) in items for s in ss]

    keys = st.sampled_from(["a", "b", "items", "data", "headers", "c"])
    return st.lists(children, max_size=4).map(as_list) | st.lists(
        st.tuples(keys, children), max_size=4, unique_by=lambda kv: kv[0]
    ).map(as_dict)


trees = st.recursive(leaves | with_secret, wrap, max_leaves=25)


@given(trees)
def test_no_planted_secret_survives_any_nesting_of_dicts_and_lists(tree: tuple[Any, list[str]]) -> None:
    value, secrets = tree
    text = context_of({"payload": value, **KEPT})
    for secret in secrets:
        marker = secret.split("Sx", 1)[1][:8]
        assert f"Sx{marker}" not in text, (secret, text)
    assert all(json.dumps(v) in text for v in KEPT.values())


@given(st.integers(MAX_NESTING, MAX_NESTING + 40))
def test_a_context_nested_past_the_cap_is_redacted_not_shown(depth: int) -> None:
    value: Any = {"deep": "Sx-too-deep"}
    for _ in range(depth):
        value = [value]
    # built in code, as the runtime does: not depth-checked like a decoded line is
    raw = RawError(platform=Platform.GENESYS, channel=Channel.REST, status=500, context={"payload": value})
    assert "Sx-too-deep" not in json.dumps(CLASSIFIER.classify(raw).as_json())


def test_classify_cli_redacts_secrets_in_lists() -> None:
    line = {
        "platform": "genesys",
        "channel": "rest",
        "status": 401,
        "context": {"headers": [{"Set-Cookie": "sid=Sx-cookie"}, ["Authorization", "Bearer Sx-bearer-1"]]},
    }
    result = subprocess.run(
        [sys.executable, "-m", "supervisor", "classify"],
        input=json.dumps(line) + "\n",
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    assert "Sx-" not in result.stdout and "[REDACTED]" in result.stdout
