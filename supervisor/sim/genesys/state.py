"""In-memory state of the Genesys simulator: tokens, channels, guest sessions (conversations: conversations.py).

Pure data plus small decisions (token validity, rate windows, channel eviction); no I/O.
Times are the injected clock's ``monotonic()``; ids come from the seeded RNG, so a run
with the same seed and the same requests produces the same ids.
"""

from __future__ import annotations

import enum
import random
import uuid
from dataclasses import dataclass, field

from supervisor.clock import Clock
from supervisor.sim.genesys.config import GenesysSimConfig
from supervisor.sim.genesys.conversations import Conversation, ConversationStore, Participant
from supervisor.sim.genesys.wire import iso_utc

__all__ = ["Channel", "Conversation", "GenesysState", "GuestSession", "Participant", "Token", "TokenStatus"]


class TokenStatus(enum.Enum):
    """What a bearer token is worth right now (§3, §4)."""

    VALID = "valid"
    UNKNOWN = "unknown"
    EXPIRED = "expired"
    REVOKED = "revoked"


@dataclass(slots=True)
class Token:
    """One access token (never logged; ``id`` is its printable stand-in)."""

    id: str
    client_id: str
    issued_at: float
    expires_at: float
    refresh: str | None
    expired: bool = False  # forced by TOKEN_EXPIRE
    revoked: bool = False  # TOKEN_REVOKE
    window_start: float = 0.0
    window_count: int = 0


@dataclass(slots=True)
class Channel:
    """A notifications channel (§2)."""

    id: str
    owner: str  # client id: the 20-channel limit is per user/app combination
    created_at: float
    last_used: float
    expires_at: float
    topics: list[str] = field(default_factory=list)
    connected: bool = False
    token: Token | None = None  # the channel closes when its creator's token expires (§2)


@dataclass(slots=True)
class GuestSession:
    """A Web Messaging guest session keyed by the guest's token (§1)."""

    token: str
    deployment_id: str
    conversation_id: str
    created_at: float
    expires_at: float
    read_only: bool = False
    expired: bool = False
    window_start: float = 0.0
    window_count: int = 0


class GenesysState:
    """All simulator state, owned by the event loop."""

    def __init__(self, config: GenesysSimConfig, clock: Clock, rng: random.Random) -> None:
        self.config = config
        self.clock = clock
        self.rng = rng
        self.tokens: dict[str, Token] = {}
        self.refresh_tokens: dict[str, Token] = {}
        self.conversations = ConversationStore(self.uuid, lambda: iso_utc(self.clock.time()))
        self.channels: dict[str, Channel] = {}
        self.sessions: dict[str, GuestSession] = {}
        self.jwts: dict[str, tuple[str, float]] = {}  # guest JWT -> (session token, expiry)
        self._serial = 0

    # -- ids --------------------------------------------------------------------------------------

    def uuid(self) -> str:
        """A UUID4 from the seeded RNG."""
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def secret(self) -> str:
        """An opaque token string from the seeded RNG (simulator tokens are not secure)."""
        return f"{self.rng.getrandbits(192):048x}"

    # -- tokens (§3, §4) ----------------------------------------------------------------------------

    def issue_token(self, client_id: str, refresh: str | None = None) -> tuple[str, Token]:
        """A new access token for ``client_id``; reuses ``refresh`` on a refresh grant."""
        self._serial += 1
        now = self.clock.monotonic()
        if refresh is None and self.config.issue_refresh_tokens:
            refresh = self.secret()
        token = Token(
            id=f"tok-{self._serial}",
            client_id=client_id,
            issued_at=now,
            expires_at=now + self.config.token_ttl_s,
            refresh=refresh,
            window_start=now,
        )
        access = self.secret()
        self.tokens[access] = token
        if refresh is not None:
            self.refresh_tokens[refresh] = token
        return access, token

    def token_status(self, access: str) -> tuple[TokenStatus, Token | None]:
        """Whether ``access`` is valid, unknown, expired (by the clock or a fault) or revoked."""
        token = self.tokens.get(access)
        if token is None:
            return TokenStatus.UNKNOWN, None
        if token.revoked:
            return TokenStatus.REVOKED, token
        if token.expired or self.clock.monotonic() >= token.expires_at:
            return TokenStatus.EXPIRED, token
        return TokenStatus.VALID, token

    def rate_check(self, token: Token) -> tuple[bool, int, float]:
        """Count one request in the token's window: (allowed, count, seconds until reset) (§3)."""
        now = self.clock.monotonic()
        window = self.config.rate_window_s
        if now - token.window_start >= window:
            token.window_start, token.window_count = now, 0
        token.window_count += 1
        reset = max(0.0, token.window_start + window - now)
        return token.window_count <= self.config.rate_limit, token.window_count, reset

    # -- channels (§2) ------------------------------------------------------------------------------

    def create_channel(self, owner: str, token: Token | None = None) -> tuple[Channel, Channel | None]:
        """A new channel; returns it and the channel evicted to stay within ``max_channels``.

        Eviction (§2): channels without an active connection go first, then the oldest last-used.
        """
        now = self.clock.monotonic()
        evicted = None
        mine = [c for c in self.channels.values() if c.owner == owner]
        if len(mine) >= self.config.max_channels:
            evicted = min(mine, key=lambda c: (c.connected, c.last_used, c.created_at))
            del self.channels[evicted.id]
        self._serial += 1
        chan_id = f"streaming-{self._serial % 10}-{self.secret()[:26]}"
        chan = Channel(chan_id, owner, now, now, now + self.config.channel_ttl_s, token=token)
        self.channels[chan_id] = chan
        return chan, evicted

    def expired_channels(self) -> list[Channel]:
        """Channels past their lifetime or whose token expired (removed from the state) (§2)."""
        now = self.clock.monotonic()
        gone = [c for c in self.channels.values() if now >= c.expires_at or self._token_gone(c.token, now)]
        for chan in gone:
            del self.channels[chan.id]
        return gone

    @staticmethod
    def _token_gone(token: Token | None, now: float) -> bool:
        return token is not None and (token.revoked or token.expired or now >= token.expires_at)

    # -- guest sessions (§1) ------------------------------------------------------------------------

    def session_rate_check(self, session: GuestSession) -> bool:
        """Count one guest message in the session's window; False when over ``wm_rate_limit`` [I]."""
        now = self.clock.monotonic()
        if now - session.window_start >= self.config.wm_rate_window_s:
            session.window_start, session.window_count = now, 0
        session.window_count += 1
        return session.window_count <= self.config.wm_rate_limit

    def new_session(self, token: str, deployment_id: str) -> GuestSession:
        """A new guest session with a new conversation."""
        now = self.clock.monotonic()
        conv = self.conversations.create()
        sess = GuestSession(
            token, deployment_id, conv.id, now, now + self.config.wm_session_ttl_s, window_start=now
        )
        self.sessions[token] = sess
        return sess

    def issue_jwt(self, session_token: str, ttl_s: float = 3600.0) -> tuple[str, int]:
        """A guest JWT for the session (``getJwt``): the opaque value and its ``exp`` (epoch s)."""
        jwt = f"sim.{self.secret()}.jwt"
        self.jwts[jwt] = (session_token, self.clock.monotonic() + ttl_s)
        return jwt, int(self.clock.time() + ttl_s)

    def jwt_session(self, jwt: str) -> GuestSession | None:
        """The live session a guest JWT stands for, or None (unknown, expired, session gone)."""
        entry = self.jwts.get(jwt)
        if entry is None or self.clock.monotonic() >= entry[1]:
            return None
        return self.sessions.get(entry[0])

    def session_expired(self, sess: GuestSession) -> bool:
        """Whether the session ran past its lifetime or was expired by a fault."""
        return sess.expired or self.clock.monotonic() >= sess.expires_at
