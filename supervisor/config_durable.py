"""The ``[store]`` and ``[attributes]`` tables of the configuration (docs/configuration.md).

Kept beside :mod:`supervisor.config`, which includes them in :class:`~supervisor.config.Config`:

```toml
[store]
path = "/var/lib/session-supervisor/store.sqlite3"   # default: $STATE_DIRECTORY/store.sqlite3
synchronous = "full"                                 # "full" (survives power loss) or "normal"

[attributes]
queueDepth = 50          # seed edge case 2: a request queue with a maximum depth of 50
verifyAfter = 3.0        # seed edge case 2: poll the conversation after a 3-second delay
sensitive = ["ssn"]      # keys whose values never appear in events, logs or answers
```
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

__all__ = ["AttributesConfig", "StoreConfig"]

_Key = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]


class StoreConfig(msgspec.Struct, frozen=True, rename="camel", forbid_unknown_fields=True):
    """Where the durable store lives. Unset ``path``: ``$STATE_DIRECTORY/store.sqlite3`` (systemd's
    ``StateDirectory=``); with neither, the daemon keeps nothing across restarts and refuses
    attribute updates (it cannot acknowledge what it cannot persist)."""

    path: Annotated[str, msgspec.Meta(min_length=1, max_length=4096)] | None = None
    # "full": the WAL is synced at every commit (an acknowledged update survives power loss);
    # "normal": it survives kill -9 but not an OS crash (SQLite "PRAGMA synchronous"; docs/store.md)
    synchronous: Literal["full", "normal"] = "full"


class AttributesConfig(msgspec.Struct, frozen=True, rename="camel", forbid_unknown_fields=True):
    queue_depth: Annotated[int, msgspec.Meta(ge=1, le=100_000)] = 50
    verify_after: Annotated[float, msgspec.Meta(ge=0.0, le=3600.0)] = 3.0
    sensitive: list[_Key] = msgspec.field(default_factory=list)
    # intake resumes once the queue drained to this depth; unset: half of queueDepth
    resume_at: Annotated[int, msgspec.Meta(ge=0, le=100_000)] | None = None
    # re-sends after a verified mismatch (only when the server still holds the value from before our write)
    repair_budget: Annotated[int, msgspec.Meta(ge=0, le=100)] = 2

    def __post_init__(self) -> None:
        if self.resume_at is not None and self.resume_at >= self.queue_depth:
            raise ValueError("resumeAt must be below queueDepth")
