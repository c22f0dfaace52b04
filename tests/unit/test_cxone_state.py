"""Pure CXone simulator state: sessions, the rolling sessionId chain, events, tokens (fake clock)."""

from __future__ import annotations

import random

import pytest

from supervisor.clock import FakeClock
from supervisor.sim.cxone.config import CxoneSimConfig
from supervisor.sim.cxone.state import (
    STALE_HISTORY,
    EndReason,
    PollOutcome,
    SessionStore,
    SimStateError,
    iso_utc,
)
from supervisor.sim.cxone.tokens import GrantError, TokenStatus, TokenStore


@pytest.fixture
def woken() -> list[str]:
    return []


@pytest.fixture
def store(clock: FakeClock, woken: list[str]) -> SessionStore:
    return SessionStore(clock, random.Random(1), default_inactivity_timeout=300, on_change=woken.append)


def types(events: tuple[dict[str, str], ...]) -> list[str]:
    return [e["Type"] for e in events]


def started(store: SessionStore, agent: str = "100001") -> str:
    """Start a session and drain its first poll; returns the id to poll next."""
    session = store.start(agent, "4600001", station_phone="5551234")
    first = store.poll(session.key)
    assert first.next_id is not None
    return first.next_id


def test_start_queues_session_start_and_agent_state(store: SessionStore) -> None:
    """The first poll delivers AgentSessionStart + AgentState with a new sessionId."""
    session = store.start("100001", "4600001", station_id="st-1")
    result = store.poll(session.key)
    assert result.outcome is PollOutcome.EVENTS
    assert types(result.events) == ["AgentSessionStart", "AgentState"]
    assert result.next_id not in (None, session.key)
    start = result.events[0]
    assert start["AgentId"] == "100001"
    assert start["BusNo"] == "4600001"
    assert start["CanMask"] == "False"
    assert result.events[1]["CurrentState"] == "Unavailable"


def test_every_event_answer_rotates_the_session_id(store: SessionStore) -> None:
    """Each 200 carries a new sessionId; an idle poll (304) keeps the current one."""
    sid = started(store)
    assert store.poll(sid).outcome is PollOutcome.IDLE
    store.set_state(sid, "Available")
    result = store.poll(sid)
    assert result.outcome is PollOutcome.EVENTS
    assert result.next_id != sid
    assert types(result.events) == ["AgentState"]
    assert result.events[0]["CurrentState"] == "Available"
    assert store.poll(result.next_id or "").outcome is PollOutcome.IDLE


def test_stale_id_replays_start_and_snapshot(store: SessionStore) -> None:
    """Polling with a superseded id replays AgentSessionStart + AgentState + open contacts."""
    old = started(store)
    session = store.session(old)
    contact = store.push_contact(session.key)
    current = store.poll(old).next_id
    assert current is not None
    store.set_state(current, "Unavailable", "Lunch")
    replay = store.poll(old)
    assert replay.outcome is PollOutcome.REPLAY
    assert types(replay.events) == ["AgentSessionStart", "AgentState", "CallContactEvent"]
    assert replay.events[1]["CurrentOutReason"] == "Lunch"
    assert replay.events[2]["ContactID"] == contact.contact_id
    # the replay supersedes the queue and becomes the chain's head
    assert replay.next_id is not None
    assert store.poll(replay.next_id).outcome is PollOutcome.IDLE
    assert store.poll(current).outcome is PollOutcome.REPLAY


def test_force_replay_on_the_current_id(store: SessionStore) -> None:
    """The STALE_SESSION fault path: a current id answered as if stale."""
    sid = started(store)
    result = store.poll(sid, force_replay=True)
    assert result.outcome is PollOutcome.REPLAY
    assert result.next_id != sid


def test_unknown_id_and_forgotten_history(store: SessionStore) -> None:
    """Ids never issued are UNKNOWN; only the last STALE_HISTORY ids stay replayable."""
    assert store.poll("nope").outcome is PollOutcome.UNKNOWN
    first = started(store)
    sid = first
    for _ in range(STALE_HISTORY + 1):
        store.set_state(sid, "Available")
        sid = store.poll(sid).next_id or ""
    assert store.poll(first).outcome is PollOutcome.UNKNOWN


def test_end_delivers_agent_session_end_once_then_409(store: SessionStore) -> None:
    """DELETE: the final 200 carries AgentSessionEnd; every later poll is ENDED (409)."""
    sid = started(store)
    store.set_state(sid, "Available")
    store.end(sid)
    final = store.poll(sid)
    assert final.outcome is PollOutcome.EVENTS
    assert types(final.events) == ["AgentState", "AgentSessionEnd"]
    assert store.poll(final.next_id or "").outcome is PollOutcome.ENDED
    assert store.poll(sid).outcome is PollOutcome.ENDED
    with pytest.raises(SimStateError) as info:
        store.set_state(sid, "Available")
    assert info.value.status == 409
    with pytest.raises(SimStateError):
        store.end(sid)


def test_silent_end_is_409_at_once(store: SessionStore) -> None:
    """The SESSION_ENDED fault: no final 200, the next poll is already 409."""
    sid = started(store)
    store.end(sid, EndReason.FORCED, silent=True)
    assert store.poll(sid).outcome is PollOutcome.ENDED


def test_inactivity_timeout_ends_the_session(store: SessionStore, clock: FakeClock) -> None:
    """No request for inactivityTimeout seconds ends the session (checked lazily)."""
    session = store.start("100001", "4600001", station_id="st", inactivity_timeout=30)
    sid = store.poll(session.key).next_id or ""
    clock.advance(29)
    assert store.poll(sid).outcome is PollOutcome.IDLE  # activity: the clock restarts
    clock.advance(29)
    store.touch(sid)  # keep-alive also counts
    clock.advance(31)
    final = store.poll(sid)
    assert types(final.events) == ["AgentSessionEnd"]
    assert final.events[0]["Reason"] == "inactivity"
    assert session.ended is EndReason.INACTIVITY


def test_sweep_ends_idle_sessions(store: SessionStore, clock: FakeClock) -> None:
    """sweep() ends the idle sessions and reports their keys."""
    a = store.start("1", "4600001", station_id="s", inactivity_timeout=10)
    store.start("2", "4600001", station_id="s", inactivity_timeout=0)  # 0 disables it
    clock.advance(11)
    assert store.sweep() == [a.key]


def test_start_needs_a_station_and_one_session_per_agent(store: SessionStore) -> None:
    """400 without station; 409 for a second live session; a new one after the end."""
    with pytest.raises(SimStateError) as info:
        store.start("100001", "4600001")
    assert info.value.status == 400
    first = store.start("100001", "4600001", station_id="s")
    with pytest.raises(SimStateError) as info:
        store.start("100001", "4600001", station_id="s")
    assert info.value.status == 409
    store.end(first.key)
    assert store.start("100001", "4600001", station_id="s").key != first.key


def test_join_gets_its_own_chain_and_broadcast_events(store: SessionStore, woken: list[str]) -> None:
    """A joined handle has its own ids; events reach both pollers; on_change names the handle."""
    sid = started(store)
    handle = store.join("100001")
    joined = store.poll(handle.current_id)
    assert types(joined.events) == ["AgentSessionStart", "AgentState"]
    woken.clear()
    store.set_state(sid, "Available")
    assert sorted(woken) == sorted([store.session(sid).key, handle.key])
    assert types(store.poll(sid).events) == ["AgentState"]
    assert types(store.poll(joined.next_id or "").events) == ["AgentState"]
    with pytest.raises(SimStateError) as info:
        store.join("999")
    assert info.value.status == 404


def test_contact_lifecycle(store: SessionStore) -> None:
    """accept → hold → resume → end, each a CallContactEvent; wrong moves are 409, unknown 404."""
    sid = started(store)
    key = store.session(sid).key
    contact = store.push_contact(key)
    result = store.poll(sid)
    sid = result.next_id or ""
    event = result.events[0]
    assert event["Type"] == "CallContactEvent"
    assert event["Status"] == "Incoming"
    assert event["IsInbound"] == "True"
    assert event["FinalState"] == "False"
    with pytest.raises(SimStateError) as info:
        store.contact_action(sid, contact.contact_id, "hold")
    assert info.value.status == 409
    for action, status in [("accept", "Active"), ("hold", "Holding"), ("resume", "Active")]:
        store.contact_action(sid, contact.contact_id, action)
        result = store.poll(sid)
        sid = result.next_id or ""
        assert result.events[-1]["Status"] == status
    store.contact_action(sid, contact.contact_id, "end")
    last = store.poll(sid).events[-1]
    assert last["Status"] == "Disconnected"
    assert last["FinalState"] == "True"
    for contact_id, action in [(contact.contact_id, "accept"), ("404", "accept"), (contact.contact_id, "x")]:
        with pytest.raises(SimStateError) as info:
            store.contact_action(sid, contact_id, action)
        assert info.value.status == 404


def test_set_state_rejects_unknown_states(store: SessionStore) -> None:
    """Only Available / Unavailable are accepted (400 otherwise)."""
    sid = started(store)
    with pytest.raises(SimStateError) as info:
        store.set_state(sid, "Busy")
    assert info.value.status == 400


def test_ids_are_deterministic_per_seed(clock: FakeClock) -> None:
    """The same seed gives the same ids (reproducible runs)."""
    a = SessionStore(clock, random.Random(5)).start("1", "1", station_id="s").key
    b = SessionStore(clock, random.Random(5)).start("1", "1", station_id="s").key
    assert a == b


def test_iso_utc() -> None:
    """Event timestamps are ISO 8601 UTC with milliseconds."""
    assert iso_utc(1_715_679_131.004) == "2024-05-14T09:32:11.004Z"
    assert iso_utc(0.9996) == "1970-01-01T00:00:01.000Z"


# ------------------------------------------------------------------------------------ tokens


def test_token_lifecycle(clock: FakeClock) -> None:
    """Issue → valid until the TTL → expired; refresh rotates; revoke kills refresh too."""
    tokens = TokenStore(clock, random.Random(1))
    token = tokens.issue(client_id="app@vendor", user="u", scope="s", ttl_s=60, refresh_uri="/r")
    assert token.agent_id == 100001
    assert tokens.agent_id_for("u") == 100001
    assert tokens.check(token.access_token)[0] is TokenStatus.VALID
    assert tokens.check(None)[0] is TokenStatus.MISSING
    assert tokens.check("x")[0] is TokenStatus.UNKNOWN
    clock.advance(60)
    assert tokens.check(token.access_token)[0] is TokenStatus.EXPIRED
    fresh = tokens.refresh(token.refresh_token, ttl_s=60)
    assert fresh.agent_id == token.agent_id
    assert fresh.access_token != token.access_token
    with pytest.raises(GrantError):
        tokens.refresh(token.refresh_token, ttl_s=60)  # single use
    assert tokens.revoke(fresh.access_token)
    assert tokens.check(fresh.access_token)[0] is TokenStatus.REVOKED
    with pytest.raises(GrantError):
        tokens.refresh(fresh.refresh_token, ttl_s=60)
    assert tokens.counts() == {"issued": 2, "revoked": 1, "live": 0}


def test_expire_all_and_revoke_all(clock: FakeClock) -> None:
    """Bulk helpers count only live tokens."""
    tokens = TokenStore(clock, random.Random(1))
    a = tokens.issue(client_id="c", user="a", scope="s", ttl_s=60, refresh_uri="/r")
    tokens.issue(client_id="c", user="b", scope="s", ttl_s=60, refresh_uri="/r")
    assert tokens.expire_all() == 2
    assert tokens.live() == []
    tokens.refresh(a.refresh_token, ttl_s=60)
    assert tokens.revoke_all() == 3  # expired ones too: their refresh tokens die


def test_config_validation() -> None:
    """Nonsense config values are refused at construction."""
    with pytest.raises(ValueError, match="token_ttl_s"):
        CxoneSimConfig(token_ttl_s=0)
    with pytest.raises(ValueError, match="max_age_s"):
        CxoneSimConfig(max_age_s=-1)
