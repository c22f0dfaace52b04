"""Attribute updates as data: settings, validation, refusals, redaction. Pure: no I/O.

An update sets one or more participant attributes of one session's conversation (Genesys
``PATCH /api/v2/conversations/{cid}/participants/{pid}/attributes``, docs/platforms.md, "Genesys Cloud Platform REST"; string
keys and values). Keys listed in ``[attributes] sensitive`` are sent, stored until verified and
compared by hash, but their values never appear in an event, a log line, a mismatch listing or a
control answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from supervisor.errors import ApiError
from supervisor.vocabulary import ApiFault

__all__ = [
    "MAX_KEYS",
    "MAX_KEY_CHARS",
    "MAX_VALUE_CHARS",
    "Backpressured",
    "Refused",
    "Settings",
    "SubmitAnswer",
    "check_attributes",
    "shown",
]

MAX_KEYS: Final = 50
MAX_KEY_CHARS: Final = 200
MAX_VALUE_CHARS: Final = 4096
#: what a sensitive value is shown as, everywhere
REDACTED: Final = "<sensitive>"


@dataclass(frozen=True, slots=True)
class Settings:
    """``[attributes]`` (docs/configuration.md), plus the limits the sender keeps."""

    # seed edge case 2: "a request queue with a maximum depth of 50"
    queue_depth: int = 50
    # seed edge case 2: "polling the conversation endpoint after a 3-second delay"
    verify_after_s: float = 3.0
    sensitive: frozenset[str] = frozenset()
    # intake resumes once the queue has drained to this many writes (None: half the depth)
    resume_mark: int | None = None
    # re-sends after a verified mismatch (the server still holds the value from before our write)
    repair_budget: int = 2
    # sends of one write before it is flagged (throttled sends included; each waits Retry-After)
    max_sends: int = 8
    # writes of one conversation carried by one request
    batch_limit: int = 50
    # conversations worked on at once per daemon
    concurrency: int = 4
    # wait after a failed send or read that named no Retry-After
    failure_backoff_s: float = 2.0

    @property
    def resume_at(self) -> int:
        mark = self.queue_depth // 2 if self.resume_mark is None else self.resume_mark
        return max(0, min(mark, self.queue_depth - 1))


class Refused(ApiError):
    """A submission refused for good (not "try later"): the control socket's fault, its ``problem``
    and parameters (``sessionId``, ``mismatchId``, ...)."""

    fault: ApiFault  # raised by the domain: always one of the enum's (a client's may be None)

    def __init__(self, fault: ApiFault, problem: str, **parameters: object) -> None:
        self.problem = problem
        super().__init__(fault, {**parameters, "problem": problem})


class Backpressured(ApiError):
    """The tenant's queue is full: try again in ``retry_after_s`` (seed edge case 2: never dropped silently)."""

    def __init__(self, tenant: str, depth: int, limit: int, retry_after_s: float) -> None:
        self.tenant = tenant
        self.depth = depth
        self.limit = limit
        self.retry_after_s = retry_after_s
        problem = f"the {tenant} queue is full ({depth} of {limit} writes waiting); try again in {retry_after_s:g} s"
        super().__init__(
            ApiFault.BACKPRESSURE,
            {
                "tenant": tenant,
                "queueDepth": depth,
                "limit": limit,
                "retryAfterSeconds": retry_after_s,
                "problem": problem,
            },
        )


@dataclass(frozen=True, slots=True)
class SubmitAnswer:
    """What an acknowledged submission answers: it is durably in the outbox."""

    update_id: str
    # None: an update by conversation id, with no supervised session
    session_id: str | None
    conversation_id: str
    coalesced: tuple[str, ...]
    queue_depth: int

    def as_wire(self) -> dict[str, object]:
        return {
            "accepted": True,
            "updateId": self.update_id,
            "sessionId": self.session_id,
            "conversationId": self.conversation_id,
            "coalesced": bool(self.coalesced),
            "coalescedKeys": list(self.coalesced),
            "queueDepth": self.queue_depth,
        }


def subject(session_id: str | None, conversation_id: str) -> str:
    """What an update's events and REST calls are correlated by: its session's id, or, for an update
    by conversation id with no supervised session, ``conversation:<id>`` (the events' ``sessionId``;
    it names no session, so a subscriber following a session never sees it, and the answers, rows
    and listed mismatches say ``sessionId`` null)."""
    return session_id if session_id is not None else f"conversation:{conversation_id}"


def check_attributes(attributes: object) -> dict[str, str]:
    """The attributes of a submission, validated; raises ValueError naming what is wrong."""
    if not isinstance(attributes, Mapping) or not attributes:
        raise ValueError("attributes: expected an object of one or more KEY: VALUE strings")
    if len(attributes) > MAX_KEYS:
        raise ValueError(f"attributes: at most {MAX_KEYS} keys per update, got {len(attributes)}")
    out: dict[str, str] = {}
    for key, value in attributes.items():
        if not isinstance(key, str) or not 0 < len(key) <= MAX_KEY_CHARS or not key.isprintable():
            raise ValueError(f"attributes: a key must be 1 to {MAX_KEY_CHARS} printable characters")
        if not isinstance(value, str) or len(value) > MAX_VALUE_CHARS or "\0" in value:
            raise ValueError(
                f"attributes.{key}: the value must be a string of at most {MAX_VALUE_CHARS} characters"
            )
        out[key] = value
    return out


def shown(key: str, value: str | None, sensitive: frozenset[str]) -> str | None:
    """``value`` as it may be shown: redacted for a sensitive key (never its value, never its hash)."""
    if value is None:
        return None
    return REDACTED if key in sensitive else value
