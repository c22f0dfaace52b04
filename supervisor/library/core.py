"""What a library call is decided by, pure: no I/O, no sleeping, no lock (docs/library.md).

:class:`Core` holds what every call of one transport or decorated function shares: the classifier
over the chosen taxonomy, the endpoints (``machines.registry.Endpoints``, the daemon's: one circuit
per endpoint with the seed's rule, the retry budget across calls, at most :data:`MAX_ENDPOINTS`
kept), the route templates, and what raises. :class:`Plan` is one call's retry state: after each
failure it answers what comes next (:class:`Retry`, :class:`Replay` or :class:`End`), with the
class policy's backoff and a server's Retry-After as its minimum (``supervisor.retry.decide_retry``,
what the daemon's executor decides by).

Beyond the daemon's rules, a request the library cannot know to be idempotent (a POST or a PATCH
without ``Idempotency-Key``, RFC 9110 section 9.2.2) is sent again only when the failure shows it
was not processed: it never left (a connect error), or the server refused it for load (a 429, or a
503 with Retry-After: RFC 9110 section 15.6.4 says the server did not act on it). A failure the
taxonomy flags ``reconcileBeforeRetry`` (a 504 on a create: it may have been applied) raises with
``outcome_unknown`` instead; a body that cannot be replayed (a stream) is sent once.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import random
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from machines.circuit import CircuitConfig
from machines.pacing import PacingConfig
from machines.registry import CircuitRegistry, Endpoints
from supervisor.clock import Clock, Rng, SystemClock
from supervisor.retry.backoff import GiveUpReason, RetryDecision, decide_retry
from supervisor.taxonomy.classifier import Classifier
from supervisor.taxonomy.envelope import RawError
from supervisor.taxonomy.headers import RateLimitReading
from supervisor.taxonomy.loader import DEFAULT_VERSION, load_taxonomy
from supervisor.taxonomy.model import Platform, SdkErrorEvent, TaxonomyClass, Trigger
from supervisor.taxonomy.rules import Taxonomy
from supervisor.vocabulary import EndpointId

__all__ = [
    "DEFAULT_RAISE_ON",
    "MAX_ENDPOINTS",
    "PACE_FLOOR",
    "PACE_RECOVERY",
    "Answer",
    "Core",
    "End",
    "Plan",
    "Replay",
    "Request",
    "Retry",
    "pacing",
    "route_template",
]

#: the endpoints one core keeps (least recently used forgotten first)
MAX_ENDPOINTS: Final = 1000
#: what raises unless ``raise_on`` says otherwise: a corrupted state and every fail-fast trigger
DEFAULT_RAISE_ON: Final[frozenset[TaxonomyClass | Trigger]] = frozenset(
    {TaxonomyClass.STATE_CORRUPTING, *Trigger}
)
#: the daemon's REST pacing (supervisor/runtime/wiring.py): engaged at the first throttle, and slowed by the
#: platform's rate window once half of it is spent (inin-ratelimit-*)
REST_PACING: Final = PacingConfig(initial_rate=None, headroom=0.5)
#: the library's pace floor, calls a second: after a throttle the pace is cut to what the platform admitted
#: in the last second (less 15 %), never below this. In a storm nothing was admitted, so the pace starts again
#: at the floor. The daemon's floor (1 a second) suits thousands of sessions sharing an endpoint; an
#: application's caller is one token, and Genesys Cloud allows a client-credentials token 300 requests a minute
#: by default (its "Limits" page, Platform API: ``client.credentials.token.rate.per.minute``): a pace of 5 a
#: second spends no more than that allowance, and the Retry-After hold, not the pace, keeps every call back
#: while the platform refuses (CXone documents no per-token figure: the same floor, inferred)
PACE_FLOOR: Final = 5.0
#: how fast the pace grows back after a throttle: the share of the pace added for each second's worth of calls
#: admitted (additive increase; the daemon's 2 %, docs/benchmarks.md "AIMD or CUBIC, and the pacer's numbers"):
#: above the floor the pace probes a limit beyond the token's documented allowance, and each probe that finds it
#: holds the whole endpoint for a Retry-After
PACE_RECOVERY: Final = 0.02
#: the retry budget across calls: retries may add 10 % of the calls, at least 5 a second (the daemon's)
DEFAULT_BUDGET: Final = (0.1, 5.0)
# methods that may have been applied when their answer is lost (RFC 9110 section 9.2.2: not idempotent)
_UNSAFE: Final = frozenset({"POST", "PATCH"})
# a path segment that is an id: digits, a UUID, or a long token of hex or base64url characters
_ID = re.compile(
    r"^(?:\d+|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
    r"|(?=[A-Za-z0-9_-]*\d)[A-Za-z0-9_-]{16,})$"
)


def route_template(path: str, routes: Iterable[tuple[str, re.Pattern[str]]] = ()) -> str:
    """The route template of ``path``: the first of ``routes`` that matches it, else the path with
    each id segment (digits, a UUID, a long token with a digit) replaced by ``{id}``."""
    for template, pattern in routes:
        if pattern.fullmatch(path):
            return template
    return "/".join("{id}" if _ID.match(segment) else segment for segment in path.split("/"))


def _bounded(name: str, value: object, unit: str, *, zero: bool, at_most: float) -> float:
    """``value`` as a float, or a one-line error naming the option (a bool is not a number here)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number ({unit}), got {value!r}")
    number = float(value)
    low_ok = number >= 0 if zero else number > 0
    if not (low_ok and math.isfinite(number) and number <= at_most):
        bound = "[0" if zero else "(0"
        raise ValueError(f"{name} must be within {bound}, {at_most:g}] ({unit}), got {value!r}")
    return number


def pacing(floor: float = PACE_FLOOR, recovery: float = PACE_RECOVERY) -> PacingConfig:
    """The library's REST pacing: the daemon's (:data:`REST_PACING`) with the caller's floor and recovery.

    Raises ``TypeError`` or ``ValueError`` (one line, naming ``pace_floor`` or ``pace_recovery``) for a value
    that is not a number, not finite, or out of range."""
    floor = _bounded("pace_floor", floor, "calls a second", zero=False, at_most=REST_PACING.max_rate)
    recovery = _bounded(
        "pace_recovery",
        recovery,
        "share of the pace added per second of admitted calls",
        zero=True,
        at_most=1.0,
    )
    return dataclasses.replace(REST_PACING, min_rate=floor, increase=recovery)


def _compiled(template: str) -> re.Pattern[str]:
    # "/api/v2/conversations/{conversationId}/attributes": each {name} one path segment
    parts = re.split(r"(\{[^/{}]+\})", template)
    return re.compile(
        "".join("[^/]+" if p.startswith("{") and p.endswith("}") else re.escape(p) for p in parts)
    )


@dataclass(frozen=True, slots=True)
class Request:
    """What a call's retry decisions need to know of its request."""

    #: the HTTP method (upper case), or None when the caller does not say (a decorated function)
    method: str | None
    #: the request says it may be applied twice (an ``Idempotency-Key``, or ``idempotent=True``)
    idempotent: bool
    #: its body can be sent again (False: a stream, sent once)
    replayable: bool = True

    @property
    def unsafe(self) -> bool:
        """Not known to be idempotent: a POST or a PATCH without ``Idempotency-Key``."""
        return not self.idempotent and (self.method is None or self.method in _UNSAFE)


@dataclass(frozen=True, slots=True)
class Retry:
    """Send again after ``delay_s`` (when the endpoint's retry budget allows it then)."""

    delay_s: float
    from_retry_after: bool


@dataclass(frozen=True, slots=True)
class Replay:
    """A 401 on a token at the end of its life: refresh it and send again at once, once."""


@dataclass(frozen=True, slots=True)
class End:
    """The call ends with ``event``: raised (as :class:`~supervisor.errors.SdkError`) or returned."""

    event: SdkErrorEvent
    raises: bool
    outcome_unknown: bool = False
    exhausted: bool = False
    reason: GiveUpReason | None = None
    #: the endpoint got no answer to judge (an unknown outcome): it is told nothing
    untold: bool = False


class Core:
    """What every call of one transport or decorated function shares (the module docstring)."""

    def __init__(
        self,
        platform: Platform | str,
        taxonomy: str | Path | Taxonomy = DEFAULT_VERSION,
        *,
        routes: Iterable[str] = (),
        raise_on: Collection[TaxonomyClass | Trigger] = DEFAULT_RAISE_ON,
        context: Mapping[str, Any] | None = None,
        clock: Clock | None = None,
        rng: Rng | None = None,
        pace_floor: float = PACE_FLOOR,
        pace_recovery: float = PACE_RECOVERY,
        circuit: CircuitConfig | None = None,
        budget: tuple[float, float] | None = DEFAULT_BUDGET,
        max_endpoints: int = MAX_ENDPOINTS,
    ) -> None:
        self.platform = Platform(platform)
        rest = pacing(pace_floor, pace_recovery)
        # a shipped version by name, or a file (an overlay that extends one) through the loader
        loaded = taxonomy if isinstance(taxonomy, Taxonomy) else load_taxonomy(taxonomy)
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.rng: Rng = rng if rng is not None else random.Random()
        self.classifier = Classifier(loaded, self.clock)
        # the daemon's REST endpoints (supervisor/runtime/wiring.py): unpaced until the platform first
        # throttles, then paced (from the caller's floor), so the 429s of calls already in flight are that
        # throttle's echo and count once toward the circuit (a storm met by twenty callers must not open it)
        self.endpoints = Endpoints(
            self.clock,
            CircuitRegistry(self.clock, circuit, self.rng),
            rest=rest,
            budget=budget,
            limit=max_endpoints,
        )
        self.max_endpoints = max_endpoints
        self._endpoint_of = functools.lru_cache(maxsize=4096)(self._endpoint)
        self.routes = tuple((t, _compiled(t)) for t in routes)
        self.raise_on = frozenset(raise_on)
        # the seed's correlation fields of every event (conversationId, agentId), never a credential
        self.context: dict[str, Any] = dict(context or {})

    def endpoint(self, method: str, host: str, port: int | None, path: str) -> EndpointId:
        """An endpoint: the platform, the host, the method and the route template (remembered for the
        4,096 request lines last seen: a call's hot path does not match its path again)."""
        return self._endpoint_of(method, host, port, path)

    def _endpoint(self, method: str, host: str, port: int | None, path: str) -> EndpointId:
        where = host if port is None else f"{host}:{port}"
        # (an endpoint's name holds no ':'; the port's is written as in a URL's escaping)
        name = f"{method} {where}{route_template(path, self.routes)}".replace(":", "%3A")
        return EndpointId(self.platform, name)

    def operation(self, operation: str) -> EndpointId:
        """The endpoint of a decorated function: the platform and the operation's name."""
        return EndpointId(self.platform, operation.replace(":", "%3A") or "call")

    def classify(self, raw: RawError) -> SdkErrorEvent:
        return self.classifier.classify(raw)

    def raises(self, event: SdkErrorEvent) -> bool:
        """Does this final failure raise (its class or its trigger is in ``raise_on``)?"""
        return event.taxonomy_class in self.raise_on or (
            event.trigger is not None and event.trigger in self.raise_on
        )

    def plan(self, request: Request, *, has_token: bool) -> Plan:
        return Plan(self, request, has_token)


class Plan:
    """One call's retries: after each failure, what comes next (pure; the shells act on it)."""

    __slots__ = ("_core", "_has_token", "_previous_ms", "_replayed", "_request", "attempt", "last")

    def __init__(self, core: Core, request: Request, has_token: bool) -> None:
        self._core = core
        self._request = request
        self._has_token = has_token
        self._replayed = False
        self._previous_ms: float | None = None
        #: the class policy's retries spent (the replay and those the retry budget skipped included)
        self.attempt = 0
        #: the failure the last answer was
        self.last: SdkErrorEvent | None = None

    def failed(
        self, event: SdkErrorEvent, *, not_sent: bool = False, lost: bool = False
    ) -> Retry | Replay | End:
        """The attempt failed with ``event``; ``not_sent``: it never left this machine; ``lost``: it
        left and no answer came (a read timeout, a dropped connection)."""
        self.last = event
        request = self._request
        if not request.replayable:
            return self._final(event)
        if event.replay_with_fresh_token and not self._replayed and self._has_token:
            # seed edge case 3: once, with a fresh token; the replay spends a retry (a second 401 is final)
            self._replayed = True
            self.attempt += 1
            return Replay()
        if request.unsafe and not (not_sent or _refused_for_load(event)):
            if event.reconcile_before_retry:
                # the taxonomy says it may have been applied: the endpoint got no answer to judge
                return End(event, raises=True, outcome_unknown=True, untold=True)
            if lost:
                # it left and nothing came back: applied or not, nobody can say
                return End(event, raises=True, outcome_unknown=True)
            return self._final(event)
        return self._decide(event, skipped=False)

    def skipped(self) -> Retry | End:
        """The endpoint's retry budget refused the retry that came due: it counts, the next is asked."""
        assert self.last is not None
        self.attempt += 1
        return self._decide(self.last, skipped=True)

    def retried(self) -> None:
        """The retry went out (its delay is the next decorrelated jitter's base)."""
        self.attempt += 1

    def _decide(self, event: SdkErrorEvent, *, skipped: bool) -> Retry | End:
        decision = decide_retry(
            event.policy,
            self.attempt,
            self._core.rng,
            retryable=event.retryable,
            retry_after_ms=event.retry_after_ms,
            previous_delay_ms=self._previous_ms,
        )
        if not decision.retry:
            if skipped and decision.reason is GiveUpReason.BUDGET_EXHAUSTED:
                decision = RetryDecision(retry=False, reason=GiveUpReason.RETRY_BUDGET_EXHAUSTED)
            exhausted = event.retryable and (self.attempt > 0 or skipped)
            return self._final(event, exhausted=exhausted, reason=decision.reason)
        self._previous_ms = decision.delay_ms
        return Retry(decision.delay_ms / 1000.0, decision.from_retry_after)

    def _final(
        self, event: SdkErrorEvent, *, exhausted: bool = False, reason: GiveUpReason | None = None
    ) -> End:
        return End(event, self._core.raises(event), exhausted=exhausted, reason=reason)


def _refused_for_load(event: SdkErrorEvent) -> bool:
    """The server refused the request without acting on it: a 429 (RFC 6585 section 4), or a 503
    that says when to come back (RFC 9110 section 15.6.4)."""
    status = event.raw_status
    return status == 429 or (status == 503 and event.retry_after_ms is not None)


@dataclass(frozen=True, slots=True)
class Answer:
    """What one attempt came back with: a ``result`` (a response, a return value), the failure to
    classify (None: a success), whether it never left (a connect error), and what was raised."""

    result: Any = None
    raw: RawError | None = None
    not_sent: bool = False
    error: BaseException | None = None
    #: what a successful answer said of the platform's rate window (Genesys' inin-ratelimit-*)
    reading: RateLimitReading | None = None
