"""The demo's scenarios, as data: what to inject, when, and what must come out.

A :class:`Scenario` names the faults to inject through the simulators' Python API
(:class:`Injection`, built from the fleet's size and the :class:`Timing` in force), how many
sessions must end up terminated and why, how long to keep watching, and the expected
outcome as a predicate over the summary (:meth:`Scenario.check` returns the problems;
none means the outcome matches). docs/demo.md documents each one with an example summary.

Fleet: session ``i`` is a Genesys Web Messaging guest when ``i % 5`` is 0 or 1, a Genesys
notifications session when it is 2 (its agent's topic on a channel the client shares: the
default's shared channels, 1,000 topics each), and a CXone agent session when it is 3 or 4.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from supervisor.config import GENESYS_TOPICS_PER_CHANNEL
from supervisor.demo.attributes_play import attributes_delivered, attributes_faults
from supervisor.sim.faults import Fault, FaultKind
from supervisor.vocabulary import SessionState

SimName = Literal["genesys", "cxone"]
Summary = dict[str, Any]
Check = Callable[[Summary], "str | None"]

WS_ENDPOINTS = "WS /*"  # both Genesys WebSocket listeners (WS /v1, WS /channels/{id})
POLL = "*get-next-event"
# 429s per endpoint in the rate-limit scenario: one fewer than the circuit's threshold (seed: 5)
RATE_LIMIT_HITS = 4


#: up to this many sessions the default --timeout is the timing's own (Timing.deadline_for)
DEADLINE_SESSIONS = 2000


@dataclass(frozen=True, slots=True)
class Timing:
    """The durations a run uses: the seed's (default) or scaled down (``--fast``)."""

    fast: bool
    # seed edge case 1: the first reconnection waits U(2 s, 8 s)
    first_delay: tuple[float, float]
    # seed section 2: 5 failures in 10 s open the circuit for 30 s
    circuit_window_s: float
    circuit_open_s: float
    probe_timeout_s: float
    # multiplier applied to every backoff delay of the taxonomy (1.0 = v1 as shipped)
    backoff_scale: float
    # CXone get-next-event?timeout= (seconds)
    poll_timeout: int
    # token-expiry: the simulators' token lifetime and our early refresh
    token_ttl_s: int
    early_refresh_s: float
    # Retry-After the rate-limit faults send (seconds; the simulators speak whole seconds)
    retry_after_s: int
    # default --timeout
    deadline_s: float
    # seed edge case 2: attributes are read back this long after the platform accepted them
    verify_after_s: float = 3.0

    def deadline_for(self, sessions: int) -> float:
        """The default ``--timeout`` for ``sessions``: the timing's, grown in proportion past 2,000
        sessions (the daemon and both simulators share one process in the demo: starting and
        recovering 5,000 sessions there takes longer than the seed's durations alone)."""
        return self.deadline_s * max(1.0, sessions / DEADLINE_SESSIONS)

    @property
    def spread_s(self) -> float:
        lo, hi = self.first_delay
        return hi - lo


REAL = Timing(
    fast=False,
    first_delay=(2.0, 8.0),
    circuit_window_s=10.0,
    circuit_open_s=30.0,
    probe_timeout_s=10.0,
    backoff_scale=1.0,
    poll_timeout=5,
    token_ttl_s=40,
    early_refresh_s=10.0,
    retry_after_s=2,
    deadline_s=180.0,
)
FAST = Timing(
    fast=True,
    first_delay=(0.2, 0.8),
    circuit_window_s=1.0,
    circuit_open_s=3.0,
    probe_timeout_s=1.0,
    backoff_scale=0.1,
    poll_timeout=1,
    token_ttl_s=4,
    early_refresh_s=1.5,
    retry_after_s=1,
    deadline_s=45.0,
    verify_after_s=0.3,
)


def kind_of(i: int) -> str:
    """Session ``i``'s kind: Web Messaging (i % 5 in 0, 1), notifications (2), CXone (3, 4)."""
    slot = i % 5
    if slot in (3, 4):
        return "agent-session"
    if slot == 2:
        return "notifications"
    return "webmessaging"


@dataclass(frozen=True, slots=True)
class Fleet:
    """How many sessions of each kind ``--sessions N`` gives."""

    sessions: int
    webmessaging: int
    notifications: int
    cxone: int

    @classmethod
    def of(cls, n: int) -> Fleet:
        kinds = [kind_of(i) for i in range(n)]
        return cls(
            sessions=n,
            webmessaging=kinds.count("webmessaging"),
            notifications=kinds.count("notifications"),
            cxone=kinds.count("agent-session"),
        )

    @property
    def websockets(self) -> int:
        """Sessions on a Genesys WebSocket: the guests', and the notifications agents' shared channels'."""
        return self.webmessaging + self.notifications

    @property
    def sockets(self) -> int:
        """The Genesys WebSockets themselves: one a guest, one a shared channel of up to 1,000 agents."""
        return self.webmessaging + math.ceil(self.notifications / GENESYS_TOPICS_PER_CHANNEL)


def admission_rate(fleet: Fleet, timing: Timing) -> int:
    """The storm's handshake admission rate: 1.5 x the mean rate the first-delay spread implies, plus 4 sigma.

    With a spread of ``w`` seconds, ``n`` dropped WebSockets come back at ``m = n / w`` per
    second on average, Poisson-like; ``ceil(1.5 m + 4 sqrt(m))`` leaves room for the busiest
    of the seconds while an immediate reconnect (all ``n`` in one second) would exceed it. A
    binding limit is the storm benchmark's business (docs/benchmarks.md). The simulator counts
    whole-second buckets, so a spread under one second (``--fast``) counts as one.
    """
    mean = fleet.websockets / max(timing.spread_s, 1.0)
    return max(5, math.ceil(1.5 * mean + 4.0 * math.sqrt(mean)))


def hit_count(n: int) -> int:
    """Sessions a counted fault hits: a quarter of those it can reach, at least one."""
    return max(1, n // 4)


@dataclass(frozen=True, slots=True)
class Injection:
    """One fault for one simulator."""

    sim: SimName
    fault: Fault


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    description: str
    expected: str  # the outcome, in words (docs/demo.md, and the summary)
    faults: Callable[[Fleet, Timing], list[Injection]]
    # exactly this many sessions must end terminated, with this reason and trigger
    terminations: Callable[[Fleet], int] = lambda fleet: 0
    reason: str | None = None
    trigger: str | None = None
    # the simulators issue short-lived tokens (token-expiry)
    short_tokens: bool = False
    # keep watching at least this long after the injection (seconds, from the timing), and what
    # the run waits for meanwhile (the live view names it with the time left)
    hold: Callable[[Timing], float] = lambda timing: 0.0
    holding_for: str = "the scenario's hold"
    # at least this many sessions must be seen leaving "active" (dropped) before it settles
    disrupted: Callable[[Fleet], int] = lambda fleet: 0
    # connection attempts are limited at this rate (storm); None = unlimited
    admission: Callable[[Fleet, Timing], int] | None = None
    checks: tuple[Check, ...] = field(default=())
    # a play run after the injection (supervisor/demo/attributes_play.py): "attributes"
    play: str | None = None

    def check(self, summary: Summary) -> list[str]:
        """Why ``summary`` does not match this scenario's expected outcome (empty: it does)."""
        problems: list[str] = []
        fleet = Fleet.of(int(summary["sessions"]))
        want = self.terminations(fleet)
        terminated = summary["terminated"]
        if len(terminated) != want:
            problems.append(f"expected {want} terminated session(s), got {len(terminated)}")
        for item in terminated:
            if (item["reason"], item["trigger"]) != (self.reason, self.trigger):
                problems.append(
                    f"{item['sessionId']} terminated with {item['reason']}/{item['trigger']}, "
                    f"expected {self.reason}/{self.trigger}"
                )
        survivors = summary["sessions"] - len(terminated)
        active = summary["states"].get(SessionState.ACTIVE, 0)
        if active != survivors:
            problems.append(f"expected all {survivors} surviving session(s) active, {active} are")
        if summary["reconnectsAfterTermination"]:
            problems.append(
                f"{summary['reconnectsAfterTermination']} connection attempt(s) after a termination"
            )
        if summary["recoverySeconds"] is None:
            problems.append("the surviving sessions never all became active again")
        for check in self.checks:
            problem = check(summary)
            if problem is not None:
                problems.append(problem)
        return problems


# -- checks over the summary ---------------------------------------------------------------------------


def peak_within_admission(summary: Summary) -> str | None:
    rate = summary.get("admissionRatePerSecond")
    peak = summary["peakAttemptsPerSecond"]
    if rate is not None and peak > 1.1 * rate:
        return f"peak {peak} attempts/s exceeds 1.1 x the admission rate {rate}/s"
    return None


def reconnected_after_drop(summary: Summary) -> str | None:
    if summary["connectAttempts"] < 1:
        return "no reconnection attempt was seen after the drop"
    return None


def rate_limits_absorbed(summary: Summary) -> str | None:
    rl = summary["rateLimit"]
    if rl["responses"] < 1:
        return "no 429 was answered"
    if rl["retries"] < 1:
        return "no retry followed a 429"
    if rl["earlierThanRetryAfter"]:
        return f"{rl['earlierThanRetryAfter']} retr(ies) scheduled earlier than Retry-After"
    return None


def tokens_refreshed(summary: Summary) -> str | None:
    if summary["tokenRefreshes"] < 1:
        return "no token refresh happened"
    return None


# -- the scenarios -------------------------------------------------------------------------------------


def _storm(fleet: Fleet, timing: Timing) -> list[Injection]:
    rate = admission_rate(fleet, timing)
    return [
        Injection(
            "genesys",
            Fault(
                kind=FaultKind.ADMISSION_LIMIT,
                endpoint=WS_ENDPOINTS,
                params={"rate_per_s": rate, "status": 429, "retry_after": "1"},
            ),
        ),
        Injection("genesys", Fault(kind=FaultKind.DROP, endpoint=WS_ENDPOINTS)),
    ]


def _rate_limit(fleet: Fleet, timing: Timing) -> list[Injection]:
    # fewer 429s per endpoint than the circuit's failure threshold (5 in a row): this scenario
    # shows Retry-After handling; a longer run of 429s would also open the endpoint's circuit
    retry_after = {"retry_after": str(timing.retry_after_s)}
    return [
        Injection(
            "cxone",
            Fault(
                kind=FaultKind.RATE_LIMIT_STORM,
                endpoint=POLL,
                count=min(RATE_LIMIT_HITS, max(1, fleet.cxone)),
                params=retry_after,
            ),
        ),
        Injection(
            "genesys",
            Fault(
                kind=FaultKind.RATE_LIMIT_STORM,
                endpoint="*/api/v2/notifications/*",
                count=min(RATE_LIMIT_HITS, max(1, fleet.notifications)),
                params=dict(retry_after),
            ),
        ),
        # the notifications sessions reconnect, so their REST calls meet the 429s
        Injection("genesys", Fault(kind=FaultKind.DROP, endpoint="WS /channels/*")),
    ]


def _token_expiry(fleet: Fleet, timing: Timing) -> list[Injection]:
    del fleet, timing
    return []  # the simulators issue short-lived tokens; time does the rest


def _partial(fleet: Fleet, timing: Timing) -> list[Injection]:
    del timing
    return [
        Injection(
            "genesys",
            Fault(
                kind=FaultKind.MISSING_FIELDS,
                endpoint="WS /v1",
                count=hit_count(fleet.webmessaging),
                # a field Genesys really sends in SessionResponse and taxonomy v1 requires
                # ([responses."genesys.webmessaging.SessionResponse"]); no guest frame names a conversation
                params={"fields": ["connected"]},
            ),
        ),
        Injection("genesys", Fault(kind=FaultKind.DROP, endpoint="WS /v1")),
    ]


def _queue_full(fleet: Fleet, timing: Timing) -> list[Injection]:
    del timing
    return [Injection("cxone", Fault(kind=FaultKind.QUEUE_FULL, endpoint=POLL, count=hit_count(fleet.cxone)))]


def _graceful(fleet: Fleet, timing: Timing) -> list[Injection]:
    del timing
    return [
        Injection(
            "genesys",
            Fault(
                kind=FaultKind.CLOSE,
                endpoint="WS /v1",
                count=hit_count(fleet.webmessaging),
                params={"code": 1000, "reason": "demo: normal closure"},
            ),
        ),
    ]


def _attributes(fleet: Fleet, timing: Timing) -> list[Injection]:
    del fleet
    return [Injection("genesys", fault) for fault in attributes_faults(50 if timing.fast else 300)]


def _mixed(fleet: Fleet, timing: Timing) -> list[Injection]:
    return [*_storm(fleet, timing), *_rate_limit(fleet, timing)[:1], *_queue_full(fleet, timing)]


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "storm",
            "Every Genesys WebSocket (Web Messaging and notifications) is dropped at once (1006) while "
            "the simulator admits a limited number of handshakes per second (seed edge case 1).",
            "all sessions active again, none terminated, peak attempts/s <= 1.1 x the admission rate, "
            "recoverySeconds reported",
            _storm,
            disrupted=lambda fleet: fleet.websockets,
            admission=admission_rate,
            checks=(peak_within_admission, reconnected_after_drop),
        ),
        Scenario(
            "rate-limit",
            "Up to 4 CXone polls and 4 Genesys notifications REST calls answer 429 with Retry-After; "
            "the notifications sockets are dropped so their reconnections meet the 429s.",
            "429s absorbed: retries never scheduled earlier than Retry-After, none terminated",
            _rate_limit,
            disrupted=lambda fleet: fleet.notifications,
            checks=(rate_limits_absorbed,),
        ),
        Scenario(
            "token-expiry",
            "Both simulators issue short-lived access tokens; sessions keep working across "
            "expiries (seed edge case 3: 5-minute early refresh, refresh before retry).",
            "tokenRefreshes >= 1, none terminated",
            _token_expiry,
            short_tokens=True,
            hold=lambda timing: 2.0 * timing.token_ttl_s,
            holding_for="tokens to age past their refresh",
            checks=(tokens_refreshed,),
        ),
        Scenario(
            "partial-success",
            "Web Messaging sockets are dropped; the SessionResponse of a quarter of the reconnections "
            "comes back 200 without connected, a field Genesys sends and taxonomy v1 requires (seed section 3).",
            "the sessions hit terminate with FAIL_FAST_TRIGGER/INCOMPLETE_RESPONSE, the others are active",
            _partial,
            disrupted=lambda fleet: fleet.webmessaging,
            terminations=lambda fleet: hit_count(fleet.webmessaging),
            reason="FAIL_FAST_TRIGGER",
            trigger="INCOMPLETE_RESPONSE",
        ),
        Scenario(
            "queue-full",
            "A quarter of the CXone agent sessions get 429 with error_code QUEUE_FULL on a poll.",
            "those hit terminate with FAIL_FAST_TRIGGER/QUEUE_FULL and are never reconnected; "
            "the others are active",
            _queue_full,
            terminations=lambda fleet: hit_count(fleet.cxone),
            reason="FAIL_FAST_TRIGGER",
            trigger="QUEUE_FULL",
        ),
        Scenario(
            "graceful-close",
            "The server closes a quarter of the Web Messaging sockets with code 1000.",
            "those closed terminate with GRACEFUL_CLOSE and no reconnection attempt; the others are active",
            _graceful,
            terminations=lambda fleet: hit_count(fleet.webmessaging),
            reason="GRACEFUL_CLOSE",
            trigger=None,
        ),
        Scenario(
            "attributes",
            "After wrap-up, a burst of 200 attribute updates over (up to) 20 conversations: the simulator "
            "answers 202, slowly, and silently drops 20 of them past the 15th (seed edge case 2).",
            "every silent drop detected by the read-back and repaired or flagged, no acknowledged update lost, "
            "the queue's backpressure visible (some submissions refused, then accepted), none terminated",
            _attributes,
            play="attributes",
            checks=(attributes_delivered,),
        ),
        Scenario(
            "mixed",
            "storm + rate-limit (CXone polls) + queue-full at once, with short-lived tokens.",
            "only the QUEUE_FULL sessions terminate (FAIL_FAST_TRIGGER/QUEUE_FULL); everyone else active "
            "again; peak attempts/s <= 1.1 x the admission rate; retries never earlier than Retry-After; "
            "tokenRefreshes >= 1",
            _mixed,
            terminations=lambda fleet: hit_count(fleet.cxone),
            reason="FAIL_FAST_TRIGGER",
            trigger="QUEUE_FULL",
            short_tokens=True,
            hold=lambda timing: 2.0 * timing.token_ttl_s,
            holding_for="tokens to age past their refresh",
            disrupted=lambda fleet: fleet.websockets,
            admission=admission_rate,
            checks=(peak_within_admission, rate_limits_absorbed, tokens_refreshed),
        ),
    )
}

DEFAULT_SCENARIO = "mixed"
