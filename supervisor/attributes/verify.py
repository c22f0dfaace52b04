"""Verification: what the read-back of a conversation says about a send. Pure.

Seed edge case 2: "Validate attribute persistence by polling the conversation endpoint after a
3-second delay. Compare local and server attribute hashes. Flag mismatches for manual
reconciliation." For each attribute a send carried, the server now holds:

* **our value**: verified (repaired, when it took a re-send);
* **the value it held right before our send** (its hash was kept when the send was claimed): our
  write did not land (a 202 silently dropped, or a send whose answer never came). Nobody wrote
  since, so sending again cannot clobber anyone: re-send, within the repair budget; past it, flag;
* **anything else**: someone (an agent, a flow) wrote after us. Never clobber a newer value:
  flag it for manual reconciliation.

A send whose answer never came (ledger ``unknown``) is judged the same way before anything is
sent again: it is read back, never re-sent blindly (docs/robustness.md, "Durability").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from supervisor.attributes.model import Settings
from supervisor.store import NewMismatch, OutboxRow, Outcome, RowChange, RowStatus, payload_hash, value_hash

__all__ = ["Verdict", "judge"]

NEWER_VALUE = "newer-value"
STILL_WRONG = "still-wrong"


@dataclass(frozen=True, slots=True)
class Verdict:
    changes: list[RowChange] = field(default_factory=list)
    mismatches: list[NewMismatch] = field(default_factory=list)
    # the send's ledger outcome, now that we know
    outcome: Outcome = Outcome.OK
    # some rows queue again (a re-send is due)
    resend: bool = False
    # key -> why it was flagged
    flagged: dict[str, str] = field(default_factory=dict)


def judge(
    rows: Sequence[OutboxRow],
    server: Mapping[str, str],
    *,
    answered: bool,
    settings: Settings,
    now: float,
) -> Verdict:
    """Judge ``rows`` (one send's) against the server's attributes; ``answered``: the platform said 2xx."""
    ours = {row.attribute: row.value for row in rows}
    theirs = {row.attribute: server.get(row.attribute) for row in rows}
    if payload_hash(ours) == payload_hash(theirs):
        done = [RowChange(r.id, RowStatus.REPAIRED if r.repairs else RowStatus.VERIFIED) for r in rows]
        return Verdict(changes=done, outcome=Outcome.OK)
    changes: list[RowChange] = []
    found: list[NewMismatch] = []
    flagged: dict[str, str] = {}
    matched = resend = 0
    for row in rows:
        held = value_hash(row.attribute, server.get(row.attribute))
        if held == value_hash(row.attribute, row.value):
            matched += 1
            changes.append(RowChange(row.id, RowStatus.REPAIRED if row.repairs else RowStatus.VERIFIED))
            continue
        if held == row.before_hash:
            # our write is not there and nobody wrote since: sending again clobbers nobody
            within = row.repairs < settings.repair_budget if answered else row.sends < settings.max_sends
            if within:
                resend += 1
                changes.append(RowChange(row.id, RowStatus.PENDING, repair=answered, error="not-persisted"))
                continue
            reason = STILL_WRONG
        else:
            reason = NEWER_VALUE
        flagged[row.attribute] = reason
        changes.append(RowChange(row.id, RowStatus.FLAGGED, error=reason))
        visible = None if row.sensitive else server.get(row.attribute)
        found.append(NewMismatch(row.id, reason, visible, now))
    if matched == len(rows):
        outcome = Outcome.OK
    elif matched == 0 and not answered:
        outcome = Outcome.FAILED  # the send never landed
    else:
        outcome = Outcome.PARTIAL  # answered (or partly landed), and part of it is not there
    return Verdict(changes, found, outcome, resend > 0, flagged)
