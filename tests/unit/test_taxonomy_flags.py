"""Behaviour keyed on taxonomy data, never on code names.

The runtime reads four flags of a code instead of its name: ``graceful`` (end without
reconnecting), ``replayWithFreshToken`` (the seed's 401 replay, edge case 3),
``revokesCredential`` (drop the shared token on a fail-fast) and ``circuitNeutral`` (not counted
toward the endpoint's circuit: v2's TOKEN_EXPIRED, docs/taxonomy.md, "The 401 rule"). A taxonomy that renames the
codes must keep the behaviour; one that sets a flag where it makes no sense must not load.
"""

from __future__ import annotations

import random
import re
from importlib import resources
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from machines.circuit import CircuitConfig
from machines.registry import CircuitRegistry, Endpoints
from machines.routing import Route, route
from machines.session import SessionCore
from supervisor.attempts import Attempts
from supervisor.boundary import SessionContext
from supervisor.clock import FakeClock
from supervisor.config import Secret
from supervisor.errors import CircuitOpenError, TaxonomyError
from supervisor.events import SessionTerminated
from supervisor.rest.executor import RetryExecutor
from supervisor.rest.hooks import NoHooks
from supervisor.rest.pipeline import RequestPipeline
from supervisor.rest.tokens import TokenCache
from supervisor.taxonomy import (
    Channel,
    Classifier,
    Platform,
    RawError,
    SdkErrorEvent,
    Taxonomy,
    compile_taxonomy,
)
from supervisor.taxonomy.diff import diff_codes
from supervisor.vocabulary import EndpointId

RENAMES = {
    "TOKEN_EXPIRED": "BEARER_LAPSED",
    "GRACEFUL_CLOSE": "PEER_SAID_GOODBYE",
    "OAUTH_TOKEN_INVALID": "BEARER_REJECTED",
}


def v1_text() -> str:
    return (resources.files("supervisor.taxonomy") / "data" / "v1.toml").read_text(encoding="utf-8")


def v2_text() -> str:
    return (resources.files("supervisor.taxonomy") / "data" / "v2.toml").read_text(encoding="utf-8")


def renamed(text: str | None = None, version: str = "v1") -> Taxonomy:
    """A shipped taxonomy with three codes renamed everywhere (the one-line data change of seed section 1)."""
    text = v1_text() if text is None else text
    for old, new in RENAMES.items():
        text = re.sub(rf"(\[codes\.){old}\]", rf"\g<1>{new}]", text)
        # rule targets (`code = "X"`) and table values (`"1000" = "X"`); a trigger keeps its name
        text = re.sub(rf'^((?:code|"[^"]*") = )"{old}"', rf'\g<1>"{new}"', text, flags=re.MULTILINE)
    name = f"{version}-renamed"
    return compile_taxonomy(text.replace(f'version = "{version}"', f'version = "{name}"'), f"{name}.toml")


V1 = compile_taxonomy(v1_text(), "v1.toml")
V2 = renamed()
SHIPPED_V2 = compile_taxonomy(v2_text(), "v2.toml")
V2_RENAMED = renamed(v2_text(), "v2")


def test_the_renamed_taxonomy_really_renames() -> None:
    for old, new in RENAMES.items():
        assert old not in V2.codes and new in V2.codes
        assert old not in V2_RENAMED.codes and new in V2_RENAMED.codes
    assert V2_RENAMED.version == "v2-renamed"


@pytest.mark.parametrize("taxonomy", [V1, V2], ids=["v1", "renamed"])
def test_a_graceful_close_ends_the_session_without_reconnecting_whatever_its_name(taxonomy: Taxonomy) -> None:
    clock = FakeClock()
    event = Classifier(taxonomy, clock).classify(
        RawError(platform=Platform.GENESYS, channel=Channel.WEBMESSAGING, close_code=1000)
    )
    assert event.graceful and route(event) is Route.GRACEFUL
    core = SessionCore("s-1", clock, random.Random(1))
    core.session_response(None)
    effects = core.failure(event)
    (terminated,) = [e for e in effects if isinstance(e, SessionTerminated)]
    assert terminated.reason.value == "GRACEFUL_CLOSE" and terminated.code == event.code


@pytest.mark.parametrize("taxonomy", [V1, V2], ids=["v1", "renamed"])
def test_a_revoked_token_condemns_the_credential_whatever_its_name(taxonomy: Taxonomy) -> None:
    clock = FakeClock()
    raw = RawError(
        platform=Platform.GENESYS,
        channel=Channel.REST,
        method="GET",
        endpoint="/api/v2/conversations/c-1",
        status=401,
        body={"error": "invalid_token"},
    )
    event = Classifier(taxonomy, clock).classify(raw)
    assert event.code == ("OAUTH_TOKEN_INVALID" if taxonomy is V1 else "BEARER_REJECTED")
    core = SessionCore("s-1", clock, random.Random(1))
    core.session_response(None)
    (terminated,) = [e for e in core.failure(event) if isinstance(e, SessionTerminated)]
    # the runner revokes the shared token when the termination says so (session_runner._terminated)
    assert terminated.revokes_credential


class _Source:
    def __init__(self, lifetime: float = 60.0) -> None:
        self.fetches = 0
        self.lifetime = lifetime

    async def fetch(self, refresh: Secret | None) -> tuple[Secret, float, Secret | None, dict[str, Any]]:
        self.fetches += 1
        return Secret(f"tok-{self.fetches}"), self.lifetime, None, {}


@pytest.mark.parametrize("taxonomy", [V1, V2], ids=["v1", "renamed"])
def test_a_401_on_an_expired_token_is_replayed_once_whatever_its_name(taxonomy: Taxonomy) -> None:
    clock = FakeClock(start=100.0)
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers["Authorization"])
        if len(seen) == 1:
            clock.advance(120.0)  # the token ran out while the request was in flight
            return httpx.Response(
                401, json={"message": "Invalid login credentials.", "code": "bad.credentials"}
            )
        return httpx.Response(200, json={"ok": True})

    async def main() -> None:
        tokens = TokenCache(_Source(), clock, early_refresh_s=0.0)
        executor = RetryExecutor(
            Classifier(taxonomy, clock),
            Attempts(Endpoints(clock, CircuitRegistry(clock, CircuitConfig()))),
            clock,
            rng=random.Random(1),
        )
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            pipeline = RequestPipeline(client, executor, tokens=tokens)
            ctx = SessionContext("s-1", Platform.GENESYS, Channel.REST)
            response = await pipeline.request(
                "GET",
                "http://api.test/api/v2/conversations/c-1",
                ctx=ctx,
                circuit=EndpointId(Platform.GENESYS, "api"),
            )
            assert response.status_code == 200

    anyio.run(main)
    assert seen == ["Bearer tok-1", "Bearer tok-2"]


def _with(code: str, line: str) -> str:
    text = v1_text()
    block = f"[codes.{code}]\n"
    i = text.index(block) + len(block)
    return text[:i] + line + "\n" + text[i:]


@pytest.mark.parametrize(
    ("code", "flag", "message"),
    [
        ("RATE_LIMITED", "graceful = true", "codes.RATE_LIMITED.graceful: a graceful end is class NONE"),
        (
            "RESOURCE_NOT_FOUND",
            "replayWithFreshToken = true",
            "codes.RESOURCE_NOT_FOUND.replayWithFreshToken: a replay is TRANSIENT",
        ),
        (
            "RATE_LIMITED",
            "revokesCredential = true",
            "codes.RATE_LIMITED.revokesCredential: only a code that ends",
        ),
    ],
)
def test_a_flag_that_contradicts_its_class_is_refused_with_its_location(
    code: str, flag: str, message: str
) -> None:
    with pytest.raises(TaxonomyError, match=re.escape(f"bad.toml: {message}")):
        compile_taxonomy(_with(code, flag), "bad.toml")


def test_taxonomy_diff_shows_a_flag_change(tmp_path: Path) -> None:
    text = v1_text().replace("graceful = true\n", "")
    changes = {c.code: c for c in diff_codes(V1, compile_taxonomy(text, "v2.toml"))}
    change = changes["GRACEFUL_CLOSE"]
    assert change.change == "changed"
    assert change.before is not None and change.after is not None
    assert (change.before["graceful"], change.after["graceful"]) == (True, False)


def test_a_long_replay_keeps_a_bounded_sample_and_counts_the_rest() -> None:
    """An endless recording must not grow memory: past REPLAY_KEEP lines, differences are counted."""
    from supervisor.taxonomy.diff import REPLAY_KEEP, replay

    other = compile_taxonomy(v1_text().replace("graceful = true\n", ""), "v2.toml")
    line = b'{"platform":"genesys","channel":"webmessaging","closeCode":1000}'
    total = REPLAY_KEEP * 3
    report = replay(V1, other, (line for _ in range(total)))
    assert len(report.changes) == REPLAY_KEEP
    assert report.changed_total == total and report.lines == total


# ------------------------------------------------------------------ circuitNeutral (docs/taxonomy.md, "The 401 rule")


class _Counting(NoHooks):
    """Counts classified failures, and wakes whoever waits for a number of them."""

    def __init__(self) -> None:
        self.count = 0
        self.changed = anyio.Event()

    def classified(self, event: SdkErrorEvent) -> None:
        self.count += 1
        self.changed.set()
        self.changed = anyio.Event()

    async def reach(self, count: int) -> None:
        while self.count < count:
            await self.changed.wait()


def _expiry_storm(taxonomy: Taxonomy, sessions: int) -> tuple[list[int], str]:
    """``sessions`` calls at once on one shared credential whose token just lapsed.

    Every first request is answered 401 (the token ran out in flight); every replay, with the
    fresh token, 200 once all the 401s were classified: 1,000 sessions on one credential see
    exactly this. Returns each call's status (-1: refused by the circuit) and the circuit's state.
    """
    clock = FakeClock(start=100.0)
    hooks = _Counting()
    first: list[str] = []
    arrived = anyio.Event()

    async def handler(request: httpx.Request) -> httpx.Response:
        if request.headers["Authorization"] == "Bearer tok-1":
            first.append("tok-1")
            if len(first) == sessions:
                clock.advance(1.01)  # the 1 s token ran out while the requests were in flight
                arrived.set()
            await arrived.wait()
            return httpx.Response(401, json={"error": "invalid_token", "error_description": "expired"})
        await hooks.reach(sessions)  # every 401 was judged before any replay is answered
        return httpx.Response(200, json={"ok": True})

    statuses = [0] * sessions
    states: list[str] = []

    async def main() -> None:
        tokens = TokenCache(_Source(lifetime=1.0), clock, early_refresh_s=0.0)
        await tokens.get()
        circuits = CircuitRegistry(clock, CircuitConfig())
        executor = RetryExecutor(
            Classifier(taxonomy, clock),
            Attempts(Endpoints(clock, circuits)),
            clock,
            rng=random.Random(1),
            hooks=hooks,
        )
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            pipeline = RequestPipeline(client, executor, tokens=tokens)

            async def call(i: int) -> None:
                ctx = SessionContext(f"cx-{i}", Platform.CXONE, Channel.REST)
                try:
                    response = await pipeline.request(
                        "GET",
                        f"http://api.test/inContactAPI/services/v23.0/agent-sessions/s-{i}/get-next-event",
                        ctx=ctx,
                        circuit=EndpointId(Platform.CXONE, "api"),
                    )
                    statuses[i] = response.status_code
                except CircuitOpenError:
                    statuses[i] = -1

            async with anyio.create_task_group() as tg:
                for i in range(sessions):
                    tg.start_soon(call, i)
        states.append(circuits.get(EndpointId(Platform.CXONE, "api")).state.value)

    anyio.run(main)
    return statuses, states[0]


@pytest.mark.parametrize("taxonomy", [SHIPPED_V2, V2_RENAMED], ids=["v2", "v2-renamed"])
def test_token_expiry_replays_do_not_open_the_circuit_whatever_the_code_is_called(taxonomy: Taxonomy) -> None:
    statuses, state = _expiry_storm(taxonomy, 8)
    assert statuses == [200] * 8 and state == "closed"  # every replay admitted, nobody paused


def test_without_the_flag_token_expiries_open_the_circuit_for_everyone() -> None:
    """v1 (no circuitNeutral): the fifth lapse opens the circuit; the replays after it are refused."""
    statuses, state = _expiry_storm(V1, 8)
    assert sorted(statuses) == [-1] * 4 + [200] * 4 and state == "open"


def test_v2_flags_token_expired_circuit_neutral_and_v1_does_not() -> None:
    v1, v2 = V1.codes["TOKEN_EXPIRED"], SHIPPED_V2.codes["TOKEN_EXPIRED"]
    assert (v1.circuit_neutral, v2.circuit_neutral) == (False, True)
    event = Classifier(SHIPPED_V2).classify(
        RawError(
            platform=Platform.CXONE,
            channel=Channel.REST,
            status=401,
            body={"error": "invalid_token"},
            context={"tokenWithinRefreshWindow": True},
        )
    )
    assert event.circuit_neutral and event.as_json()["circuitNeutral"] is True
    assert (
        "circuitNeutral"
        not in Classifier(V1)
        .classify(
            RawError(
                platform=Platform.CXONE, channel=Channel.REST, status=401, context={"tokenExpired": True}
            )
        )
        .as_json()
    )


def test_a_circuit_neutral_flag_on_a_code_that_never_counts_is_refused_with_its_location() -> None:
    with pytest.raises(
        TaxonomyError, match=re.escape("bad.toml: codes.FORBIDDEN.circuitNeutral: only a TRANSIENT")
    ):
        compile_taxonomy(_with("FORBIDDEN", "circuitNeutral = true"), "bad.toml")


def test_taxonomy_diff_shows_the_circuit_neutral_flag() -> None:
    changes = {c.code: c for c in diff_codes(V1, SHIPPED_V2)}
    change = changes["TOKEN_EXPIRED"]
    assert change.before is not None and change.after is not None
    assert (change.before["circuitNeutral"], change.after["circuitNeutral"]) == (False, True)
