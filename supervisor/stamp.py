"""The member-and-epoch stamp a daemon adds to its requests when a test asks for it (never by default).

With ``[daemon] stampMember = "m1"`` every HTTP request and every WebSocket upgrade the daemon sends
carries :data:`STAMP_HEADER` ``member=m1; epoch=<n>``, ``n`` the store's epoch (bumped at every open:
docs/store.md). The simulators record it in their activity log (docs/simulators.md, "Activity log"),
which is how a test of several daemons tells which one sent what, and under which epoch. Unset (the
default), nothing is added: a real platform never sees it.

The header is ours: no platform defines it. It is an ``X-`` extension field, which servers and
intermediaries pass along or ignore (RFC 9110 §5.1: a recipient ignores a field it does not
recognise); its value is plain ASCII (a member name of letters, digits, ``.``, ``_``, ``-``).
"""

from __future__ import annotations

import re
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

    def headers(self) -> dict[str, str]:
        """The header to add to a request or a WebSocket upgrade now: none when not configured."""
        if self.member is None:
            return {}
        return {STAMP_HEADER: format_stamp(self.member, self.epoch)}
