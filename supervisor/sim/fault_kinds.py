"""Fault kinds and their parameters: the vocabulary of :mod:`supervisor.sim.faults`.

Import these names from :mod:`supervisor.sim.faults` (which re-exports them); this module
only keeps the kind table and the param validators apart from the controller.
"""

from __future__ import annotations

import email.utils
import enum
import fnmatch
import math
from collections.abc import Callable
from typing import Any

import msgspec

from supervisor.errors import SimulatorError
from supervisor.vocabulary import CloseCode

__all__ = [
    "CONNECTION_KINDS",
    "FIELD_RULES",
    "MAX_AT_S",
    "MAX_COUNT",
    "MAX_DURATION_S",
    "MAX_ENDPOINT_CHARS",
    "PARAM_SPECS",
    "Fault",
    "FaultKind",
    "retry_after_header",
    "retry_after_seconds",
]


class FaultKind(enum.StrEnum):
    """What a fault does; the value is the JSON spelling used by the admin API."""

    DROP = "drop"
    CLOSE = "close"
    BLACKHOLE = "blackhole"
    ADMISSION_LIMIT = "admission_limit"
    RATE_LIMIT_STORM = "rate_limit_storm"
    SERVER_ERROR_BURST = "server_error_burst"
    LATENCY = "latency"
    TOKEN_EXPIRE = "token_expire"
    TOKEN_REVOKE = "token_revoke"
    MISSING_FIELDS = "missing_fields"
    CONVERSATION_DRIFT = "conversation_drift"
    DUPLICATE_MESSAGE = "duplicate_message"
    QUEUE_FULL = "queue_full"
    SILENT_DROP_ATTRIBUTES = "silent_drop_attributes"
    SESSION_EXPIRED = "session_expired"
    CONNECTION_CLOSED_EVENT = "connection_closed_event"
    SOCKET_CLOSING = "socket_closing"
    # Genesys notifications: one of the other v2.system topics PY269 names (docs/runtime.md, "Notifications rollover")
    SYSTEM_TOPIC = "system_topic"
    SESSION_ENDED = "session_ended"
    STALE_SESSION = "stale_session"
    MALFORMED_BODY = "malformed_body"
    # Web Messaging: a guest message is stored (it reaches the conversation and the guest history)
    # but its echo is never sent, ``count`` times: the send's answer is lost, the message is not
    DROP_ECHO = "drop_echo"


#: kinds that act on open connections through :meth:`FaultController.on_activate`
CONNECTION_KINDS: frozenset[FaultKind] = frozenset(
    {
        FaultKind.DROP,
        FaultKind.CLOSE,
        FaultKind.BLACKHOLE,
        FaultKind.SOCKET_CLOSING,
        FaultKind.SYSTEM_TOPIC,
        FaultKind.CONNECTION_CLOSED_EVENT,
        FaultKind.SESSION_EXPIRED,
    }
)

# Bounds of every number a fault takes (docs/simulators.md, "Admin API"): a value past them (or NaN,
# or Infinity) would hang requests, overflow the clock or make GET /faults invalid JSON.
MAX_AT_S = 86_400  # a fault starts at most a day from now
MAX_DURATION_S = 86_400  # and lasts at most a day (null: until cleared)
MAX_COUNT = 1_000_000_000
MAX_ENDPOINT_CHARS = 200
_MAX_LATENCY_MS = 600_000  # ten minutes
_MAX_RATE_PER_S = 1_000_000
_MAX_RETRY_AFTER_S = 86_400
_MAX_LEAD_S = 3_600
_MAX_FIELDS = 50
#: what each numeric Fault field takes: said the same way for a wrong type and a value out of bounds
FIELD_RULES = {
    "share": "must be between 0 and 1",
    "at": f"must be a finite number from 0 to {MAX_AT_S} (seconds from now)",
    "duration_s": f"must be a finite number > 0 and <= {MAX_DURATION_S}, or null (until cleared)",
    "count": f"must be an integer from 1 to {MAX_COUNT}, or null (unlimited)",
}

# RFC 6455 §7.4.1 codes a server may send, plus the private range 4000-4999 (docs/platforms.md, "WebSocket close codes")
SERVER_CLOSE_CODES = (
    CloseCode.NORMAL_CLOSURE,
    CloseCode.GOING_AWAY,
    CloseCode.POLICY_VIOLATION,
    CloseCode.INTERNAL_ERROR,
    CloseCode.SERVICE_RESTART,
    CloseCode.TRY_AGAIN_LATER,
)


# -- param validators: each returns None when fine, else the problem in a few words ----------------------


def _seconds_text(text: str) -> bool:
    # ASCII digits only: str.isdigit() also accepts "²" and other digits int() refuses
    return text.isascii() and text.isdigit() and len(text) <= 6 and int(text) <= _MAX_RETRY_AFTER_S


def _retry_after(value: object) -> str | None:
    if value is None or value == "http-date":
        return None
    if isinstance(value, str) and value.startswith("http-date:") and _seconds_text(value[10:]):
        return None
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _MAX_RETRY_AFTER_S:
        return None
    if isinstance(value, str) and _seconds_text(value):
        return None
    return (
        f'must be "<seconds>", "http-date", "http-date:<seconds>" or null, '
        f"with seconds from 0 to {_MAX_RETRY_AFTER_S}"
    )


def _one_of(*choices: object) -> Callable[[object], str | None]:
    def check(value: object) -> str | None:
        if isinstance(value, bool) or value not in choices:
            return "must be one of " + ", ".join(str(c) for c in choices)
        return None

    return check


def _close_code(value: object) -> str | None:
    is_int = isinstance(value, int) and not isinstance(value, bool)
    if is_int and (value in SERVER_CLOSE_CODES or 4000 <= value <= 4999):  # type: ignore[operator]
        return None
    return "must be one of " + ", ".join(str(c.value) for c in SERVER_CLOSE_CODES) + " or 4000-4999"


def _number(minimum: float, maximum: float) -> Callable[[object], str | None]:
    def check(value: object) -> str | None:
        # NaN compares false with everything, so it is refused by name, not by the range
        ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        if not ok or not minimum <= value <= maximum:  # type: ignore[operator]
            return f"must be a finite number from {_fmt(minimum)} to {_fmt(maximum)}"
        return None

    return check


def _fmt(number: float) -> str:
    return str(int(number)) if float(number).is_integer() else f"{number:g}"


def _int_range(minimum: int, maximum: int) -> Callable[[object], str | None]:
    def check(value: object) -> str | None:
        if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
            return f"must be an integer from {minimum} to {maximum}"
        return None

    return check


def _opt_str(value: object) -> str | None:
    ok = value is None or (isinstance(value, str) and len(value) <= 200)
    return None if ok else "must be a short string"


def _fields(value: object) -> str | None:
    if (
        isinstance(value, list)
        and 0 < len(value) <= _MAX_FIELDS
        and all(isinstance(v, str) and 0 < len(v) <= 200 for v in value)
    ):
        return None
    return f"must be a list of 1 to {_MAX_FIELDS} field names"


def _opt_topics(value: object) -> str | None:
    if value is None:
        return None
    if (
        isinstance(value, list)
        and len(value) <= _MAX_FIELDS
        and all(isinstance(v, str) and 0 < len(v) <= 200 for v in value)
    ):
        return None
    return f"must be a list of at most {_MAX_FIELDS} topics, or null"


def _lead(value: object) -> str | None:
    return None if value is None else _number(0.0, _MAX_LEAD_S)(value)


_Spec = dict[str, tuple[bool, Any, Callable[[object], str | None]]]

#: per kind: param name -> (required, default, validator)
PARAM_SPECS: dict[FaultKind, _Spec] = {
    FaultKind.DROP: {},
    FaultKind.CLOSE: {"code": (True, None, _close_code), "reason": (False, "", _opt_str)},
    FaultKind.BLACKHOLE: {},
    FaultKind.ADMISSION_LIMIT: {
        # 0 refuses every handshake (a closed door); otherwise at most N per clock second
        "rate_per_s": (True, None, _number(0.0, _MAX_RATE_PER_S)),
        "status": (False, 429, _one_of(429, 503)),
        "retry_after": (False, "1", _retry_after),
        "body": (False, None, _one_of("json", "empty", None)),
    },
    FaultKind.RATE_LIMIT_STORM: {
        "retry_after": (False, "5", _retry_after),
        "body": (False, None, _one_of("json", "empty", None)),
        # the error's human-readable text (ErrorBody message, error_description, a Web Messaging
        # errorMessage), which a platform may fill with what it was sent: what the daemon must never keep
        "message": (False, None, _opt_str),
    },
    FaultKind.SERVER_ERROR_BURST: {
        "status": (False, 503, _one_of(500, 502, 503, 504)),
        "retry_after": (False, None, _retry_after),
        "body": (False, None, _one_of("json", "empty", None)),
        "message": (False, None, _opt_str),
    },
    FaultKind.LATENCY: {"latency_ms": (True, None, _number(0.0, _MAX_LATENCY_MS))},
    FaultKind.TOKEN_EXPIRE: {},
    FaultKind.TOKEN_REVOKE: {},
    # one field each platform's session response really carries and the daemon requires (taxonomy
    # v1 [responses]): Web Messaging SessionResponse.connected, a REST resource's id, CXone's sessionId
    FaultKind.MISSING_FIELDS: {"fields": (False, ["connected", "id", "sessionId"], _fields)},
    FaultKind.CONVERSATION_DRIFT: {"conversation_id": (False, None, _opt_str)},
    FaultKind.DUPLICATE_MESSAGE: {},
    FaultKind.QUEUE_FULL: {
        "retry_after": (False, None, _retry_after),
        "body": (False, None, _one_of("json", "empty", None)),
    },
    FaultKind.SILENT_DROP_ATTRIBUTES: {"after": (False, 0, _int_range(0, MAX_COUNT))},
    FaultKind.SESSION_EXPIRED: {"mode": (False, "event", _one_of("event", "code"))},
    FaultKind.CONNECTION_CLOSED_EVENT: {"reason": (False, None, _opt_str)},
    FaultKind.SOCKET_CLOSING: {
        "lead_s": (False, None, _lead),
        "code": (False, CloseCode.GOING_AWAY.value, _close_code),
    },
    # PY269 SystemMessageSystemMessage: systemTopicType and reason; ``topics`` is the channel's new
    # subscription list after a subscription_changed (default: none left)
    FaultKind.SYSTEM_TOPIC: {
        "type": (True, None, _one_of("no_longer_subscribed", "subscription_changed", "token_revoked")),
        "reason": (False, None, _opt_str),
        "topics": (False, None, _opt_topics),
    },
    FaultKind.SESSION_ENDED: {},
    FaultKind.STALE_SESSION: {},
    FaultKind.MALFORMED_BODY: {},
    FaultKind.DROP_ECHO: {},
}


def retry_after_header(value: object, now_epoch: float) -> str | None:
    """The ``Retry-After`` value a fault's ``retry_after`` param asks for (RFC 9110 §10.2.3).

    ``"5"`` or ``5`` -> ``"5"``; ``"http-date"`` -> an IMF-fixdate 5 s after ``now_epoch``;
    ``"http-date:N"`` -> N s after it; None -> None (no header).
    """
    if value is None:
        return None
    if isinstance(value, str) and value.startswith("http-date"):
        delay = int(value[10:]) if value.startswith("http-date:") else _HTTP_DATE_DELAY_S
        return email.utils.formatdate(now_epoch + delay, usegmt=True)
    return str(value)


def retry_after_seconds(value: object) -> int | None:
    """The delay in whole seconds a ``retry_after`` param stands for (``"http-date"`` counts 5 s)."""
    if value is None:
        return None
    if isinstance(value, str) and value.startswith("http-date"):
        return int(value[10:]) if value.startswith("http-date:") else _HTTP_DATE_DELAY_S
    return int(str(value))


_HTTP_DATE_DELAY_S = 5


class Fault(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """One injected fault; see the module docstring for the fields and each kind's params."""

    kind: FaultKind
    share: float = 1.0
    at: float = 0.0
    duration_s: float | None = None
    count: int | None = None
    endpoint: str | None = None
    params: dict[str, Any] = msgspec.field(default_factory=dict)
    id: str | None = None

    def validate(self) -> Fault:
        """Check ranges and the kind's params; fill param defaults. Returns self.

        Raises :class:`SimulatorError` with one line naming the field.
        """
        # written so NaN fails each test (every comparison with it is false)
        if not 0.0 <= self.share <= 1.0:
            raise SimulatorError(f"fault.share: {FIELD_RULES['share']}")
        if not (math.isfinite(self.at) and 0 <= self.at <= MAX_AT_S):
            raise SimulatorError(f"fault.at: {FIELD_RULES['at']}")
        if self.duration_s is not None and not (
            math.isfinite(self.duration_s) and 0 < self.duration_s <= MAX_DURATION_S
        ):
            raise SimulatorError(f"fault.duration_s: {FIELD_RULES['duration_s']}")
        if self.count is not None and not 1 <= self.count <= MAX_COUNT:
            raise SimulatorError(f"fault.count: {FIELD_RULES['count']}")
        if self.endpoint is not None and not (0 < len(self.endpoint.strip()) <= MAX_ENDPOINT_CHARS):
            raise SimulatorError(f"fault.endpoint: must be 1 to {MAX_ENDPOINT_CHARS} characters")
        spec = PARAM_SPECS[self.kind]
        for name in self.params:
            if name not in spec:
                allowed = ", ".join(sorted(spec)) or "none"
                kind = self.kind.value
                raise SimulatorError(f"fault.params.{name}: unknown for {kind} (allowed: {allowed})")
        for name, (required, default, check) in spec.items():
            if name not in self.params:
                if required:
                    raise SimulatorError(f"fault.params.{name}: required for {self.kind.value}")
                self.params[name] = default
                continue
            problem = check(self.params[name])
            if problem:
                raise SimulatorError(f"fault.params.{name}: {problem}")
        return self

    def applies_to(self, endpoint: str) -> bool:
        """Whether the ``endpoint`` filter (if any) lets this fault apply to ``endpoint``."""
        return self.endpoint is None or _endpoint_matches(self.endpoint, endpoint)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (what ``GET /faults`` shows)."""
        out: dict[str, Any] = msgspec.to_builtins(self)
        return out


def _endpoint_matches(pattern: str, endpoint: str) -> bool:
    return pattern in endpoint or fnmatch.fnmatchcase(endpoint, pattern)
