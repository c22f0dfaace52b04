"""Pure token bookkeeping of the CXone fake: issue, refresh, check, expire, revoke.

Access tokens are JWT-shaped (CX-8): NICE's agent SDK decodes them (``security-helper.js``
``parseJwt`` = ``JSON.parse(atob(token.split('.')[1]))``; ``validation-utils.js`` checks ``exp``;
``cxone-auth.js`` reads ``impersonatingUserTenantId``), and ``cxone-user.js`` reads the id_token's
claims. The header says ``alg: none`` and the signature is random: nothing verifies them, and the
store stays keyed by the whole string. Refresh tokens are opaque. The id_token carries the tenant
(``tenantId``, a UUID as CXone's are) that ``/.well-known/cxone-configuration`` requires, and the
claims ``cxone-user.js`` ``setUserDetails`` decodes (``icAgentId``, ``icBUId``, ``icClusterId``,
``teamId``, ``name``, ``given_name``, ``family_name``, ``sub`` = ``user:<uuid>``). Ids come from the simulator's
seeded RNG; lifetimes use the injected clock's ``monotonic()``. Nothing here logs or returns a token except to the
caller that asked for it (docs/simulators.md: secrets and tokens never in logs or stats).
"""

from __future__ import annotations

import base64
import enum
import json
import random
import uuid
from dataclasses import dataclass
from typing import Any

from supervisor.clock import Clock


class TokenStatus(enum.Enum):
    """What :meth:`TokenStore.check` found for a presented bearer token."""

    VALID = "valid"
    MISSING = "missing"
    UNKNOWN = "unknown"
    EXPIRED = "expired"
    REVOKED = "revoked"


class GrantError(Exception):
    """An OAuth error (RFC 6749 §5.2) for the token endpoints: ``status``, ``error``, ``description``."""

    def __init__(self, status: int, error: str, description: str) -> None:
        super().__init__(description)
        self.status = status
        self.error = error
        self.description = description


@dataclass(slots=True)
class Token:
    """One issued access token and its refresh token."""

    access_token: str
    refresh_token: str
    client_id: str
    user: str
    agent_id: int
    scope: str
    issued_at: float
    expires_at: float
    refresh_uri: str
    revoked: bool = False
    id_token: str = ""  # the OpenID id_token (cxone-user.js setUserDetails reads its claims)


class TokenStore:
    """Every token a simulator issued. Agent ids are stable per username."""

    def __init__(
        self,
        clock: Clock,
        rng: random.Random,
        *,
        first_agent_id: int = 100001,
        bus_no: int = 4600001,
        team_id: int = 2000,
        issuer: str = "cxone-simulator",
        early_expiry_s: float = 0.0,
    ) -> None:
        self._clock = clock
        # tokens stop working this long before the lifetime they announce (CxoneSimConfig)
        self._early_expiry = early_expiry_s
        self._rng = rng
        self._bus_no = bus_no
        self._team_id = team_id
        self.issuer = issuer
        # one business unit, one tenant: a UUID, stable per bus_no (CXone tenant ids are UUIDs)
        self.tenant_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"cxone-sim-tenant:{bus_no}"))
        self._by_access: dict[str, Token] = {}
        self._by_refresh: dict[str, Token] = {}
        self._agents: dict[str, int] = {}
        self._next_agent = first_agent_id

    def _secret(self) -> str:
        return f"{self._rng.getrandbits(192):048x}"

    def _jwt(self, user: str, agent_id: int, ttl_s: float, **extra: Any) -> str:
        """A JWT-shaped token (RFC 7519 compact form) with the claims NICE's SDK reads."""
        now = int(self._clock.time())
        claims: dict[str, Any] = {
            "iss": self.issuer,
            "sub": f"user:{self._user_uuid(user)}",
            "iat": now,
            "exp": now + int(ttl_s),
            "tenantId": self.tenant_id,
            "icAgentId": str(agent_id),
            "icBUId": self._bus_no,
            "icClusterId": "SIM1",
            "teamId": str(self._team_id),
            "jti": self._secret()[:24],
            **extra,
        }
        header = _b64url(json.dumps({"alg": "none", "typ": "JWT"}).encode())
        return f"{header}.{_b64url(json.dumps(claims).encode())}.{self._secret()}"

    def _user_uuid(self, user: str) -> str:
        return str(uuid.uuid5(uuid.NAMESPACE_URL, f"cxone-sim:{user}"))

    def agent_id_for(self, user: str) -> int:
        """The agent id of a username, assigned on first sight."""
        agent = self._agents.get(user)
        if agent is None:
            agent = self._agents[user] = self._next_agent
            self._next_agent += 1
        return agent

    def issue(self, *, client_id: str, user: str, scope: str, ttl_s: float, refresh_uri: str) -> Token:
        """A new access + refresh token for ``user`` valid for ``ttl_s`` seconds."""
        now = self._clock.monotonic()
        agent_id = self.agent_id_for(user)
        token = Token(
            access_token=self._jwt(user, agent_id, ttl_s),
            refresh_token=self._secret(),
            client_id=client_id,
            user=user,
            agent_id=agent_id,
            scope=scope,
            issued_at=now,
            # the answer still says expires_in = ttl_s (and the JWT's exp): only we know it ends early
            expires_at=now + ttl_s - self._early_expiry,
            refresh_uri=refresh_uri,
            id_token=self._jwt(
                user,
                agent_id,
                ttl_s,
                aud=client_id[:200],
                name=user[:80],
                given_name=user[:40],
                family_name="",
            ),
        )
        self._by_access[token.access_token] = token
        self._by_refresh[token.refresh_token] = token
        return token

    def exchange(self, access_token: str, *, ttl_s: float) -> Token:
        """``/v1/token {"accessToken"}`` (cxone-auth.js ``getRegionalAccessTokenByToken``): a new token
        pair for the live token's user.

        Raises:
            GrantError: 400 ``invalid_grant`` for an unknown, expired or revoked access token.
        """
        status, old = self.check(access_token)
        if status is not TokenStatus.VALID or old is None:
            raise GrantError(400, "invalid_grant", "Invalid or expired access token")
        return self.issue(
            client_id=old.client_id, user=old.user, scope=old.scope, ttl_s=ttl_s, refresh_uri=old.refresh_uri
        )

    def refresh(self, refresh_token: str, *, ttl_s: float, client_id: str | None = None) -> Token:
        """Exchange a refresh token for a new token pair; the refresh token is single-use.

        ``client_id``, when given, must be the client the refresh token was issued to (RFC 6749
        section 6: the server ensures the refresh token was issued to the authenticated client).

        Raises:
            GrantError: 400 ``invalid_grant`` for an unknown, used, revoked or another client's
                refresh token.
        """
        old = self._by_refresh.get(refresh_token)
        if old is None or old.revoked or (client_id is not None and client_id != old.client_id):
            raise GrantError(400, "invalid_grant", "Invalid or expired refresh token")
        del self._by_refresh[refresh_token]
        return self.issue(
            client_id=old.client_id, user=old.user, scope=old.scope, ttl_s=ttl_s, refresh_uri=old.refresh_uri
        )

    def of_refresh(self, refresh_token: str) -> Token | None:
        """The token a live refresh token belongs to (its user names the share key of a refresh)."""
        return self._by_refresh.get(refresh_token)

    def check(self, access_token: str | None) -> tuple[TokenStatus, Token | None]:
        """Classify a presented bearer token (None when the header was absent or not Bearer)."""
        if not access_token:
            return TokenStatus.MISSING, None
        token = self._by_access.get(access_token)
        if token is None:
            return TokenStatus.UNKNOWN, None
        if token.revoked:
            return TokenStatus.REVOKED, token
        if self._clock.monotonic() >= token.expires_at:
            return TokenStatus.EXPIRED, token
        return TokenStatus.VALID, token

    def expire(self, access_token: str) -> bool:
        """Make one token expired now (its refresh token still works). False if unknown."""
        token = self._by_access.get(access_token)
        if token is None:
            return False
        token.expires_at = min(token.expires_at, self._clock.monotonic())
        return True

    def revoke(self, access_token: str) -> bool:
        """Revoke one token and its refresh token. False if unknown."""
        token = self._by_access.get(access_token)
        if token is None:
            return False
        token.revoked = True
        self._by_refresh.pop(token.refresh_token, None)
        return True

    def live(self) -> list[Token]:
        """Tokens neither revoked nor expired, oldest first."""
        now = self._clock.monotonic()
        return [t for t in self._by_access.values() if not t.revoked and t.expires_at > now]

    def expire_all(self) -> int:
        """Expire every live token; returns how many."""
        count = 0
        for token in self._by_access.values():
            if not token.revoked and token.expires_at > self._clock.monotonic():
                self.expire(token.access_token)
                count += 1
        return count

    def revoke_all(self) -> int:
        """Revoke every token not yet revoked (expired ones too, killing their refresh); returns how many."""
        count = 0
        for token in list(self._by_access.values()):
            if not token.revoked:
                self.revoke(token.access_token)
                count += 1
        return count

    def counts(self) -> dict[str, int]:
        """Numbers only (never the tokens): issued, revoked, live."""
        now = self._clock.monotonic()
        live = sum(1 for t in self._by_access.values() if not t.revoked and t.expires_at > now)
        revoked = sum(1 for t in self._by_access.values() if t.revoked)
        return {"issued": len(self._by_access), "revoked": revoked, "live": live}


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()
