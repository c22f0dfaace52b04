"""The classifier: RawError → SdkErrorEvent, over one taxonomy version. Pure and deterministic.

Precedence (docs/taxonomy.md): a status routes through ``[[rules]]``; else a close code
through ``[closeCodes]``; else an exception name through ``[exceptions]``; else the
status-less rules (which end in the catch-all).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any

from supervisor.clock import Clock, SystemClock, iso_utc
from supervisor.errors import EnvelopeError, TaxonomyError
from supervisor.taxonomy.envelope import MAX_NESTING, RawError, envelope_from_json, envelope_from_object
from supervisor.taxonomy.model import Channel, CodeSpec, Platform, SdkErrorEvent
from supervisor.taxonomy.normalize import CLOSE_CODE_NAMES, canonical_exception, normalize, require_evidence
from supervisor.taxonomy.rules import Taxonomy

# the seed's required fields of a session response (section 3, validateSessionResponse)
SESSION_REQUIRED_FIELDS = ("conversationId", "agentId", "status")
# a key naming a credential, matched on the key lower-cased with "-" and "_" removed, so
# apiKey, api_key and X-Api-Key are one spelling (docs/taxonomy.md lists the names)
_SECRET_KEY = re.compile(
    r"token|secret|passw|pwd|passphrase|authoriz|credential|apikey|cookie|privatekey|jwt|sessionkey"
    r"|signature|assertion|^auth$|^pass$|^pin$|^otp$"
)
# keys the classifier reads that look secret but only say *whether* something is (a bool)
_NOT_SECRET_KEYS = frozenset({"tokenexpired", "tokenwithinrefreshwindow"})
# values that are credentials whatever key holds them: an Authorization header value
# (RFC 9110 §11.6.2, RFC 7617, RFC 6750), a JWT (RFC 7519 compact form: base64url of '{"'),
# and secret query or form parameters inside a URL or a message
_SECRET_VALUE = re.compile(
    r"(?P<scheme>\b(?:bearer|basic|digest|negotiate)\s+)[A-Za-z0-9._~+/=-]{6,}"
    r"|eyJ[A-Za-z0-9_-]{6,}(?:\.[A-Za-z0-9_-]*){0,2}"
    r"|(?P<param>\b(?:access_token|refresh_token|id_token|token|client_secret|secret|password|passwd"
    r"|api_?key|sig|signature)=)[^&\s\"'#]+",
    re.IGNORECASE,
)
#: what :attr:`Classifier.observer` is called with: the envelope and the event it was routed to
Observer = Callable[[RawError, SdkErrorEvent], None]
_METHOD_PREFIX = re.compile(r"^([A-Za-z]+)\s+(\S.*)$")
_REDACTED = "[REDACTED]"


def split_endpoint(method: str | None, endpoint: str | None) -> tuple[str | None, str | None, str | None]:
    """(method, path, display) from "POST /api/..." or a URL or a path; the query is dropped."""
    if not endpoint:
        return method, None, None
    match = _METHOD_PREFIX.match(endpoint)
    if match and match.group(1).isupper():
        method = method or match.group(1)
        endpoint = match.group(2)
    path = endpoint
    if "://" in path:
        path = "/" + path.split("://", 1)[1].partition("/")[2]
    path = path.split("?", 1)[0].split("#", 1)[0]
    display = f"{method} {path}" if method else path
    return method, path, display


def _secret_key(key: str) -> bool:
    folded = key.lower().replace("-", "").replace("_", "")
    return folded not in _NOT_SECRET_KEYS and _SECRET_KEY.search(folded) is not None


def _scrub(text: str) -> str:
    """``text`` with every secret-looking value in it replaced by ``[REDACTED]``."""

    def replace(match: re.Match[str]) -> str:
        return (match.group("scheme") or match.group("param") or "") + _REDACTED

    return _SECRET_VALUE.sub(replace, text)


def _redacted(key: str, value: Any, depth: int = 0) -> Any:
    # a guest token, a bearer token or a secret never leaves the daemon, however deep, in a
    # dict or a list; a boolean or null under a secret-looking key says nothing secret
    if _secret_key(key) and not (value is None or isinstance(value, bool)):
        return _REDACTED
    return _clean(value, depth)


def _clean(value: Any, depth: int) -> Any:
    if isinstance(value, str):
        return _scrub(value)
    if isinstance(value, Mapping | list | tuple) and depth >= MAX_NESTING:
        # deeper than any envelope may nest: not inspected, so not shown
        return _REDACTED
    if isinstance(value, Mapping):
        return {_scrub(str(k)): _redacted(str(k), v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(item, depth + 1) for item in value]
    return value


def _safe_context(context: Mapping[str, Any] | None) -> dict[str, Any]:
    out: dict[str, Any] = {"conversationId": None, "agentId": None, "endpoint": None}
    if context:
        for key, value in context.items():
            out[_scrub(str(key))] = _redacted(str(key), value)
    return out


class Classifier:
    """Classifies RawError envelopes with one taxonomy version; the clock stamps events."""

    __slots__ = ("_clock", "observer", "taxonomy")

    def __init__(self, taxonomy: Taxonomy, clock: Clock | None = None) -> None:
        self.taxonomy = taxonomy
        self._clock: Clock = clock or SystemClock()
        #: told every failure the daemon classified, with its envelope (the capture and the shadow
        #: taxonomy: supervisor/runtime/taxonomy_tap.py); it must not raise, nor block
        self.observer: Observer | None = None

    # ------------------------------------------------------------------ entry points
    def classify(self, raw: RawError, *, observe: bool = True) -> SdkErrorEvent:
        """The SdkErrorEvent for one envelope. Never raises on a valid RawError.

        ``observe`` False: a second look at a failure already classified (a transport deciding
        what to repair), or a replay: the :attr:`observer` is not told again.
        """
        event = self._classify(raw)
        observer = self.observer
        if observe and observer is not None:
            observer(raw, event)
        return event

    def _classify(self, raw: RawError) -> SdkErrorEvent:
        tax = self.taxonomy
        platform = raw.platform.value
        channel = raw.channel.value
        method, path, display = split_endpoint(raw.method, raw.endpoint)
        now = self._now(raw.timestamp)
        signal = normalize(raw, now)
        operation = tax.operation_of(platform, channel, method, path)
        context = raw.context
        # what our clock said of the request's bearer token (docs/taxonomy.md, "The 401 rule"); a
        # recorded envelope may carry tokenExpired only: an expired token is within the window too
        token_expired = bool(context.get("tokenExpired")) if context else False
        in_window = token_expired or (bool(context.get("tokenWithinRefreshWindow")) if context else False)

        raw_status = signal.status
        raw_code = signal.raw_code
        spec: CodeSpec | None = None
        if raw_status is not None:
            spec = self._match(raw_status, platform, channel, operation, raw_code, token_expired, in_window)
        elif raw.close_code is not None:
            raw_status = raw.close_code
            raw_code = raw_code or CLOSE_CODE_NAMES.get(raw.close_code, f"CLOSE_{raw.close_code}")
            spec = tax.close_codes.get(raw.close_code, tax.close_default)
        elif raw.exception:
            name = canonical_exception(raw.exception)
            raw_code = raw_code or name
            spec = tax.exceptions.get(name, tax.exception_default)
        else:
            spec = self._match(None, platform, channel, operation, raw_code, token_expired, in_window)

        out_context = _safe_context(context)
        if out_context.get("endpoint") is None:
            out_context["endpoint"] = display
        return self._event(
            spec,
            raw,
            raw_status=raw_status,
            raw_code=raw_code,
            retry_after_ms=signal.retry_after_ms,
            context=out_context,
            details=signal.details,
            timestamp=raw.timestamp or iso_utc(now),
        )

    def classify_json(self, line: bytes | str) -> SdkErrorEvent:
        """Decode one NDJSON line and classify it; EnvelopeError names what was wrong (an envelope
        with nothing to route by is refused: :func:`~supervisor.taxonomy.normalize.require_evidence`)."""
        raw = envelope_from_json(line)
        require_evidence(raw)
        return self.classify(raw, observe=False)

    def classify_object(self, obj: object) -> SdkErrorEvent:
        """Classify an already-parsed JSON value; EnvelopeError names what was wrong."""
        raw = envelope_from_object(obj)
        require_evidence(raw)
        return self.classify(raw, observe=False)

    # ------------------------------------------------------------------ response validation
    def validate_response(
        self,
        response: object,
        *,
        platform: Platform,
        channel: Channel,
        required: Iterable[str] = SESSION_REQUIRED_FIELDS,
        expected_conversation_id: str | None = None,
        context: Mapping[str, Any] | None = None,
        endpoint: str | None = None,
        kind: str | None = None,
    ) -> SdkErrorEvent | None:
        """None when ``response`` has every required field (and, if given, our conversationId).

        ``kind`` names the response (``[responses."platform.channel.Response"]`` of the taxonomy):
        its ``required`` fields replace ``required``, and the drift check reads its
        ``conversationField``; a response that names no conversation (no such field in the
        taxonomy, or the field absent from the response) is not checked for drift
        (docs/taxonomy.md). Without ``kind`` the seed's fields are required and the drift check
        reads ``conversationId``.

        A field counts as missing when it is absent, null or an empty string: a response
        without a verifiable server-side anchor must not make a session active (seed
        section 3, "State reconciliation handles partial successes").
        """
        conversation_field: str | None = "conversationId"
        if kind is not None:
            spec = self.taxonomy.responses.get(kind)
            if spec is None:
                raise TaxonomyError(f"taxonomy {self.taxonomy.version}: no responses.{kind}")
            required, conversation_field = spec.required, spec.conversation_field
        obj = response if isinstance(response, Mapping) else {}
        missing = [f for f in required if obj.get(f) in (None, "")]
        if missing:
            return self.incomplete_response(
                missing, platform=platform, channel=channel, context=context, endpoint=endpoint
            )
        if expected_conversation_id is not None and conversation_field is not None:
            actual = obj.get(conversation_field)
            # drift is a response naming *another* conversation: one that names none contradicts
            # nothing (v2's Conversation: PY269 marks its id optional; a version that needs the
            # field lists it in ``required``, and v1 does)
            if actual not in (None, "") and actual != expected_conversation_id:
                return self.state_drift(
                    expected_conversation_id,
                    str(actual),
                    platform=platform,
                    channel=channel,
                    context=context,
                    endpoint=endpoint,
                )
        return None

    def required_fields(self, kind: str) -> tuple[str, ...]:
        """The fields the taxonomy's ``[responses.KIND]`` requires (for a transport's own checks)."""
        spec = self.taxonomy.responses.get(kind)
        if spec is None:
            raise TaxonomyError(f"taxonomy {self.taxonomy.version}: no responses.{kind}")
        return spec.required

    def incomplete_response(
        self,
        missing: Iterable[str],
        *,
        platform: Platform,
        channel: Channel,
        context: Mapping[str, Any] | None = None,
        endpoint: str | None = None,
        status: int = 200,
    ) -> SdkErrorEvent:
        """STATE_CORRUPTING INCOMPLETE_RESPONSE naming the missing fields."""
        names = ", ".join(missing)
        return self._synthetic(
            "INCOMPLETE_RESPONSE",
            platform,
            channel,
            status,
            f"Missing required fields: {names}",
            context,
            endpoint,
        )

    def state_drift(
        self,
        expected: str,
        actual: str,
        *,
        platform: Platform,
        channel: Channel,
        context: Mapping[str, Any] | None = None,
        endpoint: str | None = None,
    ) -> SdkErrorEvent:
        """STATE_CORRUPTING CONVERSATION_STATE_DRIFT: the server's conversationId is not ours."""
        return self._synthetic(
            "CONVERSATION_STATE_DRIFT",
            platform,
            channel,
            200,
            f"conversationId drift: held {expected!r}, server answered {actual!r}",
            context,
            endpoint,
        )

    def session_id_mismatch(
        self,
        expected: str,
        actual: str,
        *,
        platform: Platform,
        channel: Channel,
        context: Mapping[str, Any] | None = None,
        endpoint: str | None = None,
    ) -> SdkErrorEvent:
        """STATE_CORRUPTING SESSION_ID_MISMATCH (seed section 1: "Session ID mismatch").

        CXone answers a poll on a stale sessionId with an AgentSessionStart replay
        (docs/platforms.md, "NICE CXone"): our view of the session must be rebuilt, not advanced.
        """
        return self._synthetic(
            "SESSION_ID_MISMATCH",
            platform,
            channel,
            200,
            f"session id mismatch: held {expected!r}, server answered {actual!r}",
            context,
            endpoint,
        )

    def session_resynced(
        self,
        held: str,
        new: str,
        *,
        platform: Platform,
        channel: Channel,
        context: Mapping[str, Any] | None = None,
        endpoint: str | None = None,
    ) -> SdkErrorEvent:
        """SESSION_RESYNCED: CXone answered a poll on an outdated sessionId with its own recovery.

        The platform replays ``AgentSessionStart`` plus a snapshot and hands out a new sessionId;
        NICE's SDK stores the new id and goes on (core-sdk ``get-next-event-provider.js``). Taxonomy
        v2 routes it TRANSIENT, published, not retried. A version that lacks the code (v1, which
        must stay as shipped) routes the replay as it always did: SESSION_ID_MISMATCH.
        """
        if "SESSION_RESYNCED" not in self.taxonomy.codes:
            return self.session_id_mismatch(
                held, new, platform=platform, channel=channel, context=context, endpoint=endpoint
            )
        return self._synthetic(
            "SESSION_RESYNCED",
            platform,
            channel,
            200,
            f"AgentSessionStart replayed for sessionId {held!r}: resynchronised on {new!r}",
            context,
            endpoint,
        )

    def named(
        self,
        code: str,
        *,
        platform: Platform,
        channel: Channel,
        details: str,
        context: Mapping[str, Any] | None = None,
        endpoint: str | None = None,
        status: int = 200,
    ) -> SdkErrorEvent:
        """The event of a code a transport *named* from what the platform said (CXone's
        AgentSessionEnd event: AGENT_SESSION_ENDED); class, scope and policy are the taxonomy's."""
        spec = self.taxonomy.codes.get(code)
        if spec is None:
            raise TaxonomyError(f"taxonomy {self.taxonomy.version}: no codes.{code}")
        return self._synthetic(code, platform, channel, status, details, context, endpoint)

    # ------------------------------------------------------------------ internals
    def _match(
        self,
        status: int | None,
        platform: str,
        channel: str,
        operation: str | None,
        raw_code: str | None,
        token_expired: bool,
        token_within_refresh_window: bool,
    ) -> CodeSpec:
        for rule in self.taxonomy.rules_for(status):
            if rule.matches(
                platform, channel, operation, raw_code, token_expired, token_within_refresh_window
            ):
                return rule.spec
        # unreachable for a checked taxonomy (its last rule is a catch-all)
        return self.taxonomy.codes["UNKNOWN_ERROR"]

    def _now(self, timestamp: str | None) -> float:
        # a recorded envelope replays against its own time, so HTTP-date Retry-After is stable
        if timestamp:
            try:
                return datetime.fromisoformat(timestamp).timestamp()
            except ValueError:
                pass
        return self._clock.time()

    def _synthetic(
        self,
        code: str,
        platform: Platform,
        channel: Channel,
        status: int,
        details: str,
        context: Mapping[str, Any] | None,
        endpoint: str | None,
    ) -> SdkErrorEvent:
        out_context = _safe_context(context)
        if endpoint is not None:
            out_context["endpoint"] = endpoint
        raw = RawError(platform=platform, channel=channel, status=status)
        return self._event(
            self.taxonomy.codes[code],
            raw,
            raw_status=status,
            raw_code=code,
            retry_after_ms=None,
            context=out_context,
            details=details,
            timestamp=iso_utc(self._clock.time()),
        )

    def _event(
        self,
        spec: CodeSpec,
        raw: RawError,
        *,
        raw_status: int | None,
        raw_code: str | None,
        retry_after_ms: int | None,
        context: dict[str, Any],
        details: str | None,
        timestamp: str,
    ) -> SdkErrorEvent:
        return SdkErrorEvent(
            timestamp=timestamp,
            source=self.taxonomy.source_of(raw.platform.value, raw.channel.value),
            raw_status=raw_status,
            raw_code=raw_code,
            taxonomy_class=spec.taxonomy_class,
            retryable=spec.retryable,
            max_retry_budget=spec.policy.max_retries,
            context=context,
            code=spec.code,
            scope=spec.scope,
            taxonomy_version=self.taxonomy.version,
            policy=spec.policy,
            trigger=spec.trigger,
            retry_after_ms=retry_after_ms,
            reconnect=spec.reconnect,
            reconcile_before_retry=spec.reconcile_before_retry,
            graceful=spec.graceful,
            replay_with_fresh_token=spec.replay_with_fresh_token,
            revokes_credential=spec.revokes_credential,
            circuit_neutral=spec.circuit_neutral,
            platform=raw.platform.value,
            channel=raw.channel.value,
            details=details,
        )


__all__ = ["SESSION_REQUIRED_FIELDS", "Classifier", "EnvelopeError", "Observer", "split_endpoint"]
