"""The scrubber's patterns, and the bus stamping traceId/spanId on the JSON lines (docs/telemetry.md)."""

from __future__ import annotations

import io
import json

import pytest

from supervisor.bus import EventBus, JsonLineSink
from supervisor.events import Correlation, DaemonStopping, Event, Published, RetryAttempt, RetryKind, wire
from supervisor.telemetry.scrub import REDACTED, Scrubber

JWT = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiIxMjMifQ.sig-nature_x"


@pytest.mark.parametrize(
    ("text", "clean"),
    [
        ("Authorization: Bearer abc.def-ghi", f"Authorization: {REDACTED}"),
        ("bearer xyz", REDACTED),
        ("Basic dXNlcjpwYXNz", REDACTED),
        (f"token {JWT} end", f"token {REDACTED} end"),
        ("/cb?access_token=abc&x=1", f"/cb?{REDACTED}&x=1"),
        ("grant_type=refresh_token&refresh_token=r-1", f"grant_type={REDACTED}&{REDACTED}"),
        ('{"client_secret":"s"}', f'{{"{REDACTED}"}}'),
        ("password: hunter2", REDACTED),
        ("guest_token=u-u-i-d", REDACTED),
        ("https://me:pw@example.com/x", "https://REDACTED:REDACTED@example.com/x"),
        ("RATE_LIMITED", "RATE_LIMITED"),
        ("/api/v2/conversations/{conversationId}", "/api/v2/conversations/{conversationId}"),
        ("agent-session.poll", "agent-session.poll"),
    ],
)
def test_patterns(text: str, clean: str) -> None:
    assert Scrubber().text(text) == clean


def test_configured_secrets_are_removed_whole_and_short_ones_ignored() -> None:
    scrubber = Scrubber(["abcdef-secret", "abcdef-secret-longer", "abc"])
    assert scrubber.text("x abcdef-secret-longer y abcdef-secret z") == f"x {REDACTED} y {REDACTED} z"
    assert scrubber.text("abc is a word") == "abc is a word"  # under 6 characters: would redact words
    assert scrubber.value(("ok", "abcdef-secret", 3)) == ("ok", REDACTED, 3)
    assert scrubber.attributes({"n": 1, "b": True, "s": "abcdef-secret"}) == {
        "n": 1,
        "b": True,
        "s": REDACTED,
    }


class _Stamp:
    def __init__(self, ids: tuple[str, str] | None) -> None:
        self.ids = ids
        self.asked: list[tuple[Event, Correlation | None]] = []

    def __call__(self, event: Event, correlation: Correlation | None) -> tuple[str, str] | None:
        self.asked.append((event, correlation))
        return self.ids


def _retry() -> RetryAttempt:
    return RetryAttempt(
        "wm-1", RetryKind.RECONNECT, 1, 2.5, "ABNORMAL_CLOSURE", "network", "2026-01-01T00:00:00.000Z"
    )


def test_the_bus_stamps_the_span_of_each_event_and_the_line_carries_it() -> None:
    stamp = _Stamp(("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"))
    stream = io.StringIO()
    bus = EventBus("boot-1", trace_context=stamp)
    bus.subscribe(JsonLineSink(stream))
    correlation = Correlation("wm-1", agent_id="a-1")
    published = bus.publish(_retry(), correlation)
    assert (published.trace_id, published.span_id) == stamp.ids
    assert stamp.asked == [(published.event, correlation)]
    line = json.loads(stream.getvalue())
    assert line["traceId"] == "0af7651916cd43dd8448eb211c80319c" and line["spanId"] == "b7ad6b7169203331"
    # camelCase names kept; the ids come just before seq and bootId
    assert list(line)[-4:] == ["traceId", "spanId", "seq", "bootId"]
    assert line["sessionId"] == "wm-1" and line["agentId"] == "a-1" and line["delayS"] == 2.5


def test_no_span_no_ids_and_a_failing_provider_never_breaks_publishing() -> None:
    assert "traceId" not in wire(Published(1, "b", DaemonStopping(10.0)))
    bus = EventBus("boot-1", trace_context=_Stamp(None))
    assert "traceId" not in wire(bus.publish(DaemonStopping(10.0)))

    def broken(event: Event, correlation: Correlation | None) -> tuple[str, str] | None:
        raise RuntimeError("telemetry bug")

    seen: list[Published] = []
    bus = EventBus("boot-1", trace_context=broken)
    bus.subscribe(seen.append)
    bus.publish(_retry())
    assert len(seen) == 1 and seen[0].trace_id is None
    assert bus.sink_failures == 1
