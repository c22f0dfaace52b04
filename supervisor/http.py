"""``ResilientTransport``: the taxonomy's decisions for an ``httpx.Client`` or ``httpx.AsyncClient``.

Wrap the transport a client would use (``httpx.HTTPTransport()`` by default)::

    client = httpx.Client(transport=ResilientTransport(platform="genesys", token=fetch_token))

Each answer with a status of 400 or more, and each transport error, is classified through the
taxonomy (``taxonomy=``: a shipped version, or a file: an overlay that ``extends`` one); what is
TRANSIENT is sent again with its class's budget and backoff, never before a Retry-After (seconds or
an HTTP-date); a 401 on a token at the end of its life is replayed once with a fresh one; circuits
guard each endpoint (the platform, the host, the method and the route template: ``routes=``, else
the path with its ids replaced by ``{id}``). What ends the call: an error in ``raise_on`` (a
corrupted state and every fail-fast trigger by default) raises :class:`supervisor.SdkError`; any
other final answer is returned with its event in ``response.extensions["session_supervisor.event"]``
(``raise_for_status()`` stays the caller's). A transport error that ends the call raises
:class:`supervisor.SdkError` from it. Rules in full: docs/library.md.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import anyio
import httpx
import msgspec

from supervisor.boundary import (
    HTTP_FAILURES,
    HTTP_NOT_SENT,
    SessionContext,
    raw_from_exception,
    raw_from_response,
)
from supervisor.clock import Clock, Rng
from supervisor.library import async_shell, sync_shell
from supervisor.library.core import DEFAULT_RAISE_ON, PACE_FLOOR, PACE_RECOVERY, Answer, Core, Request
from supervisor.library.gate import Doors
from supervisor.library.hooks import RetryHook
from supervisor.library.tokens import TokenFetch, Tokens
from supervisor.rest.tokens import Token
from supervisor.taxonomy.headers import parse_rate_limit
from supervisor.taxonomy.loader import DEFAULT_VERSION
from supervisor.taxonomy.model import Channel, Platform, TaxonomyClass, Trigger
from supervisor.taxonomy.rules import Taxonomy

__all__ = ["EVENT_EXTENSION", "PACE_FLOOR", "PACE_RECOVERY", "ResilientTransport"]

#: the response extension that holds the SdkErrorEvent of a failure returned to the caller
EVENT_EXTENSION: Final = "session_supervisor.event"
# (the library's envelopes name no session: the seed's correlation fields come from ``context=``)
_LIBRARY_SESSION: Final = "library"


def _replayable(request: httpx.Request) -> bool:
    """Can the request's body be sent again? A byte body can; a stream (a generator) cannot."""
    return isinstance(request.stream, httpx.ByteStream)


def _request_line(request: httpx.Request) -> str:
    """``GET https://host/path`` (no query: it may carry ids or secrets), for the hooks' ``name``."""
    url = request.url
    return f"{request.method} {url.scheme}://{url.host}{url.path}"


class ResilientTransport(httpx.BaseTransport, httpx.AsyncBaseTransport):
    """An httpx transport (sync and async) that classifies, retries and guards (module docstring)."""

    def __init__(
        self,
        platform: Platform | str,
        taxonomy: str | Path | Taxonomy = DEFAULT_VERSION,
        *,
        token: TokenFetch | Tokens | None = None,
        context: Mapping[str, Any] | None = None,
        routes: Iterable[str] = (),
        raise_on: Collection[TaxonomyClass | Trigger] = DEFAULT_RAISE_ON,
        hooks: Sequence[RetryHook] = (),
        pace_floor: float = PACE_FLOOR,
        pace_recovery: float = PACE_RECOVERY,
        transport: httpx.BaseTransport | httpx.AsyncBaseTransport | None = None,
        clock: Clock | None = None,
        rng: Rng | None = None,
        sleep: Callable[[float], None] | None = None,
        async_sleep: Callable[[float], Awaitable[None]] | None = None,
    ) -> None:
        self._core = Core(
            platform,
            taxonomy,
            routes=routes,
            raise_on=raise_on,
            context=context,
            clock=clock,
            rng=rng,
            pace_floor=pace_floor,
            pace_recovery=pace_recovery,
        )
        self._doors = Doors(self._core)
        if token is None or isinstance(token, Tokens):
            self._tokens = token
        else:
            self._tokens = Tokens(token, clock=self._core.clock)
        self._hooks = tuple(hooks)
        self._inner = transport
        self._sleep = sleep if sleep is not None else time.sleep
        self._async_sleep = async_sleep if async_sleep is not None else anyio.sleep
        self._ctx = SessionContext(_LIBRARY_SESSION, self._core.platform, Channel.REST)

    @property
    def core(self) -> Core:
        """The decisions' state (the endpoints, the classifier): for inspection."""
        return self._core

    def _sync_inner(self) -> httpx.BaseTransport:
        inner = self._inner
        if inner is None:
            inner = self._inner = httpx.HTTPTransport()
        if not isinstance(inner, httpx.BaseTransport):
            raise TypeError("an httpx.Client needs a sync inner transport (httpx.HTTPTransport)")
        return inner

    def _async_inner(self) -> httpx.AsyncBaseTransport:
        inner = self._inner
        if inner is None:
            inner = self._inner = httpx.AsyncHTTPTransport()
        if not isinstance(inner, httpx.AsyncBaseTransport):
            raise TypeError("an httpx.AsyncClient needs an async inner transport (httpx.AsyncHTTPTransport)")
        return inner

    # -- what one request is ------------------------------------------------------------------

    def _facts(self, request: httpx.Request) -> Request:
        return Request(request.method.upper(), "idempotency-key" in request.headers, _replayable(request))

    def _raw_of_response(self, response: httpx.Response) -> Answer:
        raw = raw_from_response(response, ctx=self._ctx)
        return Answer(response, msgspec.structs.replace(raw, context=self._context(raw.context)))

    def _raw_of_error(self, request: httpx.Request, exc: BaseException) -> Answer:
        raw = raw_from_exception(exc, ctx=self._ctx, method=request.method, endpoint=request.url.path)
        raw = msgspec.structs.replace(raw, context=self._context(raw.context))
        return Answer(None, raw, isinstance(exc, HTTP_NOT_SENT), exc)

    def _context(self, context: dict[str, Any] | None) -> dict[str, Any]:
        out = {k: v for k, v in (context or {}).items() if k != "sessionId"}
        out.update(self._core.context)
        return out

    @staticmethod
    def _sign(request: httpx.Request, token: Token | None) -> None:
        if token is not None:
            request.headers["Authorization"] = token.authorization

    @staticmethod
    def _returned(answer: Answer, event: object) -> httpx.Response:
        response = answer.result
        assert isinstance(response, httpx.Response)
        if event is not None:
            response.extensions = {**response.extensions, EVENT_EXTENSION: event}
        return response

    def _door(self, request: httpx.Request) -> Any:
        url = request.url
        return self._doors.door(self._core.endpoint(request.method.upper(), url.host, url.port, url.path))

    # -- httpx.Client -------------------------------------------------------------------------

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        inner = self._sync_inner()

        def attempt(token: Token | None) -> Answer:
            self._sign(request, token)
            try:
                response = inner.handle_request(request)
            except HTTP_FAILURES as exc:
                return self._raw_of_error(request, exc)
            if response.status_code < 400:
                # the platform's rate window, read as the daemon reads it (the pace slows before it is spent)
                return Answer(response, reading=parse_rate_limit(response.headers))
            response.request = request  # (the client sets it only on what the transport returns)
            response.read()
            return self._raw_of_response(response)

        def discard(answer: Answer) -> None:
            if isinstance(answer.result, httpx.Response):
                answer.result.close()

        answer, event = sync_shell.run(
            self._core,
            self._door(request),
            self._facts(request),
            attempt,
            discard,
            name=_request_line(request),
            tokens=self._tokens,
            hooks=self._hooks,
            sleep=self._sleep,
        )
        return self._returned(answer, event)

    def close(self) -> None:
        if isinstance(self._inner, httpx.BaseTransport):
            self._inner.close()

    # -- httpx.AsyncClient --------------------------------------------------------------------

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        inner = self._async_inner()

        async def attempt(token: Token | None) -> Answer:
            self._sign(request, token)
            try:
                response = await inner.handle_async_request(request)
            except HTTP_FAILURES as exc:
                return self._raw_of_error(request, exc)
            if response.status_code < 400:
                # the platform's rate window, read as the daemon reads it (the pace slows before it is spent)
                return Answer(response, reading=parse_rate_limit(response.headers))
            response.request = request
            await response.aread()
            return self._raw_of_response(response)

        async def discard(answer: Answer) -> None:
            if isinstance(answer.result, httpx.Response):
                await answer.result.aclose()

        answer, event = await async_shell.run(
            self._core,
            self._door(request),
            self._facts(request),
            attempt,
            discard,
            name=_request_line(request),
            tokens=self._tokens,
            hooks=self._hooks,
            sleep=self._async_sleep,
        )
        return self._returned(answer, event)

    async def aclose(self) -> None:
        if isinstance(self._inner, httpx.AsyncBaseTransport):
            await self._inner.aclose()
