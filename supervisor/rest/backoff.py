"""Between two attempts of an operation: retry after this long, or stop (supervisor/rest/executor.py).

The one place a retry decision is made: the failure's class policy, a server's Retry-After as its
minimum, the endpoint's retry budget. :class:`Backoff` waits the delay it decides and reports the
retry (``RETRY_ATTEMPT``), or ends the operation (``RETRY_EXHAUSTED`` when a retryable failure ran
out of retries) by raising :class:`~supervisor.errors.OperationError`. Admission (pace, circuit,
places, the echo rule) is the endpoint's, through the attempt shell (supervisor/attempts/):
nothing here decides it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import NoReturn

from supervisor.attempts import Gate
from supervisor.boundary import SessionContext
from supervisor.clock import Clock, Rng, iso_utc
from supervisor.errors import OperationError
from supervisor.events import RetryAttempt, RetryExhausted, RetryKind
from supervisor.rest.hooks import ExecutorHooks, OperationDetails
from supervisor.retry import decide_retry
from supervisor.retry.backoff import GiveUpReason, RetryDecision
from supervisor.taxonomy import SdkErrorEvent

__all__ = ["Backoff", "Sleep"]

Sleep = Callable[[float], Awaitable[None]]


class Backoff:
    """Wait before the next retry, or give up (the module docstring)."""

    def __init__(self, clock: Clock, rng: Rng, hooks: ExecutorHooks | None) -> None:
        self._clock = clock
        self._rng = rng
        self._hooks = hooks

    async def wait(
        self,
        operation: str,
        ctx: SessionContext,
        event: SdkErrorEvent,
        attempt: int,
        previous_delay_ms: float | None,
        details: OperationDetails | None,
        sleep: Sleep,
        gate: Gate | None = None,
    ) -> tuple[float, int]:
        """Wait before the next retry as the event's class policy says; raise when it says stop.

        Returns the delay it last waited, in ms (decorrelated jitter grows from it), and how many
        of the policy's retries the endpoint's retry budget skipped on the way. The budget is
        asked when a retry comes due, not when the failure comes back (docs/runtime.md, "Admission"): a retry it
        refuses is not sent but counts against the policy's retries, and the operation waits for
        its next scheduled one, when the budget may have room again. A brownout spends the
        budget on calls that fail again; asking late leaves the retries that come due after the
        recovery a chance the early refusal took away (docs/benchmarks.md, "Brownout"). The
        operation ends with ``RETRY_BUDGET_EXHAUSTED`` when the budget refused its last retry.
        """
        skipped = 0
        while True:
            decision = decide_retry(
                event.policy,
                attempt,
                self._rng,
                retryable=event.retryable,
                retry_after_ms=event.retry_after_ms,
                previous_delay_ms=previous_delay_ms,
            )
            if not decision.retry:
                if skipped and decision.reason is GiveUpReason.BUDGET_EXHAUSTED:
                    # the policy's retries ran out because the endpoint's budget refused the last
                    decision = RetryDecision(retry=False, reason=GiveUpReason.RETRY_BUDGET_EXHAUSTED)
                self._give_up(operation, ctx, event, attempt, decision, details)
            delay_s = decision.delay_ms / 1000.0
            if self._hooks is not None and details is not None:
                retry = RetryAttempt(
                    ctx.session_id,
                    RetryKind.OPERATION,
                    attempt + 1,
                    delay_s,
                    event.code,
                    event.policy.name,
                    iso_utc(self._clock.time()),
                    operation,
                    from_retry_after=decision.from_retry_after,
                    budget_refused=skipped > 0,
                )
                self._hooks.retry_scheduled(details, retry)
            await sleep(delay_s)
            if gate is None or gate.may_retry():
                return decision.delay_ms, skipped
            # skipped: not sent, one of the policy's retries spent all the same
            skipped += 1
            attempt += 1
            previous_delay_ms = decision.delay_ms

    def _give_up(
        self,
        operation: str,
        ctx: SessionContext,
        event: SdkErrorEvent,
        retries: int,
        decision: RetryDecision,
        details: OperationDetails | None,
    ) -> NoReturn:
        """The operation ends: RETRY_EXHAUSTED when it was retryable and a budget ran out."""
        budget_refused = decision.reason is GiveUpReason.RETRY_BUDGET_EXHAUSTED
        exhausted = event.retryable and (retries > 0 or budget_refused)
        hooks = self._hooks
        if hooks is not None and details is not None:
            report = None
            if exhausted:
                report = RetryExhausted(
                    ctx.session_id,
                    RetryKind.OPERATION,
                    retries,
                    event.code,
                    event.policy.name,
                    None if decision.reason is None else decision.reason.value,
                    operation,
                    timestamp=iso_utc(self._clock.time()),
                )
            hooks.gave_up(details, report)
        raise OperationError(event, exhausted=exhausted, published=hooks is not None)
