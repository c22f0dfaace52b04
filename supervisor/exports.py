"""Names a package re-exports, imported when first used (PEP 562: a module's ``__getattr__``).

``supervisor`` and ``supervisor.taxonomy`` re-export names from their modules; importing the package
imports none of those modules, so a command imports only what it touches (docs/runtime.md, "Floors":
``watch`` needs one enum of the taxonomy, not its classifier and loader). A package keeps its
``import`` statements under ``TYPE_CHECKING`` for mypy, and a table ``name -> module`` that
:func:`resolve` reads at run time; tests/unit/test_cli_imports.py holds the two equal.

No import but the standard library's ``importlib``: ``import supervisor`` loads this and nothing else.
"""

from __future__ import annotations

import importlib

# typing is not imported for the annotations alone (mypy reads any ``TYPE_CHECKING`` as true)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any


def resolve(package: str, exports: Mapping[str, str], name: str) -> Any:
    """``package.name`` from the module ``exports`` names, kept on the package for the next access."""
    module = exports.get(name)
    if module is None:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    setattr(importlib.import_module(package), name, value)  # the next access is a plain attribute
    return value


def names(namespace: Mapping[str, object], exports: Mapping[str, str]) -> list[str]:
    """``dir(package)``: what it holds and what it re-exports."""
    return sorted({*namespace, *exports})
