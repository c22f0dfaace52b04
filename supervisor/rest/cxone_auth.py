"""CXone's back-end login, its refresh, and where the tenant's agent API is (docs/platforms.md).

On the real platform (``authUrl`` = ``https://cxone.niceincontact.com``) a back-end application logs
in with OpenID Connect, as NICE's agent SDK and independent CXone clients do (docs/platforms.md,
"NICE CXone", cites each):

1. ``GET {authUrl}/.well-known/openid-configuration``: its ``token_endpoint`` (NICE auth-sdk 26.2.1
   ``cxone-auth.js`` ``getOpenIDConfiguration``); fetched once per credential.
2. ``POST {token_endpoint}``, a form (RFC 6749 section 4.3): ``grant_type=password``, ``username`` =
   the access key id, ``password`` = the access key secret, the client authenticated with HTTP Basic
   (``client_id:client_secret``, each form-encoded first: RFC 6749 section 2.3.1). The answer is
   ``access_token``, ``token_type``, ``expires_in``, ``refresh_token`` and ``id_token``; no
   ``resource_server_base_uri``.
3. A refresh is the same endpoint's ``grant_type=refresh_token&scope=openid&refresh_token=…``
   (``cxone-auth.js`` ``getRefreshToken``), the client authenticated as for the login. A refused
   refresh (a 4xx other than 408/429) falls back to **one** fresh login within the same fetch, so
   the token cache's single flight covers it: however many sessions share the credential, one
   refresh and at most one login go out. Only when that login fails too does the failure reach the
   taxonomy (a 4xx: TOKEN_REFRESH_FAILED, seed edge case 3).
4. The agent API's host: the ``tenantId`` claim of the ``id_token`` (decoded, not verified: it is a
   locator, the platform checks the bearer token), then
   ``GET {issuer}/.well-known/cxone-configuration?tenantId=…`` and its ``api_endpoint``
   (``getCXoneConfiguration``; ``cxone-configuration.js`` reads ``api_endpoint``). The agent API base
   is ``{api_endpoint}/inContactAPI/services/{apiVersion}/``, found once after each login and
   shared by the credential's sessions (:class:`CxoneApi`); a configured ``apiUrl`` skips it.

The ``id_token`` is a credential: it never leaves :meth:`CxoneLogin.fetch`. What it locates (the
tenant, the issuer, the agent) goes into the token's ``extra``; the token itself is dropped.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote_plus

import anyio
import httpx

from supervisor.boundary import SessionContext, http_failures, raw_from_response
from supervisor.config import Secret
from supervisor.errors import OperationError, TransportFailure
from supervisor.rest.pipeline import RequestPipeline, ResponseCheck
from supervisor.rest.tokens import TokenCache, post_token_request, token_fields
from supervisor.taxonomy import Channel, Platform, RawError
from supervisor.vocabulary import EndpointId

__all__ = [
    "CXONE_CONFIGURATION",
    "DISCOVERY_CIRCUIT",
    "OPENID_CONFIGURATION",
    "CxoneApi",
    "CxoneLogin",
    "agent_api_base",
]

OPENID_CONFIGURATION = "/.well-known/openid-configuration"
CXONE_CONFIGURATION = "/.well-known/cxone-configuration"
#: the circuit of the discovery calls: the token endpoint's host, whose own circuit is ``cxone:oauth``
DISCOVERY_CIRCUIT = EndpointId.oauth(Platform.CXONE)
#: the operation of a discovery call (taxonomy v2 [[operations]] api.discovery)
DISCOVERY_OPERATION = "api.discovery"

# extra keys of a CXone token (what its id_token located; rest/tokens.py Token.extra)
TENANT = "tenantId"
ISSUER = "issuer"
AGENT = "agent_id"
LOGIN = "login"

# a refusal that a login may cure; 408 and 429 are "try again", not "no"
_NOT_A_REFUSAL = frozenset({408, 429})


def _form_encoded(value: str) -> str:
    # RFC 6749 section 2.3.1: client id and secret are form-encoded before HTTP Basic
    return quote_plus(value, safe="")


def jwt_claims(token: str) -> dict[str, Any] | None:
    """The payload of a compact JWT (RFC 7519 section 7.2 step 7), *not verified*; None if not one."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    payload = parts[1]
    try:
        raw = base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))
        claims = json.loads(raw)
    except (binascii.Error, ValueError, RecursionError):
        return None
    return claims if isinstance(claims, dict) else None


def _http_url(value: object) -> str | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        url = httpx.URL(value)
    except httpx.InvalidURL:
        return None
    return value if url.scheme in ("http", "https") and url.host else None


def agent_api_base(api_endpoint: str, api_version: str) -> str:
    """``{api_endpoint}/inContactAPI/services/{apiVersion}/``.

    ``api_endpoint`` is the host discovery names (``https://api-na1.niceincontact.com``); a URL that
    already ends in ``/inContactAPI`` (the form of the legacy ``resource_server_base_uri``, which
    ``apiUrl`` used to hold) is taken as is. CXone's paths are case-insensitive (NICE's SDK mixes
    ``/InContactAPI/`` and ``/incontactapi/`` against one host: ``api-uri-constants.js``).
    """
    base = api_endpoint.rstrip("/")
    head, _, last = base.rpartition("/")
    if last.lower() == "incontactapi" and "://" in head:  # a path segment, not a host of that name
        base = head
    return f"{base}/inContactAPI/services/{api_version}/"


class CxoneLogin:
    """The OpenID Connect login of one CXone credential (a :class:`~supervisor.rest.tokens.TokenSource`)."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        auth_url: str,
        client_id: str,
        client_secret: Secret,
        access_key_id: str,
        access_key_secret: Secret,
    ) -> None:
        self._client = client
        self._auth = auth_url.rstrip("/")
        pair = f"{_form_encoded(client_id)}:{_form_encoded(client_secret.reveal())}"
        self._basic = Secret("Basic " + base64.b64encode(pair.encode()).decode())
        self._access_key_id = access_key_id
        self._access_key_secret = access_key_secret
        self._ctx = SessionContext("oauth", Platform.CXONE, Channel.REST)
        self._token_endpoint: str | None = None
        self._issuer = self._auth
        # the refresh token the endpoint refused: a retry of the same fetch goes straight to the login
        self._refused: Secret | None = None
        # what the last login's id_token located, carried over by the refreshes
        self._located: dict[str, Any] = {}
        #: logins made (the first, and those after a refused refresh)
        self.logins = 0
        #: refreshes the endpoint refused, each followed by one login
        self.refused_refreshes = 0

    @property
    def url(self) -> str | None:
        """The token endpoint, once discovered (telemetry's url.template)."""
        return self._token_endpoint

    async def fetch(self, refresh: Secret | None) -> tuple[Secret, float, Secret | None, dict[str, Any]]:
        """A refresh when there is a refresh token, else a login; a refused refresh logs in once."""
        endpoint = await self._endpoint()
        if refresh is not None and refresh is not self._refused:
            form = {"grant_type": "refresh_token", "scope": "openid", "refresh_token": refresh.reveal()}
            try:
                return self._answer(await self._grant(endpoint, form), login=False)
            except TransportFailure as failure:
                raw = failure.raw
                status = raw.status if isinstance(raw, RawError) else None
                if status is None or not 400 <= status < 500 or status in _NOT_A_REFUSAL:
                    raise  # an outage or a throttle: the retry executor retries the refresh
                self._refused = refresh
                self.refused_refreshes += 1
        form = {
            "grant_type": "password",
            "username": self._access_key_id,
            "password": self._access_key_secret.reveal(),
        }
        answer = self._answer(await self._grant(endpoint, form), login=True)
        self._refused = None
        return answer

    async def _grant(self, endpoint: str, form: dict[str, str]) -> dict[str, Any]:
        return await post_token_request(
            self._client, endpoint, self._ctx, data=form, headers={"Authorization": self._basic.reveal()}
        )

    def _answer(
        self, payload: dict[str, Any], *, login: bool
    ) -> tuple[Secret, float, Secret | None, dict[str, Any]]:
        access, lifetime, refresh, extra = token_fields(payload)
        id_token = payload.get("id_token")
        claims = jwt_claims(id_token) if isinstance(id_token, str) else None
        if login:
            self.logins += 1
            self._located = {LOGIN: self.logins, ISSUER: self._issuer}
        if claims is not None:
            tenant, agent = claims.get("tenantId"), claims.get("icAgentId")
            if isinstance(tenant, str) and tenant:
                self._located[TENANT] = tenant
            if isinstance(agent, str | int) and not isinstance(agent, bool) and str(agent):
                self._located[AGENT] = str(agent)  # cxone-user.js: icAgentId is the agent
        return access, lifetime, refresh, {**extra, **self._located}

    async def _endpoint(self) -> str:
        """The token endpoint from the OpenID configuration (once per credential)."""
        if self._token_endpoint is not None:
            return self._token_endpoint
        url = self._auth + OPENID_CONFIGURATION
        with http_failures(ctx=self._ctx, method="GET", endpoint=OPENID_CONFIGURATION):
            response = await self._client.get(url)
        if response.status_code != 200:
            raise TransportFailure(raw_from_response(response, ctx=self._ctx, endpoint=OPENID_CONFIGURATION))
        try:
            document = response.json()
        except (ValueError, RecursionError):
            document = None
        endpoint = _http_url(document.get("token_endpoint")) if isinstance(document, dict) else None
        if document is None or endpoint is None:
            # nothing to log in at: a contract violation, as a token answer without a token is
            raise TransportFailure(
                RawError(
                    platform=Platform.CXONE,
                    channel=Channel.REST,
                    method="GET",
                    endpoint=OPENID_CONFIGURATION,
                    exception="json.JSONDecodeError",
                )
            )
        assert isinstance(document, dict)
        # OpenID Connect Discovery section 3: the issuer the id_token's iss names; NICE's SDK asks
        # cxone-configuration of the host it discovered at, which is the same on the real platform
        self._issuer = (_http_url(document.get("issuer")) or self._auth).rstrip("/")
        self._token_endpoint = endpoint
        return endpoint


@dataclass(frozen=True, slots=True)
class _Found:
    login: object
    base: str


class CxoneApi:
    """Where one CXone credential's agent API is: ``apiUrl`` when configured, else discovered.

    Discovery runs once after each login (a token whose ``extra`` names a new login) and is shared
    by every session of the credential: concurrent callers wait for the one request in flight.
    """

    def __init__(
        self,
        tokens: TokenCache,
        discovery: RequestPipeline,
        *,
        api_url: str | None = None,
        api_version: str = "v23.0",
    ) -> None:
        if discovery.tokens is not None:
            # the discovery endpoints are public: NICE's SDK and independent clients send no token
            raise ValueError("discovery goes through a pipeline without a token cache")
        self._tokens = tokens
        self._discovery = discovery
        self._configured = None if api_url is None else agent_api_base(api_url, api_version)
        self.api_version = api_version
        self._found: _Found | None = None
        self._inflight: anyio.Event | None = None
        # the failure of the discovery the waiters waited for, shared with them (as TokenCache does)
        self._failure: tuple[object, BaseException] | None = None
        #: discoveries made (cxone-configuration requests that found the API)
        self.discoveries = 0

    async def base(self, ctx: SessionContext) -> str:
        """``…/inContactAPI/services/{apiVersion}/`` for ``ctx``'s calls.

        Raises :class:`OperationError` (a refused or incomplete discovery, a token fetch that gave
        up), :class:`~supervisor.errors.CircuitOpenError`.
        """
        if self._configured is not None:
            return self._configured
        executor = self._discovery.executor
        tokens = self._tokens
        while True:
            token = tokens.cached() or await executor.token(ctx, tokens, tokens.get)
            login = token.extra.get(LOGIN)
            found = self._found
            if found is not None and found.login == login:
                return found.base
            inflight = self._inflight
            if inflight is None:
                return await self._discover(ctx, login, token.extra)
            await inflight.wait()  # another session is discovering for this login: take its answer
            found, failure = self._found, self._failure
            if found is not None and found.login == login:
                return found.base
            if failure is not None and failure[0] == login:
                raise failure[1]
            # it was cancelled (its session stopped), or a new login came meanwhile: go again

    async def _discover(self, ctx: SessionContext, login: object, located: dict[str, Any]) -> str:
        done = self._inflight = anyio.Event()
        self._failure = None
        try:
            tenant = located.get(TENANT)
            issuer = located.get(ISSUER)
            if not isinstance(tenant, str) or not isinstance(issuer, str):
                # a login whose id_token names no tenant leaves nothing to discover (seed section 3)
                raise self._incomplete(ctx, "id_token.tenantId", "POST oauth.token")
            url = issuer + CXONE_CONFIGURATION
            response = await self._discovery.request(
                "GET",
                url,
                ctx=ctx,
                circuit=DISCOVERY_CIRCUIT,
                operation=DISCOVERY_OPERATION,
                channel=Channel.REST,
                check=ResponseCheck(required=("api_endpoint",)),
                params={"tenantId": tenant},
            )
            api_endpoint = _http_url(response.json().get("api_endpoint"))
            if api_endpoint is None:
                raise self._incomplete(ctx, "api_endpoint", f"GET {CXONE_CONFIGURATION}")
            base = agent_api_base(api_endpoint, self.api_version)
            self._found = _Found(login, base)
            self.discoveries += 1
            return base
        except Exception as exc:
            # a real failure is shared with the sessions that waited for it; a cancellation is not
            self._failure = (login, exc)
            raise
        finally:
            self._inflight = None
            done.set()

    def _incomplete(self, ctx: SessionContext, field: str, endpoint: str) -> OperationError:
        event = self._discovery.classifier.incomplete_response(
            (field,),
            platform=ctx.platform,
            channel=Channel.REST,
            context=ctx.envelope_context(),
            endpoint=endpoint,
        )
        return OperationError(event)
