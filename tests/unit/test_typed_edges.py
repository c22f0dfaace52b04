"""Typed edges: the vocabulary travels as values, never as strings spelled again.

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
4. **Faults**: the socket API's errors are :class:`ApiFault` members the domain raises in an
   :class:`ApiError`; a string is refused, no module glues an error name from an interface and a word,
   and the wire names are the documented ones (docs/socket-api.md).
5. **The boundary**: httpx's and websockets' exceptions are named in one module,
   supervisor/boundary.py (one mapping per library); what it raises is a TransportFailure carrying a
   RawError, ``from`` the library's exception.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import httpx
import pytest
import websockets.exceptions

from supervisor.attributes import Refused
from supervisor.boundary import SessionContext, http_failures, socket_failures
from supervisor.config import parse_config
from supervisor.errors import ApiError, TransportFailure
from supervisor.taxonomy import Channel, RawError
from supervisor.taxonomy.normalize import CLOSE_CODE_NAMES
from supervisor.vocabulary import (
    CXONE_AGENT_SESSIONS,
    GENESYS_STREAMING,
    GENESYS_WEBMESSAGING,
    OK_CLOSE_CODES,
    ApiFault,
    CircuitState,
    CloseCode,
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
    # a fleet member's state in fleet_members (active, degraded, leaving): persisted words of the
    # store's schema, migration 6 (docs/store.md)
    ("supervisor.fleet.shares", "active"): "MemberState.ACTIVE",
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
        # what the edges did before: each of these fails
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
        # what the edges did before: each of these fails
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


# -- 4. the socket API's faults -------------------------------------------------------------------------


def test_the_domain_raises_faults_of_the_enum_only() -> None:
    error = ApiError(ApiFault.NO_SUCH_SESSION, {"sessionId": "x", "problem": "no such session"})
    assert (error.fault, error.name) == (
        ApiFault.NO_SUCH_SESSION,
        "io.sessionsupervisor.control.v1.NoSuchSession",
    )
    # what _refusal did before: a name glued from the interface and a word
    for glued in ("io.sessionsupervisor.control.v1.NoSuchSession", "NoSuchThing"):
        with pytest.raises(TypeError, match="ApiFault"):
            ApiError(glued)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="ApiFault"):
            Refused(glued, "refused")  # type: ignore[arg-type]


def test_a_client_keeps_an_error_name_it_does_not_know() -> None:
    """A newer daemon may answer a fault this client lacks: its name is kept, its fault is None."""
    known = ApiError.received("io.sessionsupervisor.control.v1.Backpressure", {"problem": "full"})
    assert known.fault is ApiFault.BACKPRESSURE and str(known) == f"{ApiFault.BACKPRESSURE.value}: full"
    newer = ApiError.received("io.sessionsupervisor.control.v1.Newer", {})
    assert (newer.fault, newer.name) == (None, "io.sessionsupervisor.control.v1.Newer")


def test_every_fault_is_a_documented_wire_name() -> None:
    """The wire names stay as they were: each is ``<interface>.<Name>`` and in docs/socket-api.md."""
    documented = (ROOT / "docs" / "socket-api.md").read_text(encoding="utf-8")
    interfaces = (
        "org.varlink.service",
        "io.sessionsupervisor.protocol.v1",
        "io.sessionsupervisor.control.v1",
        # the subscribe socket's own: the platform stream refused
        "io.sessionsupervisor.state.v1",
    )
    for fault in ApiFault:
        interface, _, short = fault.value.rpartition(".")
        assert interface in interfaces and short == fault.short and short[0].isupper(), fault
        assert f"`{short}`" in documented or fault.value in documented, fault


_INTERFACES = frozenset({"SERVICE", "STATE", "CONTROL", "PROTOCOL"})
#: the method names, made the same way (supervisor/api/protocol.py, ``Method``): not faults
METHODS = "supervisor.api.protocol"


def glued_faults(source: str, module: str) -> list[str]:
    """``line N: ...`` for every f-string that starts with an interface's name (``f"{CONTROL}.{name}"``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.JoinedStr) and node.values and module != METHODS:
            first = node.values[0]
            if isinstance(first, ast.FormattedValue) and ast.unparse(first.value) in _INTERFACES:
                found.append(f"line {node.lineno}: {ast.unparse(node)} (raise an ApiFault)")
    return found


@pytest.mark.parametrize("path", _daemon_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_error_name_is_glued(path: Path) -> None:
    assert glued_faults(path.read_text(encoding="utf-8"), _module_name(path)) == []


@pytest.mark.parametrize(
    ("source", "bad"),
    [
        ('return ApiError(f"{CONTROL}.{refused.name}", parameters)', True),
        ("return ApiError(refused.fault, parameters)", False),
    ],
)
def test_the_fault_check_catches_what_it_should(source: str, bad: bool) -> None:
    assert bool(glued_faults(source, "supervisor.api.control_attributes")) is bad


# -- 5. the boundary ----------------------------------------------------------------------------------------

CTX = SessionContext("s-1", Platform.GENESYS, Channel.REST)


@pytest.mark.parametrize(
    ("mapping", "exc", "name"),
    [
        (http_failures, httpx.ConnectError("refused"), "httpx.ConnectError"),
        (http_failures, httpx.InvalidURL("no host"), "httpx.InvalidURL"),
        (http_failures, ConnectionResetError(), "ConnectionResetError"),
        (
            socket_failures,
            websockets.exceptions.InvalidHandshake("bad"),
            "websockets.exceptions.InvalidHandshake",
        ),
        (socket_failures, TimeoutError(), "TimeoutError"),
    ],
)
def test_a_library_failure_is_raised_as_a_transport_failure_from_its_cause(
    mapping: object, exc: BaseException, name: str
) -> None:
    with pytest.raises(TransportFailure) as raised, mapping(ctx=CTX, method="GET", endpoint="/x"):  # type: ignore[operator]
        raise exc
    failure = raised.value
    assert isinstance(failure.raw, RawError) and failure.raw.exception == name
    assert (failure.raw.method, failure.raw.endpoint) == ("GET", "/x")
    assert failure.__cause__ is exc


def test_what_is_not_the_library_s_passes_through() -> None:
    with pytest.raises(KeyError), http_failures(ctx=CTX, method="GET", endpoint="/x"):
        raise KeyError("ours")


#: ``except`` clauses that may name a library's exception outside the boundary, and why
NAMED_ELSEWHERE: dict[tuple[str, str], str] = {
    # parsing a configured URL: no exchange, nothing to describe
    ("supervisor.rest.cxone_auth", "httpx.InvalidURL"): "a URL's syntax",
}
_LIBRARIES = ("httpx", "websockets", "wsx", "aiohttp")


def named_library_exceptions(source: str, module: str) -> list[str]:
    """``line N: ...`` for every ``except`` clause naming an httpx or websockets exception."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ExceptHandler) and node.type is not None:
            for name in ast.unparse(node.type).strip("()").split(","):
                name = name.strip().lstrip("*")
                if name.split(".")[0] in _LIBRARIES and (module, name) not in NAMED_ELSEWHERE:
                    found.append(f"line {node.lineno}: except {name} (use supervisor.boundary's mapping)")
    return found


@pytest.mark.parametrize(
    "path",
    [p for p in _daemon_files() if _module_name(p) != "supervisor.boundary"],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_library_exceptions_are_named_at_the_boundary_only(path: Path) -> None:
    assert named_library_exceptions(path.read_text(encoding="utf-8"), _module_name(path)) == []


@pytest.mark.parametrize(
    ("source", "bad"),
    [
        # what the transports did before: each its own tuple
        ("try:\n    pass\nexcept (wsx.WebSocketException, OSError) as exc:\n    pass", True),
        ("try:\n    pass\nexcept (httpx.HTTPError, httpx.InvalidURL, OSError):\n    pass", True),
        ("try:\n    pass\nexcept SOCKET_FAILURES as exc:\n    pass", False),
        ("try:\n    pass\nexcept (*SOCKET_FAILURES, ValueError):\n    pass", False),
    ],
)
def test_the_boundary_check_catches_what_it_should(source: str, bad: bool) -> None:
    assert bool(named_library_exceptions(source, "supervisor.transports.sockets")) is bad


# -- close codes --------------------------------------------------------------------------------------------


def test_close_codes_are_websockets_codes_by_the_iana_names() -> None:
    """The vocabulary restates websockets' CloseCode and OK_CLOSE_CODES (version 17) for the floors that
    import no I/O library; the numbers and the clean set are websockets' own, the names the IANA
    registry's, as an event's rawCode has always carried them (two differ from websockets')."""
    from websockets.frames import OK_CLOSE_CODES as WEBSOCKETS_OK
    from websockets.frames import CloseCode as WebsocketsCloseCode

    assert {c.value for c in CloseCode} == {c.value for c in WebsocketsCloseCode}
    assert {int(c) for c in OK_CLOSE_CODES} == {int(c) for c in WEBSOCKETS_OK}
    renamed = {c.value for c in CloseCode} - {
        c.value for c in CloseCode if c.name == WebsocketsCloseCode(c.value).name
    }
    assert renamed == {1005, 1007}
    assert CLOSE_CODE_NAMES[1006] == "ABNORMAL_CLOSURE" and CLOSE_CODE_NAMES[1005] == "NO_STATUS_RECEIVED"
