"""The fleet's pure decisions (supervisor/fleet/shares.py): who is live, the fleet's digest, the plan
of a renewal (rendezvous rank, the share, paced releases, the quiet after a database restart), and
the configuration's digest and default member id (supervisor/fleet/identity.py)."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from supervisor.config import parse_config
from supervisor.fleet.identity import config_digest, default_member
from supervisor.fleet.shares import (
    RELEASE_PER_RENEWAL,
    LeaseRow,
    MemberRow,
    Plan,
    fleet_digest,
    live_members,
    plan,
    rank,
    share,
)
from tests.harness.config import genesys_config

NOW = 5000.0
TTL = 10.0


def member(
    name: str, *, digest: str = "d", state: str = "active", started: float = 1.0, beat: float = NOW
) -> MemberRow:
    return MemberRow(name, f"{name}.example", digest, state, started, beat)


def free() -> list[LeaseRow]:
    return [LeaseRow(s, None, 0, None) for s in range(256)]


def test_live_is_a_heartbeat_within_one_ttl_and_not_leaving() -> None:
    rows = [
        member("a"),
        member("b", beat=NOW - TTL),  # exactly one TTL ago: no longer live
        member("c", beat=NOW - TTL + 0.1),
        member("d", state="leaving"),
    ]
    assert [m.member for m in live_members(rows, NOW, TTL)] == ["a", "c"]


def test_the_fleets_digest_is_the_majoritys_and_on_a_tie_the_oldest_members() -> None:
    assert fleet_digest([member("a", digest="x"), member("b", digest="y"), member("c", digest="y")]) == "y"
    tie = [member("a", digest="x", started=5.0), member("b", digest="y", started=3.0)]
    assert fleet_digest(tie) == "y"
    assert fleet_digest([]) is None


def test_a_lone_member_takes_every_free_shard() -> None:
    assert plan("a", [member("a")], free(), {}, now=NOW, ttl=TTL).acquire == tuple(range(256))


def test_two_members_take_the_shards_each_ranks_highest_for_up_to_the_share() -> None:
    rows = [member("a"), member("b")]
    mine = set(plan("a", rows, free(), {}, now=NOW, ttl=TTL).acquire)
    theirs = set(plan("b", rows, free(), {}, now=NOW, ttl=TTL).acquire)
    assert len(mine) == len(theirs) == 128 and not mine & theirs
    # rendezvous, bent by the share only: a takes every shard it ranks above b while it has room,
    # and the shards it ranks below b only once b is full
    preferred = {s for s in range(256) if rank("a", s) > rank("b", s)}
    assert preferred <= mine if len(preferred) <= 128 else mine <= preferred


@given(st.integers(min_value=1, max_value=9))
def test_any_number_of_members_split_the_free_shards_balanced_and_disjoint(n: int) -> None:
    rows = [member(f"m{i}") for i in range(n)]
    taken = [set(plan(m.member, rows, free(), {}, now=NOW, ttl=TTL).acquire) for m in rows]
    assert sum(len(t) for t in taken) == 256
    assert set().union(*taken) == set(range(256))
    assert max(len(t) for t in taken) <= share(n)


def test_a_member_above_its_share_gives_back_a_few_it_ranks_lowest() -> None:
    rows = [member("a"), member("b")]
    held = dict.fromkeys(range(256), 1)
    leases = [LeaseRow(s, "a", 1, NOW + 5) for s in range(256)]
    decided = plan("a", rows, leases, held, now=NOW, ttl=TTL)
    assert decided.acquire == () and len(decided.release) == RELEASE_PER_RENEWAL
    lowest = sorted(range(256), key=lambda s: rank("a", s))[:RELEASE_PER_RENEWAL]
    assert set(decided.release) == set(lowest)


def test_a_shard_still_settling_is_not_given_back_the_excess_comes_from_settled_ones() -> None:
    # three members; a holds its own 86 and, settling, the 43 it just took from the paused b, who is back
    rows = [member("a"), member("b"), member("c")]
    own = [s for s in range(256) if s % 3 == 0][:86]
    taken = [s for s in range(256) if s % 3 == 1][:43]
    held = dict.fromkeys(own + taken, 1)
    leases = [LeaseRow(s, "a", 1, NOW + 5) for s in held]
    everything = plan("a", rows, leases, held, now=NOW, ttl=TTL)
    # without the hold the lowest-ranked go back whoever took them last: some just taken (moved twice)
    assert set(everything.release) & set(taken)
    decided = plan("a", rows, leases, held, now=NOW, ttl=TTL, settling=frozenset(taken))
    assert len(decided.release) == RELEASE_PER_RENEWAL and not set(decided.release) & set(taken)
    lowest_own = sorted(own, key=lambda s: rank("a", s))[:RELEASE_PER_RENEWAL]
    assert set(decided.release) == set(lowest_own) and decided.acquire == ()
    # only settling shards above the share: nothing given back (nor taken) until they have settled
    assert plan("a", rows, leases, held, now=NOW, ttl=TTL, settling=frozenset(held)) == Plan()
    # fewer settled shards than the renewal's pace: those few go back, no settling one with them
    few = plan("a", rows, leases, held, now=NOW, ttl=TTL, settling=frozenset(own[3:] + taken))
    assert set(few.release) == set(own[:3])


def test_an_expired_lease_of_another_is_taken_but_not_in_the_quiet_after_a_restart() -> None:
    rows = [member("a"), member("b", beat=NOW - 100)]  # b is dead
    leases = [LeaseRow(s, "b", 3, NOW - 1) for s in range(256)]
    assert len(plan("a", rows, leases, {}, now=NOW, ttl=TTL).acquire) == 256
    assert plan("a", rows, leases, {}, now=NOW, ttl=TTL, quiet=True).acquire == ()
    # free shards and one's own are taken in the quiet too
    mixed = [LeaseRow(0, None, 1, None), LeaseRow(1, "a", 2, NOW - 1), *leases[2:]]
    assert plan("a", rows, mixed, {}, now=NOW, ttl=TTL, quiet=True).acquire == (0, 1)


def test_a_member_whose_digest_is_not_the_fleets_takes_nothing() -> None:
    rows = [member("a", digest="x", started=1.0), member("c", digest="y", started=2.0)]
    assert plan("c", rows, free(), {}, now=NOW, ttl=TTL).acquire == ()
    # and is no share of the fleet: the other takes everything
    assert len(plan("a", rows, free(), {}, now=NOW, ttl=TTL).acquire) == 256


URLS = {
    "login": "http://127.0.0.1:9",
    "api": "http://127.0.0.1:9",
    "webmessaging": "ws://127.0.0.1:9",
    "streaming": "ws://127.0.0.1:9",
}


def test_the_digest_is_of_the_sessions_and_tenants_only_and_the_member_id_of_the_path(tmp_path: Path) -> None:
    one = parse_config(genesys_config(URLS, 2), "a.toml")
    other = parse_config(genesys_config(URLS, 3), "a.toml")
    tuned = parse_config(genesys_config(URLS, 2, open_for=9.0), "a.toml")  # [circuit]: not the digest's
    assert config_digest(one) != config_digest(other)
    assert config_digest(one) == config_digest(tuned) and len(config_digest(one)) == 64
    first = default_member(tmp_path / "a.toml", boot_id="boot")
    assert first.startswith("boot/") and len(first) == len("boot/") + 8
    assert first == default_member(tmp_path / "a.toml", boot_id="boot")
    assert first != default_member(tmp_path / "b.toml", boot_id="boot")


def test_after_a_database_restart_a_member_takes_back_all_its_own_leases_past_its_share() -> None:
    # a and b; a's own 150 leases (extended after the restart) are held nowhere locally: left to expire
    # past a's share of 128 they would pass to b as takeovers the restart caused; in the quiet a takes
    # them all back (and gives the excess back paced, as free), outside it only up to its share
    rows = [LeaseRow(s, "a" if s < 150 else "b", 3, NOW + TTL) for s in range(256)]
    members = [member("a"), member("b")]
    quiet = plan("a", members, rows, {}, now=NOW, ttl=TTL, quiet=True)
    assert quiet.acquire == tuple(range(150))
    assert plan("a", members, rows, {}, now=NOW, ttl=TTL).acquire == tuple(range(128))
    # held back again, the excess is given back a few at a time
    again = plan("a", members, rows, dict.fromkeys(range(150), 4), now=NOW, ttl=TTL, quiet=True)
    assert len(again.release) == min(150 - 128, RELEASE_PER_RENEWAL) and not again.acquire
