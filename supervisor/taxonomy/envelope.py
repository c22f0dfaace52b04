"""The RawError envelope: how any failure, from any transport, enters the taxonomy.

A JSON object (documented in docs/taxonomy.md)::

    {
      "platform": "genesys" | "cxone",                                    required
      "channel": "rest" | "webmessaging" | "notifications" | "agent-session" | "sip",  required
      "method": "POST",            HTTP method, Web Messaging action, or SIP method
      "endpoint": "/api/v2/...",   path (a full URL or "METHOD /path" is accepted)
      "status": 429,               HTTP status, Web Messaging `code`, or SIP status
      "headers": {"Retry-After": "3"},
      "body": {...} | "text",      the response or server message as received
      "closeCode": 1006,           WebSocket close code
      "exception": "httpx.ConnectTimeout",   a transport exception's qualified name
      "context": {"conversationId": "...", "agentId": "...", "sessionId": "...",
                  "tokenExpired": true, "tokenWithinRefreshWindow": true},
      "timestamp": "2024-05-14T09:32:11.004Z"
    }

Nothing is guessed (docs/taxonomy.md, "The RawError envelope"): an unknown top-level key is
refused, not ignored (an ``SDK_ERROR_CLASSIFIED`` line fed back in used to be read as an envelope
with nothing in it and called UNKNOWN_ERROR), and a line with ``event`` is named for what it is, an
SdkErrorEvent; a wrong type or value is an :class:`EnvelopeError` naming the field. A line longer than :data:`MAX_LINE_BYTES` or nested
deeper than :data:`MAX_NESTING` levels is refused the same way (docs/taxonomy.md, "Limits"):
decoding must never depend on how much stack happens to be left.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any

import msgspec

from supervisor.errors import EnvelopeError
from supervisor.taxonomy.model import Channel, Platform

#: the longest NDJSON line (one envelope) read or decoded: a recorded error is a few KiB at most
MAX_LINE_BYTES = 1024 * 1024
#: the deepest nesting of arrays and objects accepted in any JSON or TOML document we read
MAX_NESTING = 64

_Status = Annotated[int, msgspec.Meta(ge=0, le=9999)]
_CloseCode = Annotated[int, msgspec.Meta(ge=0, le=65535)]
_Short = Annotated[str, msgspec.Meta(max_length=2048)]


class RawError(msgspec.Struct, frozen=True, rename="camel", forbid_unknown_fields=True):
    """One raw failure (or raw response) as a transport saw it."""

    platform: Platform
    channel: Channel
    method: _Short | None = None
    endpoint: _Short | None = None
    status: _Status | None = None
    headers: dict[str, Any] | None = None
    body: Any = None
    close_code: _CloseCode | None = None
    exception: _Short | None = None
    context: dict[str, Any] | None = None
    timestamp: _Short | None = None


_decoder = msgspec.json.Decoder(RawError)
_TOO_DEEP = f"nested deeper than {MAX_NESTING} levels"
#: what a line that carries ``event`` is told: it is a classified event, not what classify reads
NOT_A_RAW_ERROR = "an SdkErrorEvent, not a RawError (capture them with [taxonomy] capture)"


def nesting_exceeds(value: object, limit: int = MAX_NESTING) -> bool:
    """Whether ``value`` (decoded JSON or TOML) nests lists, tuples and dicts deeper than ``limit``.

    Iterative, so a deep value cannot exhaust the stack while being measured.
    """
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Iterable[object] = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth >= limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def _brackets(line: bytes | str) -> int:
    if isinstance(line, bytes):
        return line.count(b"[") + line.count(b"{")
    return line.count("[") + line.count("{")


#: the envelope's top-level keys, as a refusal of another one lists them
FIELDS = tuple(f.encode_name for f in msgspec.structs.fields(RawError))


def _describe(exc: msgspec.ValidationError) -> str:
    text = str(exc)
    if text.startswith("Object contains unknown field `") and " - at `$." not in text:
        # only the envelope's own keys are checked (headers, body, context are free-form)
        name = text.removeprefix("Object contains unknown field `").partition("`")[0]
        # repr: a key may hold a newline or anything else; the refusal stays one short line
        return f"unknown field {name[:64]!r} (known: {', '.join(FIELDS)})"
    message, sep, where = text.partition(" - at `$")
    if sep:
        field = where.rstrip("`").lstrip(".") or "(envelope)"
        return f"field '{field}': {message[0].lower() + message[1:]}"
    return text[0].lower() + text[1:] if text else "invalid envelope"


def _names_an_event(line: bytes | str) -> bool:
    """Whether a line that failed to decode as an envelope is a JSON object with ``event`` (read
    again only on that failure path: a valid envelope never pays for it)."""
    try:
        obj = msgspec.json.decode(line)
    except (msgspec.DecodeError, RecursionError):
        return False
    return isinstance(obj, dict) and "event" in obj


def envelope_from_json(line: bytes | str) -> RawError:
    """Decode one NDJSON line into a RawError, or raise EnvelopeError saying why."""
    data = line if isinstance(line, bytes) else line.encode()
    if len(data) > MAX_LINE_BYTES and len(data.rstrip(b"\r\n")) > MAX_LINE_BYTES:  # the ending is not counted
        raise EnvelopeError(f"longer than the {MAX_LINE_BYTES // 1024 // 1024} MiB line cap")
    try:
        raw = _decoder.decode(line)
    except msgspec.ValidationError as exc:
        if _names_an_event(line):
            raise EnvelopeError(NOT_A_RAW_ERROR) from None
        raise EnvelopeError(f"not a valid envelope: {_describe(exc)}") from None
    except msgspec.DecodeError as exc:
        raise EnvelopeError(f"not JSON: {exc}") from None
    except RecursionError:
        # msgspec ran out of stack first: far deeper than MAX_NESTING
        raise EnvelopeError(f"not a valid envelope: {_TOO_DEEP}") from None
    # counting brackets is cheap and bounds the depth from above: measure only when it could exceed
    if _brackets(line) > MAX_NESTING and nesting_exceeds([raw.headers, raw.body, raw.context], MAX_NESTING):
        raise EnvelopeError(f"not a valid envelope: {_TOO_DEEP}")
    return raw


def envelope_from_object(obj: object) -> RawError:
    """Convert an already-parsed JSON value into a RawError, or raise EnvelopeError."""
    if not isinstance(obj, dict):
        raise EnvelopeError(f"not a valid envelope: expected a JSON object, got {type(obj).__name__}")
    if nesting_exceeds(obj, MAX_NESTING):
        raise EnvelopeError(f"not a valid envelope: {_TOO_DEEP}")
    if "event" in obj:
        raise EnvelopeError(NOT_A_RAW_ERROR)
    try:
        return msgspec.convert(obj, RawError)
    except msgspec.ValidationError as exc:
        raise EnvelopeError(f"not a valid envelope: {_describe(exc)}") from None
