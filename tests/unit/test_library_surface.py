"""The library's public surface (docs/library.md, "Public names" and "Compatibility"): the names scripts
rely on stay, re-exported lazily from ``supervisor``, and ``supervisor.http`` imports without the
daemon's heavier dependencies."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import textwrap

import supervisor
import supervisor.http

#: the contract: each name is in ``supervisor.__all__`` and resolves (removing one is a minor release
#: after a release of DeprecationWarning, docs/library.md "Compatibility")
CONTRACT = (
    "ResilientTransport",
    "resilient",
    "classify",
    "SdkError",
    "SdkErrorEvent",
    "CircuitOpenError",
    "RetryDetails",
    "RetryHook",
    "Tokens",
    "TaxonomyClass",
    "Trigger",
)
#: the hook protocol's names (stamina's)
HOOK_FIELDS = ("name", "endpoint", "retry_num", "wait_for", "waited_so_far", "caused_by")


def test_every_public_name_is_in_all_and_resolves() -> None:
    missing = [name for name in CONTRACT if name not in supervisor.__all__]
    assert missing == []
    for name in supervisor.__all__:
        assert getattr(supervisor, name) is not None, name
    assert supervisor.ResilientTransport is supervisor.http.ResilientTransport
    assert supervisor.http.EVENT_EXTENSION == "session_supervisor.event"
    assert "ResilientTransport" in supervisor.http.__all__


def test_sdk_error_carries_the_seed_s_event_fields_and_outcome_unknown() -> None:
    event = supervisor.classify({"platform": "genesys", "channel": "rest", "status": 504})
    error = supervisor.SdkError(event, outcome_unknown=True)
    assert error.outcome_unknown is True
    seed_fields = ["event", "timestamp", "source", "rawStatus", "rawCode", "taxonomyClass", "retryable"]
    seed_fields += ["maxRetryBudget", "context"]
    assert list(error.event.as_json())[: len(seed_fields)] == seed_fields
    assert {"conversationId", "agentId", "endpoint"} <= set(error.event.as_json()["context"])


def test_the_hook_protocol_s_names() -> None:
    fields = [f.name for f in dataclasses.fields(supervisor.RetryDetails)]
    assert fields[: len(HOOK_FIELDS)] == list(HOOK_FIELDS)


def test_supervisor_http_imports_and_works_with_aiohttp_rich_click_and_the_simulators_blocked() -> None:
    script = textwrap.dedent(
        """
        import sys
        BLOCKED = ("aiohttp", "rich", "click", "supervisor.sim")
        for name in BLOCKED:
            sys.modules[name] = None  # an import of it (or of a module under it) raises ImportError
        import httpx
        import supervisor
        import supervisor.http
        t = supervisor.http.ResilientTransport(
            "genesys", transport=httpx.MockTransport(lambda r: httpx.Response(404))
        )
        with httpx.Client(transport=t) as client:
            response = client.get("https://api.mypurecloud.com/api/v2/users/1")
        assert response.extensions["session_supervisor.event"].code == "RESOURCE_NOT_FOUND"
        assert supervisor.classify(response, platform="genesys").code == "RESOURCE_NOT_FOUND"
        supervisor.resilient(platform="cxone", operation="x")
        loaded = sorted(n for n in sys.modules if n.startswith(BLOCKED) and sys.modules[n] is not None)
        print(loaded)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
