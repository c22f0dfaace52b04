"""The states a session and a circuit are in, as every layer names them.

The machines move between them (machines/session.py, machines/circuit.py); the events carry them
(``SESSION_TRANSITION``, ``CIRCUIT_TRANSITION``), and the session table, the socket API, the
systemd status line, telemetry, the demo and the CLI count, filter and draw by them. The values
are the wire's (docs/runtime.md, "Events"; docs/socket-api.md): an enum member renders as its
value, so a line or a frame is the same whether it was built from the member or its string.
Nothing outside this module spells one of these names as a string literal
(tests/unit/test_typed_edges.py).
"""

from __future__ import annotations

import enum

__all__ = ["ChannelState", "CircuitState", "SessionState"]


class SessionState(enum.StrEnum):
    """Where a supervised session is: connecting → active ⇄ reconnecting → terminated, or handed-over.

    ``handed-over``: the daemon stopped with a store and left the session alive on the platform for
    the next start to take over (docs/runtime.md, "Lifecycle"); this process supervises it no more.
    """

    CONNECTING = "connecting"
    ACTIVE = "active"
    RECONNECTING = "reconnecting"
    TERMINATED = "terminated"
    HANDED_OVER = "handed-over"


class CircuitState(enum.StrEnum):
    """Where an endpoint's circuit breaker is: closed → open → half_open (seed section 2), or
    ``isolated`` by an operator (``ctl circuit isolate``) until closed, reset or its time is up."""

    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"
    ISOLATED = "isolated"


class ChannelState(enum.StrEnum):
    """Where a notifications channel shared by many agent sessions is: connecting → open ⇄
    reconnecting → closed (machines/channel.py). Its agents follow it (docs/runtime.md, "Shared
    notification channels")."""

    CONNECTING = "connecting"
    OPEN = "open"
    RECONNECTING = "reconnecting"
    CLOSED = "closed"
