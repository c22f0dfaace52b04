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


def test_circuit_diagram_has_the_seed_cycle() -> None:
    text = mermaid(CircuitMachine)
    for edge in (
        "closed --> open : trip",
        "open --> half_open : probe",
        "half_open --> closed : probe_succeeded",
        "half_open --> open : probe_failed",
    ):
        assert f"    {edge}\n" in text
    assert "[*] --> closed" in text
