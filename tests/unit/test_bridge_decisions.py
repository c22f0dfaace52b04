"""The bridge's pure parts: the tokens file, the scope of a record, the limit of failed
authentications, a client's outbox (docs/bridge.md). The clock is the test's."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from supervisor.bridge.outbox import Outbox
from supervisor.bridge.ratelimit import FailureLimiter
from supervisor.bridge.routing import Mirror, Route
from supervisor.bridge.tokens import Scope, parse_tokens
from supervisor.errors import ConfigError


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


# ---------------------------------------------------------------------------- tokens


def test_a_token_is_found_by_its_digest_and_only_so() -> None:
    text = "\n".join(
        [
            "# desktops",
            json.dumps({"sha256": digest("t-1"), "agents": ["a-1"]}),
            "",
            json.dumps({"sha256": digest("t-2"), "sessions": ["wm-9"], "platform": True}),
        ]
    )
    tokens = parse_tokens(text, "tokens")
    assert len(tokens) == 2 and tokens.any_platform
    assert tokens.scope_of("t-1") == Scope(frozenset({"a-1"}), frozenset())
    assert tokens.scope_of("t-2") == Scope(frozenset(), frozenset({"wm-9"}), platform=True)
    assert tokens.scope_of(digest("t-1")) is None  # the digest itself is not a token
    assert tokens.scope_of("t-3") is None


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("not json", "line 2: not a JSON object"),
        ("[1]", "line 2: not a JSON object"),
        (json.dumps({"sha256": "secret-pasted-here", "agents": ["a"]}), "line 2: 'sha256' must be the 64"),
        (json.dumps({"sha256": digest("x").upper(), "agents": ["a"]}), "line 2: 'sha256' must be the 64"),
        (json.dumps({"sha256": digest("x"), "agents": "a-1"}), "line 2: 'agents' must be a list"),
        (json.dumps({"sha256": digest("x"), "agents": [""]}), "line 2: 'agents' must be a list"),
        (json.dumps({"sha256": digest("x")}), "line 2: names no agent and no session"),
        (json.dumps({"sha256": digest("x"), "agent": ["a"]}), "line 2: unknown key 'agent'"),
        (json.dumps({"sha256": digest("x"), "agents": ["a"], "platform": 1}), "line 2: 'platform' must be"),
        (json.dumps({"sha256": digest("ok"), "agents": ["b"]}), "line 2: the same sha256 as an earlier line"),
    ],
)
def test_a_bad_line_is_named_by_its_number_never_its_content(line: str, problem: str) -> None:
    first = json.dumps({"sha256": digest("ok"), "agents": ["a"]})
    with pytest.raises(ConfigError) as raised:
        parse_tokens(f"{first}\n{line}\n", "/etc/bridge-tokens")
    assert str(raised.value).startswith(f"/etc/bridge-tokens {problem}")
    assert "secret-pasted-here" not in str(raised.value)


# ---------------------------------------------------------------------------- scope


AGENT_A = Scope(frozenset({"a-1"}), frozenset())
BY_ID = Scope(frozenset(), frozenset({"wm-new"}))
PLATFORM_A = Scope(frozenset({"a-1"}), frozenset(), platform=True)


def snapshot(*rows: tuple[str, str | None]) -> dict[str, Any]:
    return {
        "type": "snapshot",
        "bootId": "b-1",
        "seq": 5,
        "sessions": [{"sessionId": s, "state": "active", "agentId": a} for s, a in rows],
    }


def test_a_delta_goes_by_the_agent_the_snapshot_gave_its_session() -> None:
    mirror = Mirror()
    assert mirror.apply(snapshot(("wm-1", "a-1"), ("wm-2", "a-2"))).route is Route.SNAPSHOT
    assert [r["sessionId"] for r in mirror.snapshot_for(AGENT_A)["sessions"]] == ["wm-1"]
    mine = mirror.apply({"type": "delta", "seq": 6, "sessionId": "wm-1", "state": "reconnecting", "at": "t"})
    theirs = mirror.apply(
        {"type": "delta", "seq": 7, "sessionId": "wm-2", "state": "reconnecting", "at": "t"}
    )
    assert mine.allows(AGENT_A) and not theirs.allows(AGENT_A)
    assert mirror.snapshot_for(AGENT_A) == {
        "type": "snapshot",
        "bootId": "b-1",
        "seq": 7,
        "sessions": [{"sessionId": "wm-1", "state": "reconnecting", "agentId": "a-1", "since": "t"}],
    }


def test_a_session_with_no_known_agent_is_visible_only_by_its_id() -> None:
    mirror = Mirror()
    mirror.apply(snapshot(("wm-1", "a-1")))
    # added since the snapshot: a delta names no agent
    new = mirror.apply({"type": "delta", "seq": 6, "sessionId": "wm-new", "state": "connecting", "at": "t"})
    assert new.agent_id is None and not new.allows(AGENT_A) and new.allows(BY_ID)
    # a session with no agent at all (the snapshot's agentId null) likewise
    mirror.apply(snapshot(("wm-1", "a-1"), ("wm-none", None)))
    orphan = mirror.apply({"type": "delta", "seq": 6, "sessionId": "wm-none", "state": "active", "at": "t"})
    assert not orphan.allows(AGENT_A) and not orphan.allows(Scope(frozenset({""}), frozenset()))
    # an event that names the new session's agent teaches it; later deltas follow it
    ended = {
        "type": "event",
        "event": "SESSION_TERMINATED",
        "sessionId": "wm-new",
        "agentId": "a-1",
        "seq": 8,
    }
    assert mirror.apply(ended).allows(AGENT_A)
    again = mirror.apply({"type": "delta", "seq": 9, "sessionId": "wm-new", "state": "terminated", "at": "t"})
    assert again.allows(AGENT_A)


def test_a_record_never_moves_a_session_to_another_agent() -> None:
    mirror = Mirror()
    mirror.apply(snapshot(("cx-1", "a-2")))
    # a CXone platform record carries the event's own AgentId, which may be another agent's
    record = {"type": "platform", "sessionId": "cx-1", "agentId": "a-1", "sessionSeq": 1, "body": {}}
    routed = mirror.apply(record)
    assert routed.route is Route.PLATFORM and not routed.allows(PLATFORM_A)
    assert mirror.agent_of("cx-1") == "a-2"


def test_platform_records_go_only_to_tokens_allowed_the_stream() -> None:
    mirror = Mirror()
    mirror.apply(snapshot(("wm-1", "a-1")))
    routed = mirror.apply({"type": "gap", "sessionId": "wm-1", "agentId": "a-1", "fromSeq": 1})
    assert routed.allows(PLATFORM_A) and not routed.allows(AGENT_A)


def test_the_termination_and_a_start_again_reach_the_mirror() -> None:
    mirror = Mirror()
    mirror.apply(snapshot(("wm-1", "a-1")))
    mirror.apply(
        {
            "type": "event",
            "event": "SESSION_TERMINATED",
            "sessionId": "wm-1",
            "agentId": "a-1",
            "reason": "STOPPED",
            "trigger": None,
            "action": "REVOKE_LOCAL_STORAGE_AND_REAUTHENTICATE",
            "timestamp": "t1",
            "seq": 6,
        }
    )
    (row,) = mirror.snapshot_for(AGENT_A)["sessions"]
    assert row["termination"] == {
        "reason": "STOPPED",
        "trigger": None,
        "code": None,
        "action": "REVOKE_LOCAL_STORAGE_AND_REAUTHENTICATE",
        "at": "t1",
    }
    mirror.apply({"type": "delta", "seq": 7, "sessionId": "wm-1", "state": "connecting", "reason": "STARTED"})
    (row,) = mirror.snapshot_for(AGENT_A)["sessions"]
    assert "termination" not in row and row["state"] == "connecting"


def test_lagged_and_end_go_to_everyone_and_an_event_of_no_session_to_nobody() -> None:
    mirror = Mirror()
    assert mirror.apply({"type": "lagged", "count": 3}).allows(BY_ID)
    assert mirror.apply({"type": "end", "reason": "daemon stopping"}).route is Route.END
    assert not mirror.apply({"type": "event", "event": "CIRCUIT_TRANSITION", "seq": 1}).allows(AGENT_A)


# ---------------------------------------------------------------------------- the limit


def test_failures_are_limited_per_address_and_refill_with_time() -> None:
    limiter = FailureLimiter(burst=3, rate=0.5)
    for _ in range(3):
        assert limiter.allows("10.0.0.1", 0.0)
        limiter.failed("10.0.0.1", 0.0)
    assert not limiter.allows("10.0.0.1", 1.0)  # half a token back: not yet
    assert limiter.allows("10.0.0.2", 1.0)  # another address is not affected
    assert limiter.allows("10.0.0.1", 2.0)  # one token back
    limiter.failed("10.0.0.1", 2.0)
    assert not limiter.allows("10.0.0.1", 2.5)
    assert (limiter.failures, limiter.refused) == (4, 2)


def test_the_table_of_addresses_is_bounded() -> None:
    limiter = FailureLimiter(burst=1, rate=1.0, max_addresses=2)
    limiter.failed("a", 0.0)
    limiter.failed("b", 0.0)
    assert not limiter.allows("c", 0.5)  # full, and nobody has refilled
    assert limiter.allows("c", 1.0)  # a and b are full again: forgotten, room made


# ---------------------------------------------------------------------------- outbox


def test_a_client_over_its_cap_gets_lagged_then_a_fresh_snapshot() -> None:
    outbox = Outbox(cap_bytes=10)
    assert not outbox.push(b"aaaa", 4, 0.0)
    assert not outbox.push(b"bbbb", 4, 0.1)
    assert outbox.push(b"cccc", 4, 0.2)  # 12 > 10: everything pending dropped
    assert not outbox.push(b"dddd", 4, 0.3)  # dropped too, counted
    assert outbox.lagging and not outbox.overdue(10.1, 10.0) and outbox.overdue(10.2, 10.0)
    assert outbox.take(lambda: b"SNAP") == [b'{"type":"lagged","count":4}', b"SNAP"]
    assert not outbox.lagging and not outbox.overdue(99.0, 10.0)
    assert not outbox.push(b"eeee", 4, 1.0)
    assert outbox.take(lambda: b"SNAP") == [b"eeee"]
