"""A session's events: its transitions, the seed's retry telemetry (section 2), its termination
(section 3), the classified failure (section 1) and a connection replaced in place (a rollover).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, ClassVar

from supervisor.events.base import (
    REVOKE_AND_REAUTHENTICATE,
    Event,
    RetryKind,
    StampedEvent,
    TerminationReason,
)
from supervisor.taxonomy.model import SdkErrorEvent, Trigger
from supervisor.vocabulary.states import SessionState

__all__ = [
    "ConnectionRolledOver",
    "ErrorClassified",
    "ReconnectionThrottled",
    "RetryAttempt",
    "RetryExhausted",
    "RetrySuccess",
    "RolloverReason",
    "SessionHandedOver",
    "SessionTerminated",
    "SessionTransition",
]


@dataclass(frozen=True, slots=True)
class SessionTransition(Event):
    """A session machine moved (connecting → active, active → reconnecting, ...)."""

    name: ClassVar[str] = "SESSION_TRANSITION"
    session_id: str
    source: SessionState
    target: SessionState
    # the machine event that moved it (e.g. "connection_lost")
    trigger: str
    # why, in the caller's words: a semantic code, a termination reason, "VALIDATED", ...
    reason: str
    timestamp: str

    def fields(self) -> dict[str, Any]:
        return {
            "machineId": self.session_id,
            "from": self.source.value,
            "to": self.target.value,
            "trigger": self.trigger,
            "reason": self.reason,
            "timestamp": self.timestamp,
        }


@dataclass(frozen=True, slots=True)
class RetryAttempt(Event):
    """A reconnection or an operation retry is scheduled ``delay_s`` from now."""

    name: ClassVar[str] = "RETRY_ATTEMPT"
    session_id: str
    kind: RetryKind
    # 1-based number of the retry (or reconnection) this schedules
    attempt: int
    delay_s: float
    code: str
    policy: str
    timestamp: str
    operation: str | None = None
    # the server's Retry-After set the delay (seed edge case 2: a minimum delay)
    from_retry_after: bool = False
    # a 401 on a token at the end of its life by our clock: replayed at once with a fresh token
    token_refreshed: bool = False
    # the retry scheduled before this one came due while the endpoint's retry budget was spent:
    # not sent, one of the policy's retries all the same (docs/runtime.md, "Admission"; supervisor/rest/backoff.py)
    budget_refused: bool = False

    def fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "timestamp": self.timestamp,
            "sessionId": self.session_id,
            "kind": self.kind.value,
            "attempt": self.attempt,
            "delayS": self.delay_s,
            "code": self.code,
            "policy": self.policy,
        }
        if self.kind is RetryKind.OPERATION:
            out["operation"] = self.operation
            out["fromRetryAfter"] = self.from_retry_after
            out["tokenRefreshed"] = self.token_refreshed
            out["budgetRefused"] = self.budget_refused
        return out


class RetrySuccess(StampedEvent, frozen=True):
    """A reconnection or a retried operation succeeded after ``attempts`` retries."""

    name: ClassVar[str] = "RETRY_SUCCESS"
    session_id: str
    kind: RetryKind
    attempts: int
    operation: str | None = None


class RetryExhausted(StampedEvent, frozen=True):
    """A budget ran out: ``give_up`` says which limit (the retry policy's GiveUpReason; null when none did)."""

    name: ClassVar[str] = "RETRY_EXHAUSTED"
    session_id: str
    kind: RetryKind
    attempts: int
    code: str
    policy: str
    give_up: str | None
    operation: str | None = None


class ReconnectionThrottled(StampedEvent, frozen=True):
    """Seed edge case 1: a due reconnection was deferred because its endpoint's circuit is open."""

    name: ClassVar[str] = "RECONNECTION_THROTTLED"
    session_id: str
    attempt: int
    retry_in_s: float
    delay_s: float


@dataclass(frozen=True, slots=True)
class SessionTerminated(Event):
    """End the session: revoke what we stored for it, tell subscribers, never reconnect.

    Both a machine effect (the runtime executes it) and an event; :meth:`as_json` is exactly
    the seed's SESSION_TERMINATED JSON (section 3).
    """

    name: ClassVar[str] = "SESSION_TERMINATED"
    session_id: str
    reason: TerminationReason
    trigger: Trigger | None
    raw_status: int | None
    raw_code: str | None
    timestamp: str
    # the semantic code of the failure that ended it (None for STOPPED)
    code: str | None = None
    # the taxonomy says this failure condemns the shared credential's token (a CodeSpec flag)
    revokes_credential: bool = False
    action: str = REVOKE_AND_REAUTHENTICATE

    def as_json(self) -> dict[str, Any]:
        return {
            "event": "SESSION_TERMINATED",
            "reason": self.reason.value,
            "trigger": None if self.trigger is None else self.trigger.value,
            "rawStatus": self.raw_status,
            "rawCode": self.raw_code,
            "timestamp": self.timestamp,
            "action": self.action,
        }

    def fields(self) -> dict[str, Any]:
        out = self.as_json()
        out["sessionId"] = self.session_id
        if self.code is not None:
            out["code"] = self.code
        return out


class SessionHandedOver(StampedEvent, frozen=True):
    """The daemon stopped with a store and left the session alive on the platform for the next start.

    Not an end: no ``action`` (nothing is to be revoked or re-authenticated), and no SESSION_TERMINATED
    follows; the next start takes the session over (docs/runtime.md, "Lifecycle"). ``previous`` is the
    state the session was in (a reconnecting session is handed over too: the next start connects it).
    """

    name: ClassVar[str] = "SESSION_HANDED_OVER"
    session_id: str
    previous: SessionState


@dataclass(frozen=True, slots=True)
class ErrorClassified(Event):
    """Seed section 1: SDK_ERROR_CLASSIFIED, the classified failure itself."""

    name: ClassVar[str] = "SDK_ERROR_CLASSIFIED"
    event: SdkErrorEvent

    def fields(self) -> dict[str, Any]:
        return self.event.as_json()


class RolloverReason(enum.StrEnum):
    """Why a session's connection was replaced in place (docs/runtime.md, "Notifications rollover")."""

    # the platform said so on the channel (v2.system.socket_closing, {"result":"404"},
    # v2.system.token_revoked, v2.system.no_longer_subscribed): the event's ``code`` names it
    PLATFORM_SIGNAL = "PLATFORM_SIGNAL"
    # the channel's own ``expires`` is near (Genesys channels live 24 h)
    CHANNEL_EXPIRING = "CHANNEL_EXPIRING"
    # the token that created the channel expires soon: the platform drops the channel with it
    TOKEN_EXPIRING = "TOKEN_EXPIRING"
    # the credential's token was replaced (a refresh): the channel still rides on the old one
    TOKEN_REPLACED = "TOKEN_REPLACED"


@dataclass(frozen=True, slots=True)
class ConnectionRolledOver(Event):
    """A session's connection was replaced without the session leaving ``active``.

    A Genesys notifications channel rolls over make-before-break: the new channel is created,
    connected and subscribed (one request, every topic) before the old one is closed, and an
    event seen on both is delivered once. ``make_before_break`` is False when the old channel was
    already gone (a 404) or the 20-channel quota left no room for two at once.
    """

    name: ClassVar[str] = "CONNECTION_ROLLED_OVER"
    session_id: str
    reason: RolloverReason
    # the platform ids of the connection before and after (a notifications channel id)
    previous: str | None
    current: str | None
    make_before_break: bool
    # seconds both channels were open, and the events the overlap carried twice (delivered once)
    overlap_s: float
    duplicates_dropped: int
    timestamp: str
    # the taxonomy code of the platform's signal (PLATFORM_SIGNAL), e.g. SOCKET_CLOSING
    code: str | None = None

    def fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "timestamp": self.timestamp,
            "sessionId": self.session_id,
            "reason": self.reason.value,
            "previous": self.previous,
            "current": self.current,
            "makeBeforeBreak": self.make_before_break,
            "overlapS": round(self.overlap_s, 3),
            "duplicatesDropped": self.duplicates_dropped,
        }
        if self.code is not None:
            out["code"] = self.code
        return out
