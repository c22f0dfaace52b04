"""Which session rule a classified failure falls under, independent of the session's state.

docs/architecture.md, "Scope": PERMANENT fails the operation; it ends the session only when
session-scoped; STATE_CORRUPTING and the fail-fast triggers always end it (seed section 3).
A graceful end (the taxonomy's ``graceful`` flag: WebSocket close 1000) ends it without
reconnecting (seed section 2); NONE signals such as a CXone empty poll are not failures.
A failure that neither ends nor moves the session is the operation's business: its retries
belong to the one retry executor (supervisor/rest/executor.py), not to the machine.
"""

from __future__ import annotations

import enum

from machines.effects import TerminationReason
from supervisor.taxonomy.model import Scope, SdkErrorEvent, TaxonomyClass


class Route(enum.Enum):
    """The rule a classified failure falls under."""

    # ends the session at once (seed section 3)
    FAIL_FAST = enum.auto()
    # ends it without reconnecting (seed section 2: close 1000)
    GRACEFUL = enum.auto()
    # the connection is lost: reconnect (seed edge case 1)
    DROP = enum.auto()
    # the connection is lost and the failure is not retryable: nothing can carry the session on
    LOST_PERMANENT = enum.auto()
    # only the operation failed: the session is untouched
    OPERATION = enum.auto()


def route(event: SdkErrorEvent) -> Route:
    """Which rule a classified failure falls under (independent of state)."""
    if event.fail_fast:
        return Route.FAIL_FAST
    if event.graceful:
        return Route.GRACEFUL
    cls = event.taxonomy_class
    if cls is TaxonomyClass.NONE:
        # EMPTY_POLL and friends are not failures; a NONE that lost the link still reconnects
        return Route.DROP if event.reconnect else Route.OPERATION
    if cls is TaxonomyClass.TRANSIENT:
        if event.reconnect or event.scope is Scope.SESSION:
            return Route.DROP
        return Route.OPERATION
    # PERMANENT, operation-scoped (session-scoped ones are fail_fast above)
    return Route.LOST_PERMANENT if event.reconnect else Route.OPERATION


def termination_reason(event: SdkErrorEvent) -> TerminationReason:
    """The reason a fail-fast event gives: a trigger first, then the class."""
    if event.trigger is not None:
        return TerminationReason.FAIL_FAST_TRIGGER
    if event.taxonomy_class is TaxonomyClass.STATE_CORRUPTING:
        return TerminationReason.STATE_CORRUPTING
    return TerminationReason.PERMANENT_SESSION_ERROR
