"""The vocabulary of the decision core: classes, scopes, triggers, policies and SdkErrorEvent.

Field names on the wire are the seed's (section 1, "Taxonomy Design and Error Code
Normalization"): ``event``, ``timestamp``, ``source``, ``rawStatus``, ``rawCode``,
``taxonomyClass``, ``retryable``, ``maxRetryBudget``, ``context`` (with
``conversationId``, ``agentId``, ``endpoint``). We add ``trigger`` (when a fail-fast
trigger applies), ``code`` (the semantic code), ``scope``, ``taxonomyVersion``,
``policy`` and ``retryAfterMs``, and the code's behaviour flags when set (``reconnect``,
``reconcileBeforeRetry``, ``graceful``, ``replayWithFreshToken``, ``revokesCredential``,
``circuitNeutral``).
Nothing here does I/O.
"""

from __future__ import annotations

import enum
from typing import Any

import msgspec

# the platforms are the vocabulary's (supervisor/vocabulary/platforms.py); an envelope names one
from supervisor.vocabulary.platforms import Platform as Platform


class TaxonomyClass(enum.StrEnum):
    """The seed's three classes, plus NONE for signals that are not failures.

    NONE covers a CXone 304 empty poll and a WebSocket 1000 graceful close: they are
    routed (the graceful close ends the session without reconnecting) but they are
    never retried, never counted by a circuit, and never a fail-fast.
    """

    TRANSIENT = "TRANSIENT"
    PERMANENT = "PERMANENT"
    STATE_CORRUPTING = "STATE_CORRUPTING"
    NONE = "NONE"


class Scope(enum.StrEnum):
    """What a failure ends: only the operation, or the whole session (docs/architecture.md, "Scope")."""

    OPERATION = "operation"
    SESSION = "session"


class Trigger(enum.StrEnum):
    """Fail-fast triggers: the seed's five (section 3) plus our two."""

    OAUTH_TOKEN_INVALID = "OAUTH_TOKEN_INVALID"
    SIP_REGISTRATION_FAILED = "SIP_REGISTRATION_FAILED"
    QUEUE_FULL = "QUEUE_FULL"
    CONVERSATION_STATE_DRIFT = "CONVERSATION_STATE_DRIFT"
    DUPLICATE_MESSAGE_ID = "DUPLICATE_MESSAGE_ID"
    INCOMPLETE_RESPONSE = "INCOMPLETE_RESPONSE"
    TOKEN_REFRESH_FAILED = "TOKEN_REFRESH_FAILED"


class Jitter(enum.StrEnum):
    """Backoff strategies (Brooker, "Exponential Backoff and Jitter", AWS Architecture Blog, 2015).

    ADDITIVE is the seed's ``base*2^attempt + U(0, base)``, capped; FULL is
    ``U(0, min(cap, base*2^attempt))``; DECORRELATED is ``min(cap, U(base, 3*previous))``.
    """

    ADDITIVE = "additive"
    FULL = "full"
    DECORRELATED = "decorrelated"


class Channel(enum.StrEnum):
    REST = "rest"
    WEBMESSAGING = "webmessaging"
    NOTIFICATIONS = "notifications"
    AGENT_SESSION = "agent-session"
    SIP = "sip"


class RetryPolicy(msgspec.Struct, frozen=True, rename="camel", forbid_unknown_fields=True):
    """A retry budget and its backoff. Durations are milliseconds."""

    name: str
    max_retries: int
    base_delay_ms: int = 0
    max_delay_ms: int = 0
    jitter: Jitter = Jitter.ADDITIVE
    honors_retry_after: bool = False
    # past this, a server-given Retry-After means "give up" (the Java SDK's 180 s)
    retry_after_ceiling_ms: int = 180_000
    description: str = ""

    def as_json(self) -> dict[str, Any]:
        return msgspec.to_builtins(self)  # type: ignore[no-any-return]


class CodeSpec(msgspec.Struct, frozen=True):
    """One semantic code of a taxonomy version, resolved (its policy object attached)."""

    code: str
    taxonomy_class: TaxonomyClass
    scope: Scope
    policy: RetryPolicy
    trigger: Trigger | None = None
    # reconnect: the failure lost the connection (close codes, transport drops)
    reconnect: bool = False
    # reconcileBeforeRetry: the outcome is unknown (504 on a non-idempotent create)
    reconcile_before_retry: bool = False
    # behaviour flags: the runtime keys on these, never on a code's name (a renamed code keeps them)
    # graceful: the peer ended the session cleanly: terminate without reconnecting (seed section 2)
    graceful: bool = False
    # replayWithFreshToken: a 401 on a token at the end of its life: replay once, freshly signed (edge case 3)
    replay_with_fresh_token: bool = False
    # revokesCredential: the failure condemns the shared credential's token: drop it (seed section 3)
    revokes_credential: bool = False
    # circuitNeutral: a TRANSIENT failure that says nothing of the endpoint's health (a token our
    # clock let lapse): never counted toward its circuit (docs/taxonomy.md, "The 401 rule")
    circuit_neutral: bool = False
    description: str = ""

    @property
    def retryable(self) -> bool:
        return self.taxonomy_class is TaxonomyClass.TRANSIENT and self.policy.max_retries > 0


class SdkErrorEvent(msgspec.Struct, frozen=True, rename="camel", omit_defaults=False):
    """The seed's standardized event; see the module docstring for the field contract."""

    timestamp: str
    source: str
    raw_status: int | None
    raw_code: str | None
    taxonomy_class: TaxonomyClass
    retryable: bool
    max_retry_budget: int
    context: dict[str, Any]
    code: str
    scope: Scope
    taxonomy_version: str
    # the resolved policy of this code; the wire form shows its name only
    policy: RetryPolicy
    trigger: Trigger | None = None
    retry_after_ms: int | None = None
    reconnect: bool = False
    reconcile_before_retry: bool = False
    graceful: bool = False
    replay_with_fresh_token: bool = False
    revokes_credential: bool = False
    circuit_neutral: bool = False
    platform: str = ""
    channel: str = ""
    details: str | None = None
    event: str = "SDK_ERROR_CLASSIFIED"

    @property
    def fail_fast(self) -> bool:
        """Ends the session at once: STATE_CORRUPTING, a trigger, or a session-scoped PERMANENT."""
        if self.trigger is not None or self.taxonomy_class is TaxonomyClass.STATE_CORRUPTING:
            return True
        return self.taxonomy_class is TaxonomyClass.PERMANENT and self.scope is Scope.SESSION

    def as_json(self) -> dict[str, Any]:
        """The wire form, seed fields first; ``trigger`` only when one applies."""
        out: dict[str, Any] = {
            "event": self.event,
            "timestamp": self.timestamp,
            "source": self.source,
            "rawStatus": self.raw_status,
            "rawCode": self.raw_code,
            "taxonomyClass": self.taxonomy_class.value,
            "retryable": self.retryable,
            "maxRetryBudget": self.max_retry_budget,
            "context": self.context,
        }
        if self.trigger is not None:
            out["trigger"] = self.trigger.value
        out["code"] = self.code
        out["scope"] = self.scope.value
        out["taxonomyVersion"] = self.taxonomy_version
        out["policy"] = self.policy.name
        if self.retry_after_ms is not None:
            out["retryAfterMs"] = self.retry_after_ms
        if self.reconnect:
            out["reconnect"] = True
        if self.reconcile_before_retry:
            out["reconcileBeforeRetry"] = True
        if self.graceful:
            out["graceful"] = True
        if self.replay_with_fresh_token:
            out["replayWithFreshToken"] = True
        if self.revokes_credential:
            out["revokesCredential"] = True
        if self.circuit_neutral:
            out["circuitNeutral"] = True
        out["platform"] = self.platform
        out["channel"] = self.channel
        if self.details is not None:
            out["details"] = self.details
        return out
