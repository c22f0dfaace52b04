"""What the subscribe socket says: the subscription a client asks for, and the messages it gets. Pure.

A subscription is a filter (platforms, states, session ids, agent ids, platform event types; each
absent or a list), a list of opt-in event streams and, for the ``platform`` stream, ``since``: per
session the bootId and the last ``sessionSeq`` the client saw. The messages, each a reply's
``parameters`` with a ``type`` (docs/socket-api.md, "Messages"):

* ``snapshot``: ``{bootId, seq, sessions: [...]}``, every matching session as of bus ``seq``;
* ``delta``: one session's state change, with the bus ``seq`` of the transition it reflects
  and the state the subscriber saw before (``previous``);
* ``event``: an opt-in stream's event in its wire form (supervisor/events/base.py ``wire``);
* ``lagged``: ``{count}`` messages were dropped; a fresh ``snapshot`` follows at once;
* ``platform`` and ``gap`` (the opt-in ``platform`` stream): a platform event of a session, and what
  a session's platform events miss (supervisor/api/platform_events.py);
* ``end``: the last reply (no ``continues``), when the daemon stops.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec

from supervisor.api.protocol import ApiFault, frame_parameters
from supervisor.errors import ApiError
from supervisor.vocabulary import Platform

__all__ = [
    "ALL_STREAMS",
    "MAX_FILTER_ENTRIES",
    "PLATFORM_STREAM",
    "STREAMS",
    "Delta",
    "Subscription",
    "encode_message",
    "parse_subscription",
]

#: opt-in streams: name -> the event names it carries (supervisor/events.py, supervisor/api/events.py)
STREAMS: Final[Mapping[str, frozenset[str]]] = {
    "circuits": frozenset(
        {
            "CIRCUIT_TRANSITION",
            "CIRCUIT_BREAKER_OPEN",
            "CIRCUIT_BREAKER_HALF_OPEN",
            "CIRCUIT_BREAKER_CLOSED",
            # an operator's isolate, close or reset, and the end of an isolation's --for
            "CIRCUIT_MANUAL",
        }
    ),
    "retries": frozenset({"RETRY_ATTEMPT", "RETRY_SUCCESS", "RETRY_EXHAUSTED"}),
    "throttling": frozenset({"RECONNECTION_THROTTLED"}),
    # a connection replaced in place, the session still active (a notifications rollover: docs/runtime.md, "Notifications rollover")
    "rollovers": frozenset({"CONNECTION_ROLLED_OVER"}),
    # a session this daemon supervises no more: ended, or handed over to the next start by a stop
    "terminations": frozenset({"SESSION_TERMINATED", "SESSION_HANDED_OVER"}),
    # a shadow taxonomy's divergences are about classified errors (docs/taxonomy.md, "Shadow")
    "errors": frozenset({"SDK_ERROR_CLASSIFIED", "SHADOW_DIVERGENCE"}),
    # attribute updates (docs/attributes.md): a tenant's queue full, and drained again
    "backpressure": frozenset({"RATE_LIMIT_BACKPRESSURE", "RATE_LIMIT_BACKPRESSURE_RELEASED"}),
    "attributes": frozenset({"ATTRIBUTE_MISMATCH", "ATTRIBUTE_MISMATCH_RESOLVED"}),
    "control": frozenset({"CONTROL_COMMAND", "TAXONOMY_SWITCHED"}),
    "daemon": frozenset(
        {
            "DAEMON_STARTED",
            "DAEMON_STOPPING",
            "DAEMON_STOPPED",
            "DAEMON_FORCED_EXIT",
            "SOCKET_API_LISTENING",
            "SOCKET_PEER_REFUSED",
            "SUBSCRIBER_DISCONNECTED",
            "STORE_DEGRADED",
            "STORE_RECOVERED",
            "FLEET_DEGRADED",
            "FLEET_RECOVERED",
            "SESSION_RECONCILED",
            "TAXONOMY_CAPTURE_FAILED",
        }
    ),
}
#: every event on the bus, including names no stream lists yet (but SESSION_TRANSITION: that is the delta)
ALL_STREAMS: Final = "all"
#: the sessions' platform events and their gaps: customer data, opt-in and never part of "all"
#: (a peer must be in [sockets] platformAllowUids / platformAllowGids)
PLATFORM_STREAM: Final = "platform"
MAX_FILTER_ENTRIES: Final = 10_000
_MAX_ID = 200


@dataclass(frozen=True, slots=True)
class Subscription:
    """What one subscriber asked for; ``None`` means "no filter on this field"."""

    platforms: frozenset[str] | None = None
    states: frozenset[str] | None = None
    sessions: frozenset[str] | None = None
    streams: tuple[str, ...] = ()
    # the event names the streams select; ``all_events`` when "all" was asked for
    events: frozenset[str] = field(default_factory=frozenset)
    all_events: bool = False
    # the platform stream: its own filters (agents, event types), and what the client saw (since)
    platform: bool = False
    agents: frozenset[str] | None = None
    event_types: frozenset[str] | None = None
    since: Mapping[str, tuple[str, int]] | None = None

    @property
    def unfiltered(self) -> bool:
        return self.platforms is None and self.states is None and self.sessions is None

    def wants_platform(
        self, session_id: str, platform: str | None, agent_id: str | None, event_type: str | None
    ) -> bool:
        """A platform record (``event_type``) or a gap (None) passes the session, platform, agent
        and event-type filters (the state filter does not apply: records are not states)."""
        if self.sessions is not None and session_id not in self.sessions:
            return False
        if self.platforms is not None and platform not in self.platforms:
            return False
        if self.agents is not None and agent_id not in self.agents:
            return False
        types = self.event_types
        return types is None or event_type is None or event_type in types

    def wants_state(self, state: str, previous: str | None) -> bool:
        """A delta matches the state filter when the session enters or leaves a filtered state."""
        states = self.states
        return states is None or state in states or (previous is not None and previous in states)

    def wants_event(self, name: str) -> bool:
        return self.all_events or name in self.events

    def as_wire(self) -> dict[str, Any]:
        def listed(values: frozenset[str] | None) -> list[str] | None:
            return None if values is None else sorted(values)

        return {
            "platforms": listed(self.platforms),
            "states": listed(self.states),
            "sessions": listed(self.sessions),
            "streams": list(self.streams),
        }


def _bad(parameter: str, problem: str) -> ApiError:
    return ApiError(
        ApiFault.INVALID_PARAMETER, {"parameter": parameter, "problem": f"{parameter}: {problem}"}
    )


def _strings(value: object, parameter: str) -> frozenset[str] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise _bad(parameter, "expected a list of strings")
    if len(value) > MAX_FILTER_ENTRIES:
        raise _bad(parameter, f"at most {MAX_FILTER_ENTRIES} entries")
    for item in value:
        if not isinstance(item, str) or not 0 < len(item) <= _MAX_ID:
            raise _bad(parameter, f"expected strings of 1 to {_MAX_ID} characters")
    return frozenset(value)


def parse_subscription(parameters: Mapping[str, Any], *, known_states: Iterable[str]) -> Subscription:
    """Validate a Subscribe call's parameters: ``{"filter": {...}, "streams": [...]}``; unknown keys are ignored."""
    raw_filter = parameters.get("filter")
    if raw_filter is None:
        raw_filter = {}
    if not isinstance(raw_filter, dict):
        raise _bad("filter", "expected an object")
    platforms = _strings(raw_filter.get("platforms"), "filter.platforms")
    known_platforms = {p.value for p in Platform}
    if platforms is not None and not platforms <= known_platforms:
        unknown = sorted(platforms - known_platforms)[0]
        raise _bad(
            "filter.platforms", f"unknown platform '{unknown}' (known: {', '.join(sorted(known_platforms))})"
        )
    states = _strings(raw_filter.get("states"), "filter.states")
    allowed_states = set(known_states)
    if states is not None and not states <= allowed_states:
        unknown = sorted(states - allowed_states)[0]
        raise _bad("filter.states", f"unknown state '{unknown}' (known: {', '.join(sorted(allowed_states))})")
    sessions = _strings(raw_filter.get("sessions"), "filter.sessions")
    agents = _strings(raw_filter.get("agents"), "filter.agents")
    event_types = _strings(raw_filter.get("eventTypes"), "filter.eventTypes")
    streams = _strings(parameters.get("streams"), "streams") or frozenset()
    known_streams = {*STREAMS, ALL_STREAMS, PLATFORM_STREAM}
    if not streams <= known_streams:
        unknown = sorted(streams - known_streams)[0]
        raise _bad("streams", f"unknown stream '{unknown}' (known: {', '.join(sorted(known_streams))})")
    events = frozenset(
        name for stream in streams if stream not in (ALL_STREAMS, PLATFORM_STREAM) for name in STREAMS[stream]
    )
    platform = PLATFORM_STREAM in streams
    since = _since(parameters.get("since"))
    if since is not None and not platform:
        raise _bad("since", "since resumes the platform stream: ask for it in streams")
    return Subscription(
        platforms=platforms,
        states=states,
        sessions=sessions,
        streams=tuple(sorted(streams)),
        events=events,
        all_events=ALL_STREAMS in streams,
        platform=platform,
        agents=agents,
        event_types=event_types,
        since=since,
    )


def _since(value: object) -> dict[str, tuple[str, int]] | None:
    """``{SESSION_ID: {"bootId": ..., "seq": N}}``: per session, the last sessionSeq seen and its boot."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _bad("since", "expected an object of session ids")
    if len(value) > MAX_FILTER_ENTRIES:
        raise _bad("since", f"at most {MAX_FILTER_ENTRIES} sessions")
    out: dict[str, tuple[str, int]] = {}
    for session_id, seen in value.items():
        if not isinstance(session_id, str) or not 0 < len(session_id) <= _MAX_ID:
            raise _bad("since", f"expected session ids of 1 to {_MAX_ID} characters")
        if not isinstance(seen, dict):
            raise _bad("since", f"{session_id}: expected an object with bootId and seq")
        boot_id, seq = seen.get("bootId"), seen.get("seq")
        if not isinstance(boot_id, str) or not 0 < len(boot_id) <= _MAX_ID:
            raise _bad("since", f"{session_id}.bootId: expected a string of 1 to {_MAX_ID} characters")
        if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq < 1 << 63:
            raise _bad("since", f"{session_id}.seq: expected an integer from 0 to 2^63 - 1")
        out[session_id] = (boot_id, seq)
    return out


# -- messages -----------------------------------------------------------------------------------------

_encoder = msgspec.json.Encoder()


def encode_message(message: Mapping[str, Any], *, continues: bool = True) -> bytes:
    """One stream message as a reply frame (``continues: true`` but for the last one)."""
    return frame_parameters(_encoder.encode(message), continues=continues)


class Delta:
    """One session's state change as one subscriber will see it; its frame is encoded once, lazily.

    The same Delta goes to every subscriber that wants it; :meth:`rebased` makes the conflated
    one a backlogged subscriber gets instead (its ``previous`` is what *that* subscriber saw).
    """

    __slots__ = ("_frame", "at", "extra", "previous", "reason", "seq", "session_id", "state")

    def __init__(
        self,
        seq: int,
        session_id: str,
        state: str,
        previous: str | None,
        at: str,
        reason: str,
        extra: Mapping[str, Any],
    ) -> None:
        self.seq = seq
        self.session_id = session_id
        self.state = state
        self.previous = previous
        self.at = at
        self.reason = reason
        # the session's other columns as of this change: platform, attempts, lastError, circuit, ids
        self.extra = extra
        self._frame: bytes | None = None

    @property
    def frame(self) -> bytes:
        frame = self._frame
        if frame is None:
            frame = self._frame = encode_message(self.as_wire())
        return frame

    def as_wire(self) -> dict[str, Any]:
        return {
            "type": "delta",
            "seq": self.seq,
            "sessionId": self.session_id,
            "state": self.state,
            "previous": self.previous,
            "at": self.at,
            "reason": self.reason,
            **self.extra,
        }

    def rebased(self, previous: str | None) -> Delta:
        if previous == self.previous:
            return self
        return Delta(self.seq, self.session_id, self.state, previous, self.at, self.reason, self.extra)
