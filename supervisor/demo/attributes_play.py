"""The ``attributes`` scenario's play (seed edge case 2): wrap-up, then a burst of attribute updates.

The Genesys Web Messaging sessions of the fleet (at most 20) are each bound to a conversation (a
post-call middleware's view: the conversation it writes to). When the scenario starts, the calls
wrap up (the agent leaves each conversation) and the middleware writes a burst of 200 updates
(each the call's disposition, rewritten, and one survey answer of its own) through the daemon's
Python API, as ``ctl attributes set``
would: it retries what the queue refuses after ``retryAfterSeconds``. The simulator answers 202 to
every write, slowly, and silently drops 20 of them past the 15th (``silent_drop_attributes``).
Expected: every drop detected by the read-back and repaired or flagged, no acknowledged update lost,
the queue's backpressure visible (some submissions refused, then taken).

429 storms are not part of the demo: after a throttle the endpoint's adaptive pacing (docs/runtime.md, "Admission")
slows every REST call for tens of seconds, longer than a demo; the acceptance test
(tests/integration/test_attributes_burst.py) runs the storms on a fake clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import anyio

from supervisor.attributes import AttributeService, Backpressured, Refused
from supervisor.sim.faults import Fault, FaultKind
from supervisor.sim.genesys import GenesysSimulator
from supervisor.store import UpdateOutcome

__all__ = ["BURST", "MAX_CONVERSATIONS", "AttributesPlay", "attributes_delivered", "attributes_faults"]

BURST = 200
MAX_CONVERSATIONS = 20
#: writes the simulator answers 202 and does not store
DROPS = 20


def attributes_faults(latency_ms: int) -> list[Fault]:
    """The scenario's faults: silent drops past the 15th, and a platform slow to answer the writes
    (so the burst outruns the sender and the queue's backpressure shows)."""
    return [
        # seed edge case 2: "returns 200 OK for the first 15 updates, then silently drops subsequent requests"
        Fault(kind=FaultKind.SILENT_DROP_ATTRIBUTES, params={"after": 15}, count=DROPS),
        Fault(kind=FaultKind.LATENCY, endpoint="PATCH */attributes", params={"latency_ms": latency_ms}),
    ]


@dataclass
class AttributesPlay:
    """The burst and what came of it; :meth:`summary` is the summary's ``attributes`` object."""

    #: session id -> the conversation it writes to
    conversations: dict[str, str]
    submitted: int = 0
    acknowledged: int = 0
    refused: int = 0
    #: submissions refused for good (the session ended: a fail-fast); that session leaves the burst
    rejected: int = 0
    finished: bool = False
    last: dict[tuple[str, str], str] = field(default_factory=dict)

    @classmethod
    def prepare(cls, genesys: GenesysSimulator, session_ids: list[str]) -> AttributesPlay:
        """One conversation per Web Messaging session (at most 20), created on the simulator."""
        chosen = [s for s in session_ids if s.startswith("wm-")][:MAX_CONVERSATIONS]
        return cls({sid: genesys.create_conversation(attributes={"survey": "pending"}).id for sid in chosen})

    async def run(self, service: AttributeService, genesys: GenesysSimulator, *, fast: bool) -> None:
        """Wrap-up, the burst (retrying what backpressure refused), then until every update settled."""
        for conversation in self.conversations.values():
            conv = genesys.state.conversations.get(conversation)
            if conv is not None:
                await genesys.end_conversation(conv.id)
        sessions = list(self.conversations)
        i = 0
        while i < BURST and sessions:
            session = sessions[i % len(sessions)]
            # the call's disposition (rewritten: last write wins) and one survey answer of its own
            answer = i // len(sessions) + 1
            update = {"disposition": f"disposition-{i}", f"surveyQ{answer}": f"answer-{i}"}
            self.submitted += 1
            try:
                await service.submit(session, update)
            except Backpressured as full:
                self.refused += 1
                # a well-behaved client: come back after the hint (scaled down with --fast)
                await anyio.sleep(full.retry_after_s / (10.0 if fast else 1.0))
                continue
            except Refused:
                # the session ended (a fail-fast): its writes cannot be taken; the outcome check says so
                self.rejected += 1
                sessions.remove(session)
                continue
            self.acknowledged += 1
            self.last.update({(self.conversations[session], k): v for k, v in update.items()})
            i += 1
        while True:
            outcomes = await service.outcomes()
            if all(o is not UpdateOutcome.PENDING for o in outcomes.values()):
                break
            await anyio.sleep(0.1)  # polling the service's progress, not waiting for a timer
        self.finished = True

    async def summary(self, service: AttributeService, genesys: GenesysSimulator) -> dict[str, Any]:
        outcomes = list((await service.outcomes()).values())
        counts = {o: outcomes.count(o) for o in UpdateOutcome}
        status = await service.status()
        flagged = {(m["conversationId"], m["key"]) for m in await service.mismatches()}
        wrong = sum(
            1
            for (conversation, key), value in self.last.items()
            if _held(genesys, conversation, key) != value and (conversation, key) not in flagged
        )
        done = counts[UpdateOutcome.VERIFIED] + counts[UpdateOutcome.REPAIRED] + counts[UpdateOutcome.FLAGGED]
        return {
            "conversations": len(self.conversations),
            "submitted": self.submitted,
            "acknowledged": self.acknowledged,
            "refused": self.refused,
            "rejected": self.rejected,
            "sent": status.get("rows", {}).get("sends", 0),
            "verified": counts[UpdateOutcome.VERIFIED],
            "repaired": counts[UpdateOutcome.REPAIRED],
            "flagged": counts[UpdateOutcome.FLAGGED],
            "lost": self.acknowledged - done,
            "silentlyDropped": sum(
                genesys.recorder.attributes_dropped(c) for c in self.conversations.values()
            ),
            "notAsSubmittedNorFlagged": wrong,
            "openMismatches": len(flagged),
        }


def _held(genesys: GenesysSimulator, conversation: str, key: str) -> str | None:
    conv = genesys.state.conversations.get(conversation)
    return None if conv is None else conv.customer().attributes.get(key)


def attributes_delivered(summary: dict[str, Any]) -> str | None:
    """The scenario's expected outcome over ``summary["attributes"]``."""
    a = summary.get("attributes")
    if a is None:
        return "no attribute summary"
    if a["lost"]:
        return f"{a['lost']} acknowledged update(s) neither verified, repaired nor flagged"
    if a.get("rejected"):
        return f"{a['rejected']} submission(s) refused for good: a session ended"
    if a["notAsSubmittedNorFlagged"]:
        return f"{a['notAsSubmittedNorFlagged']} attribute(s) differ from the last value submitted and are not flagged"
    if a["silentlyDropped"] < 1:
        return "the simulator dropped nothing: the scenario did not exercise the read-back"
    if a["repaired"] + a["flagged"] < 1:
        return "no silent drop was detected (nothing repaired or flagged)"
    if a["refused"] < 1:
        return "the queue's backpressure was never visible (nothing refused)"
    return None
