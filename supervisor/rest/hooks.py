"""The retry executor's instrumentation seam: typed hooks, no tracer calls in the loop.

Shaped like stamina's ``RetryHook`` and httpcore's ``trace`` extension:

* :meth:`ExecutorHooks.operation` is called once per logical operation and
  :meth:`ExecutorHooks.attempt` once per attempt; each returns a context manager (or None)
  that the executor enters around the operation and around the attempt. A tracer opens a
  span there: one INTERNAL span per operation with one CLIENT child per attempt.
* The details objects are filled in by the executor before the scopes exit (the attempt's
  classified failure, the operation's outcome), so a scope reads what happened on exit:
  a context manager sees no return values, only exceptions.
* The notification hooks (:meth:`classified`, :meth:`retry_scheduled`, :meth:`succeeded`,
  :meth:`gave_up`, :meth:`circuit`) run inside those scopes: a span set current by the
  operation scope is current when ``retry_scheduled`` adds its event.

The runtime's :class:`~supervisor.runtime.hooks.BusHooks` publishes the seed's telemetry from
here; OpenTelemetry attaches through the same protocol. :class:`HookChain` runs several.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass
from typing import Any, Protocol

from machines.effects import CircuitEffect
from machines.pacing import PacerReport
from supervisor.boundary import SessionContext
from supervisor.events import RetryAttempt, RetryExhausted, RetrySuccess
from supervisor.taxonomy import SdkErrorEvent
from supervisor.vocabulary import EndpointId

__all__ = [
    "AttemptDetails",
    "ExecutorHooks",
    "HookChain",
    "NoHooks",
    "OperationDetails",
    "ResendReason",
]


class ResendReason(enum.StrEnum):
    """Why an attempt is a resend (OpenTelemetry's ``http.request.resend_count`` counts them all)."""

    # the class policy retried a TRANSIENT failure (after its backoff or the server's Retry-After)
    RETRY = "retry"
    # a 401 on a token at the end of its life by our clock, replayed with a fresh token (edge case 3)
    TOKEN_REPLAY = "token_replay"


@dataclass(slots=True)
class OperationDetails:
    """One logical operation, as hooks see it; the executor fills in ``attempts`` and ``outcome``."""

    operation: str
    context: SessionContext
    # the circuit that gates it (None: an in-band socket request, gated by its connection)
    circuit: EndpointId | None
    # our own route template (``url.template``), e.g. "/api/v2/notifications/channels"
    route: str | None = None
    server_address: str | None = None
    server_port: int | None = None
    # the HTTP method of a REST call (``http.request.method``); None for in-band requests
    method: str | None = None
    # attempts made so far (the first one included)
    attempts: int = 0
    # the classified failure that ended the operation; None while running or on success
    outcome: SdkErrorEvent | None = None


@dataclass(slots=True)
class AttemptDetails:
    """One attempt of an operation; ``event`` is set before the attempt's scope exits if it failed."""

    operation: OperationDetails
    # 0 for the first attempt, n for the n-th resend (whatever its cause)
    resend_count: int
    resend_reason: ResendReason | None = None
    event: SdkErrorEvent | None = None
    # the HTTP status the attempt got (a success or a failure), when it got one
    status: int | None = None


class ExecutorHooks(Protocol):
    """What the retry executor tells its observers."""

    def operation(self, details: OperationDetails) -> AbstractContextManager[object] | None:
        """Entered around the whole operation; None when there is nothing to enter."""

    def attempt(self, details: AttemptDetails) -> AbstractContextManager[object] | None:
        """Entered around one attempt; None when there is nothing to enter."""

    def classified(self, event: SdkErrorEvent) -> None:
        """A failure (of an attempt or of a token fetch) was classified."""

    def retry_scheduled(self, details: OperationDetails, retry: RetryAttempt) -> None:
        """A retry is scheduled (``retry.delay_s`` from now; 0 for a token replay)."""

    def succeeded(self, details: OperationDetails, retried: RetrySuccess | None) -> None:
        """The operation succeeded; ``retried`` is set when it took more than one attempt."""

    def gave_up(self, details: OperationDetails, exhausted: RetryExhausted | None) -> None:
        """The operation failed for good (``details.outcome``); ``exhausted`` when a budget ran out."""

    def circuit(self, effects: tuple[CircuitEffect, ...]) -> None:
        """The endpoint's circuit moved (transitions, CIRCUIT_BREAKER_* events)."""

    def pacing(self, report: PacerReport) -> None:
        """The endpoint's REST pacing changed its rate or paused it (beyond the seed, docs/runtime.md, "Admission")."""


class NoHooks:
    """Hooks that do nothing (the executor skips them entirely when it has none)."""

    __slots__ = ()

    def operation(self, details: OperationDetails) -> AbstractContextManager[object] | None:
        return None

    def attempt(self, details: AttemptDetails) -> AbstractContextManager[object] | None:
        return None

    def classified(self, event: SdkErrorEvent) -> None:
        pass

    def retry_scheduled(self, details: OperationDetails, retry: RetryAttempt) -> None:
        pass

    def succeeded(self, details: OperationDetails, retried: RetrySuccess | None) -> None:
        pass

    def gave_up(self, details: OperationDetails, exhausted: RetryExhausted | None) -> None:
        pass

    def circuit(self, effects: tuple[CircuitEffect, ...]) -> None:
        pass

    def pacing(self, report: PacerReport) -> None:
        pass


class HookChain:
    """Several hooks as one: scopes nest in order, notifications go to each in order.

    A hook method inherited unchanged from :class:`NoHooks` does nothing, so the chain skips it
    (resolved once, here): the runtime's bus hooks open no scope and a tracer ignores most
    notifications, and a successful call should not pay for calls that do nothing.
    """

    __slots__ = (
        "_attempt",
        "_circuit",
        "_classified",
        "_gave_up",
        "_hooks",
        "_operation",
        "_pacing",
        "_retry_scheduled",
        "_succeeded",
    )

    def __init__(self, hooks: Sequence[ExecutorHooks]) -> None:
        self._hooks = tuple(hooks)
        self._operation = _live(self._hooks, "operation")
        self._attempt = _live(self._hooks, "attempt")
        self._classified = _live(self._hooks, "classified")
        self._retry_scheduled = _live(self._hooks, "retry_scheduled")
        self._succeeded = _live(self._hooks, "succeeded")
        self._gave_up = _live(self._hooks, "gave_up")
        self._circuit = _live(self._hooks, "circuit")
        self._pacing = _live(self._hooks, "pacing")

    def operation(self, details: OperationDetails) -> AbstractContextManager[object] | None:
        scopes = self._operation
        if not scopes:
            return None
        if len(scopes) == 1:
            return scopes[0](details)  # type: ignore[no-any-return]
        return _nest([scope(details) for scope in scopes])

    def attempt(self, details: AttemptDetails) -> AbstractContextManager[object] | None:
        scopes = self._attempt
        if not scopes:
            return None
        if len(scopes) == 1:
            return scopes[0](details)  # type: ignore[no-any-return]
        return _nest([scope(details) for scope in scopes])

    def classified(self, event: SdkErrorEvent) -> None:
        for h in self._classified:
            h(event)

    def retry_scheduled(self, details: OperationDetails, retry: RetryAttempt) -> None:
        for h in self._retry_scheduled:
            h(details, retry)

    def succeeded(self, details: OperationDetails, retried: RetrySuccess | None) -> None:
        for h in self._succeeded:
            h(details, retried)

    def gave_up(self, details: OperationDetails, exhausted: RetryExhausted | None) -> None:
        for h in self._gave_up:
            h(details, exhausted)

    def circuit(self, effects: tuple[CircuitEffect, ...]) -> None:
        for h in self._circuit:
            h(effects)

    def pacing(self, report: PacerReport) -> None:
        for h in self._pacing:
            h(report)


def _live(hooks: tuple[ExecutorHooks, ...], name: str) -> tuple[Callable[..., Any], ...]:
    """The bound ``name`` methods of ``hooks`` that do something (not NoHooks' own no-op)."""
    noop = getattr(NoHooks, name)
    return tuple(getattr(h, name) for h in hooks if getattr(type(h), name, None) is not noop)


def _nest(scopes: list[AbstractContextManager[object] | None]) -> AbstractContextManager[object] | None:
    present = [s for s in scopes if s is not None]
    if not present:
        return None
    return present[0] if len(present) == 1 else _Nested(present)


class _Nested(AbstractContextManager[object]):
    """Enters several scopes in order and exits them in reverse (an ExitStack built on entry)."""

    __slots__ = ("_scopes", "_stack")

    def __init__(self, scopes: list[AbstractContextManager[object]]) -> None:
        self._scopes = scopes
        self._stack = ExitStack()

    def __enter__(self) -> object:
        for scope in self._scopes:
            self._stack.enter_context(scope)
        return self

    def __exit__(self, *exc_info: Any) -> bool | None:
        return self._stack.__exit__(*exc_info)
