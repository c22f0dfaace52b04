"""What a fleet member's endpoints do with a peer's news (docs/runtime.md, "Admission across a fleet"), on a fake
clock: a peer's Retry-After holds the pacer without cutting its rate, a peer's circuit opening opens a closed
circuit (and only lengthens an open one), the rates scale with the member's share of the shards, and the hard
tenant quota is asked by every attempt but a token's."""

from __future__ import annotations

import random

import pytest

from machines.circuit import PEER_OPENED, Circuit, CircuitConfig
from machines.effects import CircuitTransition
from machines.pacing import Pacer, PacingConfig
from machines.registry import Endpoints
from supervisor.attempts import SILENT, Attempts
from supervisor.clock import FakeClock
from supervisor.events import CircuitOpened
from supervisor.fleet.admission import share_of
from supervisor.vocabulary import GENESYS_WEBMESSAGING, CircuitState, EndpointId, Platform
from tests.harness.clocks import advancing

API = EndpointId.api(Platform.GENESYS)


def test_a_peers_retry_after_pauses_the_pacer_until_it_ends_without_cutting_the_rate() -> None:
    clock = FakeClock()
    pacer = Pacer(GENESYS_WEBMESSAGING, clock, PacingConfig(initial_rate=20.0))
    wait, booked = pacer.reserve()
    assert (wait, booked) == (0.0, True)
    generation = pacer.generation
    assert pacer.hold(clock.monotonic() + 3.0) is True
    # a booking made before is void, the next slot is after the hold, the rate is the same
    assert pacer.generation == generation + 1
    assert pacer.paused_for() == pytest.approx(3.0)
    # the first slot booked is when the hold ends, not before
    wait, booked = pacer.reserve()
    while not booked:
        clock.advance(wait)
        wait, booked = pacer.reserve()
    assert clock.monotonic() + wait == pytest.approx(3.0)
    assert pacer.rate == 20.0
    # a hold that ends sooner changes nothing
    left = pacer.paused_for()
    assert left > 0
    assert pacer.hold(clock.monotonic() + left / 2) is False
    assert pacer.paused_for() == left
    assert pacer.generation == generation + 1


def test_a_peers_retry_after_holds_an_endpoint_without_a_pacer() -> None:
    clock = FakeClock()
    endpoints = Endpoints(clock)  # admission not adaptive: no pacers
    endpoint = endpoints.get(API)
    assert endpoint.hold(clock.monotonic() + 2.5) is True
    assert endpoint.held_for() == pytest.approx(2.5)
    clock.advance(2.5)
    assert endpoint.held_for() == 0.0


def circuit(clock: FakeClock) -> Circuit:
    return Circuit(API.circuit_id, clock, random.Random(1), CircuitConfig(open_s=30.0))


def test_a_peers_opening_opens_a_closed_circuit_until_the_peers_end_then_it_probes_on_its_own() -> None:
    clock = FakeClock()
    breaker = circuit(clock)
    effects = breaker.open_for_peer(12.0)
    assert breaker.state is CircuitState.OPEN
    transition, opened = effects
    assert isinstance(transition, CircuitTransition) and transition.reason == PEER_OPENED
    assert isinstance(opened, CircuitOpened)
    assert (opened.reason, opened.open_s, opened.consecutive_failures) == (PEER_OPENED, 12.0, 0)
    assert not breaker.admit().allowed
    clock.advance(12.0)
    probe = breaker.admit()
    assert probe.allowed and probe.probe_id == 1
    assert breaker.state is CircuitState.HALF_OPEN


def test_a_peers_opening_only_lengthens_an_open_circuit_and_leaves_half_open_and_isolated_alone() -> None:
    clock = FakeClock()
    breaker = circuit(clock)
    breaker.open_for_peer(5.0)
    assert breaker.open_for_peer(20.0) == ()  # open already: only its end moves
    clock.advance(10.0)
    assert not breaker.admit().allowed
    assert breaker.retry_in_s() == pytest.approx(10.0)
    assert breaker.open_for_peer(1.0) == ()  # a shorter one does not shorten it
    assert breaker.retry_in_s() == pytest.approx(10.0)
    clock.advance(10.0)
    assert breaker.admit().allowed  # the probe
    assert breaker.open_for_peer(30.0) == ()
    assert breaker.state is CircuitState.HALF_OPEN
    breaker.isolate()
    assert breaker.open_for_peer(30.0) == ()
    assert breaker.state is CircuitState.ISOLATED
    assert breaker.open_for_peer(0.0) == () and breaker.open_for_peer(float("inf")) == ()


def test_the_rates_scale_with_the_share_of_shards_made_before_and_after() -> None:
    clock = FakeClock()
    connect = PacingConfig(initial_rate=20.0, max_rate=400.0)
    rest = PacingConfig(initial_rate=None, max_rate=1000.0)
    endpoints = Endpoints(clock, connect=connect, rest=rest)
    before = endpoints.connect(GENESYS_WEBMESSAGING)
    assert before.rate == 20.0
    endpoints.scale(share_of(64))
    assert endpoints.share == 0.25
    assert before.rate == 5.0  # in proportion
    after = endpoints.connect(GENESYS_WEBMESSAGING.of("t2"))
    assert after.rate == 5.0
    endpoints.scale(1.0)
    assert endpoints.connect(GENESYS_WEBMESSAGING.of("t4")).rate == 20.0


def test_a_member_that_held_no_shard_paces_at_its_new_share_of_the_rates_once_it_acquires() -> None:
    # a member (re)started owns nothing (1/256 of the rates), then acquires 85 shards: its pacers go
    # on at 85/256 of the configured rates, not at the minimum rate times 85
    clock = FakeClock()
    endpoints = Endpoints(clock, connect=PacingConfig(initial_rate=33.0, max_rate=10_000.0))
    endpoints.scale(share_of(0))
    pacer = endpoints.connect(GENESYS_WEBMESSAGING)
    made_before = endpoints.connect(GENESYS_WEBMESSAGING.of("t2"))
    endpoints.scale(1.0)
    endpoints.scale(share_of(0))  # (one made at a larger share, then shrunk to nothing)
    endpoints.scale(share_of(85))
    assert pacer.rate == pytest.approx(33.0 * 85 / 256)
    assert made_before.rate == pytest.approx(33.0 * 85 / 256)


@pytest.mark.parametrize("share", [0.5, 1.0])
def test_a_member_refused_while_not_using_its_pace_cuts_its_pace_not_to_what_it_admitted(
    share: float,
) -> None:
    # a takeover's first attempts: 3 admitted, then the platform refuses (its limit is the fleet's,
    # crossed by a peer's burst). A fleet member cuts its pace (its share, 20/s and more) by the
    # backoff; one host, the only sender, still cuts to below what the platform admitted
    clock = FakeClock()
    pacer = Pacer(GENESYS_WEBMESSAGING, clock, PacingConfig(initial_rate=20.0, share=share), kind="connect")
    for _ in range(3):
        wait, booked = pacer.reserve()
        assert booked
        clock.advance(wait)
        pacer.admitted(0.001)
    clock.advance(0.5)
    pace = pacer.rate
    assert pace is not None and pace >= 20.0
    pacer.throttled(1.0)
    cut = pace * 0.85 if share < 1.0 else 3 * 0.85
    assert pacer.rate == pytest.approx(cut)
    assert pacer.learned() == pytest.approx(cut / 0.85)


@pytest.mark.parametrize(("share", "fleet"), [(0.5, True), (1.0, True), (1.0, False)])
def test_a_member_that_knows_no_limit_slow_starts_only_to_its_share_of_the_initial_rate(
    share: float, fleet: bool
) -> None:
    # 200 attempts queued at once (a takeover, or a fleet's first member holding all 256 shards): one
    # host doubles its pace per second's worth of them; a fleet member stops at its share of the
    # initial rate and probes on by 2 % a second, so members growing together do not multiply the
    # fleet's rate
    clock = FakeClock()
    config = PacingConfig(initial_rate=100.0 * share, share=share, fleet=fleet)
    pacer = Pacer(GENESYS_WEBMESSAGING, clock, config)
    start = pacer.rate
    assert start == pytest.approx(100.0 * share)
    for _ in range(200):
        wait, booked = pacer.reserve()
        while not booked:
            clock.advance(wait)
            wait, booked = pacer.reserve()
        clock.advance(wait)
        pacer.admitted(0.001)
    assert pacer.rate is not None
    if fleet:
        assert start <= pacer.rate <= start * 1.1
    else:
        assert pacer.rate > 2 * start


def test_what_a_pacer_learned_moves_with_its_share_within_the_new_bounds() -> None:
    clock = FakeClock()
    pacer = Pacer(GENESYS_WEBMESSAGING, clock, PacingConfig(initial_rate=20.0, max_rate=400.0))
    pacer.seed(100.0)  # the limit learned: 100/s
    assert pacer.learned() == pytest.approx(100.0)
    pacer.rescale(PacingConfig(initial_rate=10.0, max_rate=200.0), 0.5)
    assert pacer.learned() == pytest.approx(50.0)
    assert pacer.rate == 10.0
    pacer.rescale(PacingConfig(initial_rate=1.0, max_rate=8.0, min_rate=1.0), 0.05)
    assert pacer.rate == 1.0  # never under the minimum


@pytest.mark.parametrize(("owned", "share"), [(256, 1.0), (128, 0.5), (1, 1 / 256), (0, 1 / 256)])
def test_the_share_is_owned_shards_out_of_256_never_nothing(owned: int, share: float) -> None:
    assert share_of(owned) == share


@pytest.mark.parametrize("share", [0.0, -0.5, 1.5])
def test_a_share_outside_zero_to_one_is_refused(share: float) -> None:
    with pytest.raises(ValueError, match="within"):
        Endpoints(FakeClock()).scale(share)


@pytest.mark.anyio
async def test_every_attempt_of_a_tenant_asks_the_quota_right_before_it_leaves_a_token_never() -> None:
    clock = FakeClock()
    attempts = Attempts(Endpoints(clock, connect=PacingConfig(in_flight_floor=4)))
    asked: list[str] = []
    answers = [0.5, 0.0, 0.0]

    async def quota(tenant: str) -> float:
        asked.append(tenant)
        return answers.pop(0)

    slept: list[float] = []
    sleep = advancing(clock, slept)

    rest = attempts.get(API.of("acme"))  # made before the quota: limited all the same
    attempts.limit_tenants(quota)
    flight = await rest.flight(SILENT, sleep)
    assert not flight.leave_at_once()  # the hot path asks nobody: a quota needs the await
    await flight.leave()
    assert asked == ["acme", "acme"] and slept == [0.5]
    connect = await attempts.connect(GENESYS_WEBMESSAGING).flight(SILENT, sleep)
    await connect.leave()
    assert asked == ["acme", "acme", ""]  # the default tenant's
    token = await attempts.token(EndpointId.oauth(Platform.GENESYS)).flight(SILENT, sleep)
    assert token.leave_at_once()
    assert len(asked) == 3
    attempts.limit_tenants(None)
    again = await rest.flight(SILENT, sleep)
    assert again.leave_at_once()


def test_a_learned_limit_is_kept_as_the_fleets_and_seeded_as_the_members_share_of_it() -> None:
    clock = FakeClock()
    connect = PacingConfig(initial_rate=20.0)
    half = Endpoints(clock, connect=connect)
    half.scale(share_of(128))
    endpoint = half.connect(GENESYS_WEBMESSAGING)
    endpoint.seed(40.0)  # what this member learned of its part: 40/s
    assert half.learned() == {GENESYS_WEBMESSAGING: pytest.approx(80.0)}  # the fleet's: 80/s
    # a member that starts again with a quarter of the shards seeds a quarter of the fleet's
    quarter = Endpoints(clock, connect=connect)
    quarter.scale(share_of(64))
    quarter.seed(half.learned())
    assert quarter.connect(GENESYS_WEBMESSAGING).learned() == pytest.approx(20.0)
    # one host: unchanged
    alone = Endpoints(clock, connect=connect)
    alone.seed({GENESYS_WEBMESSAGING: 80.0})
    assert alone.connect(GENESYS_WEBMESSAGING).learned() == pytest.approx(80.0)
    assert alone.learned() == {GENESYS_WEBMESSAGING: pytest.approx(80.0)}


def test_a_probe_above_the_former_share_is_carried_over_not_multiplied_when_the_share_grows() -> None:
    # a member holding 32 shards (a share of 12.5/s) probed above it for 20 s of attempts at its pace,
    # then takes a killed peer's shards (x 4: 128 shards, a share of 50/s): it goes on at 50/s plus
    # what it probed, not 4 x its rate (two such members together passed the fleet's 100/s by 14 %)
    clock = FakeClock()
    small = PacingConfig(initial_rate=12.5, max_rate=1250.0, min_rate=0.125, share=0.125, fleet=True)
    pacer = Pacer(GENESYS_WEBMESSAGING, clock, small, kind="connect")
    for _ in range(260):
        wait, booked = pacer.reserve()
        while not booked:
            clock.advance(wait)
            wait, booked = pacer.reserve()
        clock.advance(wait)
        pacer.admitted(0.001)
    probed = pacer.rate
    assert probed is not None and probed > 12.5 * 1.05
    large = PacingConfig(initial_rate=50.0, max_rate=5000.0, min_rate=0.5, share=0.5, fleet=True)
    pacer.rescale(large, 4.0)
    assert pacer.rate == pytest.approx(50.0 + (probed - 12.5))
    pacer.rescale(small, 0.25)  # a share that shrinks scales the rate in proportion, as before
    assert pacer.rate == pytest.approx((50.0 + probed - 12.5) / 4)
