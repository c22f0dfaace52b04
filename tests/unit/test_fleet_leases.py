"""PgLeases (supervisor/fleet/leases.py) on the real PostgreSQL server (``-m postgres``): members and
their heartbeats, the renewal, acquisition by rendezvous rank and balanced, paced releases, the
database unreachable and restarted, the configuration digest, the stop's release, the fences.

Every member runs on a fake boot-time clock the test moves (the local deadlines); the database's
clock is real, so a lease's expiry on it is made to pass by moving the stored times back (what the
database's clock moving on would do), never by waiting.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from dataclasses import dataclass, field

import anyio
import anyio.lowlevel
import psycopg
import pytest

from supervisor.fleet.bus import FleetBus
from supervisor.fleet.leases import EXPIRY_LAG_S, RELEASED, PgLeases
from supervisor.fleet.shares import RELEASE_PER_RENEWAL
from supervisor.runtime.leases import Lease
from supervisor.store.model import Fence
from supervisor.store.pg_schema import prepare
from tests.harness.postgres import PostgresServer, Raw

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

#: a lease long enough that the database's real clock never expires one during a test
LONG_S = 60.0
#: a hold shorter than the fence window (56 s): a member's clock moved past it keeps its shards
HOLD_S = 20.0


@dataclass
class Boot:
    """A fake CLOCK_BOOTTIME: moved by the test."""

    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Holder:
    """A LeaseHolder that records what it is told."""

    acquired: list[list[Lease]] = field(default_factory=list)
    lost: list[list[int]] = field(default_factory=list)

    async def acquired_(self, leases: Sequence[Lease]) -> None:
        self.acquired.append(list(leases))

    async def lost_(self, shards: Collection[int]) -> None:
        self.lost.append(sorted(shards))


class Told:
    """The LeaseHolder protocol's method names over :class:`Holder`'s records."""

    def __init__(self, record: Holder) -> None:
        self.record = record

    async def acquired(self, leases: Sequence[Lease]) -> None:
        await self.record.acquired_(leases)

    async def lost(self, shards: Collection[int]) -> None:
        await self.record.lost_(shards)


@pytest.fixture
async def raw(pg_raw: Raw) -> Raw:
    """The second connection, the fleet's tables made."""
    await prepare(pg_raw)
    return pg_raw


class Fleet:
    """Members on one schema, each with its clock, holder and health moves."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.members: list[PgLeases] = []
        self.clocks: dict[str, Boot] = {}
        self.holders: dict[str, Holder] = {}
        self.health: dict[str, list[str | None]] = {}

    def member(
        self,
        name: str,
        *,
        digest: str = "d" * 64,
        lease_s: float = LONG_S,
        quiet_s: float | None = None,
        hold_s: float | None = None,
    ) -> PgLeases:
        clock = Boot()
        moves: list[str | None] = []
        leases = PgLeases(
            self.dsn,
            member=name,
            host=f"{name}.example",
            digest=digest,
            lease_s=lease_s,
            renew_s=2.0,
            quiet_s=quiet_s,
            hold_s=hold_s,
            clock=clock,
            on_health=moves.append,
        )
        holder = Holder()
        leases._holder = Told(holder)  # what serve() sets: these tests drive the renewals one by one
        self.members.append(leases)
        self.clocks[name], self.holders[name], self.health[name] = clock, holder, moves
        return leases

    async def close(self) -> None:
        for leases in self.members:
            await leases.aclose()


@pytest.fixture
async def fleet(raw: Raw, pg_dsn: str) -> AsyncIterator[Fleet]:
    made = Fleet(pg_dsn)
    try:
        yield made
    finally:
        await made.close()


async def owners(raw: Raw) -> dict[int, tuple[str | None, int]]:
    cur = await raw.execute("SELECT shard, owner, epoch FROM shard_leases ORDER BY shard")
    return {int(s): (None if o is None else str(o), int(e)) for s, o, e in await cur.fetchall()}  # type: ignore[call-overload]


async def acquisitions(raw: Raw) -> list[tuple[int, str, int, str | None, str]]:
    cur = await raw.execute(
        "SELECT shard, member, epoch, previous_owner, reason FROM lease_acquisitions ORDER BY id"
    )
    return [tuple(r) for r in await cur.fetchall()]  # type: ignore[misc]


async def age(raw: Raw, seconds: float, member: str | None = None) -> None:
    """The database's clock moved on ``seconds`` for ``member`` (None: everyone): its stored times moved back."""
    where, params = ("", {}) if member is None else (" WHERE owner = %(m)s", {"m": member})
    await raw.execute(
        f"UPDATE shard_leases SET expires_at = expires_at - {seconds:f}{where}".encode(), params
    )
    where = "" if member is None else " WHERE member = %(m)s"
    await raw.execute(
        f"UPDATE fleet_members SET heartbeat_at = heartbeat_at - {seconds:f}, started_at = started_at - {seconds:f}{where}".encode(),
        params,
    )


async def test_a_lone_member_takes_every_shard_with_its_row_its_audit_and_its_deadlines(
    fleet: Fleet, raw: Raw
) -> None:
    a = fleet.member("a")
    clock = fleet.clocks["a"]
    await a.renew()
    assert sorted(a.owned()) == list(range(256))
    assert {lease.epoch for lease in a.owned().values()} == {1}
    # the deadline: the renewal's send on the boot-time clock plus the fence window (TTL - 4 s)
    assert {lease.deadline for lease in a.owned().values()} == {clock.now + LONG_S - 4.0}
    assert [sorted(lease.shard for lease in told) for told in fleet.holders["a"].acquired] == [
        list(range(256))
    ]
    assert set((await owners(raw)).values()) == {("a", 1)}
    audit = await acquisitions(raw)
    assert len(audit) == 256 and {(m, e, p, r) for _, m, e, p, r in audit} == {("a", 1, None, "free")}
    cur = await raw.execute("SELECT member, host, digest, state FROM fleet_members")
    assert await cur.fetchall() == [("a", "a.example", "d" * 64, "active")]
    assert a.fence_for(7) == Fence("a", 1)
    view = a.fleet_view()
    assert [(m.member, m.live, m.shards) for m in view.members] == [("a", True, 256)]
    assert all(s.mine and s.owner == "a" for s in view.shards)
    # the lease connection's own timeouts: a statement below the renewal period (2 s), an idle
    # transaction below the TTL
    conn = a._conn
    assert conn is not None
    cur = await conn.execute(
        "SELECT current_setting('statement_timeout'), current_setting('idle_in_transaction_session_timeout')"
    )
    assert await cur.fetchone() == ("1500ms", "5s")


async def test_a_renewal_extends_every_lease_and_a_shard_missing_from_its_answer_is_lost_at_once(
    fleet: Fleet, raw: Raw
) -> None:
    a = fleet.member("a")
    await a.renew()
    cur = await raw.execute(
        "SELECT max(heartbeat_at), (SELECT min(expires_at) FROM shard_leases) FROM fleet_members"
    )
    before = await cur.fetchone()
    # shard 7 taken by someone else (a new epoch) behind the member's back
    await raw.execute("UPDATE shard_leases SET owner = 'x', epoch = epoch + 1 WHERE shard = 7")
    fleet.clocks["a"].now += 2.0
    await a.renew()
    assert 7 not in a.owned() and len(a.owned()) == 255
    assert fleet.holders["a"].lost == [[7]]
    assert a.fence_for(7) is None
    assert {lease.deadline for lease in a.owned().values()} == {fleet.clocks["a"].now + LONG_S - 4.0}
    cur = await raw.execute(
        "SELECT max(heartbeat_at), (SELECT min(expires_at) FROM shard_leases WHERE owner = 'a') FROM fleet_members"
    )
    after = await cur.fetchone()
    assert before is not None and after is not None
    assert after[0] > before[0] and after[1] > before[1]  # type: ignore[operator]


async def test_two_members_split_the_shards_by_rank_balanced(fleet: Fleet, raw: Raw) -> None:
    a, b = fleet.member("a"), fleet.member("b")
    await a.join()
    await b.join()
    await a.renew()
    await b.renew()
    assert len(a.owned()) == 128 and len(b.owned()) == 128
    assert not a.owned().keys() & b.owned().keys()
    table = await owners(raw)
    assert {s for s, (o, _) in table.items() if o == "a"} == set(a.owned())
    # nothing contended: every acquisition of a free shard, each at epoch 1
    assert {(p, r, e) for _, _, e, p, r in await acquisitions(raw)} == {(None, "free", 1)}


async def test_a_new_member_gets_its_share_a_few_shards_per_renewal(fleet: Fleet, raw: Raw) -> None:
    a = fleet.member("a")
    await a.renew()
    # free shards do not settle (a fleet's first member gives them up at once): only shards taken over
    assert a.settling() == frozenset()
    b = fleet.member("b")
    await b.join()
    counts = []
    for _ in range(20):
        fleet.clocks["a"].now += 2.0
        fleet.clocks["b"].now += 2.0
        held = len(a.owned())
        await a.renew()
        # a member above its share gives back a few per renewal, never all at once
        assert held - len(a.owned()) <= RELEASE_PER_RENEWAL
        await b.renew()
        counts.append(len(b.owned()))
        if len(a.owned()) == 128 and len(b.owned()) == 128:
            break
    assert len(a.owned()) == 128 and len(b.owned()) == 128, counts
    assert counts == sorted(counts) and len(counts) >= 128 // RELEASE_PER_RENEWAL
    assert not a.owned().keys() & b.owned().keys()
    # each given-back shard was lost by a before it was freed, and b took it free at the next epoch
    lost = {s for told in fleet.holders["a"].lost for s in told}
    assert lost == set(b.owned())
    assert {(p, r, e) for _, m, e, p, r in await acquisitions(raw) if m == "b"} == {(None, "free", 2)}


async def test_a_paused_member_back_gets_its_share_from_settled_shards_not_from_those_just_taken_over(
    fleet: Fleet, raw: Raw
) -> None:
    """SIGSTOP and SIGCONT: a and c take the paused b's shards; b comes back before they have settled
    and asks for its share. a and c give it their own older shards (paced), never one they are still
    resuming (each of those moves once, not twice); the fleet is balanced all the same, and what was
    taken over may be given back once it has been held for the hold."""
    a, b, c = (fleet.member(name, quiet_s=0.0, hold_s=HOLD_S) for name in ("a", "b", "c"))
    for m in (a, b, c):
        await m.join()
    for m in (a, b, c):
        await m.renew()
    assert sum(len(m.owned()) for m in (a, b, c)) == 256 and max(len(m.owned()) for m in (a, b, c)) <= 86
    paused = set(b.owned())
    await age(raw, 100.0, "b")  # b stopped renewing a while ago (its heartbeat too: not live)
    for name in ("a", "c"):
        fleet.clocks[name].now += HOLD_S  # a and c have held their own shards past the hold
    for m in (a, c):
        await m.renew()
    taken = {name: paused & set(m.owned()) for name, m in (("a", a), ("c", c))}
    assert taken["a"] | taken["c"] == paused and len(a.owned()) + len(c.owned()) == 256
    assert a.settling() == frozenset(taken["a"]) and c.settling() == frozenset(taken["c"])
    fleet.clocks["b"].now += LONG_S  # SIGCONT: b's deadlines have passed, its renewal loses them all
    given: set[int] = set()
    for _ in range(8):  # 16 s: within the hold of what a and c took over
        for name, m in (("b", b), ("a", a), ("c", c)):
            fleet.clocks[name].now += 2.0
            before = set(m.owned())
            await m.renew()
            if m is not b:
                gone = before - set(m.owned())
                assert len(gone) <= RELEASE_PER_RENEWAL  # paced
                assert not gone & paused, f"{m.identity} gave back shards it was still resuming"
                given |= gone
    # balanced across the live members, each at most its share, b's share from a's and c's own
    assert sum(len(m.owned()) for m in (a, b, c)) == 256 and max(len(m.owned()) for m in (a, b, c)) <= 86
    assert len(b.owned()) >= 84 and set(b.owned()) <= given and not given & paused
    assert taken["a"] <= set(a.owned()) and taken["c"] <= set(c.owned())
    # once held past the hold, a shard taken over settles like any other
    fleet.clocks["a"].now += HOLD_S
    assert a.settling() == frozenset()


async def test_an_expired_member_is_taken_over_with_a_new_epoch_and_an_audit_row(
    fleet: Fleet, raw: Raw
) -> None:
    # the session's server may have started less than a TTL ago: no restart quiet in this test
    a, b = fleet.member("a", quiet_s=0.0), fleet.member("b", quiet_s=0.0)
    await a.join()
    await b.join()
    await a.renew()
    await b.renew()
    mine = dict(a.owned())
    await age(raw, 100.0, "a")  # a stopped renewing (killed) a long while ago
    fleet.clocks["b"].now += 2.0
    await b.renew()
    assert b.quiet is False and set(b.owned()) == set(range(256))
    taken = [r for r in await acquisitions(raw) if r[3] == "a"]
    assert sorted(s for s, *_ in taken) == sorted(mine)
    assert all(m == "b" and r == "expired" and e == mine[s].epoch + 1 for s, m, e, _, r in taken)
    assert all(b.owned()[s].epoch == mine[s].epoch + 1 for s in mine)


async def test_the_database_unreachable_degrades_loses_at_the_deadlines_and_a_restart_hands_over_nothing(
    fleet: Fleet, raw: Raw, pg_restartable: PostgresServer, pg_dsn: str
) -> None:
    """A restart held down past every lease's expiry (the 15 s of the fleet's requirement): each member
    loses its shards at its deadline, then takes back its own (reclaimed); no shard changes hands."""
    a, b = fleet.member("a"), fleet.member("b")
    await a.join()
    await b.join()
    await a.renew()
    await b.renew()
    before = {"a": set(a.owned()), "b": set(b.owned())}
    deadline = next(iter(a.owned().values())).deadline
    assert deadline is not None
    pg_restartable.stop()
    fleet.clocks["a"].now += 2.0
    await a.renew()
    assert a.problem is not None and "cannot reach the database" in a.problem
    assert fleet.health["a"] == [a.problem]
    assert set(a.owned()) == before["a"]  # nothing lost before the deadline
    fleet.clocks["a"].now = deadline
    await a.expire()
    assert a.owned() == {} and fleet.holders["a"].lost == [sorted(before["a"])]
    fleet.clocks["b"].now += LONG_S  # b's renewal fails past its deadline: lost at once
    await b.renew()
    assert b.owned() == {} and fleet.holders["b"].lost == [sorted(before["b"])]
    pg_restartable.start()
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as again:
        await age(again, 15.0)  # the outage, on the database's clock: every lease has expired by now
        for name in ("a", "b"):
            fleet.clocks[name].now += 2.0
        await a.renew()
        await b.renew()
        assert set(a.owned()) == before["a"] and set(b.owned()) == before["b"]
        assert a.problem is None and fleet.health["a"][-1] is None
        audit = await acquisitions(again)
    after_restart = audit[256:]
    assert len(after_restart) == 256
    assert all(
        previous == member and reason == "reclaimed" for _, member, _, previous, reason in after_restart
    )
    assert {e for *_, e, _, _ in after_restart} == {2}


async def test_after_a_restart_an_expired_lease_of_another_member_waits_one_ttl(
    fleet: Fleet, raw: Raw, pg_restartable: PostgresServer, pg_dsn: str
) -> None:
    """A member whose leases were valid at the fleet's last heartbeat is not taken over while the
    database is young, even when that member never comes back within the quiet."""
    a, b = fleet.member("a"), fleet.member("b")
    await a.join()
    await b.join()
    await a.renew()
    await b.renew()
    pg_restartable.stop()
    pg_restartable.start()
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as again:
        await age(again, 15.0)
        fleet.clocks["b"].now += 2.0
        await b.renew()  # a never renews again; b's renewal on its old connection is made again on a new one
        assert len(b.owned()) == 128
        table = await owners(again)
        assert sum(1 for o, _ in table.values() if o == "a") == 128
        audit = await acquisitions(again)
    assert all(previous != "a" for *_, previous, _ in audit)


async def test_a_member_whose_digest_differs_takes_no_shard_and_says_why(fleet: Fleet, raw: Raw) -> None:
    a = fleet.member("a", digest="a" * 64)
    await a.renew()
    c = fleet.member("c", digest="c" * 64)
    await c.renew()
    assert c.owned() == {}
    assert c.problem is not None and "aaaaaaaaaaaa" in c.problem and "cccccccccccc" in c.problem
    assert "\n" not in c.problem and fleet.health["c"] == [c.problem]
    cur = await raw.execute("SELECT state FROM fleet_members WHERE member = 'c'")
    fleet.clocks["c"].now += 2.0
    await c.renew()
    cur = await raw.execute("SELECT member, state FROM fleet_members ORDER BY member")
    assert await cur.fetchall() == [("a", "active"), ("c", "degraded")]
    fleet.clocks["a"].now += 2.0
    await a.renew()
    assert len(a.owned()) == 256 and a.problem is None  # the mismatched member is no share of the fleet


async def test_release_all_loses_everything_here_then_frees_it_for_the_peers(fleet: Fleet, raw: Raw) -> None:
    a, b = fleet.member("a"), fleet.member("b")
    await a.join()
    await b.join()
    await a.renew()
    await b.renew()
    held = sorted(a.owned())
    told: list[int] = []
    a.subscribe_deadlines(lambda owned: told.append(len(owned)))
    assert await a.release_all() == 128
    # the write fence follows the loss at once; the supervisor is not told (its drain let every
    # session go before: a loss's other work, such as topics removed from shared channels, is not a stop's)
    assert a.owned() == {} and told == [0] and fleet.holders["a"].lost == []
    table = await owners(raw)
    assert all(table[s][0] is None for s in held)
    cur = await raw.execute("SELECT state FROM fleet_members WHERE member = 'a'")
    assert await cur.fetchone() == ("leaving",)
    fleet.clocks["b"].now += 2.0
    await b.renew()  # the next renewal of a peer takes them: a leaving member is no share
    assert set(b.owned()) == set(range(256))
    assert {(p, r) for s, m, _, p, r in await acquisitions(raw) if s in held and m == "b"} == {(None, "free")}


async def test_after_release_all_no_renewal_runs_so_nothing_freed_comes_back_and_a_second_call_does_nothing(
    fleet: Fleet, raw: Raw
) -> None:
    """The drain releases while the member's renewal loop still runs (it stops with the services,
    later): a renewal then would mark the member active again and take back the shards just freed."""
    a, b = fleet.member("a"), fleet.member("b")
    await a.join()
    await b.join()
    await a.renew()
    await b.renew()
    assert await a.release_all() == 128
    renewals = a.renewals
    fleet.clocks["a"].now += 2.0
    await a.renew()  # what the loop does when its period comes, or a peer's release wakes it
    assert a.renewals == renewals and a.owned() == {}
    table = await owners(raw)
    assert sum(1 for owner, _ in table.values() if owner == "a") == 0
    cur = await raw.execute("SELECT state FROM fleet_members WHERE member = 'a'")
    assert await cur.fetchone() == ("leaving",)
    # the stop's own call after the drain's: nothing more freed, nothing said again
    assert await a.release_all() == 0
    assert sorted(s for s, (o, _) in table.items() if o is None) == sorted(set(range(256)) - set(b.owned()))


async def test_a_peer_acquires_what_a_stop_released_at_once_not_at_its_next_renewal(
    fleet: Fleet, raw: Raw, pg_dsn: str
) -> None:
    """The SIGTERM handover: a's release_all publishes ``ss_released``; b's fleet bus hears it and
    wakes b's renewal loop, which takes the freed shards with b's clock not moved (its next renewal
    is 2 s away and b's sleep never ends by itself)."""
    a, b = fleet.member("a"), fleet.member("b")
    await a.join()
    await b.join()
    await a.renew()
    await b.renew()
    released = sorted(a.owned())
    assert len(released) == 128
    clock = fleet.clocks["b"]
    started_at = clock.now
    everything = anyio.Event()
    b.subscribe_deadlines(lambda owned: everything.set() if len(owned) == 256 else None)
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)  # the renewal period: only a wake (a cancellation) ends it
        await anyio.sleep_forever()

    b._sleep = sleep
    bus = FleetBus(pg_dsn, member="b")
    bus.on(RELEASED, lambda _notice: b.wake())
    async with anyio.create_task_group() as tg:
        await tg.start(bus.serve)
        await tg.start(b.serve, Told(fleet.holders["b"]))
        renewals = b.renewals
        assert await a.release_all() == 128
        with anyio.fail_after(10):
            await everything.wait()
        tg.cancel_scope.cancel()
    assert set(b.owned()) == set(range(256)) and clock.now == started_at
    assert b.renewals == renewals + 1 and waits[0] == 2.0
    assert {(p, r) for s, m, _, p, r in await acquisitions(raw) if s in released and m == "b"} == {
        (None, "free")
    }


async def test_a_peers_expiry_is_taken_when_it_comes_not_at_the_next_renewal(fleet: Fleet, raw: Raw) -> None:
    """a stops renewing (killed) with its leases expiring 0.5 s after b's last renewal: b's loop wakes
    for that expiry (EXPIRY_LAG_S after it), not at its period 2 s on, and takes every one of them."""
    a, b = fleet.member("a", quiet_s=0.0), fleet.member("b", quiet_s=0.0)
    await a.join()
    await b.join()
    await a.renew()
    await b.renew()
    mine = sorted(a.owned())
    assert len(mine) == 128
    await age(raw, LONG_S - 0.5, "a")  # a's last renewal was a TTL less half a second ago
    clock = fleet.clocks["b"]
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)
        if len(waits) > 1:
            await anyio.sleep_forever()  # the next period: only the test's end ends it
        clock.now += seconds
        await age(raw, seconds)  # the database's clock moves on as b's does

    b._sleep = sleep
    everything = anyio.Event()
    began, took_at = clock.now, []

    def told(owned: Mapping[int, Lease]) -> None:
        if len(owned) == 256 and not everything.is_set():
            took_at.append(clock.now)
            everything.set()

    b.subscribe_deadlines(told)
    async with anyio.create_task_group() as tg:
        await tg.start(b.serve, Told(fleet.holders["b"]))
        with anyio.fail_after(10):
            await everything.wait()
        tg.cancel_scope.cancel()
    # the first wait ended at a's expiry (on b's clock, read by the renewal serve began with), well
    # before the period; the renewal it ran took every shard of a's
    assert 0.0 < waits[0] <= 0.5 + EXPIRY_LAG_S < b.renew_s
    assert took_at == [began + waits[0]]
    taken = [(s, r) for s, m, _e, p, r in await acquisitions(raw) if p == "a" and m == "b"]
    assert sorted(s for s, _ in taken) == mine and {r for _, r in taken} == {"expired"}


async def test_deadlines_are_told_after_every_renewal_and_every_loss(fleet: Fleet, raw: Raw) -> None:
    a = fleet.member("a")
    told: list[dict[int, float | None]] = []
    a.subscribe_deadlines(lambda owned: told.append({s: lease.deadline for s, lease in owned.items()}))
    await a.renew()
    # the renewal (nothing held yet), then the acquisition
    assert [len(t) for t in told] == [0, 256]
    fleet.clocks["a"].now += 2.0
    await a.renew()
    assert set(told[-1].values()) == {fleet.clocks["a"].now + LONG_S - 4.0}
    fleet.clocks["a"].now += LONG_S
    assert a.fence_for(3) is None  # past the deadline: no fence, even before expire() runs
    await a.expire()
    assert told[-1] == {}


async def test_serve_renews_every_period_and_loses_at_the_deadline_without_waiting(
    fleet: Fleet, raw: Raw, pg_restartable: PostgresServer
) -> None:
    """The loop itself, on the fake clock: started once the first renewal's shards were told, a renewal
    every renewSeconds, and the deadline kept when renewals stop reaching the database."""
    a = fleet.member("a")
    clock = fleet.clocks["a"]
    waits: list[float] = []
    holder = Told(fleet.holders["a"])

    async def sleep(seconds: float) -> None:
        waits.append(seconds)
        clock.now += seconds
        if len(waits) == 3:
            pg_restartable.stop()  # from the fourth renewal on, the database cannot be reached
        if clock.now > 1000.0 + 2.0 * 3 + LONG_S:
            tg.cancel_scope.cancel()
        await anyio.lowlevel.checkpoint()

    a._sleep = sleep
    async with anyio.create_task_group() as tg:
        await tg.start(a.serve, holder)
        assert len(a.owned()) == 256 and a.renewals == 1  # started with its shards told
    # renewals every 2 s while they reached the database; then the last one's deadline (2 s + 56 s
    # after the third renewal's send) decided the loss, not a renewal
    assert waits[:3] == [2.0, 2.0, 2.0]
    assert a.reached == 3 and a.problem is not None
    assert fleet.holders["a"].lost == [list(range(256))]
    assert a.owned() == {}


async def test_a_member_standing_aside_never_joins_and_says_why(fleet: Fleet, raw: Raw) -> None:
    """A member whose store could not be opened at start: no row, no heartbeat (the others' shares
    leave it out), no shard, degraded with the reason."""
    a = fleet.member("a")
    a.stand_aside("cannot reach the database (the store); this member takes no shard until it is restarted")
    async with anyio.create_task_group() as tg:
        await tg.start(a.serve, Told(fleet.holders["a"]))
        tg.cancel_scope.cancel()
    assert a.owned() == {} and a.renewals == 0
    assert fleet.health["a"] == [a.problem] and a.problem is not None and "takes no shard" in a.problem
    cur = await raw.execute("SELECT count(*) FROM fleet_members")
    assert await cur.fetchone() == (0,)
    b = fleet.member("b")
    await b.renew()
    assert len(b.owned()) == 256
