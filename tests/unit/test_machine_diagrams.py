"""docs/machines.md is generated from the machine classes and must not drift from them."""

from __future__ import annotations

from pathlib import Path

from machines.circuit import CircuitMachine
from machines.diagrams import mermaid, render_markdown
from machines.session import SessionMachine

DOC = Path(__file__).resolve().parents[2] / "docs" / "machines.md"
REGENERATE = "python -m machines.diagrams > docs/machines.md"


def test_committed_diagrams_match_the_code() -> None:
    assert DOC.is_file(), f"docs/machines.md is missing; generate it with `{REGENERATE}`"
    committed = DOC.read_text(encoding="utf-8")
    assert committed == render_markdown(), (
        f"docs/machines.md no longer matches machines/*.py; regenerate it with `{REGENERATE}`"
    )


def test_session_diagram_shows_every_state_and_edge() -> None:
    text = mermaid(SessionMachine)
    assert text.startswith("stateDiagram-v2\n")
    assert "    [*] --> connecting\n" in text
    assert "    terminated --> [*]\n" in text
    assert "    connecting --> active : validated\n" in text
    assert "    reconnecting --> reconnecting : throttled (internal)\n" in text
    # nothing leaves terminated
    assert not any(
        line.strip().startswith("terminated -->") and "[*]" not in line for line in text.splitlines()
    )
    edges = sum(len(state.transitions) for state in SessionMachine.states)
    labels = sum(line.count(",") + 1 for line in text.splitlines() if " : " in line)
    assert labels == edges


def _edges(text: str) -> dict[tuple[str, str], set[str]]:
    """(source, target) -> the events of that edge (the generator merges parallel edges)."""
    out: dict[tuple[str, str], set[str]] = {}
    for line in text.splitlines():
        if " --> " in line and " : " in line:
            pair, labels = line.strip().split(" : ")
            source, target = pair.split(" --> ")
            out[(source, target)] = set(labels.split(", "))
    return out


def test_circuit_diagram_has_the_seed_cycle() -> None:
    text = mermaid(CircuitMachine)
    edges = _edges(text)
    assert "trip" in edges[("closed", "open")]
    assert "probe" in edges[("open", "half_open")]
    assert "probe_succeeded" in edges[("half_open", "closed")]
    assert "probe_failed" in edges[("half_open", "open")]
    assert "[*] --> closed" in text


def test_circuit_diagram_draws_manual_control() -> None:
    """isolate from every state; close, the end of --for and reset lead back to closed; reset from any."""
    edges = _edges(mermaid(CircuitMachine))
    for state in ("closed", "open", "half_open"):
        assert "isolate" in edges[(state, "isolated")]
    for state in ("open", "half_open"):
        assert "reset" in edges[(state, "closed")]
    assert edges[("closed", "closed")] == {"reset (internal)"}  # the counters cleared, the state kept
    assert edges[("isolated", "closed")] == {"close", "isolation_ended", "reset"}
    assert "isolate (internal)" in edges[("isolated", "isolated")]
    # no always-closed state: isolated is the one state beyond the seed's three
    assert {state.id for state in CircuitMachine.states} == {"closed", "open", "half_open", "isolated"}
