"""The fleet's decisions, pure: who is live, whose configuration the fleet runs, which shards a member
takes and which it gives back. :class:`~supervisor.fleet.leases.PgLeases` reads the tables, asks
:func:`plan` and writes what it says (docs/runtime.md, "The fleet").

* **Live**: a member whose heartbeat is within one TTL of the database's clock and that is not
  ``leaving``. Only the database's clock is compared with the database's times: members' clocks may
  disagree with it and with each other.
* **The fleet's digest** (:func:`fleet_digest`): the digest most live members publish; on a tie, the
  oldest live member's (its ``started_at``, then its id). A member whose digest differs takes no shard.
* **Eligible**: live members with the fleet's digest. Each takes at most its **share**,
  ``ceil(256 / eligible)``, so the shards are balanced whatever the order members came in.
* **Who takes a free shard** (free: no owner, or its lease expired): the eligible member with the
  highest **rendezvous rank** for it (``sha256(member NUL shard)``, Thaler and Ravishankar's
  highest-random-weight hashing) among those below their share. Every member computes the same
  answer from the same tables, so they rarely contend for a shard; when they do (tables read at
  different times), the database decides (``FOR UPDATE SKIP LOCKED`` and a conditional update).
* **Giving back** (:data:`RELEASE_PER_RENEWAL`): a member above its share (a new member joined) gives
  back a few shards per renewal, those it ranks lowest for, never all at once: no takeover storm.
* **Settling** (:data:`MIN_HOLD_TTLS`): a shard taken over from another member (its lease expired: a
  kill, a pause) less than ``MIN_HOLD_TTLS`` × TTL ago is not given back; the excess is given from the
  other shards, and waits only while there are none. A free shard (a fleet's start, a stop's release,
  a give-back) does not settle: at a fleet's start the first member takes every shard, and holding
  them would keep the next members from their shares and start every session on the first.
  A member that took a paused peer's shards is still resuming their sessions when the peer comes back
  (SIGCONT) and asks for its share: giving those shards back then moved their sessions twice, each
  resumed twice and late (a run measured p50 17 s, max 31 s after the pause, against a bound of 15 s). Kafka's
  rebalancing protocols keep work where it is being brought up for the same reason: Kafka Streams
  moves a task to a new owner only once a warm-up copy there has caught up, its current owner keeping
  it meanwhile (KIP-441, "Smooth Scaling Out for Kafka Streams": ``acceptable.recovery.lag``,
  ``probing.rebalance.interval.ms``), and Kafka Connect's cooperative rebalancing holds a departed
  worker's tasks for ``scheduled.rebalance.max.delay.ms`` instead of moving them at once (KIP-415);
  like both cooperative protocols (KIP-429), a shard given back is revoked at one renewal and
  assigned at the next. Balance still comes: a shard settles within the hold, then is given back by
  rank as any other.
* **After a database restart** (``quiet``): no expired lease of another member is taken (its owner
  may not have reached the database yet since it came back); free shards and this member's own are.
"""

from __future__ import annotations

import enum
import hashlib
import math
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from supervisor.store.shards import SHARDS

__all__ = [
    "MIN_HOLD_TTLS",
    "RELEASE_PER_RENEWAL",
    "FleetView",
    "LeaseRow",
    "MemberRow",
    "MemberState",
    "MemberView",
    "Plan",
    "ShardView",
    "fleet_digest",
    "live_members",
    "plan",
    "rank",
    "share",
    "view",
]

#: how many shards a member above its share gives back per renewal (a new member's share arrives in
#: ``share / RELEASE_PER_RENEWAL`` renewals: 128 shards in 8 renewals, 16 s with the defaults)
RELEASE_PER_RENEWAL: Final = 16
#: how long, in TTLs, a shard taken over stays before it may be given back for balance (30 s with the
#: defaults): a takeover's sessions are resumed within a few seconds of their shard's acquisition (the
#: takeover bound's 2 s plus the sessions at the admission rate), up to 13 s in a slow run and more
#: when a platform's circuit is open; a paused member is back within a TTL or two and its share comes
#: 16 shards a renewal: three TTLs cover both. A member whose share can only come from shards taken
#: over waits at most this long for it
MIN_HOLD_TTLS: Final = 3.0


class MemberState(enum.StrEnum):
    """``fleet_members.state`` (migration 6's check)."""

    # renewing, with the fleet's configuration
    ACTIVE = "active"
    # renewing, but its configuration's digest is not the fleet's: it takes no shard
    DEGRADED = "degraded"
    # stopped (SIGTERM): its shards freed; not live from then on
    LEAVING = "leaving"


@dataclass(frozen=True, slots=True)
class MemberRow:
    """A ``fleet_members`` row (times on the database's clock, epoch seconds)."""

    member: str
    host: str
    digest: str
    state: str
    started_at: float
    heartbeat_at: float


@dataclass(frozen=True, slots=True)
class LeaseRow:
    """A ``shard_leases`` row (``expires_at`` on the database's clock; None with ``owner`` None: free)."""

    shard: int
    owner: str | None
    epoch: int
    expires_at: float | None

    def held(self, now: float) -> bool:
        """Whether the lease is in force at ``now``: an owner and an expiry after it."""
        return self.owner is not None and self.expires_at is not None and self.expires_at > now


@dataclass(frozen=True, slots=True)
class Plan:
    """What one renewal does besides renewing: shards to take (ascending) and to give back."""

    acquire: tuple[int, ...] = ()
    release: tuple[int, ...] = ()


def rank(member: str, shard: int) -> int:
    """The rendezvous rank of ``member`` for ``shard``: the higher, the more the shard is its."""
    digest = hashlib.sha256(f"{member}\0{shard}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def share(eligible: int) -> int:
    """The most shards one of ``eligible`` members takes: ``ceil(256 / eligible)``."""
    return math.ceil(SHARDS / max(1, eligible))


def live_members(members: Iterable[MemberRow], now: float, ttl: float) -> list[MemberRow]:
    """Members whose heartbeat is within ``ttl`` of ``now`` and that are not leaving."""
    return [m for m in members if m.state != MemberState.LEAVING and m.heartbeat_at > now - ttl]


def fleet_digest(live: Sequence[MemberRow]) -> str | None:
    """The digest most live members publish (a tie: the oldest's among the tied); None: no member."""
    if not live:
        return None
    counts = Counter(m.digest for m in live)
    top = max(counts.values())
    tied = {d for d, n in counts.items() if n == top}
    oldest = min((m for m in live if m.digest in tied), key=lambda m: (m.started_at, m.member))
    return oldest.digest


def plan(
    me: str,
    members: Sequence[MemberRow],
    leases: Sequence[LeaseRow],
    held: Mapping[int, int],
    *,
    now: float,
    ttl: float,
    quiet: bool = False,
    settling: Collection[int] = (),
) -> Plan:
    """What ``me`` (holding ``held``: shard → epoch) takes and gives back this renewal (module docstring).

    ``members`` must hold ``me`` with its current heartbeat and digest; a member whose digest is not
    the fleet's gets the empty plan (it takes nothing; what it holds it keeps renewing). ``settling``:
    the shards of ``held`` acquired within the hold (:data:`MIN_HOLD_TTLS`), never given back now.
    """
    live = live_members(members, now, ttl)
    digest = fleet_digest(live)
    eligible = sorted(m.member for m in live if m.digest == digest)
    if me not in eligible:
        return Plan()
    cap = share(len(eligible))
    counts = Counter(lease.owner for lease in leases if lease.held(now) and lease.owner in eligible)
    counts[me] = len(held)
    if counts[me] > cap:
        # the excess comes from the shards settled here; a shard still settling stays (module docstring)
        settled = sorted((s for s in held if s not in settling), key=lambda s: rank(me, s))
        return Plan(release=tuple(sorted(settled[: min(counts[me] - cap, RELEASE_PER_RENEWAL)])))
    taken: list[int] = []
    for lease in sorted(leases, key=lambda lease: lease.shard):
        if lease.shard in held:
            continue
        if lease.owner == me:
            # leased in this member's name but not held here: a restart of this member, or its own
            # leases lost locally during a database outage and extended since; taken back first, up
            # to the share, and during the quiet after a database restart all of them: left to expire,
            # the excess would pass to a peer as a takeover the restart caused (a TTL's gap for its
            # sessions); taken back, it is given back paced, as free
            if quiet or counts[me] < cap:
                taken.append(lease.shard)
                counts[me] += 1
            continue
        if lease.held(now) or (quiet and lease.owner is not None):
            continue
        room = [m for m in eligible if counts[m] < cap]
        if not room:
            break
        taker = max(room, key=lambda m: rank(m, lease.shard))
        counts[taker] += 1
        if taker == me:
            taken.append(lease.shard)
    return Plan(acquire=tuple(taken))


@dataclass(frozen=True, slots=True)
class MemberView:
    """One member as ``ctl status`` shows it."""

    member: str
    host: str
    state: str
    live: bool
    shards: int
    heartbeat_at: float


@dataclass(frozen=True, slots=True)
class ShardView:
    """One shard as ``ctl status`` shows it (``owner`` None: free or expired)."""

    shard: int
    owner: str | None
    epoch: int
    mine: bool


@dataclass(frozen=True, slots=True)
class FleetView:
    """The fleet as this member last read it (at its last renewal; ``at``: the database's clock then)."""

    member: str
    at: float | None
    members: tuple[MemberView, ...] = ()
    shards: tuple[ShardView, ...] = field(default_factory=tuple)
    problem: str | None = None


def view(
    me: str,
    members: Sequence[MemberRow],
    leases: Sequence[LeaseRow],
    held: Mapping[int, int],
    *,
    now: float | None,
    ttl: float,
    problem: str | None = None,
) -> FleetView:
    """The fleet's view for ``ctl status``: members with their live leases, shards with their owners."""
    if now is None:
        return FleetView(me, None, problem=problem)
    live = {m.member for m in live_members(members, now, ttl)}
    counts = Counter(lease.owner for lease in leases if lease.held(now))
    return FleetView(
        me,
        now,
        tuple(
            MemberView(m.member, m.host, m.state, m.member in live, counts[m.member], m.heartbeat_at)
            for m in sorted(members, key=lambda m: m.member)
        ),
        tuple(
            ShardView(
                lease.shard,
                lease.owner if lease.held(now) else None,
                lease.epoch,
                lease.shard in held,
            )
            for lease in sorted(leases, key=lambda lease: lease.shard)
        ),
        problem,
    )
