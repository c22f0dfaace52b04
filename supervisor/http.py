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

from supervisor.boundary import HTTP_FAILURES, SessionContext
from supervisor.clock import Clock, Rng
from supervisor.library import answers, async_shell, sync_shell
from supervisor.library.answers import EVENT_EXTENSION
from supervisor.library.core import DEFAULT_RAISE_ON, PACE_FLOOR, PACE_RECOVERY, Answer, Core, Request
from supervisor.library.gate import Call, Doors
from supervisor.library.hooks import RetryHook
from supervisor.library.tokens import TokenFetch, Tokens
from supervisor.rest.tokens import Token
from supervisor.taxonomy.headers import parse_rate_limit
from supervisor.taxonomy.loader import DEFAULT_VERSION
from supervisor.taxonomy.model import Channel, Platform, TaxonomyClass, Trigger
from supervisor.taxonomy.rules import Taxonomy

__all__ = ["EVENT_EXTENSION", "PACE_FLOOR", "PACE_RECOVERY", "ResilientTransport"]

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

    def _answer(self, request: httpx.Request, response: httpx.Response) -> Answer:
        """What a response is (a failure's body read before): a success, with the platform's rate window read as
        the daemon reads it (the pace slows before it is spent), or a failure to classify."""
        if response.status_code < 400:
            return Answer(response, reading=parse_rate_limit(response.headers))
        response.request = request  # (the client sets it only on what the transport returns)
        return answers.failed(self._core, self._ctx, response)

    def _raised(self, request: httpx.Request, exc: BaseException) -> Answer:
        return answers.raised(self._core, self._ctx, exc, method=request.method, endpoint=request.url.path)

    @staticmethod
    def _sign(request: httpx.Request, token: Token | None) -> None:
        if token is not None:
            request.headers["Authorization"] = token.authorization

    def _call(self, request: httpx.Request) -> Call:
        """The call ``request`` is, for either shell: its endpoint's door and what the request is."""
        url = request.url
        method = request.method.upper()
        return Call(
            self._core,
            self._doors.door(self._core.endpoint(method, url.host, url.port, url.path)),
            Request(method, "idempotency-key" in request.headers, _replayable(request)),
            _request_line(request),
            self._tokens,
            self._hooks,
        )

    # -- httpx.Client -------------------------------------------------------------------------

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        inner = self._sync_inner()

        def attempt(token: Token | None) -> Answer:
            self._sign(request, token)
            try:
                response = inner.handle_request(request)
            except HTTP_FAILURES as exc:
                return self._raised(request, exc)
            if response.status_code >= 400:
                response.read()
            return self._answer(request, response)

        answer, event = sync_shell.run(self._call(request), attempt, answers.close, sleep=self._sleep)
        response: httpx.Response = answers.returned(answer, event)
        return response

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
                return self._raised(request, exc)
            if response.status_code >= 400:
                await response.aread()
            return self._answer(request, response)

        answer, event = await async_shell.run(
            self._call(request), attempt, answers.aclose, sleep=self._async_sleep
        )
        response: httpx.Response = answers.returned(answer, event)
        return response

    async def aclose(self) -> None:
        if isinstance(self._inner, httpx.AsyncBaseTransport):
            await self._inner.aclose()
