"""Session lifetime segments from the bus: one span per connecting, active or reconnecting stretch.

A session's life is a chain of segments (docs/telemetry.md):

    connecting ──► active ──► reconnecting ──► connecting ──► active ──► ... ──► (terminated)

Each segment is a root span of its own trace (a session can live for days; one trace per
session would never end), linked to the previous segment and to the session's first one.
Its ids are drawn when it begins, so the operations made during a session start hang under
it and the JSON lines published during it can name it before it is exported.

What is traced, whatever the ratio: a reconnecting segment, a connecting one that is a
reconnection, a segment that ends in a drop or a termination (every termination, the reason
and trigger on its last segment), and a segment something traced hangs under or a log line
named. A healthy segment follows the session's sampling decision (one per session id).

The tracker reads the events the runners publish (``SessionTransition``, ``SessionTerminated``,
reconnection ``RetryAttempt``/``RetrySuccess``, ``ReconnectionThrottled``, classified
connection failures); configured sessions begin in ``connecting`` when telemetry starts, a
session first seen later begins at its first event.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable

from supervisor.events import (
    Correlation,
    ErrorClassified,
    Event,
    ReconnectionThrottled,
    RetryAttempt,
    RetryExhausted,
    RetryKind,
    RetrySuccess,
    SessionTerminated,
    SessionTransition,
)
from supervisor.taxonomy import SdkErrorEvent
from supervisor.telemetry.records import Segment
from supervisor.telemetry.sampling import IdSource, Sampler
from supervisor.telemetry.spans import SpanFactory
from supervisor.vocabulary import SessionState

__all__ = ["SessionTracker"]

# what a segment still open when telemetry closes says about its end
CLOSED_BY_EXIT = "DAEMON_EXIT"
# span events kept per segment: a day-long segment must not grow without bound (the first ones
# say what went wrong; the count of the rest goes on the span)
MAX_EVENTS = 32


class _Session:
    __slots__ = ("correlation", "current", "first", "index", "last", "sampled", "state")

    def __init__(self, session_id: str, sampled: bool) -> None:
        self.state: SessionState = SessionState.CONNECTING
        self.current: Segment | None = None
        self.first: tuple[int, int] | None = None
        # the segment that ended last: its ids, and whether it was traced
        self.last: tuple[tuple[int, int], bool] | None = None
        self.index = 0
        self.sampled = sampled
        self.correlation = Correlation(session_id)


class SessionTracker:
    """Per-session segments, fed by the bus; emits each segment's spans when it ends."""

    def __init__(
        self, factory: SpanFactory, sampler: Sampler, ids: IdSource, configured: Iterable[str] = ()
    ) -> None:
        self._factory = factory
        self._sampler = sampler
        self._ids = ids
        self._sessions: dict[str, _Session] = {}
        now = time.time_ns()
        for session_id in configured:
            self._begin(self._new(session_id), SessionState.CONNECTING, now)

    # -- lookups --------------------------------------------------------------------------------------
    def segment_of(self, session_id: str) -> Segment | None:
        """The session's current segment (None: unknown, or terminated)."""
        session = self._sessions.get(session_id)
        return None if session is None else session.current

    def states(self) -> Counter[SessionState]:
        """Sessions by state (the sessions gauge)."""
        return Counter(s.state for s in self._sessions.values())

    def ids_for(self, event: Event, session_id: str) -> tuple[int, int] | None:
        """The segment a session's log line belongs to, when that segment is (or will be) traced."""
        session = self._sessions.get(session_id)
        if session is None:
            return None
        segment = session.current
        kind = type(event)
        if kind is SessionTransition:
            assert isinstance(event, SessionTransition)
            # the line of a transition belongs to the segment it ends
            if segment is None:
                return None
            return segment.ids if self._traced(segment, event.target) else None
        if kind is RetrySuccess:
            # a reconnection that succeeded: the connecting segment that just ended (traced)
            last = session.last
            return last[0] if last is not None and last[1] else None
        if segment is None:
            return None
        if kind in (SessionTerminated, RetryAttempt, RetryExhausted, ReconnectionThrottled, ErrorClassified):
            segment.forced = True  # a failure, a retry or a termination: traced, and named
            return segment.ids
        return segment.ids if self._traced(segment, None) else None

    # -- the bus ----------------------------------------------------------------------------------------
    def correlate(self, correlation: Correlation) -> None:
        session = self._sessions.get(correlation.session_id)
        if session is not None:
            session.correlation = correlation

    def transition(self, event: SessionTransition) -> None:
        now = time.time_ns()
        session = self._live(event.session_id, event.source, now)
        segment = session.current
        assert segment is not None
        if event.target == SessionState.TERMINATED:
            # the SESSION_TERMINATED that follows carries reason and trigger: it ends the segment
            segment.next_state = SessionState.TERMINATED
            segment.end_reason = event.reason
            session.state = SessionState.TERMINATED
            return
        if event.target == SessionState.HANDED_OVER:
            # a stop left the session to the next start: its last segment ends here, none begins
            self._end(session, segment, now, event.target, event.reason)
            session.state = SessionState.HANDED_OVER
            session.current = None
            return
        attempt = segment.attempt if event.target == SessionState.CONNECTING else 0
        self._end(session, segment, now, event.target, event.reason)
        self._begin(session, event.target, now, attempt)

    def terminated(self, event: SessionTerminated) -> None:
        session = self._sessions.get(event.session_id)
        if session is None or session.current is None:
            return
        segment = session.current
        segment.termination = event
        if segment.end_reason is None:
            segment.end_reason = event.reason.value
        self._end(session, segment, time.time_ns(), SessionState.TERMINATED, segment.end_reason)
        session.state = SessionState.TERMINATED
        session.current = None

    def retry(self, event: RetryAttempt) -> None:
        if event.kind is not RetryKind.RECONNECT:
            return
        segment = self.segment_of(event.session_id)
        if segment is not None:
            segment.attempt = event.attempt

    def throttled(self, event: ReconnectionThrottled) -> None:
        segment = self.segment_of(event.session_id)
        if segment is not None:
            if segment.throttled is None:
                segment.throttled = []
            if len(segment.throttled) < MAX_EVENTS:
                segment.throttled.append((time.time_ns(), event.retry_in_s, event.delay_s))
            else:
                segment.dropped_events += 1

    def failure(self, session_id: str, event: SdkErrorEvent) -> None:
        """A classified failure of the session's connection (not of one of its operations)."""
        segment = self.segment_of(session_id)
        if segment is not None:
            if segment.errors is None:
                segment.errors = []
            if len(segment.errors) < MAX_EVENTS:
                segment.errors.append((time.time_ns(), event))
            else:
                segment.errors[-1] = (time.time_ns(), event)  # the last one says how it ended
                segment.dropped_events += 1
            segment.forced = True

    def close(self) -> None:
        """Telemetry is closing: end every open segment (a drain that ran out of time)."""
        now = time.time_ns()
        for session in self._sessions.values():
            segment = session.current
            if segment is not None:
                segment.forced = True
                self._end(session, segment, now, segment.next_state, segment.end_reason or CLOSED_BY_EXIT)
                session.current = None

    # -- internals --------------------------------------------------------------------------------------
    def _new(self, session_id: str) -> _Session:
        session = _Session(session_id, self._sampler.session(session_id))
        self._sessions[session_id] = session
        return session

    def _live(self, session_id: str, state: SessionState, now: int) -> _Session:
        """The session's record, with a current segment in ``state`` (a new life if it had ended)."""
        session = self._sessions.get(session_id)
        if session is None:
            session = self._new(session_id)
        if session.current is None:
            # first seen now, or started again after a termination (a new runner: a new chain)
            session.first = None
            session.last = None
            session.index = 0
            self._begin(session, state, now)
        return session

    def _begin(self, session: _Session, state: SessionState, now: int, attempt: int = 0) -> None:
        ids = (self._ids.trace_id(), self._ids.span_id())
        previous = session.last[0] if session.last is not None else None
        segment = Segment(
            session.correlation.session_id,
            state,
            now,
            ids,
            index=session.index,
            sampled=session.sampled,
            previous=previous,
            first=session.first,
            attempt=attempt,
        )
        if session.first is None:
            session.first = ids
        session.index += 1
        session.current = segment
        session.state = state

    def _end(
        self,
        session: _Session,
        segment: Segment,
        now: int,
        target: SessionState | None,
        reason: str | None,
    ) -> None:
        segment.end = now
        segment.next_state = target
        segment.end_reason = reason
        traced = self._traced(segment, target)
        session.last = (segment.ids, traced)
        if traced:
            self._factory.emit_segment(segment, session.correlation)

    @staticmethod
    def _traced(segment: Segment, target: SessionState | None) -> bool:
        """Is ``segment`` traced if it ends towards ``target``? (see the module docstring)"""
        if segment.forced or segment.sampled:
            return True
        if segment.state == SessionState.RECONNECTING or (
            segment.state == SessionState.CONNECTING and segment.attempt > 0
        ):
            return True
        return (
            target in (SessionState.RECONNECTING, SessionState.TERMINATED)
            or segment.next_state == SessionState.TERMINATED
        )
