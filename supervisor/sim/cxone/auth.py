"""CXone token endpoints (docs/platforms.md, "NICE CXone") on the simulator's ``auth`` listener.

* The OpenID Connect login, discovery and tenant discovery, the real platform's back-end login
  (``/.well-known/openid-configuration``, ``POST /auth/token``,
  ``/.well-known/cxone-configuration``): :mod:`.oidc`.
* ``POST /public/authentication/v1/token``: the regional *token exchange* only, as NICE's SDK uses
  it (``cxone-auth.js`` ``getRegionalAccessTokenByToken``): ``Authorization: Basic
  base64("{clientId}@cxone")`` (no colon, no secret) and JSON ``{"accessToken": <live token>}``,
  answered in camelCase ``{accessToken, accessTokenExpiry, refreshToken}`` (``auth-token.js``
  ``parseData`` reads those names). A password or client-credentials grant here is refused.
* ``POST /public/authentication/v1/refresh``: the same Basic header and ``{"token": <refresh
  token>}`` (``getRegionalRefreshToken``), answered in camelCase too.
* ``POST /InContactAuthorizationServer/Token``: legacy (an extension kept for older clients).
  ``Authorization: basic base64(app@vendor:BU)``, JSON body
  ``{"grant_type":"password","username","password","scope"}``; ``grant_type=refresh_token`` with
  ``refresh_token`` is accepted too. Answered as AcdToken (docs/platforms.md, "Errors, event shapes and limits")::

    {"access_token": <JWT-shaped>, "token_type": "bearer", "expires_in": 3600, "refresh_token",
     "id_token", "issued_token_type", "refresh_token_server_uri",
     "resource_server_base_uri": "http://127.0.0.1:P/inContactAPI/", "scope", "agent_id", "team_id", "bus_no"}

* ``POST /InContactAuthorizationServer/Token/whoami``: ``{"token": <access token>}``, no bearer
  (``cxone-auth.js`` ``getWhoAmIData``) -> ``{agent_id, bus_no, team_id, expires_in, iss, sub,
  refresh_token_server_uri, resource_server_base_uri}`` (``whoami-response.js``); an unknown,
  expired or revoked token -> 401 ``invalid_token`` [I].

Every path is case-insensitive (``/incontactauthorizationserver/token``, :mod:`.routing`). Errors are
OAuth-shaped (RFC 6749 §5.2): 401 ``invalid_client`` (the FAQ's "Client application 'app@vendor'
not authorized for user"), 400 ``invalid_request`` / ``invalid_grant`` / ``unsupported_grant_type``.

Also here: the bearer check every API route runs (:func:`check_bearer`) and the hooks that
make TOKEN_EXPIRE / TOKEN_REVOKE act on the tokens alive when the fault starts.
"""

from __future__ import annotations

import base64
import binascii

from aiohttp import web

from supervisor.sim.cxone import oidc
from supervisor.sim.cxone.config import ErrorBody
from supervisor.sim.cxone.context import CONTEXT_KEY, CxoneContext
from supervisor.sim.cxone.routing import case_insensitive
from supervisor.sim.cxone.tokens import GrantError, Token, TokenStatus
from supervisor.sim.cxone.wire import ENDPOINT_KEY, BodyError, json_response, oauth_error, read_body
from supervisor.sim.faults import Fault, FaultKind
from supervisor.sim.recorder import TokenEvent

LEGACY_TOKEN = "/InContactAuthorizationServer/Token"
WHOAMI = LEGACY_TOKEN + "/whoami"
V1_TOKEN = "/public/authentication/v1/token"
V1_REFRESH = "/public/authentication/v1/refresh"

_NO_STORE = {"Cache-Control": "no-store", "Pragma": "no-cache"}  # RFC 6749 §5.1


def _basic(request: web.Request) -> tuple[str, str | None] | None:
    """``(user, password)`` of a Basic ``Authorization`` header (scheme case-insensitive), or None.

    NICE's SDK sends ``base64("{clientId}@cxone")`` with no colon: ``(user, None)``."""
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "basic" or not value:
        return None
    try:
        decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    user, sep, secret = decoded.partition(":")
    return (user, secret if sep else None) if user else None


def _token_body(ctx: CxoneContext, token: Token) -> dict[str, object]:
    cfg = ctx.config
    body: dict[str, object] = {
        "access_token": token.access_token,
        "token_type": "bearer",
        "expires_in": cfg.token_ttl_s,
        "refresh_token": token.refresh_token,
        "id_token": token.id_token,
        "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
        "refresh_token_server_uri": ctx.urls.get("auth", "") + token.refresh_uri,
        "resource_server_base_uri": _resource_base(ctx),
        "scope": token.scope,
        "agent_id": token.agent_id,
        "team_id": cfg.team_id,
        "bus_no": cfg.bus_no,
    }
    return body


def _camel_body(ctx: CxoneContext, token: Token) -> dict[str, object]:
    """The regional token service's answer: camelCase (``auth-token.js`` ``parseData`` reads
    ``accessToken``, ``accessTokenExpiry`` (seconds, as ``expires_in``) and ``refreshToken``) [I] for
    any field beyond those."""
    return {
        "accessToken": token.access_token,
        "accessTokenExpiry": ctx.config.token_ttl_s,
        "refreshToken": token.refresh_token,
    }


def _resource_base(ctx: CxoneContext) -> str:
    # real CXone hands out the base with a trailing slash (docs/platforms.md, "Errors, event shapes and limits")
    return ctx.urls.get("api", "") + "/inContactAPI/"


def _answer(
    ctx: CxoneContext,
    request: web.Request,
    token: Token,
    event: TokenEvent,
    grant: str,
    *,
    camel: bool = False,
) -> web.Response:
    ctx.recorder.record_token(event, grant=grant)
    body = _camel_body(ctx, token) if camel else _token_body(ctx, token)
    rewritten = ctx.gate.rewrite(str(token.agent_id), request[ENDPOINT_KEY], 200, body)
    if rewritten is not None:
        rewritten.headers.update(_NO_STORE)
        return rewritten
    return json_response(200, body, _NO_STORE)


def _reject(ctx: CxoneContext, status: int, error: str, description: str) -> web.Response:
    ctx.recorder.record_token("rejected")
    return oauth_error(status, error, description)


def _client_ok(ctx: CxoneContext, client_id: str, secret: str | None) -> bool:
    cfg = ctx.config
    if cfg.client_ids and client_id not in cfg.client_ids:
        return False
    return cfg.client_secret is None or secret == cfg.client_secret


def _user_ok(ctx: CxoneContext, user: str, password: str) -> bool:
    cfg = ctx.config
    if cfg.users and user not in cfg.users:
        return False
    return cfg.password is None or password == cfg.password


async def _password_or_refresh(
    ctx: CxoneContext, request: web.Request, body: dict[str, str], client_id: str, refresh_uri: str
) -> web.Response:
    grant = body.get("grant_type", "")
    if grant == "refresh_token":
        return _refresh(ctx, request, body.get("refresh_token", ""))
    if grant != "password":
        # no client_credentials: no vendor source shows a CXone client-credentials grant
        return _reject(ctx, 400, "unsupported_grant_type", "grant_type must be password or refresh_token")
    user, password = body.get("username", ""), body.get("password", "")
    if not user or not password:
        return _reject(ctx, 400, "invalid_request", "username and password are required")
    if not _user_ok(ctx, user, password):
        return _reject(ctx, 400, "invalid_grant", "Invalid username or password")
    token = ctx.tokens.issue(
        client_id=client_id,
        user=user,
        scope=body.get("scope") or ctx.config.scope,
        ttl_s=ctx.config.token_ttl_s,
        refresh_uri=refresh_uri,
    )
    return _answer(ctx, request, token, "issued", grant)


def _refresh(ctx: CxoneContext, request: web.Request, refresh_token: str) -> web.Response:
    if not refresh_token:
        return _reject(ctx, 400, "invalid_request", "refresh_token is required")
    try:
        token = ctx.tokens.refresh(refresh_token, ttl_s=ctx.config.token_ttl_s)
    except GrantError as exc:
        return _reject(ctx, exc.status, exc.error, exc.description)
    return _answer(ctx, request, token, "refreshed", "refresh_token")


async def legacy_token(request: web.Request) -> web.Response:
    """``POST /InContactAuthorizationServer/Token`` (Basic ``app@vendor:BU`` + JSON body)."""
    ctx = request.app[CONTEXT_KEY]
    creds = _basic(request)
    if creds is None:
        return _reject(
            ctx, 401, "invalid_client", "Basic authorization with application@vendor:BU is required"
        )
    client_id = creds[0]
    if not _client_ok(ctx, client_id, None):
        return _reject(
            ctx, 401, "invalid_client", f"Client application '{client_id[:80]}' not authorized for user"
        )
    try:
        body = await read_body(request)
    except BodyError as exc:
        return _reject(ctx, 400, "invalid_request", str(exc))
    return await _password_or_refresh(ctx, request, body, client_id, LEGACY_TOKEN)


def _regional_client(ctx: CxoneContext, request: web.Request) -> str | web.Response:
    """The client of a regional call: Basic ``base64("{clientId}@cxone")`` (NICE's SDK), or the 401."""
    creds = _basic(request)
    if creds is None or creds[1] is not None:
        return _reject(ctx, 401, "invalid_client", 'Basic authorization with "{clientId}@cxone" is required')
    client_id = creds[0].removesuffix("@cxone")
    if ctx.config.client_ids and client_id not in ctx.config.client_ids:  # no secret is sent here
        return _reject(
            ctx, 401, "invalid_client", f"Client application '{client_id[:80]}' not authorized for user"
        )
    return client_id


async def v1_token(request: web.Request) -> web.Response:
    """``POST /public/authentication/v1/token``: the regional token exchange (module docstring)."""
    ctx = request.app[CONTEXT_KEY]
    try:
        body = await read_body(request)
    except BodyError as exc:
        return _reject(ctx, 400, "invalid_request", str(exc))
    client = _regional_client(ctx, request)
    if isinstance(client, web.Response):
        return client
    access = body.get("accessToken")
    if not access:
        # no password or client-credentials grant here: that login is OpenID Connect (/auth/token)
        return _reject(ctx, 400, "invalid_request", "accessToken is required (a token exchange)")
    try:
        token = ctx.tokens.exchange(access, ttl_s=ctx.config.token_ttl_s)
    except GrantError as exc:
        return _reject(ctx, exc.status, exc.error, exc.description)
    return _answer(ctx, request, token, "issued", "token_exchange", camel=True)


async def v1_refresh(request: web.Request) -> web.Response:
    """``POST /public/authentication/v1/refresh`` with ``{"token": <refresh token>}`` (NICE's SDK)."""
    ctx = request.app[CONTEXT_KEY]
    try:
        body = await read_body(request)
    except BodyError as exc:
        return _reject(ctx, 400, "invalid_request", str(exc))
    client = _regional_client(ctx, request)
    if isinstance(client, web.Response):
        return client
    refresh_token = body.get("token", "")
    if not refresh_token:
        return _reject(ctx, 400, "invalid_request", "token (the refresh token) is required")
    try:
        token = ctx.tokens.refresh(refresh_token, ttl_s=ctx.config.token_ttl_s)
    except GrantError as exc:
        return _reject(ctx, exc.status, exc.error, exc.description)
    return _answer(ctx, request, token, "refreshed", "refresh_token", camel=True)


async def whoami(request: web.Request) -> web.Response:
    """``POST .../Token/whoami`` ``{"token"}``: who a live access token is, and the API base."""
    ctx = request.app[CONTEXT_KEY]
    try:
        body = await read_body(request)
    except BodyError as exc:
        return oauth_error(400, "invalid_request", str(exc))
    status, token = ctx.tokens.check(body.get("token") or None)
    if status is not TokenStatus.VALID or token is None:
        return oauth_error(401, "invalid_token", "Invalid or expired token")
    remaining = max(0, int(token.expires_at - ctx.clock.monotonic()))
    answer = {
        "agent_id": token.agent_id,
        "bus_no": ctx.config.bus_no,
        "team_id": ctx.config.team_id,
        "expires_in": remaining,
        "iss": ctx.urls.get("auth", ""),
        "sub": f"user:{token.agent_id}",
        "refresh_token_server_uri": ctx.urls.get("auth", "") + token.refresh_uri,
        "resource_server_base_uri": _resource_base(ctx),
    }
    return json_response(200, answer, _NO_STORE)


async def auth_key_of(request: web.Request, ctx: CxoneContext) -> str:
    """Share key of a token request: the agent id of its username (or client id), else ""."""
    if request[ENDPOINT_KEY] == f"POST {oidc.TOKEN}":
        return await oidc.share_key_of(request, ctx)
    if request.method != "POST":
        return ""  # discovery: no agent
    try:
        body = await read_body(request)
    except BodyError:
        return ""
    user = body.get("username") or ""
    return str(ctx.tokens.agent_id_for(user)) if user else ""


def add_routes(app: web.Application) -> None:
    """Register the token routes and whoami on the ``auth`` listener's app (any case)."""
    oidc.add_routes(app)
    app.router.add_post(LEGACY_TOKEN, legacy_token)
    app.router.add_post(V1_TOKEN, v1_token)
    app.router.add_post(V1_REFRESH, v1_refresh)
    app.router.add_post(WHOAMI, whoami)
    case_insensitive(app)


# --------------------------------------------------------------------------- API-side checks


def bearer_of(request: web.Request) -> str | None:
    """The bearer token of the ``Authorization`` header (scheme case-insensitive), or None."""
    scheme, _, value = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()


def check_bearer(ctx: CxoneContext, request: web.Request) -> Token | web.Response:
    """The caller's valid :class:`Token`, or the 401 to answer (missing/unknown/expired/revoked).

    401 body: ``{"error":"invalid_token","error_description":..}`` or empty
    (:attr:`CxoneSimConfig.auth_error_body`), with ``WWW-Authenticate`` (RFC 6750 §3).
    """
    status, token = ctx.tokens.check(bearer_of(request))
    if status is TokenStatus.VALID and token is not None:
        return token
    if status is TokenStatus.EXPIRED:
        ctx.recorder.record_token("expired")
    elif status is TokenStatus.REVOKED:
        ctx.recorder.record_token("revoked")
    description = {
        TokenStatus.MISSING: "Authorization bearer token is required",
        TokenStatus.UNKNOWN: "Invalid token",
        TokenStatus.EXPIRED: "Token expired",
        TokenStatus.REVOKED: "Token revoked",
    }[status]
    error = "invalid_request" if status is TokenStatus.MISSING else "invalid_token"
    headers = {"WWW-Authenticate": f'Bearer error="{error}"'}
    empty = ctx.config.auth_error_body is ErrorBody.EMPTY
    return oauth_error(401, error, description, empty=empty, headers=headers)


def install_token_faults(ctx: CxoneContext) -> None:
    """TOKEN_EXPIRE / TOKEN_REVOKE: when such a fault starts, expire (refresh still works) or revoke
    (refresh answers ``invalid_grant``) the live tokens of the agents in its share."""

    def on_activate(fault: Fault) -> None:
        if fault.kind not in (FaultKind.TOKEN_EXPIRE, FaultKind.TOKEN_REVOKE):
            return
        remaining = fault.count
        for token in ctx.tokens.live():
            if remaining is not None and remaining <= 0:
                break
            if not ctx.faults.selected(fault, str(token.agent_id)):
                continue
            if fault.kind is FaultKind.TOKEN_EXPIRE:
                ctx.tokens.expire(token.access_token)
            else:
                ctx.tokens.revoke(token.access_token)
            ctx.recorder.record_fault_hit(fault)
            ctx.faults.hit(fault)  # spends a counted fault (count = how many tokens)
            if remaining is not None:
                remaining -= 1

    ctx.faults.on_activate(on_activate)
