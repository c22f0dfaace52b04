"""The attribute service's work: send a conversation's queued writes, check a send (seed edge case 2).

1. **send**: read the conversation (its customer participant, and what its attributes hold right
   before our write), claim the queued writes into one ledger entry (written before the request
   leaves), PATCH them through the one retry executor. 2xx: accepted, verification due
   ``verifyAfter`` seconds later. Throttled: the tenant waits Retry-After and they queue again.
   No answer: unknown, read back before anything is sent again. Refused for good: flagged.
2. **check**: read the conversation back and judge each attribute
   (:func:`~supervisor.attributes.verify.judge`): verified, re-sent (only when the server still
   holds the value from before our write), or flagged: ``ATTRIBUTE_MISMATCH`` and a row for
   ``ctl mismatches`` / ``ctl resolve``.

Each decision is committed to the store before it is acted on, so a ``kill -9`` at any moment
leaves a state the service resumes from (:meth:`AttributeService.load`).
"""

from __future__ import annotations

import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence

from supervisor.attempts import Gate
from supervisor.attributes.events import AttributeMismatch
from supervisor.attributes.model import Settings
from supervisor.attributes.platform import Conversation, GenesysAttributes, OutcomeUnknown, Target
from supervisor.attributes.scheduler import Kind, Scheduler, Work
from supervisor.attributes.verify import judge
from supervisor.bus import EventBus
from supervisor.clock import Clock, iso_utc
from supervisor.errors import CircuitOpenError, OperationError, StoreError
from supervisor.events import Correlation
from supervisor.store import (
    Claim,
    LedgerChange,
    LedgerEntry,
    NewMismatch,
    OutboxRow,
    Outcome,
    RowChange,
    RowStatus,
    Store,
    value_hash,
)
from supervisor.taxonomy import SdkErrorEvent

__all__ = ["ENDPOINT", "Sender"]

ENDPOINT = "PATCH /api/v2/conversations/{conversationId}/participants/{participantId}/attributes"
#: where a queued write goes, from its tenant, session and conversation (None: not configured now)
TargetOf = Callable[[str, str, str], "Target | None"]


def _event(failure: OperationError) -> SdkErrorEvent:
    event = failure.event
    if not isinstance(event, SdkErrorEvent):  # pragma: no cover - OperationError always carries one
        raise TypeError(f"OperationError without an SdkErrorEvent: {event!r}")
    return event


class Sender:
    """Runs the scheduler's work for the attribute service (see the module docstring)."""

    def __init__(
        self,
        store: Store,
        settings: Settings,
        scheduler: Scheduler,
        *,
        target_of: TargetOf,
        failed: Callable[[str, SdkErrorEvent], None],
        drained: Callable[[str], Awaitable[None]],
        measured: Callable[[float], None],
        bus: EventBus,
        clock: Clock,
    ) -> None:
        self.store = store
        self.settings = settings
        self._target_of = target_of
        self._failed = failed
        self._drained = drained
        self._measured = measured
        self._bus = bus
        self._clock = clock
        self._api = GenesysAttributes()
        self.scheduler = scheduler
        #: conversation -> (tenant, session) whose writes it carries
        self.owner: dict[str, tuple[str, str]] = {}
        #: conversation -> its last read, while no write of ours was accepted since: the next send's
        #: "before" without another read (a verification's read-back is the next send's pre-read)
        self._reads: dict[str, Conversation] = {}
        self._answered: deque[float] = deque(maxlen=256)
        #: tenant -> the endpoint its writes go through (whose Retry-After hold is the tenant's)
        self._gates: dict[str, Gate] = {}

    async def handle(self, work: Work) -> None:
        try:
            if work.kind is Kind.SEND:
                await self._send(work)
            else:
                await self._check(work)
        except StoreError:
            # nothing was decided that the store did not keep: try again once it may persist
            self.scheduler.after(work, max(self.settings.failure_backoff_s, 5.0))

    def held_for(self, tenant: str) -> float:
        """Seconds the tenant's writes wait for a Retry-After: its endpoint's hold (the one record
        of it, whichever call met it), not a copy kept here."""
        gate = self._gates.get(tenant)
        if gate is None:
            found = next(((sid, cid) for cid, (t, sid) in self.owner.items() if t == tenant), None)
            target = None if found is None else self._target_of(tenant, found[0], found[1])
            if target is None:
                return 0.0
            gate = self._gates[tenant] = self._api.gate(target)
        return gate.held_for()

    def _target(self, work: Work) -> tuple[str, Target] | None:
        owner = self.owner.get(work.conversation_id)
        if owner is None:
            return None
        target = self._target_of(work.tenant, owner[1], work.conversation_id)
        if target is None:
            self.scheduler.after(work, 30.0)  # the platform is not configured (a reload may bring it back)
            return None
        return owner[1], target

    async def _send(self, work: Work) -> None:
        store = self.store
        found = self._target(work)
        if found is None:
            return
        session_id, target = found
        cid = work.conversation_id
        conv = self._reads.pop(cid, None)
        if conv is None:
            try:
                conv = await self._api.read(target, cid)
            except CircuitOpenError as refused:
                self.scheduler.after(work, refused.retry_in_s)
                return
            except OperationError as failure:
                await self._read_failed(work, session_id, _event(failure))
                return
        # what the server holds right before our write: re-sending is safe only while it still does
        before = {k: value_hash(k, v) for k, v in conv.attributes.items()}
        claim = await store.claim(
            cid,
            before,
            idempotency_key=str(uuid.uuid4()),
            participant_id=conv.participant_id,
            endpoint=ENDPOINT,
            sent_at=self._clock.time(),
            limit=self.settings.batch_limit,
            attempts=0 if conv.participant_id is None else 1,
        )
        claim = self._due_later(work, claim)
        if claim is None or claim.entry is None:
            return
        try:
            await self._carry(work, session_id, target, conv.participant_id, claim, claim.entry)
        except StoreError:
            # the send's fate is not recorded: read the conversation back before anything is sent again
            self.scheduler.after(
                Work(Kind.CHECK, work.tenant, cid, claim.entry.request_id), self.settings.verify_after_s
            )

    def _due_later(self, work: Work, claim: Claim | None) -> Claim | None:
        """Keep the conversation's writes held back by a Retry-After scheduled for when they are due."""
        if claim is not None and claim.later is not None:
            self.scheduler.after(
                Work(Kind.SEND, work.tenant, work.conversation_id), claim.later - self._clock.time()
            )
        return claim

    async def _carry(
        self,
        work: Work,
        session_id: str,
        target: Target,
        participant_id: str | None,
        claim: Claim,
        entry: LedgerEntry,
    ) -> None:
        store = self.store
        request_id = entry.request_id
        check = Work(Kind.CHECK, work.tenant, work.conversation_id, request_id)
        if participant_id is None:
            await self._settle_failed(claim, session_id, None, "failed: NO_PARTICIPANT")
            return
        payload = {row.attribute: row.value or "" for row in claim.rows}
        try:
            status = await self._api.send(
                target,
                work.conversation_id,
                participant_id,
                payload,
                idempotency_key=entry.idempotency_key,
                count_attempt=lambda: store.count_attempt(request_id),
            )
        except (OutcomeUnknown, StoreError):
            # it may have been applied: read back before anything is sent again
            self._reads.pop(work.conversation_id, None)
            self.scheduler.after(check, self.settings.verify_after_s)
            return
        except CircuitOpenError as refused:
            # nothing left: the circuit refused the request (open, or isolated by an operator), so
            # it is no send, and never one that flags the writes (docs/runtime.md, "Manual circuit control")
            await self._requeue(claim, refused.retry_in_s, "CIRCUIT_OPEN", sent=False)
            return
        except OperationError as failure:
            await self._send_failed(claim, session_id, _event(failure))
            return
        # a write of ours landed (or may have): what was read before it is stale now
        self._reads.pop(work.conversation_id, None)
        now = self._clock.time()
        accepted = [RowChange(r.id, RowStatus.ACCEPTED, accepted_at=now) for r in claim.rows]
        await store.record(accepted, LedgerChange(request_id, Outcome.OK, answered_at=now, status=status))
        self._left_queue(len(claim.rows))
        # seed edge case 2: "polling the conversation endpoint after a 3-second delay"
        self.scheduler.after(check, self.settings.verify_after_s)
        await self._drained(work.tenant)

    async def _read_failed(self, work: Work, session_id: str, event: SdkErrorEvent) -> None:
        if event.fail_fast:
            self._failed(session_id, event)
        if event.retryable:
            self.scheduler.after(work, self._backoff(event))
            return
        # the conversation cannot be read for good (404: it is gone): its queued writes are flagged
        store = self.store
        claim = await store.claim(
            work.conversation_id,
            {},
            idempotency_key=str(uuid.uuid4()),
            participant_id=None,
            endpoint=ENDPOINT,
            sent_at=self._clock.time(),
            limit=self.settings.batch_limit,
            attempts=0,
        )
        claim = self._due_later(work, claim)
        if claim is not None and claim.entry is not None:
            await self._settle_failed(claim, session_id, event, f"failed: {event.code}")

    def _backoff(self, event: SdkErrorEvent) -> float:
        retry_after = 0.0 if event.retry_after_ms is None else event.retry_after_ms / 1000.0
        return max(retry_after, self.settings.failure_backoff_s)

    async def _send_failed(self, claim: Claim, session_id: str, event: SdkErrorEvent) -> None:
        if event.fail_fast:
            self._failed(session_id, event)
        if not event.retryable:
            await self._settle_failed(claim, session_id, event, f"failed: {event.code}")
            return
        await self._requeue(claim, self._backoff(event), event.code, event)

    async def _requeue(
        self, claim: Claim, delay: float, code: str, event: SdkErrorEvent | None = None, *, sent: bool = True
    ) -> None:
        """Queue the writes again, not before ``delay``; a write out of sends is flagged instead.
        ``sent`` False: the request never left (a circuit refused it): the send the claim counted is
        taken back, and nothing is flagged for it."""
        store = self.store
        now = self._clock.time()
        spent = [r for r in claim.rows if r.sends >= self.settings.max_sends] if sent else []
        again = [
            RowChange(r.id, RowStatus.PENDING, not_before=now + delay, error=code, unsent=not sent)
            for r in claim.rows
            if r not in spent
        ]
        flagged = [RowChange(r.id, RowStatus.FLAGGED, error=code) for r in spent]
        found = [NewMismatch(r.id, f"failed: {code}", None, now) for r in spent]
        status = event.raw_status if event is not None else None
        assert claim.entry is not None  # a claim that carries rows has its entry
        change = LedgerChange(
            claim.entry.request_id, Outcome.FAILED, answered_at=now, status=status, error_code=code
        )
        ids = await store.record([*again, *flagged], change, found)
        self._publish_mismatch(claim.rows[0], spent, ids, {r.attribute: f"failed: {code}" for r in spent}, {})
        first = claim.rows[0]
        self.scheduler.after(Work(Kind.SEND, first.tenant, first.conversation_id), delay)
        if spent:
            await self._drained(first.tenant)

    async def _settle_failed(
        self, claim: Claim, session_id: str, event: SdkErrorEvent | None, reason: str
    ) -> None:
        store = self.store
        now = self._clock.time()
        rows = claim.rows
        assert claim.entry is not None  # a claim that carries rows has its entry
        change = LedgerChange(
            claim.entry.request_id,
            Outcome.FAILED,
            answered_at=now,
            status=None if event is None else event.raw_status,
            error_code=reason.removeprefix("failed: "),
        )
        found = [NewMismatch(r.id, reason, None, now) for r in rows]
        ids = await store.record(
            [RowChange(r.id, RowStatus.FLAGGED, error=reason) for r in rows], change, found
        )
        self._publish_mismatch(rows[0], list(rows), ids, {r.attribute: reason for r in rows}, {})
        self._left_queue(len(rows))
        await self._drained(rows[0].tenant)

    async def _check(self, work: Work) -> None:
        """Verify an accepted send, or read back one whose answer never came."""
        store = self.store
        rows = [
            r
            for r in await store.live_rows()
            if r.ledger_id == work.request_id and r.status in (RowStatus.SENDING, RowStatus.ACCEPTED)
        ]
        if not rows:
            return  # superseded by a newer write of ours, or settled already
        self.owner.setdefault(work.conversation_id, (rows[0].tenant, rows[0].session_id))
        found = self._target(work)
        if found is None:
            return
        session_id, target = found
        try:
            conv = await self._api.read(target, work.conversation_id)
            # a read of the server as it is: the next send's "before" (until a write of ours lands)
            self._reads[work.conversation_id] = conv
        except CircuitOpenError as refused:
            self.scheduler.after(work, refused.retry_in_s)
            return
        except OperationError as failure:
            event = _event(failure)
            if event.retryable:
                self.scheduler.after(work, self._backoff(event))
            else:
                claim = Claim((await store.ledger([work.request_id]))[work.request_id], tuple(rows))
                await self._settle_failed(claim, session_id, event, f"failed: {event.code}")
            return
        answered = rows[0].status is RowStatus.ACCEPTED
        now = self._clock.time()
        verdict = judge(rows, conv.attributes, answered=answered, settings=self.settings, now=now)
        change = LedgerChange(work.request_id, verdict.outcome, answered_at=None if answered else now)
        ids = await store.record(verdict.changes, change, verdict.mismatches)
        flagged_rows = [r for r in rows if r.attribute in verdict.flagged]
        shown_values = {
            r.attribute: {"expected": r.value, "server": conv.attributes.get(r.attribute)}
            for r in flagged_rows
            if not r.sensitive and r.attribute not in self.settings.sensitive
        }
        self._publish_mismatch(rows[0], flagged_rows, ids, verdict.flagged, shown_values)
        if not answered:
            self._left_queue(len(rows))
        if verdict.resend:
            self.scheduler.after(Work(Kind.SEND, work.tenant, work.conversation_id), 0.0)
        await self._drained(work.tenant)

    def _publish_mismatch(
        self,
        first: OutboxRow,
        flagged: Sequence[OutboxRow],
        ids: Sequence[int],
        reasons: Mapping[str, str],
        values: Mapping[str, Mapping[str, str | None]],
    ) -> None:
        if not flagged:
            return
        keys = tuple(r.attribute for r in flagged)
        self._bus.publish(
            AttributeMismatch(
                first.session_id,
                first.conversation_id,
                keys,
                tuple(ids),
                {k: reasons.get(k, "") for k in keys},
                self._now(),
                values,
            ),
            Correlation(first.session_id, conversation_id=first.conversation_id),
        )

    def _left_queue(self, n: int) -> None:
        now = self._clock.monotonic()
        for _ in range(n):
            self._answered.append(now)
        window = [t for t in self._answered if now - t <= 10.0]
        if window:
            self._measured(len(window) / 10.0)

    def _now(self) -> str:
        return iso_utc(self._clock.time())
