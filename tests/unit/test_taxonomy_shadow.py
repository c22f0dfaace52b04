"""The shadow taxonomy's counting: every divergence counted, one report per pair per minute with a
count (docs/taxonomy.md, "Shadow"). Time is a FakeClock's; nothing sleeps."""

from __future__ import annotations

from pathlib import Path

from supervisor.clock import FakeClock
from supervisor.taxonomy import Classifier, load_taxonomy
from supervisor.taxonomy.envelope import envelope_from_object
from supervisor.taxonomy.shadow import Divergence, DivergenceCounter, Shadow

THROTTLED = Path(__file__).parent.parent / "fixtures" / "taxonomy" / "throttled.toml"
PAIR = ("RATE_LIMITED", "THROTTLED")


def test_a_pair_is_reported_at_once_then_at_most_once_a_minute_with_its_count(clock: FakeClock) -> None:
    counter = DivergenceCounter(60.0)
    first = counter.add(PAIR, ("code",), clock.monotonic())
    assert first == Divergence("RATE_LIMITED", "THROTTLED", 1, ("code",))
    for _ in range(5):
        clock.advance(10.0)
        assert counter.add(PAIR, ("code",), clock.monotonic()) is None
    assert counter.due(clock.monotonic()) == []  # 50 s: the minute is not over
    clock.advance(10.0)
    assert counter.due(clock.monotonic()) == [Divergence("RATE_LIMITED", "THROTTLED", 5, ("code",))]
    assert counter.due(clock.monotonic()) == []  # reported once
    # another pair is its own: reported at once, whatever the first pair's minute
    other = counter.add(("QUEUE_FULL", "THROTTLED"), ("code", "trigger"), clock.monotonic())
    assert other is not None and other.count == 1
    # a divergence after the pair's minute is reported at once, with what was held since
    clock.advance(30.0)
    assert counter.add(PAIR, ("code",), clock.monotonic()) is None
    clock.advance(31.0)
    assert counter.add(PAIR, ("code",), clock.monotonic()) == Divergence(*PAIR, 2, ("code",))
    # every one is counted, reported or not
    assert counter.totals == {PAIR: 8, ("QUEUE_FULL", "THROTTLED"): 1}


def test_the_counts_reported_add_up_to_every_divergence(clock: FakeClock) -> None:
    counter = DivergenceCounter(60.0)
    reported = 0
    for i in range(500):
        clock.advance(0.7 + (i % 3))
        report = counter.add(PAIR, ("code",), clock.monotonic())
        reported += report.count if report is not None else 0
        reported += sum(r.count for r in counter.due(clock.monotonic()))
    reported += sum(r.count for r in counter.drain())
    assert reported == counter.totals[PAIR] == 500


def test_a_shadow_that_routes_429_otherwise_diverges_and_one_that_agrees_does_not(clock: FakeClock) -> None:
    active = Classifier(load_taxonomy("v2"), clock)
    shadow = Shadow(load_taxonomy(THROTTLED), clock)
    too_many = envelope_from_object({"platform": "genesys", "channel": "rest", "status": 429})
    timeout = envelope_from_object({"platform": "genesys", "channel": "rest", "status": 504})
    assert shadow.compare(timeout, active.classify(timeout)) is None
    report = shadow.compare(too_many, active.classify(too_many))
    assert report == Divergence("RATE_LIMITED", "THROTTLED", 1, ("code",))
    same = Shadow(load_taxonomy("v2"), clock)
    assert same.compare(too_many, active.classify(too_many)) is None
    assert same.counter.totals == {}
