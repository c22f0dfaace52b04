"""The decision core does no I/O: its modules import no I/O library (design.md, "Data flows one way").

Checked on the source with ``ast`` (direct imports, including ``importlib.import_module``
and ``__import__`` with a constant name) for every module of machines/,
supervisor/taxonomy/, supervisor/retry/ and supervisor/clock.py. machines/ may import from
``supervisor`` only the taxonomy, retry, clock and errors modules.

Transitively, importing the taxonomy and the retry policy loads no I/O module either
(checked in a fresh interpreter). machines/ is exempt from that second check only because
python-statemachine itself imports asyncio (its async engine); our own machine code is not.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

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
MACHINES_MAY_USE = ("supervisor.taxonomy", "supervisor.retry", "supervisor.clock", "supervisor.errors")


def _pure_files() -> list[Path]:
    files = [
        *sorted((ROOT / "machines").rglob("*.py")),
        *sorted((ROOT / "supervisor" / "taxonomy").rglob("*.py")),
        *sorted((ROOT / "supervisor" / "retry").rglob("*.py")),
        ROOT / "supervisor" / "clock.py",
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
        "import sys; import supervisor.taxonomy, supervisor.retry, supervisor.clock; "
        "print(' '.join(sorted(sys.modules)))"
    )
    loaded = set(
        subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT
        ).stdout.split()
    )
    offenders = sorted(m for m in loaded if any(m == f or m.startswith(f + ".") for f in FORBIDDEN))
    assert offenders == []
