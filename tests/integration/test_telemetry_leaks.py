"""No secret leaves in telemetry (docs/telemetry.md): a full storm-plus-token-rotation run, scanned on the wire.

Genesys Web Messaging sessions and a CXone agent session (client secrets, a password, a
collector API key configured) go through a mass drop, a token rotation with a replay, a
CXone token revoked under a poll (a fail-fast), and a call whose route template carries a
planted token. Everything the receiver got is scanned: span names, attributes, events,
links, resources and metric labels, and the raw protobuf bytes for every configured secret
and every token the simulators issued.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.trace import SpanContext, TraceFlags

from supervisor.clock import FakeClock
from supervisor.sim.cxone import CxoneSimulator
from supervisor.sim.faults import Fault, FaultKind
from supervisor.sim.genesys import GenesysSimConfig, GenesysSimulator
from supervisor.telemetry import Telemetry
from supervisor.telemetry.scrub import REDACTED
from supervisor.vocabulary import Platform
from tests.integration.otlp_receiver import OtlpReceiver
from tests.integration.telemetry_harness import (
    COLLECTOR_TOKEN,
    CXONE_SECRET,
    GENESYS_SECRET,
    settings_for,
    traced,
)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.anyio,
    pytest.mark.genesys_sim(GenesysSimConfig(token_ttl_s=300), seed=9, fake_clock=True),
    pytest.mark.cxone_sim(seed=9),
]

LEAK = re.compile(r"Bearer |eyJ[\w-]{10,}|access_token|client_secret")
PLANTED = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJsZWFrIn0.c2lnbmF0dXJl"
PASSWORD = "cxone-password-value-2b71"


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    server = OtlpReceiver()
    yield server
    server.stop()


def config_text(g: dict[str, str], c: dict[str, str], conversation: str) -> str:
    lines = [
        "[daemon]",
        "seed = 9",
        "shutdownGrace = 2.0",
        "[reconnect]",
        "firstDelayMin = 0.1",
        "firstDelayMax = 0.3",
        "[tokens]",
        "earlyRefresh = 0.0",
        "[platforms.genesys]",
        f'loginUrl = "{g["login"]}"',
        f'apiUrl = "{g["api"]}"',
        f'webmessagingUrl = "{g["webmessaging"]}"',
        'clientId = "leak-client"',
        'clientSecretFile = "genesys-secret"',
        'deploymentId = "dep-1"',
        "[platforms.genesys.keepalive]",
        "echoInterval = 0",
        "[platforms.cxone]",
        f'authUrl = "{c["auth"]}"',
        'clientId = "app@vendor"',
        'clientSecretFile = "cxone-secret"',
        'username = "agent@example.com"',
        'passwordFile = "cxone-password"',
        "pollTimeout = 1",
        "pollWatchdog = 5.0",
    ]
    for i in range(3):
        lines += ["[[sessions]]", f'id = "wm-{i}"', 'platform = "genesys"', 'kind = "webmessaging"']
        if i == 0:  # a guest learns no conversation (docs/taxonomy.md): the configuration names it
            lines.append(f'conversationId = "{conversation}"')
    lines += [
        "[[sessions]]",
        'id = "cx-0"',
        'platform = "cxone"',
        'kind = "agent-session"',
        'stationId = "st-0"',
    ]
    return "\n".join(lines) + "\n"


def strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, tuple | list):
        for v in value:
            yield from strings(v)
    elif isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from strings(v)


def everything(receiver: OtlpReceiver) -> Iterator[str]:
    """Every string the collector received, decoded."""
    for span in receiver.spans:
        yield span.name
        yield from strings(span.attributes)
        yield from strings(span.resource)
        for name, attrs, _ in span.events:
            yield name
            yield from strings(attrs)
        for _, _, attrs in span.links:
            yield from strings(attrs)
    for point in receiver.points:
        yield point.metric
        yield from strings(point.attributes)


async def test_a_storm_with_token_rotation_leaks_no_secret(
    genesys_sim: GenesysSimulator,
    cxone_sim: CxoneSimulator,
    clock: FakeClock,
    tmp_path: Path,
    receiver: OtlpReceiver,
) -> None:
    (tmp_path / "cxone-password").write_text(PASSWORD)
    seen_tokens: set[str] = set()
    async with traced(
        config_text(genesys_sim.urls, cxone_sim.urls, genesys_sim.create_conversation().id),
        tmp_path,
        receiver,
        clock=clock,
    ) as h:
        await h.wait(lambda: len(h.runners) == 4 and h.all_in("active"), 15)
        # the storm: every Web Messaging socket dropped at once
        before = sum(r.connects for r in h.runners.values())
        genesys_sim.faults.inject(Fault(kind=FaultKind.DROP))
        await h.wait(lambda: sum(r.connects for r in h.runners.values()) >= before + 3 and h.all_in("active"))
        # token rotation with a replay (seed edge case 3)
        cid = h.runners["wm-0"].context.conversation_id
        url = genesys_sim.urls["api"] + f"/api/v2/conversations/{cid}"
        await h.supervisor.request("wm-0", "GET", url)
        tokens = h.supervisor.wiring.tokens
        old = tokens[Platform.GENESYS].current
        assert old is not None
        seen_tokens.add(old.access.reveal())
        clock.set(old.expires_at - 1.0)
        armed = [True]

        async def expire_in_flight(request: httpx.Request) -> None:
            if armed[0] and request.method == "GET":
                armed[0] = False
                clock.advance(2.0)

        h.supervisor.wiring.pipelines[Platform.GENESYS].client.event_hooks = {
            "request": [expire_in_flight],
            "response": [],
        }
        await h.supervisor.request("wm-0", "GET", url)
        assert tokens[Platform.GENESYS].refreshes == 1
        # a careless caller's route template carrying a token: the scrubber must catch it
        await h.supervisor.request("wm-0", "GET", url, route=f"/api/v2/conversations?access_token={PLANTED}")
        # CXone: its token revoked under a poll: OAUTH_TOKEN_INVALID ends that session
        for cache in tokens.values():
            if cache.current is not None:
                seen_tokens.add(cache.current.access.reveal())
        cxone_sim.revoke_tokens()
        await h.wait(lambda: h.runners["cx-0"].state.value == "terminated", 15)
        for cache in tokens.values():
            if cache.current is not None:
                seen_tokens.add(cache.current.access.reveal())
        assert await h.flush()
    # the harness stopped every session and closed telemetry (its final flush) on the way out

    assert receiver.named("session.reconnecting")
    assert [s for s in receiver.spans if s.attr("session_supervisor.resend.reason") == "token_replay"]
    planted = [s for s in receiver.spans if "[REDACTED]" in str(s.attr("url.template", ""))]
    assert sorted(s.kind for s in planted) == ["CLIENT", "INTERNAL"]  # the operation and its attempt
    terminated = [
        s for s in receiver.spans if s.attr("session_supervisor.termination.trigger") == "OAUTH_TOKEN_INVALID"
    ]
    assert terminated
    # the CXone session's rolling platform session id travels with its spans (correlation)
    platform_ids = {
        s.attr("session_supervisor.platform_session.id")
        for s in receiver.spans
        if s.attr("session.id") == "cx-0"
    }
    assert platform_ids - {None}

    issued = set(genesys_sim.state.tokens) | set(genesys_sim.state.refresh_tokens)
    issued |= set(cxone_sim.tokens._by_access) | set(cxone_sim.tokens._by_refresh)
    secrets = {GENESYS_SECRET, CXONE_SECRET, PASSWORD, COLLECTOR_TOKEN, PLANTED, *issued, *seen_tokens}
    assert len(issued) >= 3
    texts = list(everything(receiver))
    assert len(texts) > 1000
    for text in texts:
        assert not LEAK.search(text), text
        for secret in secrets:
            assert secret not in text
    raw = b"".join(receiver.raw)
    for secret in secrets:
        assert secret.encode() not in raw
    assert not re.search(rb"Bearer |eyJ[\w-]{10,}|access_token|client_secret", raw)


async def test_the_scrubber_redacts_what_reaches_the_exporter(receiver: OtlpReceiver) -> None:
    """Defence in depth, through the real exporter: a span carrying secrets arrives redacted."""
    telemetry = Telemetry(settings_for(receiver.url), boot_id="leak-test", secrets=["configured-secret-99"])
    span = ReadableSpan(
        name=f"GET /x?access_token={PLANTED}",
        context=SpanContext(1, 2, False, TraceFlags(TraceFlags.SAMPLED)),
        resource=Resource({}),
        attributes={
            "header": "Authorization: Bearer abc.def",
            "basic": "Basic dXNlcjpwYXNzd29yZA==",
            "body": '{"client_secret": "s3", "refresh_token":"r1"}',
            "url": "https://user:pa55@example.com/path",
            "configured": "the value configured-secret-99 leaked",
            "list": ("ok", f"jwt {PLANTED}"),
            "count": 3,
        },
        events=[Event("e", {"password": "password=hunter2"}, 1)],
        start_time=1,
        end_time=2,
    )
    exporter = telemetry.pipeline.spans
    assert exporter is not None
    assert exporter.export([span]) is SpanExportResult.SUCCESS
    await telemetry.close(5.0)
    (got,) = receiver.spans
    assert got.name == f"GET /x?{REDACTED}"
    assert got.attributes == {
        "header": f"Authorization: {REDACTED}",
        "basic": REDACTED,
        "body": f'{{"{REDACTED}", "{REDACTED}"}}',
        "url": "https://REDACTED:REDACTED@example.com/path",
        "configured": f"the value {REDACTED} leaked",
        "list": ("ok", f"jwt {REDACTED}"),
        "count": 3,
    }
    assert got.events[0][1] == {REDACTED: REDACTED}
