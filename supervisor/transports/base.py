"""The transport seam: what a session's transport must offer.

Lifecycle driven by the runtime (supervisor/runtime/session_runner.py)::

    connection = await transport.open(flight)    # TransportFailure / OperationError on failure
    # the runtime validates connection.session_response and takes connection.learned
    raw = await connection.serve(report)          # runs until the connection ends: why it ended
    await connection.close(1001)                  # on shutdown (going away) or 1000 on stop
    await connection.abandon()                    # or: a handover, the session left alive for the next start

Failures are described with the mappers of :mod:`supervisor.boundary`, never decided here.
``flight`` is the connection attempt the runtime admitted on the session's connect endpoint
(supervisor/attempts/): the transport makes it leave right before the attempt it stands for is
made (:meth:`~supervisor.attempts.Flight.leave`: a WebSocket handshake; a CXone session start goes
through the retry executor with it), and may tell its answer there; the runtime tells what is left
untold. What the transport does before (a token, a notifications channel created over REST) goes
through its own endpoints and is not this attempt.

A transport's :class:`~supervisor.boundary.SessionContext` is immutable: what a connection
learns about its session (a conversation, the platform's session id, the agent) it reports
through ``learned``, and the runtime, the one owner of session state, merges it.

A connection that replaces its platform side in place (a Genesys notifications channel rolled over
before the platform drops it) is :class:`Rolling`: the runtime sets ``on_rolled_over`` and, on each
:class:`Rollover`, takes the new ``learned`` and publishes CONNECTION_ROLLED_OVER; the session
stays active throughout.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from supervisor.attempts import Flight
from supervisor.boundary import Learned, Reporter, SessionContext
from supervisor.events import RolloverReason
from supervisor.taxonomy import RawError
from supervisor.vocabulary import CloseCode

__all__ = [
    "AgentStateSetter",
    "Connection",
    "HistoryReader",
    "Learned",
    "MessageSender",
    "Reporter",
    "Rolling",
    "Rollover",
    "SessionContext",
    "TakesOver",
    "Transport",
]


class Connection(Protocol):
    """One live connection of a session: a WebSocket, or a long-poll loop."""

    @property
    def session_response(self) -> Mapping[str, Any]:
        """What the server answered on open, checked by the runtime before the session goes active."""

    @property
    def learned(self) -> Learned:
        """What the platform told this connection about its session (read it after open and after serve)."""

    async def serve(self, report: Reporter) -> RawError:
        """Run until the connection ends and return the RawError that says why.

        In-band failures that need not end the connection (a pushed error, a 429 on one REST
        call) go to ``report``; when it answers False the session is over and ``serve`` must
        return promptly (the runtime also cancels it). Answers to the connection's own in-band
        requests go to the request (and the retry executor), not to ``report``.
        """

    async def close(self, code: CloseCode = CloseCode.NORMAL_CLOSURE, reason: str = "") -> None:
        """Close the connection (1000 on stop, 1001 on daemon shutdown); never raises."""

    async def abandon(self) -> None:
        """Let go of the connection and leave its platform session alive for the next start to take
        over (a handover, docs/runtime.md "Lifecycle"); never raises, never ends anything on the
        platform: a guest socket is closed with 1001 and no ``closeSession``, a CXone poll is stopped
        with no DELETE, a notifications channel is left to expire."""


class Transport(Protocol):
    """Opens connections for one session."""

    context: SessionContext
    # which response ``session_response`` is: the taxonomy's [responses.KIND] says what it must
    # carry before the session may go active, and where it names its conversation (docs/taxonomy.md)
    response_kind: str

    async def open(self, flight: Flight | None = None) -> Connection:
        """Connect and obtain the session response. Raises TransportFailure or OperationError.

        ``flight``: the admitted connection attempt (None: not gated, a transport used on its own).
        """

    async def aclose(self) -> None:
        """Release what the transport holds (HTTP clients, ...)."""


@runtime_checkable
class MessageSender(Protocol):
    """A connection that can send a conversation message in-band (Web Messaging's ``onMessage``)."""

    #: the conversation takes no more messages from this side (the agent ended it, read-only)
    read_only: bool

    async def send_message(
        self, text: str, *, metadata: Mapping[str, str] | None = None, client_id: str | None = None
    ) -> Mapping[str, Any]:
        """Send ``text`` with ``client_id`` (its deduplication id); return the platform's answer.
        Raises OperationError when it fails for good."""


@runtime_checkable
class HistoryReader(Protocol):
    """A connection whose platform keeps a history it can read back (Web Messaging's guest history)."""

    async def missed_messages(self) -> list[dict[str, Any]] | None:
        """What the history holds that the session never delivered, oldest first; None when it
        could not be read."""


@runtime_checkable
class AgentStateSetter(Protocol):
    """A connection that can set its agent's state (CXone ``POST agent-sessions/{id}/state``)."""

    async def set_agent_state(self, state: str, reason: str | None = None) -> None:
        """Ask the platform for ``state``; raises OperationError when it refuses for good."""


@runtime_checkable
class TakesOver(Protocol):
    """A transport whose next open may take over a platform session a handover left, with no
    connection attempt on its connect endpoint (CXone: a poll on the stored sessionId, no start)."""

    @property
    def takes_over(self) -> bool:
        """The next open polls on a session a handover left first: the runtime admits no connection
        attempt for it (it would book a start's slot and never use it); a start it falls back to
        asks the connect endpoint itself."""


@dataclass(frozen=True, slots=True)
class Rollover:
    """A connection replaced its platform side in place (docs/runtime.md, "Notifications rollover")."""

    reason: RolloverReason
    # the platform ids before and after (notifications channel ids)
    previous: str | None
    current: str | None
    # False: the old side was already gone, or the quota had no room for both at once
    make_before_break: bool
    # seconds both were open, and events carried by both (delivered once)
    overlap_s: float
    duplicates_dropped: int
    # the taxonomy code of the platform's signal that caused it (PLATFORM_SIGNAL)
    code: str | None = None


@runtime_checkable
class Rolling(Protocol):
    """A connection that rolls over in place; the runtime hooks ``on_rolled_over``."""

    on_rolled_over: Callable[[Rollover], None] | None
