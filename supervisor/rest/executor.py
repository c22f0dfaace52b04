"""The one retry executor: every operation that may be retried goes through :meth:`RetryExecutor.call`.

REST calls (through :class:`~supervisor.rest.pipeline.RequestPipeline`) and in-band socket
requests (a Web Messaging ``onMessage``) alike. Per attempt (design.md, "Decisions already
taken"):

1. the endpoint's circuit, when the operation has one, must admit the attempt (else
   :class:`CircuitOpenError`); an in-band request has none: its connection gates it;
2. the attempt carries the current token (refreshed 5 minutes early), when the operation
   has a token cache;
3. a failure comes back as a RawError, the taxonomy classifies it, the circuit records it;
4. a code flagged ``replayWithFreshToken`` (a 401 on a token at the end of its life by our
   clock: docs/taxonomy.md, "The 401 rule") is replayed once with a fresh token, at once; a
   code flagged ``circuitNeutral`` is not recorded on the circuit (the circuit machine);
5. otherwise the class policy decides (:func:`supervisor.retry.decide_retry`): retry after
   its backoff, a server's Retry-After being the minimum delay, or give up with
   :class:`OperationError`;
6. before every retry a token expiring within 60 s is refreshed, so the retry is signed with
   the new one (seed edge case 3).

Nothing else retries: httpx's own retries stay at 0, websockets' reconnect loop is unused,
and the session machine no longer schedules operation retries (retries multiply across
layers, AWS Builders' Library). Observers attach through :class:`~supervisor.rest.hooks.ExecutorHooks`.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from machines.pacing import echo_of_throttle
from supervisor.boundary import SessionContext
from supervisor.errors import CircuitOpenError, ConnectionLost, OperationError
from supervisor.events import RetryAttempt, RetryKind, RetrySuccess
from supervisor.rest.hooks import AttemptDetails, OperationDetails, ResendReason
from supervisor.rest.steps import (
    TOKEN_OPERATION,
    ExecutorSteps,
    Sleep,
    ensure_from,
    refresh_from,
    seconds_of,
    throttles,
    unknown_raw,
)
from supervisor.rest.tokens import Token, TokenCache
from supervisor.taxonomy import RawError, SdkErrorEvent

__all__ = ["TOKEN_OPERATION", "Attempt", "RetryExecutor", "Sleep", "throttles"]

T = TypeVar("T")
# one attempt: given the current token, the result, or a description of the failure
Attempt = Callable[[Token | None], Awaitable[T | RawError | SdkErrorEvent]]


class _Kind(enum.Enum):
    # a classified RawError: the circuit records it, the policy may retry it
    FAILED = enum.auto()
    # a success that failed validation: the endpoint answered (healthy), the operation is over
    ANSWERED = enum.auto()
    # the connection under an in-band request is gone: over, and the transport reports the end
    LOST = enum.auto()


@dataclass(frozen=True, slots=True)
class _Failure:
    event: SdkErrorEvent
    kind: _Kind


class RetryExecutor(ExecutorSteps):
    """Retries, token rotation and circuit gating for the operations of every platform."""

    async def call(
        self,
        attempt_once: Attempt[T],
        *,
        ctx: SessionContext,
        operation: str,
        circuit: str | None,
        tokens: TokenCache | None = None,
        route: str | None = None,
        server: tuple[str, int | None] | None = None,
        method: str | None = None,
    ) -> T:
        """Run one logical operation; return its result or raise.

        ``attempt_once(token)`` makes one attempt with the current token (None without a
        token cache) and returns its result, or describes its failure: a RawError to
        classify, or an already-decided SdkErrorEvent (a success that failed validation:
        healthy for the circuit, final for the operation). It raises
        :class:`~supervisor.errors.ConnectionLost` when the connection it rode on is gone:
        that failure is classified and ends the operation unretried (the transport reports
        the connection's end itself). Raises :class:`OperationError`, :class:`CircuitOpenError`.
        """
        hooks = self._hooks
        if hooks is None:
            return await self._run(attempt_once, ctx, operation, circuit, tokens, None)
        details = OperationDetails(
            operation,
            ctx,
            circuit,
            route,
            None if server is None else server[0],
            None if server is None else server[1],
            method,
        )
        scope = hooks.operation(details)
        if scope is None:
            return await self._run(attempt_once, ctx, operation, circuit, tokens, details)
        with scope:
            return await self._run(attempt_once, ctx, operation, circuit, tokens, details)

    async def _run(
        self,
        attempt_once: Attempt[T],
        ctx: SessionContext,
        operation: str,
        circuit: str | None,
        tokens: TokenCache | None,
        details: OperationDetails | None,
    ) -> T:
        hooks = self._hooks
        breaker = self.circuits.get(circuit) if circuit is not None else None
        admission = self.admission if circuit is not None else None
        pacer = admission.rest(circuit) if admission is not None and circuit is not None else None
        budget = admission.budget(circuit) if admission is not None and circuit is not None else None
        if budget is not None:
            budget.call()
        token = None
        if tokens is not None:
            # the cached token without an await; a fetch is an operation of its own (token())
            token = tokens.cached() or await self.token(ctx, tokens, tokens.get)
        attempt = 0  # the class policy's retries spent, those the retry budget skipped included
        resends = 0  # the attempts sent after the first
        previous_delay_ms: float | None = None
        replayed = False
        reason: ResendReason | None = None
        while True:
            if pacer is not None:
                await self._paced(pacer)
            probe_id = 0
            if breaker is not None:
                admitted = breaker.admit()
                if admitted.effects:
                    self._circuit(admitted.effects)
                if not admitted.allowed:
                    raise CircuitOpenError(breaker.circuit_id, admitted.retry_in_s)
                probe_id = admitted.probe_id
            sent_at = self._clock.monotonic()
            if details is None:
                outcome = await self._try(attempt_once, token, ctx, None)
            else:
                details.attempts = resends + 1
                outcome = await self._observed(
                    attempt_once, token, ctx, AttemptDetails(details, resends, reason)
                )
            if not isinstance(outcome, _Failure):
                if breaker is not None:
                    self._circuit(breaker.record_success(probe_id))
                if pacer is not None:
                    self._pacing(pacer.admitted())
                if hooks is not None and details is not None:
                    retried = None
                    if resends:
                        retried = RetrySuccess(
                            ctx.session_id, RetryKind.OPERATION, resends, self._now(), operation
                        )
                    hooks.succeeded(details, retried)
                return outcome
            event = outcome.event
            if details is not None:
                details.outcome = event
            if outcome.kind is not _Kind.FAILED:
                if breaker is not None and outcome.kind is _Kind.ANSWERED:
                    self._circuit(breaker.record_success(probe_id))
                if hooks is not None and details is not None:
                    hooks.gave_up(details, None)
                raise OperationError(event, published=hooks is not None)
            throttled = pacer is not None and throttles(event)
            if breaker is not None and not echo_of_throttle(pacer, throttled, probe_id, sent_at):
                # (a refusal of a call in flight when the endpoint's throttle came back echoes
                # that throttle: counted once toward the circuit)
                self._circuit(breaker.record_failure(event, probe_id))
            if throttled and pacer is not None:
                # the platform said "slower" for the endpoint: everyone waits its Retry-After
                self._pacing(pacer.throttled(seconds_of(event.retry_after_ms)))
            if event.replay_with_fresh_token and not replayed and tokens is not None:
                # seed edge case 3: replay once with a fresh token, never with the stale one
                replayed = True
                attempt += 1  # the replay spends the token_refresh budget: a second 401 is final
                resends += 1
                reason = ResendReason.TOKEN_REPLAY
                token = await self.token(ctx, tokens, refresh_from(tokens, token))
                if hooks is not None and details is not None:
                    retry = RetryAttempt(
                        ctx.session_id,
                        RetryKind.OPERATION,
                        attempt,
                        0.0,
                        event.code,
                        event.policy.name,
                        self._now(),
                        operation,
                        token_refreshed=True,
                    )
                    hooks.retry_scheduled(details, retry)
                continue
            previous_delay_ms, skipped = await self._backoff(
                operation, ctx, event, attempt, previous_delay_ms, details, budget
            )
            attempt += 1 + skipped  # the retries the endpoint's budget skipped were spent
            resends += 1
            reason = ResendReason.RETRY
            if tokens is not None:
                # seed edge case 3: refresh a token that expires within 60 s before retrying
                token = tokens.cached(self._refresh_before_retry) or await self.token(
                    ctx, tokens, ensure_from(tokens, self._refresh_before_retry)
                )

    async def _observed(
        self, attempt_once: Attempt[T], token: Token | None, ctx: SessionContext, details: AttemptDetails
    ) -> T | _Failure:
        hooks = self._hooks
        assert hooks is not None
        scope = hooks.attempt(details)
        if scope is None:
            return await self._try(attempt_once, token, ctx, details)
        with scope:
            return await self._try(attempt_once, token, ctx, details)

    async def _try(
        self,
        attempt_once: Attempt[T],
        token: Token | None,
        ctx: SessionContext,
        details: AttemptDetails | None,
    ) -> T | _Failure:
        """One attempt, its failure classified here so the attempt's scope sees it."""
        try:
            outcome = await attempt_once(token)
        except ConnectionLost as lost:
            raw = lost.raw if isinstance(lost.raw, RawError) else unknown_raw(ctx)
            failure = _Failure(self._classify(raw), _Kind.LOST)
        else:
            if isinstance(outcome, SdkErrorEvent):
                # a success that failed validation (INCOMPLETE_RESPONSE, ...): classified all the same
                if self._hooks is not None:
                    self._hooks.classified(outcome)
                failure = _Failure(outcome, _Kind.ANSWERED)
            elif isinstance(outcome, RawError):
                failure = _Failure(self._classify(outcome), _Kind.FAILED)
                if details is not None:
                    details.status = outcome.status
            else:
                return outcome
        if details is not None:
            details.event = failure.event
        return failure
