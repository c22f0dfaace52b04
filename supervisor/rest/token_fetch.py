"""A token fetch: a logical operation of its own (``oauth.token``), behind its own circuit.

The retry executor (supervisor/rest/executor.py) asks for a token before an operation's first
attempt when none is cached, before a retry when the cached one expires within 60 s (seed edge
case 3), and for a fresh one when a 401 is replayed. :class:`TokenFetch` runs that fetch as any
operation runs: admitted by the ``<credential>:oauth`` endpoint, observed by the hooks (one scope
around it, one per attempt), a failure classified once and retried per its class policy
(:class:`~supervisor.rest.backoff.Backoff`). A 4xx is TOKEN_REFRESH_FAILED (fail-fast); a 5xx or a
network failure is retried.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from supervisor.attempts import Attempts, Reports
from supervisor.boundary import SessionContext
from supervisor.clock import Clock, iso_utc
from supervisor.errors import TransportFailure
from supervisor.events import RetryKind, RetrySuccess
from supervisor.rest.backoff import Backoff, Sleep
from supervisor.rest.hooks import AttemptDetails, ExecutorHooks, OperationDetails, ResendReason
from supervisor.rest.tokens import Token, TokenCache
from supervisor.taxonomy import RawError, SdkErrorEvent
from supervisor.vocabulary import EndpointId

__all__ = ["TOKEN_OPERATION", "Fetch", "TokenFetch", "ensure_from", "refresh_from"]

# the operation name of a token fetch (its RETRY_* events and its telemetry span)
TOKEN_OPERATION = "oauth.token"

#: how the cache is asked: a cached-or-fetched token, a refresh of a stale one, ...
Fetch = Callable[[], Awaitable[Token]]


class TokenFetch:
    """The ``oauth.token`` operation (the module docstring)."""

    def __init__(
        self,
        attempts: Attempts,
        backoff: Backoff,
        classify: Callable[[RawError], SdkErrorEvent],
        clock: Clock,
        hooks: ExecutorHooks | None,
        reports: Reports,
    ) -> None:
        self._attempts = attempts
        self._backoff = backoff
        self._classify = classify
        self._clock = clock
        self._hooks = hooks
        self._reports = reports

    async def __call__(self, ctx: SessionContext, tokens: TokenCache, fetch: Fetch, sleep: Sleep) -> Token:
        """A token from ``fetch``; raises OperationError when the fetch failed for good.

        The token endpoint has a circuit of its own (``<credential>:oauth``): while it is down, the
        sessions that need a token wait for the probe instead of each asking it again, and when
        it returns one fetch serves them all (the cache is single-flight).
        """
        hooks = self._hooks
        if hooks is None:
            return await self._fetch(ctx, tokens, fetch, None, sleep)
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
            return await self._fetch(ctx, tokens, fetch, details, sleep)
        with scope:
            return await self._fetch(ctx, tokens, fetch, details, sleep)

    async def _fetch(
        self,
        ctx: SessionContext,
        tokens: TokenCache,
        fetch: Fetch,
        details: OperationDetails | None,
        sleep: Sleep,
    ) -> Token:
        hooks = self._hooks
        gate = None
        if tokens.platform is not None:
            gate = self._attempts.token(EndpointId.oauth(tokens.platform).of(tokens.tenant))
        attempt = 0
        previous_delay_ms: float | None = None
        while True:
            flight = None
            if gate is not None:
                flight = await gate.flight(self._reports, sleep)
                await flight.leave()
            try:
                if hooks is None or details is None:
                    outcome = await self._attempt(ctx, fetch, None)
                else:
                    details.attempts = attempt + 1
                    observed = AttemptDetails(details, attempt, ResendReason.RETRY if attempt else None)
                    scope = hooks.attempt(observed)
                    if scope is None:
                        outcome = await self._attempt(ctx, fetch, observed)
                    else:
                        with scope:
                            outcome = await self._attempt(ctx, fetch, observed)
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
                            ctx.session_id,
                            RetryKind.OPERATION,
                            attempt,
                            TOKEN_OPERATION,
                            timestamp=iso_utc(self._clock.time()),
                        )
                    hooks.succeeded(details, retried)
                return outcome
            if flight is not None:
                flight.answered(outcome)
            if details is not None:
                details.outcome = outcome
            previous_delay_ms, _ = await self._backoff.wait(
                TOKEN_OPERATION, ctx, outcome, attempt, previous_delay_ms, details, sleep
            )
            attempt += 1

    async def _attempt(
        self, ctx: SessionContext, fetch: Fetch, details: AttemptDetails | None
    ) -> Token | SdkErrorEvent:
        """One fetch, its failure classified here so the attempt's scope sees it."""
        try:
            token = await fetch()
        except TransportFailure as exc:
            raw = exc.raw
            event = self._classify(raw)
            if details is not None:
                details.event = event
                details.status = raw.status
            return event
        if details is not None:
            # a token is only ever taken from a 200 answer (RFC 6749 section 5.1; supervisor/rest/tokens.py)
            details.status = 200
        return token


def ensure_from(tokens: TokenCache, min_validity_s: float) -> Fetch:
    return lambda: tokens.ensure(min_validity_s)


def refresh_from(tokens: TokenCache, stale: Token | None) -> Fetch:
    return lambda: tokens.refresh(stale)
