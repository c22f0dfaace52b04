"""The CLI loads what the command needs (docs/runtime.md, "Floors").

Every command used to cost about 1.1 s of CPU, ``--help`` and ``ctl status`` included, because the
demo, the simulators and aiohttp were imported up front. Each short command here runs in a fresh
interpreter through the console script's target (``supervisor.__main__:main``), as a monitoring
script runs it, and the modules loaded at its exit are read: none of the simulators, the demo,
aiohttp or OpenTelemetry. ``ctl status`` and ``watch`` with no daemon (exit 1) count too. The
timings are in tests/bench/bench_cli_start.py and docs/benchmarks.md.

The top-level ``--help`` still lists every command with its summary; the summaries are kept beside
the commands' import paths (supervisor/cli/__init__.py, ``COMMANDS``) and held here to the
commands' own docstrings. The packages' lazy re-exports (PEP 562) resolve to the names they stand for.
"""

from __future__ import annotations

import ast
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

import supervisor
import supervisor.taxonomy
from supervisor.cli import COMMANDS, cli

ROOT = Path(__file__).resolve().parents[2]
#: what a short command must not import: only `sim` and `demo` (and a configured exporter) need them
HEAVY = ("supervisor.sim", "supervisor.demo", "aiohttp", "opentelemetry")
ENVELOPE = '{"platform":"genesys","channel":"rest","status":429,"headers":{"Retry-After":"3"}}\n'

# runs the CLI as the console script does, then writes the exit code and every module loaded
PROBE = """
import sys
report, sys.argv = sys.argv[1], ["session-supervisor", *sys.argv[2:]]
code = 0
try:
    from supervisor.__main__ import main
    main()
except SystemExit as exc:
    code = exc.code
finally:
    loaded = sorted(sys.modules)
    import json
    with open(report, "w") as out:
        json.dump({"exit": code, "modules": loaded}, out)
"""


def run_cli(tmp_path: Path, *args: str, stdin: str = "") -> tuple[int, list[str], str]:
    """(exit code, modules loaded at exit, stdout) of one command in a fresh interpreter."""
    report = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(report), *args],
        input=stdin,
        env={**os.environ, "COLUMNS": "100"},  # the help's width, as CliRunner's below
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    result = json.loads(report.read_text())
    return result["exit"], result["modules"], done.stdout


def heavy(modules: list[str]) -> list[str]:
    return [m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY)]


@pytest.mark.parametrize(
    ("args", "stdin", "exit_code"),
    [
        pytest.param(("--help",), "", 0, id="--help"),
        pytest.param(("--version",), "", 0, id="--version"),
        pytest.param(("ctl", "--socket", "{absent}", "status"), "", 1, id="ctl status, no daemon"),
        pytest.param(("ctl", "--socket", "{absent}", "status", "--json"), "", 1, id="ctl status --json"),
        pytest.param(("ctl", "--socket", "{absent}", "sessions"), "", 1, id="ctl sessions"),
        pytest.param(("ctl", "--help"), "", 0, id="ctl --help"),
        pytest.param(("watch", "--socket", "{absent}"), "", 1, id="watch, no daemon"),
        pytest.param(("watch", "--socket", "{absent}", "--json"), "", 1, id="watch --json"),
        pytest.param(("classify",), ENVELOPE, 0, id="classify"),
        pytest.param(("classify", "--sample", "--format", "table"), "", 0, id="classify --sample table"),
        pytest.param(("taxonomy", "list"), "", 0, id="taxonomy list"),
        pytest.param(("taxonomy", "check", "v2"), "", 0, id="taxonomy check"),
        pytest.param(("taxonomy", "diff", "v1", "v2"), "", 0, id="taxonomy diff"),
        pytest.param(("policy", "show"), "", 0, id="policy show"),
    ],
)
def test_a_short_command_imports_no_simulator_demo_aiohttp_or_opentelemetry(
    tmp_path: Path, args: tuple[str, ...], stdin: str, exit_code: int
) -> None:
    argv = [a.format(absent=tmp_path / "nobody-listens.sock") for a in args]
    code, modules, _ = run_cli(tmp_path, *argv, stdin=stdin)
    assert code == exit_code
    assert heavy(modules) == []


#: what only the daemon needs: the HTTP and WebSocket clients, the state machines, the session runner
DAEMON_SIDE = ("httpx", "websockets", "statemachine", "machines", "supervisor.runtime.sessions")


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(("ctl", "--socket", "{absent}", "status"), id="ctl status"),
        pytest.param(
            ("ctl", "--socket", "{absent}", "sessions", "add", "wm-9", "--kind", "webmessaging"),
            id="ctl sessions add",
        ),
        pytest.param(("watch", "--socket", "{absent}", "--json"), id="watch"),
    ],
)
def test_a_socket_command_imports_nothing_of_the_daemon(tmp_path: Path, args: tuple[str, ...]) -> None:
    """``ctl`` and ``watch`` talk to a socket: importing the session verbs' server side once made each
    call load the runtime, httpx and the state machines (~0.25 s of CPU more per call)."""
    code, modules, _ = run_cli(tmp_path, *(a.format(absent=tmp_path / "nobody-listens.sock") for a in args))
    assert code == 1
    assert [m for m in modules if any(m == d or m.startswith(d + ".") for d in DAEMON_SIDE)] == []


def test_the_probe_sees_them_when_a_command_does_load_them(tmp_path: Path) -> None:
    """The control: ``demo --help`` imports the demo's scenarios, and the probe says so."""
    code, modules, _ = run_cli(tmp_path, "demo", "--help")
    assert code == 0
    assert "supervisor.demo.scenarios" in heavy(modules)


def test_import_supervisor_loads_nothing_but_its_two_small_modules() -> None:
    probe = (
        "import sys; before = set(sys.modules); import supervisor; print(*sorted(set(sys.modules) - before))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=60, check=True
    )
    assert done.stdout.split() == ["supervisor", "supervisor.distribution", "supervisor.exports"]


def test_help_lists_every_command_without_importing_any(tmp_path: Path) -> None:
    code, modules, text = run_cli(tmp_path, "--help")
    assert code == 0
    assert [m for m in modules if m in {c.module for c in COMMANDS.values()}] == []
    listed = text[text.index("Commands:") :].splitlines()[1:]
    assert [line.split()[0] for line in listed if line.strip()] == sorted(COMMANDS)
    # the same lines click prints once every command is imported (their own docstrings)
    for name in COMMANDS:
        cli.get_command(click.Context(cli), name)
    loaded = CliRunner().invoke(cli, ["--help"], terminal_width=100).output
    assert text[text.index("Commands:") :] == loaded[loaded.index("Commands:") :]


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_summary_is_the_first_paragraph_of_its_commands_docstring(name: str) -> None:
    where = COMMANDS[name]
    command = getattr(importlib.import_module(where.module), where.attribute)
    assert isinstance(command, click.Command) and command.help is not None
    first = " ".join(command.help.split("\n\n")[0].split())
    assert where.summary == first
    stand_in = click.Command(name, help=where.summary)
    for limit in (30, 45, 80, 200):
        assert stand_in.get_short_help_str(limit) == command.get_short_help_str(limit)


def test_an_unknown_command_is_still_one_usage_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "supervisor", "nosuchcommand"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert line.startswith("session-supervisor: usage error: No such command 'nosuchcommand'")


# -- lazy re-exports (PEP 562) ------------------------------------------------------------------------


def _type_checking_imports(package: Path) -> dict[str, str]:
    """name -> module of the ``from M import N`` statements under ``if TYPE_CHECKING:`` in ``package``."""
    found: dict[str, str] = {}
    for node in ast.parse(package.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for stmt in node.body:
                if isinstance(stmt, ast.ImportFrom) and stmt.module and stmt.module.startswith("supervisor"):
                    found.update({alias.name: stmt.module for alias in stmt.names})
    return found


@pytest.mark.parametrize("package", [supervisor, supervisor.taxonomy], ids=lambda p: p.__name__)
def test_every_lazy_name_resolves_to_the_object_its_module_defines(package: object) -> None:
    exports: dict[str, str] = package._EXPORTS  # type: ignore[attr-defined]
    assert exports
    for name, module in exports.items():
        assert getattr(package, name) is getattr(importlib.import_module(module), name)
        assert name in dir(package)
    assert set(exports) <= set(package.__all__)  # type: ignore[attr-defined]
    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        package.no_such_name  # type: ignore[attr-defined]  # noqa: B018


def test_the_taxonomy_types_mypy_reads_are_the_names_it_exports() -> None:
    # under TYPE_CHECKING for mypy, in _EXPORTS at run time: one list in two places, held equal
    imports = _type_checking_imports(ROOT / "supervisor" / "taxonomy" / "__init__.py")
    assert imports == supervisor.taxonomy._EXPORTS
    assert set(imports) == set(supervisor.taxonomy.__all__)


def test_importing_the_taxonomy_package_imports_none_of_its_modules() -> None:
    probe = (
        "import sys; import supervisor.taxonomy; "
        "print(*sorted(m for m in sys.modules if m.startswith('supervisor.taxonomy.')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=60, check=True
    )
    assert done.stdout.split() == []
