"""The middleware every CXone listener (auth, api) runs each request through.

Order: tag the endpoint template → find the share key (agent id) → ADMISSION_LIMIT (counted
as an accepted/refused attempt) → the route-independent faults of :class:`FaultGate` → the
route → record ``method, template, status``, echo ``CorrelationId``. Any unexpected
exception becomes a 500 ``{"error":"server_error"}``: malformed requests never see a
stack trace (docs/simulators.md).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Middleware

from supervisor.sim.activity import ACTIVITY_SESSION
from supervisor.sim.cxone.context import CxoneContext
from supervisor.sim.cxone.wire import (
    ENDPOINT_KEY,
    SESSION_KEY,
    Handler,
    correlation_headers,
    endpoint_of,
    error_from_http_exception,
    oauth_error,
)

log = logging.getLogger("supervisor.sim.cxone")

KeyOf = Callable[[web.Request, CxoneContext], Awaitable[str]]


def make_middleware(listener: str, ctx: CxoneContext, key_of: KeyOf) -> Middleware:
    """The middleware for one listener (``"auth"`` or ``"api"``); ``key_of`` finds the share key."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        endpoint = endpoint_of(request)
        request[ENDPOINT_KEY] = endpoint
        echo = correlation_headers(request)
        response: web.StreamResponse
        try:
            key = "" if request.match_info.http_exception is not None else await key_of(request, ctx)
            request[SESSION_KEY] = key
            request[ACTIVITY_SESSION] = key
            refused = ctx.gate.admission(key, endpoint)
            ctx.recorder.record_attempt(listener, accepted=refused is None)
            if refused is not None:
                response = refused
            else:
                early = await ctx.gate.before(key, endpoint)
                response = early if early is not None else await handler(request)
        except web.HTTPException as exc:
            response = error_from_http_exception(exc)
        except ConnectionResetError:
            # the client went away while its body was read (it closed, or timed out): nobody is left
            # to answer and nothing is wrong here; recorded as nginx's 499 ("client closed request")
            response = web.Response(status=499)
        except Exception:
            log.exception("cxone sim: unhandled error on %s", endpoint)
            response = oauth_error(500, "server_error", "Internal error")
        ctx.record(request, endpoint, response.status)
        if echo and not response.prepared:
            response.headers.update(echo)
        return response

    return middleware
