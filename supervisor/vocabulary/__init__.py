"""The vocabulary every layer shares, on the ground floor (docs/runtime.md, "Floors").

Names only, no behaviour and no I/O: the states a session and a circuit are in
(:mod:`.states`), the platforms (:mod:`.platforms`), endpoint ids (:mod:`.endpoints`), WebSocket
close codes (:mod:`.close_codes`) and the socket API's faults (:mod:`.faults`). The machines, the
events, the configuration, the simulators, the transports, the socket API and the CLI all import
them from here, so a state, a platform, an endpoint, a close or a fault is one value from the
machine that makes it to the line that prints it.
"""

from __future__ import annotations

from supervisor.vocabulary.close_codes import OK_CLOSE_CODES, CloseCode
from supervisor.vocabulary.endpoints import (
    CXONE_AGENT_SESSIONS,
    GENESYS_STREAMING,
    GENESYS_WEBMESSAGING,
    EndpointId,
)
from supervisor.vocabulary.faults import ApiFault
from supervisor.vocabulary.platforms import Platform, Scope, TenantScope, parse_scope
from supervisor.vocabulary.states import CircuitState, SessionState

__all__ = [
    "CXONE_AGENT_SESSIONS",
    "GENESYS_STREAMING",
    "GENESYS_WEBMESSAGING",
    "OK_CLOSE_CODES",
    "ApiFault",
    "CircuitState",
    "CloseCode",
    "EndpointId",
    "Platform",
    "Scope",
    "SessionState",
    "TenantScope",
    "parse_scope",
]
