"""``NotOwner {sessionId, shard, owner, host, epoch}``: the refusal of a verb on a session another process runs.

One place makes it (docs/socket-api.md, "NotOwner"), for the owner lookup before a verb
(supervisor/api/control.py) and for an ``AddSession`` entry whose shard is not owned here on a daemon
that cannot record it for its owner (supervisor/api/control_sessions.py).
"""

from __future__ import annotations

from supervisor.errors import ApiError
from supervisor.runtime.sessions import Owner
from supervisor.vocabulary.faults import ApiFault

__all__ = ["not_owner"]


def not_owner(session_id: str, owner: Owner) -> ApiError:
    """``NotOwner {sessionId, shard, owner, host, epoch}`` (docs/socket-api.md, "NotOwner")."""
    held = f"owned by {owner.identity}" if owner.identity else "not owned by this process"
    if owner.identity and owner.host:
        held += f" on {owner.host}"
    return ApiError(
        ApiFault.NOT_OWNER,
        {
            "sessionId": session_id,
            "shard": owner.shard,
            "owner": owner.identity,
            "host": owner.host,
            "epoch": owner.epoch,
            "problem": f"session '{session_id}' is in shard {owner.shard}, {held}: ask its owner",
        },
    )
