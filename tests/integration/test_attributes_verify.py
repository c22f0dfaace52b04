"""Attribute updates against the Genesys simulator: verification, repair, flags, unknown outcomes.

Seed edge case 2: "Validate attribute persistence by polling the conversation endpoint after a
3-second delay. Compare local and server attribute hashes. Flag mismatches for manual
reconciliation." The simulator and the daemon share a fake clock; the test moves it, so whether the
read-back ran is a clock decision (nothing sleeps for the 3 s).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from supervisor.clock import FakeClock
from supervisor.sim.faults import Fault, FaultKind
from supervisor.sim.genesys import GenesysSimConfig, GenesysSimulator
from supervisor.store import Outcome, Resolution, UpdateOutcome
from tests.harness.config import attributes_config
from tests.harness.waits import wait_until
from tests.integration.attributes_harness import customer_attributes, durable_daemon

pytestmark = [
    pytest.mark.integration,
    pytest.mark.anyio,
    pytest.mark.genesys_sim(GenesysSimConfig(rate_limit=1_000_000), seed=11, fake_clock=True),
]

CONVERSATION = "/api/v2/conversations/{conversationId}"


def reads(sim: GenesysSimulator) -> int:
    return sim.recorder.request_count(method="GET", endpoint=CONVERSATION)


async def test_verification_reads_the_conversation_back_three_seconds_after_acceptance(
    genesys_sim: GenesysSimulator, clock: FakeClock, tmp_path: Path
) -> None:
    conv = genesys_sim.create_conversation()
    text = attributes_config(genesys_sim.urls, [conv.id], store=tmp_path / "store.sqlite3")
    async with durable_daemon(text, tmp_path, clock=clock) as h:
        await h.wait_active(1)
        answer = await h.service.submit("wm-0", {"survey": "yes", "disposition": "resolved"})
        assert answer.conversation_id == conv.id and answer.queue_depth == 2
        await h.service.run_due()
        assert customer_attributes(genesys_sim, conv.id) == {"survey": "yes", "disposition": "resolved"}
        before = reads(genesys_sim)  # the read right before the write (what the server held)
        clock.advance(2.999)
        await h.service.run_due()
        assert reads(genesys_sim) == before
        assert (await h.service.outcomes())[answer.update_id] is UpdateOutcome.PENDING
        clock.advance(0.001)
        await h.service.run_due()
        assert reads(genesys_sim) == before + 1
        assert (await h.service.outcomes())[answer.update_id] is UpdateOutcome.VERIFIED
        ledger = list((await h.durable.store.ledger()).values())  # type: ignore[union-attr]
        assert [(e.outcome, e.attempts) for e in ledger] == [(Outcome.OK, 1)]
        assert genesys_sim.recorder.idempotency_keys() == {ledger[0].idempotency_key: 1}


async def test_a_silently_dropped_update_is_detected_and_repaired(
    genesys_sim: GenesysSimulator, clock: FakeClock, tmp_path: Path
) -> None:
    conv = genesys_sim.create_conversation(attributes={"survey": "unset"})
    text = attributes_config(genesys_sim.urls, [conv.id], store=tmp_path / "store.sqlite3")
    async with durable_daemon(text, tmp_path, clock=clock) as h:
        await h.wait_active(1)
        # seed edge case 2: answered 202, not stored
        genesys_sim.faults.inject(Fault(kind=FaultKind.SILENT_DROP_ATTRIBUTES, params={"after": 0}, count=1))
        answer = await h.service.submit("wm-0", {"survey": "yes"})
        outcomes = await h.settle()
        assert outcomes == {answer.update_id: UpdateOutcome.REPAIRED}
        assert customer_attributes(genesys_sim, conv.id) == {"survey": "yes"}
        assert genesys_sim.recorder.attributes_dropped(conv.id) == 1
        ledger = list((await h.durable.store.ledger()).values())  # type: ignore[union-attr]
        assert [e.outcome for e in ledger] == [Outcome.PARTIAL, Outcome.OK]
        assert not h.recorded.named("ATTRIBUTE_MISMATCH")


async def test_a_newer_value_is_never_clobbered_it_is_flagged_and_resolved_by_hand(
    genesys_sim: GenesysSimulator, clock: FakeClock, tmp_path: Path
) -> None:
    conv = genesys_sim.create_conversation(attributes={"survey": "unset", "ssn": "000"})
    text = attributes_config(
        genesys_sim.urls, [conv.id], store=tmp_path / "store.sqlite3", sensitive=("ssn",)
    )
    async with durable_daemon(text, tmp_path, clock=clock) as h:
        await h.wait_active(1)
        genesys_sim.faults.inject(Fault(kind=FaultKind.SILENT_DROP_ATTRIBUTES, params={"after": 0}, count=1))
        answer = await h.service.submit("wm-0", {"survey": "yes", "ssn": "123-45-6789"})
        await h.service.run_due()
        # before the read-back, an agent (or a flow) writes both attributes
        conv.customer().attributes.update({"survey": "agent-said-no", "ssn": "987-65-4321"})
        assert (await h.settle())[answer.update_id] is UpdateOutcome.FLAGGED
        assert customer_attributes(genesys_sim, conv.id) == {"survey": "agent-said-no", "ssn": "987-65-4321"}
        (event,) = h.recorded.named("ATTRIBUTE_MISMATCH")
        assert sorted(event["keys"]) == ["ssn", "survey"] and event["conversationId"] == conv.id
        assert event["values"] == {"survey": {"expected": "yes", "server": "agent-said-no"}}
        everything = json.dumps([e for _, _, e in h.recorded.events])
        assert "123-45-6789" not in everything and "987-65-4321" not in everything
        listed = {m["key"]: m for m in await h.service.mismatches()}
        assert listed["ssn"]["expected"] == listed["ssn"]["server"] == "<sensitive>"
        assert (listed["survey"]["reason"], listed["survey"]["server"]) == ("newer-value", "agent-said-no")
        # someone decides: keep the agent's survey answer, send our ssn again
        await h.service.resolve(listed["survey"]["id"], Resolution.ACCEPT_SERVER)
        await h.service.resolve(listed["ssn"]["id"], Resolution.RESEND)
        await h.settle()
        assert customer_attributes(genesys_sim, conv.id) == {"survey": "agent-said-no", "ssn": "123-45-6789"}
        assert await h.service.mismatches() == []
        assert [e["resolution"] for e in h.recorded.named("ATTRIBUTE_MISMATCH_RESOLVED")] == [
            "accept-server",
            "resend",
        ]


async def test_an_unanswered_send_is_read_back_never_blindly_resent(
    genesys_sim: GenesysSimulator, clock: FakeClock, tmp_path: Path
) -> None:
    """docs/robustness.md, "Fault matrix", row 3: unknown in the ledger, read back before any resend, no key applied twice.

    The request is answered only after the daemon stopped waiting for it (a latency past
    ``daemon.requestTimeout``). Whether it then lands depends on the platform (here: whether the
    simulator still reads its body from the abandoned connection), exactly what the daemon cannot
    know. It sends nothing until the read-back: found, it is verified and never sent again; not
    found, it goes again under a new idempotency key.
    """
    conv = genesys_sim.create_conversation(attributes={"survey": "unset"})
    text = attributes_config(
        genesys_sim.urls, [conv.id], store=tmp_path / "store.sqlite3", request_timeout=0.3
    )
    async with durable_daemon(text, tmp_path, clock=clock) as h:
        await h.wait_active(1)
        genesys_sim.faults.inject(
            Fault(kind=FaultKind.LATENCY, endpoint="PATCH */attributes", count=1, params={"latency_ms": 1000})
        )
        answer = await h.service.submit("wm-0", {"survey": "yes"})
        await h.service.run_due()
        store = h.durable.store
        assert store is not None
        (first,) = (await store.ledger()).values()
        assert (first.outcome, first.attempts) == (Outcome.UNKNOWN, 1)
        # nothing goes out again before the read-back
        patches = genesys_sim.recorder.request_count(method="PATCH")
        await h.service.run_due()
        assert genesys_sim.recorder.request_count(method="PATCH") == patches
        # the abandoned request is settled on the platform's side: stored, or lost with its connection
        await wait_until(
            lambda: (
                first.idempotency_key in genesys_sim.recorder.idempotency_keys()
                # lost with its connection: the simulator records a client gone mid-body as 499
                or genesys_sim.recorder.request_count(method="PATCH", status=499) >= 1
            ),
            10,
        )
        landed = first.idempotency_key in genesys_sim.recorder.idempotency_keys()
        assert (await h.settle())[answer.update_id] is UpdateOutcome.VERIFIED
        assert customer_attributes(genesys_sim, conv.id) == {"survey": "yes"}
        entries = list((await store.ledger()).values())
        keys = genesys_sim.recorder.idempotency_keys()
        if landed:
            assert [e.outcome for e in entries] == [Outcome.OK] and keys == {first.idempotency_key: 1}
        else:
            assert [e.outcome for e in entries] == [Outcome.FAILED, Outcome.OK]
            assert keys == {entries[1].idempotency_key: 1}


async def test_refusals_name_the_reason(
    genesys_sim: GenesysSimulator, clock: FakeClock, tmp_path: Path
) -> None:
    conv = genesys_sim.create_conversation()
    text = attributes_config(genesys_sim.urls, [conv.id], store=tmp_path / "store.sqlite3")
    text += '[[sessions]]\nid = "wm-bare"\nplatform = "genesys"\nkind = "webmessaging"\n'
    async with durable_daemon(text, tmp_path, clock=clock) as h:
        await h.wait_active(2)
        from supervisor.attributes import Refused

        for session, attributes, name in (
            ("wm-9", {"a": "1"}, "NoSuchSession"),
            ("wm-bare", {"a": "1"}, "NoConversation"),
            ("wm-0", {}, "InvalidParameter"),
        ):
            with pytest.raises(Refused) as refused:
                await h.service.submit(session, attributes)
            assert refused.value.fault.short == name
        await h.supervisor.stop("wm-0")
        await wait_until(lambda: h.supervisor.runners["wm-0"].core.terminated)
        with pytest.raises(Refused) as stopped:
            await h.service.submit("wm-0", {"a": "1"})
        assert stopped.value.fault.short == "SessionTerminated" and "ctl start" in stopped.value.problem


async def test_a_read_back_without_the_conversations_anchors_decides_nothing(
    genesys_sim: GenesysSimulator, clock: FakeClock, tmp_path: Path
) -> None:
    """Seed section 3 on the read-back: a 200 without ``participants`` (taxonomy v2's
    ``genesys.rest.Conversation`` requires them, as PY269's model does) is INCOMPLETE_RESPONSE. Judged
    as it came, every attribute would look silently dropped and be sent again; it is not judged:
    the taxonomy makes the code fail-fast, so the update is flagged for manual reconciliation."""
    conv = genesys_sim.create_conversation(attributes={"survey": "unset"})
    text = attributes_config(genesys_sim.urls, [conv.id], store=tmp_path / "store.sqlite3")
    async with durable_daemon(text, tmp_path, clock=clock) as h:
        await h.wait_active(1)
        answer = await h.service.submit("wm-0", {"survey": "yes"})
        await h.service.run_due()
        assert genesys_sim.recorder.request_count(method="PATCH") == 1
        partial = genesys_sim.faults.inject(
            Fault(
                kind=FaultKind.MISSING_FIELDS,
                endpoint="GET /api/v2/conversations/*",
                count=1,
                params={"fields": ["participants"]},
            )
        )
        outcomes = await h.settle()
        assert partial.id is not None and genesys_sim.recorder.fault_hits(partial.id) == 1
        assert genesys_sim.recorder.request_count(method="PATCH") == 1  # nothing sent again on a partial read
        # not verified, not repaired: flagged for a person, with the taxonomy's code as the reason
        assert outcomes[answer.update_id] is UpdateOutcome.FLAGGED
        (flag,) = await h.service.mismatches()
        assert (flag["key"], flag["reason"], flag["server"]) == (
            "survey",
            "failed: INCOMPLETE_RESPONSE",
            None,
        )
        ledger = list((await h.durable.store.ledger()).values())  # type: ignore[union-attr]
        assert [(e.outcome, e.error_code) for e in ledger] == [(Outcome.FAILED, "INCOMPLETE_RESPONSE")]
        assert customer_attributes(genesys_sim, conv.id) == {"survey": "yes"}  # what the write did stands


async def test_an_update_by_conversation_id_with_no_session_is_repaired_and_survives_a_restart(
    genesys_sim: GenesysSimulator, clock: FakeClock, tmp_path: Path
) -> None:
    """The Python API by conversation id, no session configured at all: an update acknowledged and
    not yet sent when the daemon stops is sent by the next run (its row has no session), and a
    silently dropped write is detected and repaired as a session's is."""
    conv = genesys_sim.create_conversation(attributes={"survey": "unset"})
    text = attributes_config(genesys_sim.urls, [], store=tmp_path / "store.sqlite3")
    async with durable_daemon(text, tmp_path, clock=clock) as h:
        answer = await h.service.submit_conversation(conv.id, {"survey": "yes"})
        assert (answer.session_id, answer.conversation_id) == (None, conv.id)
        assert answer.as_wire()["sessionId"] is None
    assert customer_attributes(genesys_sim, conv.id) == {"survey": "unset"}  # not sent yet
    async with durable_daemon(text, tmp_path, clock=clock) as h:
        genesys_sim.faults.inject(Fault(kind=FaultKind.SILENT_DROP_ATTRIBUTES, params={"after": 0}, count=1))
        outcomes = await h.settle()
        assert outcomes == {answer.update_id: UpdateOutcome.REPAIRED}
        assert customer_attributes(genesys_sim, conv.id) == {"survey": "yes"}
        assert genesys_sim.recorder.attributes_dropped(conv.id) == 1
        assert not h.recorded.named("ATTRIBUTE_MISMATCH")
