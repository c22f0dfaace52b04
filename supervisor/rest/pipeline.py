"""REST calls through the one retry executor: :class:`RequestPipeline` is its HTTP face.

Each logical request becomes one :meth:`~supervisor.rest.executor.RetryExecutor.call`: every
attempt is a new request signed with the token current at that attempt (seed edge case 3),
an error status or a transport exception is described as a RawError (supervisor/boundary.py)
for the executor to classify, and a success may be checked for the fields a partial success
would lack (seed section 3: "inspect the response payload before transitioning to an active
state"). httpx's own retries stay at 0: one retry layer.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import httpx

from supervisor.attempts import Flight, Gate
from supervisor.boundary import HTTP_FAILURES, SessionContext, TokenAge, raw_from_exception, raw_from_response
from supervisor.errors import ConnectionLost
from supervisor.rest.executor import Attempt, Reading, RetryExecutor
from supervisor.rest.tokens import Token, TokenCache
from supervisor.taxonomy import Channel, Classifier, RawError, SdkErrorEvent
from supervisor.taxonomy.headers import RateLimitReading, parse_rate_limit
from supervisor.vocabulary import EndpointId

T = TypeVar("T")


@functools.lru_cache(maxsize=4096)
def _parsed(url: str) -> httpx.URL:
    # parsing a URL costs ~10 µs; a daemon calls the same few endpoints over and over
    return httpx.URL(url)


@dataclass(frozen=True, slots=True)
class ResponseCheck:
    """Fields a success must carry, and the conversationId it must name (seed section 3)."""

    required: tuple[str, ...] = ()
    expected_conversation_id: str | None = None
    # the taxonomy's name of the response ([responses."platform.channel.Response"]): its required
    # fields replace ``required``, and its conversationField is where the drift check reads the id
    kind: str | None = None


class PoolGuard(Protocol):
    """The write fence of a client's pool (supervisor/runtime/fence.py's guards; named here, where the
    REST client may not import the transports): ``passed`` once nothing may be written on the pool's
    sockets (the watchdog aborts them then)."""

    def passed(self) -> bool: ...


def _reading(response: httpx.Response) -> RateLimitReading | None:
    return parse_rate_limit(response.headers)


class RequestPipeline:
    """HTTP requests of one platform through the retry executor, signed by its token cache.

    ``tenant``: the named tenant whose calls these are (``[tenants.NAME]``): every endpoint a call
    names is that tenant's (``NAME/genesys:api``, its own circuit, pace and retry budget), so a
    transport names ``genesys:api`` and its tenant's pipeline keeps tenants apart; None: the default
    tenant's, the endpoints as named.

    ``guard``: the write fence of the client's pool (a fleet member's shard pool, a shared channel's;
    supervisor/runtime/fence.py), None on one host. A request that fails while its guard has passed
    failed because this member aborted the pool's sockets (the shard's lease ended or was given back):
    it is a lost connection (:class:`~supervisor.errors.ConnectionLost`), which the retry executor ends
    unretried (``OperationError``, as any caller expects) and tells no endpoint, so the circuit, pace
    and retry budget hear nothing of it. Counted, the polls a member aborts as it gives shards back (or
    wakes from a SIGSTOP past its deadlines) opened its CXone API circuit, and that opening, published
    to the fleet, held every member's CXone takeovers for seconds.
    """

    def __init__(
        self,
        client: httpx.AsyncClient,
        executor: RetryExecutor,
        *,
        tokens: TokenCache | None = None,
        rate_limit_headers: bool = True,
        tenant: str | None = None,
        guard: PoolGuard | None = None,
    ) -> None:
        self.client = client
        self.executor = executor
        self.tokens = tokens
        self.tenant = tenant
        self.guard = guard
        # read the platform's rate window from each successful answer (inin-ratelimit-*) and tell
        # it to the endpoint's pace ([admission] rateLimitHeaders; docs/runtime.md, "Admission")
        self._reading = _reading if rate_limit_headers else None

    @property
    def classifier(self) -> Classifier:
        return self.executor.classifier

    def gate(self, circuit: EndpointId) -> Gate:
        """The attempt shell's gate of the endpoint ``circuit`` (its Retry-After hold, for one)."""
        return self.executor.attempts.get(circuit.of(self.tenant))

    async def call(
        self,
        attempt_once: Attempt[T],
        *,
        ctx: SessionContext,
        circuit: EndpointId,
        operation: str,
        idempotent: bool = True,
        reading: Reading[T] | None = None,
    ) -> T:
        """Run one logical operation with this platform's token cache (see RetryExecutor.call);
        ``reading``: what a result says of the platform's rate window (:attr:`rate_reading` for an
        HTTP response)."""
        return await self.executor.call(
            attempt_once,
            ctx=ctx,
            operation=operation,
            circuit=circuit.of(self.tenant),
            tokens=self.tokens,
            idempotent=idempotent,
            reading=reading,
        )

    @property
    def rate_reading(self) -> Reading[httpx.Response] | None:
        """How this pipeline reads the rate window from an answer (None: ``rateLimitHeaders`` off)."""
        return self._reading

    async def request(
        self,
        method: str,
        url: str,
        *,
        ctx: SessionContext,
        circuit: EndpointId,
        operation: str | None = None,
        channel: Channel | None = None,
        check: ResponseCheck | None = None,
        ok_statuses: frozenset[int] = frozenset(),
        route: str | None = None,
        admitted: Flight | None = None,
        **kwargs: Any,
    ) -> httpx.Response:
        """Send one logical HTTP request; return the successful response.

        ``ok_statuses`` are non-2xx statuses that are answers, not failures (CXone's 304).
        ``route`` is our own template of the URL's path (``url.template`` in telemetry).
        ``admitted``: a connect attempt its caller admitted, the request's first attempt (a
        session's CXone start; RetryExecutor.call).
        Raises :class:`~supervisor.errors.OperationError` or :class:`~supervisor.errors.CircuitOpenError`.
        """
        parsed = _parsed(url)
        path = parsed.path
        headers = dict(kwargs.pop("headers", None) or {})
        tokens = self.tokens
        guard = self.guard

        async def attempt_once(token: Token | None) -> httpx.Response | RawError | SdkErrorEvent:
            if token is not None:
                headers["Authorization"] = token.authorization
            try:
                # no headers argument at all when there are none: httpx would merge an empty dict
                # the URL parsed once (cached): httpx takes it as it is, a string it parses again
                response = await self.client.request(method, parsed, headers=headers or None, **kwargs)
            except HTTP_FAILURES as exc:
                raw = raw_from_exception(exc, ctx=ctx, channel=channel, method=method, endpoint=path)
                if guard is not None and guard.passed():
                    # the fence aborted the socket (the shard is no longer this member's): not the
                    # platform's failure; over, unretried, and no endpoint is told
                    raise ConnectionLost(raw) from exc
                return raw
            status = response.status_code
            if 200 <= status < 300 or status in ok_statuses:
                # only a 2xx carries a body to check (RFC 9110 section 15.4.5: a 304 has none)
                if check is not None and status < 300:
                    problem = self.check_body(response, ctx, channel, path, check)
                    if problem is not None:
                        return problem
                return response
            return raw_from_response(
                response, ctx=ctx, channel=channel, endpoint=path, token_age=self.token_age(token)
            )

        return await self.executor.call(
            attempt_once,
            ctx=ctx,
            operation=operation or f"{method} {path}",
            circuit=circuit.of(self.tenant),
            tokens=tokens,
            route=route or path,
            server=(parsed.host, parsed.port),
            method=method,
            admitted=admitted,
            reading=self._reading,
        )

    def token_age(self, token: Token | None) -> TokenAge | None:
        """How near its end ``token`` is by our clock (None for an unsigned request): the 401 rule."""
        if token is None or self.tokens is None:
            return None
        return self.tokens.age(token)

    def check_body(
        self,
        response: httpx.Response,
        ctx: SessionContext,
        channel: Channel | None,
        path: str,
        check: ResponseCheck,
    ) -> RawError | SdkErrorEvent | None:
        """None when the body has what ``check`` asks; else the RawError of a body that does not
        parse (MALFORMED_RESPONSE, classified by the executor) or the validation's event."""
        try:
            body: object = response.json() if response.content else {}
        except (ValueError, RecursionError):  # RecursionError: a body nested thousands deep
            body = None
        if body is None:
            return RawError(
                platform=ctx.platform,
                channel=channel or ctx.channel,
                method=response.request.method,
                endpoint=path,
                exception="json.JSONDecodeError",
                context=ctx.envelope_context(),
            )
        return self.classifier.validate_response(
            body if isinstance(body, Mapping) else {},
            platform=ctx.platform,
            channel=channel or ctx.channel,
            required=check.required,
            expected_conversation_id=check.expected_conversation_id,
            context=ctx.envelope_context(),
            endpoint=f"{response.request.method} {path}",
            kind=check.kind,
        )
