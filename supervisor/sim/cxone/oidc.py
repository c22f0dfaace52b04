"""CXone's OpenID Connect surface on the simulator's ``auth`` listener (docs/platforms.md, "NICE CXone").

A back-end login on the real platform (``authUrl`` ``https://cxone.niceincontact.com``) is OpenID
Connect, and the simulator answers it the same way:

* ``GET /.well-known/openid-configuration``: the discovery document (OpenID Connect Discovery 1.0
  section 3); ``token_endpoint`` is ``{auth}/auth/token``, as the real document names it. NICE's SDK
  reads ``token_endpoint``, ``authorization_endpoint``, ``jwks_uri`` ... (auth-sdk 26.2.1
  ``open-id-configuration.js``).
* ``POST /auth/token``: the token endpoint. A form (RFC 6749 section 3.2) with ``grant_type``
  ``password`` (``username`` = the access key id, ``password`` = its secret) or ``refresh_token``
  (``refresh_token``, optional ``scope``: NICE's ``getRefreshToken`` sends ``scope=openid``). The
  body is read as a form whatever its Content-Type: NICE's SDK posts its form text labelled
  ``application/json`` (``cxone-auth.js`` ``getRefreshToken``, ``http-request.js``), and the platform
  answers it [I]. The client authenticates with HTTP Basic (``client_id:client_secret``, each
  form-encoded first: RFC 6749 section 2.3.1) or with ``client_id``/``client_secret`` form fields,
  never both (section 2.3). The answer is RFC 6749 section 5.1's, plus the OpenID ``id_token``:
  ``{access_token, token_type, expires_in, refresh_token, id_token}``, and no
  ``resource_server_base_uri``: the API host comes from the tenant discovery below.
* ``GET /.well-known/cxone-configuration?tenantId=T``: the tenant's hosts; ``api_endpoint`` is the
  ``api`` listener (``cxone-auth.js`` ``getCXoneConfiguration``; ``cxone-configuration.js`` reads
  ``api_endpoint``, ``area``, ``cluster``, ``domain``, ``acdDomain``, ``uhDomain``). ``T`` must be the
  ``tenantId`` the simulator's tokens name: a missing one is 400, another one 404 [I].
* ``GET /auth/jwks``: ``{"keys": []}``: the simulator's tokens are unsigned (``alg: none``) [I].

Errors are RFC 6749 section 5.2's: 400 ``invalid_request`` (no or a malformed form, a missing
parameter, two client authentication methods), 401 ``invalid_client`` (no or bad client
authentication; with ``WWW-Authenticate: Basic`` when Basic was tried), 400 ``invalid_grant`` (a
wrong access key, or a used, revoked or another client's refresh token), 400
``unsupported_grant_type`` (``client_credentials``, ``authorization_code``, a token exchange: the
browser flows are not modelled), 400 ``invalid_scope`` (a refresh asking more than was granted).
"""

from __future__ import annotations

import base64
import binascii
from urllib.parse import unquote_plus

from aiohttp import web

from supervisor.sim.bodies import MalformedBody, parse_form
from supervisor.sim.cxone.context import CONTEXT_KEY, CxoneContext
from supervisor.sim.cxone.tokens import GrantError, Token
from supervisor.sim.cxone.wire import ENDPOINT_KEY, json_response, oauth_error
from supervisor.sim.recorder import TokenEvent

OPENID_CONFIGURATION = "/.well-known/openid-configuration"
CXONE_CONFIGURATION = "/.well-known/cxone-configuration"
TOKEN = "/auth/token"
AUTHORIZE = "/auth/authorize"
JWKS = "/auth/jwks"

#: the scope an OpenID login is granted besides the configured API scopes
OPENID = "openid"
_NO_STORE = {"Cache-Control": "no-store", "Pragma": "no-cache"}  # RFC 6749 section 5.1
_FORM_LIMIT = 64 * 1024


class _Refused(Exception):
    """An OAuth refusal: status, ``error``, description, extra headers."""

    def __init__(self, status: int, error: str, description: str, headers: dict[str, str] | None = None):
        super().__init__(description)
        self.status, self.error, self.description = status, error, description
        self.headers = headers or {}


def _reject(ctx: CxoneContext, refused: _Refused | GrantError) -> web.Response:
    ctx.recorder.record_token("rejected")
    headers = refused.headers if isinstance(refused, _Refused) else None
    return oauth_error(refused.status, refused.error, refused.description, headers=headers)


async def _form(request: web.Request) -> dict[str, str]:
    """The body as a form, whatever its Content-Type (module docstring)."""
    raw = await request.read()
    if len(raw) > _FORM_LIMIT:
        raise _Refused(400, "invalid_request", "request body too large")
    try:
        return parse_form(raw)
    except MalformedBody as exc:
        raise _Refused(400, "invalid_request", f"request body is malformed: {exc}") from None


def _basic_client(request: web.Request) -> tuple[str, str] | None:
    """``(client_id, client_secret)`` of a Basic header, each form-decoded (RFC 6749 section 2.3.1).

    Raises:
        _Refused: 401 ``invalid_client`` for a Basic header that does not decode to ``id:secret``.
    """
    scheme, _, value = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "basic":
        return None
    refused = _Refused(
        401, "invalid_client", "malformed Basic client authentication", {"WWW-Authenticate": "Basic"}
    )
    try:
        decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        raise refused from None
    client_id, sep, secret = decoded.partition(":")
    if not sep or not client_id:
        raise refused
    return unquote_plus(client_id), unquote_plus(secret)


def _client(ctx: CxoneContext, request: web.Request, form: dict[str, str]) -> str:
    """The authenticated client id (RFC 6749 section 2.3), or :class:`_Refused`."""
    basic = _basic_client(request)
    in_form = "client_id" in form or "client_secret" in form
    if basic is not None and in_form:
        raise _Refused(400, "invalid_request", "use one client authentication method, not two")
    if basic is None and not form.get("client_id"):
        raise _Refused(401, "invalid_client", "client authentication is required")
    client_id, secret = basic if basic is not None else (form["client_id"], form.get("client_secret", ""))
    cfg = ctx.config
    if (cfg.client_ids and client_id not in cfg.client_ids) or (
        cfg.client_secret is not None and secret != cfg.client_secret
    ):
        headers = {"WWW-Authenticate": "Basic"} if basic is not None else None
        raise _Refused(401, "invalid_client", "Client authentication failed", headers)
    return client_id


def token_body(ctx: CxoneContext, token: Token) -> dict[str, object]:
    """RFC 6749 section 5.1 plus the OpenID id_token; no resource_server_base_uri."""
    return {
        "access_token": token.access_token,
        "token_type": "Bearer",
        "expires_in": ctx.config.token_ttl_s,
        "refresh_token": token.refresh_token,
        "id_token": token.id_token,
    }


def _answer(
    ctx: CxoneContext, request: web.Request, token: Token, event: TokenEvent, grant: str
) -> web.Response:
    ctx.recorder.record_token(event, grant=grant)
    body = token_body(ctx, token)
    rewritten = ctx.gate.rewrite(str(token.agent_id), request[ENDPOINT_KEY], 200, body)
    if rewritten is not None:
        rewritten.headers.update(_NO_STORE)
        return rewritten
    return json_response(200, body, _NO_STORE)


def _password(ctx: CxoneContext, request: web.Request, form: dict[str, str], client_id: str) -> web.Response:
    user, password = form.get("username", ""), form.get("password", "")
    if not user or not password:
        raise _Refused(400, "invalid_request", "username and password are required")
    cfg = ctx.config
    if (cfg.users and user not in cfg.users) or (cfg.password is not None and password != cfg.password):
        raise _Refused(400, "invalid_grant", "Invalid access key")
    token = ctx.tokens.issue(
        client_id=client_id,
        user=user,
        scope=f"{OPENID} {cfg.scope}",
        ttl_s=cfg.token_ttl_s,
        refresh_uri=TOKEN,
    )
    return _answer(ctx, request, token, "issued", "password")


def _refresh(ctx: CxoneContext, request: web.Request, form: dict[str, str], client_id: str) -> web.Response:
    refresh_token = form.get("refresh_token", "")
    if not refresh_token:
        raise _Refused(400, "invalid_request", "refresh_token is required")
    granted = ctx.tokens.of_refresh(refresh_token)
    asked = set(form.get("scope", "").split())
    if granted is not None and not asked <= set(granted.scope.split()):
        # RFC 6749 section 6: a refresh may not ask for more than was granted
        raise _Refused(400, "invalid_scope", "The requested scope exceeds the scope granted")
    token = ctx.tokens.refresh(refresh_token, ttl_s=ctx.config.token_ttl_s, client_id=client_id)
    return _answer(ctx, request, token, "refreshed", "refresh_token")


async def token_endpoint(request: web.Request) -> web.Response:
    """``POST /auth/token``: the password and refresh_token grants (module docstring)."""
    ctx = request.app[CONTEXT_KEY]
    try:
        form = await _form(request)
        client_id = _client(ctx, request, form)
        grant = form.get("grant_type", "")
        if not grant:
            raise _Refused(400, "invalid_request", "grant_type is required")
        if grant == "password":
            return _password(ctx, request, form, client_id)
        if grant == "refresh_token":
            return _refresh(ctx, request, form, client_id)
        raise _Refused(400, "unsupported_grant_type", "grant_type must be password or refresh_token")
    except (_Refused, GrantError) as refused:
        return _reject(ctx, refused)


async def openid_configuration(request: web.Request) -> web.Response:
    """``GET /.well-known/openid-configuration`` (OpenID Connect Discovery 1.0 section 3)."""
    ctx = request.app[CONTEXT_KEY]
    issuer = ctx.urls.get("auth", "")
    document = {
        "issuer": issuer,
        "authorization_endpoint": issuer + AUTHORIZE,
        "token_endpoint": issuer + TOKEN,
        "jwks_uri": issuer + JWKS,
        "response_types_supported": ["code"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["none"],
        "grant_types_supported": ["password", "refresh_token"],
        "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
        "scopes_supported": [OPENID],
    }
    return json_response(200, document)


async def jwks(request: web.Request) -> web.Response:
    """``GET /auth/jwks``: no keys; the simulator's tokens are unsigned [I]."""
    del request
    return json_response(200, {"keys": []})


async def cxone_configuration(request: web.Request) -> web.Response:
    """``GET /.well-known/cxone-configuration?tenantId=T``: the tenant's API host."""
    ctx = request.app[CONTEXT_KEY]
    tenant = request.query.get("tenantId", "")
    if not tenant:
        return oauth_error(400, "invalid_request", "tenantId is required")
    if tenant != ctx.tokens.tenant_id:
        return oauth_error(404, "not_found", "Unknown tenant")
    body: dict[str, object] = {
        "api_endpoint": ctx.urls.get("api", ""),
        "auth_endpoint": ctx.urls.get("auth", ""),
        "area": "sim1",
        "cluster": "SIM1",
        "domain": "localhost",
        "acdDomain": "localhost",
        "uhDomain": "localhost",
    }
    rewritten = ctx.gate.rewrite("", request[ENDPOINT_KEY], 200, body)
    return rewritten if rewritten is not None else json_response(200, body)


async def share_key_of(request: web.Request, ctx: CxoneContext) -> str:
    """The share key (agent id) of a ``/auth/token`` request: its username's, or its refresh token's."""
    try:
        form = await _form(request)
    except _Refused:
        return ""
    user = form.get("username", "")
    if user:
        return str(ctx.tokens.agent_id_for(user))
    token = ctx.tokens.of_refresh(form.get("refresh_token", ""))
    return str(token.agent_id) if token is not None else ""


def add_routes(app: web.Application) -> None:
    """Register the OpenID routes on the ``auth`` listener (before its case-insensitive routing)."""
    app.router.add_get(OPENID_CONFIGURATION, openid_configuration)
    app.router.add_get(CXONE_CONFIGURATION, cxone_configuration)
    app.router.add_post(TOKEN, token_endpoint)
    app.router.add_get(JWKS, jwks)
