"""The login host: ``POST /oauth/token`` (docs/platforms.md, "Genesys Cloud Platform REST").

- ``grant_type=client_credentials`` with HTTP Basic ``client_id:client_secret`` (RFC 6749 §4.4)
  -> ``{"access_token","token_type":"bearer","expires_in", "refresh_token"?}``;
- ``grant_type=refresh_token&refresh_token=..`` (RFC 6749 §6), also with Basic auth;
- errors in the login host's OAuth shape ``{"error","description","error_description"}``:
  401 ``invalid_client`` (no/bad Basic auth, unknown client or secret), 400 ``invalid_request``
  (not form-encoded, missing grant_type), 400 ``unsupported_grant_type``, 400 ``invalid_grant``
  (unknown or revoked refresh token). Request faults (LATENCY, BLACKHOLE, 5xx, 429) apply to the
  endpoint ``"POST /oauth/token"`` with the client id as session key.
"""

from __future__ import annotations

import base64
import binascii

from aiohttp import web

from supervisor.sim.activity import ACTIVITY_SESSION
from supervisor.sim.bodies import MalformedBody, parse_form
from supervisor.sim.faults import FaultKind
from supervisor.sim.genesys.context import SimContext
from supervisor.sim.genesys.wire import json_response, oauth_error

__all__ = ["make_login_app"]

ENDPOINT = "POST /oauth/token"
_ROUTE = "/oauth/token"
_CTX: web.AppKey[SimContext] = web.AppKey("ctx", SimContext)


def make_login_app(ctx: SimContext) -> web.Application:
    """The login host's aiohttp app."""
    app = web.Application(client_max_size=64 * 1024, middlewares=[_not_found])
    app[_CTX] = ctx
    app.router.add_post(_ROUTE, _token)
    return app


@web.middleware
async def _not_found(request: web.Request, handler: object) -> web.StreamResponse:
    try:
        response: web.StreamResponse = await handler(request)  # type: ignore[operator]
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return oauth_error(exc.status, "invalid_request", f"{exc.reason}")
    return response


def _basic(header: str | None) -> tuple[str, str] | None:
    """``(client_id, secret)`` from ``Authorization: Basic`` (RFC 7617), or None."""
    if not header or header[:6].lower() != "basic ":
        return None
    try:
        decoded = base64.b64decode(header[6:].strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    client_id, sep, secret = decoded.partition(":")
    return (client_id, secret) if sep and client_id else None


async def _token(request: web.Request) -> web.Response:
    ctx = request.app[_CTX]
    creds = _basic(request.headers.get("Authorization"))
    key = creds[0] if creds else "anonymous"
    request[ACTIVITY_SESSION] = key

    def fault_error(
        status: int, kind: FaultKind, retry_after: str | None, message: str | None
    ) -> web.Response:
        headers = {"Retry-After": retry_after} if retry_after is not None else None
        if status == 429:
            return oauth_error(429, "too_many_requests", message or "Rate limit exceeded.", headers)
        return oauth_error(
            status, "server_error", message or "The server is temporarily unavailable.", headers
        )

    response = await ctx.gate.before(key, ENDPOINT, fault_error)
    if response is None:
        response = await _grant(ctx, request, creds)
    ctx.recorder.record_request("POST", _ROUTE, response.status)
    return response


async def _grant(ctx: SimContext, request: web.Request, creds: tuple[str, str] | None) -> web.Response:
    if creds is None:
        ctx.recorder.record_token("rejected")
        return oauth_error(
            401, "invalid_client", "Client authentication failed: missing or malformed Basic auth."
        )
    client_id, secret = creds
    allowed = ctx.config.clients
    # constant-time comparison is pointless in a loopback simulator; never echo the secret
    if allowed and allowed.get(client_id) != secret:
        ctx.recorder.record_token("rejected")
        return oauth_error(401, "invalid_client", "Client authentication failed.")
    if request.content_type != "application/x-www-form-urlencoded":
        return oauth_error(400, "invalid_request", "The body must be application/x-www-form-urlencoded.")
    try:
        # parsed here, not by request.post(): a body that is not UTF-8 must be a 400, never a 500
        form = parse_form(await request.read())
    except MalformedBody as exc:
        return oauth_error(400, "invalid_request", f"Malformed form body: {exc}.")
    grant = form.get("grant_type")
    if not isinstance(grant, str) or not grant:
        return oauth_error(400, "invalid_request", "Missing grant_type.")
    if grant == "client_credentials":
        access, token = ctx.state.issue_token(client_id)
        ctx.recorder.record_token("issued", grant=grant)
    elif grant == "refresh_token":
        refresh = form.get("refresh_token")
        if not isinstance(refresh, str) or not refresh:
            return oauth_error(400, "invalid_request", "Missing refresh_token.")
        old = ctx.state.refresh_tokens.get(refresh)
        if old is None or old.revoked or old.client_id != client_id:
            ctx.recorder.record_token("rejected")
            return oauth_error(400, "invalid_grant", "Invalid refresh token.")
        access, token = ctx.state.issue_token(client_id, refresh=refresh)
        ctx.recorder.record_token("refreshed", grant=grant)
    else:
        return oauth_error(400, "unsupported_grant_type", f"Unsupported grant type: {grant[:40]}")
    body: dict[str, object] = {
        "access_token": access,
        "token_type": "bearer",
        "expires_in": ctx.config.token_ttl_s,
    }
    if token.refresh is not None:
        body["refresh_token"] = token.refresh
    # RFC 6749 §5.1: token responses are not cacheable
    return json_response(body, 200, {"Cache-Control": "no-store", "Pragma": "no-cache"})
