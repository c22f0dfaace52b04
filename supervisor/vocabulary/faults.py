"""The socket API's faults: every error the daemon answers a call with, by name (docs/socket-api.md, "Errors").

One enum, raised by the domain as :class:`~supervisor.errors.ApiError` ``(fault, parameters)`` and
written on the wire as the member's value, the varlink error name
(``io.sessionsupervisor.control.v1.NoSuchSession``): no error name is glued together from an
interface and a word anywhere else (supervisord's ``xmlrpc.Faults`` on the same model: one table of
fault codes every handler raises). The interface names the faults belong to are here too, since the
names are made of them; the methods are the protocol's (supervisor/api/protocol.py).
"""

from __future__ import annotations

import enum
from typing import Final

__all__ = ["CONTROL", "PROTOCOL", "SERVICE", "STATE", "ApiFault"]

#: varlink's own interface (varlink.org, "Service")
SERVICE: Final = "org.varlink.service"
#: the subscribe socket's interface; the major version is part of the name
STATE: Final = "io.sessionsupervisor.state.v1"
#: the control socket's interface
CONTROL: Final = "io.sessionsupervisor.control.v1"
#: errors of the framing itself, on either socket
PROTOCOL: Final = "io.sessionsupervisor.protocol.v1"


class ApiFault(enum.StrEnum):
    """Every error the daemon answers with; the value is its varlink error name."""

    # varlink's own (org.varlink.service)
    INTERFACE_NOT_FOUND = f"{SERVICE}.InterfaceNotFound"
    METHOD_NOT_FOUND = f"{SERVICE}.MethodNotFound"
    METHOD_NOT_IMPLEMENTED = f"{SERVICE}.MethodNotImplemented"
    INVALID_PARAMETER = f"{SERVICE}.InvalidParameter"
    EXPECTED_MORE = f"{SERVICE}.ExpectedMore"
    # the framing (either socket)
    INVALID_MESSAGE = f"{PROTOCOL}.InvalidMessage"
    MESSAGE_TOO_LARGE = f"{PROTOCOL}.MessageTooLarge"
    HANDSHAKE_TIMEOUT = f"{PROTOCOL}.HandshakeTimeout"
    IDLE_TIMEOUT = f"{PROTOCOL}.IdleTimeout"
    TOO_MANY_CONNECTIONS = f"{PROTOCOL}.TooManyConnections"
    STREAM_TAKES_NO_CALLS = f"{PROTOCOL}.StreamTakesNoCalls"
    # a bug in the daemon's handling of this connection (logged with its traceback); closed
    INTERNAL_ERROR = f"{PROTOCOL}.InternalError"
    # the subscribe socket: the platform stream, to a peer its allow-lists do not name
    PLATFORM_DENIED = f"{STATE}.PermissionDenied"
    # the control socket's verbs
    NO_SUCH_SESSION = f"{CONTROL}.NoSuchSession"
    SESSION_RUNNING = f"{CONTROL}.SessionRunning"
    NOT_ACCEPTING = f"{CONTROL}.NotAccepting"
    INVALID_TAXONOMY = f"{CONTROL}.InvalidTaxonomy"
    UNSUPPORTED = f"{CONTROL}.Unsupported"
    RELOAD_FAILED = f"{CONTROL}.ReloadFailed"
    # attribute updates (docs/attributes.md)
    BACKPRESSURE = f"{CONTROL}.Backpressure"
    STORE_UNAVAILABLE = f"{CONTROL}.StoreUnavailable"
    SESSION_TERMINATED = f"{CONTROL}.SessionTerminated"
    NO_CONVERSATION = f"{CONTROL}.NoConversation"
    NO_SUCH_MISMATCH = f"{CONTROL}.NoSuchMismatch"
    ALREADY_RESOLVED = f"{CONTROL}.AlreadyResolved"
    NOT_RESOLVABLE = f"{CONTROL}.NotResolvable"
    # a message or an agent state on a live session (docs/socket-api.md, "SendMessage")
    SESSION_NOT_ACTIVE = f"{CONTROL}.SessionNotActive"
    WRONG_SESSION_KIND = f"{CONTROL}.WrongSessionKind"
    READ_ONLY_CONVERSATION = f"{CONTROL}.ReadOnlyConversation"
    PLATFORM_REJECTED = f"{CONTROL}.PlatformRejected"
    SEND_UNCONFIRMED = f"{CONTROL}.SendUnconfirmed"
    # roles (docs/socket-api.md, "Roles"): the caller's role does not include the method's
    PERMISSION_DENIED = f"{CONTROL}.PermissionDenied"
    # sessions as data (docs/socket-api.md, "AddSession")
    INVALID_SESSION_SPEC = f"{CONTROL}.InvalidSessionSpec"
    SESSION_EXISTS = f"{CONTROL}.SessionExists"
    CONFIGURED_SESSION = f"{CONTROL}.ConfiguredSession"
    NO_STORE = f"{CONTROL}.NoStore"
    # manual circuit control: an endpoint the daemon does not have; closing a circuit not isolated
    NO_SUCH_ENDPOINT = f"{CONTROL}.NoSuchEndpoint"
    NOT_ISOLATED = f"{CONTROL}.NotIsolated"
    # a notifications session that would need a 21st channel on its OAuth client (errors.ChannelLimit)
    CHANNEL_LIMIT = f"{CONTROL}.ChannelLimit"

    @property
    def short(self) -> str:
        """The error's own name, without its interface (``NoSuchSession``)."""
        return self.value.rpartition(".")[2]
