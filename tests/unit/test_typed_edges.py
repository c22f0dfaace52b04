"""Typed edges (issue 24, point 3): the vocabulary travels as values, never as strings spelled again.

The vocabulary every layer shares is on the ground floor, ``supervisor/vocabulary/`` (docs/runtime.md,
"Floors"): the session and circuit states, the platforms, endpoint ids, WebSocket close codes and the
socket API's faults. These checks read our source with ``ast``, like tests/unit/test_import_rules.py,
and fail when an edge goes back to strings and numbers:

1. **States**: no module outside the vocabulary spells a session or circuit state as a string literal
   (``state == "active"``, ``states.get("terminated")``); the few words that are another vocabulary's
   (the durable store's ledger) are listed with the reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from supervisor.vocabulary import CircuitState, SessionState

ROOT = Path(__file__).resolve().parents[2]

# -- helpers ----------------------------------------------------------------------------------------------


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _daemon_files() -> list[Path]:
    """Our modules but the vocabulary itself and the simulators (they stand in for the platforms and
    keep the platforms' own words: a fault's ``state`` is ``pending`` or ``active``)."""
    return sorted(
        path
        for top in ("supervisor", "machines")
        for path in (ROOT / top).rglob("*.py")
        if "__pycache__" not in path.parts
        and not _module_name(path).startswith(("supervisor.vocabulary", "supervisor.sim"))
    )


# -- 1. states --------------------------------------------------------------------------------------------

STATE_NAMES = frozenset(state.value for state in (*SessionState, *CircuitState))
#: the same words in another vocabulary, by module: never a session's or a circuit's state
OTHER_VOCABULARIES: dict[tuple[str, str], str] = {
    # the durable store's desired states (running, stopped, terminated) and the session ledger's
    # (opening, open, closed): persisted words of the store's schema (docs/store.md)
    ("supervisor.store.model", "terminated"): "DesiredState.TERMINATED",
    ("supervisor.store.model", "open"): "ServerState.OPEN",
    ("supervisor.store.model", "closed"): "ServerState.CLOSED",
    # the ledger's outcome of a session we closed ourselves ("closed", "ended", "already_gone", ...)
    ("supervisor.runtime.durable", "closed"): "the session ledger's outcome",
    # "cannot open the store": a verb in an error message
    ("supervisor.store.sqlite", "open"): "a verb",
    # the demo summary's field listing the sessions that ended (README, docs/demo.md: ``terminated``)
    ("supervisor.demo.summary", "terminated"): "a field of the demo's summary",
    ("supervisor.demo.scenarios", "terminated"): "a field of the demo's summary",
}


def spelled_states(source: str, module: str) -> list[str]:
    """``line N: 'active'`` for every string literal of ``source`` that is a state's name."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
            continue
        if node.value in STATE_NAMES and (module, node.value) not in OTHER_VOCABULARIES:
            found.append(f"line {node.lineno}: {node.value!r} (use SessionState / CircuitState)")
    return found


@pytest.mark.parametrize("path", _daemon_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_state_is_spelled_as_a_string(path: Path) -> None:
    assert spelled_states(path.read_text(encoding="utf-8"), _module_name(path)) == []


@pytest.mark.parametrize(
    ("source", "bad"),
    [
        # what the edges did before (issue 24, point 3): each of these fails
        ('if event.target == "active": pass', True),
        ('n = states.get("terminated", 0)', True),
        ('open_circuits = [c for c in cs if c.state.value != "closed"]', True),
        ('CIRCUIT_STATES = ("closed", "open", "half_open")', True),
        ('CONNECTING = "connecting"', True),
        # what they do now
        ("if event.target is SessionState.ACTIVE: pass", False),
        ("n = states.get(SessionState.TERMINATED, 0)", False),
        ('"""A docstring that says a session goes active."""', False),
        ('text = f"{n} active"', False),
    ],
)
def test_the_state_check_catches_what_it_should(source: str, bad: bool) -> None:
    assert bool(spelled_states(source, "supervisor.api.board")) is bad


def test_the_other_vocabularies_are_still_there() -> None:
    """An allowance nobody needs any more is taken out, not left to excuse the next string."""
    used = set()
    for path in _daemon_files():
        module = _module_name(path)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and (module, node.value) in OTHER_VOCABULARIES:
                used.add((module, node.value))
    assert set(OTHER_VOCABULARIES) == used
