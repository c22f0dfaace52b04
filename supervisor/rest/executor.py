"""The one retry executor: every operation that may be retried goes through :meth:`RetryExecutor.call`.

REST calls (through :class:`~supervisor.rest.pipeline.RequestPipeline`) and in-band socket
requests (a Web Messaging ``onMessage``) alike. Per attempt (docs/architecture.md, "Decisions the
code relies on"):

1. the endpoint, when the operation has one, must admit the attempt: its pace, its circuit (else
   :class:`CircuitOpenError`), its places in flight (a connect endpoint's), all decided by its
   :class:`~machines.endpoint.Endpoint` through the attempt shell (supervisor/attempts/); an
   in-band request has none: its connection gates it;
2. the attempt carries the current token (refreshed 5 minutes early), when the operation
   has a token cache;
3. a failure comes back as a RawError, the taxonomy classifies it (once: the only
   classification of that answer), the endpoint is told (once: circuit, pace, Retry-After hold);
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

This module is the operation's loop (admission, attempt, classification, replay); what happens
between two attempts, wait or stop, is :class:`~supervisor.rest.backoff.Backoff`'s, and a token
fetch, an operation of its own, is :class:`~supervisor.rest.token_fetch.TokenFetch`'s.
"""

from __future__ import annotations

import enum
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import anyio

from supervisor.attempts import SILENT, Attempts, Flight, Gate, Reports
from supervisor.boundary import SessionContext
from supervisor.clock import Clock, Rng, iso_utc
from supervisor.errors import ConnectionLost, OperationError
from supervisor.events import RetryAttempt, RetryKind, RetrySuccess
from supervisor.rest.backoff import Backoff, Sleep
from supervisor.rest.hooks import AttemptDetails, ExecutorHooks, OperationDetails, ResendReason
from supervisor.rest.token_fetch import TOKEN_OPERATION, Fetch, TokenFetch, ensure_from, refresh_from
from supervisor.rest.tokens import Token, TokenCache
from supervisor.taxonomy import Classifier, RawError, SdkErrorEvent
from supervisor.taxonomy.headers import RateLimitReading
from supervisor.vocabulary import EndpointId

__all__ = ["TOKEN_OPERATION", "Attempt", "Reading", "RetryExecutor", "Sleep"]

T = TypeVar("T")
# one attempt: given the current token, the result, or a description of the failure
Attempt = Callable[[Token | None], Awaitable[T | RawError | SdkErrorEvent]]
# what a successful result says of the platform's rate window (None: nothing)
Reading = Callable[[T], RateLimitReading | None]


class _Kind(enum.Enum):
    # a classified RawError: the endpoint is told, the policy may retry it
    FAILED = enum.auto()
    # a success that failed validation: the endpoint answered (healthy), the operation is over
    ANSWERED = enum.auto()
    # no answer to rely on: the connection under an in-band request is gone (the transport
    # reports the end), or a write's outcome is unknown; over, and the endpoint is told nothing
    LOST = enum.auto()


@dataclass(frozen=True, slots=True)
class _Failure:
    event: SdkErrorEvent
    kind: _Kind


class RetryExecutor:
    """Retries, token rotation and circuit gating for the operations of every platform."""

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
        self._hooks = hooks
        # where the endpoints' circuit and pacing moves go: the hooks, else nowhere
        self._reports: Reports = hooks if hooks is not None else SILENT
        self._sleep = sleep
        self._refresh_before_retry = refresh_before_retry_s
        self._backoff = Backoff(clock, rng if rng is not None else random.Random(), hooks)
        self._token = TokenFetch(attempts, self._backoff, self._classify, clock, hooks, self._reports)

    @property
    def refresh_before_retry_s(self) -> float:
        """Before a retry, a token expiring within this is refreshed (``tokens.refreshBeforeRetry``)."""
        return self._refresh_before_retry

    @refresh_before_retry_s.setter
    def refresh_before_retry_s(self, seconds: float) -> None:
        self._refresh_before_retry = seconds

    async def token(self, ctx: SessionContext, tokens: TokenCache, fetch: Fetch) -> Token:
        """A token from ``fetch`` (supervisor/rest/token_fetch.py): a 4xx is TOKEN_REFRESH_FAILED
        (fail-fast); a 5xx or a network failure is retried per its policy."""
        return await self._token(ctx, tokens, fetch, self._sleep)

    def _classify(self, raw: RawError) -> SdkErrorEvent:
        event = self.classifier.classify(raw)
        if self._hooks is not None:
            self._hooks.classified(event)
        return event

    def _now(self) -> str:
        return iso_utc(self._clock.time())

    async def call(
        self,
        attempt_once: Attempt[T],
        *,
        ctx: SessionContext,
        operation: str,
        circuit: EndpointId | None,
        tokens: TokenCache | None = None,
        route: str | None = None,
        server: tuple[str, int | None] | None = None,
        method: str | None = None,
        idempotent: bool = True,
        admitted: Flight | None = None,
        reading: Reading[T] | None = None,
    ) -> T:
        """Run one logical operation; return its result or raise.

        ``attempt_once(token)`` makes one attempt with the current token (None without a
        token cache) and returns its result, or describes its failure: a RawError to
        classify, or an already-decided SdkErrorEvent (a success that failed validation:
        healthy for the circuit, final for the operation). It raises
        :class:`~supervisor.errors.ConnectionLost` when the connection it rode on is gone:
        that failure is classified and ends the operation unretried (the transport reports
        the connection's end itself). Raises :class:`OperationError`, :class:`CircuitOpenError`.

        ``idempotent`` False: a failure the taxonomy flags ``reconcileBeforeRetry`` (a 504 on a
        write: it may have been applied) ends the operation unretried, as a lost connection does;
        the caller reads back before anything is sent again. ``admitted``: a connect attempt the
        caller already admitted on its endpoint (a session's CXone start: the runner waited for its
        slot and asked the circuit); it is the operation's first attempt, and its retries are
        asked of the same endpoint. ``reading``: what a successful result says of the platform's
        rate window (Genesys' ``inin-ratelimit-*``), told to the endpoint with the success (its pace
        slows before the window is spent: ``Pacer.reading``).
        """
        hooks = self._hooks
        gate = None
        if admitted is not None:
            gate = admitted.gate
        elif circuit is not None:
            gate = self.attempts.get(circuit)
        if hooks is None:
            return await self._run(
                attempt_once, ctx, operation, gate, tokens, idempotent, admitted, None, reading
            )
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
            return await self._run(
                attempt_once, ctx, operation, gate, tokens, idempotent, admitted, details, reading
            )
        with scope:
            return await self._run(
                attempt_once, ctx, operation, gate, tokens, idempotent, admitted, details, reading
            )

    async def _run(
        self,
        attempt_once: Attempt[T],
        ctx: SessionContext,
        operation: str,
        gate: Gate | None,
        tokens: TokenCache | None,
        idempotent: bool,
        admitted: Flight | None,
        details: OperationDetails | None,
        reading: Reading[T] | None = None,
    ) -> T:
        hooks = self._hooks
        reports = self._reports
        sleep = self._sleep
        if gate is not None:
            gate.called()
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
            flight = None
            if gate is not None:
                if admitted is not None and admitted.admitted:
                    flight = admitted  # its slot and circuit were asked by the caller
                else:
                    answer = gate.at_once(reports, sleep)
                    flight = (
                        answer if isinstance(answer, Flight) else await gate.flight(reports, sleep, answer)
                    )
                admitted = None
                if not flight.leave_at_once():
                    await flight.leave()
            try:
                if details is None:
                    outcome = await self._try(attempt_once, token, ctx, None, idempotent)
                else:
                    details.attempts = resends + 1
                    outcome = await self._observed(
                        attempt_once, token, ctx, AttemptDetails(details, resends, reason), idempotent
                    )
            except BaseException:
                if flight is not None:
                    flight.abandon()
                raise
            if not isinstance(outcome, _Failure):
                if flight is not None:
                    flight.answered(None, reports, None if reading is None else reading(outcome))
                if hooks is not None and details is not None:
                    retried = None
                    if resends:
                        retried = RetrySuccess(
                            ctx.session_id, RetryKind.OPERATION, resends, operation, timestamp=self._now()
                        )
                    hooks.succeeded(details, retried)
                return outcome
            event = outcome.event
            if details is not None:
                details.outcome = event
            if outcome.kind is not _Kind.FAILED:
                if flight is not None:
                    if outcome.kind is _Kind.ANSWERED:
                        flight.answered(None, reports)  # the endpoint answered: healthy
                    else:
                        flight.abandon()  # no answer came (a lost connection, an unknown outcome)
                if hooks is not None and details is not None:
                    hooks.gave_up(details, None)
                raise OperationError(event, published=hooks is not None)
            if flight is not None:
                # the echo rule, the circuit, the cut and the endpoint's Retry-After hold: once
                flight.answered(event, reports)
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
            # the sleep read when the wait begins, not when the operation did: an operation in flight
            # waits with the executor's sleep of now (a test's clock-driven one swapped in meanwhile)
            previous_delay_ms, skipped = await self._backoff.wait(
                operation, ctx, event, attempt, previous_delay_ms, details, self._sleep, gate
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
        self,
        attempt_once: Attempt[T],
        token: Token | None,
        ctx: SessionContext,
        details: AttemptDetails,
        idempotent: bool,
    ) -> T | _Failure:
        hooks = self._hooks
        assert hooks is not None
        scope = hooks.attempt(details)
        if scope is None:
            return await self._try(attempt_once, token, ctx, details, idempotent)
        with scope:
            return await self._try(attempt_once, token, ctx, details, idempotent)

    async def _try(
        self,
        attempt_once: Attempt[T],
        token: Token | None,
        ctx: SessionContext,
        details: AttemptDetails | None,
        idempotent: bool,
    ) -> T | _Failure:
        """One attempt, its failure classified here so the attempt's scope sees it."""
        try:
            outcome = await attempt_once(token)
        except ConnectionLost as lost:
            raw = lost.raw
            failure = _Failure(self._classify(raw), _Kind.LOST)
        else:
            if isinstance(outcome, SdkErrorEvent):
                # a success that failed validation (INCOMPLETE_RESPONSE, ...): classified all the same
                if self._hooks is not None:
                    self._hooks.classified(outcome)
                failure = _Failure(outcome, _Kind.ANSWERED)
                if details is not None and outcome.raw_status is not None and outcome.raw_status < 600:
                    # the answer's HTTP status (a 200 without a field it needs): it got a response
                    details.status = outcome.raw_status
            elif isinstance(outcome, RawError):
                event = self._classify(outcome)
                # a write that may have been applied is read back, never sent again blindly
                unknown = not idempotent and event.reconcile_before_retry
                failure = _Failure(event, _Kind.LOST if unknown else _Kind.FAILED)
                if details is not None:
                    details.status = outcome.status
            else:
                if details is not None:
                    details.status = _status_of(outcome)
                return outcome
        if details is not None:
            details.event = failure.event
        return failure


def _status_of(outcome: object) -> int | None:
    """The HTTP status of a successful attempt's answer (an httpx response), None for another answer
    (an in-band socket request's reply): telemetry's ``http.response.status_code`` on the attempt."""
    status = getattr(outcome, "status_code", None)
    return status if isinstance(status, int) else None
