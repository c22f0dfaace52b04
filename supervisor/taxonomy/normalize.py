"""Platform normalizers: every documented wire shape → (rawStatus, rawCode, Retry-After, details).

Pure functions over a :class:`RawError`. Wire shapes are those of
docs/platforms.md (cited per branch). The normalizers extract; they never decide:
routing is the taxonomy's (data) job.
"""

from __future__ import annotations

import json
from http import HTTPStatus
from typing import Any, NamedTuple

from supervisor.errors import EnvelopeError
from supervisor.taxonomy.envelope import RawError
from supervisor.taxonomy.headers import parse_retry_after_ms
from supervisor.taxonomy.model import Channel, Platform
from supervisor.vocabulary.close_codes import CloseCode

# Web Messaging message codes (GMT ErrorCode.kt, docs/platforms.md, "Genesys Cloud Web Messaging")
WEB_MESSAGING_CODES: dict[int, str] = {
    4000: "FeatureUnavailable",
    4001: "FileTypeInvalid",
    4002: "FileSizeInvalid",
    4003: "FileContentInvalid",
    4004: "FileNameInvalid",
    4005: "FileNameTooLong",
    4006: "SessionHasExpired",
    4007: "SessionNotFound",
    4008: "AttachmentHasExpired",
    4009: "AttachmentNotFound",
    4010: "AttachmentNotSuccessfullyUploaded",
    4011: "MessageTooLong",
    4013: "CustomAttributeSizeTooLarge",
    4017: "CannotDowngradeToUnauthenticated",
    4020: "MissingParameter",
    4029: "RequestRateTooHigh",
    5000: "UnexpectedError",
}

# RFC 6455 section 7.4.1 and the IANA registry: the vocabulary's names (an event's rawCode)
CLOSE_CODE_NAMES: dict[int, str] = {code.value: code.name for code in CloseCode}

_HTTP_NAMES: dict[int, str] = {s.value: s.name for s in HTTPStatus}
_DETAILS_MAX = 200
# exception modules whose public name is shorter than their defining module
_PUBLIC_PREFIXES = (("httpx.", "httpx."), ("websockets.", "websockets.exceptions."), ("anyio.", "anyio."))


class Signal(NamedTuple):
    """What a normalizer extracted from one envelope."""

    status: int | None
    raw_code: str | None
    retry_after_ms: int | None
    details: str | None


def status_name(status: int) -> str:
    """A stable identifier for a bare status: ``GATEWAY_TIMEOUT``, ``SessionHasExpired``, ``SIP_603``."""
    name = _HTTP_NAMES.get(status) or WEB_MESSAGING_CODES.get(status)
    return name if name is not None else f"STATUS_{status}"


def canonical_exception(name: str) -> str:
    """``httpx._exceptions.ConnectTimeout`` → ``httpx.ConnectTimeout``; ``builtins.OSError`` → ``OSError``.

    Transports name exceptions by ``type(exc).__module__ + "." + __qualname__``; the taxonomy
    lists public names, so private module segments are dropped here.
    """
    name = name.strip()
    if name.startswith("builtins."):
        return name[len("builtins.") :]
    if name.startswith(("asyncio.exceptions.TimeoutError", "asyncio.TimeoutError")):
        return "TimeoutError"
    for prefix, public in _PUBLIC_PREFIXES:
        if name.startswith(prefix) and "." in name[len(prefix) :]:
            return public + name.rsplit(".", 1)[1]
    if name.startswith("json.decoder."):
        return "json." + name.rsplit(".", 1)[1]
    return name


def _text(value: object) -> str | None:
    if value is None:
        return None
    text = value if isinstance(value, str) else json.dumps(value, default=str)[:_DETAILS_MAX]
    text = text.strip()
    return text[:_DETAILS_MAX] if text else None


def _header(headers: dict[str, Any] | None, wanted: str) -> object:
    if not headers:
        return None
    for key, value in headers.items():
        if key.lower() == wanted:
            return value[0] if isinstance(value, list) and value else value
    return None


def body_object(body: object) -> dict[str, Any] | None:
    """The body as a JSON object, parsing a string that holds one."""
    if isinstance(body, dict):
        return body
    if isinstance(body, str) and body.lstrip().startswith("{"):
        try:
            parsed = json.loads(body)
        except ValueError:
            return None
        return parsed if isinstance(parsed, dict) else None
    return None


def str_or_none(value: object) -> str | None:
    if isinstance(value, str) and value:
        return value[:_DETAILS_MAX]
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


def int_or_none(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        text = value.strip()
        # ASCII digits only: "²".isdigit() is True but int("²") raises
        if text.isascii() and text.isdigit() and len(text) <= 9:
            return int(text)
    return None


def _oauth_or_error_body(obj: dict[str, Any]) -> tuple[str | None, str | None]:
    """Genesys ErrorBody (``code``/``message``), OAuth (``error``/``description``) or
    CXone (``error_code``/``error_message``) → (rawCode, details). docs/platforms.md, "Errors, limits and ids", "Errors, event shapes and limits"."""
    if "error_code" in obj:
        return str_or_none(obj.get("error_code")), _text(obj.get("error_message"))
    if "error" in obj and isinstance(obj.get("error"), str):
        details = obj.get("error_description") or obj.get("description")
        return str_or_none(obj["error"]), _text(details)
    if "code" in obj and isinstance(obj.get("code"), str):
        return str_or_none(obj["code"]), _text(obj.get("message"))
    if "errorCode" in obj:
        return str_or_none(obj.get("errorCode")), _text(obj.get("errorMessage") or obj.get("message"))
    return None, _text(obj.get("message"))


def _web_messaging(raw: RawError, obj: dict[str, Any] | None) -> Signal:
    """``{"type","class","code","body"}`` envelopes (docs/platforms.md, "Genesys Cloud Web Messaging")."""
    status = raw.status
    if obj is None or "class" not in obj:
        if obj is not None:
            body_code, body_details = _oauth_or_error_body(obj)
            return Signal(status, body_code, None, body_details)
        return Signal(status, None, None, _text(raw.body))
    cls = obj.get("class")
    code = int_or_none(obj.get("code"))
    if status is None:
        status = code
    inner = obj.get("body")
    retry_after_ms: int | None = None
    details: str | None
    if cls == "string" or not isinstance(cls, str):
        # class "string": body is the message text, code is HTTP-like or 4xxx
        raw_code = None
        details = _text(inner)
    else:
        raw_code = cls
        details = None
        if isinstance(inner, dict):
            if cls == "TooManyRequestsErrorMessage":
                seconds = inner.get("retryAfter")
                if (
                    isinstance(seconds, int | float)
                    and not isinstance(seconds, bool)
                    and 0 <= seconds < 10**9
                ):
                    retry_after_ms = int(seconds * 1000)
                details = _text(inner.get("errorMessage"))
            else:
                details = _text(inner.get("reason") or inner.get("message") or None)
    return Signal(status, raw_code, retry_after_ms, details)


def system_code(topic: str, event_body: object) -> str:
    """A system topic's rawCode: ``v2.system.`` + the body's ``systemTopicType`` when it has one.

    PY269's SystemMessageSystemMessage carries ``systemTopicType`` (``token_revoked``,
    ``no_longer_subscribed``, ``subscription_changed``); the topic name itself may carry more (Genesys'
    streaming client matches ``v2.system.no_longer_subscribed*``), so the type is what names it [I].
    """
    kind = event_body.get("systemTopicType") if isinstance(event_body, dict) else None
    if isinstance(kind, str) and 0 < len(kind) <= 64 and kind.replace("_", "").isalpha() and kind.isascii():
        return "v2.system." + kind.lower()
    return topic


def _notifications(raw: RawError, obj: dict[str, Any] | None) -> Signal:
    """Channel socket messages: ``{"result":"404",...}`` and system topics (docs/platforms.md, "Genesys Cloud notifications")."""
    if obj is None:
        return Signal(raw.status, None, None, _text(raw.body))
    topic = obj.get("topicName")
    if isinstance(topic, str) and topic.startswith("v2.system."):
        event_body = obj.get("eventBody")
        reason = (
            event_body.get("reason") or event_body.get("message") if isinstance(event_body, dict) else None
        )
        return Signal(raw.status, system_code(topic, event_body)[:_DETAILS_MAX], None, _text(reason))
    status = raw.status if raw.status is not None else int_or_none(obj.get("result"))
    if "result" in obj:
        return Signal(status, None, None, _text(obj.get("message")))
    raw_code, details = _oauth_or_error_body(obj)
    return Signal(status, raw_code, None, details)


def _http_like(raw: RawError, obj: dict[str, Any] | None) -> Signal:
    """REST, CXone agent sessions and SIP: status plus an optional error body."""
    if obj is not None:
        raw_code, details = _oauth_or_error_body(obj)
        status = raw.status
        if status is None and isinstance(obj.get("status"), int) and not isinstance(obj.get("status"), bool):
            status = obj["status"]  # a Genesys ErrorBody carries its own status
        return Signal(status, raw_code, None, details)
    # CXone often answers with an empty body: the status line is all there is (docs/platforms.md, "Errors, event shapes and limits")
    return Signal(raw.status, None, None, _text(raw.body))


def normalize(raw: RawError, now_epoch: float) -> Signal:
    """Extract the signal of one envelope; never raises on any JSON-shaped input."""
    obj = body_object(raw.body)
    channel = raw.channel
    if channel is Channel.WEBMESSAGING and raw.platform is Platform.GENESYS:
        signal = _web_messaging(raw, obj)
    elif channel is Channel.NOTIFICATIONS:
        signal = _notifications(raw, obj)
    else:
        signal = _http_like(raw, obj)
    retry_header = _header(raw.headers, "retry-after")
    if retry_header is not None and signal.retry_after_ms is None:
        signal = signal._replace(retry_after_ms=parse_retry_after_ms(retry_header, now_epoch))
    if signal.raw_code is None and signal.status is not None:
        signal = signal._replace(raw_code=status_name(signal.status))
    return signal


#: channels whose failures may arrive as a server message on a socket, with no status line
_SOCKET_MESSAGES = frozenset({Channel.WEBMESSAGING, Channel.NOTIFICATIONS})
NOTHING_TO_CLASSIFY = (
    "not a valid envelope: nothing to classify it by: give status, closeCode or exception "
    "(a webmessaging or notifications envelope may instead carry the server's message in body)"
)


def require_evidence(raw: RawError) -> None:
    """No guessing (docs/taxonomy.md, "The RawError envelope"): raise :class:`EnvelopeError` for an
    envelope with nothing a taxonomy routes by.

    It needs a ``status``, a ``closeCode`` or an ``exception``; a Web Messaging or notifications
    envelope may instead carry the server's message in ``body`` (a socket message has no status
    line: a ``SessionExpiredEvent``, a ``v2.system.*`` topic), when the normalizer reads a status or
    a rawCode from it. Anything else would be routed by the catch-all rule: a guess.
    """
    if raw.status is not None or raw.close_code is not None or raw.exception:
        return
    if raw.channel in _SOCKET_MESSAGES and raw.body is not None:
        signal = normalize(raw, 0.0)
        if signal.status is not None or signal.raw_code is not None:
            return
    raise EnvelopeError(NOTHING_TO_CLASSIFY)
