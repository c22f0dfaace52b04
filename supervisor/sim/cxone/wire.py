"""Wire helpers of the CXone fake: JSON and error responses, headers, the error middleware.

Error shapes (docs/platforms.md, "Errors, event shapes and limits"):

* token endpoints: OAuth ``{"error": .., "error_description": ..}`` (RFC 6749 §5.2);
* REST resources: the same pair, or an empty body with the error only in the status line;
* throttling (no CXone doc, [I]): ``{"error_code": .., "error_message": ..}`` or empty.

Nothing here ever puts a traceback, a token or a secret in a body.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import msgspec
from aiohttp import web

from supervisor.sim.bodies import MalformedBody, parse_form, parse_json

_ENCODER = msgspec.json.Encoder()
JSON = "application/json; charset=utf-8"

#: request key holding ``"METHOD /route/template"``, e.g. ``GET /inContactAPI/services/v{N}.0/agent-sessions``
ENDPOINT_KEY: web.RequestKey[str] = web.RequestKey("cxone_endpoint", str)
#: request key holding the fault/share key of the request (the agent id, or "")
SESSION_KEY: web.RequestKey[str] = web.RequestKey("cxone_session_key", str)
UNKNOWN_ENDPOINT = "<unmatched>"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def json_response(status: int, body: Any, headers: Mapping[str, str] | None = None) -> web.Response:
    """A JSON response encoded with msgspec."""
    return web.Response(
        status=status,
        body=_ENCODER.encode(body),
        content_type=None,
        headers={"Content-Type": JSON, **(headers or {})},
    )


def empty_response(status: int, headers: Mapping[str, str] | None = None) -> web.Response:
    """A response with no body at all (for 304, RFC 9110 §15.4.5, and the "status line only" errors)."""
    return web.Response(status=status, headers=dict(headers or {}))


def oauth_error(
    status: int,
    error: str,
    description: str,
    *,
    empty: bool = False,
    headers: Mapping[str, str] | None = None,
) -> web.Response:
    """``{"error", "error_description"}`` (or no body when ``empty``)."""
    if empty:
        return empty_response(status, headers)
    return json_response(status, {"error": error, "error_description": description}, headers)


def endpoint_of(request: web.Request) -> str:
    """``"METHOD /route/template"`` of a request: the key of faults and stats (bounded cardinality)."""
    resource = request.match_info.route.resource
    canonical = resource.canonical if resource is not None else None
    if not canonical or request.match_info.http_exception is not None:
        return f"{request.method} {UNKNOWN_ENDPOINT}"
    return f"{request.method} {canonical}"


def correlation_headers(request: web.Request) -> dict[str, str]:
    """Echo the optional ``CorrelationId`` request header (docs/platforms.md, "NICE CXone" [D])."""
    value = request.headers.get("CorrelationId")
    if value is None or len(value) > 200:
        return {}
    return {"CorrelationId": value}


def error_from_http_exception(exc: web.HTTPException) -> web.Response:
    """aiohttp's own 404/405/413 pages as ``{"error", "error_description"}``."""
    error = {404: "not_found", 405: "method_not_allowed", 413: "request_too_large"}.get(
        exc.status, "invalid_request"
    )
    headers = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else {}
    return oauth_error(exc.status, error, exc.reason, headers=headers)


async def read_body(request: web.Request, *, limit: int = 64 * 1024) -> dict[str, str]:
    """A request body as a flat ``str → str`` dict, from JSON or form encoding.

    Raises:
        BodyError: the body is not a JSON object / form, or too large.
    """
    raw = await request.read()
    if len(raw) > limit:
        raise BodyError("request body too large")
    if not raw.strip():
        return {}
    ctype = request.content_type
    try:
        if ctype == "application/x-www-form-urlencoded":
            return parse_form(raw)
        data = parse_json(raw)
    except MalformedBody as exc:  # not UTF-8, not JSON, NaN, nested too deeply: a 400, never a 500
        raise BodyError(f"request body is malformed: {exc}") from None
    if not isinstance(data, dict):
        raise BodyError("request body must be a JSON object")
    return {str(k): v if isinstance(v, str) else msgspec.json.encode(v).decode() for k, v in data.items()}


class BodyError(ValueError):
    """A malformed request body (answered 400 ``invalid_request``)."""
