"""OAuth token cache with early refresh and single-flight refresh (seed edge case 3).

* A cached token is used only while it is valid for longer than ``early_refresh_s``
  (5 minutes by default: "maintain a token cache with a 5-minute early refresh window").
* :meth:`TokenCache.ensure` refreshes a token that expires within ``min_validity_s``; the
  request pipeline calls it before every retry with 60 s ("if expiration occurs within 60
  seconds, trigger a silent refresh").
* However many callers need a refresh at once, one request goes to the token endpoint;
  the others wait for its result (no authentication storm).
* A failed fetch raises :class:`TransportFailure` with the token endpoint's RawError: the
  taxonomy makes a 4xx ``TOKEN_REFRESH_FAILED`` (PERMANENT, fail-fast) and a 5xx or a
  network failure TRANSIENT.

The sources: Genesys' client-credentials grant here, CXone's OpenID Connect login (with its refresh
and the discovery of the tenant's API) in :mod:`supervisor.rest.cxone_auth`.

**A rotated credential swaps the source, not the token** (:meth:`TokenCache.trial`,
:meth:`TokenCache.swap`): a reload first fetches one token from a source built on the new
credential, without touching the cache; only if that is granted does the cache take the new
source, and the token it got is kept for the next refresh. The token in use stays until then:
a notifications channel rolls over when the cache's token is replaced (docs/runtime.md,
"Notifications rollover"), and a rotation must not touch any channel.

Tokens live in memory only and never appear in a log line or a repr.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio
import httpx

from supervisor.boundary import SessionContext, TokenAge, http_failures, raw_from_response
from supervisor.clock import Clock
from supervisor.config import Secret
from supervisor.errors import TransportFailure
from supervisor.taxonomy import Channel, Platform, RawError


@dataclass(frozen=True, slots=True)
class Token:
    """An access token and when it expires, on the monotonic clock."""

    access: Secret
    expires_at: float
    refresh: Secret | None = None
    # seconds the token was issued for: an early-refresh window never exceeds half of it
    lifetime: float = 3600.0
    # what else the token endpoint said that callers need (never a credential: SECRET_FIELDS); CXone
    # adds what its id_token locates (rest/cxone_auth.py)
    extra: dict[str, Any] = field(default_factory=dict)

    def remaining(self, now: float) -> float:
        return self.expires_at - now

    @property
    def authorization(self) -> str:
        return f"Bearer {self.access.reveal()}"


class TokenSource(Protocol):
    """Obtains a token from a platform's token endpoint."""

    async def fetch(self, refresh: Secret | None) -> tuple[Secret, float, Secret | None, dict[str, Any]]:
        """(access token, lifetime in seconds, refresh token, extra fields); TransportFailure on failure."""


class TokenCache:
    """One credential's token: cached, refreshed early, refreshed once however many wait."""

    def __init__(
        self,
        source: TokenSource,
        clock: Clock,
        *,
        early_refresh_s: float = 300.0,
        platform: Platform | None = None,
        tenant: str | None = None,
    ) -> None:
        # whose credential it is: its token endpoint is that platform's (None: fetched ungated), a
        # named tenant's its own (``NAME/genesys:oauth``: one tenant's refused logins never hold another's)
        self.platform = platform
        self.tenant = tenant
        self._source = source
        self._clock = clock
        self._early = early_refresh_s
        self._token: Token | None = None
        # a token a rotated credential's source granted (``swap``), taken at the next refresh
        self._next: Token | None = None
        self._inflight: anyio.Event | None = None
        self._failure: BaseException | None = None
        self.fetches = 0
        self.refreshes = 0
        # fetches the token endpoint refused or never answered (telemetry counts them)
        self.failures = 0

    @property
    def early_refresh_s(self) -> float:
        """How long before its expiry a cached token is refreshed (``tokens.earlyRefresh``)."""
        return self._early

    @early_refresh_s.setter
    def early_refresh_s(self, seconds: float) -> None:
        self._early = seconds

    @property
    def source(self) -> TokenSource:
        """Where tokens come from (the credential in use)."""
        return self._source

    @property
    def endpoint(self) -> tuple[str, str, int | None] | None:
        """(path, host, port) of the token endpoint, for telemetry's url.template / server.*; None
        until known (CXone's is discovered at the first login)."""
        return _endpoint_of(getattr(self._source, "url", None))

    @property
    def current(self) -> Token | None:
        return self._token

    def expired(self, token: Token) -> bool:
        """Has ``token`` expired by our clock?"""
        return token.remaining(self._clock.monotonic()) <= 0.0

    def refresh_window(self, token: Token) -> float:
        """The early-refresh window applied to ``token``: ``early_refresh_s``, halved to half the
        token's lifetime when the token could never satisfy it (see :meth:`cached`)."""
        return _window(self._early, token)

    def within_refresh_window(self, token: Token) -> bool:
        """Is ``token`` left with at most its early-refresh window, by our clock?

        The judge of a 401 (docs/taxonomy.md, "The 401 rule"): both platforms answer an expired and a revoked
        token alike (``invalid_token``, ``bad.credentials``), and their clock is not ours: a token
        they expire a little before the lifetime they announced fails while we still hold it
        valid. A 401 on a token this close to its end is taken for its expiry; one on a token
        with more left is a revocation. The envelope carries the answer
        (``tokenWithinRefreshWindow``), the taxonomy decides.
        """
        return token.remaining(self._clock.monotonic()) <= self.refresh_window(token)

    def age(self, token: Token) -> TokenAge:
        """What our clock says of ``token`` now, for the envelope of a request it signed."""
        return TokenAge(expired=self.expired(token), within_refresh_window=self.within_refresh_window(token))

    async def get(self) -> Token:
        """A token valid for longer than the early-refresh window (refreshing if needed)."""
        return await self.ensure(self._early)

    async def ensure(self, min_validity_s: float) -> Token:
        """A token valid for at least ``min_validity_s`` more seconds."""
        token = self.cached(min_validity_s)
        if token is not None:
            return token
        return await self.refresh(stale=self._token)

    def cached(self, min_validity_s: float | None = None) -> Token | None:
        """The cached token when it is valid for ``min_validity_s`` more seconds (default: the
        early-refresh window), else None; never fetches (the executor's no-await fast path)."""
        token = self._token
        if token is None:
            return None
        window = _window(self._early if min_validity_s is None else min_validity_s, token)
        return token if token.remaining(self._clock.monotonic()) > window else None

    async def refresh(self, stale: Token | None = None) -> Token:
        """Fetch a new token; concurrent callers share one fetch.

        ``stale`` is the token the caller found wanting: if another caller already replaced
        it, that newer token is returned without a second fetch.
        """
        while True:
            if self._token is not None and self._token is not stale:
                return self._token
            inflight = self._inflight
            if inflight is None:
                return await self._fetch(stale)
            await inflight.wait()
            if self._token is not None and self._token is not stale:
                return self._token
            failure = self._failure
            if failure is not None:
                raise failure
            # the fetch we waited for was cancelled (its caller was stopped): fetch ourselves

    async def trial(self, source: TokenSource) -> Token:
        """One token from ``source`` (a rotated credential's), leaving this cache as it is.

        Raises :class:`TransportFailure` as :meth:`refresh` does; the retry executor's token step
        runs it (``executor.token(ctx, cache, lambda: cache.trial(source))``), so the fetch is an
        ``oauth.token`` operation behind the credential's endpoint like any other.
        """
        access, lifetime, refresh, extra = await source.fetch(None)
        return Token(access, self._clock.monotonic() + lifetime, refresh, lifetime=lifetime, extra=extra)

    def swap(self, source: TokenSource, granted: Token) -> None:
        """Take ``source`` (the rotated credential) for every fetch from now on.

        ``granted`` is the token :meth:`trial` got from it: the next refresh takes it instead of
        asking again while it is still good. The token in use is not replaced (module docstring).
        """
        self._source = source
        self._next = granted

    async def _fetch(self, stale: Token | None) -> Token:
        pending, self._next = self._next, None
        if pending is not None and pending.remaining(self._clock.monotonic()) > _window(self._early, pending):
            # the rotated credential's first token: already granted, still good
            self._token = pending
            self.fetches += 1
            if stale is not None:
                self.refreshes += 1
            return pending
        done = self._inflight = anyio.Event()
        try:
            refresh = stale.refresh if stale is not None else None
            access, lifetime, new_refresh, extra = await self._source.fetch(refresh)
            self._failure = None
            self._token = Token(
                access,
                self._clock.monotonic() + lifetime,
                new_refresh or refresh,
                lifetime=lifetime,
                extra=extra,
            )
            self.fetches += 1
            if stale is not None:
                self.refreshes += 1
            return self._token
        except Exception as exc:
            # only a real failure is shared with the waiters; a cancellation is the caller's own
            self._failure = exc
            self.failures += 1
            raise
        finally:
            self._inflight = None
            done.set()

    def revoke(self) -> None:
        """Forget the cached token (fail-fast: "revoke local session storage")."""
        self._token = None
        self._next = None


def _window(wanted: float, token: Token) -> float:
    # a window the token can never satisfy (a 300 s token, Genesys' minimum, against the 300 s
    # early refresh) would refetch it on every call: such a window is halved
    return wanted if wanted < token.lifetime else token.lifetime / 2


def _endpoint_of(url: object) -> tuple[str, str, int | None] | None:
    if not isinstance(url, str):
        return None
    parsed = httpx.URL(url)
    return parsed.path, parsed.host, parsed.port


def _lifetime(payload: dict[str, Any]) -> float:
    value = payload.get("expires_in")
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return float(value)
    return 3600.0


class GenesysClientCredentials:
    """``POST {login}/oauth/token``: Basic auth, form ``grant_type=client_credentials``.

    docs/platforms.md, "Genesys Cloud Platform REST".
    """

    def __init__(self, client: httpx.AsyncClient, login_url: str, client_id: str, secret: Secret) -> None:
        self._client = client
        self.url = login_url.rstrip("/") + "/oauth/token"
        basic = base64.b64encode(f"{client_id}:{secret.reveal()}".encode()).decode()
        self._auth = Secret(f"Basic {basic}")
        self._ctx = SessionContext("oauth", Platform.GENESYS, Channel.REST)

    async def fetch(self, refresh: Secret | None) -> tuple[Secret, float, Secret | None, dict[str, Any]]:
        form = {"grant_type": "client_credentials"}
        if refresh is not None:
            form = {"grant_type": "refresh_token", "refresh_token": refresh.reveal()}
        return await _post_token(
            self._client, self.url, self._ctx, headers={"Authorization": self._auth.reveal()}, data=form
        )


async def _post_token(
    client: httpx.AsyncClient, url: str, ctx: SessionContext, **kwargs: Any
) -> tuple[Secret, float, Secret | None, dict[str, Any]]:
    return token_fields(await post_token_request(client, url, ctx, **kwargs))


async def post_token_request(
    client: httpx.AsyncClient, url: str, ctx: SessionContext, **kwargs: Any
) -> dict[str, Any]:
    """POST to a token endpoint; the answer's JSON object, which carries an ``access_token``.

    Raises :class:`TransportFailure` with the RawError of a refusal, a network failure, or a 200
    without a token (a contract violation, not a success: seed section 3).
    """
    path = httpx.URL(url).path
    with http_failures(ctx=ctx, method="POST", endpoint=path):
        response = await client.post(url, **kwargs)
    if response.status_code != 200:
        raise TransportFailure(raw_from_response(response, ctx=ctx, endpoint=path))
    try:
        payload = response.json()
    except (ValueError, RecursionError):  # RecursionError: a body nested thousands deep
        payload = None
    if not isinstance(payload, dict) or not isinstance(payload.get("access_token"), str):
        raw = RawError(
            platform=ctx.platform,
            channel=ctx.channel,
            method="POST",
            endpoint=path,
            exception="json.JSONDecodeError",
            context=ctx.envelope_context(),
        )
        raise TransportFailure(raw)
    return payload


#: answer fields that are credentials: kept out of a Token's ``extra`` (its repr shows it); the
#: OpenID id_token is one (a signed statement of who the user is, RFC 7519)
SECRET_FIELDS = frozenset({"access_token", "refresh_token", "id_token"})


def token_fields(payload: dict[str, Any]) -> tuple[Secret, float, Secret | None, dict[str, Any]]:
    """(access token, lifetime, refresh token, the answer's other, non-secret fields)."""
    refresh = payload.get("refresh_token")
    extra = {k: v for k, v in payload.items() if k not in SECRET_FIELDS}
    return (
        Secret(payload["access_token"]),
        _lifetime(payload),
        Secret(refresh) if isinstance(refresh, str) and refresh else None,
        extra,
    )
