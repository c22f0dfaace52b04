"""Which shard a session belongs to: the unit a process owns, loads, runs and lets go of.

``shard = blake2b(session id) mod 256``: the session id's UTF-8 bytes hashed with BLAKE2b (RFC 7693)
with an 8-byte digest and no key, the digest read as an unsigned **big-endian** integer, reduced
modulo :data:`SHARDS` (docs/store.md, "Shards"). Every fleet member computes the same shard for the
same id, in any language: ``hashlib.blake2b(id.encode(), digest_size=8)`` here, libsodium's
``crypto_generichash(out, 8, ...)`` elsewhere. A fixed digest size matters: BLAKE2b's output
depends on it (the size is a parameter of the hash, not a truncation).

Pure: no I/O (the store's migration, its writes and the runtime's leases all call it).
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection
from typing import Final

__all__ = ["ALL_SHARDS", "DIGEST_SIZE", "SHARDS", "every_shard", "shard_of", "shard_or_none"]

#: how many shards there are; a shard is a number in ``range(SHARDS)``
SHARDS: Final = 256
#: BLAKE2b's digest size, in bytes, the shard is computed from
DIGEST_SIZE: Final = 8
#: every shard (what one process alone owns: SoloLeases)
ALL_SHARDS: Final = frozenset(range(SHARDS))


def shard_of(session_id: str) -> int:
    """The shard of ``session_id`` (module docstring)."""
    digest = hashlib.blake2b(session_id.encode("utf-8"), digest_size=DIGEST_SIZE).digest()
    return int.from_bytes(digest, "big") % SHARDS


def shard_or_none(key: str | None) -> int | None:
    """:func:`shard_of`, None for None (SQLite's function over a column that may be NULL)."""
    return None if key is None else shard_of(key)


def every_shard(shards: Collection[int]) -> bool:
    """``shards`` names every shard (a read needs no filter)."""
    return len(shards) >= SHARDS and set(shards) >= ALL_SHARDS
