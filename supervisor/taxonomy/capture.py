"""What a captured failure keeps: its RawError reduced to what a taxonomy routes it by. Pure.

``[taxonomy] capture`` (docs/taxonomy.md, "Capture") writes one reduced envelope per classified
failure, the file ``taxonomy diff --replay`` and ``classify`` read. The reduction keeps, and keeps
only:

* ``platform``, ``channel``, ``method`` (an HTTP method or a Web Messaging action), ``status``,
  ``closeCode`` and ``exception``;
* the **route template** of the endpoint, never the URL: the host, the query and the fragment are
  dropped, and a path segment is kept only when it is a plain word (``conversations``,
  ``agent-sessions``, ``v2``) or a literal of an endpoint pattern of a loaded taxonomy; any other
  segment (an id, a token) becomes ``{id}``. The template matches exactly the operations the path
  matched: a pattern's literal is kept, and ``{id}`` is matched by ``*`` and ``**`` as the segment was;
* the headers the boundary allows (supervisor/boundary.py; handed in by the runtime);
* the **body fields the rules can match**: only the field a platform's normalizer reads the rawCode
  from (ErrorBody ``code``, OAuth ``error``, CXone ``error_code``, a Web Messaging ``class`` and
  ``code``, a notifications ``result`` or ``v2.system.*`` topic, an ErrorBody's ``status``), and its
  value only when a rule of a loaded taxonomy names it; another value becomes :data:`OTHER`, so the
  normalizer still reads that field (which field it reads depends on which are present) and no rule
  matches it. Messages, descriptions, details, ids, and everything else in a body are dropped;
* the token flags of ``context`` (``tokenExpired``, ``tokenWithinRefreshWindow``) when a rule matches
  them; nothing else of ``context``.

So a captured line routes as the failure did under every loaded taxonomy (the active one and the
shadow), and carries no secret, message or attribute value: what it keeps is either a number, a
word, or a string a taxonomy file itself contains.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from supervisor.taxonomy.classifier import split_endpoint
from supervisor.taxonomy.envelope import RawError
from supervisor.taxonomy.model import Channel, Platform
from supervisor.taxonomy.normalize import (
    body_object,
    canonical_exception,
    int_or_none,
    str_or_none,
    system_code,
)
from supervisor.taxonomy.rules import Taxonomy

__all__ = ["OTHER", "CaptureShape", "reduce_envelope", "route_template"]

#: a rawCode-bearing body field whose value no rule of a loaded taxonomy names
OTHER = "(other)"
#: a path segment that is neither a plain word nor a pattern's literal
ID = "{id}"
# a plain word of a path, an HTTP method or a Web Messaging action; a version (v2, v31.0); never a
# JWT-shaped string (base64url of '{"')
_WORD = re.compile(r"(?!eyJ)[A-Za-z][A-Za-z_-]{0,39}|v\d{1,3}(?:\.\d{1,3})?|\.well-known", re.ASCII)
_EXCEPTION = re.compile(r"[A-Za-z_][A-Za-z0-9_.]{0,199}", re.ASCII)
_HEADER_VALUE_MAX = 200
_TOKEN_FLAGS = ("tokenExpired", "tokenWithinRefreshWindow")


@dataclass(frozen=True, slots=True)
class CaptureShape:
    """What the loaded taxonomies can match, derived from their rules and operations."""

    #: every rawCode a rule names
    raw_codes: frozenset[str]
    #: the context flags a rule matches (``tokenExpired``, ``tokenWithinRefreshWindow``)
    context_flags: tuple[str, ...]
    #: the literal segments of every endpoint pattern, lower-cased
    literals: frozenset[str]
    #: the response headers kept (lower-case): the boundary's allowlist
    headers: frozenset[str]

    @classmethod
    def of(cls, taxonomies: Iterable[Taxonomy], headers: Iterable[str]) -> CaptureShape:
        raw_codes: set[str] = set()
        flags: set[str] = set()
        literals: set[str] = set()
        for taxonomy in taxonomies:
            for rule in taxonomy.rules:
                raw_codes.update(rule.raw_codes or ())
                if rule.token_expired is not None:
                    flags.add("tokenExpired")
                if rule.token_within_refresh_window is not None:
                    flags.add("tokenWithinRefreshWindow")
            for op in taxonomy.operations:
                for glob in op.endpoints or ():
                    literals.update(glob.literals)
        return cls(
            frozenset(raw_codes),
            tuple(f for f in _TOKEN_FLAGS if f in flags),
            frozenset(literals),
            frozenset(h.lower() for h in headers),
        )


def route_template(path: str | None, shape: CaptureShape) -> str | None:
    """``/api/v2/conversations/{id}/participants/{id}/attributes`` for a concrete path (module docstring)."""
    if path is None:
        return None
    if not path.startswith("/"):
        # a Web Messaging action names the endpoint ("configureSession"); anything else is not kept
        return path if _WORD.fullmatch(path) else None
    out = []
    for segment in path[1:].split("/"):
        if not segment or _WORD.fullmatch(segment) or segment.lower() in shape.literals:
            out.append(segment)
        else:
            out.append(ID)
    return "/" + "/".join(out)


def _kept(value: object, shape: CaptureShape) -> str | None:
    """A rawCode-bearing field's value: itself when a rule names it, else :data:`OTHER` (None stays None)."""
    if value == "":
        return ""  # present and empty: the normalizer still picks this field, and reads no rawCode
    code = str_or_none(value)
    if code is None:
        return None
    return code if code in shape.raw_codes else OTHER


def _error_fields(obj: dict[str, Any], shape: CaptureShape) -> dict[str, Any]:
    """The one field an error body's rawCode is read from, in the normalizer's order
    (``normalize._oauth_or_error_body``): CXone ``error_code``, OAuth ``error``, ErrorBody ``code``,
    ``errorCode``."""
    if "error_code" in obj:
        return {"error_code": _kept(obj["error_code"], shape)}
    if isinstance(obj.get("error"), str):
        return {"error": _kept(obj["error"], shape)}
    if isinstance(obj.get("code"), str):
        return {"code": _kept(obj["code"], shape)}
    if "errorCode" in obj:
        return {"errorCode": _kept(obj["errorCode"], shape)}
    return {}


def _web_messaging_body(obj: dict[str, Any], shape: CaptureShape) -> dict[str, Any]:
    if "class" not in obj:
        return _error_fields(obj, shape)
    cls = obj.get("class")
    out: dict[str, Any] = {}
    # class "string" (or not a string) is the text-message branch: no rawCode
    out["class"] = "string" if cls == "string" or not isinstance(cls, str) else _kept(cls, shape)
    code = int_or_none(obj.get("code"))
    if code is not None:
        out["code"] = code
    return out


def _notifications_body(obj: dict[str, Any], shape: CaptureShape) -> dict[str, Any]:
    topic = obj.get("topicName")
    if isinstance(topic, str) and topic.startswith("v2.system."):
        code = system_code(topic, obj.get("eventBody"))
        return {"topicName": code if code in shape.raw_codes else "v2.system." + OTHER}
    if "result" in obj:
        result = int_or_none(obj.get("result"))
        return {"result": str(result) if result is not None else OTHER}
    return _error_fields(obj, shape)


def _reduced_body(raw: RawError, shape: CaptureShape) -> dict[str, Any] | None:
    obj = body_object(raw.body)
    if obj is None:
        return None  # a text body: a message, nothing a rule matches
    if raw.channel is Channel.WEBMESSAGING and raw.platform is Platform.GENESYS:
        out = _web_messaging_body(obj, shape)
    elif raw.channel is Channel.NOTIFICATIONS:
        out = _notifications_body(obj, shape)
    else:
        out = _error_fields(obj, shape)
        status = obj.get("status")
        if raw.status is None and isinstance(status, int) and not isinstance(status, bool):
            out["status"] = status  # an ErrorBody's own status, read when the envelope has none
    return out or None


def reduce_envelope(raw: RawError, shape: CaptureShape) -> dict[str, Any]:
    """The capture line of ``raw``: a RawError envelope with only what routes it (module docstring)."""
    out: dict[str, Any] = {"platform": raw.platform.value, "channel": raw.channel.value}
    method, path, _ = split_endpoint(raw.method, raw.endpoint)
    if method is not None and _WORD.fullmatch(method):
        out["method"] = method
    template = route_template(path, shape)
    if template is not None:
        out["endpoint"] = template
    if raw.status is not None:
        out["status"] = raw.status
    if raw.headers:
        headers = {
            key.lower(): value
            for key, value in raw.headers.items()
            if key.lower() in shape.headers and isinstance(value, str) and len(value) <= _HEADER_VALUE_MAX
        }
        if headers:
            out["headers"] = headers
    body = _reduced_body(raw, shape)
    if body is not None:
        out["body"] = body
    if raw.close_code is not None:
        out["closeCode"] = raw.close_code
    if raw.exception:
        name = canonical_exception(raw.exception)
        if _EXCEPTION.fullmatch(name):
            out["exception"] = name
    context = raw.context or {}
    flags = {flag: True for flag in shape.context_flags if context.get(flag) is True}
    if flags:
        out["context"] = flags
    return out
