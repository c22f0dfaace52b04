"""The steps every operation of the retry executor shares (supervisor/rest/executor.py).

Classifying a failure, the backoff that says "retry after this long" or "stop" (the one place a
retry decision is made: the class policy, a server's Retry-After as its minimum, the endpoint's
retry budget), and the token fetch, a logical operation of its own (``oauth.token``) behind its
own circuit. Admission (pace, circuit, places, the echo rule) is the endpoint's, through the
attempt shell (supervisor/attempts/): nothing here decides it.
:class:`RetryExecutor` builds its loop (:meth:`~supervisor.rest.executor.RetryExecutor.call`)
on these.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import NoReturn

import anyio

from supervisor.attempts import SILENT, Attempts, Gate, Reports
from supervisor.boundary import SessionContext
from supervisor.clock import Clock, Rng, iso_utc
from supervisor.errors import OperationError, TransportFailure
from supervisor.events import RetryAttempt, RetryExhausted, RetryKind, RetrySuccess
from supervisor.rest.hooks import AttemptDetails, ExecutorHooks, OperationDetails, ResendReason
from supervisor.rest.tokens import Token, TokenCache
from supervisor.retry import decide_retry
from supervisor.retry.backoff import GiveUpReason, RetryDecision
from supervisor.taxonomy import Classifier, RawError, SdkErrorEvent
from supervisor.vocabulary import EndpointId

__all__ = [
    "TOKEN_OPERATION",
    "ExecutorSteps",
    "Sleep",
    "ensure_from",
    "refresh_from",
]

# the operation name of a token fetch (its RETRY_* events and its telemetry span)
TOKEN_OPERATION = "oauth.token"

Sleep = Callable[[float], Awaitable[None]]


class ExecutorSteps:
    """Classification, backoff and token fetches (the module docstring)."""

    def __init__(
        self,
        classifier: Classifier,
        attempts: Attempts,
        clock: Clock,
        *,
        rng: Rng | None = None,
        hooks: ExecutorHooks | None = None,
        sleep: Sleep = anyio.sleep,
        refresh_before_retry_s: float = 60.0,
    ) -> None:
        self.classifier = classifier
        # every endpoint's admission (circuit; beyond the seed, docs/runtime.md, "Admission": pacing and a retry budget)
        self.attempts = attempts
        self._clock = clock
        self._rng: Rng = rng if rng is not None else random.Random()
        self._hooks = hooks
        # where the endpoints' circuit and pacing moves go: the hooks, else nowhere
        self._reports: Reports = hooks if hooks is not None else SILENT
        self._sleep = sleep
        self._refresh_before_retry = refresh_before_retry_s

    def _classify(self, raw: RawError) -> SdkErrorEvent:
        event = self.classifier.classify(raw)
        if self._hooks is not None:
            self._hooks.classified(event)
        return event

    def _now(self) -> str:
        return iso_utc(self._clock.time())

    async def _backoff(
        self,
        operation: str,
        ctx: SessionContext,
        event: SdkErrorEvent,
        attempt: int,
        previous_delay_ms: float | None,
        details: OperationDetails | None,
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
                    self._now(),
                    operation,
                    from_retry_after=decision.from_retry_after,
                    budget_refused=skipped > 0,
                )
                self._hooks.retry_scheduled(details, retry)
            await self._sleep(delay_s)
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
                    self._now(),
                    operation,
                )
            hooks.gave_up(details, report)
        raise OperationError(event, exhausted=exhausted, published=hooks is not None)

    async def token(
        self, ctx: SessionContext, tokens: TokenCache, fetch: Callable[[], Awaitable[Token]]
    ) -> Token:
        """A token from ``fetch``: a 4xx is TOKEN_REFRESH_FAILED (fail-fast); 5xx/network retry per policy.

        A logical operation of its own (``oauth.token``), observed by the hooks like any other:
        one scope around it, one per attempt, its retries and its outcome reported. The token
        endpoint has a circuit of its own (``<credential>:oauth``): while it is down, the
        sessions that need a token wait for the probe instead of each asking it again, and when
        it returns one fetch serves them all (the cache is single-flight).
        """
        hooks = self._hooks
        if hooks is None:
            return await self._fetch_token(ctx, tokens, fetch, None)
        endpoint = tokens.endpoint
        details = OperationDetails(
            TOKEN_OPERATION,
            ctx,
            None,
            None if endpoint is None else endpoint[0],
            None if endpoint is None else endpoint[1],
            None if endpoint is None else endpoint[2],
            "POST",
        )
        scope = hooks.operation(details)
        if scope is None:
            return await self._fetch_token(ctx, tokens, fetch, details)
        with scope:
            return await self._fetch_token(ctx, tokens, fetch, details)

    async def _fetch_token(
        self,
        ctx: SessionContext,
        tokens: TokenCache,
        fetch: Callable[[], Awaitable[Token]],
        details: OperationDetails | None,
    ) -> Token:
        hooks = self._hooks
        gate = None if tokens.platform is None else self.attempts.token(EndpointId.oauth(tokens.platform))
        attempt = 0
        previous_delay_ms: float | None = None
        while True:
            flight = None
            if gate is not None:
                flight = await gate.flight(self._reports, self._sleep)
                await flight.leave()
            try:
                if hooks is None or details is None:
                    outcome = await self._token_attempt(ctx, fetch, None)
                else:
                    details.attempts = attempt + 1
                    observed = AttemptDetails(details, attempt, ResendReason.RETRY if attempt else None)
                    scope = hooks.attempt(observed)
                    if scope is None:
                        outcome = await self._token_attempt(ctx, fetch, observed)
                    else:
                        with scope:
                            outcome = await self._token_attempt(ctx, fetch, observed)
            except BaseException:
                if flight is not None:
                    flight.abandon()
                raise
            if isinstance(outcome, Token):
                if flight is not None:
                    flight.answered(None)
                if hooks is not None and details is not None:
                    retried = None
                    if attempt:
                        retried = RetrySuccess(
                            ctx.session_id, RetryKind.OPERATION, attempt, self._now(), TOKEN_OPERATION
                        )
                    hooks.succeeded(details, retried)
                return outcome
            if flight is not None:
                flight.answered(outcome)
            if details is not None:
                details.outcome = outcome
            previous_delay_ms, _ = await self._backoff(
                TOKEN_OPERATION, ctx, outcome, attempt, previous_delay_ms, details
            )
            attempt += 1

    async def _token_attempt(
        self, ctx: SessionContext, fetch: Callable[[], Awaitable[Token]], details: AttemptDetails | None
    ) -> Token | SdkErrorEvent:
        """One fetch, its failure classified here so the attempt's scope sees it."""
        try:
            return await fetch()
        except TransportFailure as exc:
            raw = exc.raw
            event = self._classify(raw)
            if details is not None:
                details.event = event
                details.status = raw.status
            return event


def ensure_from(tokens: TokenCache, min_validity_s: float) -> Callable[[], Awaitable[Token]]:
    return lambda: tokens.ensure(min_validity_s)


def refresh_from(tokens: TokenCache, stale: Token | None) -> Callable[[], Awaitable[Token]]:
    return lambda: tokens.refresh(stale)
