"""Which session rule a classified failure falls under, independent of the session's state.

design.md, "Scope": PERMANENT fails the operation; it ends the session only when
session-scoped; STATE_CORRUPTING and the fail-fast triggers always end it (seed section 3).
A WebSocket close 1000 ends it without reconnecting (seed section 2); NONE signals such as
a CXone empty poll are not failures.
"""

from __future__ import annotations

import enum
from typing import Final

from machines.effects import TerminationReason
from supervisor.taxonomy.model import Scope, SdkErrorEvent, TaxonomyClass

# the taxonomy's semantic code for WebSocket close 1000 (class NONE)
GRACEFUL_CLOSE_CODE: Final = "GRACEFUL_CLOSE"


class Route(enum.Enum):
    """The rule a classified failure falls under."""

    FAIL_FAST = enum.auto()
    GRACEFUL = enum.auto()
    DROP = enum.auto()
    LOST_PERMANENT = enum.auto()
    OPERATION_RETRY = enum.auto()
    OPERATION_FAILED = enum.auto()
    IGNORE = enum.auto()


def route(event: SdkErrorEvent) -> Route:
    """Which rule a classified failure falls under (independent of state)."""
    if event.fail_fast:
        return Route.FAIL_FAST
    cls = event.taxonomy_class
    if cls is TaxonomyClass.NONE:
        if event.code == GRACEFUL_CLOSE_CODE:
            return Route.GRACEFUL
        # EMPTY_POLL and friends are not failures; a NONE that lost the link still reconnects
        return Route.DROP if event.reconnect else Route.IGNORE
    if cls is TaxonomyClass.TRANSIENT:
        if event.reconnect or event.scope is Scope.SESSION:
            return Route.DROP
        return Route.OPERATION_RETRY
    # PERMANENT, operation-scoped (session-scoped ones are fail_fast above)
    return Route.LOST_PERMANENT if event.reconnect else Route.OPERATION_FAILED


def termination_reason(event: SdkErrorEvent) -> TerminationReason:
    """The reason a fail-fast event gives: a trigger first, then the class."""
    if event.trigger is not None:
        return TerminationReason.FAIL_FAST_TRIGGER
    if event.taxonomy_class is TaxonomyClass.STATE_CORRUPTING:
        return TerminationReason.STATE_CORRUPTING
    return TerminationReason.PERMANENT_SESSION_ERROR


def correlation(event: SdkErrorEvent) -> dict[str, str]:
    """Seed section 2: correlate telemetry with conversation and agent ids."""
    ctx = event.context
    out: dict[str, str] = {}
    for key in ("conversationId", "agentId"):
        value = ctx.get(key)
        if value is not None:
            out[key] = str(value)
    return out
