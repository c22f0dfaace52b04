"""Adaptive pacing and the retry budget (docs/runtime.md, "Admission"), on a fake clock."""

from __future__ import annotations

import collections
import itertools
import math

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from machines.pacing import LearnedLimit, Pacer, PacingConfig, Probe, echo_of_throttle
from machines.retry_budget import RetryBudget
from supervisor.clock import FakeClock
from supervisor.taxonomy.headers import RateLimitReading
from supervisor.vocabulary import EndpointId, Platform

#: the endpoint these tests pace
EP = EndpointId(Platform.GENESYS, "ep")


def take(pacer: Pacer, clock: FakeClock) -> None:
    """Wait for a booked slot, as a caller does (asking again when it was not booked)."""
    while True:
        wait, booked = pacer.reserve()
        clock.advance(wait)
        if booked:
            return


def drain(pacer: Pacer, clock: FakeClock, n: int) -> list[float]:
    """Reserve ``n`` slots one after another, moving the clock to each; returns the start times."""
    starts = []
    for _ in range(n):
        take(pacer, clock)
        starts.append(clock.monotonic())
        pacer.admitted()
    return starts


def test_slots_are_spaced_at_the_rate() -> None:
    clock = FakeClock()
    pacer = Pacer(EP, clock, PacingConfig(initial_rate=10.0, growth=1.0001))
    waits = [pacer.reserve() for _ in range(5)]
    assert waits == [(pytest.approx(w), True) for w in (0.0, 0.1, 0.2, 0.3, 0.4)]


def test_slots_are_booked_at_most_a_lookahead_ahead_so_a_growing_rate_serves_later_callers() -> None:
    clock = FakeClock()
    pacer = Pacer(EP, clock, PacingConfig(initial_rate=10.0, lookahead_s=1.0))
    booked = [pacer.reserve() for _ in range(30)]
    assert sum(1 for _, b in booked if b) == 11  # 0.0 .. 1.0 s
    wait, was_booked = booked[-1]
    assert not was_booked and wait == 1.0  # ask again in a second


def test_slow_start_multiplies_the_rate_per_rates_worth_of_admitted_attempts() -> None:
    clock = FakeClock()
    pacer = Pacer(EP, clock, PacingConfig(initial_rate=10.0, growth=2.0))
    drain(pacer, clock, 10)  # ten admitted attempts at 10/s: one rate's worth
    assert pacer.rate == pytest.approx(20.0)


def test_a_throttle_cuts_the_rate_once_per_episode_and_pauses_the_endpoint() -> None:
    clock = FakeClock()
    pacer = Pacer(EP, clock, PacingConfig(initial_rate=100.0, backoff=0.5))
    report = pacer.throttled(3.0)
    assert report is not None and report.reason == "throttled" and report.paused_for_s == 3.0
    assert pacer.rate == 50.0
    # the refusals of the same burst (already in flight) do not cut it again
    assert pacer.throttled(3.0) is None
    assert pacer.rate == 50.0
    # nobody goes before the platform said it is ready: not even booked until the pause ends
    assert pacer.reserve() == (pytest.approx(1.0), False)
    clock.advance(2.0)
    assert pacer.reserve() == (pytest.approx(1.0), True)
    clock.advance(5.0)
    pacer.throttled(None)
    assert pacer.rate == 25.0  # a new episode
    assert pacer.paused_for() == pytest.approx(1.0)  # the default pause


def test_after_a_throttle_the_rate_probes_up_additively() -> None:
    clock = FakeClock()
    pacer = Pacer(EP, clock, PacingConfig(initial_rate=100.0, backoff=0.5, increase=0.1))
    pacer.throttled(0.0)
    assert pacer.rate == 50.0
    drain(pacer, clock, 50)  # a second's worth at 50/s: +10 % of the rate
    assert pacer.rate == pytest.approx(55.0)


def test_cubic_returns_to_the_refused_rate_at_k_flat_near_it_then_steeper() -> None:
    """RFC 9438 eq. 1 with C = 0.4, beta = 0.7: refused at 100/s, K = (100 * 0.3 / 0.4) ** (1/3)."""
    clock = FakeClock()
    pacer = Pacer(EP, clock, PacingConfig(initial_rate=100.0, probe=Probe.CUBIC, backoff=0.7))
    cut_at = clock.monotonic()
    pacer.throttled(0.0)
    assert pacer.rate == pytest.approx(70.0)
    k = 75.0 ** (1.0 / 3.0)
    seen = []
    for t in (k / 2, k - 0.5, k, k + 0.5, k + 3.0):
        clock.advance(cut_at + t - clock.monotonic())
        # two callers at once: the second waits for its slot, the rate is the bound; and more than
        # half the rate admitted within the second: it is in use (it grows only then, RFC 7661).
        # CUBIC's rate is a function of the time since the cut: the admissions at one time agree
        pacer.reserve()
        pacer.reserve()
        for _ in range(60):
            pacer.admitted()
        seen.append(pacer.rate)
    assert seen[0] == pytest.approx(0.4 * (k / 2 - k) ** 3 + 100.0)
    assert 70.0 < seen[0] < seen[1] < seen[2] < seen[3] < seen[4]
    assert seen[2] == pytest.approx(100.0)
    # concave then convex: the half second before K adds less than the three seconds after it
    assert seen[2] - seen[1] == pytest.approx(seen[3] - seen[2]) and seen[4] - seen[3] > seen[3] - seen[2]


def test_an_unpaced_endpoint_engages_below_what_it_was_admitting() -> None:
    clock = FakeClock()
    pacer = Pacer(EP, clock, PacingConfig(initial_rate=None, backoff=0.5))
    assert pacer.rate is None and pacer.reserve() == (0.0, True)
    for _ in range(80):  # 80 admitted within one second
        clock.advance(0.01)
        pacer.admitted()
    clock.advance(0.05)
    pacer.throttled(1.0)
    assert pacer.rate == pytest.approx(40.0)


def test_a_cut_counts_the_last_second_sliding_not_the_last_whole_second() -> None:
    """A slow start that doubled within the last second is cut from what the last second admitted.

    160 a second for a second, then 320 a second for 0.35 s: the last second (sliding) admitted
    about 0.65 x 160 + 0.35 x 320 = 216; the last whole second, 160. Cut from 160 (x 0.85 = 136)
    the rate would sit a third below a limit of about 200 and take half a minute to probe back.
    """
    clock = FakeClock()
    pacer = Pacer(EP, clock, PacingConfig(initial_rate=None, backoff=0.85))
    pacer.reserve()
    for _ in range(160):
        clock.advance(1 / 160)
        pacer.admitted()
    for _ in range(112):
        clock.advance(1 / 320)
        pacer.admitted()
    pacer.throttled(1.0)
    rate = pacer.rate
    assert rate is not None and 0.85 * 200 <= rate <= 0.85 * 222


def test_a_pause_is_never_shortened_by_a_later_shorter_retry_after() -> None:
    clock = FakeClock()
    pacer = Pacer(EP, clock, PacingConfig(initial_rate=10.0))
    pacer.throttled(10.0)
    clock.advance(2.0)
    pacer.throttled(1.0)
    assert pacer.paused_for() == pytest.approx(8.0)


@given(
    limit=st.integers(5, 600),
    n=st.integers(50, 3000),
    initial=st.sampled_from([5.0, 20.0, 50.0]),
    probe=st.sampled_from(list(Probe)),
)
def test_against_a_fixed_window_limit_refusals_stay_rare_and_the_limit_is_used(
    limit: int, n: int, initial: float, probe: Probe
) -> None:
    """A platform admitting ``limit`` per clock second; every refusal answered with Retry-After 1 s.

    The pacer discovers the limit: refusals stay under 5 % of the attempts plus one per episode
    it needs to find the limit, and the whole batch goes through at least half as fast as the
    limit allows (after the slow start). CUBIC's constant is absolute (attempts/s per s³), so
    below about 20/s its probes are large against the rate and refuse more (12 % at 5/s:
    tests/bench/bench_probe.py); the property holds for it from 20/s.
    """
    assume(probe is Probe.AIMD or limit >= 20)
    clock = FakeClock(start=0.0, epoch=0.0)
    pacer = Pacer(EP, clock, PacingConfig(initial_rate=initial, probe=probe))
    window, used = -1, 0
    refused = admitted = 0
    while admitted < n:
        take(pacer, clock)
        second = int(clock.time())
        if second != window:
            window, used = second, 0
        if used < limit:
            used += 1
            admitted += 1
            pacer.admitted()
        else:
            refused += 1
            pacer.throttled(1.0)
    # one refusal per episode it takes to come down to the limit from a higher start, then the
    # probing ones (one about every 7 s of sending at the limit), well under 5 % of the attempts
    episodes_down = (
        max(0, math.ceil(math.log(initial / limit) / math.log(1 / PacingConfig().backoff)))
        if initial > limit
        else 0
    )
    assert refused <= 0.05 * n + episodes_down + 1
    slow_start = 12.0  # seconds to grow from the initial rate to any limit here
    assert clock.monotonic() <= slow_start + 2.0 * n / limit


def test_the_retry_budget_allows_a_share_of_the_calls_plus_a_floor() -> None:
    clock = FakeClock()
    budget = RetryBudget(clock, ratio=0.1, min_per_s=1.0, window_s=10.0)
    for _ in range(100):
        budget.call()
    allowed = sum(budget.allow_retry() for _ in range(100))
    assert allowed == 20  # 10 % of 100 calls, plus 1/s over the 10 s window
    assert budget.refused == 80
    clock.advance(11.0)  # the window moved on: only the floor is left
    assert sum(budget.allow_retry() for _ in range(100)) == 10


def test_nonsense_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="growth"):
        PacingConfig(growth=1.0)
    with pytest.raises(ValueError, match="backoff"):
        PacingConfig(backoff=1.5)
    with pytest.raises(ValueError, match="retry budget"):
        RetryBudget(FakeClock(), ratio=-1.0)


def test_a_throttle_cuts_below_what_the_platform_admitted_when_the_rate_had_run_far_above_it() -> None:
    """A rate grown to 1,000/s while nothing refused meets a platform admitting 50 a second: one
    cut brings it below the 50 (0.7 x), not one cut per episode from 1,000 down."""
    clock = FakeClock(start=100.0)
    pacer = Pacer(EP, clock, PacingConfig(initial_rate=1000.0, backoff=0.7))
    for _ in range(50):
        pacer.admitted()
    clock.advance(0.5)
    assert pacer.throttled(1.0) is not None
    assert pacer.rate == pytest.approx(35.0)


def test_after_an_idle_period_the_rate_restarts_from_the_initial_rate() -> None:
    """RFC 5681 section 4.1: a start-up grew the rate to hundreds; ten quiet seconds later (all
    sessions up), the next storm starts again from the initial rate and slow-starts."""
    clock = FakeClock(start=100.0)
    pacer = Pacer(EP, clock, PacingConfig(initial_rate=20.0, idle_restart_s=10.0))
    drain(pacer, clock, 2000)
    grown = pacer.rate
    assert grown is not None and grown > 200
    clock.advance(9.0)
    drain(pacer, clock, 1)
    assert pacer.rate == pytest.approx(grown, rel=0.01)  # not idle long enough
    clock.advance(10.5)
    pacer.reserve()
    assert pacer.rate == 20.0


def test_a_drop_on_a_quiet_endpoint_restarts_from_the_initial_rate_but_not_mid_storm() -> None:
    """RFC 5681 section 3.1: a start-up grew the rate to hundreds; two seconds later the platform
    drops every connection: the rate starts again from the initial rate (the slow-start threshold
    is kept). A drop while attempts are going through, and a second drop, change nothing."""
    clock = FakeClock(start=100.0)
    pacer = Pacer(EP, clock, PacingConfig(initial_rate=20.0, backoff=0.5))
    drain(pacer, clock, 1000)
    grown = pacer.rate
    assert grown is not None and grown > 200
    assert pacer.lost() is None  # attempts are going through: they measure the platform
    clock.advance(2.0)
    report = pacer.lost()
    assert report is not None and (report.reason, report.rate, report.previous) == ("restart", 20.0, grown)
    assert pacer.rate == 20.0
    assert pacer.lost() is None  # already restarted
    # slow start from there, up to the last cut
    drain(pacer, clock, 20)
    assert pacer.rate == pytest.approx(40.0)
    pacer.throttled(0.0)
    cut = pacer.rate
    assert cut is not None and cut < 40.0
    clock.advance(5.0)
    pacer.lost()
    drain(pacer, clock, 200)
    assert pacer.rate is not None and pacer.rate < 2 * cut + 10  # additive above the kept threshold


def test_a_drop_leaves_an_unpaced_endpoint_unpaced() -> None:
    clock = FakeClock(start=100.0)
    pacer = Pacer(EP, clock, PacingConfig(initial_rate=None))
    clock.advance(5.0)
    assert pacer.lost() is None
    assert pacer.rate is None


def test_slots_that_fell_due_during_a_stall_go_out_spaced_at_the_rate_not_at_once() -> None:
    """Ten callers booked slots 0.1 s apart (10/s); the process stalls for a second (a garbage
    collection); when it resumes every slot is due. Checked when they go out, the first goes at
    once and the others are spaced at the rate again: the stall banked no capacity."""
    clock = FakeClock(start=100.0)
    pacer = Pacer(EP, clock, PacingConfig(initial_rate=10.0, growth=1.0001, send_burst_s=0.0))
    start = clock.monotonic()
    booked = [pacer.reserve() for _ in range(10)]
    assert all(ok for _, ok in booked) and booked[-1][0] == pytest.approx(0.9)
    dues = [start + wait for wait, _ in booked]
    clock.advance(1.5)  # the stall: every slot is past
    waits = [pacer.send(due) for due in dues]
    assert waits[0] == 0.0 and all(w > 0 for w in waits[1:])
    # each caller waits its turn: sends spaced 0.1 s apart
    sent = [clock.monotonic()]
    for due in dues[1:]:
        while (extra := pacer.send(due)) > 0:
            clock.advance(extra)
        sent.append(clock.monotonic())
    assert [round(b - a, 6) for a, b in itertools.pairwise(sent)] == [0.1] * 9


def test_on_time_slots_go_out_without_waiting() -> None:
    clock = FakeClock(start=100.0)
    pacer = Pacer(EP, clock, PacingConfig(initial_rate=10.0, growth=1.0001))
    for _ in range(20):
        wait, ok = pacer.reserve()
        assert ok
        due = clock.monotonic() + wait
        clock.advance(wait)
        assert pacer.send(due) == 0.0
    # a clock that does not move (callers sleep their waits elsewhere): on time, never held
    frozen = Pacer(EP, FakeClock(start=100.0), PacingConfig(initial_rate=10.0))
    for _ in range(5):
        wait, ok = frozen.reserve()
        assert ok and frozen.send(100.0 + wait) == 0.0


def test_refusals_of_attempts_in_flight_at_the_cut_are_its_echoes_later_ones_are_not() -> None:
    """RFC 6582 section 3.2: one congestion response per window in flight. Attempts sent before
    the cut echo it; an attempt sent after it (or before any cut) is news."""
    clock = FakeClock(start=100.0)
    pacer = Pacer(EP, clock, PacingConfig(initial_rate=100.0))
    sent = []
    for _ in range(10):  # ten attempts leave, 10 ms apart
        take(pacer, clock)
        sent.append(clock.monotonic())
    clock.advance(0.005)  # the first refusal comes back
    assert not pacer.echoes(sent[0])  # no cut yet: it is news
    pacer.throttled(1.0)  # ...and cuts the rate
    assert all(pacer.echoes(at) for at in sent)  # the rest were in flight: echoes
    take(pacer, clock)  # after the pause
    later = clock.monotonic()
    assert later >= sent[-1] + 1.0
    clock.advance(0.005)
    assert not pacer.echoes(later)  # refused again: news (a platform still refusing opens the circuit)


def test_a_half_open_probe_or_a_failure_that_is_no_throttle_is_never_an_echo() -> None:
    """The circuit must hear how its probe went, and only a refusal for load echoes a cut."""
    clock = FakeClock(start=100.0)
    pacer = Pacer(EP, clock, PacingConfig(initial_rate=100.0))
    sent = clock.monotonic()
    clock.advance(0.01)
    pacer.throttled(1.0)
    assert echo_of_throttle(pacer, True, 0, sent)
    assert not echo_of_throttle(pacer, True, 7, sent)  # a half-open probe
    assert not echo_of_throttle(pacer, False, 0, sent)  # a 500, a reset: not a refusal for load
    assert not echo_of_throttle(None, True, 0, sent)  # an unpaced endpoint has no cut to echo


def test_the_in_flight_cap_is_the_floor_until_a_round_trip_is_known_and_none_when_not_configured() -> None:
    clock = FakeClock()
    assert Pacer(EP, clock, PacingConfig(initial_rate=10.0)).in_flight_cap() is None
    assert Pacer(EP, clock, PacingConfig(initial_rate=None, in_flight_floor=4)).in_flight_cap() is None
    pacer = Pacer(EP, clock, PacingConfig(initial_rate=10.0, in_flight_floor=4))
    assert pacer.in_flight_cap() == 4
    pacer.admitted()  # no round trip known yet
    assert pacer.in_flight_cap() == 4
    with pytest.raises(ValueError, match="in_flight_floor"):
        PacingConfig(in_flight_floor=0)


def test_the_in_flight_cap_grows_to_twice_admitted_per_second_times_the_shortest_round_trip() -> None:
    """BBR's bound: a platform 0.3 s away admitting 50/s needs 15 in flight; the cap gives 30.
    A longer round trip later (a queue of the daemon's own) does not raise it: the shortest counts."""
    clock = FakeClock()
    pacer = Pacer(EP, clock, PacingConfig(initial_rate=50.0, growth=1.0001, in_flight_floor=4))
    for _ in range(50):  # one second of admissions at 50/s, each 0.3 s after it left
        take(pacer, clock)
        pacer.admitted(0.3)
    assert pacer.in_flight_cap() == 30  # the last second counts 50
    pacer.admitted(2.0)  # the last second counts 51, the shortest round trip is still 0.3 s
    assert pacer.in_flight_cap() == 31
    pacer.admitted(0.1)  # a shorter one is the new minimum: 52 x 0.1 x 2
    assert pacer.in_flight_cap() == 11


def test_a_restart_forgets_the_round_trip_with_the_rate() -> None:
    """An idle endpoint, or one whose platform dropped its connections, may be another platform
    now (a failover): the cap falls back to the floor until a new round trip is measured."""
    clock = FakeClock()
    pacer = Pacer(EP, clock, PacingConfig(initial_rate=20.0, in_flight_floor=4, idle_restart_s=10.0))
    for _ in range(40):
        take(pacer, clock)
        pacer.admitted(1.0)
    assert (pacer.in_flight_cap() or 0) > 4  # twenty-odd a second, a second away
    clock.advance(5.0)
    assert pacer.lost() is not None  # quiet for longer than an episode: the rate restarts
    assert pacer.in_flight_cap() == 4
    for _ in range(40):
        take(pacer, clock)
        pacer.admitted(1.0)
    assert (pacer.in_flight_cap() or 0) > 4
    clock.advance(30.0)
    pacer.reserve()  # idle past idle_restart_s: the rate restarts from initial_rate
    assert pacer.in_flight_cap() == 4


def test_waiters_that_one_batch_of_answers_lets_go_are_spaced_again_at_the_rate() -> None:
    """Ten attempts passed the send check on time (10/s) and then waited for places in flight;
    one stall's batch of answers frees every place at once, a second later. Respaced when they
    leave, they go 0.1 s apart, not together. An attempt that got its place at once is not held
    (its send was checked on time) and does not take a second send slot."""
    clock = FakeClock(start=100.0)
    pacer = Pacer(EP, clock, PacingConfig(initial_rate=10.0, growth=1.0001, send_burst_s=0.0))
    queued = []
    for _ in range(10):
        wait, ok = pacer.reserve()
        assert ok
        clock.advance(wait)
        assert pacer.send(clock.monotonic()) == 0.0
        queued.append(clock.monotonic())  # each waits for a place from here
    clock.advance(1.0)  # the batch of answers comes a second later and frees all ten places
    sent = []
    for queued_at in queued:
        while (extra := pacer.respace(queued_at)) > 0:
            clock.advance(extra)
        sent.append(clock.monotonic())
    assert [round(b - a, 6) for a, b in itertools.pairwise(sent)] == [0.1] * 9
    # on time: a place at once means no wait, and the next on-time send is not pushed back
    on_time = Pacer(EP, clock, PacingConfig(initial_rate=10.0, growth=1.0001))
    wait, ok = on_time.reserve()
    clock.advance(wait)
    due = clock.monotonic()
    assert on_time.send(due) == 0.0 and on_time.respace(due) == 0.0
    wait, ok = on_time.reserve()
    clock.advance(wait + 0.05)  # woke 50 ms late: the send check spaces it after the first only
    assert on_time.send(clock.monotonic() - 0.05) == 0.0


# -- the platform's reading of its rate window (Genesys' inin-ratelimit-*: Pacer.reading) ----------


def rest_pacer(clock: FakeClock, headroom: float | None = 0.5) -> Pacer:
    # a REST endpoint's pacer: unpaced until it must slow down
    return Pacer(EP, clock, PacingConfig(initial_rate=None, headroom=headroom))


def test_a_reading_below_the_headroom_leaves_the_endpoint_unpaced() -> None:
    clock = FakeClock()
    pacer = rest_pacer(clock)
    assert pacer.reading(RateLimitReading(count=149, allowed=300, reset_s=40.0)) is None
    assert pacer.rate is None and pacer.ceiling is None
    assert [pacer.reserve() for _ in range(50)] == [(0.0, True)] * 50  # a burst goes at once


def test_past_the_headroom_what_is_left_of_the_window_is_spread_over_its_time_left() -> None:
    clock = FakeClock()
    pacer = rest_pacer(clock)
    report = pacer.reading(RateLimitReading(count=200, allowed=300, reset_s=20.0))
    assert report is not None and report.reason == "ratelimit" and report.previous is None
    # 100 left for 20 s: 5 per second
    assert pacer.ceiling == pytest.approx(5.0) and pacer.rate == pytest.approx(5.0)
    waits = [pacer.reserve()[0] for _ in range(4)]
    assert waits == [pytest.approx(w) for w in (0.0, 0.2, 0.4, 0.6)]
    # a later reading moves the ceiling, without a report of its own
    assert pacer.reading(RateLimitReading(count=290, allowed=300, reset_s=5.0)) is None
    assert pacer.ceiling == pytest.approx(2.0)
    # a window spent to the last request: nobody asks before it starts again
    report = pacer.reading(RateLimitReading(count=300, allowed=300, reset_s=5.0))
    assert report is not None and report.paused_for_s == 5.0
    assert pacer.paused_for() == pytest.approx(5.0)
    wait, _ = pacer.reserve()
    assert wait >= 1.0  # (booked at most a lookahead ahead: it asks again, still paused)


def test_the_ceiling_lifts_when_the_window_starts_again() -> None:
    clock = FakeClock()
    pacer = rest_pacer(clock)
    pacer.reading(RateLimitReading(count=250, allowed=300, reset_s=10.0))
    assert pacer.ceiling is not None
    clock.advance(10.0)  # its window is over: nothing read since holds the endpoint back
    assert pacer.ceiling is None and pacer.rate is None
    pacer.reading(RateLimitReading(count=250, allowed=300, reset_s=10.0))
    # and a reading of a fresh window lifts it at once (reported)
    report = pacer.reading(RateLimitReading(count=1, allowed=300, reset_s=60.0))
    assert report is not None and report.reason == "ratelimit" and report.rate is None
    assert pacer.ceiling is None


def test_under_the_ceiling_the_adaptive_rate_still_applies() -> None:
    clock = FakeClock()
    pacer = Pacer(EP, clock, PacingConfig(initial_rate=None, headroom=0.5))
    pacer.admitted()
    pacer.throttled(0.0)  # engaged at the first throttle: the min rate here
    cut = pacer.rate
    assert cut is not None
    pacer.reading(RateLimitReading(count=200, allowed=300, reset_s=1.0))  # a ceiling of 100/s
    assert pacer.rate == pytest.approx(cut)  # the lower of the two


def test_readings_are_ignored_without_a_headroom() -> None:
    clock = FakeClock()
    pacer = rest_pacer(clock, headroom=None)
    assert pacer.reading(RateLimitReading(count=299, allowed=300, reset_s=30.0)) is None
    assert pacer.rate is None and pacer.ceiling is None


def test_a_headroom_outside_its_range_is_refused() -> None:
    for headroom in (-0.1, 1.0, 2.0):
        with pytest.raises(ValueError, match="headroom"):
            PacingConfig(headroom=headroom)


def _window_run(read_headers: bool, *, allowed: int, window_s: float, n: int) -> tuple[int, float]:
    """``n`` calls sent back to back through a REST pacer against a per-token fixed window of
    ``allowed`` calls per ``window_s`` (the Genesys simulator's limiter: the window starts with the
    first call after the last one ended; a refusal carries Retry-After = the rest of the window).
    Returns (refusals, seconds to get all ``n`` through)."""
    clock = FakeClock(start=0.0, epoch=0.0)
    pacer = rest_pacer(clock, headroom=0.5 if read_headers else None)
    start, count, refused, done = -math.inf, 0, 0, 0
    while done < n:
        take(pacer, clock)
        now = clock.monotonic()
        if now - start >= window_s:
            start, count = now, 0
        count += 1
        reset = start + window_s - now
        if count > allowed:
            refused += 1
            pacer.throttled(max(1.0, math.ceil(reset)))
            continue
        done += 1
        pacer.admitted(0.05)
        pacer.reading(RateLimitReading(count, allowed, float(math.ceil(reset))))
        clock.advance(0.01)  # the next call is sent once this one is handled
    return refused, clock.monotonic()


@pytest.mark.parametrize(("allowed", "window_s", "n"), [(300, 60.0, 1000), (50, 5.0, 600), (20, 2.0, 200)])
def test_reading_the_window_avoids_the_429s_and_drains_as_fast(allowed: int, window_s: float, n: int) -> None:
    refused_blind, took_blind = _window_run(False, allowed=allowed, window_s=window_s, n=n)
    refused_read, took_read = _window_run(True, allowed=allowed, window_s=window_s, n=n)
    # without the reading, windows end in a 429 (not all of them: the pace a throttle set fits some);
    # the comparison means something only when there are some
    assert refused_blind >= 3
    assert refused_read <= 0.2 * refused_blind  # at least 80 % fewer
    assert took_read <= 1.1 * took_blind + window_s * 0.1


@pytest.mark.parametrize("probe", list(Probe))
def test_the_rate_does_not_grow_while_attempts_come_slower_than_it(probe: Probe) -> None:
    """RFC 7661: a rate not in use is not grown. Attempts at three quarters of the pace for 30 s,
    in slow start and again after a cut: each finds its slot free, and the rate stays where it was
    (a daemon that grew it to thousands had nothing to hold back the burst after a stall). Once
    callers queue at the pace (arriving faster than it), it grows again."""
    clock = FakeClock(start=100.0)
    pacer = Pacer(EP, clock, PacingConfig(initial_rate=200.0, probe=probe))
    for cut in (False, True):
        if cut:
            pacer.throttled(0.0)
            clock.advance(2.0)
        before = pacer.rate
        assert before is not None
        every = 1 / (0.75 * before)
        for _ in range(round(0.75 * before * 30)):
            clock.advance(every)
            assert pacer.reserve() == (0.0, True)
            clock.advance(0.001)  # its answer, a round trip later
            pacer.admitted(0.001)
        assert pacer.rate == before
    before = pacer.rate
    assert before is not None
    for _ in range(round(before * 2)):
        clock.advance(1 / (1.5 * before))
        pacer.reserve()
        pacer.admitted(0.001)
    rate = pacer.rate
    assert rate is not None and rate > before


def test_the_rate_does_not_grow_while_less_than_half_of_it_is_admitted() -> None:
    """RFC 7661 section 4.3: callers queue at the pace (300 a second book slots at a rate of 300),
    but only a third of the attempts go out and are admitted (the daemon's own loop is the bound):
    less than half the rate is in use, and it does not grow. With every attempt admitted it does."""
    clock = FakeClock(start=100.0)
    pacer = Pacer(EP, clock, PacingConfig(initial_rate=300.0))
    clock.advance(1.0)  # (its use is measured over a whole second from here)
    for n in range(300 * 5):
        take(pacer, clock)
        if n % 3 == 0:
            pacer.admitted(0.001)
    assert pacer.rate == 300.0
    drain(pacer, clock, 300)
    rate = pacer.rate
    assert rate is not None and rate > 300.0


# -- a limit learned before: the seed (RFC 9040's temporal sharing) ---------------------------------


def _against_a_limit(
    pacer: Pacer, clock: FakeClock, limit: int, seconds: float
) -> tuple[dict[int, int], list[float]]:
    """Callers queued at the pace for ``seconds`` against a platform admitting ``limit`` per clock
    second, whose answers come back (and are handled) 0.2 s after each attempt left, as under load:
    the attempts offered in each whole second, and the times of the refusals."""
    delay = 0.2
    answers: collections.deque[tuple[float, bool]] = collections.deque()
    offered: collections.Counter[int] = collections.Counter()
    admitted: collections.Counter[int] = collections.Counter()
    refused: list[float] = []
    end = clock.monotonic() + seconds
    while clock.monotonic() < end:
        generation = pacer.generation
        wait, booked = pacer.reserve()
        at = clock.monotonic() + wait
        while answers and answers[0][0] <= at:
            due, ok = answers.popleft()
            clock.set(max(due, clock.monotonic()))
            if ok:
                pacer.admitted(delay)
            else:
                refused.append(due)
                pacer.throttled(1.0)
        clock.set(max(at, clock.monotonic()))
        if not booked or pacer.generation != generation:
            continue  # not booked, or its slot voided by a cut meanwhile: ask again
        second = int(clock.monotonic())
        offered[second] += 1
        ok = admitted[second] < limit
        admitted[second] += ok
        answers.append((clock.monotonic() + delay, ok))
    return dict(offered), refused


def test_a_seeded_pacer_stays_below_the_learned_limit_and_still_reaches_it() -> None:
    """Seeded with the limit a previous run learned (200/s), slow start stops at the cut it would
    make there (200 x 0.85 = 170) and congestion avoidance takes it on: no second of the first five
    offers more than 170 and the 2 % a second the probe adds, nothing is refused for ten seconds,
    and it still finds the limit (its refusals come at the probe's gentle pace: no second offers
    more than 1.1 x 200). Unseeded, the fourth second offered 277 (the next test)."""
    clock = FakeClock(start=0.0)
    pacer = Pacer(EP, clock, PacingConfig(initial_rate=20.0))
    pacer.seed(200.0)
    assert pacer.rate == 20.0 and pacer.learned() == pytest.approx(200.0)
    offered, refused = _against_a_limit(pacer, clock, 200, 40.0)
    assert max(offered[s] for s in range(5)) <= 170 * 1.03
    assert refused and refused[0] >= 10.0
    assert max(offered.values()) <= 220
    # not stuck at the threshold: it reaches the limit within about ten seconds, and again after each cut
    assert max(offered[s] for s in range(5, 13)) >= 200
    assert max(offered[s] for s in range(25, 40)) >= 200


def test_an_unseeded_pacer_crosses_the_limit_at_a_slow_starts_pace() -> None:
    """The same platform, no seed: the slow start doubles past 200/s within its fourth second and
    the second that crosses it offers what went out before the first refusal came back."""
    clock = FakeClock(start=0.0)
    pacer = Pacer(EP, clock, PacingConfig(initial_rate=20.0))
    assert pacer.learned() is None
    offered, refused = _against_a_limit(pacer, clock, 200, 40.0)
    assert refused and refused[0] < 6.0
    assert max(offered.values()) > 220


def test_a_seeded_cubic_pacer_probes_from_the_threshold_not_from_a_cut_long_ago() -> None:
    """CUBIC's time counts from the start of congestion avoidance (RFC 9438 section 4.2): where slow
    start reaches the seeded threshold, W(0) = 0.85 x W_max, and the rate does not jump to the
    cubic of an unbounded time."""
    clock = FakeClock(start=0.0)
    pacer = Pacer(EP, clock, PacingConfig(initial_rate=20.0, probe=Probe.CUBIC))
    pacer.seed(200.0)
    offered, refused = _against_a_limit(pacer, clock, 200, 12.0)
    assert max(offered[s] for s in range(3)) <= 170
    assert not refused or refused[0] >= 8.0
    assert max(offered.values()) <= 220
    rate = pacer.rate
    assert rate is not None and rate <= 220


def test_a_seed_starts_at_a_lower_threshold_leaves_an_unpaced_endpoint_and_an_own_limit_alone() -> None:
    clock = FakeClock()
    rest = Pacer(EP, clock, PacingConfig(initial_rate=None, backoff=0.5))
    rest.seed(80.0)
    assert rest.rate is None and rest.learned() is None
    # an initial rate above the threshold starts at the threshold
    low = Pacer(EP, clock, PacingConfig(initial_rate=20.0, backoff=0.5))
    low.seed(10.0)
    assert low.rate == pytest.approx(5.0)
    # a pacer that learned its own limit keeps it
    learned = Pacer(EP, clock, PacingConfig(initial_rate=100.0, backoff=0.5))
    learned.throttled(0.0)
    learned.seed(1000.0)
    assert learned.rate == pytest.approx(50.0) and learned.learned() == pytest.approx(100.0)
    for bad in (0.0, -5.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="learned limit"):
            Pacer(EP, clock).seed(bad)


def test_a_learned_limit_is_fresh_within_its_age_and_never_from_the_future() -> None:
    learned = LearnedLimit(200.0, at=1000.0)
    assert learned.fresh(1000.0, 3600.0) and learned.fresh(4600.0, 3600.0)
    assert not learned.fresh(4600.5, 3600.0)
    assert not learned.fresh(999.0, 3600.0)
    for limit, at in ((-1.0, 0.0), (math.nan, 0.0), (1.0, math.inf)):
        with pytest.raises(ValueError, match="learned limit"):
            LearnedLimit(limit, at)


def test_after_an_idle_restart_cubic_probes_from_the_threshold_not_from_the_old_cut() -> None:
    """Refused at about 100/s, then idle a minute: the rate restarts from the initial 20, slow start
    regrows it to the threshold (0.85 x what was admitted) and CUBIC takes it on from there, W(0) =
    the threshold; its time does not count from the cut a minute ago (which jumped the rate to the
    cubic of 60 s, hundreds a second more)."""
    clock = FakeClock(start=0.0)
    pacer = Pacer(EP, clock, PacingConfig(initial_rate=20.0, probe=Probe.CUBIC))
    _against_a_limit(pacer, clock, 100, 8.0)
    learned = pacer.learned()
    assert learned is not None and 90.0 <= learned <= 110.0
    clock.advance(60.0)
    offered, _ = _against_a_limit(pacer, clock, 1000, 6.0)
    rate = pacer.rate
    assert rate is not None and rate <= 1.1 * learned
    assert max(offered.values()) <= 1.1 * learned
