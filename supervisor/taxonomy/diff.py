"""Routing differences between two taxonomy versions (``taxonomy diff``). Pure."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

import msgspec

from supervisor.errors import EnvelopeError
from supervisor.taxonomy.classifier import Classifier
from supervisor.taxonomy.envelope import envelope_from_json
from supervisor.taxonomy.model import CodeSpec, SdkErrorEvent
from supervisor.taxonomy.normalize import require_evidence
from supervisor.taxonomy.rules import ResponseSpec, Taxonomy


class CodeChange(msgspec.Struct, frozen=True):
    code: str
    change: str  # added | removed | changed
    before: dict[str, Any] | None
    after: dict[str, Any] | None


class ReplayChange(msgspec.Struct, frozen=True):
    line: int
    before: dict[str, Any]
    after: dict[str, Any]


class TableChange(msgspec.Struct, frozen=True):
    table: str  # closeCodes | exceptions
    key: str
    before: str | None
    after: str | None


class ResponseChange(msgspec.Struct, frozen=True):
    """A ``[responses.NAME]`` whose check changed: what a response must carry decides whether a
    session goes active or an update goes out (seed section 3), so a change there is a routing
    change as much as a re-routed code (v2 requires less of Genesys' reads than v1, docs/platforms.md)."""

    response: str
    change: str  # added | removed | changed
    before: dict[str, Any] | None
    after: dict[str, Any] | None


def _check(spec: ResponseSpec) -> dict[str, Any]:
    return {"required": list(spec.required), "conversationField": spec.conversation_field}


_Spec = TypeVar("_Spec")
_Change = TypeVar("_Change")


def _diff_entries(
    a: Mapping[str, _Spec],
    b: Mapping[str, _Spec],
    view: Callable[[_Spec], dict[str, Any]],
    change: Callable[[str, str, dict[str, Any] | None, dict[str, Any] | None], _Change],
) -> list[_Change]:
    """Entries (by name) whose ``view`` differs between two versions, or that one version lacks."""
    out: list[_Change] = []
    for name in sorted(set(a) | set(b)):
        before = view(a[name]) if name in a else None
        after = view(b[name]) if name in b else None
        if before == after:
            continue
        kind = "added" if before is None else "removed" if after is None else "changed"
        out.append(change(name, kind, before, after))
    return out


def diff_responses(a: Taxonomy, b: Taxonomy) -> list[ResponseChange]:
    """Responses whose required fields or conversation field differ, or that one version lacks."""
    return _diff_entries(a.responses, b.responses, _check, ResponseChange)


def _routing(spec: CodeSpec) -> dict[str, Any]:
    policy = spec.policy
    return {
        "class": spec.taxonomy_class.value,
        "scope": spec.scope.value,
        "trigger": spec.trigger.value if spec.trigger else None,
        "reconnect": spec.reconnect,
        "reconcileBeforeRetry": spec.reconcile_before_retry,
        "graceful": spec.graceful,
        "replayWithFreshToken": spec.replay_with_fresh_token,
        "revokesCredential": spec.revokes_credential,
        "circuitNeutral": spec.circuit_neutral,
        "policy": policy.name,
        "maxRetries": policy.max_retries,
        "baseDelayMs": policy.base_delay_ms,
        "maxDelayMs": policy.max_delay_ms,
        "jitter": policy.jitter.value,
        "honorsRetryAfter": policy.honors_retry_after,
    }


def event_routing(ev: SdkErrorEvent) -> dict[str, Any]:
    """What decides what happens to a failure (a replay and the shadow taxonomy compare these)."""
    return {
        "code": ev.code,
        "taxonomyClass": ev.taxonomy_class.value,
        "scope": ev.scope.value,
        "retryable": ev.retryable,
        "maxRetryBudget": ev.max_retry_budget,
        "trigger": ev.trigger.value if ev.trigger else None,
        "policy": ev.policy.name,
        "reconnect": ev.reconnect,
        "graceful": ev.graceful,
        "replayWithFreshToken": ev.replay_with_fresh_token,
        "revokesCredential": ev.revokes_credential,
        "circuitNeutral": ev.circuit_neutral,
    }


def diff_codes(a: Taxonomy, b: Taxonomy) -> list[CodeChange]:
    """Semantic codes added, removed, or routed differently (class, scope, trigger, flags, policy)."""
    return _diff_entries(a.codes, b.codes, _routing, CodeChange)


def diff_tables(a: Taxonomy, b: Taxonomy) -> list[TableChange]:
    """Close codes and exception names that now map to another semantic code."""
    out: list[TableChange] = []
    for table, left, right, left_default, right_default in (
        (
            "closeCodes",
            {str(k): v for k, v in a.close_codes.items()},
            {str(k): v for k, v in b.close_codes.items()},
            a.close_default,
            b.close_default,
        ),
        ("exceptions", a.exceptions, b.exceptions, a.exception_default, b.exception_default),
    ):
        for key in sorted(set(left) | set(right)):
            before = left.get(key, left_default).code
            after = right.get(key, right_default).code
            if before != after:
                out.append(TableChange(table, key, before, after))
        if left_default.code != right_default.code:
            out.append(TableChange(table, "*", left_default.code, right_default.code))
    return out


#: a replay keeps this many differing lines (and problems) to show; the rest are only counted,
#: so an endless or huge recording replays in bounded memory
REPLAY_KEEP = 1000


class ReplayReport(msgspec.Struct):
    """What a replay found: the first :data:`REPLAY_KEEP` differences and problems, and totals."""

    changes: list[ReplayChange] = msgspec.field(default_factory=list)
    problems: list[str] = msgspec.field(default_factory=list)
    changed_total: int = 0
    problems_total: int = 0
    lines: int = 0


def replay(a: Taxonomy, b: Taxonomy, lines: Iterable[bytes]) -> ReplayReport:
    """Classify each recorded envelope under both versions; report those routed differently.

    A line that is not a valid envelope is a problem naming its line number, and the replay
    goes on. Memory stays bounded whatever the input's length: past :data:`REPLAY_KEEP`,
    differences and problems are counted, not kept.
    """
    ca, cb = Classifier(a), Classifier(b)
    report = ReplayReport()
    for number, line in enumerate(lines, 1):
        report.lines = number
        if not line.strip():
            continue
        try:
            raw = envelope_from_json(line)
            require_evidence(raw)
        except EnvelopeError as exc:
            report.problems_total += 1
            if len(report.problems) < REPLAY_KEEP:
                report.problems.append(f"line {number}: {exc}")
            continue
        before = event_routing(ca.classify(raw, observe=False))
        after = event_routing(cb.classify(raw, observe=False))
        if before != after:
            report.changed_total += 1
            if len(report.changes) < REPLAY_KEEP:
                report.changes.append(ReplayChange(number, before, after))
    return report
