"""A fleet member's leases, kept in PostgreSQL: :class:`PgLeases` (docs/runtime.md, "The fleet").

Every shard has one row in ``shard_leases`` (migration 6): its owner, its epoch (incremented at every
acquisition, never decreased) and when its lease expires, on the **database's clock**
(``extract(epoch from clock_timestamp())``); members' clocks are never compared with it. Every
``renewSeconds`` a member runs one **renewal** (:data:`RENEW_SQL`, one statement): its heartbeat in
``fleet_members``, the expiry of every shard it holds at the epochs it holds them pushed one TTL on,
and the tables read back. Then, from what it read (:func:`supervisor.fleet.shares.plan`), it takes
free or expired shards (:data:`ACQUIRE_SQL`: ``FOR UPDATE SKIP LOCKED``, ``epoch + 1``, an audit row
in ``lease_acquisitions``) or gives back a few when it is above its share (never one it took over from
another member less than :attr:`PgLeases.hold_s` ago: :mod:`supervisor.fleet.shares`, "Settling").

**Local deadlines.** A shard held here is held until the boot-time clock (``CLOCK_BOOTTIME``: it runs
on while the machine is suspended, as the database's clock does) reaches the moment the renewal that
granted it was *sent* plus the fence window (``leaseSeconds`` − :func:`fence_margin`: 6 s of a 10 s
lease). The database cannot grant the lease to another member before the send plus the full TTL, so
the window leaves a margin for a renewal's transit and a paused process's clock. A shard the renewal's
answer does not hold (another member took it, an operator freed it) is lost **at once**; a shard
whose deadline passes without a renewal (the database unreachable, the process paused) is lost then:
its sessions are abandoned (left alive on the platform for the next owner) and the write fence stops
sending for it (:meth:`PgLeases.subscribe_deadlines`).

**The database unreachable**: nothing is acquired, shards are lost at their deadlines, the member is
degraded (``FLEET_DEGRADED``; the ``fleet`` condition) and joins again when the database answers.

**A database restart** (``pg_postmaster_start_time()`` changed since the last renewal, or less than
one TTL ago) must not hand shards to other members merely because every lease expired while it was
down: the first member back extends by one TTL every lease that was valid at the fleet's last
heartbeat before the restart (:data:`EXTEND_SQL`), and for one TTL no member takes another's expired
lease; each owner takes back its own at its next renewal (a new epoch, reason ``reclaimed``), all of
them, past its share too (the excess is given back paced, as free, never left to expire into a peer).

**The digest.** Each member publishes the digest of its ``[[sessions]]`` and ``[tenants]``
(:mod:`supervisor.fleet.identity`); a member whose digest is not the fleet's takes no shard and is
degraded with one line naming both digests.

**A stop** (:meth:`PgLeases.release_all`, as soon as the drain handed the sessions over, while the
renewal loop may still run): the renewals end, every shard is lost locally, then freed in one
statement, and the member marked ``leaving``; ``ss_released`` on the fleet bus wakes the peers, which
take the shards at once, without waiting for a TTL or their next renewal.

**A peer's expiry.** Besides every ``renewSeconds``, a member renews just after the earliest expiry of
another member's lease that its last renewal read (:data:`EXPIRY_LAG_S` after it, on its own clock):
a dead member's shards are taken when its leases expire, not up to a renewal period later (a kill -9's
sessions were taken over 8.4 to 11.5 s after it with 10 s leases; 2 s of that was waiting for the next
renewal). A live peer renews long before its expiry comes, so this costs no renewal while all is well.

The lease connection is the member's own (not the store's), with ``statement_timeout`` below the
renewal period and ``idle_in_transaction_session_timeout`` below the TTL (PostgreSQL docs, 19.11.2,
"Statement Behavior"): a paused member cannot hold a lease row locked.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final

import anyio
import msgspec
import psycopg
from anyio.abc import TaskStatus
from psycopg import AsyncConnection

from supervisor.fleet import shares
from supervisor.fleet.bus import NOTIFY_SQL
from supervisor.fleet.identity import DIGEST_SHOWN
from supervisor.fleet.shares import FleetView, LeaseRow, MemberRow, MemberState, Plan
from supervisor.runtime.leases import Lease, LeaseHolder
from supervisor.store.model import Fence
from supervisor.store.pg import describe

__all__ = [
    "ACQUIRE_SQL",
    "EXTEND_SQL",
    "FREE_SQL",
    "JOIN_SQL",
    "RENEW_SQL",
    "PgLeases",
    "boottime",
    "fence_margin",
]

Conn = AsyncConnection[tuple[Any, ...]]
Sleep = Callable[[float], Awaitable[None]]
Health = Callable[[str | None], None]
#: the most a renewal keeps back of a lease for transit and a paused clock (10 s → a 6 s window)
#: the fleet bus channel of a member's release (:meth:`PgLeases.release_all`): its peers renew at once
RELEASED: Final = "ss_released"
MAX_FENCE_MARGIN_S: Final = 4.0
#: a renewal for a peer's expiry runs this long after it, on this member's clock (the expiry read on
#: the database's clock is placed on it by the renewal's answer: late by at most its transit)
EXPIRY_LAG_S: Final = 0.05
#: a shorter lease keeps back this part of itself (2 s → 1.2 s window)
FENCE_MARGIN_PART: Final = 0.4


def boottime() -> float:
    """Seconds on ``CLOCK_BOOTTIME`` (Linux; counts suspended time), else the monotonic clock."""
    clock = getattr(time, "CLOCK_BOOTTIME", None)
    return time.clock_gettime(clock) if clock is not None else time.monotonic()


def fence_margin(lease_s: float) -> float:
    """What the local deadline keeps back of a lease: 4 s, or 40 % of a lease shorter than 10 s."""
    return min(MAX_FENCE_MARGIN_S, lease_s * FENCE_MARGIN_PART)


# the database's clock, once per statement: clock_timestamp() is volatile, so the CTE is computed once
_CLOCK = (
    "clock AS (SELECT extract(epoch FROM clock_timestamp())::float8 AS now, "
    "extract(epoch FROM pg_postmaster_start_time())::float8 AS started)"
)

#: a member's first statement: its row with its start (a restarted member keeps its id)
JOIN_SQL: Final = (
    f"WITH {_CLOCK} "
    "INSERT INTO fleet_members (member, host, digest, state, started_at, heartbeat_at) "
    "SELECT %(member)s, %(host)s, %(digest)s, %(state)s, now, now FROM clock "
    "ON CONFLICT (member) DO UPDATE SET host = excluded.host, digest = excluded.digest, "
    "state = excluded.state, started_at = excluded.started_at, heartbeat_at = excluded.heartbeat_at"
)

#: the renewal, one statement: the heartbeat, every lease held here at its epoch extended by one TTL
#: (a lease already expired is not: another member may hold it), and the tables as they were before
#: it (the data-modifying CTEs' changes are not visible to the rest of the statement: PostgreSQL docs,
#: 7.8.4, "Data-Modifying Statements in WITH"), with the fleet's last heartbeat before the database
#: started
RENEW_SQL: Final = (
    f"WITH {_CLOCK}, "
    "heartbeat AS ("
    "INSERT INTO fleet_members (member, host, digest, state, started_at, heartbeat_at) "
    "SELECT %(member)s, %(host)s, %(digest)s, %(state)s, now, now FROM clock "
    "ON CONFLICT (member) DO UPDATE SET host = excluded.host, digest = excluded.digest, "
    "state = excluded.state, heartbeat_at = excluded.heartbeat_at RETURNING started_at), "
    "renewed AS ("
    "UPDATE shard_leases AS l SET expires_at = clock.now + %(ttl)s "
    "FROM clock, unnest(%(shards)s::integer[], %(epochs)s::bigint[]) AS held (shard, epoch) "
    "WHERE l.shard = held.shard AND l.epoch = held.epoch AND l.owner = %(member)s "
    "AND l.expires_at > clock.now RETURNING l.shard) "
    "SELECT clock.now, clock.started, "
    "(SELECT max(heartbeat_at) FROM fleet_members WHERE heartbeat_at < clock.started), "
    "(SELECT coalesce(array_agg(shard ORDER BY shard), '{}') FROM renewed), "
    "(SELECT started_at FROM heartbeat), "
    "(SELECT coalesce(json_agg(json_build_array(member, host, digest, state, started_at, heartbeat_at)), "
    "'[]') FROM fleet_members), "
    "(SELECT json_agg(json_build_array(shard, owner, epoch, expires_at) ORDER BY shard) FROM shard_leases) "
    "FROM clock"
)

#: takes the shards the plan names that are still free, expired, or leased in this member's name (a
#: row another member locks is skipped, not waited for: SKIP LOCKED; the conditions are checked again
#: on the row's newest version once locked, READ COMMITTED's rule: PostgreSQL docs, 13.2.1); during the
#: quiet after a database restart, another member's expired lease is not taken
ACQUIRE_SQL: Final = (
    f"WITH {_CLOCK}, "
    "picked AS ("
    "SELECT l.shard, l.owner FROM shard_leases AS l, clock WHERE l.shard = ANY(%(shards)s::integer[]) "
    "AND (l.owner IS NULL OR l.owner = %(member)s OR "
    "(NOT %(quiet)s AND (l.expires_at IS NULL OR l.expires_at <= clock.now))) "
    "FOR UPDATE OF l SKIP LOCKED), "
    "taken AS ("
    "UPDATE shard_leases AS l SET owner = %(member)s, epoch = l.epoch + 1, expires_at = clock.now + %(ttl)s "
    "FROM picked, clock WHERE l.shard = picked.shard "
    "RETURNING l.shard, l.epoch, picked.owner AS previous_owner, clock.now), "
    "audit AS ("
    "INSERT INTO lease_acquisitions (shard, member, epoch, previous_owner, reason, at) "
    "SELECT shard, %(member)s, epoch, previous_owner, "
    "CASE WHEN previous_owner IS NULL THEN 'free' WHEN previous_owner = %(member)s THEN 'reclaimed' "
    "ELSE 'expired' END, now FROM taken) "
    "SELECT shard, epoch, previous_owner FROM taken ORDER BY shard"
)

#: gives back the shards named (held here at those epochs): free at once for the next renewal of a peer
FREE_SQL: Final = (
    "UPDATE shard_leases AS l SET owner = NULL, expires_at = NULL "
    "FROM unnest(%(shards)s::integer[], %(epochs)s::bigint[]) AS gone (shard, epoch) "
    "WHERE l.shard = gone.shard AND l.epoch = gone.epoch AND l.owner = %(member)s"
)

#: a stop: every shard leased in this member's name freed, the member leaving, in one statement
LEAVE_SQL: Final = (
    f"WITH {_CLOCK}, "
    "freed AS (UPDATE shard_leases SET owner = NULL, expires_at = NULL WHERE owner = %(member)s "
    "RETURNING shard) "
    f"UPDATE fleet_members SET state = '{MemberState.LEAVING.value}', heartbeat_at = clock.now FROM clock "
    "WHERE member = %(member)s RETURNING (SELECT count(*) FROM freed)"
)

#: after a database restart: every lease valid at the fleet's last heartbeat before it, extended by
#: one TTL from now (never shortened)
EXTEND_SQL: Final = (
    f"WITH {_CLOCK} "
    "UPDATE shard_leases AS l SET expires_at = clock.now + %(ttl)s FROM clock "
    "WHERE l.owner IS NOT NULL AND l.expires_at > %(last)s AND l.expires_at < clock.now + %(ttl)s"
)

_SETTINGS_SQL: Final = (
    "SELECT set_config('statement_timeout', %s, false), "
    "set_config('idle_in_transaction_session_timeout', %s, false)"
)


class PgLeases:
    """The leases of one fleet member, kept in PostgreSQL (module docstring); implements
    :class:`~supervisor.runtime.leases.Leases` and :class:`~supervisor.store.model.FenceSource`.

    ``clock`` (boot-time seconds) and ``sleep`` are injected so tests drive the renewals and the
    deadlines without waiting for timers; ``on_health`` hears the member degraded (a reason) and
    recovered (None).
    """

    def __init__(
        self,
        conninfo: str,
        *,
        member: str,
        host: str,
        digest: str,
        lease_s: float = 10.0,
        renew_s: float = 2.0,
        quiet_s: float | None = None,
        hold_s: float | None = None,
        clock: Callable[[], float] = boottime,
        sleep: Sleep = anyio.sleep,
        on_health: Health | None = None,
    ) -> None:
        self._conninfo = conninfo
        self._member = member
        self.host = host
        self.digest = digest
        self.lease_s = lease_s
        self.renew_s = renew_s
        #: after a database restart, how long no other member's expired lease is taken (one TTL)
        self.quiet_s = lease_s if quiet_s is None else quiet_s
        #: how long a shard taken over from another member stays here before it may be given back
        #: for balance (shares.py, "Settling"; boot-time seconds)
        self.hold_s = shares.MIN_HOLD_TTLS * lease_s if hold_s is None else hold_s
        #: from a renewal's send to its local deadline (leaseSeconds − the fence margin)
        self.window_s = lease_s - fence_margin(lease_s)
        self._clock = clock
        self._sleep = sleep
        self._on_health = on_health
        self._conn: Conn | None = None
        self._joined = False
        self._holder: LeaseHolder | None = None
        self._owned: dict[int, Lease] = {}
        self._view: Mapping[int, Lease] = MappingProxyType(self._owned)
        # shards given back: lost here at one renewal, freed in the table at the next (the abandoned
        # sessions have had a renewal period to close their connections)
        self._releasing: dict[int, int] = {}
        # when each shard held here was taken over from another member (boot-time seconds): it settles
        # for hold_s
        self._since: dict[int, float] = {}
        self._subscribers: list[Callable[[Mapping[int, Lease]], None]] = []
        #: why the member is degraded now (the database unreachable, a digest mismatch), or None
        self.problem: str | None = None
        self._mismatch: str | None = None
        self._aside: str | None = None
        self._db_started: float | None = None
        self._quiet_until: float | None = None
        self._members: list[MemberRow] = []
        self._leases: list[LeaseRow] = []
        self._db_now: float | None = None
        self._last_sent: float | None = None
        # this member's clock when the last renewal's answer came (its database time: _db_now)
        self._read_at: float | None = None
        # a peer's release heard (wake): the loop renews, and so acquires, without waiting its period
        self._woken = False
        self._waiting: anyio.CancelScope | None = None
        # one renewal at a time, and none once the stop's release has begun (leaving): a renewal after
        # it would mark the member active again and take back the shards it has just freed
        self._renewing = anyio.Lock()
        self._leaving = False
        #: renewals run, and renewals that reached the database (for tests and status)
        self.renewals = 0
        self.reached = 0

    # ------------------------------------------------------------------ the Leases interface
    @property
    def identity(self) -> str:
        return self._member

    def owned(self) -> Mapping[int, Lease]:
        return self._view

    def fence_for(self, shard: int) -> Fence | None:
        """The shard's fence while held here and before its deadline; None otherwise."""
        lease = self._owned.get(shard)
        if lease is None or lease.deadline is None or lease.deadline <= self._clock():
            return None
        return Fence(self._member, lease.epoch)

    def subscribe_deadlines(self, callback: Callable[[Mapping[int, Lease]], None]) -> None:
        """``callback`` gets the owned map after every renewal and every loss (on the loop)."""
        self._subscribers.append(callback)

    def fleet_view(self) -> FleetView:
        """The members and shards as the last renewal read them (``ctl status``)."""
        held = {s: lease.epoch for s, lease in self._owned.items()}
        return shares.view(
            self._member,
            self._members,
            self._leases,
            held,
            now=self._db_now,
            ttl=self.lease_s,
            problem=self.problem,
        )

    @property
    def quiet(self) -> bool:
        """Within one TTL of a database restart: no other member's expired lease is taken."""
        return self._quiet_until is not None and self._db_now is not None and self._db_now < self._quiet_until

    async def serve(
        self, holder: LeaseHolder, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Renew every ``renewSeconds`` and lose shards at their deadlines, telling ``holder``; started
        once the first renewal's shards were told (none when the database cannot be reached).

        ``holder`` is told in order by a task of its own (:class:`_Relay`), never inside the renewal
        loop: what it does with shards (the store read, orphans ended, sessions started or abandoned)
        may take longer than a TTL after a database restart, and a renewal waiting for it would let
        this member's own leases expire for a peer to take."""
        relay = _Relay(holder)
        self._holder = relay
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(relay.run)
                if self._aside is not None:
                    # not a member at all: no row, no heartbeat, so the others' shares leave it out
                    self._degrade(self._aside)
                    task_status.started()
                    await anyio.sleep_forever()
                await self.renew()
                await relay.idle()
                task_status.started()
                while True:
                    if self._leaving:
                        await anyio.sleep_forever()  # released (a stop): no renewal any more
                    now = self._clock()
                    due = (self._last_sent if self._last_sent is not None else now) + self.renew_s
                    deadlines = [
                        lease.deadline for lease in self._owned.values() if lease.deadline is not None
                    ]
                    expiry = self._peer_expiry(now)
                    wake = min([due, *deadlines] + ([] if expiry is None else [expiry]))
                    if not self._woken:
                        with anyio.CancelScope() as self._waiting:
                            await self._sleep(max(0.0, wake - now))
                        self._waiting = None
                    woken, self._woken = self._woken, False
                    await self.expire()
                    at = self._clock()
                    if woken or at >= due or (expiry is not None and at >= expiry):
                        await self.renew()
        finally:
            self._holder = None
            relay.close()

    def _peer_expiry(self, now: float) -> float | None:
        """When, on this member's clock, the earliest lease of another member that the last renewal
        read expires, plus :data:`EXPIRY_LAG_S` (module docstring, "A peer's expiry"); None when
        there is none still to come (an expired lease the last renewal left, it did on purpose)."""
        if self._read_at is None or self._db_now is None or self.quiet:
            return None
        expiries = [
            self._read_at + (lease.expires_at - self._db_now) + EXPIRY_LAG_S
            for lease in self._leases
            if lease.owner is not None and lease.owner != self._member and lease.expires_at is not None
        ]
        coming = [t for t in expiries if t > now]
        return min(coming) if coming else None

    def stand_aside(self, problem: str) -> None:
        """Before :meth:`serve`: this process must not hold shards (its store could not be opened at
        start, so it could neither resume their sessions nor record them): it never joins, and is
        degraded with ``problem`` until it is restarted."""
        self._aside = problem

    # ------------------------------------------------------------------ one renewal
    async def renew(self) -> None:
        """One renewal (module docstring): renew, lose what was not renewed, then give back or take
        shards as :func:`~supervisor.fleet.shares.plan` says. The database unreachable: degraded.
        After :meth:`release_all` has begun: nothing."""
        async with self._renewing:
            if self._leaving:
                return
            await self._renew()

    async def _renew(self) -> None:
        self.renewals += 1
        await self.expire()  # a lease past its deadline is not renewed: the fence has stopped it
        sent = self._clock()
        self._last_sent = sent
        try:
            with anyio.fail_after(max(self.renew_s, 1.0)):
                try:
                    conn = await self._connection()
                    row = await self._renewal(conn)
                except psycopg.OperationalError:
                    if self.reached == 0 or self._conn is None:
                        raise
                    # the connection of the last renewal died (a database restart, a failover): once
                    # more on a new one, so a restart shorter than a renewal period costs no renewal
                    await self._drop()
                    conn = await self._connection()
                    row = await self._renewal(conn)
        except (psycopg.Error, OSError, TimeoutError) as exc:
            await self._drop()
            self._degrade(_unreachable(exc))
            await self.expire()
            return
        self.reached += 1
        now, started, last_heartbeat, renewed, my_start, members, leases = row
        self._db_now = float(now)
        self._read_at = self._clock()
        self._members = _members(members, self._member_row(float(my_start), float(now)))
        renewed_set = {int(s) for s in renewed}
        self._leases = [
            LeaseRow(lease.shard, lease.owner, lease.epoch, float(now) + self.lease_s)
            if lease.shard in renewed_set
            else lease
            for lease in _leases(leases)
        ]
        deadline = sent + self.window_s
        gone = [s for s in self._owned if s not in renewed_set]
        for shard in renewed_set & self._owned.keys():
            self._owned[shard] = Lease(shard, self._owned[shard].epoch, deadline)
        if not gone:
            self._tell()  # the new deadlines (a loss tells them with it)
        await self._lose(gone)
        # the rows this renewal frees: its answer was read before, and still names this member
        freed = frozenset(self._releasing)
        try:
            await self._free_released(conn)
            await self._after_restart(conn, float(started), last_heartbeat)
        except (psycopg.Error, OSError) as exc:
            await self._drop()
            self._degrade(_unreachable(exc))
            return
        self._check_digest()
        held = {s: lease.epoch for s, lease in self._owned.items()}
        leases = [
            shares.LeaseRow(row.shard, None, row.epoch, None) if row.shard in freed else row
            for row in self._leases
        ]
        decided = shares.plan(
            self._member,
            self._members,
            leases,
            held,
            now=self._db_now,
            ttl=self.lease_s,
            quiet=self.quiet,
            settling=self.settling(),
        )
        await self._apply(conn, decided)

    def settling(self) -> frozenset[int]:
        """The shards held here taken over less than ``hold_s`` ago: not given back for balance yet."""
        now = self._clock()
        return frozenset(s for s, since in self._since.items() if now - since < self.hold_s)

    async def expire(self) -> None:
        """Lose every shard whose local deadline has passed (the write fence has stopped it already)."""
        now = self._clock()
        await self._lose(
            [s for s, lease in self._owned.items() if lease.deadline is not None and lease.deadline <= now]
        )

    async def release_all(self) -> int:
        """A stop, once the drain has handed the sessions over (their rows written): every shard lost
        here, then freed in the table in one statement (the member ``leaving``); returns how many rows
        were freed (0 when the database cannot be reached: the leases then expire after their TTL).

        It may run while :meth:`serve` does (the drain calls it before the services stop, so the
        peers start taking over at once): a renewal in flight ends first, and none runs after it.
        Called again, it does nothing."""
        if self._leaving:
            return 0
        self._leaving = True
        freed = 0
        with anyio.CancelScope(shield=True):
            async with self._renewing:
                freed = await self._leave()
        return freed

    async def _leave(self) -> int:
        # the supervisor is not told: its drain has let every session go already, and what a loss does
        # besides (a shared channel's topics removed on the platform) is not a stop's; the write fence
        # is (subscribe_deadlines), so not one byte more leaves for these shards
        self._holder = None
        await self._lose(list(self._owned))
        self._releasing.clear()
        freed = 0
        with anyio.move_on_after(max(self.renew_s, 1.0)):
            try:
                conn = await self._connection()
                cur = await conn.execute(LEAVE_SQL, {"member": self._member})
                row = await cur.fetchone()
                freed = int(row[0]) if row is not None else 0
                if freed:
                    # the peers' fleet buses hear it once the rows are free (autocommit: the LEAVE
                    # has committed) and renew at once (wake), instead of at their next period
                    payload = msgspec.json.encode({"member": self._member, "freed": freed}).decode()
                    await conn.execute(NOTIFY_SQL, (RELEASED, payload))
            except (psycopg.Error, OSError):
                await self._drop()
        return freed

    def wake(self) -> None:
        """A peer released its shards (``ss_released`` on the fleet bus): renew now, so this member
        acquires its share of them at once rather than at its next renewal (the SIGTERM handover's
        3 s). Renewals stay one at a time: a wake during a renewal makes the loop renew once more."""
        self._woken = True
        if self._waiting is not None:
            self._waiting.cancel()

    async def aclose(self) -> None:
        """Close the lease connection (the leases held expire by themselves)."""
        await self._drop()

    # ------------------------------------------------------------------ the steps
    async def join(self) -> None:
        """Connect and upsert this member's row (its start: ``started_at``); raises psycopg's errors."""
        await self._connection()

    async def _connection(self) -> Conn:
        conn = self._conn
        if conn is None or conn.closed or conn.broken:
            conn = await AsyncConnection.connect(self._conninfo, autocommit=True)
            # a statement outlasting a renewal period fails (the next renewal tries again); a
            # transaction left idle (a paused process) is ended before its lease could expire
            statement_ms = max(100, int(self.renew_s * 750))
            idle_ms = max(500, int(min(self.lease_s / 2, 5.0) * 1000))
            await conn.execute(_SETTINGS_SQL, (str(statement_ms), str(idle_ms)))
            self._conn = conn
        if not self._joined:
            await conn.execute(JOIN_SQL, self._member_params())
            self._joined = True
        return conn

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with anyio.CancelScope(shield=True), contextlib.suppress(psycopg.Error, OSError):
                await conn.close()

    def _member_params(self) -> dict[str, Any]:
        state = MemberState.DEGRADED if self._mismatch is not None else MemberState.ACTIVE
        return {"member": self._member, "host": self.host, "digest": self.digest, "state": state.value}

    def _member_row(self, started_at: float, now: float) -> MemberRow:
        params = self._member_params()
        return MemberRow(self._member, self.host, self.digest, params["state"], started_at, now)

    async def _renewal(self, conn: Conn) -> tuple[Any, ...]:
        held = sorted(self._owned.items())
        params = {
            **self._member_params(),
            "ttl": self.lease_s,
            "shards": [s for s, _ in held],
            "epochs": [lease.epoch for _, lease in held],
        }
        cur = await conn.execute(RENEW_SQL, params)
        row = await cur.fetchone()
        assert row is not None
        return row

    async def _free_released(self, conn: Conn) -> None:
        if not self._releasing:
            return
        gone = sorted(self._releasing.items())
        await conn.execute(
            FREE_SQL, {"member": self._member, "shards": [s for s, _ in gone], "epochs": [e for _, e in gone]}
        )
        self._releasing.clear()

    async def _after_restart(self, conn: Conn, started: float, last_heartbeat: float | None) -> None:
        """The database started since the last renewal, or less than one TTL ago: extend what was
        valid at the fleet's last heartbeat before it, and keep quiet for one TTL."""
        now = self._db_now
        assert now is not None
        changed = self._db_started is not None and abs(started - self._db_started) > 1e-3
        first = self._db_started is None
        self._db_started = started
        if not changed and not (first and now - started < self.quiet_s):
            return
        quiet_from = now if changed else started
        self._quiet_until = max(quiet_from + self.quiet_s, self._quiet_until or 0.0)
        if last_heartbeat is not None:
            await conn.execute(EXTEND_SQL, {"ttl": self.lease_s, "last": float(last_heartbeat)})
            self._leases = [
                LeaseRow(lease.shard, lease.owner, lease.epoch, now + self.lease_s)
                if lease.owner is not None
                and lease.expires_at is not None
                and lease.expires_at > last_heartbeat
                else lease
                for lease in self._leases
            ]

    def _check_digest(self) -> None:
        """A digest that is not the fleet's: degraded with one line naming both; else recovered."""
        assert self._db_now is not None
        live = shares.live_members(self._members, self._db_now, self.lease_s)
        fleet = shares.fleet_digest(live)
        if fleet is None or fleet == self.digest:
            self._mismatch = None
            self._degrade(None)
            return
        agree = sum(1 for m in live if m.digest == fleet)
        self._mismatch = (
            f"configuration digest {self.digest[:DIGEST_SHOWN]} differs from the fleet's "
            f"{fleet[:DIGEST_SHOWN]} ({agree} of {len(live)} live members): [[sessions]] and [tenants] "
            "must be the same on every member; this member takes no shard"
        )
        self._degrade(self._mismatch)

    async def _apply(self, conn: Conn, decided: Plan) -> None:
        if decided.release:
            for shard in decided.release:
                self._releasing[shard] = self._owned[shard].epoch
            await self._lose(decided.release)
        if not decided.acquire:
            return
        sent = self._clock()
        try:
            with anyio.fail_after(max(self.renew_s, 1.0)):
                cur = await conn.execute(
                    ACQUIRE_SQL,
                    {
                        "member": self._member,
                        "shards": list(decided.acquire),
                        "ttl": self.lease_s,
                        "quiet": self.quiet,
                    },
                )
                rows = await cur.fetchall()
        except (psycopg.Error, OSError, TimeoutError) as exc:
            await self._drop()
            self._degrade(_unreachable(exc))
            return
        taken = [Lease(int(shard), int(epoch), sent + self.window_s) for shard, epoch, _ in rows]
        if not taken:
            return
        for lease in taken:
            self._owned[lease.shard] = lease
        # a shard taken over from another member settles here (its sessions are being resumed); a
        # free one (a fleet's start, a stop's release, a give-back) or this member's own does not
        for shard, _, previous in rows:
            if previous is not None and previous != self._member:
                self._since[int(shard)] = sent
        # what the view shows until the next renewal reads the table again
        expires = (self._db_now or 0.0) + self.lease_s
        by_shard = {lease.shard: lease for lease in taken}
        self._leases = [
            LeaseRow(row.shard, self._member, by_shard[row.shard].epoch, expires)
            if row.shard in by_shard
            else row
            for row in self._leases
        ]
        self._tell()
        if self._holder is not None:
            await self._holder.acquired(taken)

    async def _lose(self, shards: Sequence[int]) -> None:
        lost = [s for s in shards if s in self._owned]
        if not lost:
            return
        for shard in lost:
            del self._owned[shard]
            self._since.pop(shard, None)
        self._tell()
        if self._holder is not None:
            await self._holder.lost(lost)

    def _tell(self) -> None:
        for callback in list(self._subscribers):
            callback(self._view)

    def _degrade(self, problem: str | None) -> None:
        problem = problem if problem is not None else self._mismatch
        if problem == self.problem:
            return
        self.problem = problem
        if self._on_health is not None:
            self._on_health(problem)


class _Relay:
    """Tells a :class:`~supervisor.runtime.leases.LeaseHolder` what the renewals decided, in their
    order, from a task of its own (:meth:`run`): the renewal loop hands each word over and goes on.
    The write fence does not wait for it: it follows the deadlines at once
    (:meth:`PgLeases.subscribe_deadlines`)."""

    def __init__(self, holder: LeaseHolder) -> None:
        self._holder = holder
        self._send, self._receive = anyio.create_memory_object_stream[tuple[bool, tuple[Any, ...]]](math.inf)
        self._pending = 0
        self._idle = anyio.Event()
        self._idle.set()

    async def acquired(self, leases: Sequence[Lease]) -> None:
        self._put(True, tuple(leases))

    async def lost(self, shards: Collection[int]) -> None:
        self._put(False, tuple(shards))

    def _put(self, acquired: bool, what: tuple[Any, ...]) -> None:
        if self._pending == 0:
            self._idle = anyio.Event()
        self._pending += 1
        self._send.send_nowait((acquired, what))

    async def idle(self) -> None:
        """Return once everything handed over so far has been told."""
        await self._idle.wait()

    def close(self) -> None:
        self._send.close()
        self._receive.close()

    async def run(self) -> None:
        async for acquired, what in self._receive:
            try:
                if acquired:
                    await self._holder.acquired(what)
                else:
                    await self._holder.lost(what)
            finally:
                self._pending -= 1
                if self._pending == 0:
                    self._idle.set()


def _unreachable(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "the database did not answer a renewal in time"
    return describe(exc)


def _members(raw: Sequence[Sequence[Any]], mine: MemberRow) -> list[MemberRow]:
    """The members read, this member's row as its renewal just wrote it."""
    out = [
        MemberRow(str(m[0]), str(m[1]), str(m[2]), str(m[3]), float(m[4]), float(m[5]))
        for m in raw
        if m[0] != mine.member
    ]
    return [*out, mine]


def _leases(raw: Sequence[Sequence[Any]] | None) -> list[LeaseRow]:
    return [
        LeaseRow(
            int(r[0]), None if r[1] is None else str(r[1]), int(r[2]), None if r[3] is None else float(r[3])
        )
        for r in raw or ()
    ]
