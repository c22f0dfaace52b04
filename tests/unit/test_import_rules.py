"""Import rules: nothing imports up the stack, and the decision core does no I/O.

1. **Floors** (docs/runtime.md, "Floors"): every module of supervisor/ and machines/ sits on
   one floor of :data:`FLOORS` and may import only modules on its own floor or below; modules
   of one floor import each other without a cycle. Checked on the source with ``ast``, imports
   inside functions included; an upward import fails CI.
2. **No I/O in the decision core** (docs/architecture.md, "Data flows one way"): machines/,
   supervisor/taxonomy/, supervisor/retry/, supervisor/events/ and supervisor/clock.py import
   no I/O library (direct imports, ``importlib.import_module`` and ``__import__`` with a
   constant name). machines/ may import from ``supervisor`` only the pure decision core.
3. The simulators are imported by nothing in the daemon but the ``sim`` and ``demo`` commands.
4. **No reach through the supervisor** (docs/runtime.md, "Floors"): the daemon's edges (the socket API,
   the systemd glue, the demo) are handed typed interfaces by the composition root
   (supervisor/runtime/sessions.py, supervisor/runtime/assembly.py). They import from the runtime
   only those interfaces, the lifecycle's ``Service`` (and the demo the assembly), never the
   supervisor, its wiring or the store's class; and no attribute chain goes through a supervisor
   (``supervisor.x``, ``self._supervisor.x``) or a wiring (``x.wiring``).
5. **One attempt path** (docs/runtime.md, "One attempt path"): only the shell modules
   of :data:`ENDPOINT_SHELLS` call an endpoint's :class:`~machines.endpoint.Endpoint` (they alone
   import ``machines.endpoint``; ``machines.registry`` makes them); circuits, pacers and retry
   budgets are driven inside ``Endpoint`` only: nothing else imports ``Circuit``, ``Pacer``,
   ``RetryBudget`` or ``echo_of_throttle``, and ``Circuit.admit`` and ``record_*`` have one call
   site each, in ``machines/endpoint.py``.

Transitively, importing the taxonomy and the retry policy loads no I/O module either
(checked in a fresh interpreter). machines/ is exempt from that second check only because
python-statemachine itself imports asyncio (its async engine); our own machine code is not.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

import supervisor

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = (
    "asyncio",
    "anyio",
    "socket",
    "ssl",
    "select",
    "selectors",
    "http.client",
    "urllib.request",
    "httpx",
    "httpcore",
    "websockets",
    "aiohttp",
    "sqlite3",
    "subprocess",
    "threading",
    "multiprocessing",
    "opentelemetry",
    "requests",
    "trio",
)
MACHINES_MAY_USE = (
    "supervisor.taxonomy",
    "supervisor.retry",
    "supervisor.clock",
    "supervisor.errors",
    "supervisor.events",
    "supervisor.vocabulary",
)

# the socket API modules that do no I/O (floor 3, and checked like the decision core)
PURE_API = (
    "supervisor.api.protocol",
    "supervisor.api.messages",
    "supervisor.api.outbox",
    "supervisor.api.platform_events",
    "supervisor.api.events",
    "supervisor.api.idl",
    "supervisor.api.signatures",
    "supervisor.api.roles",
    "supervisor.api.refusals",
    "supervisor.api.paths",
)

# The floors, top to bottom (each may import only its own floor and those below), as data:
# (floor, what, module prefixes). docs/runtime.md draws the same table.
FLOORS: tuple[tuple[int, str, tuple[str, ...]], ...] = (
    (9, "entry points", ("supervisor.cli", "supervisor.__main__")),
    (
        8,
        "the demo; the WebSocket bridge (a subscriber of the socket API)",
        ("supervisor.demo", "supervisor.bridge"),
    ),
    (
        7,
        "the runtime: the composition root, lifecycle, session table, supervisor, session runners, sinks;"
        " the socket API's board, services, client;"
        " the systemd services (status line, watchdog, probes, the glue run wires in);"
        " the fleet (a member's leases in PostgreSQL, the fleet bus)",
        ("supervisor.runtime", "supervisor.api", "supervisor.systemd", "supervisor.fleet"),
    ),
    (
        6,
        "transports; attribute updates (they send through the REST client); telemetry (executor hooks, bus sinks); the library (supervisor.http, its shells)",
        (
            "supervisor.transports",
            "supervisor.attributes",
            "supervisor.telemetry",
            "supervisor.library",
            "supervisor.http",
        ),
    ),
    (
        5,
        "the attempt shell; the REST client: the one retry executor, pipeline, tokens",
        ("supervisor.attempts", "supervisor.rest"),
    ),
    (4, "machines", ("machines",)),
    (
        3,
        "vocabulary and boundary: events, bus, retry policy, boundary; the durable store",
        (
            "supervisor.events",
            "supervisor.bus",
            "supervisor.retry",
            "supervisor.boundary",
            # the socket API's pure part: framing, messages, the conflating outbox, its events
            *PURE_API,
            # systemd's low part: the sd_notify datagram, sd_listen_fds, the degraded conditions any
            # component may raise (the durable store among them)
            "supervisor.systemd.notify",
            "supervisor.systemd.activation",
            "supervisor.systemd.environ",
            "supervisor.systemd.degraded",
            # journald's stream: which descriptors it reads, each event line's priority
            "supervisor.systemd.journal",
            # the durable store: its interface and the SQLite implementation, below the runtime
            "supervisor.store",
        ),
    ),
    (
        2,
        "decision data, config, simulators",
        (
            "supervisor.taxonomy",
            "supervisor.config",
            "supervisor.config_durable",
            "supervisor.config_urls",
            "supervisor.credentials",
            "supervisor.sim",
        ),
    ),
    (
        1,
        "ground: the clock, the exception tree, the vocabulary every layer shares",
        ("supervisor.clock", "supervisor.errors", "supervisor.vocabulary", "supervisor"),
    ),
)
# the names the package root re-exports lazily, and their modules (docs/runtime.md, "Floors": `import supervisor` imports none)
ROOT_EXPORTS: dict[str, str] = supervisor._EXPORTS
# who may import the simulators (they stand in for the platforms; the daemon never needs them)
SIM_USERS = ("supervisor.sim", "supervisor.demo", "supervisor.cli")


def _pure_files() -> list[Path]:
    files = [
        *sorted((ROOT / "machines").rglob("*.py")),
        *sorted((ROOT / "supervisor" / "taxonomy").rglob("*.py")),
        *sorted((ROOT / "supervisor" / "retry").rglob("*.py")),
        ROOT / "supervisor" / "clock.py",
        ROOT / "supervisor" / "errors.py",
        *sorted((ROOT / "supervisor" / "vocabulary").rglob("*.py")),
        *sorted((ROOT / "supervisor" / "events").rglob("*.py")),
        *(ROOT / (name.replace(".", "/") + ".py") for name in PURE_API),
    ]
    return [f for f in files if f.is_file()]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(module: str | None, level: int, importer: str, is_package: bool) -> str:
    """Absolute name of a (possibly relative) ``from`` import."""
    if level == 0:
        return module or ""
    base = importer.split(".")
    if not is_package:
        base = base[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join([*base, module] if module else base)


def imported_modules(source: str, importer: str, is_package: bool) -> Iterator[tuple[int, str]]:
    """(line, absolute module name) for every import in ``source`` of module ``importer``."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(node.module, node.level, importer, is_package)
            yield node.lineno, base
            for alias in node.names:  # `from urllib import request` imports urllib.request
                yield node.lineno, f"{base}.{alias.name}"
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            first = node.args[0]
            dynamic = name in ("import_module", "__import__")
            if dynamic and isinstance(first, ast.Constant) and isinstance(first.value, str):
                yield node.lineno, first.value


def _matches(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def violations(source: str, importer: str, is_package: bool = False) -> list[str]:
    found = []
    in_machines = importer.split(".")[0] == "machines"
    for line, module in imported_modules(source, importer, is_package):
        for banned in FORBIDDEN:
            if _matches(module, banned):
                found.append(f"line {line}: imports I/O library {module!r}")
        core = module == "supervisor" or any(_matches(module, ok) for ok in MACHINES_MAY_USE)
        if in_machines and _matches(module, "supervisor") and not core:
            found.append(f"line {line}: machines/ may not import {module!r}")
    return found


def test_the_pure_core_exists() -> None:
    names = {_module_name(p) for p in _pure_files()}
    assert {"machines.session", "machines.circuit", "machines.effects", "supervisor.clock"} <= names


@pytest.mark.parametrize("path", _pure_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_io_imports(path: Path) -> None:
    source = path.read_text(encoding="utf-8")
    assert violations(source, _module_name(path), path.name == "__init__.py") == []


@pytest.mark.parametrize(
    ("source", "bad"),
    [
        ("import asyncio", True),
        ("import os.path", False),
        ("from http import client", True),
        ("from http import HTTPStatus", False),
        ("from urllib.request import urlopen", True),
        ("import opentelemetry.trace as t", True),
        ("import importlib\nimportlib.import_module('socket')", True),
        ("x = __import__('threading')", True),
        ("import selectors", True),
        ("from supervisor.runtime import loop", True),
        ("import supervisor.transports.ws", True),
        ("from supervisor import clock", False),
        ("from supervisor.retry.backoff import decide_retry", False),
        ("from supervisor.errors import SupervisorError", False),
        ("from .effects import Effect", False),
    ],
)
def test_the_checker_catches_what_it_should(source: str, bad: bool) -> None:
    # as if the snippet were a module of machines/, so the supervisor rule applies too
    assert bool(violations(source, "machines.probe")) is bad


def test_the_taxonomy_and_retry_policy_load_no_io_module_even_transitively() -> None:
    """A fresh interpreter importing the decision core has no socket, ssl, asyncio, ... loaded."""
    import subprocess
    import sys

    probe = (
        "import sys; import supervisor.taxonomy, supervisor.retry, supervisor.clock, supervisor.vocabulary; "
        "print(' '.join(sorted(sys.modules)))"
    )
    loaded = set(
        subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT
        ).stdout.split()
    )
    offenders = sorted(m for m in loaded if any(m == f or m.startswith(f + ".") for f in FORBIDDEN))
    assert offenders == []


# -- floors ------------------------------------------------------------------------------------------


def floor_of(module: str) -> int | None:
    """The floor of one of our modules (the longest matching prefix), None for a third-party one."""
    best: tuple[int, int] | None = None
    for floor, _what, prefixes in FLOORS:
        for prefix in prefixes:
            if _matches(module, prefix) and (best is None or len(prefix) > best[1]):
                best = (floor, len(prefix))
    return None if best is None else best[0]


def _our_files() -> list[Path]:
    return sorted(
        f
        for d in ("supervisor", "machines")
        for f in (ROOT / d).rglob("*.py")
        if "__pycache__" not in f.parts
    )


def through_reexports(imported: str) -> str:
    """``supervisor.X`` for a name the package root re-exports lazily (supervisor/__init__.py,
    ``_EXPORTS``) is an import of X's own module: the facade is no way around the floors."""
    package, _, name = imported.partition(".")
    module = ROOT_EXPORTS.get(name) if package == "supervisor" and "." not in name else None
    return f"{module}.{name}" if module is not None else imported


#: imports made for annotations only (under ``if TYPE_CHECKING:``, never executed), by importer: the
#: exception tree on the ground floor types its payloads (``TransportFailure.raw`` is a RawError,
#: ``OperationError.event`` an SdkErrorEvent) without loading the taxonomy
TYPE_ONLY: dict[str, tuple[str, ...]] = {"supervisor.errors": ("supervisor.taxonomy",)}


def _type_checking_lines(source: str) -> set[int]:
    """The lines of ``if TYPE_CHECKING:`` blocks (their imports run for the type checker only)."""
    lines: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def our_imports(source: str, module: str, is_package: bool = False) -> list[tuple[int, str]]:
    type_only = TYPE_ONLY.get(module, ())
    annotations = _type_checking_lines(source) if type_only else set()
    found = []
    for line, imported in imported_modules(source, module, is_package):
        if line in annotations and any(_matches(imported, allowed) for allowed in type_only):
            continue
        if imported.split(".")[0] in ("supervisor", "machines"):
            found.append((line, through_reexports(imported)))
    return found


def _our_imports(path: Path) -> list[tuple[int, str]]:
    return our_imports(path.read_text(encoding="utf-8"), _module_name(path), path.name == "__init__.py")


@pytest.mark.parametrize(
    ("source", "bad"),
    [
        ("if TYPE_CHECKING:\n    from supervisor.taxonomy import RawError", False),
        # at run time, or another floor's module, it is an upward import all the same
        ("from supervisor.taxonomy import RawError", True),
        ("if TYPE_CHECKING:\n    from supervisor.rest.tokens import Token", True),
    ],
)
def test_only_the_listed_annotation_imports_are_not_edges(source: str, bad: bool) -> None:
    imports = our_imports(source, "supervisor.errors")
    assert bool(upward_imports("supervisor.errors", imports)) is bad


def upward_imports(module: str, imports: list[tuple[int, str]]) -> list[str]:
    """``line N: <module> (floor a) imports <other> (floor b > a)`` for every upward import."""
    own = floor_of(module)
    assert own is not None, f"{module} is on no floor: add it to FLOORS"
    found = []
    for line, imported in imports:
        other = floor_of(imported)
        if other is not None and other > own:
            found.append(f"line {line}: {module} (floor {own}) imports {imported} (floor {other})")
        if _matches(imported, "supervisor.sim") and not any(_matches(module, u) for u in SIM_USERS):
            found.append(f"line {line}: {module} imports the simulators ({imported})")
    return found


@pytest.mark.parametrize("path", _our_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_imports_up_the_stack(path: Path) -> None:
    assert upward_imports(_module_name(path), _our_imports(path)) == []


def find_cycles(graph: dict[str, set[str]]) -> list[str]:
    """Every cycle a depth-first walk meets, as ``a -> b -> a``."""
    visiting: set[str] = set()
    done: set[str] = set()
    cycles: list[str] = []

    def visit(node: str, trail: list[str]) -> None:
        if node in done:
            return
        if node in visiting:
            cycles.append(" -> ".join([*trail[trail.index(node) :], node]))
            return
        visiting.add(node)
        for nxt in sorted(graph.get(node, ())):
            visit(nxt, [*trail, node])
        visiting.discard(node)
        done.add(node)

    for name in sorted(graph):
        visit(name, [])
    return cycles


def test_no_import_cycle_between_our_modules() -> None:
    """Same-floor imports are allowed, cycles are not (the graph of our modules is acyclic)."""
    names = {_module_name(p): p for p in _our_files()}
    graph: dict[str, set[str]] = {}
    for name, path in names.items():
        targets: set[str] = set()
        for _line, imported in _our_imports(path):
            # `from pkg import mod` names pkg.mod when that is a module of ours, else pkg
            target = imported if imported in names else imported.rpartition(".")[0]
            # a package importing its own children (re-exports) is not an edge of the layering
            if target in names and target != name and not target.startswith(name + "."):
                targets.add(target)
        graph[name] = targets
    assert find_cycles(graph) == []


def test_the_cycle_check_finds_a_cycle() -> None:
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a -> b -> c -> a"]
    assert find_cycles({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == []


@pytest.mark.parametrize(
    ("module", "imported", "bad"),
    [
        ("supervisor.rest.pipeline", "supervisor.runtime.supervisor", True),
        ("supervisor.rest.pipeline", "supervisor.transports.base", True),
        ("supervisor.taxonomy.normalize", "supervisor.retry.headers", True),
        ("machines.session", "supervisor.rest.executor", True),
        ("supervisor.runtime.wiring", "supervisor.sim.genesys", True),
        ("supervisor.boundary", "supervisor.events", False),
        ("supervisor.transports.cxone", "supervisor.rest.pipeline", False),
        ("supervisor.cli.sim_cmd", "supervisor.sim.genesys", False),
        ("supervisor.demo.runner", "supervisor.runtime.main", False),
        ("supervisor.telemetry.operations", "supervisor.rest.hooks", False),
        ("supervisor.telemetry.segments", "supervisor.runtime.session_runner", True),
        ("supervisor.rest.executor", "supervisor.telemetry", True),
        ("supervisor.runtime.wiring", "supervisor.telemetry", False),
    ],
)
def test_the_floor_check_catches_what_it_should(module: str, imported: str, bad: bool) -> None:
    assert bool(upward_imports(module, [(1, imported)])) is bad


@pytest.mark.parametrize(
    ("module", "imported", "bad"),
    [
        # through the package root's lazy re-exports, an import is one of the module behind the name
        ("supervisor.runtime.wiring", "supervisor.GenesysSimulator", True),
        ("supervisor.taxonomy.loader", "supervisor.FakeClock", False),
        ("supervisor.clock", "supervisor.Fault", True),
        ("supervisor.cli.sim_cmd", "supervisor.CxoneSimulator", False),
    ],
)
def test_a_reexported_name_is_an_import_of_its_module(module: str, imported: str, bad: bool) -> None:
    assert bool(upward_imports(module, [(1, through_reexports(imported))])) is bad


def test_every_module_is_on_a_floor() -> None:
    assert [m for m in map(_module_name, _our_files()) if floor_of(m) is None] == []


# -- no reach through the supervisor (docs/runtime.md, "Floors") --------------------------------------------------------

# the daemon's edges and what each may import of the runtime (the composition root hands them the rest)
EDGE_RUNTIME: dict[str, tuple[str, ...]] = {
    "supervisor.api": ("supervisor.runtime.sessions", "supervisor.runtime.main"),
    "supervisor.systemd": ("supervisor.runtime.sessions", "supervisor.runtime.main"),
    "supervisor.demo": (
        "supervisor.runtime.sessions",
        "supervisor.runtime.main",
        "supervisor.runtime.assembly",
    ),
}
# names that hold the supervisor (``supervisor.x``, ``self.supervisor.x``, ``self._supervisor.x``)
SUPERVISOR_NAMES = frozenset({"supervisor", "_supervisor"})
# an attribute that is the supervisor's wiring, whatever holds it (``x.wiring.y``)
WIRING_NAMES = frozenset({"wiring", "_wiring"})


def _edge_of(module: str) -> str | None:
    return next((edge for edge in EDGE_RUNTIME if _matches(module, edge)), None)


def reach_throughs(source: str, module: str, is_package: bool = False) -> list[str]:
    """``line N: ...`` for every import of the runtime's internals and every attribute chain through
    a supervisor or a wiring in a module of the daemon's edges (nothing for other modules)."""
    edge = _edge_of(module)
    if edge is None:
        return []
    allowed = EDGE_RUNTIME[edge]
    found = []
    for line, imported in imported_modules(source, module, is_package):
        internal = _matches(imported, "supervisor.runtime") and imported != "supervisor.runtime"
        if internal and not any(_matches(imported, ok) for ok in allowed):
            found.append(f"line {line}: {module} imports {imported} (take the interface instead)")
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Attribute):
            continue
        holder = node.value
        held = holder.id if isinstance(holder, ast.Name) else getattr(holder, "attr", None)
        if held in SUPERVISOR_NAMES:
            found.append(f"line {node.lineno}: {module} reaches through the supervisor ({held}.{node.attr})")
        elif node.attr in WIRING_NAMES:
            found.append(f"line {node.lineno}: {module} reaches into a wiring (.{node.attr})")
    return found


def _edge_files() -> list[Path]:
    return [path for path in _our_files() if _edge_of(_module_name(path)) is not None]


def test_the_edges_exist() -> None:
    names = {_module_name(p) for p in _edge_files()}
    assert {"supervisor.api.server", "supervisor.systemd.service", "supervisor.demo.runner"} <= names


@pytest.mark.parametrize("path", _edge_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_the_edges_do_not_reach_through_the_supervisor(path: Path) -> None:
    source = path.read_text(encoding="utf-8")
    assert reach_throughs(source, _module_name(path), path.name == "__init__.py") == []


@pytest.mark.parametrize(
    ("module", "source", "bad"),
    [
        # what the edges did before the composition root (docs/runtime.md, "The composition root"): each of these fails
        ("supervisor.api.board", "from supervisor.runtime.supervisor import Supervisor", True),
        ("supervisor.api.control", "from supervisor.runtime.durable import Durable", True),
        ("supervisor.demo.runner", "from supervisor.runtime.wiring import Wiring", True),
        ("supervisor.demo.runner", "from supervisor.runtime import supervisor", True),
        ("supervisor.api.board", "x = self._supervisor.wiring.circuits.all()", True),
        ("supervisor.api.control", "self.supervisor.bus.publish(event)", True),
        ("supervisor.systemd.service", "clock = supervisor.wiring.clock", True),
        ("supervisor.demo.summary", "n = sum(t.refreshes for t in daemon.wiring.tokens.values())", True),
        ("supervisor.demo.runner", "runner = supervisor.runners.get(sid)", True),
        # what they do now: interfaces handed in
        ("supervisor.api.board", "from supervisor.runtime.sessions import SessionReader", False),
        ("supervisor.systemd.service", "from supervisor.runtime.main import Service", False),
        ("supervisor.demo.runner", "from supervisor.runtime.assembly import Daemon", False),
        ("supervisor.api.board", "runner = self._sessions.runners.get(sid)", False),
        ("supervisor.demo.summary", "n = sum(t.refreshes for t in daemon.tokens.values())", False),
        # the assembly may: only the edges are held to it
        ("supervisor.api.server", "from supervisor.runtime.assembly import Daemon", True),
        ("supervisor.runtime.assembly", "tokens = supervisor.wiring.tokens", False),
        ("supervisor.cli.run_cmd", "from supervisor.runtime.wiring import Wiring", False),
    ],
)
def test_the_reach_check_catches_what_it_should(module: str, source: str, bad: bool) -> None:
    assert bool(reach_throughs(source, module)) is bad


# -- one attempt path --------------------------------------------------------------------------------

#: the shells, the only modules that call an Endpoint: the daemon's async shell; the library's door
#: (each endpoint under its lock) and its sync and async shells (docs/library.md)
ENDPOINT_SHELLS = (
    "supervisor.attempts.shell",
    "supervisor.library.gate",
    "supervisor.library.sync_shell",
    "supervisor.library.async_shell",
)
#: who may make (not call) Endpoints and the machines inside them
ENDPOINT_MAKERS = ("machines.registry",)
#: the machines an Endpoint drives, by the module that defines them
DRIVEN = {
    "machines.circuit": ("Circuit",),
    "machines.pacing": ("Pacer", "echo_of_throttle"),
    "machines.retry_budget": ("RetryBudget",),
}
#: Circuit's inputs: each called in machines/endpoint.py alone (machines/circuit.py calls its own)
CIRCUIT_INPUTS = ("admit", "record_success", "record_failure", "probe_timed_out")
#: other methods named like a circuit input, by module and receiver (not circuits)
NOT_CIRCUITS = {
    ("supervisor.transports.notifications", "self._dedupe", "admit"),
    ("supervisor.transports.shared_channel", "self._dedupe", "admit"),
}


def _daemon_files() -> list[Path]:
    # the simulators stand in for the platforms: they have admission of their own
    return [f for f in _our_files() if not _module_name(f).startswith("supervisor.sim")]


def attempt_path_violations(source: str, module: str, is_package: bool = False) -> list[str]:
    """What ``module`` does that only the endpoint, its makers and its shells may do."""
    found = []
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = _resolve(node.module, node.level, module, is_package)
            if base == "machines.endpoint" and module not in (*ENDPOINT_SHELLS, *ENDPOINT_MAKERS):
                found.append(
                    f"line {node.lineno}: {module} imports machines.endpoint (only the shells call it)"
                )
            for alias in node.names:
                for home, names in DRIVEN.items():
                    allowed = ("machines.endpoint", *ENDPOINT_MAKERS, home, "machines")
                    if alias.name in names and base in (home, "machines") and module not in allowed:
                        found.append(
                            f"line {node.lineno}: {module} imports {alias.name} (driven by Endpoint only)"
                        )
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "machines.endpoint" and module not in (*ENDPOINT_SHELLS, *ENDPOINT_MAKERS):
                    found.append(
                        f"line {node.lineno}: {module} imports machines.endpoint (only the shells call it)"
                    )
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            name = node.func.attr
            if name not in CIRCUIT_INPUTS or module in ("machines.endpoint", "machines.circuit"):
                continue
            receiver = ast.unparse(node.func.value)
            if (module, receiver, name) not in NOT_CIRCUITS:
                found.append(f"line {node.lineno}: {module} calls {receiver}.{name}() (a circuit input)")
    return found


@pytest.mark.parametrize("path", _daemon_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_only_the_shells_call_an_endpoint_and_only_an_endpoint_drives_its_machines(path: Path) -> None:
    source = path.read_text(encoding="utf-8")
    assert attempt_path_violations(source, _module_name(path), path.name == "__init__.py") == []


def test_circuit_admit_has_one_call_site() -> None:
    sites = []
    for path in _daemon_files():
        module = _module_name(path)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "admit"
            ):
                receiver = ast.unparse(node.func.value)
                if (module, receiver, "admit") not in NOT_CIRCUITS:
                    sites.append((module, receiver))
    assert sites == [("machines.endpoint", "self._circuit")]


@pytest.mark.parametrize(
    ("source", "module", "bad"),
    [
        ("from machines.endpoint import Endpoint", "supervisor.runtime.session_runner", True),
        ("import machines.endpoint", "supervisor.rest.executor", True),
        ("from machines.endpoint import Endpoint", "supervisor.attempts.shell", False),
        ("from machines.circuit import Circuit", "supervisor.rest.backoff", True),
        ("from machines import Circuit", "supervisor.runtime.wiring", True),
        ("from machines.circuit import CircuitConfig, CircuitState", "supervisor.runtime.wiring", False),
        ("from machines.pacing import Pacer", "supervisor.runtime.session_runner", True),
        ("from machines.pacing import echo_of_throttle", "supervisor.rest.executor", True),
        ("from machines.pacing import PacingConfig, PacerReport", "supervisor.runtime.hooks", False),
        ("from machines.retry_budget import RetryBudget", "supervisor.rest.backoff", True),
        ("from machines.pacing import Pacer", "machines.registry", False),
        ("breaker.admit()", "supervisor.rest.executor", True),
        ("self._circuit.record_failure(event, 0)", "supervisor.runtime.session_runner", True),
        ("circuits.get(e).record_success()", "supervisor.attributes.sender", True),
        ("self._circuit.admit()", "machines.endpoint", False),
        ("self._dedupe.admit(channel, message)", "supervisor.transports.notifications", False),
    ],
)
def test_the_attempt_path_check_catches_what_it_should(source: str, module: str, bad: bool) -> None:
    assert bool(attempt_path_violations(source, module)) is bad
