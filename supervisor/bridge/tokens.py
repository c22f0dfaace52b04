"""The bridge's tokens file: who may read which sessions. Pure: text in, a :class:`TokenSet` out.

One JSON object per line (blank lines and lines starting with ``#`` are skipped)::

    {"sha256": "<hex SHA-256 digest of the token>", "agents": ["a-1"], "sessions": ["wm-9"], "platform": false}

Only digests are stored, so the file leaks no token. A presented token is hashed with SHA-256 and its
digest compared with every entry's by :func:`hmac.compare_digest` (constant time in the digest's
content; every entry is compared, so the time says nothing of which one matched). A bad line is refused
with its line number and what was wrong, never with its content (someone may have pasted a token there).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from dataclasses import dataclass

from supervisor.errors import ConfigError

__all__ = ["Scope", "TokenSet", "digest_of", "parse_tokens"]

_HEX64 = re.compile(r"[0-9a-f]{64}")
_KEYS = frozenset({"sha256", "agents", "sessions", "platform"})
#: a line longer than this is refused (a scope of thousands of ids belongs in several tokens)
MAX_LINE_CHARS = 1 << 20


@dataclass(frozen=True, slots=True)
class Scope:
    """What one token may read: the sessions of ``agents``, and the sessions named in ``sessions``."""

    agents: frozenset[str]
    sessions: frozenset[str]
    # the ``platform`` stream (customer data: message bodies, contacts) for those sessions
    platform: bool = False

    def allows(self, session_id: str, agent_id: str | None) -> bool:
        """A session is visible when its agent is one of ours or its id is named; a session with no
        known agent only by its id."""
        return session_id in self.sessions or (agent_id is not None and agent_id in self.agents)


@dataclass(frozen=True, slots=True)
class _Entry:
    digest: bytes
    scope: Scope


def digest_of(token: str) -> bytes:
    """The SHA-256 digest of a presented token (its UTF-8 bytes)."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


class TokenSet:
    """The entries of one tokens file."""

    def __init__(self, entries: tuple[_Entry, ...]) -> None:
        self._entries = entries

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def any_platform(self) -> bool:
        """Whether some token may have the ``platform`` stream (the bridge then subscribes to it)."""
        return any(entry.scope.platform for entry in self._entries)

    def scope_of(self, token: str) -> Scope | None:
        """The scope of ``token``, or None. Every entry is compared (no early exit)."""
        return self.scope_of_digest(digest_of(token))

    def scope_of_digest(self, presented: bytes) -> Scope | None:
        """The scope of the token whose digest is ``presented`` (a client's, again after a reload)."""
        found: Scope | None = None
        for entry in self._entries:
            if hmac.compare_digest(presented, entry.digest) and found is None:
                found = entry.scope
        return found


def _ids(value: object, where: str, key: str) -> frozenset[str]:
    if value is None:
        return frozenset()
    if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        raise ConfigError(f"{where}: {key!r} must be a list of non-empty strings")
    return frozenset(value)


def parse_tokens(text: str, source: str) -> TokenSet:
    """Every entry of a tokens file, or :class:`ConfigError` naming the first bad line."""
    entries: list[_Entry] = []
    seen: set[bytes] = set()
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        where = f"{source} line {number}"
        if len(line) > MAX_LINE_CHARS:
            raise ConfigError(f"{where}: longer than {MAX_LINE_CHARS} characters")
        try:
            item = json.loads(line)
        except ValueError:
            raise ConfigError(f"{where}: not a JSON object") from None
        if not isinstance(item, dict):
            raise ConfigError(f"{where}: not a JSON object")
        unknown = sorted(set(item) - _KEYS)
        if unknown:
            raise ConfigError(
                f"{where}: unknown key {unknown[0]!r} (known: agents, platform, sessions, sha256)"
            )
        digest = item.get("sha256")
        if not isinstance(digest, str) or not _HEX64.fullmatch(digest):
            # never echo the value: a token pasted here by mistake would land in a log
            raise ConfigError(f"{where}: 'sha256' must be the 64 lowercase hex digits of the token's SHA-256")
        agents = _ids(item.get("agents"), where, "agents")
        sessions = _ids(item.get("sessions"), where, "sessions")
        if not agents and not sessions:
            raise ConfigError(f"{where}: names no agent and no session: the token would see nothing")
        platform = item.get("platform", False)
        if not isinstance(platform, bool):
            raise ConfigError(f"{where}: 'platform' must be true or false")
        raw_digest = bytes.fromhex(digest)
        if raw_digest in seen:
            raise ConfigError(f"{where}: the same sha256 as an earlier line")
        seen.add(raw_digest)
        entries.append(_Entry(raw_digest, Scope(agents, sessions, platform)))
    return TokenSet(tuple(entries))
