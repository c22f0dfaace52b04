"""The socket API's wire protocol: varlink framing, calls, replies and typed errors. Pure: no I/O.

Framing is varlink's (varlink.org, "Method Call"; docs/socket-api.md says why): every message
is one JSON object in UTF-8 followed by a NUL byte. A call is ``{"method":
"<interface>.<Method>", "parameters": {...}, "more": bool, "oneway": bool}``; a reply is
``{"parameters": {...}, "continues": bool}`` or ``{"error": "<interface>.<Error>",
"parameters": {...}}``. A call with ``more: true`` is answered by replies with ``continues:
true`` until the last one (the subscription: it never ends while the daemon runs); the client
cancels by closing. Unknown fields are ignored, on both sides.

Limits: a message the daemon reads is at most :data:`MAX_MESSAGE_BYTES` (the NUL excluded);
past that the stream cannot be resynchronised safely, so it is answered with
``MessageTooLarge`` and closed. Anything else malformed (not UTF-8, not JSON, not an object,
wrong types) gets a typed error reply and the connection goes on: the NUL still delimits the
next message.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from supervisor.errors import ApiError
from supervisor.vocabulary.faults import CONTROL, PROTOCOL, SERVICE, STATE, ApiFault

__all__ = [
    "CLIENT_MAX_MESSAGE_BYTES",
    "CONTROL",
    "MAX_MESSAGE_BYTES",
    "MAX_SESSIONS_PER_CALL",
    "PROTOCOL",
    "SERVICE",
    "STATE",
    "ApiFault",
    "Call",
    "FrameDecoder",
    "Method",
    "Reply",
    "check_method",
    "encode_call",
    "encode_error",
    "encode_reply",
    "frame_parameters",
    "parse_call",
    "parse_reply",
]

#: the largest message the daemon reads (docs/robustness.md, "Local sockets": 64 KiB, closed on overflow)
MAX_MESSAGE_BYTES: Final = 64 * 1024
#: the largest message a client reads: a snapshot grows with the number of sessions (~250 bytes each)
CLIENT_MAX_MESSAGE_BYTES: Final = 64 * 1024 * 1024
#: the most entries one AddSession or RemoveSession takes: 200 entries of typical ids (a UUID agent id,
#: a 20-character session id: about 150 bytes each) fit one 64 KiB frame with room to spare; ``ctl
#: sessions add`` packs its calls by this count and by the frame's bytes. Here, with the wire's other
#: limits, and not beside the verbs (supervisor/api/control_sessions.py): the verbs import the runtime,
#: which ``ctl`` must not load to talk to a socket (docs/benchmarks.md, "CLI start")
MAX_SESSIONS_PER_CALL: Final = 200

# varlink: interface names are lower-case dotted, method names start upper-case
_METHOD = re.compile(r"^([a-z]([-]*[a-z0-9])*(\.[a-z0-9]([-]*[a-z0-9])*)+)\.([A-Z][A-Za-z0-9]*)$")


class Method(enum.StrEnum):
    """Every method either socket answers (each socket answers its own and the service ones)."""

    GET_INFO = f"{SERVICE}.GetInfo"
    GET_INTERFACE_DESCRIPTION = f"{SERVICE}.GetInterfaceDescription"
    SUBSCRIBE = f"{STATE}.Subscribe"
    STATUS = f"{CONTROL}.Status"
    LIST_SESSIONS = f"{CONTROL}.ListSessions"
    SHOW_SESSION = f"{CONTROL}.ShowSession"
    START_SESSION = f"{CONTROL}.StartSession"
    STOP_SESSION = f"{CONTROL}.StopSession"
    DRAIN = f"{CONTROL}.Drain"
    USE_TAXONOMY = f"{CONTROL}.UseTaxonomy"
    RELOAD = f"{CONTROL}.Reload"
    # attribute updates (docs/attributes.md): supervisor/api/control_attributes.py
    SET_ATTRIBUTES = f"{CONTROL}.SetAttributes"
    LIST_MISMATCHES = f"{CONTROL}.ListMismatches"
    RESOLVE_MISMATCH = f"{CONTROL}.ResolveMismatch"
    ATTRIBUTES_STATUS = f"{CONTROL}.AttributesStatus"
    # manual circuit control (docs/runtime.md, "Manual circuit control"): supervisor/api/control.py
    ISOLATE_CIRCUIT = f"{CONTROL}.IsolateCircuit"
    CLOSE_CIRCUIT = f"{CONTROL}.CloseCircuit"
    RESET_CIRCUIT = f"{CONTROL}.ResetCircuit"
    # on a live session's behalf: supervisor/api/control_messages.py
    SEND_MESSAGE = f"{CONTROL}.SendMessage"
    SET_AGENT_STATE = f"{CONTROL}.SetAgentState"
    # sessions added and removed at run time: supervisor/api/control_sessions.py
    ADD_SESSION = f"{CONTROL}.AddSession"
    REMOVE_SESSION = f"{CONTROL}.RemoveSession"


# -- framing -----------------------------------------------------------------------------------------


class FrameDecoder:
    """Splits a byte stream into NUL-terminated messages, refusing any longer than ``limit``.

    ``feed`` returns the messages completed by ``data`` (without their NUL); a message that
    grows past the limit raises a fatal ``MessageTooLarge`` :class:`ApiError` as soon as it
    does, so a client that never sends a NUL costs at most ``limit`` bytes.
    """

    __slots__ = ("_buffer", "_limit")

    def __init__(self, limit: int = MAX_MESSAGE_BYTES) -> None:
        self._buffer = bytearray()
        self._limit = limit

    @property
    def pending(self) -> int:
        """Bytes of an incomplete message held (non-zero at EOF: the last message was truncated)."""
        return len(self._buffer)

    def feed(self, data: bytes) -> list[bytes]:
        if b"\0" not in data:
            # appending in place: a client dripping one byte at a time costs O(n), not O(n²)
            self._buffer += data
            self._check(len(self._buffer))
            return []
        head, _, tail = data.partition(b"\0")
        frames = [bytes(self._buffer) + head, *tail.split(b"\0")]
        self._buffer.clear()
        self._buffer += frames.pop()
        for frame in frames:
            self._check(len(frame))
        self._check(len(self._buffer))
        return frames

    def _check(self, size: int) -> None:
        if size > self._limit:
            raise ApiError(
                ApiFault.MESSAGE_TOO_LARGE,
                {"limit": self._limit, "problem": f"a message is limited to {self._limit} bytes"},
                fatal=True,
            )


# -- calls (what the daemon reads) ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Call:
    """One varlink call: ``method`` is checked for shape, not for existence (the socket does that)."""

    method: str
    parameters: dict[str, Any]
    more: bool = False
    oneway: bool = False


_any_decoder = msgspec.json.Decoder()


def _invalid(problem: str) -> ApiError:
    return ApiError(ApiFault.INVALID_MESSAGE, {"problem": problem})


def _flag(obj: Mapping[str, Any], key: str) -> bool:
    value = obj.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise _invalid(f"{key}: expected true or false")
    return value


def parse_call(frame: bytes) -> Call:
    """Decode one call; raises a non-fatal :class:`ApiError` naming the problem in one line."""
    try:
        obj = _any_decoder.decode(frame)
    except RecursionError:
        raise _invalid("JSON nested too deeply") from None
    except msgspec.DecodeError as exc:
        # msgspec's messages name the byte offset and never echo the input back
        raise _invalid(f"not valid JSON in UTF-8: {exc}") from None
    if not isinstance(obj, dict):
        raise _invalid("a call is a JSON object")
    method = obj.get("method")
    if not isinstance(method, str):
        raise _invalid("method: expected a string")
    parameters = obj.get("parameters")
    if parameters is None:
        parameters = {}
    elif not isinstance(parameters, dict):
        raise _invalid("parameters: expected an object")
    more, oneway = _flag(obj, "more"), _flag(obj, "oneway")
    if _flag(obj, "upgrade"):
        raise ApiError(
            ApiFault.METHOD_NOT_IMPLEMENTED,
            {"method": method[:200], "problem": "no method of this daemon upgrades the connection"},
        )
    if more and oneway:
        raise _invalid("more and oneway exclude each other")
    return Call(method, parameters, more, oneway)


def check_method(method: str, known: Mapping[str, frozenset[str]]) -> None:
    """Raise the varlink error for a method this socket does not have (``known``: interface -> methods)."""
    match = _METHOD.match(method)
    if match is None:
        raise ApiError(
            ApiFault.METHOD_NOT_FOUND,
            {"method": method[:200], "problem": "not a method name (interface.Method)"},
        )
    interface = match.group(1)
    if interface not in known:
        raise ApiError(
            ApiFault.INTERFACE_NOT_FOUND,
            {"interface": interface, "problem": f"this socket serves {', '.join(sorted(known))}"},
        )
    if method not in known[interface]:
        raise ApiError(ApiFault.METHOD_NOT_FOUND, {"method": method, "problem": "no such method"})


# -- replies (what the daemon writes) ---------------------------------------------------------------

_encoder = msgspec.json.Encoder()


def frame_parameters(payload: bytes, *, continues: bool = False) -> bytes:
    """A reply frame around already encoded ``parameters`` (a delta is encoded once for every subscriber)."""
    return b'{"parameters":' + payload + (b',"continues":true}\0' if continues else b"}\0")


def encode_reply(parameters: Mapping[str, Any], *, continues: bool = False) -> bytes:
    return frame_parameters(_encoder.encode(parameters), continues=continues)


def encode_error(error: ApiError) -> bytes:
    return _encoder.encode({"error": error.name, "parameters": error.parameters}) + b"\0"


def encode_call(
    method: str, parameters: Mapping[str, Any] | None = None, *, more: bool = False, oneway: bool = False
) -> bytes:
    call: dict[str, Any] = {"method": method, "parameters": dict(parameters or {})}
    if more:
        call["more"] = True
    if oneway:
        call["oneway"] = True
    return _encoder.encode(call) + b"\0"


# -- replies (what a client reads) ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Reply:
    """One reply as a client reads it: parameters, whether more follow, or an error name."""

    parameters: dict[str, Any]
    continues: bool = False
    error: str | None = None


def parse_reply(frame: bytes) -> Reply:
    """Decode one reply; a malformed one raises a fatal ``InvalidMessage`` (the daemon is not speaking our protocol)."""
    try:
        obj = _any_decoder.decode(frame)
    except (msgspec.DecodeError, RecursionError):
        raise ApiError(ApiFault.INVALID_MESSAGE, {"problem": "the reply is not JSON"}, fatal=True) from None
    if not isinstance(obj, dict):
        raise ApiError(ApiFault.INVALID_MESSAGE, {"problem": "the reply is not an object"}, fatal=True)
    parameters = obj.get("parameters") or {}
    error = obj.get("error")
    if not isinstance(parameters, dict) or not (error is None or isinstance(error, str)):
        raise ApiError(ApiFault.INVALID_MESSAGE, {"problem": "the reply has the wrong shape"}, fatal=True)
    return Reply(parameters, obj.get("continues") is True, error)
