"""Admission control beyond the seed (docs/runtime.md, "Admission"): adaptive pacing per endpoint.

Pure and clock-driven, like the circuit; its companion, the retry budget across calls, is
machines/retry_budget.py.

* :class:`Pacer` paces the attempts to one endpoint (WebSocket handshakes and session starts,
  or REST calls) with a client-side rate that adapts to what the platform admits, TCP-style:
  a *slow start* that multiplies the rate by ``growth`` for each rate's worth of admitted
  attempts (restarted from ``initial_rate`` after ``idle_restart_s`` without attempts, and when
  the platform drops a connection while the endpoint is quiet: :meth:`Pacer.lost`; growing only
  while the rate is the bound and in use, never while attempts come slower than it: RFC 7661), a
  multiplicative decrease (``backoff``, of the rate or of what the platform admitted in the last
  second when that is less) when the platform throttles (a 429, or a 5xx with Retry-After), then a
  probe back up, one of two (:class:`Probe`): ``AIMD``, a gentle additive increase (``increase``
  of the rate per second's worth of admitted attempts; relative, so the time between two probing
  refusals does not depend on the limit), or ``CUBIC`` (RFC 9438; botocore's adaptive retry mode):
  the rate is a cubic function of the time since the cut, flat near the rate that was refused and
  steeper away from it. docs/benchmarks.md measures both ("Admission at a binding limit"). Nothing is
  tuned to a particular limit: the pacer discovers it. A throttle answer that
  carries Retry-After pauses the *whole endpoint* for that window (beyond the seed: the platform
  said when it is ready, so nobody asks before). Slots are handed out by virtual scheduling (GCRA,
  one timestamp): an attempt gets a wait, never a refusal, and waits in the order it asked.
  A pacer may start disabled (``initial_rate=None``): then it only engages at the first throttle
  (botocore's adaptive mode does so), which suits REST calls that are rarely throttled.
  A pacer may also cap the attempts *in flight* (:meth:`Pacer.in_flight_cap`; its endpoint,
  machines/endpoint.py, counts the places and holds each attempt to it): a rate says when attempts leave, not how many are still unanswered, and a
  client whose own answers queue up (5,000 handshakes on two cores) kept sending at the rate while
  the platform's refusals waited behind its admissions: everything sent meanwhile was refused.
* A restart need not discover the limit again (:meth:`Pacer.seed`, :class:`LearnedLimit`): like a
  TCP connection that starts with the slow-start threshold its predecessor to the same host left
  in the host's cache (RFC 9040, "TCP Control Block Interdependence": its temporal sharing;
  RFC 2140 before it), a pacer seeded with the limit its endpoint was refused at (:meth:`Pacer.learned`,
  kept by the daemon across restarts) slow-starts only up to the cut it would make there and probes
  on from it as after a refusal. Rediscovered, the limit was crossed at a slow start's pace and the
  second that crossed it sent what was in flight before the first refusal came back.
* :func:`echo_of_throttle` tells a throttle's echoes (refusals of attempts already in flight when
  it cut the pace) from new failures, for the circuit.

The circuit (machines/circuit.py) is unchanged: pacing only makes the refusals that trip it rare.
Both are driven by one endpoint's :class:`~machines.endpoint.Endpoint` (docs/runtime.md, "One attempt path"), nothing else.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Final

from supervisor.clock import Clock
from supervisor.taxonomy.headers import RateLimitReading
from supervisor.vocabulary import EndpointId

__all__ = ["LearnedLimit", "Pacer", "PacerReport", "PacingConfig", "Probe", "echo_of_throttle"]


class Probe(enum.StrEnum):
    """How the rate grows back after a cut (congestion avoidance)."""

    AIMD = "aimd"
    CUBIC = "cubic"


@dataclass(frozen=True, slots=True)
class PacingConfig:
    """The pacer's numbers (defaults measured in docs/benchmarks.md, "Admission at a binding limit")."""

    # attempts per second to start from; None: unpaced until the platform first throttles
    initial_rate: float | None = 20.0
    min_rate: float = 1.0
    max_rate: float = 10_000.0
    # a fleet member's share of the platform's limit (the shards it owns out of 256: the rates above
    # are already its share, machines/registry.py ``Endpoints.scale``); 1.0: one host, the only
    # sender. Below 1, a refusal may be for the peers' attempts: see :meth:`Pacer.throttled`
    share: float = 1.0
    # a fleet member, whatever its share (one holding all 256 shards too): it slow-starts no further
    # than the initial rate, which is the fleet's share (Pacer._share_threshold)
    fleet: bool = False
    # slow start: the rate grows by this factor for each rate's worth of admitted attempts (TCP's
    # doubling per round trip, RFC 5681 section 3.1: a refusal comes back within milliseconds, so
    # the second in which the rate crosses the limit overshoots it by what is in flight, not by x 2)
    growth: float = 2.0
    # on a throttle, the rate (or what the platform admitted in the last second, when less) is
    # multiplied by this, and becomes the slow-start threshold. Shallower than TCP's 0.5 or
    # CUBIC's 0.7 because the basis is measured: what the platform admitted is its limit, not a
    # window that includes queues. Each probe that finds the limit costs the endpoint a
    # Retry-After pause, so a shallow cut and a slow probe lose less than a deep cut and a fast
    # one (docs/benchmarks.md, "AIMD or CUBIC, and the pacer's numbers": deeper cuts missed the
    # 5,000-session targets)
    backoff: float = 0.85
    # congestion avoidance: the share of the rate added for each second's worth of admitted attempts
    # (2 %: from a cut back to the limit in about 8 s, whatever the limit)
    increase: float = 0.02
    probe: Probe = Probe.AIMD
    # CUBIC's scaling constant C (RFC 9438 section 4.2 and botocore use 0.4), in attempts/s per s³
    cubic_c: float = 0.4
    # a throttle with no Retry-After pauses the endpoint this long
    default_pause_s: float = 1.0
    # throttles within this long of the last decrease are the same episode (already in flight)
    episode_s: float = 1.0
    # slots are booked at most this far ahead: a rate that grows meanwhile serves the later callers
    # (a slot booked minutes ahead at a slow start's rate would keep them waiting at that rate)
    lookahead_s: float = 1.0
    # an endpoint left without attempts this long restarts from ``initial_rate`` (RFC 5681 section
    # 4.1, RFC 7661: a rate learned before an idle period says nothing about the platform now; the
    # rate a start-up of thousands grew to must not meet the next storm). Paced endpoints only.
    idle_restart_s: float = 10.0
    # slots are booked ahead, but an attempt is also checked when it goes out (:meth:`Pacer.send`),
    # with this much burst: a stall (a garbage collection of a process holding thousands of
    # sessions: docs/benchmarks.md, "5,000 sessions") must not bank capacity, or every slot that
    # fell due during it fires at once when it ends, a burst the platform refuses
    send_burst_s: float = 0.02
    # attempts in flight at once: at least this many, or twice what the platform admitted in the
    # last second times the shortest round trip seen, when that is more (BBR's in-flight bound of
    # 2 x the bandwidth-delay product, its cwnd_gain of 2 in draft-ietf-ccwg-bbr; a long round trip needs
    # more in flight for the same rate). Sends are then clocked by answers, like TCP's ACK clock
    # (RFC 5681 section 2), and a throttle comes back with at most about this many attempts behind
    # it. None: no cap (REST calls; docs/benchmarks.md "Admission at a binding limit")
    in_flight_floor: int | None = None
    # the platform's own reading of the rate window (Genesys' inin-ratelimit-count/allowed/reset,
    # :meth:`Pacer.reading`): once this share of the window is spent, what is left of it is spread
    # over the time left, so the window is not spent before it starts again and nothing is refused.
    # Below it the endpoint goes at its own pace (a burst that fits the window is not slowed).
    # None: readings are ignored (docs/benchmarks.md, "Slowing down before the 429")
    headroom: float | None = None

    def __post_init__(self) -> None:
        if self.initial_rate is not None and not self.initial_rate > 0:
            raise ValueError(f"initial_rate must be > 0 or None, got {self.initial_rate!r}")
        if not 0 < self.share <= 1:
            raise ValueError(f"share must be within (0, 1], got {self.share!r}")
        if not 0 < self.min_rate <= self.max_rate:
            raise ValueError(f"need 0 < min_rate <= max_rate, got {self.min_rate!r}, {self.max_rate!r}")
        if not self.growth > 1.0:
            raise ValueError(f"growth must be > 1, got {self.growth!r}")
        if not 0 < self.backoff < 1:
            raise ValueError(f"backoff must be within (0, 1), got {self.backoff!r}")
        if self.in_flight_floor is not None and self.in_flight_floor < 1:
            raise ValueError(f"in_flight_floor must be >= 1 or None, got {self.in_flight_floor!r}")
        if not self.cubic_c > 0:
            raise ValueError(f"cubic_c must be > 0, got {self.cubic_c!r}")
        if self.headroom is not None and not 0.0 <= self.headroom < 1.0:
            raise ValueError(f"headroom must be within [0, 1) or None, got {self.headroom!r}")
        for name in (
            "increase",
            "default_pause_s",
            "episode_s",
            "lookahead_s",
            "idle_restart_s",
            "send_burst_s",
        ):
            if getattr(self, name) < 0 or not math.isfinite(getattr(self, name)):
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)!r}")


@dataclass(frozen=True, slots=True)
class PacerReport:
    """What changed in a pacer, for the bus: a new rate (``reason``) and/or a pause window."""

    endpoint: EndpointId
    rate: float | None
    previous: float | None
    reason: str
    paused_for_s: float = 0.0
    # what the endpoint admits: "connect" (handshakes, session starts) or "rest" (REST calls)
    kind: str = "rest"


@dataclass(frozen=True, slots=True)
class LearnedLimit:
    """What a pacer learned of its endpoint's limit, kept across restarts (:meth:`Pacer.seed`).

    ``limit``: attempts per second the platform refused at the pacer's last cut (CUBIC's W_max:
    what it was admitting then); ``at``: the wall time (epoch seconds) the daemon last knew it.
    """

    limit: float
    at: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.limit) and self.limit > 0):
            raise ValueError(f"a learned limit must be a finite rate > 0, got {self.limit!r}")
        if not math.isfinite(self.at):
            raise ValueError(f"a learned limit's time must be finite, got {self.at!r}")

    def fresh(self, now: float, max_age_s: float) -> bool:
        """Known at most ``max_age_s`` before ``now`` (wall times): it still says something about
        the platform (RFC 9040 leaves how long a cached entry is kept to the implementation). One
        from the future (the wall clock was set back) is not trusted."""
        return 0.0 <= now - self.at <= max_age_s


_NO_RATE: Final = math.inf
# in flight: twice the bandwidth-delay product (BBR's cwnd_gain of 2)
_IN_FLIGHT_GAIN: Final = 2.0
# the measured rate is the admitted attempts of the last second, counted in this many slices of it
# (a sliding window: whole seconds undercount a rate that rose within the second)
_SLICES_PER_S: Final = 10


class Pacer:
    """Adaptive admission of attempts to one endpoint; see the module docstring."""

    __slots__ = (
        "_admitted_slices",
        "_avoiding_since",
        "_bound",
        "_ceiling",
        "_ceiling_until",
        "_clock",
        "_config",
        "_last_booked",
        "_last_cut",
        "_max_before_cut",
        "_min_rtt",
        "_paused_until",
        "_published_rate",
        "_rate",
        "_sent_tat",
        "_slice",
        "_ssthresh",
        "_started",
        "_tat",
        "endpoint",
        "generation",
        "kind",
    )

    def __init__(
        self,
        endpoint: EndpointId,
        clock: Clock,
        config: PacingConfig | None = None,
        *,
        kind: str = "rest",
    ) -> None:
        self.endpoint = endpoint
        #: what it paces, said in its reports (PACING_CHANGED ``kind``): "connect" or "rest"
        self.kind = kind
        self._clock = clock
        self._config = config if config is not None else PacingConfig()
        cfg = self._config
        # attempts per second; None while unpaced
        self._rate: float | None = None if cfg.initial_rate is None else min(cfg.initial_rate, cfg.max_rate)
        # slow start below this rate, additive increase above it
        self._ssthresh = _NO_RATE
        # virtual scheduling: the earliest time the next slot may start (the schedule starts now)
        self._tat = clock.monotonic()
        # when the rate last (re)started from ``initial_rate``: its use is measured from there
        self._started = self._tat
        # the pace was the bound of the last caller: its slot was not free when it asked (the
        # previous slot's successor had not passed, or the endpoint was paused); only then do
        # admissions grow the rate (:meth:`admitted`)
        self._bound = True
        # the same on send times: the earliest time the next attempt may go out (less the burst)
        self._sent_tat = 0.0
        self._last_booked = -math.inf
        self._paused_until = 0.0
        self._last_cut = -math.inf
        # CUBIC's W_max: the rate that was refused at the last cut (or the seeded limit: :meth:`seed`)
        self._max_before_cut = 0.0
        # when congestion avoidance began (at a cut, or when slow start reached the threshold):
        # CUBIC's t counts from here (RFC 9438 section 4.2: "the elapsed time from the beginning
        # of the current congestion avoidance stage")
        self._avoiding_since = -math.inf
        # the shortest round trip of an admitted attempt since the rate last restarted
        self._min_rtt = math.inf
        self._published_rate = self._rate
        # admitted attempts in each slice of the last second (the measured rate), a ring indexed
        # by slice number modulo its length, and the slice last counted in
        self._admitted_slices = [0] * _SLICES_PER_S
        self._slice = 0
        #: rises with every throttle: a slot reserved before it is void (the caller reserves again)
        self.generation = 0
        # the platform's rate window read from its answers (:meth:`reading`): attempts per second
        # that spend what is left of it by its end, until that end (monotonic); None: no ceiling
        self._ceiling: float | None = None
        self._ceiling_until = -math.inf
        self._share_threshold()

    # -- inspection ---------------------------------------------------------------------------

    @property
    def rate(self) -> float | None:
        """Attempts per second admitted now; None while the endpoint is unpaced."""
        return self._pace(self._clock.monotonic())

    @property
    def ceiling(self) -> float | None:
        """The rate the platform's window reading allows now (:meth:`reading`); None: no ceiling."""
        return self._ceiling if self._clock.monotonic() < self._ceiling_until else None

    def _pace(self, now: float) -> float | None:
        """The rate slots are handed out at: the adaptive rate, under the window's ceiling if any."""
        rate = self._rate
        if self._ceiling is None or now >= self._ceiling_until:
            return rate
        return self._ceiling if rate is None else min(rate, self._ceiling)

    @property
    def caps_in_flight(self) -> bool:
        """Whether :meth:`in_flight_cap` may ever be a number (a floor is configured)."""
        return self._config.in_flight_floor is not None

    def paused_for(self) -> float:
        """Seconds the endpoint is still paused by a Retry-After (0 when it is not)."""
        return max(0.0, self._paused_until - self._clock.monotonic())

    def in_flight_cap(self) -> int | None:
        """Attempts that may be in flight at once now; None: no cap (unpaced, or none configured).

        ``in_flight_floor``, or 2 x admitted per second x the shortest round trip when that is
        more. The shortest round trip, not the latest: a queue of the daemon's own making
        lengthens every round trip, and a cap that grew with it would let the queue grow (BBR
        keeps the minimum for the same reason).
        """
        floor = self._config.in_flight_floor
        if floor is None or self._rate is None:
            return None
        if math.isinf(self._min_rtt):
            return floor
        bdp = self._admitted_per_s() * self._min_rtt
        return max(floor, math.ceil(_IN_FLIGHT_GAIN * bdp))

    def learned(self) -> float | None:
        """The limit this pacer knows its endpoint by: the rate the platform refused at the last
        cut (CUBIC's W_max), or the one it was seeded with; None before either."""
        return self._max_before_cut if self._max_before_cut > 0 else None

    # -- inputs -------------------------------------------------------------------------------

    def seed(self, limit: float) -> None:
        """Start from a limit learned before (a previous run's :meth:`learned`, still fresh).

        RFC 9040's temporal sharing (after RFC 2140): a new connection takes its
        predecessor's slow-start threshold. Here the threshold is the cut this pacer would make
        on a refusal at ``limit`` (``limit`` x ``backoff``): slow start stops there, below the
        limit, and the rate probes on from it by congestion avoidance (``probe``; CUBIC's W_max is
        ``limit``) as after a refusal, reaching the limit at the probe's gentle pace instead of at
        a slow start's doubling. It starts at its initial rate, or at the threshold when that is
        lower (a rate known to be refused is not worth starting at). A pacer that has learned a
        limit of its own keeps it; an unpaced one (``initial_rate`` None: REST calls) is left as it
        is: it has no slow start to stop, and engaged from the start it would make every call,
        long polls included, wait for a slot on a platform that may not throttle them today.
        """
        if not (math.isfinite(limit) and limit > 0):
            raise ValueError(f"a learned limit must be a finite rate > 0, got {limit!r}")
        rate = self._rate
        if self._max_before_cut > 0 or rate is None:
            return
        cfg = self._config
        threshold = max(cfg.min_rate, min(limit, cfg.max_rate) * cfg.backoff)
        self._max_before_cut = threshold / cfg.backoff
        self._ssthresh = threshold
        if rate >= threshold:
            # at the threshold already: congestion avoidance from the start
            self._rate = self._published_rate = threshold
            self._avoiding_since = self._clock.monotonic()

    def reserve(self) -> tuple[float, bool]:
        """Take the next slot: ``(wait, booked)``.

        Booked: attempt after ``wait`` seconds (0: now). Not booked: the next free slot is more
        than ``lookahead_s`` away (the queue is long, or the endpoint is paused): ask again after
        ``wait`` seconds, when the rate may have grown.
        """
        now = self._clock.monotonic()
        start = max(now, self._paused_until)
        rate = self._rate
        cfg = self._config
        initial = cfg.initial_rate
        if (
            rate is not None
            and initial is not None
            and rate > initial
            and now - self._last_booked > cfg.idle_restart_s
        ):
            # idle: restart from the initial rate; slow start regrows it up to the last cut
            self._rate = initial
            self._published_rate = initial
            self._min_rtt = math.inf
            self._started = now
        rate = self._pace(now)
        if rate is None:
            return start - now, start <= now
        self._bound = self._tat >= now or start > now
        slot = max(start, self._tat)
        if slot - now > cfg.lookahead_s:
            return min(slot - now, cfg.lookahead_s), False
        self._tat = slot + 1.0 / rate
        self._last_booked = now
        return slot - now, True

    def send(self, due: float) -> float:
        """An attempt whose slot was booked for ``due`` (monotonic) is about to go out: 0 when it
        may go now, else the seconds to wait before asking again.

        Slots are booked ahead and the callers sleep until them; when a stall ends, every slot
        that fell due during it is due at once. A caller that woke ``send_burst_s`` or more past
        its slot goes through virtual scheduling on the send times (GCRA with that much burst),
        which spaces the late ones again at the rate: a stall does not bank capacity. A caller on
        time goes at once.
        """
        now = self._clock.monotonic()
        rate = self._pace(now)
        if rate is None:
            return 0.0
        tat = max(self._sent_tat, now)
        early = tat - now - self._config.send_burst_s
        if now - due >= self._config.send_burst_s and early > 1e-6:  # (not a float's rounding)
            return early
        self._sent_tat = tat + 1.0 / rate
        return 0.0

    def respace(self, queued_at: float) -> float:
        """An attempt that has waited since ``queued_at`` (monotonic) for a place in flight is
        about to go out: 0 when it may go now, else the seconds to wait before asking again.

        Places free up as answers are handled, and answers handled in one batch (after a stall)
        free many places at once: their waiters had passed :meth:`send` at their slots, long
        before, and would all leave together. Like TCP, which paces what its congestion window
        lets go, an attempt that waited ``send_burst_s`` or more for its place goes through the
        send check again, as a late caller: the waiters released together leave spaced at the
        rate. One that got its place at once goes (its send was checked on time).
        """
        now = self._clock.monotonic()
        if self._pace(now) is None or now - queued_at < self._config.send_burst_s:
            return 0.0
        return self.send(queued_at)

    def admitted(self, rtt_s: float | None = None, *, capped: bool = False) -> PacerReport | None:
        """An attempt got through (``rtt_s`` after it left, when known): probe the rate upward
        (slow start, then additive increase), while it is the bound: only when the last caller
        found no free slot, never while callers come slower than it, nor while attempts wait for a
        place in flight (``capped``: the in-flight cap holds them, not the rate)."""
        if rtt_s is not None and 0.0 <= rtt_s < self._min_rtt:
            self._min_rtt = rtt_s
        self._advance_slices()
        self._admitted_slices[self._slice % _SLICES_PER_S] += 1
        rate = self._rate
        if rate is None:
            return None
        if capped or not self._bound or self._unvalidated(rate):
            # application-limited: the last caller found its slot free (it came later than the pace
            # allowed), so the rate was not what bounded the attempts and an admission says nothing
            # about a higher one. Grown anyway, a daemon sending 150 a second slow-started its rate
            # to 1,600, and nothing held back the burst that followed a stall (RFC 7661: a window
            # the sender does not use is not grown; Linux grows cwnd only while it limits the sender)
            return None
        cfg = self._config
        if rate < self._ssthresh:
            # slow start, per admitted attempt: a rate's worth of them (one second) multiplies
            # the rate by growth, up to the threshold (RFC 5681 section 3.1); congestion
            # avoidance begins there
            rate = min(rate + cfg.growth - 1.0, self._ssthresh)
            if rate >= self._ssthresh:
                self._avoiding_since = self._clock.monotonic()
        elif cfg.probe is Probe.CUBIC:
            rate = max(rate, self._cubic(self._clock.monotonic() - self._avoiding_since))
        else:
            # additive increase: a second's worth of admitted attempts adds `increase` of the rate
            rate += cfg.increase
        self._rate = min(rate, cfg.max_rate)
        published = self._published_rate
        if published is None or self._rate >= 2.0 * published:
            # bounded event volume: a rate change is reported each time it doubles
            self._published_rate = self._rate
            return PacerReport(self.endpoint, self._rate, published, "probe", kind=self.kind)
        return None

    def reading(self, reading: RateLimitReading) -> PacerReport | None:
        """An answer read the platform's rate window of its token: ``count`` of ``allowed`` spent,
        starting again in ``reset_s`` (docs/platforms.md, "Genesys Cloud Platform REST").

        Once ``headroom`` of the window is spent, the attempts left in it are spread evenly over the
        time left: a ceiling of ``(allowed - count) / reset_s`` per second until the window starts
        again, so the window lasts until then and no answer is a 429 (a Retry-After pause costs the
        whole endpoint more than going a little slower); a window spent to the last call pauses the
        endpoint until it starts again, as a Retry-After would. Below ``headroom`` there is no
        ceiling: a burst that fits in what the window has left goes at once. The adaptive rate
        (slow start, the cut on a throttle) still applies under the ceiling. A ``PacerReport``
        (reason ``ratelimit``) when the ceiling comes on or is lifted, or the endpoint is paused,
        not for each reading.
        """
        headroom = self._config.headroom
        if headroom is None:
            return None
        now = self._clock.monotonic()
        before = self._ceiling if now < self._ceiling_until else None
        # (a reset of 0 s: the window starts again within the second the answer was sent)
        reset_s = max(reading.reset_s, 1.0)
        left = reading.allowed - reading.count
        paused = 0.0
        if reading.used < headroom:
            ceiling = None
        elif left > 0:
            ceiling = left / reset_s
        else:
            # the window is spent: nobody asks before it starts again (a call now is a 429), as
            # after a Retry-After; then the ceiling of that window is over
            ceiling = 1.0 / reset_s
            pause_until = now + reset_s
            if pause_until > self._paused_until + 1e-9:
                self._paused_until = pause_until
                self.generation += 1
                paused = reset_s
        self._ceiling = ceiling
        self._ceiling_until = now + reset_s if ceiling is not None else -math.inf
        if (before is None) == (ceiling is None) and not paused:
            return None
        return PacerReport(self.endpoint, self._pace(now), before, "ratelimit", paused, self.kind)

    def lost(self) -> PacerReport | None:
        """The platform dropped a connection (the session reconnects): restart from ``initial_rate``.

        Like TCP's retransmission timeout (RFC 5681 section 3.1: the window falls to the loss
        window and slow start begins again), a rate learned before says nothing about a platform
        that has just dropped its connections: thousands of sessions started a minute ago may have
        grown it to thousands a second, and the restarted platform may admit fifty. Unless attempts
        are going through right now (booked within ``episode_s``): they measure the platform better
        than the loss does, and a storm's own drops must not pull its recovery back to the start.
        The slow-start threshold (the last cut) is kept.
        """
        initial = self._config.initial_rate
        rate = self._rate
        if initial is None or rate is None or rate <= initial:
            return None
        if self._clock.monotonic() - self._last_booked < self._config.episode_s:
            return None
        self._rate = initial
        self._published_rate = initial
        # the platform that dropped its connections may be another one now (a failover)
        self._min_rtt = math.inf
        # the restarted schedule starts now, as a new pacer's: its slow start is not application-limited
        self._tat = self._started = max(self._tat, self._clock.monotonic())
        return PacerReport(self.endpoint, initial, rate, "restart", kind=self.kind)

    def echoes(self, sent_at: float) -> bool:
        """Is the refusal of an attempt sent at ``sent_at`` (monotonic) an echo of the last throttle?

        True when the attempt left before the endpoint's rate was last cut: it was already in
        flight when the refusal that cut the rate came back, so its own refusal tells nothing the
        daemon has not acted on. Like TCP's one congestion response per window of data in flight
        (RFC 6582 section 3.2, the ``recover`` point; RFC 5681 section 4.3), its caller does not
        count it as one more failure toward the endpoint's circuit: at a limit crossed at
        hundreds of attempts a second, the attempts in flight (and a garbage collection's worth
        of queued answers) are refused together, and five of them opened the circuit for 30 s
        on a platform that was admitting at its limit (docs/benchmarks.md, "Admission at a binding limit").
        """
        return sent_at < self._last_cut

    def hold(self, until: float) -> bool:
        """Another member of the fleet was told Retry-After for this endpoint: nobody attempts before
        ``until`` (monotonic), here either. The pause only: this member's rate is its own (it was not
        refused), and the attempts the peer sent are not this pacer's to count. Slots booked before
        are void (the caller reserves again, after the pause). True when it lengthened the pause."""
        if until <= self._paused_until + 1e-9:
            return False
        self._paused_until = until
        self.generation += 1
        return True

    def rescale(self, config: PacingConfig, factor: float) -> None:
        """Go on with ``config``, this member's share of the configured rates, which moved by
        ``factor`` (the shards it owns: twice as many, twice the rate). What the pacer knows moves
        with it: the rate, the slow-start threshold and the limit learned at the last cut (the
        platform's limit is the fleet's; this member's part of it follows its part of the sessions),
        each kept within the new bounds. The schedule and the pause are kept."""
        self._config = config
        if self._max_before_cut > 0:
            self._max_before_cut *= factor
        if math.isfinite(self._ssthresh):
            self._ssthresh = max(config.min_rate, self._ssthresh * factor)
        rate = self._rate
        if rate is not None:
            scaled = rate * factor
            initial = config.initial_rate
            if config.fleet and factor > 1.0 and initial is not None:
                # what the member's additive probe found above its former share of the initial rate
                # is carried over as it is, not multiplied: that probe was validated on the former
                # share's attempts only. Multiplied, two members taking a killed peer's shards (x 4
                # each, 32 -> 128 shards) went on at 56/s and 55/s where their shares were 50/s:
                # 114 handshakes within a second at the fleet's 100/s
                former = initial / factor
                if rate > former:
                    scaled = min(scaled, initial + (rate - former))
            self._rate = self._published_rate = min(max(scaled, config.min_rate), config.max_rate)
        self._share_threshold()

    def _share_threshold(self) -> None:
        """A fleet member that knows no limit yet slow-starts no further than its share of the
        initial rate, and probes on above it additively (TCP's slow-start threshold, RFC 5681
        section 3.1, set to what the fleet is configured to start from). Each member's slow start
        sees only its own admissions, so members growing at once multiply the fleet's rate together:
        two taking a failed member's sessions crossed the platform's limit by a fifth before the
        first refusal came back (120 handshakes within a second at 100/s, 20 of them refused), and
        a fleet's first member, holding every shard before its peers joined, by a quarter. The
        shares of the initial rate add up to the configured one; the additive probe passes it by
        2 % a second. One host keeps its slow start."""
        initial = self._config.initial_rate
        if self._config.fleet and initial is not None and not math.isfinite(self._ssthresh):
            self._ssthresh = initial
            if self._rate is not None and self._rate >= initial:
                self._avoiding_since = self._clock.monotonic()

    def throttled(self, retry_after_s: float | None) -> PacerReport | None:
        """The platform refused for rate (429/503): cut the rate once per episode, pause the endpoint."""
        cfg = self._config
        now = self._clock.monotonic()
        pause = cfg.default_pause_s if retry_after_s is None else max(0.0, retry_after_s)
        pause_until = now + pause
        paused_more = pause_until > self._paused_until + 1e-9
        if paused_more:
            self._paused_until = pause_until
            self.generation += 1
        if now - self._last_cut < cfg.episode_s:
            # in-flight refusals of the same burst: the rate was cut already
            if not paused_more:
                return None
            return PacerReport(self.endpoint, self._rate, self._rate, "pause", pause, self.kind)
        self._last_cut = self._avoiding_since = now
        self.generation += 1
        previous = self._rate
        measured = self._admitted_per_s()
        if previous is None:
            # first throttle of an unpaced endpoint: engage below what it was admitting
            cut = max(cfg.min_rate, measured * cfg.backoff)
        else:
            # below what the platform admitted in the last second, when that is less than the
            # rate: a rate far above the limit (grown while nothing refused) comes down in one
            # cut instead of one per episode (the burst the platform refused is over the limit)
            basis = min(previous, measured) if measured > 0 else previous
            if cfg.share < 1.0 and self._unvalidated(previous):
                # a fleet member that was not using its pace (less than half of it admitted): the
                # platform's limit is the fleet's, and it was its peers' attempts that crossed it.
                # Cut from what it admitted, its rate fell to a few a second (3 admitted as a
                # takeover began: 2.55/s) and the additive probe took tens of seconds to bring its
                # share of the sessions back; so it cuts its pace, as the peers' cut theirs
                basis = previous
            cut = max(cfg.min_rate, basis * cfg.backoff)
        # CUBIC's W_max: the rate the platform refused, i.e. what it was admitting
        self._max_before_cut = cut / cfg.backoff
        self._rate = cut
        self._ssthresh = cut
        self._published_rate = cut
        # the slots handed out at the old rate are void: the next one starts after the pause
        self._tat = self._paused_until
        return PacerReport(self.endpoint, cut, previous, "throttled", pause, self.kind)

    def _unvalidated(self, rate: float) -> bool:
        """Less than half the rate was admitted in the last second (or since the rate started, when
        that is less than a second ago): the rate is not in use, whatever the queue says.

        RFC 7661 section 4.3: a window is validated while what was acknowledged in the last period
        is at least half of it, and only a validated window grows (Linux grows in slow start only
        while cwnd < 2 x what it had in flight). Callers may queue at the pace while the attempts
        leave slower than it (the daemon's own loop is the bound: 1,000 handshakes queued, ~130 a
        second sent): the slow start grew the rate to 640/s there."""
        span = min(1.0, self._clock.monotonic() - self._started)
        return self._admitted_per_s() < 0.5 * rate * span

    def _advance_slices(self) -> None:
        """Move the window to now: the slices that fell out of the last second are emptied."""
        current = math.floor(self._clock.monotonic() * _SLICES_PER_S)
        passed = current - self._slice
        if passed <= 0:
            return
        for step in range(1, min(passed, _SLICES_PER_S) + 1):
            self._admitted_slices[(self._slice + step) % _SLICES_PER_S] = 0
        self._slice = current

    def _admitted_per_s(self) -> int:
        """Attempts admitted in the last second, sliding: the slice now under way and the nine before it.

        A sliding window, not the last whole second: a slow start doubles the rate within a
        second, and a platform refusing at its limit soon after a whole second began saw a whole
        second's worth of the new rate that a count of the previous whole second (at the old
        rate) misses; cut from that undercount, the rate fell to half the limit and took half a
        minute to probe back up (docs/benchmarks.md, "One attempt path").
        """
        self._advance_slices()
        return sum(self._admitted_slices)

    def _cubic(self, since_cut_s: float) -> float:
        """RFC 9438 eq. 1: W(t) = C (t - K)³ + W_max, K = ∛(W_max (1 - β) / C), β = ``backoff``."""
        cfg = self._config
        w_max = self._max_before_cut
        k = (w_max * (1.0 - cfg.backoff) / cfg.cubic_c) ** (1.0 / 3.0)
        return float(cfg.cubic_c * (since_cut_s - k) ** 3 + w_max)


def echo_of_throttle(pacer: Pacer | None, throttled: bool, probe_id: int, sent_at: float) -> bool:
    """Is this failure a throttle's echo, one the endpoint's circuit must not count again?

    A refusal for load (``throttled``) of an attempt sent at ``sent_at``, before the endpoint's
    last cut (:meth:`Pacer.echoes`). Never a half-open probe (``probe_id`` != 0): the circuit must
    hear how its probe went. Asked by :meth:`machines.endpoint.Endpoint.answered`, for every attempt.
    """
    return throttled and probe_id == 0 and pacer is not None and pacer.echoes(sent_at)
