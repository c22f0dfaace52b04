"""Wire shapes of the Genesys simulator: ErrorBody, OAuth errors, Web Messaging envelopes.

Every shape cites its section of docs/platforms.md. Nothing here does I/O.
"""

from __future__ import annotations

import enum
from typing import Any

import msgspec
from aiohttp import web

from supervisor.clock import iso_utc

__all__ = [
    "ErrorCode",
    "WmClass",
    "error_body",
    "error_response",
    "iso_utc",
    "json_response",
    "oauth_error",
    "wm_envelope",
    "wm_error",
]

_ENCODER = msgspec.json.Encoder()


class ErrorCode(enum.StrEnum):
    """Platform REST ``code`` values with their statuses (docs/platforms.md, "Errors, limits and ids")."""

    BAD_REQUEST = "bad.request"
    INVALID_VALUE = "invalid.value"
    AUTHENTICATION_REQUIRED = "authentication.required"
    BAD_CREDENTIALS = "bad.credentials"
    NOT_AUTHORIZED = "not.authorized"
    MISSING_PERMISSIONS = "missing.permissions"
    NOT_FOUND = "not.found"
    METHOD_NOT_ALLOWED = "method.not.allowed"
    UNSUPPORTED_MEDIA_TYPE = "unsupported.media.type"
    CONFLICT = "conflict"  # §5: [I] no source documents the duplicate-message 409
    TOO_MANY_REQUESTS = "too.many.requests"
    QUEUE_FULL = "QUEUE_FULL"  # §8 / the seed's fail-fast trigger [I]
    INTERNAL_SERVER_ERROR = "internal.server.error"
    BAD_GATEWAY = "bad.gateway"
    SERVICE_UNAVAILABLE = "service.unavailable"
    REQUEST_TIMEOUT = "request.timeout"


#: messages used by the real platform for the codes (§3, quoted by the Go client)
_MESSAGES: dict[ErrorCode, str] = {
    ErrorCode.BAD_REQUEST: "The request could not be understood by the server due to malformed syntax.",
    ErrorCode.AUTHENTICATION_REQUIRED: "No authentication bearer token specified in authorization header.",
    ErrorCode.BAD_CREDENTIALS: "Invalid login credentials.",
    ErrorCode.NOT_FOUND: "The requested resource was not found.",
    ErrorCode.MISSING_PERMISSIONS: "Unable to perform the requested action. You are missing the following permission(s).",
    ErrorCode.METHOD_NOT_ALLOWED: "HTTP method not allowed for this resource.",
    ErrorCode.UNSUPPORTED_MEDIA_TYPE: "Unsupported Media Type - Unsupported or incorrect media type.",
    ErrorCode.INTERNAL_SERVER_ERROR: "The server encountered an unexpected condition.",
    ErrorCode.BAD_GATEWAY: "The server received an invalid response from an upstream server.",
    ErrorCode.SERVICE_UNAVAILABLE: "Service Unavailable - The server is currently unavailable.",
    ErrorCode.REQUEST_TIMEOUT: "The request timed out.",
    ErrorCode.QUEUE_FULL: "Queue capacity exhausted; the request was not queued.",
}

#: the code a 5xx burst answers with (§3)
STATUS_CODES: dict[int, ErrorCode] = {
    500: ErrorCode.INTERNAL_SERVER_ERROR,
    502: ErrorCode.BAD_GATEWAY,
    503: ErrorCode.SERVICE_UNAVAILABLE,
    504: ErrorCode.REQUEST_TIMEOUT,
}


def error_body(
    status: int,
    code: ErrorCode | str,
    context_id: str,
    message: str | None = None,
    details: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A Platform ``ErrorBody`` (§3): message, code, status, contextId, details, errors."""
    text = message if message is not None else _MESSAGES.get(ErrorCode(code), str(code))
    return {
        "message": text,
        "code": str(code),
        "status": status,
        "contextId": context_id,
        "details": details or [],
        "errors": [],
    }


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    """A JSON response encoded with msgspec (cheaper than the stdlib on the hot path)."""
    return web.Response(
        body=_ENCODER.encode(body), status=status, headers=headers, content_type="application/json"
    )


def error_response(
    status: int,
    code: ErrorCode | str,
    context_id: str,
    message: str | None = None,
    headers: dict[str, str] | None = None,
    details: list[dict[str, Any]] | None = None,
) -> web.Response:
    """An ErrorBody response with the ``ININ-Correlation-Id`` header (§3)."""
    all_headers = {"ININ-Correlation-Id": context_id, **(headers or {})}
    return json_response(error_body(status, code, context_id, message, details), status, all_headers)


def oauth_error(
    status: int, error: str, description: str, headers: dict[str, str] | None = None
) -> web.Response:
    """The login host's OAuth-style error (§4): ``{"error","description","error_description"}``."""
    body = {"error": error, "description": description, "error_description": description}
    return json_response(body, status, headers)


class WmClass(enum.StrEnum):
    """Web Messaging ``class`` names (§1, GMT MessageClassName.kt)."""

    STRING = "string"
    SESSION_RESPONSE = "SessionResponse"
    STRUCTURED_MESSAGE = "StructuredMessage"
    JWT_RESPONSE = "JwtResponse"
    SESSION_EXPIRED_EVENT = "SessionExpiredEvent"
    TOO_MANY_REQUESTS = "TooManyRequestsErrorMessage"
    CONNECTION_CLOSED_EVENT = "ConnectionClosedEvent"
    SESSION_CLEARED_EVENT = "SessionClearedEvent"


class WmCode(enum.IntEnum):
    """Web Messaging message ``code`` values (§1, GMT ErrorCode.kt); not close codes."""

    FEATURE_UNAVAILABLE = 4000
    SESSION_HAS_EXPIRED = 4006
    SESSION_NOT_FOUND = 4007
    MESSAGE_TOO_LONG = 4011
    CUSTOM_ATTRIBUTE_SIZE_TOO_LARGE = 4013
    MISSING_PARAMETER = 4020
    REQUEST_RATE_TOO_HIGH = 4029
    UNEXPECTED_ERROR = 5000


def wm_envelope(kind: str, cls: WmClass, code: int, body: Any, tracing_id: str | None = None) -> bytes:
    """``{"type","class","code","body","tracingId"?}`` encoded as a text frame payload (§1)."""
    env: dict[str, Any] = {"type": kind, "class": cls.value, "code": code, "body": body}
    if tracing_id is not None:
        env["tracingId"] = tracing_id
    return _ENCODER.encode(env)


def wm_error(code: int, text: str, tracing_id: str | None = None) -> bytes:
    """An error response: ``class:"string"``, body = the message text (§1)."""
    return wm_envelope("response", WmClass.STRING, code, text, tracing_id)


def encode(obj: Any) -> bytes:
    """JSON bytes (for notification frames)."""
    return _ENCODER.encode(obj)
