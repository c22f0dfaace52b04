"""Executor hooks that trace operations: one INTERNAL span per operation, one CLIENT span per attempt.

:class:`OperationTracer` is an :class:`~supervisor.rest.hooks.ExecutorHooks`: the retry executor
enters its :class:`~supervisor.telemetry.records.Operation` around every logical operation, and
each attempt it announces becomes an :class:`~supervisor.telemetry.records.Attempt` record (no
scope of its own). Those only take times; what becomes of them is decided when the operation
ends (``operation_ended``):

* a nested operation (a token fetch inside a REST call) hangs under the operation around it,
  and an operation made while its session is connecting hangs under that session-start
  segment: the parent decides for the whole tree when it ends;
* otherwise it is a root: traced when it failed, was retried, or a log line already named it
  (``forced``), else when the sampler's coin says so; a sampled-out success is dropped here
  and never reaches the SDK. A root made for a session links to the session's segment.

The hot path (one successful attempt, sampled out) costs two small objects, a context variable
set and reset, three clock reads, a dict lookup and a coin (docs/benchmarks.md, "Telemetry", measures it).
"""

from __future__ import annotations

import time
from contextlib import AbstractContextManager

from supervisor.errors import CircuitOpenError, OperationError
from supervisor.events import RetryAttempt, RetryExhausted
from supervisor.rest.hooks import AttemptDetails, NoHooks, OperationDetails
from supervisor.taxonomy import SdkErrorEvent
from supervisor.telemetry.records import CURRENT, Operation, Parent
from supervisor.telemetry.sampling import IdSource, Sampler
from supervisor.telemetry.segments import SessionTracker
from supervisor.telemetry.spans import SpanFactory
from supervisor.vocabulary import SessionState

__all__ = ["CIRCUIT_OPEN", "OperationTracer"]

# error.type of an operation refused by its endpoint's open circuit (no attempt was made)
CIRCUIT_OPEN = "CIRCUIT_OPEN"


class OperationTracer(NoHooks):
    """The executor hooks of OpenTelemetry tracing (and the ids of operations for log lines).

    ``succeeded`` and ``circuit`` stay NoHooks' no-ops, so HookChain skips them: a successful
    attempt ends with its operation, microseconds later; circuit transitions reach telemetry
    through the bus (supervisor/telemetry/circuits.py).
    """

    __slots__ = ("_factory", "_ids", "_sampler", "_sessions")

    def __init__(
        self, factory: SpanFactory, sampler: Sampler, ids: IdSource, sessions: SessionTracker
    ) -> None:
        self._factory = factory
        self._sampler = sampler
        self._ids = ids
        self._sessions = sessions

    # -- ExecutorHooks ----------------------------------------------------------------------------------
    def operation(self, details: OperationDetails) -> AbstractContextManager[object] | None:
        return Operation(self, details)

    def attempt(self, details: AttemptDetails) -> AbstractContextManager[object] | None:
        op = CURRENT.get()
        if op is not None and op.details is details.operation:
            op.begin_attempt(details)
        # no scope: the attempt ends at the executor's next word about it (records.py)
        return None

    def classified(self, event: SdkErrorEvent) -> None:
        # the end of a failed attempt (the bus hooks, earlier in the chain, published the
        # classified event while the attempt was still current: its line names the attempt)
        op = CURRENT.get()
        if op is not None:
            op.end_attempt()

    def retry_scheduled(self, details: OperationDetails, retry: RetryAttempt) -> None:
        op = CURRENT.get()
        if op is not None and op.details is details:
            now = time.time_ns()
            op.end_attempt(now)
            if op.retries is None:
                op.retries = []
            op.retries.append((now, retry))

    def gave_up(self, details: OperationDetails, exhausted: RetryExhausted | None) -> None:
        op = CURRENT.get()
        if op is not None and op.details is details:
            op.end_attempt()
            op.exhausted = exhausted

    # -- Finisher ---------------------------------------------------------------------------------------
    def operation_ended(self, op: Operation, exc: BaseException | None) -> None:
        if exc is not None:
            _outcome(op, exc)
        if op.error is not None or op.details.attempts > 1 or op.retries:
            op.forced = True
        parent = self._parent(op)
        if parent is not None:
            parent.adopt(op)
            return
        if op.forced or self._sampler.coin():
            self._factory.emit_operation(op)

    def allocate(self, op: Operation) -> tuple[int, int]:
        """Ids for ``op``: its parent's trace (allocated first when needed), a new span id."""
        parent = self._parent(op)
        trace_id = parent.ensure_ids()[0] if parent is not None else self._ids.trace_id()
        return trace_id, self._ids.span_id()

    def log_ids(self, op: Operation) -> tuple[int, int]:
        """The span a log line published during ``op`` belongs to (its attempt's, when one runs).

        A log line must lead to a trace that exists: the operation is traced from now on.
        """
        op.forced = True
        trace_id, span_id = op.ensure_ids()
        attempt = op.current
        if attempt is None:
            return trace_id, span_id
        if not attempt.span_id:
            attempt.span_id = self._ids.span_id()
        return trace_id, attempt.span_id

    def _parent(self, op: Operation) -> Parent | None:
        if not op.resolved:
            op.resolved = True
            if op.parent is None:
                segment = self._sessions.segment_of(op.details.context.session_id)
                if segment is not None:
                    if segment.state is SessionState.CONNECTING:
                        op.parent = segment  # the session start holds what it took
                    else:
                        op.link = segment
        return op.parent


def _outcome(op: Operation, exc: BaseException) -> None:
    if isinstance(exc, OperationError):
        event = exc.event
        if isinstance(event, SdkErrorEvent):
            op.event = event
            op.error = event.code
        else:  # pragma: no cover - an OperationError always carries its event
            op.error = type(exc).__qualname__
    elif isinstance(exc, CircuitOpenError):
        op.error = CIRCUIT_OPEN
    elif isinstance(exc, Exception):
        # low cardinality: the exception's type, never its message
        op.error = type(exc).__qualname__
    else:
        # a cancellation (a stopped session, a watchdog): the operation did not fail
        op.cancelled = True
