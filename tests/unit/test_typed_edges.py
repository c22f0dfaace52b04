"""Typed edges (issue 24, point 3): the vocabulary travels as values, never as strings spelled again.

The vocabulary every layer shares is on the ground floor, ``supervisor/vocabulary/`` (docs/runtime.md,
"Floors"): the session and circuit states, the platforms, endpoint ids, WebSocket close codes and the
socket API's faults. These checks read our source with ``ast``, like tests/unit/test_import_rules.py,
and fail when an edge goes back to strings and numbers:

1. **States**: no module outside the vocabulary spells a session or circuit state as a string literal
   (``state == "active"``, ``states.get("terminated")``); the few words that are another vocabulary's
   (the durable store's ledger) are listed with the reason.
2. **Platforms**: a configured session's platform is :class:`Platform` (a bad one is still one located
   line, tests/unit/test_config.py).
3. **Endpoint ids** are :class:`EndpointId` values (platform + name) whose ``str()`` is the wire's
   ``genesys:streaming``: no module glues one together (``"cxone:api"``, ``f"{platform}:api"``) or takes a
   circuit id apart (``.removeprefix("circuit:")``, ``.split(":")``).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from supervisor.config import parse_config
from supervisor.vocabulary import (
    CXONE_AGENT_SESSIONS,
    GENESYS_STREAMING,
    GENESYS_WEBMESSAGING,
    CircuitState,
    EndpointId,
    Platform,
    SessionState,
)

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


# -- 2. the platform in the configuration -------------------------------------------------------------


def test_a_configured_platform_is_the_enum() -> None:
    config = parse_config(
        '[platforms.cxone]\nauthUrl = "https://cxone.example"\nusername = "k"\npasswordFile = "p"\n'
        '[[sessions]]\nid = "a"\nplatform = "cxone"\nkind = "agent-session"\n',
        "c.toml",
    )
    assert config.sessions[0].platform is Platform.CXONE


# -- 3. endpoint ids ------------------------------------------------------------------------------------


def test_an_endpoint_id_renders_as_the_wire_has_it() -> None:
    assert str(GENESYS_WEBMESSAGING) == "genesys:webmessaging"
    assert str(GENESYS_STREAMING) == "genesys:streaming"
    assert str(CXONE_AGENT_SESSIONS) == "cxone:agent-sessions"
    assert str(EndpointId.api(Platform.CXONE)) == "cxone:api"
    assert EndpointId.oauth(Platform.GENESYS).circuit_id == "circuit:genesys:oauth"
    assert GENESYS_STREAMING.platform is Platform.GENESYS
    # sorted as their strings are (the socket API lists circuits in this order)
    ids = [GENESYS_WEBMESSAGING, EndpointId.api(Platform.CXONE), CXONE_AGENT_SESSIONS, GENESYS_STREAMING]
    assert [str(i) for i in sorted(ids)] == sorted(str(i) for i in ids)
    for bad in ("", "api:x"):
        with pytest.raises(ValueError, match="endpoint name"):
            EndpointId(Platform.GENESYS, bad)


_GLUED = re.compile(r"^(genesys|cxone):|^:(api|oauth|streaming|webmessaging|agent-sessions)$|^circuit:$")
#: the same shape for something else than an endpoint, by module
NOT_ENDPOINTS: dict[tuple[str, str], str] = {
    # an attribute queue's tenant (one per Genesys OAuth client): ``genesys:<clientId>``
    ("supervisor.runtime.targets", "genesys:"): "a tenant's name",
    # systemd's degraded condition of a circuit: ``circuit:<endpoint>`` whichever way an id is given
    ("supervisor.systemd.conditions", "circuit:"): "a degraded condition's name",
    # the watch client reads the wire's JSON (a CIRCUIT_TRANSITION's machineId against a row's circuit
    # endpoint): it holds strings, never an EndpointId
    ("supervisor.cli.watch_view", "circuit:"): "the client's reading of the wire",
}


def glued_endpoints(source: str, module: str) -> list[str]:
    """``line N: ...`` for every endpoint or circuit id spelled, glued together or taken apart."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and _GLUED.search(node.value):
            if (module, node.value) not in NOT_ENDPOINTS:
                found.append(f"line {node.lineno}: {node.value!r} (use EndpointId)")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            takes_apart = node.func.attr in ("split", "rsplit", "partition", "rpartition")
            args = [a.value for a in node.args if isinstance(a, ast.Constant)]
            receiver = ast.unparse(node.func.value).lower()
            if takes_apart and ":" in args and ("endpoint" in receiver or "circuit" in receiver):
                found.append(f"line {node.lineno}: {ast.unparse(node)} (read EndpointId's fields)")
    return found


@pytest.mark.parametrize("path", _daemon_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_endpoint_id_is_glued_or_parsed(path: Path) -> None:
    assert glued_endpoints(path.read_text(encoding="utf-8"), _module_name(path)) == []


@pytest.mark.parametrize(
    ("source", "bad"),
    [
        # what the edges did before (issue 24, point 3): each of these fails
        ('CIRCUIT = "cxone:api"', True),
        ('kwargs.setdefault("circuit", f"{context.platform.value}:api")', True),
        ('gate = self.attempts.token(f"{tokens.name}:oauth")', True),
        ('endpoint = event.circuit_id.removeprefix("circuit:")', True),
        ('platform = endpoint.split(":", 1)[0]', True),
        # what they do now
        ("CIRCUIT = EndpointId.api(Platform.CXONE)", False),
        ("platform = endpoint.platform", False),
        ('runtime = environ.get("RUNTIME_DIRECTORY", "").split(":")[0]', False),
        ('text = f"{endpoint}: open"', False),
    ],
)
def test_the_endpoint_check_catches_what_it_should(source: str, bad: bool) -> None:
    assert bool(glued_endpoints(source, "supervisor.api.fanout")) is bad
