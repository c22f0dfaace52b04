"""Bearer tokens for the library: cached, refreshed early and single-flight (seed edge case 3).

``fetch`` is the caller's: it returns ``(token, expires_at)``, ``expires_at`` in epoch seconds (what
an OAuth answer's ``expires_in`` added to the time it came gives), synchronously or as an awaitable.
The async path is the daemon's own :class:`supervisor.rest.tokens.TokenCache` (one fetch however
many wait, 5 minutes early, halved for a token shorter than twice that); the sync path is its twin
under a thread lock, with the same window (``supervisor.rest.tokens``). Each says how near its end a
token is (:class:`supervisor.boundary.TokenAge`), what the taxonomy's 401 rule reads.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from supervisor.boundary import TokenAge
from supervisor.clock import Clock, SystemClock
from supervisor.credentials import Secret
from supervisor.rest.tokens import Token, TokenCache, _window

__all__ = ["TokenFetch", "Tokens"]

#: the caller's token fetch: ``(token, expires_at epoch seconds)``, or an awaitable of it
TokenFetch = Callable[[], tuple[str, float] | Awaitable[tuple[str, float]]]
#: seed edge case 3: "if expiration occurs within 60 seconds, trigger a silent refresh" before a retry
REFRESH_BEFORE_RETRY_S = 60.0


def _checked(answer: object) -> tuple[str, float]:
    if (
        not isinstance(answer, tuple)
        or len(answer) != 2
        or not isinstance(answer[0], str)
        or not isinstance(answer[1], int | float)
        or isinstance(answer[1], bool)
    ):
        raise TypeError(f"a token fetch returns (token: str, expires_at: float), got {type(answer).__name__}")
    return answer[0], float(answer[1])


class _AsyncSource:
    """The caller's fetch as a :class:`~supervisor.rest.tokens.TokenSource`."""

    def __init__(self, fetch: TokenFetch, clock: Clock) -> None:
        self._fetch = fetch
        self._clock = clock

    async def fetch(self, refresh: Secret | None) -> tuple[Secret, float, Secret | None, dict[str, Any]]:
        answer = self._fetch()
        if inspect.isawaitable(answer):
            answer = await answer
        token, expires_at = _checked(answer)
        return Secret(token), max(expires_at - self._clock.time(), 0.0), None, {}


class Tokens:
    """One credential's bearer token, for the sync and the async shells alike."""

    def __init__(
        self, fetch: TokenFetch, *, clock: Clock | None = None, early_refresh_s: float = 300.0
    ) -> None:
        self._fetch = fetch
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._early = early_refresh_s
        self._lock = threading.Lock()
        self._token: Token | None = None
        self._async = TokenCache(
            _AsyncSource(fetch, self._clock), self._clock, early_refresh_s=early_refresh_s
        )
        #: tokens fetched (both paths)
        self.fetches = 0

    # -- the sync path -----------------------------------------------------------------------

    def get(self, min_validity_s: float | None = None) -> Token:
        """A token valid for longer than ``min_validity_s`` (default: the early-refresh window)."""
        token = self._cached(self._token, min_validity_s)
        return token if token is not None else self.refresh(self._token, min_validity_s)

    def refresh(self, stale: Token | None, min_validity_s: float | None = None) -> Token:
        """A new token unless another thread already replaced ``stale`` (one fetch for all)."""
        with self._lock:
            current = self._token
            if current is not None and current is not stale and self._cached(current, min_validity_s):
                return current
            answer = self._fetch()
            if inspect.isawaitable(answer):
                close = getattr(answer, "close", None)
                if close is not None:
                    close()
                raise TypeError("a sync client's token fetch must not be a coroutine function")
            value, expires_at = _checked(answer)
            lifetime = max(expires_at - self._clock.time(), 0.0)
            token = Token(Secret(value), self._clock.monotonic() + lifetime, lifetime=lifetime or 1.0)
            self._token = token
            self.fetches += 1
            return token

    def age(self, token: Token) -> TokenAge:
        remaining = token.remaining(self._clock.monotonic())
        return TokenAge(
            expired=remaining <= 0.0, within_refresh_window=remaining <= _window(self._early, token)
        )

    def _cached(self, token: Token | None, min_validity_s: float | None) -> Token | None:
        if token is None:
            return None
        window = _window(self._early if min_validity_s is None else min_validity_s, token)
        return token if token.remaining(self._clock.monotonic()) > window else None

    # -- the async path (the daemon's TokenCache) ------------------------------------------------

    async def aget(self, min_validity_s: float | None = None) -> Token:
        cache = self._async
        before = cache.fetches
        token = await (cache.get() if min_validity_s is None else cache.ensure(min_validity_s))
        self.fetches += cache.fetches - before
        return token

    async def arefresh(self, stale: Token | None) -> Token:
        cache = self._async
        before = cache.fetches
        token = await cache.refresh(stale)
        self.fetches += cache.fetches - before
        return token

    def aage(self, token: Token) -> TokenAge:
        return self._async.age(token)
