"""What telemetry remembers while something is in flight: operations, attempts, segments, circuit periods.

These are plain records, not SDK spans: :mod:`supervisor.telemetry.spans` turns a finished
record tree into ``ReadableSpan``s only when it is to be exported, with the times recorded
here (``time.time_ns()``), so a sampled-out success never touches the SDK.

An :class:`Operation` is also the context manager the retry executor enters around one
logical operation (:class:`~supervisor.rest.hooks.ExecutorHooks`); :data:`CURRENT` names the
operation in progress in this task, so a nested operation (a token fetch inside a REST call)
finds its parent and the event bus finds the span a log line belongs to. An :class:`Attempt`
is a record without a scope of its own (a scope per attempt cost more than the whole
sampled-out hot path may): it begins when the executor announces the attempt and ends at the
executor's next word about it (classified, succeeded, gave up, a retry scheduled, a nested
token fetch starting, or the operation ending), within microseconds of its real end.
"""

from __future__ import annotations

import time
from contextvars import ContextVar, Token
from typing import Any, Protocol

from supervisor.events import RetryAttempt, RetryExhausted
from supervisor.rest.hooks import AttemptDetails, OperationDetails
from supervisor.taxonomy import SdkErrorEvent
from supervisor.vocabulary import CircuitState, SessionState

__all__ = ["CURRENT", "Attempt", "Operation", "Parent", "Period", "Segment"]

_now = time.time_ns


class Finisher(Protocol):
    """What an operation reports to when it ends, and asks for ids when a log line needs them."""

    def operation_ended(self, operation: Operation, exc: BaseException | None) -> None: ...

    def allocate(self, operation: Operation) -> tuple[int, int]: ...


class Parent(Protocol):
    """A record other operations can hang under (an operation, or a session-start segment)."""

    trace_id: int
    forced: bool

    def ensure_ids(self) -> tuple[int, int]: ...

    def adopt(self, child: Operation) -> None: ...


class Operation:
    """One logical operation (a REST call, an in-band request, a token fetch) while it runs."""

    __slots__ = (
        "_finisher",
        "_token",
        "attempts",
        "cancelled",
        "children",
        "current",
        "details",
        "end",
        "error",
        "event",
        "exhausted",
        "forced",
        "link",
        "parent",
        "resolved",
        "retries",
        "span_id",
        "start",
        "trace_id",
    )

    def __init__(self, finisher: Finisher, details: OperationDetails) -> None:
        self._finisher = finisher
        self.details = details
        self.attempts: list[Attempt] = []
        # the rest is filled in on entry or only when needed (the hot path allocates little)
        self.parent: Parent | None = None
        self.resolved = False
        self.link: Segment | None = None
        self.children: list[Operation] | None = None
        self.retries: list[tuple[int, RetryAttempt]] | None = None
        self.exhausted: RetryExhausted | None = None
        self.current: Attempt | None = None
        self.forced = False
        # the outcome, set when it ends: error.type (None on success), the classified failure
        self.error: str | None = None
        self.event: SdkErrorEvent | None = None
        self.cancelled = False
        self.trace_id = 0
        self.span_id = 0
        self.start = self.end = 0

    def __enter__(self) -> Operation:
        now = _now()
        parent = self.parent = CURRENT.get()
        if parent is not None and parent.current is not None:
            parent.end_attempt(now)  # e.g. a token refresh between a 401 and its replay
        self._token: Token[Operation | None] = CURRENT.set(self)
        self.start = now
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        CURRENT.reset(self._token)
        now = self.end = _now()
        if self.current is not None:
            self.end_attempt(now)
        self._finisher.operation_ended(self, exc)

    def begin_attempt(self, details: AttemptDetails) -> None:
        now = _now()
        if self.current is not None:
            self.end_attempt(now)
        attempt = self.current = Attempt(details, now)
        self.attempts.append(attempt)

    def end_attempt(self, now: int = 0) -> None:
        attempt = self.current
        if attempt is not None:
            attempt.end = now or _now()
            self.current = None

    # -- as a parent --------------------------------------------------------------------------------
    def ensure_ids(self) -> tuple[int, int]:
        if not self.span_id:
            self.trace_id, self.span_id = self._finisher.allocate(self)
        return self.trace_id, self.span_id

    def adopt(self, child: Operation) -> None:
        if self.children is None:
            self.children = []
        self.children.append(child)
        if child.forced:
            self.forced = True


class Attempt:
    """One attempt of an operation; the executor fills ``details`` in (its failure, its status)."""

    __slots__ = ("details", "end", "span_id", "start")

    def __init__(self, details: AttemptDetails, start: int) -> None:
        self.details = details
        self.start = start
        self.end = 0
        self.span_id = 0


class Segment:
    """One lifetime segment of a session (connecting, active, reconnecting), with its ids up front."""

    __slots__ = (
        "attempt",
        "children",
        "dropped_events",
        "end",
        "end_reason",
        "errors",
        "first",
        "forced",
        "index",
        "next_state",
        "previous",
        "sampled",
        "session_id",
        "span_id",
        "start",
        "state",
        "termination",
        "throttled",
        "trace_id",
    )

    def __init__(
        self,
        session_id: str,
        state: SessionState,
        start: int,
        ids: tuple[int, int],
        *,
        index: int,
        sampled: bool,
        previous: tuple[int, int] | None,
        first: tuple[int, int] | None,
        attempt: int = 0,
    ) -> None:
        self.session_id = session_id
        self.state = state
        self.start = start
        self.end = 0
        self.trace_id, self.span_id = ids
        self.index = index
        self.sampled = sampled
        # links, by ids only (a finished segment is not kept): the one before, the session's first
        self.previous = previous
        self.first = first
        # the reconnection attempt this segment serves (0: the session's first connection)
        self.attempt = attempt
        self.forced = False
        self.children: list[Operation] | None = None
        self.errors: list[tuple[int, SdkErrorEvent]] | None = None
        self.throttled: list[tuple[int, float, float]] | None = None
        self.dropped_events = 0
        self.next_state: SessionState | None = None
        self.end_reason: str | None = None
        self.termination: Any = None

    @property
    def ids(self) -> tuple[int, int]:
        return self.trace_id, self.span_id

    def ensure_ids(self) -> tuple[int, int]:
        return self.trace_id, self.span_id

    def adopt(self, child: Operation) -> None:
        if self.children is None:
            self.children = []
        self.children.append(child)
        if child.forced:
            self.forced = True

    def last_error(self) -> SdkErrorEvent | None:
        return None if not self.errors else self.errors[-1][1]


class Period:
    """A circuit's open or half-open period (the closed state is the normal one and has no span)."""

    __slots__ = (
        "circuit_id",
        "end",
        "enter",
        "leave",
        "opened",
        "previous",
        "probe_id",
        "span_id",
        "start",
        "state",
        "trace_id",
    )

    def __init__(self, circuit_id: str, state: CircuitState, ids: tuple[int, int]) -> None:
        self.circuit_id = circuit_id
        self.state = state
        self.trace_id, self.span_id = ids
        self.start = self.end = 0
        # (source, trigger, reason) of the transition that began and ended it
        self.enter: tuple[CircuitState, str, str] | None = None
        self.leave: tuple[CircuitState, CircuitState, str, str] | None = None
        self.opened: Any = None
        self.probe_id = 0
        self.previous: tuple[int, int] | None = None


# the operation in progress in this task (an asyncio task copies its creator's context)
CURRENT: ContextVar[Operation | None] = ContextVar("session_supervisor_operation", default=None)
