"""Bulk attribute updates with verification and reconciliation (seed edge case 2; section 3).

:meth:`AttributeService.submit` is the intake the control socket's ``attributes set`` and the
Python API share: the update is in the outbox, committed, before the caller hears "accepted"; a
full tenant queue answers "try later" (:class:`~supervisor.attributes.model.Backpressured`) and
starts a backpressure episode. The :class:`~supervisor.attributes.sender.Sender` then sends,
verifies and reconciles per conversation on the scheduler's clock; :meth:`AttributeService.load`
resumes what a previous run (or a ``kill -9``) left: queued writes are sent, sends without an
answer are read back, accepted ones are verified. ``ctl mismatches`` and ``ctl resolve`` end
here too.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from supervisor.attributes.backpressure import Episodes
from supervisor.attributes.events import (
    AttributeMismatchResolved,
    RateLimitBackpressure,
    RateLimitBackpressureReleased,
)
from supervisor.attributes.model import (
    REDACTED,
    Backpressured,
    Refused,
    Settings,
    SubmitAnswer,
    check_attributes,
    subject,
)
from supervisor.attributes.platform import Target
from supervisor.attributes.scheduler import Kind, Scheduler, Work
from supervisor.attributes.sender import Sender
from supervisor.bus import EventBus
from supervisor.clock import Clock, iso_utc
from supervisor.errors import StoreError
from supervisor.events import Correlation
from supervisor.store import (
    Mismatch,
    Resolution,
    ResolveRefused,
    RowStatus,
    Store,
    Submission,
    UpdateOutcome,
)
from supervisor.store.shards import shard_of
from supervisor.taxonomy import SdkErrorEvent
from supervisor.vocabulary import ApiFault

__all__ = ["Accepted", "AttributeService", "Targets"]

#: the store's reason for not resolving a mismatch (ResolveRefused.kind), as the control socket says it
_RESOLVE_REFUSALS = {"unknown": ApiFault.NO_SUCH_MISMATCH, "resolved": ApiFault.ALREADY_RESOLVED}


@dataclass(frozen=True, slots=True)
class Accepted:
    """Where a session's updates go: its tenant (the platform credential) and its conversation."""

    tenant: str
    conversation_id: str


class Targets(Protocol):
    """What the runtime tells the service about sessions (supervisor/runtime/durable.py)."""

    def accept(self, session_id: str) -> Accepted:
        """The session may take updates now; raises Refused (unknown, terminated, no conversation, CXone)."""

    def accept_elsewhere(self, session_id: str, conversation_id: str | None) -> Accepted:
        """A session another fleet member owns may take updates (accepted here, sent by its owner):
        a Genesys session of the configuration, with a conversation (configured, or ``conversation_id``
        from the session ledger); raises Refused (unknown, no conversation, CXone, no credential)."""

    def accept_conversation(self, conversation_id: str, tenant: str | None = None) -> Accepted:
        """Updates by conversation id with no session may go to Genesys now, with ``tenant``'s credential
        (None: the default tenant's); raises Refused (no credential, no such Genesys tenant)."""

    def target(self, tenant: str, session_id: str | None, conversation_id: str) -> Target | None:
        """Where to send a queued write (None: the platform is not configured now); ``session_id``
        None: an update by conversation id with no session."""

    def failed(self, session_id: str, event: SdkErrorEvent) -> None:
        """A fail-fast met while writing for the session: its machine decides (QUEUE_FULL ends it)."""


class AttributeService:
    """Intake, sending, verification and reconciliation of attribute updates (module docstring)."""

    def __init__(
        self,
        store: Store | None,
        targets: Targets,
        settings: Settings,
        *,
        bus: EventBus,
        clock: Clock,
        unavailable: str | None = None,
    ) -> None:
        self.store = store
        self.settings = settings
        self._targets = targets
        self._bus = bus
        self._clock = clock
        # why there is no store (it could not be opened): said in every refusal
        self._unavailable = unavailable
        self.scheduler = Scheduler(clock, self._handle, concurrency=settings.concurrency, held=self._held)
        self._episodes = Episodes(settings.queue_depth, settings.resume_at)
        self.sender: Sender | None = None
        self._owner: dict[str, tuple[str, str | None]] = {}
        if store is not None:
            self.sender = Sender(
                store,
                settings,
                self.scheduler,
                target_of=targets.target,
                failed=targets.failed,
                drained=self._drained,
                measured=self._episodes.measured,
                bus=bus,
                clock=clock,
            )
            self._owner = self.sender.owner
        self._accepting = True
        self.counters = {"submitted": 0, "acknowledged": 0, "refused": 0, "rejected": 0}

    def _held(self, tenant: str) -> float:
        return 0.0 if self.sender is None else self.sender.held_for(tenant)

    # ------------------------------------------------------------------ intake
    async def submit(self, session_id: str, attributes: Mapping[str, object]) -> SubmitAnswer:
        """Queue an update durably; raises Refused, or Backpressured (try later)."""
        self.counters["submitted"] += 1
        try:
            return await self._submit(session_id, attributes)
        except Backpressured:
            self.counters["refused"] += 1
            raise
        except Refused:
            self.counters["rejected"] += 1
            raise

    async def submit_elsewhere(
        self,
        session_id: str,
        attributes: Mapping[str, object],
        conversation_id: str | None,
        tell: Callable[[str, str], Awaitable[None]],
    ) -> SubmitAnswer:
        """Queue an update of a session another fleet member owns: committed to the outbox here, not
        scheduled here; ``tell(tenant, conversation)`` then tells its owner, which sends it
        (supervisor/fleet/desired.py). Raises Refused, or Backpressured (try later)."""
        self.counters["submitted"] += 1
        try:
            accepted = self._targets.accept_elsewhere(session_id, conversation_id)
            answer = await self._submit(session_id, attributes, accepted=accepted)
        except Backpressured:
            self.counters["refused"] += 1
            raise
        except Refused:
            self.counters["rejected"] += 1
            raise
        # acknowledged whatever comes of the notice: the row is the update, and the shard's next
        # acquisition loads it if the owner missed the notice
        with contextlib.suppress(StoreError):
            await tell(accepted.tenant, accepted.conversation_id)
        return answer

    async def submit_conversation(
        self, conversation_id: str, attributes: Mapping[str, object], tenant: str | None = None
    ) -> SubmitAnswer:
        """Queue an update of a Genesys conversation by its id, with no supervised session (post-call
        middleware, after the agent's session is gone); sent, read back, repaired and flagged as a
        session's update is. Raises Refused, or Backpressured (try later)."""
        self.counters["submitted"] += 1
        try:
            return await self._submit(None, attributes, conversation_id, tenant)
        except Backpressured:
            self.counters["refused"] += 1
            raise
        except Refused:
            self.counters["rejected"] += 1
            raise

    async def _submit(
        self,
        session_id: str | None,
        attributes: Mapping[str, object],
        conversation_id: str | None = None,
        tenant: str | None = None,
        *,
        accepted: Accepted | None = None,
    ) -> SubmitAnswer:
        try:
            values = check_attributes(attributes)
        except ValueError as exc:
            raise Refused(ApiFault.INVALID_PARAMETER, str(exc), parameter="attributes") from None
        if not self._accepting:
            raise Refused(ApiFault.NOT_ACCEPTING, "the daemon is draining: updates are not accepted")
        store = self._require_store()
        # given: another fleet member's session, whose owner sends it; else sent from here
        here = accepted is None
        if accepted is None and session_id is not None:
            accepted = self._targets.accept(session_id)
        elif accepted is None:
            assert conversation_id is not None
            accepted = self._targets.accept_conversation(conversation_id, tenant)
        tenant = accepted.tenant
        limit = self.settings.queue_depth
        if self._episodes.active(tenant):
            depth = await self._guarded(store.depth(tenant))
            if not self._release(tenant, depth):
                self._refuse(tenant, depth)
        submission = Submission(
            update_id=str(uuid.uuid4()),
            tenant=tenant,
            session_id=session_id,
            conversation_id=accepted.conversation_id,
            attributes=values,
            sensitive=self.settings.sensitive,
            submitted_at=self._clock.time(),
        )
        result = await self._guarded(store.submit(submission, limit))
        if not result.accepted:
            self._refuse(tenant, result.depth)
        # committed: a crash from here on loses no acknowledged update, only (at worst) its answer
        self.counters["acknowledged"] += 1
        if here:
            self._owner[accepted.conversation_id] = (tenant, session_id)
            self.scheduler.after(Work(Kind.SEND, tenant, accepted.conversation_id), 0.0)
        return SubmitAnswer(
            result.update_id, session_id, accepted.conversation_id, result.coalesced, result.depth
        )

    def accepted_elsewhere(self, tenant: str, session_id: str | None, conversation_id: str) -> None:
        """An update another fleet member accepted into the outbox for a session owned here: its send
        is scheduled as this member's own acknowledged updates are (the outbox row is the update)."""
        if not self._accepting:
            return  # draining: the row stays queued for the shard's next owner
        self._owner[conversation_id] = (tenant, session_id)
        self.scheduler.after(Work(Kind.SEND, tenant, conversation_id), 0.0)

    def _require_store(self) -> Store:
        if self.store is None:
            raise Refused(
                ApiFault.STORE_UNAVAILABLE,
                f"{self._unavailable or 'no store is configured'}; nothing was acknowledged",
            )
        return self.store

    async def _guarded(self, call: Any) -> Any:
        try:
            return await call
        except StoreError as exc:
            raise Refused(
                ApiFault.STORE_UNAVAILABLE, f"{exc}; nothing was acknowledged", path=exc.path
            ) from None

    def _refuse(self, tenant: str, depth: int) -> None:
        paused = self.scheduler.paused_for(tenant)
        started = self._episodes.refuse(tenant, depth, paused)
        retry = self._episodes.retry_after(depth, paused)
        if started is not None:
            self._bus.publish(
                RateLimitBackpressure(
                    tenant, depth, self.settings.queue_depth, self.settings.resume_at, retry, self._now()
                )
            )
        raise Backpressured(tenant, depth, self.settings.queue_depth, retry)

    def _release(self, tenant: str, depth: int) -> bool:
        refused = self._episodes.drained(tenant, depth)
        if refused is None:
            return False
        self._bus.publish(RateLimitBackpressureReleased(tenant, depth, refused, self._now()))
        return True

    def drain(self) -> None:
        """The daemon is stopping: refuse new updates, start no new work (what is queued stays queued)."""
        self._accepting = False
        self.scheduler.stop()

    # ------------------------------------------------------------------ mismatches
    async def mismatches(self, *, include_resolved: bool = False) -> list[dict[str, Any]]:
        store = self._require_store()
        found = await self._guarded(store.mismatches(include_resolved=include_resolved))
        return [self._mismatch_wire(m) for m in found]

    def _mismatch_wire(self, m: Mismatch) -> dict[str, Any]:
        hidden = m.sensitive or m.attribute in self.settings.sensitive
        return {
            "id": m.id,
            "sessionId": m.session_id,
            "conversationId": m.conversation_id,
            "key": m.attribute,
            "sensitive": hidden,
            "reason": m.reason,
            "flaggedAt": iso_utc(m.flagged_at),
            "expected": REDACTED if hidden else m.expected,
            "server": REDACTED if hidden else m.server_value,
            "resolution": m.resolution,
            "resolvedAt": None if m.resolved_at is None else iso_utc(m.resolved_at),
        }

    async def resolve(self, mismatch_id: int, resolution: Resolution) -> dict[str, Any]:
        store = self._require_store()
        try:
            m = await self._guarded(store.resolve(mismatch_id, resolution, self._clock.time()))
        except ResolveRefused as exc:
            fault = _RESOLVE_REFUSALS.get(exc.kind, ApiFault.NOT_RESOLVABLE)
            raise Refused(fault, exc.problem, mismatchId=mismatch_id) from None
        self._bus.publish(
            AttributeMismatchResolved(
                m.id, m.session_id, m.conversation_id, m.attribute, resolution.value, self._now()
            ),
            Correlation(subject(m.session_id, m.conversation_id), conversation_id=m.conversation_id),
        )
        if resolution is Resolution.RESEND:
            self._owner.setdefault(m.conversation_id, (m.tenant, m.session_id))
            self.scheduler.after(Work(Kind.SEND, m.tenant, m.conversation_id), 0.0)
        return self._mismatch_wire(m)

    async def status(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "limit": self.settings.queue_depth,
            "accepting": self._accepting,
            **self.counters,
        }
        if self.store is None:
            out["store"] = {"degraded": self._unavailable}
            return out
        out["store"] = {"path": self.store.path, "degraded": self.store.degraded}
        try:
            out["rows"] = await self.store.counts()
        except StoreError as exc:
            out["store"]["degraded"] = exc.problem
        tenants = sorted({tenant for tenant, _ in self._owner.values()})
        out["tenants"] = {
            t: {
                "backpressure": self._episodes.active(t),
                "pausedForS": round(self.scheduler.paused_for(t), 3),
            }
            for t in tenants
        }
        out["scheduled"] = self.scheduler.pending()
        return out

    async def outcomes(self) -> dict[str, UpdateOutcome]:
        """Every acknowledged update's outcome so far (the demo's summary; tests)."""
        return await self._require_store().update_outcomes()

    # ------------------------------------------------------------------ running
    async def load(self, shards: Collection[int] | None = None) -> None:
        """Resume what a previous run left of ``shards`` (None: every shard): queued writes,
        unanswered sends, pending verifications (the store reads the live rows by shard)."""
        store = self.store
        if store is None:
            return
        rows = await store.live_rows(shards)
        entries = await store.ledger(sorted({r.ledger_id for r in rows if r.ledger_id is not None}))
        now = self._clock.time()
        verify = self.settings.verify_after_s
        for row in rows:
            self._owner[row.conversation_id] = (row.tenant, row.session_id)
            if row.status is RowStatus.PENDING:
                delay = 0.0 if row.not_before is None else row.not_before - now
                self.scheduler.after(Work(Kind.SEND, row.tenant, row.conversation_id), delay)
                continue
            entry = entries.get(row.ledger_id or 0)
            since = row.accepted_at if row.status is RowStatus.ACCEPTED else (entry.sent_at if entry else now)
            delay = min(verify, max(0.0, (since or now) + verify - now))
            work = Work(Kind.CHECK, row.tenant, row.conversation_id, row.ledger_id or 0)
            self.scheduler.after(work, delay)

    def release(self, shards: Collection[int]) -> int:
        """``shards`` were lost: their work not yet started is dropped (the next owner loads their rows
        from the store, as :meth:`load` does); how many pieces of work were dropped."""
        lost = frozenset(shards)
        conversations = {
            conversation
            for conversation, (_, session_id) in self._owner.items()
            # a row with no session carries its conversation's shard (docs/store.md, "Shards")
            if shard_of(session_id if session_id is not None else conversation) in lost
        }
        return self.scheduler.forget(conversations)

    async def run_due(self) -> None:
        """Run the work due now on the clock (the daemon's loop calls it; so do tests, after moving a fake clock)."""
        await self.scheduler.run_due()

    async def serve(self) -> None:
        await self.scheduler.serve()

    async def _handle(self, work: Work) -> None:
        if self.sender is not None:
            await self.sender.handle(work)

    async def _drained(self, tenant: str) -> None:
        if self._episodes.active(tenant) and self.store is not None:
            self._release(tenant, await self.store.depth(tenant))

    def _now(self) -> str:
        return iso_utc(self._clock.time())
