"""Events of attribute updates (seed edge case 2), published on the bus like every other. Pure.

* ``RATE_LIMIT_BACKPRESSURE``: a tenant's queue filled: submissions are refused ("try later")
  until it drains to its resume mark. Once per episode.
* ``RATE_LIMIT_BACKPRESSURE_RELEASED``: the queue drained to the resume mark; ``refused`` says
  how many submissions the episode turned away (each was told so: none was dropped silently).
* ``ATTRIBUTE_MISMATCH``: verification found what it could not repair; the keys, the mismatch
  ids for ``ctl resolve``, and the values only of keys not marked sensitive.
* ``ATTRIBUTE_MISMATCH_RESOLVED``: someone resolved one (re-send, or accept the server's value).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from supervisor.events import Event

__all__ = [
    "AttributeMismatch",
    "AttributeMismatchResolved",
    "RateLimitBackpressure",
    "RateLimitBackpressureReleased",
]


@dataclass(frozen=True, slots=True)
class RateLimitBackpressure(Event):
    name: ClassVar[str] = "RATE_LIMIT_BACKPRESSURE"
    tenant: str
    depth: int
    limit: int
    resume_at: int
    retry_after_s: float
    timestamp: str

    def fields(self) -> dict[str, Any]:
        return {
            "timestamp": self.timestamp,
            "tenant": self.tenant,
            "queueDepth": self.depth,
            "limit": self.limit,
            "resumeAt": self.resume_at,
            "retryAfterSeconds": self.retry_after_s,
        }


@dataclass(frozen=True, slots=True)
class RateLimitBackpressureReleased(Event):
    name: ClassVar[str] = "RATE_LIMIT_BACKPRESSURE_RELEASED"
    tenant: str
    depth: int
    refused: int
    timestamp: str

    def fields(self) -> dict[str, Any]:
        return {
            "timestamp": self.timestamp,
            "tenant": self.tenant,
            "queueDepth": self.depth,
            "refused": self.refused,
        }


@dataclass(frozen=True, slots=True)
class AttributeMismatch(Event):
    name: ClassVar[str] = "ATTRIBUTE_MISMATCH"
    session_id: str | None
    conversation_id: str
    keys: tuple[str, ...]
    mismatch_ids: tuple[int, ...]
    # why, per key: "newer-value", "still-wrong", "failed: CODE"
    reasons: Mapping[str, str]
    timestamp: str
    # {key: {"expected", "server"}} for keys NOT marked sensitive only
    values: Mapping[str, Mapping[str, str | None]] = field(default_factory=dict)

    def fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "timestamp": self.timestamp,
            "keys": list(self.keys),
            "mismatchIds": list(self.mismatch_ids),
            "reasons": dict(self.reasons),
        }
        if self.values:
            out["values"] = {k: dict(v) for k, v in self.values.items()}
        return out


@dataclass(frozen=True, slots=True)
class AttributeMismatchResolved(Event):
    name: ClassVar[str] = "ATTRIBUTE_MISMATCH_RESOLVED"
    mismatch_id: int
    session_id: str | None
    conversation_id: str
    key: str
    resolution: str
    timestamp: str

    def fields(self) -> dict[str, Any]:
        return {
            "timestamp": self.timestamp,
            "mismatchId": self.mismatch_id,
            "key": self.key,
            "resolution": self.resolution,
        }
