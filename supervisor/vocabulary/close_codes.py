"""WebSocket close codes by name (RFC 6455 §7.4.1, the IANA registry), and the named sets we judge by.

The model is websockets' own (``websockets.frames.CloseCode`` and ``OK_CLOSE_CODES``, version 17),
restated here so that the layers that import no I/O library (the taxonomy, the simulators' fault checks,
the decision code) name a close the way the transports do. The names are the IANA registry's, as our
taxonomy has always put them in an event's ``rawCode`` (supervisor/taxonomy/normalize.py): two differ
from websockets' spelling (1005 ``NO_STATUS_RECEIVED``, websockets' ``NO_STATUS_RCVD``; 1007
``INVALID_FRAME_PAYLOAD_DATA``, websockets' ``INVALID_DATA``). An :class:`~enum.IntEnum` is the int it
names: a close frame, a RawError's ``closeCode`` and a JSON line carry the number. What a code *means*
for a session (graceful, a drop, a policy violation) is the taxonomy's (``[closeCodes]`` in
supervisor/taxonomy/data/), never decided here.
"""

from __future__ import annotations

import enum
from typing import Final

__all__ = ["OK_CLOSE_CODES", "CloseCode"]


class CloseCode(enum.IntEnum):
    """RFC 6455 §7.4.1 (and §7.1.5 for the codes never sent in a frame); the IANA registry's names."""

    NORMAL_CLOSURE = 1000
    GOING_AWAY = 1001
    PROTOCOL_ERROR = 1002
    UNSUPPORTED_DATA = 1003
    # 1004 is reserved
    NO_STATUS_RECEIVED = 1005  # a close frame without a code (§7.1.5); never sent
    ABNORMAL_CLOSURE = 1006  # no close frame at all: the link died (§7.1.5); never sent
    INVALID_FRAME_PAYLOAD_DATA = 1007
    POLICY_VIOLATION = 1008
    MESSAGE_TOO_BIG = 1009
    MANDATORY_EXTENSION = 1010
    INTERNAL_ERROR = 1011
    SERVICE_RESTART = 1012
    TRY_AGAIN_LATER = 1013
    BAD_GATEWAY = 1014
    TLS_HANDSHAKE = 1015  # never sent


#: the closes websockets counts as a clean end of the connection (``websockets.frames.OK_CLOSE_CODES``:
#: ``ConnectionClosedOK`` rather than ``ConnectionClosedError``): the two a peer sends on purpose, and a
#: close frame that carried no code
OK_CLOSE_CODES: Final = frozenset(
    {CloseCode.NORMAL_CLOSURE, CloseCode.GOING_AWAY, CloseCode.NO_STATUS_RECEIVED}
)
