"""The fleet's invariants as pure functions over what the simulators and the store saw (no I/O).

A fleet run (:mod:`tests.harness.fleet_run`) collects three records, and every check here reads only them:

* the simulators' **activity entries** (docs/simulators.md, "Activity log"): who sent what, when (the
  simulator's receive time), stamped ``member`` (``[daemon] stampMember``); :func:`acts` turns them into
  :class:`Act` s naming our session and its shard, through the map of simulator session keys the run
  learned (a guest token's ``wm:`` key, a CXone agent id);
* the **lease audit** (``lease_acquisitions``: :class:`Acquisition`), on the database's clock, which is
  the same host's clock the simulators use: the acquisitions say which member held a shard at which
  epoch from when (:class:`LeaseTimeline`);
* the **row writes** of the fenced tables (:class:`RowWrite`: a test-only trigger's record of every
  insert or update of ``server_sessions`` and ``outbox`` with its ``epoch`` and the database's clock).

An act is attributed to the epoch its member held the act's shard under: the epoch of that member's
latest acquisition of the shard at or before the act. A member that goes on acting after a peer took
its shard (a paused member woken up, a fence that let a write through) acts under its old epoch, after
the peer's newer one: that is what :func:`two_members_at_once`, :func:`epochs_decreasing` and
:func:`sent_after_deadline` catch. Each check returns a :class:`Finding`: the number of violations and a
few of them described, so a failing test says what broke.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from supervisor.store.shards import shard_of

__all__ = [
    "CXONE_END",
    "CXONE_START",
    "Acquisition",
    "Act",
    "Failure",
    "Finding",
    "LeaseTimeline",
    "Pause",
    "RowWrite",
    "acts",
    "admission_peak",
    "before_retry_after",
    "ended_peer_sessions",
    "epochs_decreasing",
    "handover",
    "latency_finding",
    "sent_after_deadline",
    "stale_fenced_writes",
    "stamps_match_addresses",
    "takeover_latencies",
    "takeovers_between",
    "two_members_at_once",
    "unattributed",
]

_CXONE_PREFIX: Final = "/inContactAPI/services/v{N}.0/agent-sessions"
#: the CXone route that starts a new agent session (a takeover joins the live one instead)
CXONE_START: Final = ("POST", _CXONE_PREFIX)
#: the CXone route that ends an agent session
CXONE_END: Final = ("DELETE", _CXONE_PREFIX + "/{sessionId}")
#: the entry kinds that are a client's own doing (a ``disconnect`` or ``displaced`` may be the server's)
_ACTING: Final = frozenset({"request", "connect", "frame"})
#: how many violations a finding describes (the count is always complete)
_EXAMPLES: Final = 5


@dataclass(frozen=True, slots=True)
class Acquisition:
    """One row of ``lease_acquisitions``: ``member`` took ``shard`` at ``epoch`` at ``at`` (database clock)."""

    shard: int
    member: str
    epoch: int
    previous_owner: str | None
    reason: str
    at: float


@dataclass(frozen=True, slots=True)
class Act:
    """An activity entry of a member, for one of our sessions."""

    seq: int
    t: float
    member: str
    session: str
    shard: int
    kind: str
    listener: str
    #: ``METHOD endpoint`` of a request, the action or message of a frame, "" otherwise
    what: str
    status: int | None
    #: the stamp's epoch (``[daemon] stampMember``): the store's open epoch, not the shard's
    stamp_epoch: int | None


@dataclass(frozen=True, slots=True)
class RowWrite:
    """An insert or update of a fenced row: its table, session, the epoch it carries, when (database clock)."""

    table: str
    session: str
    epoch: int | None
    at: float


@dataclass(frozen=True, slots=True)
class Pause:
    """A member stopped (SIGSTOP) at ``paused_at`` and continued at ``resumed_at``; nothing of the shards
    it held may reach a platform after ``deadline`` (its last renewal send + the fence margin)."""

    member: str
    paused_at: float
    resumed_at: float
    deadline: float


@dataclass(frozen=True, slots=True)
class Failure:
    """A member that stopped serving at ``at`` (kill -9, SIGSTOP, SIGTERM)."""

    member: str
    at: float


@dataclass
class Finding:
    """A check's result: how many violations, a few of them said in words, and figures it measured."""

    name: str
    violations: int = 0
    examples: list[str] = field(default_factory=list)
    figures: dict[str, float] = field(default_factory=dict)

    def add(self, description: str) -> None:
        self.violations += 1
        if len(self.examples) < _EXAMPLES:
            self.examples.append(description)

    @property
    def ok(self) -> bool:
        return self.violations == 0

    def __str__(self) -> str:
        figures = "".join(f", {k} {v:.3f}" for k, v in sorted(self.figures.items()))
        said = "".join(f"\n  {e}" for e in self.examples)
        return f"{self.name}: {self.violations} violation(s){figures}{said}"


# -- attribution ----------------------------------------------------------------------------------------


def acts(entries: Iterable[Mapping[str, Any]], session_of: Mapping[str, str]) -> list[Act]:
    """The stamped entries a client sent for one of our sessions (``session_of``: simulator key →
    session id), in receive order. Entries of other keys (logins, a shared notifications channel, a
    token the run never learned) or unstamped are left out: :func:`unattributed` counts them."""
    found = []
    for e in entries:
        key, member = e.get("session"), e.get("member")
        if e.get("kind") not in _ACTING or key is None or member is None or key not in session_of:
            continue
        if e.get("kind") == "request" and "{sessionId}" not in str(e.get("endpoint")):
            # a CXone request names its agent session only on the session's own routes; a login, a
            # start or a join is keyed by its token's agent, which all of a member's sessions share
            continue
        session = session_of[key]
        if e.get("kind") == "request":
            what = f"{e.get('method')} {e.get('endpoint')}"
        else:
            what = str(e.get("action") or e.get("message") or "")
        found.append(
            Act(
                seq=int(e["seq"]),
                t=float(e["t"]),
                member=str(member),
                session=session,
                shard=shard_of(session),
                kind=str(e["kind"]),
                listener=str(e.get("listener")),
                what=what,
                status=e.get("status"),
                stamp_epoch=e.get("epoch"),
            )
        )
    found.sort(key=lambda a: (a.t, a.seq))
    return found


def unattributed(entries: Iterable[Mapping[str, Any]], session_of: Mapping[str, str]) -> int:
    """Acting entries with a session key that :func:`acts` could not attribute (no stamp, unknown key)."""
    return sum(
        1
        for e in entries
        if e.get("kind") in _ACTING
        and e.get("session") is not None
        and (e.get("member") is None or e.get("session") not in session_of)
    )


class LeaseTimeline:
    """Which member held which shard at which epoch from when, from the acquisitions."""

    def __init__(self, acquisitions: Iterable[Acquisition]) -> None:
        by_shard: dict[int, list[Acquisition]] = defaultdict(list)
        for a in acquisitions:
            by_shard[a.shard].append(a)
        self._by_shard = {s: sorted(rows, key=lambda a: (a.at, a.epoch)) for s, rows in by_shard.items()}
        self._times = {s: [a.at for a in rows] for s, rows in self._by_shard.items()}
        mine: dict[tuple[str, int], list[Acquisition]] = defaultdict(list)
        for rows in self._by_shard.values():
            for a in rows:
                mine[a.member, a.shard].append(a)
        self._mine = dict(mine)
        self._mine_times = {k: [a.at for a in rows] for k, rows in self._mine.items()}

    def of_shard(self, shard: int) -> list[Acquisition]:
        """The shard's acquisitions, oldest first."""
        return self._by_shard.get(shard, [])

    def latest(self, shard: int, t: float) -> Acquisition | None:
        """The shard's last acquisition at or before ``t`` (its holder then, if its lease still ran)."""
        i = bisect.bisect_right(self._times.get(shard, []), t)
        return self._by_shard[shard][i - 1] if i else None

    def held(self, member: str, shard: int, t: float) -> Acquisition | None:
        """``member``'s last acquisition of ``shard`` at or before ``t``: the epoch it acts under then."""
        i = bisect.bisect_right(self._mine_times.get((member, shard), []), t)
        return self._mine[member, shard][i - 1] if i else None

    def next_after(self, shard: int, epoch: int) -> Acquisition | None:
        """The first acquisition of ``shard`` at an epoch above ``epoch``."""
        return next((a for a in self.of_shard(shard) if a.epoch > epoch), None)


def _tenure_of(act: Act, leases: LeaseTimeline) -> int | None:
    held = leases.held(act.member, act.shard, act.t)
    return None if held is None else held.epoch


# -- the checks -----------------------------------------------------------------------------------------


def two_members_at_once(found: Sequence[Act], leases: LeaseTimeline) -> Finding:
    """No session active on two members at once. A member's *tenure* of a session is the span from its
    first to its last act under one epoch; two tenures of different members that overlap in time are a
    violation (a takeover displaces the old socket as the new one configures, so clean tenures only
    touch). An act under no acquisition at all (a member acting on a shard it never took) is one too."""
    finding = Finding("session active on two members at once")
    spans: dict[tuple[str, str, int], list[float]] = {}
    for a in found:
        epoch = _tenure_of(a, leases)
        if epoch is None:
            finding.add(
                f"{a.member} {a.kind} {a.what} on {a.session} (shard {a.shard}) at {a.t:.3f} holding no lease"
            )
            continue
        span = spans.setdefault((a.session, a.member, epoch), [a.t, a.t])
        span[1] = max(span[1], a.t)
    by_session: dict[str, list[tuple[float, float, str, int]]] = defaultdict(list)
    for (session, member, epoch), (start, end) in spans.items():
        by_session[session].append((start, end, member, epoch))
    for session, tenures in sorted(by_session.items()):
        tenures.sort()
        for i, (start, end, member, epoch) in enumerate(tenures):
            for other_start, _other_end, other, other_epoch in tenures[i + 1 :]:
                if other_start >= end:
                    break
                if other != member:
                    finding.add(
                        f"{session}: {member} (epoch {epoch}) {start:.3f}-{end:.3f} overlaps "
                        f"{other} (epoch {other_epoch}) from {other_start:.3f}"
                    )
    return finding


def epochs_decreasing(
    found: Sequence[Act], leases: LeaseTimeline, acquisitions: Sequence[Acquisition]
) -> Finding:
    """Epochs never decrease: per shard, each acquisition's epoch is above the one before (in the order
    written); per session, the epoch its acts were made under never goes back in time; per member and
    session, the stamp's epoch never goes back either."""
    finding = Finding("epoch decreasing")
    last_written: dict[int, int] = {}
    for row in acquisitions:  # in the order the audit wrote them (its identity)
        before = last_written.get(row.shard)
        if before is not None and row.epoch <= before:
            finding.add(f"shard {row.shard}: acquisition at epoch {row.epoch} after epoch {before}")
        last_written[row.shard] = max(row.epoch, before or row.epoch)
    session_epoch: dict[str, tuple[int, Act]] = {}
    stamp: dict[tuple[str, str], int] = {}
    for a in found:
        epoch = _tenure_of(a, leases)
        if epoch is not None:
            seen = session_epoch.get(a.session)
            if seen is not None and epoch < seen[0]:
                finding.add(
                    f"{a.session}: {a.member} {a.kind} {a.what} at {a.t:.3f} under epoch {epoch} after "
                    f"{seen[1].member} under epoch {seen[0]} at {seen[1].t:.3f}"
                )
            if seen is None or epoch >= seen[0]:
                session_epoch[a.session] = (epoch, a)
        if a.stamp_epoch is not None:
            key = (a.member, a.session)
            if a.stamp_epoch < stamp.get(key, a.stamp_epoch):
                finding.add(f"{a.session}: {a.member} stamped epoch {a.stamp_epoch} after {stamp[key]}")
            stamp[key] = max(a.stamp_epoch, stamp.get(key, a.stamp_epoch))
    return finding


def sent_after_deadline(found: Sequence[Act], pauses: Sequence[Pause], leases: LeaseTimeline) -> Finding:
    """Nothing from a paused member after its deadline: an act of the paused member later than its
    deadline, on a shard it had not acquired again since the pause, is a violation."""
    finding = Finding("sent by a paused member after its deadline")
    late = 0.0
    for p in pauses:
        for a in found:
            if a.member != p.member or a.t <= p.deadline:
                continue
            again = leases.held(a.member, a.shard, a.t)
            if again is not None and again.at > p.paused_at:
                continue  # acquired anew after the pause: a new tenure
            late = max(late, a.t - p.deadline)
            finding.add(
                f"{a.member} {a.kind} {a.what} for {a.session} at deadline + {a.t - p.deadline:.3f} s"
            )
    finding.figures["latest_s"] = late
    return finding


def takeover_latencies(
    found: Sequence[Act], failure: Failure, moved: Iterable[str], leases: LeaseTimeline
) -> dict[str, float | None]:
    """Per session the failed member held, how long after the failure its first act under an
    acquisition made after the failure came (None: never, in what was collected)."""
    latency: dict[str, float | None] = dict.fromkeys(moved)
    for a in found:
        if a.session not in latency or latency[a.session] is not None or a.t <= failure.at:
            continue
        held = leases.held(a.member, a.shard, a.t)
        if held is not None and held.at > failure.at:
            latency[a.session] = a.t - failure.at
    return latency


def latency_finding(
    name: str, latencies: Mapping[str, float | None], *, first_within: float, all_within: float
) -> Finding:
    """The first session resumed within ``first_within`` s, every one within ``all_within`` s."""
    finding = Finding(name)
    measured = [v for v in latencies.values() if v is not None]
    missing = sorted(k for k, v in latencies.items() if v is None)
    for session in missing:
        finding.add(f"{session} never resumed")
    if measured:
        finding.figures["first_s"] = min(measured)
        finding.figures["last_s"] = max(measured)
        if min(measured) > first_within:
            finding.add(f"first session resumed after {min(measured):.3f} s > {first_within:.3f} s")
        for session, v in sorted(latencies.items()):
            if v is not None and v > all_within:
                finding.add(f"{session} resumed after {v:.3f} s > {all_within:.3f} s")
    finding.figures["sessions"] = float(len(latencies))
    return finding


def _sliding_peak(times: Sequence[float], window: float) -> int:
    peak, start = 0, 0
    for end, t in enumerate(times):
        while times[start] <= t - window:
            start += 1
        peak = max(peak, end - start + 1)
    return peak


def admission_peak(
    entries: Iterable[Mapping[str, Any]],
    attempts: Iterable[tuple[str, str]],
    rate: float,
    *,
    slack: float = 1.1,
) -> Finding:
    """The admission limit held fleet-wide: the attempts (``attempts``: pairs of listener and kind or
    ``METHOD endpoint``, e.g. ``("webmessaging", "connect")``) of every member together, in any
    one-second window, are at most ``slack`` × ``rate``."""
    wanted = set(attempts)
    times = sorted(
        float(e["t"])
        for e in entries
        if (e.get("listener"), e.get("kind")) in wanted
        or (e.get("listener"), f"{e.get('method')} {e.get('endpoint')}") in wanted
    )
    finding = Finding("admission limit held fleet-wide")
    peak = _sliding_peak(times, 1.0)
    finding.figures["peak_per_s"] = float(peak)
    finding.figures["limit_per_s"] = slack * rate
    if peak > slack * rate:
        finding.add(f"{peak} attempts within one second > {slack} x {rate:g}")
    return finding


def before_retry_after(
    entries: Iterable[Mapping[str, Any]], listeners: Iterable[str], retry_after: float, *, grace: float
) -> Finding:
    """Nothing sent before a Retry-After: after a refused handshake (429/503) on a listener at ``t``, no
    member attempts another on that listener until ``t + retry_after``, except what was already on its
    way within ``grace`` s of the refusal (sent before any member could have read the answer). Frames
    on sockets already open are not attempts: the refusal holds connections, not traffic."""
    wanted = set(listeners)
    finding = Finding("sent before a Retry-After")
    ordered = sorted(
        (e for e in entries if e.get("listener") in wanted and e.get("kind") == "connect"),
        key=lambda e: (e["t"], e["seq"]),
    )
    holds: dict[str, float] = {}  # listener -> the refusal that holds it
    for e in ordered:
        t, listener = float(e["t"]), str(e["listener"])
        since = holds.get(listener)
        if since is not None and since + grace < t < since + retry_after:
            finding.add(f"{e.get('member')} {e['kind']} on {listener} {t - since:.3f} s after a refusal")
            continue
        if e.get("status") in (429, 503) and (since is None or t >= since + retry_after):
            holds[listener] = t
    finding.figures["refusals_holding"] = float(len(holds))
    return finding


def takeovers_between(acquisitions: Iterable[Acquisition], start: float, end: float) -> Finding:
    """Acquisitions that took a shard from another member between ``start`` and ``end`` (a database
    restart must cause none)."""
    finding = Finding("takeovers")
    for a in acquisitions:
        if start <= a.at <= end and a.previous_owner is not None and a.previous_owner != a.member:
            finding.add(
                f"shard {a.shard}: {a.member} took it from {a.previous_owner} ({a.reason}) at {a.at:.3f}"
            )
    return finding


def handover(
    found: Sequence[Act],
    entries: Iterable[Mapping[str, Any]],
    *,
    member: str,
    at: float,
    moved: Iterable[str],
    keys_before: Mapping[str, str],
    keys_after: Mapping[str, str],
    first_within: float,
    all_within: float,
) -> Finding:
    """A SIGTERMed member's sessions resumed elsewhere promptly, as themselves.

    Promptly, as a takeover's bound says it: the **first** session resumed within ``first_within`` s of
    ``at`` (the handover itself: the drain, the release, a peer's acquisition and its first resumption),
    and **every** one within ``all_within`` s (that plus the sessions moved ÷ the fleet's admission
    rate: the guests reconnect through the fleet's handshake admission, so a hundred of them cannot all
    be back within the first bound at 100 a second, however early the shards are released).

    As themselves: no
    CXone agent session started after it (``POST agent-sessions``; a takeover joins the live one: the
    start is keyed by its token's agent, not by the session, so every start after ``at`` counts), and
    each Web Messaging guest on its kept token (``keys_before`` / ``keys_after``: session → ``wm:`` key
    of its token before and after; a new key is a new guest session, answered ``newSession: true``)."""
    sessions = set(moved)
    finding = Finding("handover resumed")
    resumed: dict[str, float] = {}
    for a in found:
        if a.session in sessions and a.t > at and a.member != member:
            resumed.setdefault(a.session, a.t - at)
    method, endpoint = CXONE_START
    for e in entries:
        if (
            e.get("kind") == "request"
            and (e.get("method"), e.get("endpoint")) == (method, endpoint)
            and float(e["t"]) > at
            and isinstance(e.get("status"), int)
            and e["status"] < 300
        ):
            finding.add(
                f"a new CXone agent session started by {e.get('member')} {float(e['t']) - at:.3f} s after"
            )
    if resumed and min(resumed.values()) > first_within:
        finding.add(
            f"first session resumed {min(resumed.values()):.3f} s after the SIGTERM > {first_within:.3f} s"
        )
    for session in sorted(sessions):
        if session not in resumed:
            finding.add(f"{session} not resumed")
        elif resumed[session] > all_within:
            finding.add(f"{session} resumed {resumed[session]:.3f} s after the SIGTERM > {all_within:.3f} s")
        if session in keys_before and keys_after.get(session) != keys_before[session]:
            finding.add(f"{session}: a new guest session (the token changed)")
    if resumed:
        finding.figures["first_s"] = min(resumed.values())
        finding.figures["last_s"] = max(resumed.values())
    finding.figures["limit_s"] = all_within
    return finding


def ended_peer_sessions(found: Sequence[Act], leases: LeaseTimeline) -> Finding:
    """Reconcile never ends a peer's session: a CXone DELETE or a guest ``closeSession`` from a member
    for a session whose shard another member had acquired last is a violation."""
    finding = Finding("ended a peer's session")
    end = " ".join(CXONE_END)
    for a in found:
        if a.what not in (end, "closeSession"):
            continue
        holder = leases.latest(a.shard, a.t)
        if holder is not None and holder.member != a.member:
            finding.add(f"{a.member} ended {a.session} at {a.t:.3f}: {holder.member} holds shard {a.shard}")
    return finding


def stamps_match_addresses(entries: Iterable[Mapping[str, Any]], addresses: Mapping[str, str]) -> Finding:
    """With each member on its own loopback address (``[fleet] localAddress``), an entry's stamped
    member and the address it came from name the same member: the stamp's attribution holds."""
    finding = Finding("stamp and source address disagree")
    member_at = {address: member for member, address in addresses.items()}
    checked = 0
    for e in entries:
        member, peer = e.get("member"), e.get("peer")
        if member is None or not peer:
            continue
        host = str(peer).rsplit(":", 1)[0].strip("[]")
        checked += 1
        if member_at.get(host) != member:
            finding.add(f"seq {e.get('seq')}: stamped {member}, sent from {host} ({member_at.get(host)})")
    finding.figures["checked"] = float(checked)
    return finding


def stale_fenced_writes(writes: Iterable[RowWrite], leases: LeaseTimeline) -> Finding:
    """No fenced row written after its shard's next epoch: a row written at epoch ``e`` at ``w`` while an
    acquisition of its shard at an epoch above ``e`` had been made before ``w``. Rows written with no
    epoch (commands any member accepts are not fenced) are counted in ``unfenced``."""
    finding = Finding("fenced row written after its shard's next epoch")
    unfenced = 0
    for w in writes:
        if w.epoch is None:
            unfenced += 1
            continue
        shard = shard_of(w.session)
        following = leases.next_after(shard, w.epoch)
        if following is not None and following.at <= w.at:
            finding.add(
                f"{w.table} {w.session} written at epoch {w.epoch}, {w.at - following.at:.3f} s after "
                f"{following.member} took shard {shard} at epoch {following.epoch}"
            )
    finding.figures["unfenced"] = float(unfenced)
    return finding
