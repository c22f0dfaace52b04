"""The transport seam: what a session's transport must offer.

Lifecycle driven by the runtime (supervisor/runtime/session_runner.py)::

    connection = await transport.open()          # TransportFailure / OperationError on failure
    # the runtime validates connection.session_response (conversationId, agentId, status)
    raw = await connection.serve(report)          # runs until the connection ends: why it ended
    await connection.close(1001)                  # on shutdown (going away) or 1000 on stop

Failures are described with the mappers of :mod:`supervisor.boundary`, never decided here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from supervisor.boundary import Reporter, SessionContext
from supervisor.taxonomy import RawError

__all__ = ["Connection", "Reporter", "SessionContext", "Transport"]


class Connection(Protocol):
    """One live connection of a session: a WebSocket, or a long-poll loop."""

    @property
    def session_response(self) -> Mapping[str, Any]:
        """What the server answered on open, checked by the runtime before the session goes active."""

    async def serve(self, report: Reporter) -> RawError:
        """Run until the connection ends and return the RawError that says why.

        In-band failures that need not end the connection (a 4029 on one message, a 429 on
        one REST call) go to ``report``; when it answers False the session is over and
        ``serve`` must return promptly (the runtime also cancels it).
        """

    async def close(self, code: int = 1000, reason: str = "") -> None:
        """Close the connection (1000 on stop, 1001 on daemon shutdown); never raises."""


class Transport(Protocol):
    """Opens connections for one session."""

    context: SessionContext
    # the fields a session response must carry before the session may go active
    required_fields: tuple[str, ...]

    async def open(self) -> Connection:
        """Connect and obtain the session response. Raises TransportFailure or OperationError."""

    async def aclose(self) -> None:
        """Release what the transport holds (HTTP clients, ...)."""
