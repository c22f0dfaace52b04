"""The attribute service's pure decisions: verification verdicts, backpressure episodes, the scheduler's clock.

Seed edge case 2: verification compares hashes and re-sends only when the server still holds the
value from before our write (never clobbering a newer one); a full queue starts one episode and
ends at the resume mark; what is due is a decision on the injected clock, never a sleep.
"""

from __future__ import annotations

import pytest

from supervisor.attributes.backpressure import Episodes
from supervisor.attributes.model import Settings, check_attributes
from supervisor.attributes.scheduler import Kind, Scheduler, Work
from supervisor.attributes.verify import judge
from supervisor.clock import FakeClock
from supervisor.store import OutboxRow, Outcome, RowStatus, value_hash

SETTINGS = Settings(repair_budget=1, max_sends=3)


def row(
    attribute: str,
    value: str,
    before: str | None,
    *,
    status: RowStatus = RowStatus.ACCEPTED,
    repairs: int = 0,
    sends: int = 1,
    sensitive: bool = False,
    row_id: int = 1,
) -> OutboxRow:
    return OutboxRow(
        id=row_id,
        tenant="t",
        session_id="wm-0",
        conversation_id="c",
        attribute=attribute,
        value=value,
        sensitive=sensitive,
        status=status,
        created_at=0.0,
        sends=sends,
        repairs=repairs,
        before_hash=value_hash(attribute, before),
        ledger_id=7,
    )


def test_every_attribute_found_is_verified_and_a_repaired_one_says_so() -> None:
    rows = [row("a", "1", None, row_id=1), row("b", "2", "0", repairs=1, row_id=2)]
    verdict = judge(rows, {"a": "1", "b": "2", "other": "x"}, answered=True, settings=SETTINGS, now=5.0)
    assert verdict.outcome is Outcome.OK and not verdict.resend and not verdict.mismatches
    assert [(c.row_id, c.status) for c in verdict.changes] == [
        (1, RowStatus.VERIFIED),
        (2, RowStatus.REPAIRED),
    ]


def test_a_silent_drop_is_resent_while_the_server_holds_the_value_from_before_our_write() -> None:
    dropped = row("a", "1", "old")
    verdict = judge([dropped], {"a": "old"}, answered=True, settings=SETTINGS, now=5.0)
    assert verdict.resend and verdict.outcome is Outcome.PARTIAL
    (change,) = verdict.changes
    assert (change.status, change.repair) == (RowStatus.PENDING, True)
    # the repair budget spent: flagged, not sent a third time
    spent = judge([row("a", "1", "old", repairs=1)], {"a": "old"}, answered=True, settings=SETTINGS, now=5.0)
    assert not spent.resend and spent.flagged == {"a": "still-wrong"}


def test_a_newer_value_written_by_someone_else_is_flagged_never_clobbered() -> None:
    verdict = judge(
        [row("a", "1", "old", row_id=1), row("s", "secret", None, sensitive=True, row_id=2)],
        {"a": "agent wrote this", "s": "another secret"},
        answered=True,
        settings=SETTINGS,
        now=5.0,
    )
    assert not verdict.resend
    assert verdict.flagged == {"a": "newer-value", "s": "newer-value"}
    kept = {m.row_id: m.server_value for m in verdict.mismatches}
    assert kept == {1: "agent wrote this", 2: None}  # a sensitive value is never kept


def test_an_unanswered_send_is_read_back_before_anything_is_sent_again() -> None:
    # the send never landed (the server still holds what it held): it queues again, not as a repair
    lost = judge(
        [row("a", "1", "old", status=RowStatus.SENDING)],
        {"a": "old"},
        answered=False,
        settings=SETTINGS,
        now=1.0,
    )
    assert lost.outcome is Outcome.FAILED and lost.resend
    assert [(c.status, c.repair) for c in lost.changes] == [(RowStatus.PENDING, False)]
    # it did land: verified, nothing re-sent
    landed = judge(
        [row("a", "1", "old", status=RowStatus.SENDING)],
        {"a": "1"},
        answered=False,
        settings=SETTINGS,
        now=1.0,
    )
    assert landed.outcome is Outcome.OK and not landed.resend
    # out of sends: flagged
    spent = judge(
        [row("a", "1", "old", status=RowStatus.SENDING, sends=3)],
        {"a": "old"},
        answered=False,
        settings=SETTINGS,
        now=1.0,
    )
    assert spent.flagged == {"a": "still-wrong"}


def test_one_backpressure_episode_per_fill_ending_at_the_resume_mark() -> None:
    episodes = Episodes(limit=50, resume_at=25)
    started = episodes.refuse("t", 50, paused_for_s=0.0)
    assert started is not None and started.depth == 50
    assert episodes.refuse("t", 50, 0.0) is None and episodes.refuse("t", 49, 0.0) is None
    assert episodes.drained("t", 26) is None and episodes.active("t")
    assert episodes.drained("t", 25) == 3
    assert not episodes.active("t")
    assert episodes.refuse("t", 50, 0.0) is not None  # a new episode, a new event


def test_the_retry_hint_covers_the_platform_pause_and_stays_bounded() -> None:
    episodes = Episodes(limit=50, resume_at=25)
    assert episodes.retry_after(26, paused_for_s=12.5) == 12.5
    assert 1.0 <= episodes.retry_after(26, 0.0) <= 60.0
    assert episodes.retry_after(100_000, 0.0) == 60.0


async def _nothing(work: Work) -> None:
    del work


@pytest.mark.anyio
async def test_work_is_due_on_the_clock_and_a_tenant_pause_holds_it() -> None:
    clock = FakeClock(start=100.0)
    ran: list[tuple[float, Work]] = []

    async def record(work: Work) -> None:
        ran.append((clock.monotonic(), work))

    # the tenant's endpoint holds it by a Retry-After until ``held_until`` (none yet)
    held_until = {"t": 0.0}
    scheduler = Scheduler(
        clock, record, concurrency=2, held=lambda tenant: held_until[tenant] - clock.monotonic()
    )
    verify = Work(Kind.CHECK, "t", "c1", 7)
    scheduler.after(verify, 3.0)
    await scheduler.run_due()
    assert ran == []
    clock.advance(2.999)
    await scheduler.run_due()
    assert ran == []
    clock.advance(0.001)
    await scheduler.run_due()
    assert ran == [(103.0, verify)]
    # Retry-After pauses the whole tenant, whatever its work was due at
    send = Work(Kind.SEND, "t", "c2")
    held_until["t"] = clock.monotonic() + 5.0
    scheduler.after(send, 0.0)
    assert scheduler.next_due() == 108.0
    clock.advance(4.0)
    await scheduler.run_due()
    assert len(ran) == 1
    clock.advance(1.0)
    await scheduler.run_due()
    assert ran[-1] == (108.0, send)


def test_attributes_are_validated_with_the_key_named() -> None:
    assert check_attributes({"a": "1", "b": ""}) == {"a": "1", "b": ""}
    for bad, why in (
        ({}, "one or more"),
        ({"a": 1}, "attributes.a"),
        ({"": "x"}, "1 to 200"),
        ("x", "object"),
    ):
        with pytest.raises(ValueError, match=why):
            check_attributes(bad)


@pytest.mark.anyio
async def test_the_scheduler_forgets_the_work_of_conversations_whose_shard_was_lost() -> None:
    """A lost shard's work not yet started is dropped (its next owner loads the rows from the store);
    the other conversations' work stays due."""
    clock = FakeClock(start=100.0)
    ran: list[Work] = []

    async def record(work: Work) -> None:
        ran.append(work)

    scheduler = Scheduler(clock, record)
    kept, lost = Work(Kind.SEND, "t", "c-kept"), Work(Kind.CHECK, "t", "c-lost", 3)
    scheduler.after(kept, 0.0)
    scheduler.after(lost, 0.0)
    scheduler.after(Work(Kind.SEND, "t", "c-lost"), 1.0)
    assert scheduler.forget({"c-lost"}) == 2
    assert scheduler.forget({"c-lost", "c-never"}) == 0
    clock.advance(1.0)
    await scheduler.run_due()
    assert ran == [kept]
