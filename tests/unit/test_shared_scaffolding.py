"""The tests' scaffolding stays shared: no test module keeps a copy of its own.

Checked on the source with ``ast``, in every module under tests/ but the shared ones
(tests/harness/__init__.py says what is where):

1. ``anyio_backend`` is defined once, in tests/conftest.py.
2. No fixture makes a Genesys or CXone simulator (``GenesysSimulator(...)``, ``CxoneSimulator(...)``)
   but those of tests/harness/simulators.py: a test asks for ``genesys_sim`` / ``cxone_sim``
   (configured by the marker of the same name) or for the ``start_genesys`` / ``start_cxone``
   factories.
3. No clock but tests/harness/clocks.py's: no class that reads like a clock (named ``...Clock``,
   ``...Timers`` or ``...Sleep``, or with a ``monotonic`` method, or with both ``advance`` and
   ``sleep``), no ``clock`` fixture, and no sleep whose whole body moves a fake clock (record the
   wait, advance, yield: ``tests.harness.clocks.advancing``). A sleep that does more (counts what the
   simulator saw while it waited, parks forever) is the test's own and stays.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]

ANYIO_HOME = "conftest.py"
SIMULATOR_HOME = "harness/simulators.py"
CLOCK_HOME = "harness/clocks.py"
SIMULATORS = frozenset({"GenesysSimulator", "CxoneSimulator"})
CLOCK_SUFFIXES = ("Clock", "Timers", "Timer", "Sleep")


def _name(node: ast.expr) -> str | None:
    """``x`` for ``x``, ``x.y.z`` -> ``z``: the name a call or a decorator ends with."""
    if isinstance(node, ast.Call):
        return _name(node.func)
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _is_fixture(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any(_name(decorator) == "fixture" for decorator in function.decorator_list)


def _functions(tree: ast.AST) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node


def _flat(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements of ``body``, those of an ``if`` without ``else`` in its place (``if slept is not
    None: slept.append(seconds)``), docstrings left out."""
    for statement in body:
        if isinstance(statement, ast.If) and not statement.orelse:
            yield from _flat(statement.body)
        elif not (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)):
            yield statement


def _only_moves_a_clock(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A sleep copy (async): every statement records the wait (``list.append(seconds)``), advances a
    clock or yields, and one advances."""
    if not isinstance(function, ast.AsyncFunctionDef):
        return False
    if not function.args.args:
        return False
    asked = function.args.args[-1].arg  # ``seconds`` (after ``self`` in a method)
    kinds: set[str] = set()
    for statement in _flat(function.body):
        if not isinstance(statement, ast.Expr):
            return False
        call = statement.value.value if isinstance(statement.value, ast.Await) else statement.value
        if not isinstance(call, ast.Call):
            return False
        name = _name(call)
        if name == "advance":
            # by what it was asked (``seconds``, ``max(0.0, seconds)``); a fixed step is the test's own
            if not any(isinstance(n, ast.Name) and n.id == asked for a in call.args for n in ast.walk(a)):
                return False
            kinds.add("advance")
        elif name == "append" and all(isinstance(a, ast.Name) for a in call.args):
            continue
        elif name != "checkpoint":
            return False
    return "advance" in kinds


def copies(source: str, relative: str) -> list[str]:
    """What ``source`` (the module at ``relative``, a path under tests/) defines that the shared
    scaffolding already has: one line each, naming the module and the line."""
    tree = ast.parse(source, relative)
    found: list[str] = []

    def say(node: ast.stmt, what: str) -> None:
        found.append(f"{relative}:{node.lineno}: {what}")

    for function in _functions(tree):
        if function.name == "anyio_backend" and relative != ANYIO_HOME:
            say(function, "its own anyio_backend (tests/conftest.py has the one)")
        if _is_fixture(function) and relative != SIMULATOR_HOME:
            made = sorted(
                {n for c in ast.walk(function) if isinstance(c, ast.Call) and (n := _name(c)) in SIMULATORS}
            )
            if made:
                say(
                    function,
                    f"fixture {function.name} makes a simulator ({', '.join(made)}): use genesys_sim / "
                    "cxone_sim or start_genesys / start_cxone (tests/harness/simulators.py)",
                )
        if relative == CLOCK_HOME:
            continue
        if _is_fixture(function) and function.name == "clock":
            say(function, "its own clock fixture (tests/harness/clocks.py; @pytest.mark.clock(start=...))")
        elif _only_moves_a_clock(function):
            say(
                function,
                f"{function.name} is a sleep that only moves a clock: tests.harness.clocks.advancing",
            )
    if relative != CLOCK_HOME:
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            methods = {f.name for f in node.body if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)}
            if (
                node.name.endswith(CLOCK_SUFFIXES)
                or "monotonic" in methods
                or {"advance", "sleep"} <= methods
            ):
                say(node, f"class {node.name} is a clock of its own (tests/harness/clocks.py)")
    return found


def _modules() -> Iterator[tuple[str, str]]:
    for path in sorted(TESTS.rglob("*.py")):
        yield path.relative_to(TESTS).as_posix(), path.read_text(encoding="utf-8")


def test_no_test_module_keeps_its_own_backend_simulator_fixture_or_clock() -> None:
    found = [line for relative, source in _modules() for line in copies(source, relative)]
    assert found == [], "\n".join(found)


def test_the_shared_modules_are_where_the_check_looks() -> None:
    """The exemptions name files that exist and hold what they are exempt for: a move of the shared
    scaffolding fails here, not by silently checking nothing."""
    assert "def anyio_backend" in (TESTS / ANYIO_HOME).read_text()
    assert "GenesysSimulator(" in (TESTS / SIMULATOR_HOME).read_text()
    assert "CxoneSimulator(" in (TESTS / SIMULATOR_HOME).read_text()
    assert "def clock(" in (TESTS / CLOCK_HOME).read_text()


COPY_OF_THE_BACKEND = """
@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
"""

COPY_OF_A_SIMULATOR_FIXTURE = """
@pytest.fixture
async def sim() -> AsyncIterator[GenesysSimulator]:
    async with GenesysSimulator(GenesysSimConfig(max_channels=1), seed=3) as s:
        yield s

@pytest_asyncio.fixture(scope="module")
async def cxone():
    async with sim_module.CxoneSimulator() as s:
        yield s
"""

COPY_OF_A_CLOCK = """
class ClockSleep:
    def __init__(self, clock):
        self.clock = clock

class Ticking:
    def monotonic(self) -> float:
        return 0.0

class Parked:
    def advance(self, s): ...
    async def sleep(self, s): ...

@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(start=5.0)

def rig(clock, slept):
    async def sleep(seconds: float) -> None:
        '''a copy'''
        slept.append(seconds)
        clock.advance(seconds)
        await anyio.lowlevel.checkpoint()
    return sleep
"""

NOT_COPIES = """
@pytest.fixture
async def rig(cxone_sim: CxoneSimulator) -> Rig:
    return Rig(cxone_sim)

async def test_x(start_genesys) -> None:
    sim = await start_genesys(GenesysSimConfig(max_channels=1))
    async with GenesysSimulator(seed=4) as other:  # a test's body may hold one for a property's example
        pass

class Machine(RuleBasedStateMachine):
    def advance(self, seconds: float) -> None:  # a rule, not a clock
        self.clock.advance(seconds)

async def test_y(clock) -> None:
    async def sleep(seconds: float) -> None:  # does more than move the clock: the test's own
        seen.append(sim.recorder.request_count())
        clock.advance(seconds)
        await anyio.lowlevel.checkpoint()
"""


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (COPY_OF_THE_BACKEND, ["anyio_backend"]),
        (COPY_OF_A_SIMULATOR_FIXTURE, ["fixture sim makes", "fixture cxone makes"]),
        (COPY_OF_A_CLOCK, ["own clock fixture", "sleep that only moves", "ClockSleep", "Ticking", "Parked"]),
        (NOT_COPIES, []),
    ],
    ids=["backend", "simulator-fixture", "clock", "not-copies"],
)
def test_the_check_names_each_kind_of_copy(source: str, expected: list[str]) -> None:
    found = copies(source, "integration/test_example.py")
    assert len(found) == len(expected), found
    for what in expected:
        assert any(what in line for line in found), (what, found)


def test_the_shared_modules_may_define_what_they_share() -> None:
    assert copies(COPY_OF_THE_BACKEND, ANYIO_HOME) == []
    assert copies(COPY_OF_A_SIMULATOR_FIXTURE, SIMULATOR_HOME) == []
    assert copies(COPY_OF_A_CLOCK, CLOCK_HOME) == []
