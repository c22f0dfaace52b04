"""The durable store's interface: what survives a restart, and the small protocol behind it.

The daemon keeps here what a ``kill -9`` must not lose (docs/robustness.md, "Durability"; docs/store.md, "Tables"):

* **desired sessions**: which sessions should be alive (config plus ``ctl start/stop``), and the
  ones a fail-fast ended, which stay ended across a restart until someone re-authenticates them;
* **server sessions** (the session ledger): the server-side sessions we opened, with what the
  platform needs to resume or end them (the Web Messaging guest token, the CXone session id);
* the **outbox**: every acknowledged attribute write, inserted in the transaction that
  acknowledges it (seed edge case 2: nothing accepted is dropped silently);
* the **ledger**: every send with its idempotency key, payload hash, attempts and outcome
  (``ok`` / ``partial`` / ``failed`` / ``unknown``: an unknown one is read back, never re-sent blindly);
* **mismatches**: what verification could not repair, for manual reconciliation (seed section 3).

:class:`Store` is the protocol the runtime and the attribute service use; SQLite
(:mod:`supervisor.store.sqlite`) is the embedded implementation, and a second one (PostgreSQL, for
several daemon instances: docs/architecture.md, "Roadmap") implements the same methods. Everything here is data.
"""

from __future__ import annotations

import enum
import hashlib
import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

__all__ = [
    "Claim",
    "DesiredSession",
    "DesiredState",
    "Fence",
    "FenceSource",
    "LedgerChange",
    "LedgerEntry",
    "LeftSession",
    "Mismatch",
    "NewMismatch",
    "OpenedSession",
    "OutboxRow",
    "Outcome",
    "Resolution",
    "ResolveRefused",
    "RowChange",
    "RowStatus",
    "ServerSession",
    "ServerState",
    "Store",
    "Submission",
    "SubmitResult",
    "UpdateOutcome",
    "payload_hash",
    "value_hash",
]


class DesiredState(enum.StrEnum):
    RUNNING = "running"
    # `ctl stop`: not started again until `ctl start`
    STOPPED = "stopped"
    # ended by the runtime (a fail-fast, exhausted reconnection, a graceful close): stays ended across
    # a restart until `ctl start` re-authenticates it (seed section 3)
    TERMINATED = "terminated"


@dataclass(frozen=True, slots=True)
class DesiredSession:
    session_id: str
    platform: str
    state: DesiredState
    # why it is not running: the termination reason and trigger, or "ctl stop"
    reason: str | None = None
    updated_at: float = 0.0
    # "config": declared by the configuration file; "api": added over the control socket (AddSession),
    # whose configuration entry is kept here as JSON (``spec``) so it survives restarts and reloads
    origin: str = "config"
    spec: str | None = None


class ServerState(enum.StrEnum):
    # written before the first connection attempt: a crash after it may leave a server session behind
    OPENING = "opening"
    OPEN = "open"
    CLOSED = "closed"


@dataclass(frozen=True, slots=True)
class LeftSession:
    """A session a stop handed over (:meth:`Store.sessions_left`): when it was left, and what the next
    start polls on (CXone's rolling sessionId; None: the stored one stays)."""

    session_id: str
    left_at: float
    platform_session_id: str | None = None


@dataclass(frozen=True, slots=True)
class OpenedSession:
    """A session that went active (:meth:`Store.sessions_opened`): the conversation and the platform
    session id it opened on (None: what the row holds stays)."""

    session_id: str
    conversation_id: str | None = None
    platform_session_id: str | None = None


@dataclass(frozen=True, slots=True)
class ServerSession:
    """One supervised session's server-side session (the session ledger's row)."""

    session_id: str
    platform: str
    kind: str
    state: ServerState
    opened_at: float
    agent_id: str | None = None
    conversation_id: str | None = None
    # CXone: the agent session's anchor (the start or join answer's sessionId)
    platform_session_id: str | None = None
    # Web Messaging: the guest token, the credential that resumes (or ends) the guest session
    guest_token: str | None = field(default=None, repr=False)
    closed_at: float | None = None
    # how it ended: "closed" (by us, live), "ended" (by reconciliation), "already_gone", "not_cleanable: ..."
    outcome: str | None = None
    # epoch seconds a stop handed it over (left it alive on the platform for the next start); None:
    # not handed over since it was last opened (schema version 2)
    left_at: float | None = None


class RowStatus(enum.StrEnum):
    PENDING = "pending"  # queued, not sent
    SENDING = "sending"  # a send carries it; its ledger entry says how that went
    ACCEPTED = "accepted"  # the platform answered 2xx; verification is due
    VERIFIED = "verified"  # read back and found
    REPAIRED = "repaired"  # found after a re-send (the first send was silently dropped)
    FLAGGED = "flagged"  # a mismatch for manual reconciliation
    SUPERSEDED = "superseded"  # a newer write of ours to the same attribute carries it
    RESOLVED = "resolved"  # a flagged row someone resolved by accepting the server's value


#: rows still in the daemon's hands
LIVE = (RowStatus.PENDING, RowStatus.SENDING, RowStatus.ACCEPTED)
#: rows that count against the queue's depth (not yet answered by the platform)
QUEUED = (RowStatus.PENDING, RowStatus.SENDING)


class Outcome(enum.StrEnum):
    """A send's outcome (docs/store.md, "Tables": ``ledger.outcome``)."""

    OK = "ok"
    # answered 2xx, but the read-back found only part of the payload (seed section 3: partial success)
    PARTIAL = "partial"
    FAILED = "failed"
    # written before the send; still so after it when the answer never came (timeout, reset)
    UNKNOWN = "unknown"


class Resolution(enum.StrEnum):
    RESEND = "resend"
    ACCEPT_SERVER = "accept-server"


class UpdateOutcome(enum.StrEnum):
    PENDING = "pending"
    VERIFIED = "verified"
    REPAIRED = "repaired"
    FLAGGED = "flagged"


@dataclass(frozen=True, slots=True)
class OutboxRow:
    """One attribute write of one conversation."""

    id: int
    tenant: str
    # None: an update by conversation id, with no supervised session
    session_id: str | None
    conversation_id: str
    attribute: str
    # None once the row is settled (the value is wiped: payloads limited to what reconciliation needs)
    value: str | None = field(repr=False)
    sensitive: bool
    status: RowStatus
    created_at: float
    sends: int = 0
    repairs: int = 0
    # epoch seconds: not sent before (a Retry-After)
    not_before: float | None = None
    # hash of the value the server held right before our send (value_hash)
    before_hash: str | None = None
    ledger_id: int | None = None
    accepted_at: float | None = None


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    request_id: int
    idempotency_key: str
    tenant: str
    conversation_id: str
    participant_id: str | None
    endpoint: str
    payload_hash: str
    # requests made with this key; each is counted (and committed) before it is sent
    attempts: int
    sent_at: float
    outcome: Outcome
    owner_epoch: int
    answered_at: float | None = None
    status: int | None = None
    error_code: str | None = None


@dataclass(frozen=True, slots=True)
class Submission:
    """An update as a caller submitted it: several attributes of one session's conversation."""

    update_id: str
    tenant: str
    # None: an update by conversation id, with no supervised session
    session_id: str | None
    conversation_id: str
    attributes: Mapping[str, str]
    sensitive: frozenset[str]
    submitted_at: float


@dataclass(frozen=True, slots=True)
class SubmitResult:
    accepted: bool
    update_id: str
    # attributes that replaced a value queued and not yet sent (last write wins)
    coalesced: tuple[str, ...]
    # the tenant's queue depth after the submission (or as it was, when refused)
    depth: int


@dataclass(frozen=True, slots=True)
class Claim:
    """A send about to be made: its ledger entry (outcome unknown, one attempt) and the rows it carries.

    ``later`` is when the conversation's next queued write not yet due (a Retry-After) becomes due.
    """

    # None when nothing is due now (``later`` says when something will be)
    entry: LedgerEntry | None
    rows: tuple[OutboxRow, ...]
    later: float | None = None


@dataclass(frozen=True, slots=True)
class RowChange:
    row_id: int
    status: RowStatus
    not_before: float | None = None
    accepted_at: float | None = None
    # a re-send after a mismatch (counts against the repair budget)
    repair: bool = False
    error: str | None = None
    # the claim counted a send that never left (the endpoint's circuit refused it): take it back
    unsent: bool = False


@dataclass(frozen=True, slots=True)
class LedgerChange:
    request_id: int
    outcome: Outcome
    answered_at: float | None = None
    status: int | None = None
    error_code: str | None = None


@dataclass(frozen=True, slots=True)
class NewMismatch:
    row_id: int
    # "newer-value" (someone else wrote since), "still-wrong" (repairs spent), "failed: CODE"
    reason: str
    # the server's value; None for a sensitive attribute (never kept) or an absent one
    server_value: str | None
    flagged_at: float


@dataclass(frozen=True, slots=True)
class Mismatch:
    id: int
    row_id: int
    tenant: str
    # None: an update by conversation id, with no supervised session
    session_id: str | None
    conversation_id: str
    attribute: str
    sensitive: bool
    reason: str
    flagged_at: float
    # what we wrote and what the server holds; None for sensitive attributes (never shown)
    expected: str | None = field(default=None, repr=False)
    server_value: str | None = field(default=None, repr=False)
    resolved_at: float | None = None
    resolution: str | None = None


class ResolveRefused(Exception):
    """A mismatch that cannot be resolved as asked: ``kind`` is ``unknown``, ``resolved`` or ``superseded``."""

    def __init__(self, kind: str, problem: str) -> None:
        self.kind = kind
        self.problem = problem
        super().__init__(problem)


@dataclass(frozen=True, slots=True)
class Fence:
    """What an owner's write proves: the member that holds the shard's lease, at which epoch."""

    member: str
    epoch: int


class FenceSource(Protocol):
    """The fences of the shards held here (a fleet's leases: supervisor/fleet/leases.py)."""

    def fence_for(self, shard: int) -> Fence | None:
        """The shard's fence while its lease is held here; None: not held here (the write is refused)."""


class Store(Protocol):
    """What the daemon persists; every method is safe to await from the event loop (it never blocks it).

    Raises :class:`~supervisor.errors.StoreError` when the store cannot persist (full disk,
    read-only, corrupt): the caller refuses to acknowledge what was not persisted.
    """

    path: str
    #: why the store cannot persist right now (None when healthy)
    degraded: str | None
    #: the owner epoch this open took (``meta.epoch``, bumped at every open): what SoloLeases holds
    #: every shard at (supervisor/runtime/leases.py)
    epoch: int

    # desired sessions and the session ledger; a read takes the shards it reads (None: every shard;
    # supervisor/store/shards.py), so a process loads only what it owns
    async def desired_sessions(self, shards: Collection[int] | None = None) -> dict[str, DesiredSession]: ...
    #: ``fenced`` False: a command's (``ctl start``/``stop``), which any member of a fleet may carry out;
    #: True: the owner's own, behind its lease fence (docs/store.md, "The fence")
    async def set_desired(self, desired: DesiredSession, *, fenced: bool = True) -> None: ...
    async def forget_desired(self, session_id: str) -> None: ...
    async def add_sessions(self, added: Sequence[DesiredSession]) -> None: ...
    async def server_sessions(self, shards: Collection[int] | None = None) -> dict[str, ServerSession]: ...
    async def session_opening(self, session: ServerSession) -> None: ...
    #: several sessions' owner desired rows and ``session_opening`` rows in one transaction (a fleet
    #: member's write-ahead of the sessions of the shards it acquired, which start together)
    async def sessions_opening(
        self, desired: Sequence[DesiredSession], sessions: Sequence[ServerSession]
    ) -> None: ...
    async def session_opened(
        self, session_id: str, conversation_id: str | None, platform_session_id: str | None
    ) -> None: ...
    #: sessions that went active together, in one transaction: ``session_opened`` for each (one fence
    #: per shard)
    async def sessions_opened(self, opened: Sequence[OpenedSession]) -> None: ...
    async def session_closed(self, session_id: str, outcome: str, closed_at: float) -> None: ...
    async def session_left(
        self, session_id: str, left_at: float, platform_session_id: str | None
    ) -> None: ...
    #: a drain's handovers together, in one transaction: ``session_left`` for each (one fence per shard)
    async def sessions_left(self, left: Sequence[LeftSession]) -> None: ...

    # outbox, ledger, mismatches
    async def submit(self, submission: Submission, max_depth: int) -> SubmitResult: ...
    async def live_rows(self, shards: Collection[int] | None = None) -> list[OutboxRow]: ...
    async def ledger(self, request_ids: Sequence[int] | None = None) -> dict[int, LedgerEntry]: ...
    async def claim(
        self,
        conversation_id: str,
        before: Mapping[str, str],
        *,
        idempotency_key: str,
        participant_id: str | None,
        endpoint: str,
        sent_at: float,
        limit: int,
        attempts: int = 1,
    ) -> Claim | None: ...
    async def count_attempt(self, request_id: int) -> int: ...
    async def record(
        self,
        rows: Sequence[RowChange] = (),
        ledger: LedgerChange | None = None,
        mismatches: Sequence[NewMismatch] = (),
    ) -> list[int]: ...
    async def mismatches(self, *, include_resolved: bool = False) -> list[Mismatch]: ...
    async def resolve(self, mismatch_id: int, resolution: Resolution, at: float) -> Mismatch: ...
    async def depth(self, tenant: str) -> int: ...
    async def update_outcomes(self) -> dict[str, UpdateOutcome]: ...
    async def counts(self) -> dict[str, int]: ...
    async def integrity_check(self) -> str: ...

    # small key/value records beside the owner epoch (docs/store.md, "meta"): the pacers' learned limits
    async def read_meta(self, prefix: str) -> dict[str, str]: ...
    async def write_meta(self, values: Mapping[str, str]) -> None: ...
    async def aclose(self) -> None: ...


def value_hash(key: str, value: str | None) -> str:
    """The hash of one attribute as stored or read back (``None``: absent); compared, never shown."""
    canonical = json.dumps([key, value], ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:32]


def payload_hash(attributes: Mapping[str, str | None]) -> str:
    """The hash of a payload (seed edge case 2: "compare local and server attribute hashes")."""
    canonical = json.dumps(dict(sorted(attributes.items())), ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:32]
