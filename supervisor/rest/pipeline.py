"""The one retry layer: every REST call goes through :class:`RequestPipeline`.

Per attempt (design.md, "Decisions already taken"):

1. the endpoint's circuit must admit the call (else :class:`CircuitOpenError`);
2. the request carries the cached token (refreshed 5 minutes early);
3. a failure becomes a RawError, the taxonomy classifies it, the circuit records it;
4. a 401 on a token that had expired by our clock is replayed once with a fresh token;
5. otherwise the class policy decides: retry after its backoff (a server's Retry-After is
   the minimum delay), or give up with :class:`OperationError`;
6. before every retry a token expiring within 60 s is refreshed and the request is cloned
   with the new Authorization header (seed edge case 3).

httpx's own retries stay at 0 and nothing else retries: retries multiply across layers
(AWS Builders' Library). Telemetry leaves through :class:`PipelineHooks` only, so tracing
can attach later without touching this loop.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import anyio
import httpx

from machines.registry import CircuitRegistry
from supervisor.boundary import SessionContext, raw_from_exception, raw_from_response
from supervisor.clock import Clock, Rng
from supervisor.errors import CircuitOpenError, OperationError, TransportFailure
from supervisor.rest.tokens import Token, TokenCache
from supervisor.retry import decide_retry
from supervisor.taxonomy import Channel, Classifier, RawError, SdkErrorEvent

Sleep = Callable[[float], Awaitable[None]]
T = TypeVar("T")


@functools.lru_cache(maxsize=4096)
def _path_of(url: str) -> str:
    # parsing a URL costs ~10 µs; a daemon calls the same few endpoints over and over
    return httpx.URL(url).path


@dataclass(frozen=True, slots=True)
class AttemptDetails:
    """What hooks learn about one retry decision or outcome."""

    operation: str
    session_id: str
    attempt: int
    event: SdkErrorEvent | None = None
    delay_s: float = 0.0
    from_retry_after: bool = False
    token_refreshed: bool = False


class PipelineHooks(Protocol):
    """Typed instrumentation seam (stamina's RetryHook idea): no tracer calls in the loop."""

    def classified(self, event: SdkErrorEvent) -> None: ...

    def retry_scheduled(self, details: AttemptDetails) -> None: ...

    def succeeded(self, details: AttemptDetails) -> None: ...

    def gave_up(self, details: AttemptDetails) -> None: ...

    def circuit_effects(self, effects: tuple[Any, ...]) -> None: ...


class NoHooks:
    def classified(self, event: SdkErrorEvent) -> None:
        pass

    def retry_scheduled(self, details: AttemptDetails) -> None:
        pass

    def succeeded(self, details: AttemptDetails) -> None:
        pass

    def gave_up(self, details: AttemptDetails) -> None:
        pass

    def circuit_effects(self, effects: tuple[Any, ...]) -> None:
        pass


@dataclass(frozen=True, slots=True)
class ResponseCheck:
    """Fields a success must carry, and the conversationId it must name (seed section 3)."""

    required: tuple[str, ...] = ()
    expected_conversation_id: str | None = None


class RequestPipeline:
    """Retries, token rotation and circuit gating for REST calls of one platform."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        classifier: Classifier,
        circuits: CircuitRegistry,
        clock: Clock,
        *,
        tokens: TokenCache | None = None,
        rng: Rng | None = None,
        hooks: PipelineHooks | None = None,
        sleep: Sleep = anyio.sleep,
        refresh_before_retry_s: float = 60.0,
    ) -> None:
        self.client = client
        self.classifier = classifier
        self.circuits = circuits
        self.tokens = tokens
        self._clock = clock
        self._rng: Rng = rng if rng is not None else random.Random()
        self._hooks: PipelineHooks = hooks if hooks is not None else NoHooks()
        self._sleep = sleep
        self._refresh_before_retry = refresh_before_retry_s

    async def call(
        self,
        attempt_once: Callable[[Token | None], Awaitable[T | RawError | SdkErrorEvent]],
        *,
        ctx: SessionContext,
        circuit: str,
        operation: str,
    ) -> T:
        """Run one logical operation through the retry layer; return its result or raise.

        ``attempt_once(token)`` makes one attempt with the current token (None without a
        token cache) and returns its result, or describes its failure: a RawError to
        classify, or an already-decided SdkErrorEvent (a success that failed validation,
        which is healthy for the circuit and final for the operation). The loop does the
        rest: circuit gating, classification, the 401 replay, per-class retries, token
        refresh before retries, hooks. Raises :class:`OperationError`, :class:`CircuitOpenError`.
        """
        breaker = self.circuits.get(circuit)
        token = await self._token(ctx)
        attempt = 0
        previous_delay_ms: float | None = None
        replayed_401 = False
        while True:
            admission = breaker.admit()
            if admission.effects:
                self._hooks.circuit_effects(admission.effects)
            if not admission.allowed:
                raise CircuitOpenError(breaker.circuit_id, admission.retry_in_s)
            outcome = await attempt_once(token)
            if isinstance(outcome, SdkErrorEvent):
                # the endpoint answered: healthy for the circuit, corrupt for the session
                self._record(breaker.record_success(admission.probe_id))
                self._hooks.classified(outcome)
                raise OperationError(outcome)
            if not isinstance(outcome, RawError):
                self._record(breaker.record_success(admission.probe_id))
                if attempt or replayed_401:
                    self._hooks.succeeded(AttemptDetails(operation, ctx.session_id, attempt))
                return outcome
            event = self.classifier.classify(outcome)
            self._hooks.classified(event)
            self._record(breaker.record_failure(event, admission.probe_id))
            if event.code == "TOKEN_EXPIRED" and not replayed_401 and self.tokens is not None:
                # seed edge case 3: replay once with a fresh token, never with the stale one
                replayed_401 = True
                attempt += 1  # the replay spends the token_refresh budget: a second 401 is final
                token = await self._refresh(ctx, token)
                self._hooks.retry_scheduled(
                    AttemptDetails(operation, ctx.session_id, attempt, event, 0.0, False, True)
                )
                continue
            previous_delay_ms = await self._backoff(operation, ctx, event, attempt, previous_delay_ms)
            attempt += 1
            if self.tokens is not None:
                # seed edge case 3: refresh a token that expires within 60 s before retrying
                token = await self._ensure(ctx, self._refresh_before_retry)

    async def request(
        self,
        method: str,
        url: str,
        *,
        ctx: SessionContext,
        circuit: str,
        operation: str | None = None,
        channel: Channel | None = None,
        check: ResponseCheck | None = None,
        ok_statuses: frozenset[int] = frozenset(),
        **kwargs: Any,
    ) -> httpx.Response:
        """Send one logical HTTP request through :meth:`call`; return the successful response.

        ``ok_statuses`` are non-2xx statuses that are answers, not failures (CXone's 304).
        Each attempt is a clone signed with the token current at that attempt.
        """
        path = _path_of(url)
        headers = dict(kwargs.pop("headers", None) or {})
        tokens = self.tokens

        async def attempt_once(token: Token | None) -> httpx.Response | RawError | SdkErrorEvent:
            if token is not None:
                headers["Authorization"] = token.authorization
            try:
                # no headers argument at all when there are none: httpx would merge an empty dict
                response = await self.client.request(method, url, headers=headers or None, **kwargs)
            except (httpx.HTTPError, httpx.InvalidURL, OSError) as exc:
                return raw_from_exception(exc, ctx=ctx, channel=channel, method=method, endpoint=path)
            status = response.status_code
            if 200 <= status < 300 or status in ok_statuses:
                # only a 2xx carries a body to check (RFC 9110 section 15.4.5: a 304 has none)
                if check is not None and status < 300:
                    problem = self._check(response, ctx, channel, path, check)
                    if problem is not None:
                        return problem
                return response
            expired = token is not None and tokens is not None and tokens.expired(token)
            return raw_from_response(response, ctx=ctx, channel=channel, endpoint=path, token_expired=expired)

        return await self.call(
            attempt_once, ctx=ctx, circuit=circuit, operation=operation or f"{method} {path}"
        )

    def _record(self, effects: tuple[Any, ...]) -> None:
        if effects:
            self._hooks.circuit_effects(effects)

    async def _backoff(
        self,
        name: str,
        ctx: SessionContext,
        event: SdkErrorEvent,
        attempt: int,
        previous_delay_ms: float | None,
    ) -> float:
        """Wait before retry ``attempt + 1`` as the event's class policy says; raise when it says stop.

        Returns the delay it waited, in ms (decorrelated jitter grows from it).
        """
        decision = decide_retry(
            event.policy,
            attempt,
            self._rng,
            retryable=event.retryable,
            retry_after_ms=event.retry_after_ms,
            previous_delay_ms=previous_delay_ms,
        )
        if not decision.retry:
            self._hooks.gave_up(AttemptDetails(name, ctx.session_id, attempt, event))
            raise OperationError(event, exhausted=event.retryable and attempt > 0)
        delay_s = decision.delay_ms / 1000.0
        self._hooks.retry_scheduled(
            AttemptDetails(name, ctx.session_id, attempt + 1, event, delay_s, decision.from_retry_after)
        )
        await self._sleep(delay_s)
        return decision.delay_ms

    def _check(
        self,
        response: httpx.Response,
        ctx: SessionContext,
        channel: Channel | None,
        path: str,
        check: ResponseCheck,
    ) -> SdkErrorEvent | None:
        try:
            body: object = response.json() if response.content else {}
        except ValueError:
            body = None
        if body is None:
            raw = RawError(
                platform=ctx.platform,
                channel=channel or ctx.channel,
                method=response.request.method,
                endpoint=path,
                exception="json.JSONDecodeError",
                context=ctx.envelope_context(),
            )
            return self.classifier.classify(raw)
        return self.classifier.validate_response(
            body if isinstance(body, Mapping) else {},
            platform=ctx.platform,
            channel=channel or ctx.channel,
            required=check.required,
            expected_conversation_id=check.expected_conversation_id,
            context=ctx.envelope_context(),
            endpoint=f"{response.request.method} {path}",
        )

    async def _token(self, ctx: SessionContext) -> Token | None:
        if self.tokens is None:
            return None
        return await self._with_token_retries(ctx, self.tokens.get)

    async def _ensure(self, ctx: SessionContext, min_validity_s: float) -> Token | None:
        tokens = self.tokens
        if tokens is None:
            return None
        return await self._with_token_retries(ctx, lambda: tokens.ensure(min_validity_s))

    async def _refresh(self, ctx: SessionContext, stale: Token | None) -> Token:
        tokens = self.tokens
        assert tokens is not None
        return await self._with_token_retries(ctx, lambda: tokens.refresh(stale))

    async def _with_token_retries(self, ctx: SessionContext, fetch: Callable[[], Awaitable[Token]]) -> Token:
        """Token endpoint calls: a 4xx is TOKEN_REFRESH_FAILED (fail-fast); 5xx/network retry per policy."""
        attempt = 0
        previous_delay_ms: float | None = None
        while True:
            try:
                return await fetch()
            except TransportFailure as exc:
                raw = exc.raw
                if not isinstance(raw, RawError):
                    raw = RawError(platform=ctx.platform, channel=Channel.REST, exception="OSError")
                event = self.classifier.classify(raw)
                self._hooks.classified(event)
                previous_delay_ms = await self._backoff("oauth.token", ctx, event, attempt, previous_delay_ms)
                attempt += 1
