"""The events' common ground: the base class, the correlation ids, what the bus hands its sinks, and the wire form.

The reasons and kinds every event module shares (:class:`TerminationReason`, :class:`RetryKind`)
live here too. Nothing here does I/O.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, ClassVar, Final, cast

import msgspec

__all__ = [
    "REVOKE_AND_REAUTHENTICATE",
    "Correlation",
    "Event",
    "Published",
    "RetryKind",
    "StampedEvent",
    "TerminationReason",
    "TraceIds",
    "WireEvent",
    "wire",
]


# seed section 3: the one action a SESSION_TERMINATED event carries
REVOKE_AND_REAUTHENTICATE: Final = "REVOKE_LOCAL_STORAGE_AND_REAUTHENTICATE"


class TerminationReason(enum.StrEnum):
    """Why a session ended; every termination carries exactly one."""

    # seed section 3: one of the fail-fast triggers fired (the trigger says which)
    FAIL_FAST_TRIGGER = "FAIL_FAST_TRIGGER"
    # a STATE_CORRUPTING failure without a named trigger (e.g. a session id mismatch)
    STATE_CORRUPTING = "STATE_CORRUPTING"
    # a PERMANENT failure scoped to the session (docs/architecture.md, "Scope")
    PERMANENT_SESSION_ERROR = "PERMANENT_SESSION_ERROR"
    # the reconnection budget of the class policy is spent (seed section 2, RETRY_EXHAUSTED)
    RETRY_EXHAUSTED = "RETRY_EXHAUSTED"
    # WebSocket close 1000 (seed section 2: graceful closes are not reconnected)
    GRACEFUL_CLOSE = "GRACEFUL_CLOSE"
    # an explicit stop command or daemon shutdown
    STOPPED = "STOPPED"


class RetryKind(enum.StrEnum):
    """What is retried: a session's connection, or one operation (a REST call, a socket request)."""

    RECONNECT = "reconnect"
    OPERATION = "operation"


@dataclass(frozen=True, slots=True)
class Correlation:
    """The ids that tie an event to a session (seed section 2: "correlate ... with conversation
    IDs and agent IDs"). Built in one place, :meth:`supervisor.boundary.SessionContext.correlation`.
    """

    session_id: str
    agent_id: str | None = None
    conversation_id: str | None = None
    platform_session_id: str | None = None
    # a named tenant's session ([tenants.NAME]); None: the default tenant's, whose lines stay as they were
    tenant: str | None = None

    def fields(self) -> dict[str, str]:
        out = {"sessionId": self.session_id}
        if self.agent_id is not None:
            out["agentId"] = self.agent_id
        if self.conversation_id is not None:
            out["conversationId"] = self.conversation_id
        if self.platform_session_id is not None:
            out["platformSessionId"] = self.platform_session_id
        if self.tenant is not None:
            out["tenant"] = self.tenant
        return out


class Event:
    """Base of every published event: a wire ``name`` and the wire ``fields()``."""

    __slots__ = ()
    name: ClassVar[str]

    def fields(self) -> dict[str, Any]:
        raise NotImplementedError


class WireEvent(msgspec.Struct, Event, frozen=True, rename="camel", omit_defaults=True):
    """An event whose wire fields are its own: camelCase, in declaration order, enums as their values,
    an optional field left out while it holds its default (None); msgspec writes them, as it writes the
    configuration's names. An event whose wire form is more than that (other names, an order of its
    own, a rounded figure, the seed's exact JSON) is a dataclass with a hand-written ``fields()``.
    """

    def fields(self) -> dict[str, Any]:
        return cast(dict[str, Any], msgspec.to_builtins(self))


class StampedEvent(WireEvent, frozen=True, kw_only=True):
    """A :class:`WireEvent` whose line leads with its ``timestamp``, as every timestamped line does.

    The field is keyword-only, so the positional fields keep their places; msgspec writes a
    keyword-only field last, so :meth:`fields` puts it first (an existing key keeps its place when a
    dict is updated).
    """

    timestamp: str

    def fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {"timestamp": self.timestamp}
        out.update(msgspec.to_builtins(self))
        return out


# (trace id, span id) as lowercase hex (32 and 16 digits): the span an event line belongs to
TraceIds = tuple[str, str]


@dataclass(frozen=True, slots=True)
class Published:
    """One event as published: stamped by the bus with ``seq`` (strictly rising) and ``boot_id``.

    ``trace_id``/``span_id`` name the OpenTelemetry span the event belongs to, when telemetry
    is on and the span is (or will be) exported, so a log line leads to its trace.
    """

    seq: int
    boot_id: str
    event: Event
    correlation: Correlation | None = None
    trace_id: str | None = None
    span_id: str | None = None

    @property
    def name(self) -> str:
        return self.event.name


def wire(published: Published) -> dict[str, Any]:
    """The wire form: ``{"event": NAME, ...correlation, ...fields, ["traceId", "spanId",] "seq", "bootId"}``."""
    out: dict[str, Any] = {"event": published.event.name}
    if published.correlation is not None:
        out.update(published.correlation.fields())
    out.update(published.event.fields())
    if published.trace_id is not None and published.span_id is not None:
        out["traceId"] = published.trace_id
        out["spanId"] = published.span_id
    out["seq"] = published.seq
    out["bootId"] = published.boot_id
    return out
