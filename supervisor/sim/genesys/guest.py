"""Guest REST on the API host: ``GET /api/v2/webmessaging/messages`` with the guest JWT
(docs/platforms.md, "Keepalive, lifetime and error codes").

The JWT comes from the Web Messaging ``getJwt`` action. The answer is the conversation's
guest-visible messages, newest first, as a paged listing
``{"entities":[StructuredMessage body...],"pageSize","pageNumber","total","pageCount"}``.
A missing JWT is 401 ``authentication.required``; an unknown or expired one, or one whose
session is gone, 401 ``bad.credentials``; a bad ``pageSize`` (1..100) or ``pageNumber`` (>= 1)
400 ``bad.request``. Request faults apply with the guest session token as session key.
"""

from __future__ import annotations

import math
import uuid

from aiohttp import web

from supervisor.sim.faults import FaultKind
from supervisor.sim.genesys.rest import CTX
from supervisor.sim.genesys.wire import STATUS_CODES, ErrorCode, error_response, json_response

__all__ = ["MESSAGES_ROUTE", "guest_messages"]

MESSAGES_ROUTE = "/api/v2/webmessaging/messages"
_ENDPOINT = "GET " + MESSAGES_ROUTE


async def guest_messages(http: web.Request) -> web.Response:
    """The aiohttp handler (registered by the simulator on the API app)."""
    ctx = http.app[CTX]
    corr = http.headers.get("ININ-Correlation-Id") or str(uuid.uuid4())
    response = await _answer(http, corr)
    response.headers["ININ-Correlation-Id"] = corr
    ctx.recorder.record_request("GET", MESSAGES_ROUTE, response.status)
    return response


async def _answer(http: web.Request, corr: str) -> web.Response:
    ctx = http.app[CTX]
    auth = http.headers.get("Authorization", "")
    if auth[:7].lower() != "bearer " or not auth[7:].strip():
        return error_response(401, ErrorCode.AUTHENTICATION_REQUIRED, corr)
    sess = ctx.state.jwt_session(auth[7:].strip())
    if sess is None:
        return error_response(401, ErrorCode.BAD_CREDENTIALS, corr)

    def fault_error(
        status: int, kind: FaultKind, retry_after: str | None, message: str | None
    ) -> web.Response:
        headers = {"Retry-After": retry_after} if retry_after is not None else None
        code = ErrorCode.TOO_MANY_REQUESTS if status == 429 else STATUS_CODES[status]
        return error_response(status, code, corr, message, headers)

    early = await ctx.gate.before(sess.token, _ENDPOINT, fault_error)
    if early is not None:
        return early
    try:
        size = int(http.query.get("pageSize", "25"))
        number = int(http.query.get("pageNumber", "1"))
    except ValueError:
        size = number = 0
    if not 1 <= size <= 100 or number < 1:
        return error_response(
            400, ErrorCode.BAD_REQUEST, corr, "pageSize must be 1..100 and pageNumber >= 1."
        )
    conv = ctx.state.conversations.get(sess.conversation_id)
    messages = list(reversed(conv.transcript)) if conv is not None else []
    page = messages[(number - 1) * size : number * size]
    body = {
        "entities": page,
        "pageSize": size,
        "pageNumber": number,
        "total": len(messages),
        "pageCount": max(1, math.ceil(len(messages) / size)),
    }
    return json_response(body)
