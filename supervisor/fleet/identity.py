"""A fleet member's identity and what it must share with the others: the digest of its configuration.

**The member id** (``[fleet] member``) defaults to the kernel's boot id, ``/``, and 8 hex digits of
the SHA-256 of the configuration file's absolute path: three daemons on one machine (three
configurations) are three members, and a daemon restarted on the same boot with the same file is the
same member (it takes back at once the shards still leased in its name, rather than waiting for them
to expire). A reboot draws a new boot id: a new member.

**The digest** is the SHA-256 of the canonical JSON of the parsed ``[[sessions]]`` and ``[tenants]``
(keys sorted, no whitespace: msgspec's encoder with ``order="sorted"``): members that run each other's
sessions must agree on what the sessions are and whose credentials they use. Credential files are
named in the configuration, never read into it, so no secret enters the digest.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Final

import msgspec

from supervisor.config import Config
from supervisor.runtime.leases import fleet_identity

__all__ = ["DIGEST_SHOWN", "config_digest", "default_member"]

#: how many hex digits of a digest a status line or an event shows
DIGEST_SHOWN: Final = 12


def default_member(config_path: Path | None, boot_id: str | None = None) -> str:
    """``<boot id>/<8 hex of sha256(absolute path of the configuration)>`` (module docstring)."""
    boot = boot_id if boot_id is not None else fleet_identity()
    where = str(config_path.absolute()) if config_path is not None else ""
    return f"{boot}/{hashlib.sha256(where.encode('utf-8')).hexdigest()[:8]}"


def config_digest(config: Config) -> str:
    """sha256 (hex) of the canonical JSON of ``[[sessions]]`` and ``[tenants]`` (module docstring)."""
    canonical = msgspec.json.encode({"sessions": config.sessions, "tenants": config.tenants}, order="sorted")
    return hashlib.sha256(canonical).hexdigest()
