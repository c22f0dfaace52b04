"""The API host: Platform REST under ``/api/v2`` (docs/platforms.md, "Genesys Cloud Platform REST"; docs/simulators.md).

Every route goes through :func:`route`, which in order: takes or makes ``ININ-Correlation-Id``;
checks ``Authorization: Bearer`` (401 ``authentication.required`` / ``bad.credentials``, or a
revoked token's ``invalid_token``); counts the token's rate window and adds
``inin-ratelimit-allowed/count/reset`` (429 ``too.many.requests`` with integer ``Retry-After``
past ``rate_limit``); applies request faults (:class:`~supervisor.sim.genesys.context.FaultGate`);
runs the handler; rewrites the 200 body per body faults; records the request.

The routes themselves live in :mod:`.conversation_routes` and :mod:`.notifications`.
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from supervisor.sim.activity import ACTIVITY_SESSION
from supervisor.sim.bodies import MalformedBody, parse_json
from supervisor.sim.faults import FaultKind
from supervisor.sim.genesys.context import SimContext
from supervisor.sim.genesys.state import Token, TokenStatus
from supervisor.sim.genesys.wire import (
    STATUS_CODES,
    ErrorCode,
    error_body,
    error_response,
    json_response,
)

__all__ = ["CTX", "BadRequest", "Reply", "Request", "make_api_app", "not_found", "read_json", "route"]

CTX: web.AppKey[SimContext] = web.AppKey("ctx", SimContext)
_log = logging.getLogger("supervisor.sim.genesys")
MESSAGE_ID: web.RequestKey[str] = web.RequestKey("message_id", str)


@dataclass(slots=True)
class Reply:
    """What a handler answers: status, JSON body (None = no body), extra headers."""

    status: int
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    conversation_id: str | None = None  # for CONVERSATION_DRIFT


class BadRequest(Exception):
    """A malformed request: answered 400 with the given ErrorBody code and message."""

    def __init__(self, message: str, code: ErrorCode = ErrorCode.BAD_REQUEST, status: int = 400) -> None:
        super().__init__(message)
        self.code = code
        self.status = status


def not_found() -> BadRequest:
    """404 ``not.found``: an id the platform never issued (docs/platforms.md, "Errors, limits and ids", ErrorBody example)."""
    return BadRequest("The requested resource was not found.", ErrorCode.NOT_FOUND, 404)


@dataclass(slots=True)
class Request:
    """A handler's view of the call."""

    ctx: SimContext
    http: web.Request
    token: Token
    correlation_id: str
    endpoint: str


Handler = Callable[[Request], Awaitable[Reply]]


def route(method: str, template: str, handler: Handler) -> Callable[[web.Request], Awaitable[web.Response]]:
    """Wrap ``handler`` with auth, rate limit, faults, body faults and recording (module docstring)."""
    endpoint = f"{method} {template}"

    async def wrapped(http: web.Request) -> web.Response:
        ctx = http.app[CTX]
        corr = http.headers.get("ININ-Correlation-Id") or str(uuid.uuid4())
        response = await _serve(ctx, http, corr, handler, endpoint)
        response.headers["ININ-Correlation-Id"] = corr
        idem = http.headers.get("Idempotency-Key")
        msg_id = http.get(MESSAGE_ID)
        ctx.recorder.record_request(
            method, template, response.status, idempotency_key=idem, message_id=msg_id
        )
        return response

    return wrapped


async def _serve(
    ctx: SimContext, http: web.Request, corr: str, handler: Handler, endpoint: str
) -> web.Response:
    auth = http.headers.get("Authorization", "")
    if auth[:7].lower() != "bearer " or not auth[7:].strip():
        return error_response(401, ErrorCode.AUTHENTICATION_REQUIRED, corr)
    token = _authenticate(ctx, auth[7:].strip(), endpoint)
    if isinstance(token, web.Response):
        token.headers["ININ-Correlation-Id"] = corr
        return token
    allowed, count, reset = ctx.state.rate_check(token)
    limits = {
        "inin-ratelimit-allowed": str(ctx.config.rate_limit),
        "inin-ratelimit-count": str(count),
        "inin-ratelimit-reset": str(math.ceil(reset)),
    }
    if not allowed:
        limit, window = ctx.config.rate_limit, f"{ctx.config.rate_window_s:g}"
        msg = f"Rate limit exceeded the maximum [{limit}] requests within [{window}] seconds"
        headers = {**limits, "Retry-After": str(max(1, math.ceil(reset)))}
        return error_response(429, ErrorCode.TOO_MANY_REQUESTS, corr, msg, headers)
    key = http.match_info.get("conversationId") or http.match_info.get("channelId") or token.id
    http[ACTIVITY_SESSION] = key

    def fault_error(
        status: int, kind: FaultKind, retry_after: str | None, message: str | None
    ) -> web.Response:
        headers = dict(limits)
        if retry_after is not None:
            headers["Retry-After"] = retry_after
        if kind is FaultKind.QUEUE_FULL:
            details = [{"errorCode": "QUEUE_FULL"}]
            return error_response(429, ErrorCode.QUEUE_FULL, corr, None, headers, details)
        if status == 429:
            limit = ctx.config.rate_limit
            msg = message or f"Rate limit exceeded the maximum [{limit}] requests within [60] seconds"
            return error_response(429, ErrorCode.TOO_MANY_REQUESTS, corr, msg, headers)
        return error_response(status, STATUS_CODES[status], corr, message, headers)

    early = await ctx.gate.before(key, endpoint, fault_error)
    if early is not None:
        return early
    try:
        reply = await handler(Request(ctx, http, token, corr, endpoint))
    except BadRequest as exc:
        return error_response(exc.status, exc.code, corr, str(exc), limits)
    headers = {**limits, **reply.headers}
    if reply.body is None:
        return web.Response(status=reply.status, headers=headers)
    body = reply.body
    if reply.status == 200:
        body = ctx.gate.after(key, endpoint, body, reply.conversation_id)
    if isinstance(body, bytes):
        return web.Response(body=body, status=reply.status, headers=headers, content_type="application/json")
    return json_response(body, reply.status, headers)


def _authenticate(ctx: SimContext, access: str, endpoint: str) -> Token | web.Response:
    status, token = ctx.state.token_status(access)
    if token is not None and status is TokenStatus.VALID:
        # TOKEN_EXPIRE / TOKEN_REVOKE hit tokens issued before the fault started
        for kind in (FaultKind.TOKEN_REVOKE, FaultKind.TOKEN_EXPIRE):
            for fault in list(ctx.faults.candidates(kind, token.id, endpoint)):
                if token.issued_at <= ctx.faults.started_at(fault) and ctx.faults.hit(fault):
                    ctx.recorder.record_fault_hit(fault)
                    token.revoked = token.revoked or kind is FaultKind.TOKEN_REVOKE
                    token.expired = token.expired or kind is FaultKind.TOKEN_EXPIRE
                    break
        status, token = ctx.state.token_status(access)
    if status is TokenStatus.VALID and token is not None:
        return token
    if status is TokenStatus.REVOKED:
        ctx.recorder.record_token("revoked")
        # [I] the seed's fail-fast trigger "401 with error: invalid_token": ErrorBody plus the
        # OAuth field, and RFC 6750 §3.1's WWW-Authenticate
        body = {
            **error_body(401, ErrorCode.BAD_CREDENTIALS, ""),
            "error": "invalid_token",
            "error_description": "The access token was revoked.",
        }
        challenge = 'Bearer error="invalid_token", error_description="The access token was revoked."'
        return json_response(body, 401, {"WWW-Authenticate": challenge})
    ctx.recorder.record_token("expired" if status is TokenStatus.EXPIRED else "rejected")
    return error_response(401, ErrorCode.BAD_CREDENTIALS, "")


async def read_json(http: web.Request) -> Any:
    """The JSON body, or :class:`BadRequest` (415 for another media type)."""
    if http.content_type not in ("application/json", "text/json"):
        raise BadRequest(
            "Unsupported Media Type - Unsupported or incorrect media type.",
            ErrorCode.UNSUPPORTED_MEDIA_TYPE,
            415,
        )
    raw = await http.read()
    try:
        return parse_json(raw)
    except MalformedBody:  # not UTF-8, not JSON, NaN, or nested too deeply: all the same 400 (§3)
        raise BadRequest(
            "The request could not be understood by the server due to malformed syntax."
        ) from None


@web.middleware
async def _platform_errors(request: web.Request, handler: Any) -> web.StreamResponse:
    """Unknown routes, wrong methods and surprises answer an ErrorBody, never a stack trace."""
    corr = request.headers.get("ININ-Correlation-Id") or str(uuid.uuid4())
    try:
        response: web.StreamResponse = await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        codes = {
            404: ErrorCode.NOT_FOUND,
            405: ErrorCode.METHOD_NOT_ALLOWED,
            408: ErrorCode.REQUEST_TIMEOUT,  # the body did not arrive in time (sim/serving.py)
            413: ErrorCode.BAD_REQUEST,
        }
        code = codes.get(exc.status, ErrorCode.BAD_REQUEST)
        request.app[CTX].recorder.record_request(request.method, "(unmatched)", exc.status)
        return error_response(exc.status, code, corr)
    except ConnectionResetError:
        # the client went away while its body was read (it closed, or timed out): nobody is left to
        # answer and nothing is wrong here; recorded as nginx's 499 ("client closed request")
        request.app[CTX].recorder.record_request(request.method, "(client gone)", 499)
        return web.Response(status=499)
    except Exception:  # the simulator must never show a traceback to a client (logged here instead)
        _log.exception("unexpected error serving %s %s", request.method, request.path)
        return error_response(500, ErrorCode.INTERNAL_SERVER_ERROR, corr)
    return response


def make_api_app(ctx: SimContext, routes: list[tuple[str, str, Handler]]) -> web.Application:
    """The API host's aiohttp app with ``routes`` (conversations, notifications), in order."""
    app = web.Application(client_max_size=1024 * 1024, middlewares=[_platform_errors])
    app[CTX] = ctx
    for method, template, handler in routes:
        app.router.add_route(method, template, route(method, template, handler))
    return app
