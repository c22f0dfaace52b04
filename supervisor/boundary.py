"""The boundary: who a session is, and the one place library errors become RawError envelopes.

Everything below the transports that needs to describe a failure imports this module: the
REST layer (supervisor/rest/) and the transports (supervisor/transports/). It holds

* :class:`SessionContext`, the correlation ids of a supervised session, and :class:`Learned`,
  what a connection learned about it;
* :data:`Reporter`, the runtime's answer to an in-band failure;
* :class:`TokenAge`, what our clock said of a refused request's bearer token;
* the mappers :func:`raw_from_response`, :func:`raw_from_exception`, :func:`raw_from_message`
  and :func:`raw_from_close`, with the allowlist of headers a RawError may keep;
* one mapping per library, the only place its exceptions are named: :data:`HTTP_FAILURES` and
  :func:`http_failures` for httpx, :data:`SOCKET_FAILURES` and :func:`socket_failures` for
  websockets (each with OSError beneath it: DNS, TLS, a reset, a timeout). The context managers
  turn what the library raised into a :class:`~supervisor.errors.TransportFailure` carrying its
  RawError, raised ``from`` the library's exception (httpx's own ``map_httpcore_exceptions`` does
  the same one floor down); where a caller returns the RawError instead of raising it, it catches
  the tuple.

A transport or the REST layer *describes* failures, it never decides (docs/architecture.md, "Data
flows one way"): no httpx or websockets exception is raised past this boundary.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, Final

import httpx
import websockets.exceptions

from supervisor.errors import TransportFailure
from supervisor.events import Correlation
from supervisor.taxonomy import Channel, Platform, RawError, SdkErrorEvent
from supervisor.vocabulary import CloseCode, Scope, TenantScope

# the runtime's answer to an in-band failure: True means "the session goes on". A RawError is
# classified by the runtime; an SdkErrorEvent is one a transport named (CXone's SESSION_RESYNCED)
Reporter = Callable[[RawError | SdkErrorEvent], Awaitable[bool]]


@dataclass(frozen=True, slots=True)
class SessionContext:
    """Who a session is: immutable correlation data.

    The configured ids (session, platform, channel, agent, a configured conversation) plus what
    the session learned, merged by its owner, the runner, with :meth:`learned` (a new context:
    nobody writes to one). Transports never write here: a connection reports what it learned
    through :class:`Learned`. The Web Messaging guest token is a credential and is never here.
    """

    session_id: str
    platform: Platform
    channel: Channel
    agent_id: str | None = None
    conversation_id: str | None = None
    # the platform's own id of the session (CXone's rolling sessionId, a notifications channel id)
    platform_session_id: str | None = None
    # the named tenant the session is of ([tenants.NAME]); None: the default tenant ([platforms.*])
    tenant: str | None = None

    def learned(self, learned: Learned) -> SessionContext:
        """This context with what a connection learned (a known id is replaced, never erased)."""
        conversation = learned.conversation_id or self.conversation_id
        platform_session = learned.platform_session_id or self.platform_session_id
        agent = learned.agent_id or self.agent_id
        if (conversation, platform_session, agent) == (
            self.conversation_id,
            self.platform_session_id,
            self.agent_id,
        ):
            return self
        return replace(
            self, conversation_id=conversation, platform_session_id=platform_session, agent_id=agent
        )

    @property
    def scope(self) -> Scope:
        """Whose credential the session runs with: its platform (the default tenant), or its named tenant's."""
        return self.platform if self.tenant is None else TenantScope(self.tenant, self.platform)

    def correlation(self) -> Correlation:
        """The one place correlation ids are built (events, RawError contexts, spans)."""
        return Correlation(
            self.session_id, self.agent_id, self.conversation_id, self.platform_session_id, self.tenant
        )

    def envelope_context(self) -> dict[str, Any]:
        """The RawError ``context``: correlation ids only, never a token."""
        return dict(self.correlation().fields())


@dataclass(frozen=True, slots=True)
class Learned:
    """What a connection learned about its session from the platform (None: it did not say)."""

    conversation_id: str | None = None
    platform_session_id: str | None = None
    agent_id: str | None = None


def exception_name(exc: BaseException) -> str:
    """``httpx.ConnectTimeout``-style qualified name (the taxonomy canonicalises private modules)."""
    cls = type(exc)
    module = cls.__module__
    return cls.__qualname__ if module == "builtins" else f"{module}.{cls.__qualname__}"


def _body_of(content: bytes, content_type: str | None) -> Any:
    if not content:
        return None
    text = content[:65_536].decode("utf-8", "replace")
    if content_type is None or "json" in content_type or text.lstrip().startswith(("{", "[")):
        try:
            return json.loads(text)
        except (ValueError, RecursionError):  # RecursionError: a body nested thousands deep
            return text
    return text


_KEPT_HEADERS = (
    "retry-after",
    "cache-control",
    "inin-correlation-id",
    "inin-ratelimit-reset",
    "correlationid",
)


def _safe_headers(headers: Mapping[str, str] | httpx.Headers) -> dict[str, str]:
    # only the headers the taxonomy reads: never Authorization, never cookies
    out: dict[str, str] = {}
    for key in _KEPT_HEADERS:
        value = headers.get(key)
        if value is not None:
            out[key] = value
    return out


@dataclass(frozen=True, slots=True)
class TokenAge:
    """How near its end, by our clock, the bearer token of an answered request was.

    What a 401 is judged by (docs/taxonomy.md, "The 401 rule"): both platforms
    answer an expired and a revoked token alike, so the time the token had left decides. It goes
    into the RawError's context, where the taxonomy's rules match it:

    * ``expired``: no time left (``tokenExpired``, matched by taxonomy v1);
    * ``within_refresh_window``: at most the early-refresh window left, as the token cache
      computes it (``tokenWithinRefreshWindow``, matched by v2). An expired token is within it.
    """

    expired: bool = False
    within_refresh_window: bool = False

    def context(self) -> dict[str, bool]:
        """The envelope's context keys: present only when true, as recorded envelopes have them."""
        out: dict[str, bool] = {}
        if self.expired:
            out["tokenExpired"] = True
        if self.within_refresh_window or self.expired:
            out["tokenWithinRefreshWindow"] = True
        return out


def raw_from_response(
    response: httpx.Response,
    *,
    ctx: SessionContext,
    channel: Channel | None = None,
    endpoint: str | None = None,
    token_age: TokenAge | None = None,
) -> RawError:
    """A RawError for an HTTP response (an error status, or a success to classify, e.g. 304).

    ``token_age``: how near its end the request's bearer token was (a request signed with one).
    """
    request = response.request
    context = ctx.envelope_context()
    if token_age is not None:
        context.update(token_age.context())
    return RawError(
        platform=ctx.platform,
        channel=channel or ctx.channel,
        method=request.method,
        endpoint=endpoint or request.url.path,
        status=response.status_code,
        headers=_safe_headers(response.headers),
        body=_body_of(response.content, response.headers.get("content-type")),
        context=context,
    )


def raw_from_exception(
    exc: BaseException,
    *,
    ctx: SessionContext,
    channel: Channel | None = None,
    method: str | None = None,
    endpoint: str | None = None,
) -> RawError:
    """A RawError for a transport exception (httpx, websockets, OSError, DNS, TLS, ...)."""
    status: int | None = None
    close_code: int | None = None
    headers: dict[str, str] | None = None
    body: Any = None
    if isinstance(exc, websockets.exceptions.ConnectionClosed):
        # no close frame received means the TCP link died: RFC 6455 section 7.1.5 says 1006
        close_code = exc.rcvd.code if exc.rcvd is not None else CloseCode.ABNORMAL_CLOSURE
    elif isinstance(exc, websockets.exceptions.InvalidStatus):
        status = exc.response.status_code
        headers = _safe_headers(exc.response.headers)
        body = _body_of(bytes(exc.response.body or b""), exc.response.headers.get("content-type"))
    elif isinstance(exc, httpx.HTTPStatusError):
        return raw_from_response(exc.response, ctx=ctx, channel=channel, endpoint=endpoint)
    return RawError(
        platform=ctx.platform,
        channel=channel or ctx.channel,
        method=method,
        endpoint=endpoint,
        status=status,
        headers=headers,
        body=body,
        close_code=close_code,
        exception=exception_name(exc),
        context=ctx.envelope_context(),
    )


def raw_from_message(
    message: Mapping[str, Any],
    *,
    ctx: SessionContext,
    method: str | None = None,
    endpoint: str | None = None,
) -> RawError:
    """A RawError for a server message on a socket (Web Messaging envelope, notifications message)."""
    return RawError(
        platform=ctx.platform,
        channel=ctx.channel,
        method=method,
        endpoint=endpoint,
        body=dict(message),
        context=ctx.envelope_context(),
    )


def raw_from_close(code: int, *, ctx: SessionContext) -> RawError:
    """A RawError for a WebSocket that ended with close ``code`` (1006 when no frame arrived)."""
    return RawError(
        platform=ctx.platform, channel=ctx.channel, close_code=code, context=ctx.envelope_context()
    )


# -- one mapping per library -------------------------------------------------------------------------------

#: what an HTTP exchange can raise: httpx's tree (its HTTPError; InvalidURL stands outside it) and the
#: OS errors beneath it (a TLS or DNS failure reaching us unwrapped)
HTTP_FAILURES: Final = (httpx.HTTPError, httpx.InvalidURL, OSError)
#: the HTTP failures of a request that never left this machine: retrying it cannot apply anything twice
HTTP_NOT_SENT: Final = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.PoolTimeout,
    httpx.UnsupportedProtocol,
)
#: what a WebSocket can raise: websockets' tree and the OS errors beneath it (TimeoutError, no answer)
SOCKET_FAILURES: Final = (websockets.exceptions.WebSocketException, OSError)
#: the end of a WebSocket's stream, a close frame or none (``exc.rcvd``: raw_from_exception reads it)
SOCKET_CLOSED: Final = websockets.exceptions.ConnectionClosed


@contextmanager
def http_failures(
    *, ctx: SessionContext, method: str, endpoint: str, channel: Channel | None = None
) -> Iterator[None]:
    """An HTTP exchange: what httpx raised becomes a TransportFailure with its RawError, ``from`` it."""
    try:
        yield
    except HTTP_FAILURES as exc:
        raw = raw_from_exception(exc, ctx=ctx, channel=channel, method=method, endpoint=endpoint)
        raise TransportFailure(raw) from exc


@contextmanager
def socket_failures(*, ctx: SessionContext, method: str, endpoint: str) -> Iterator[None]:
    """A WebSocket's handshake: what websockets raised becomes a TransportFailure, ``from`` it."""
    try:
        yield
    except SOCKET_FAILURES as exc:
        raise TransportFailure(raw_from_exception(exc, ctx=ctx, method=method, endpoint=endpoint)) from exc


def kept_headers() -> tuple[str, ...]:
    """The response headers a RawError may keep (lower-case): what ``[taxonomy] capture`` keeps too."""
    return _KEPT_HEADERS
