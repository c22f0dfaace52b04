"""Pure token bookkeeping of the CXone fake: issue, refresh, check, expire, revoke.

Tokens are opaque random strings from the simulator's seeded RNG; lifetimes use the
injected clock's ``monotonic()``. Nothing here logs or returns a token except to the
caller that asked for it (issue 4: secrets and tokens never in logs or stats).
"""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass

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


class TokenStore:
    """Every token a simulator issued. Agent ids are stable per username."""

    def __init__(self, clock: Clock, rng: random.Random, *, first_agent_id: int = 100001) -> None:
        self._clock = clock
        self._rng = rng
        self._by_access: dict[str, Token] = {}
        self._by_refresh: dict[str, Token] = {}
        self._agents: dict[str, int] = {}
        self._next_agent = first_agent_id

    def _secret(self) -> str:
        return f"{self._rng.getrandbits(192):048x}"

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
        token = Token(
            access_token=self._secret(),
            refresh_token=self._secret(),
            client_id=client_id,
            user=user,
            agent_id=self.agent_id_for(user),
            scope=scope,
            issued_at=now,
            expires_at=now + ttl_s,
            refresh_uri=refresh_uri,
        )
        self._by_access[token.access_token] = token
        self._by_refresh[token.refresh_token] = token
        return token

    def refresh(self, refresh_token: str, *, ttl_s: float) -> Token:
        """Exchange a refresh token for a new token pair; the refresh token is single-use.

        Raises:
            GrantError: 400 ``invalid_grant`` for an unknown, used or revoked refresh token.
        """
        old = self._by_refresh.pop(refresh_token, None)
        if old is None or old.revoked:
            raise GrantError(400, "invalid_grant", "Invalid or expired refresh token")
        return self.issue(
            client_id=old.client_id, user=old.user, scope=old.scope, ttl_s=ttl_s, refresh_uri=old.refresh_uri
        )

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
