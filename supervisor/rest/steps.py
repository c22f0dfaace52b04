"""The steps every operation of the retry executor shares (supervisor/rest/executor.py).

Classifying a failure, telling the hooks about circuit and pacing moves, waiting for a paced
slot, the backoff that says "retry after this long" or "stop" (the one place a retry decision
is made: the class policy, a server's Retry-After as its minimum, the endpoint's retry budget),
and the token fetch, a logical operation of its own (``oauth.token``) behind its own circuit.
:class:`RetryExecutor` builds its loop (:meth:`~supervisor.rest.executor.RetryExecutor.call`)
on these.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import NoReturn

import anyio

from machines.effects import CircuitEffect
from machines.pacing import Pacer, PacerReport
from machines.registry import Admission, CircuitRegistry
from machines.retry_budget import RetryBudget
from supervisor.boundary import SessionContext
from supervisor.clock import Clock, Rng, iso_utc
from supervisor.errors import CircuitOpenError, OperationError, TransportFailure
from supervisor.events import RetryAttempt, RetryExhausted, RetryKind, RetrySuccess
from supervisor.rest.hooks import AttemptDetails, ExecutorHooks, OperationDetails, ResendReason
from supervisor.rest.tokens import Token, TokenCache
from supervisor.retry import decide_retry
from supervisor.retry.backoff import GiveUpReason, RetryDecision
from supervisor.taxonomy import Channel, Classifier, RawError, SdkErrorEvent, TaxonomyClass

__all__ = [
    "TOKEN_OPERATION",
    "ExecutorSteps",
    "Sleep",
    "ensure_from",
    "refresh_from",
    "seconds_of",
    "throttles",
    "unknown_raw",
]

# the operation name of a token fetch (its RETRY_* events and its telemetry span)
TOKEN_OPERATION = "oauth.token"

Sleep = Callable[[float], Awaitable[None]]


class ExecutorSteps:
    """Classification, reports, pacing, backoff and token fetches (the module docstring)."""

    def __init__(
        self,
        classifier: Classifier,
        circuits: CircuitRegistry,
        clock: Clock,
        *,
        rng: Rng | None = None,
        hooks: ExecutorHooks | None = None,
        sleep: Sleep = anyio.sleep,
        refresh_before_retry_s: float = 60.0,
        admission: Admission | None = None,
    ) -> None:
        self.classifier = classifier
        self.circuits = circuits
        # beyond the seed (issue 15): REST pacing per endpoint and a retry budget across calls
        self.admission = admission
        self._clock = clock
        self._rng: Rng = rng if rng is not None else random.Random()
        self._hooks = hooks
        self._sleep = sleep
        self._refresh_before_retry = refresh_before_retry_s

    def _classify(self, raw: RawError) -> SdkErrorEvent:
        event = self.classifier.classify(raw)
        if self._hooks is not None:
            self._hooks.classified(event)
        return event

    def _circuit(self, effects: tuple[CircuitEffect, ...]) -> None:
        if effects and self._hooks is not None:
            self._hooks.circuit(effects)

    def _pacing(self, report: PacerReport | None) -> None:
        if report is not None and self._hooks is not None:
            self._hooks.pacing(report)

    async def _paced(self, pacer: Pacer) -> None:
        """Wait for the endpoint's next slot; reserve again when a throttle voided it meanwhile."""
        while True:
            generation = pacer.generation
            wait, booked = pacer.reserve()
            due = self._clock.monotonic() + wait
            if wait > 0:
                await self._sleep(wait)
            if booked and pacer.generation == generation:
                # booked; spaced again at the rate if a stall left many slots due at once
                while pacer.generation == generation and (extra := pacer.send(due)) > 0:
                    await self._sleep(extra)
                if pacer.generation == generation:
                    return

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
        budget: RetryBudget | None = None,
    ) -> tuple[float, int]:
        """Wait before the next retry as the event's class policy says; raise when it says stop.

        Returns the delay it last waited, in ms (decorrelated jitter grows from it), and how many
        of the policy's retries the endpoint's retry budget skipped on the way. The budget is
        asked when a retry comes due, not when the failure comes back (issue 15): a retry it
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
            if budget is None or budget.allow_retry():
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
        breaker = self.circuits.get(f"{tokens.name}:oauth") if tokens.name else None
        attempt = 0
        previous_delay_ms: float | None = None
        while True:
            probe_id = 0
            if breaker is not None:
                admitted = breaker.admit()
                if admitted.effects:
                    self._circuit(admitted.effects)
                if not admitted.allowed:
                    raise CircuitOpenError(breaker.circuit_id, admitted.retry_in_s)
                probe_id = admitted.probe_id
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
            if isinstance(outcome, Token):
                if breaker is not None:
                    self._circuit(breaker.record_success(probe_id))
                if hooks is not None and details is not None:
                    retried = None
                    if attempt:
                        retried = RetrySuccess(
                            ctx.session_id, RetryKind.OPERATION, attempt, self._now(), TOKEN_OPERATION
                        )
                    hooks.succeeded(details, retried)
                return outcome
            if breaker is not None:
                self._circuit(breaker.record_failure(outcome, probe_id))
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
            raw = exc.raw if isinstance(exc.raw, RawError) else unknown_raw(ctx, Channel.REST)
            event = self._classify(raw)
            if details is not None:
                details.event = event
                details.status = raw.status
            return event


def ensure_from(tokens: TokenCache, min_validity_s: float) -> Callable[[], Awaitable[Token]]:
    return lambda: tokens.ensure(min_validity_s)


def throttles(event: SdkErrorEvent) -> bool:
    """The platform refused for load: a 429, or a 5xx that says when to come back (Retry-After).

    In the taxonomy's terms (a TRANSIENT code whose policy honours Retry-After, never a code's
    name), and the answer either carried a Retry-After or is the rate-limit status itself
    (429, RFC 6585 section 4). A 5xx without Retry-After is a back end failing (a brownout), not
    a request to slow down: retries, their budget and the circuit answer it. Cutting the whole
    endpoint's pace for it starved the healthy calls to ~1/s (docs/benchmarks.md, "Brownout").
    """
    if event.taxonomy_class is not TaxonomyClass.TRANSIENT or not event.policy.honors_retry_after:
        return False
    return event.retry_after_ms is not None or event.raw_status == 429


def seconds_of(ms: int | None) -> float | None:
    return None if ms is None else ms / 1000.0


def refresh_from(tokens: TokenCache, stale: Token | None) -> Callable[[], Awaitable[Token]]:
    return lambda: tokens.refresh(stale)


def unknown_raw(ctx: SessionContext, channel: Channel | None = None) -> RawError:
    return RawError(platform=ctx.platform, channel=channel or ctx.channel, exception="OSError")
