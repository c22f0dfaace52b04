"""The member-and-epoch stamp a daemon adds to its requests when a test asks for it (never by default).

With ``[daemon] stampMember = "m1"`` every HTTP request and every WebSocket upgrade the daemon sends
carries :data:`STAMP_HEADER` ``member=m1; epoch=<n>``, ``n`` the store's epoch (bumped at every open:
docs/store.md) on one host; on a fleet member, a session's requests carry its shard's lease epoch. The simulators record it in their activity log (docs/simulators.md, "Activity log"),
which is how a test of several daemons tells which one sent what, and under which epoch. Unset (the
default), nothing is added: a real platform never sees it.

The header is ours: no platform defines it. It is an ``X-`` extension field, which servers and
intermediaries pass along or ignore (RFC 9110 §5.1: a recipient ignores a field it does not
recognise); its value is plain ASCII (a member name of letters, digits, ``.``, ``_``, ``-``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

__all__ = ["MEMBER_PATTERN", "NO_STAMP", "STAMP_HEADER", "Stamp", "Stamper", "format_stamp", "parse_stamp"]

STAMP_HEADER: Final = "X-Session-Supervisor-Stamp"
#: what a member name may be (the configuration checks it): an HTTP token, short
MEMBER_PATTERN: Final = r"^[A-Za-z0-9._-]{1,64}$"
_MEMBER = re.compile(MEMBER_PATTERN)
_MAX_VALUE = 200


@dataclass(frozen=True, slots=True)
class Stamp:
    """A member name and an epoch (None when absent or malformed)."""

    member: str | None = None
    epoch: int | None = None


NO_STAMP: Final = Stamp()


def format_stamp(member: str, epoch: int) -> str:
    """The header's value: ``member=m1; epoch=7``."""
    return f"member={member}; epoch={epoch:d}"


def parse_stamp(value: str | None) -> Stamp:
    """``member=m1; epoch=7`` -> ``Stamp("m1", 7)``; what does not parse is None (never an error)."""
    if not value or len(value) > _MAX_VALUE:
        return NO_STAMP
    fields: dict[str, str] = {}
    for part in value.split(";"):
        name, sep, val = part.strip().partition("=")
        if sep:
            fields[name.strip().lower()] = val.strip()
    member = fields.get("member", "")
    epoch = fields.get("epoch", "")
    return Stamp(
        member if _MEMBER.match(member) else None,
        int(epoch) if epoch.isascii() and epoch.isdigit() and len(epoch) <= 18 else None,
    )


class Stamper:
    """This daemon's stamp: the configured member (None: never stamp) and the epoch, known once the
    store is open (0 until then, and without a store)."""

    def __init__(self, member: str | None) -> None:
        self.member = member
        self.epoch = 0
        #: a fleet member's: the epoch of the lease it holds on a shard now (None: not held). Under
        #: fleet leases a session's requests carry its shard's lease epoch, not the store's per-open
        #: epoch, so "epochs never decrease per session and shard" is about the owner epochs
        self.shard_epoch: Callable[[int], int | None] | None = None

    def headers(self, shard: int | None = None) -> dict[str, str]:
        """The header to add to a request or a WebSocket upgrade now: none when not configured.
        ``shard``: the shard the request is for (its lease's epoch when a fleet member holds it)."""
        if self.member is None:
            return {}
        epoch = self.epoch
        if shard is not None and self.shard_epoch is not None:
            held = self.shard_epoch(shard)
            if held is not None:
                epoch = held
        return {STAMP_HEADER: format_stamp(self.member, epoch)}

    def for_shard(self, shard: int) -> Callable[[], dict[str, str]]:
        """:meth:`headers` for the requests of one shard's sessions."""
        return functools.partial(self.headers, shard)
