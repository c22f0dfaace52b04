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
      "context": {"conversationId": "...", "agentId": "...", "sessionId": "...", "tokenExpired": true},
      "timestamp": "2024-05-14T09:32:11.004Z"
    }

Unknown keys are ignored (forward compatibility); a wrong type or value is an
:class:`EnvelopeError` naming the field.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from supervisor.errors import EnvelopeError
from supervisor.taxonomy.model import Channel, Platform

_Status = Annotated[int, msgspec.Meta(ge=0, le=9999)]
_CloseCode = Annotated[int, msgspec.Meta(ge=0, le=65535)]
_Short = Annotated[str, msgspec.Meta(max_length=2048)]


class RawError(msgspec.Struct, frozen=True, rename="camel"):
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


def _describe(exc: msgspec.ValidationError) -> str:
    text = str(exc)
    message, sep, where = text.partition(" - at `$")
    if sep:
        field = where.rstrip("`").lstrip(".") or "(envelope)"
        return f"field '{field}': {message[0].lower() + message[1:]}"
    return text[0].lower() + text[1:] if text else "invalid envelope"


def envelope_from_json(line: bytes | str) -> RawError:
    """Decode one NDJSON line into a RawError, or raise EnvelopeError saying why."""
    try:
        return _decoder.decode(line)
    except msgspec.ValidationError as exc:
        raise EnvelopeError(f"not a valid envelope: {_describe(exc)}") from None
    except msgspec.DecodeError as exc:
        raise EnvelopeError(f"not JSON: {exc}") from None


def envelope_from_object(obj: object) -> RawError:
    """Convert an already-parsed JSON value into a RawError, or raise EnvelopeError."""
    if not isinstance(obj, dict):
        raise EnvelopeError(f"not a valid envelope: expected a JSON object, got {type(obj).__name__}")
    try:
        return msgspec.convert(obj, RawError)
    except msgspec.ValidationError as exc:
        raise EnvelopeError(f"not a valid envelope: {_describe(exc)}") from None
