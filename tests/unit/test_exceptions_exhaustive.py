"""Every exception httpx and websockets can raise is mapped by the taxonomy (httpx's own
``test_httpcore_all_exceptions_mapped`` pattern): a library upgrade that adds one fails here. And every
exception class of ours sits in the tree supervisor/errors.py draws, under the base it has."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import ssl
import warnings
from types import ModuleType

import httpx
import pytest
import websockets.exceptions

from supervisor import errors
from supervisor.taxonomy import Classifier, load_taxonomy
from supervisor.taxonomy.normalize import canonical_exception


def _exception_names(module: ModuleType, public_prefix: str) -> set[str]:
    names = set(getattr(module, "__all__", ())) | {n for n in dir(module) if not n.startswith("_")}
    found = set()
    with warnings.catch_warnings():
        # websockets exposes deprecated aliases lazily, with a DeprecationWarning
        warnings.simplefilter("ignore")
        for name in names:
            try:
                obj = getattr(module, name)
            except AttributeError:
                continue
            if (
                inspect.isclass(obj)
                and issubclass(obj, BaseException)
                and obj.__module__.startswith(module.__name__.split(".")[0])
            ):
                found.add(public_prefix + name)
    return found


def test_every_httpx_exception_is_mapped() -> None:
    tax = load_taxonomy("v1")
    names = _exception_names(httpx, "httpx.")
    assert len(names) > 20, names  # the enumeration itself works
    missing = sorted(n for n in names if n not in tax.exceptions)
    assert not missing, f"add these to [exceptions] in the taxonomy: {missing}"


def test_every_websockets_exception_is_mapped() -> None:
    tax = load_taxonomy("v1")
    names = _exception_names(websockets.exceptions, "websockets.exceptions.")
    assert len(names) > 15, names
    missing = sorted(n for n in names if n not in tax.exceptions)
    assert not missing, f"add these to [exceptions] in the taxonomy: {missing}"


def test_every_ssl_exception_is_mapped() -> None:
    tax = load_taxonomy("v1")
    names = {
        f"ssl.{n}"
        for n, obj in vars(ssl).items()
        if inspect.isclass(obj) and issubclass(obj, ssl.SSLError) and not n.startswith("_")
    }
    missing = sorted(n for n in names if n not in tax.exceptions)
    assert not missing, missing


@pytest.mark.parametrize(
    "exc",
    [
        httpx.ConnectTimeout("x"),
        httpx.ReadError("x"),
        websockets.exceptions.ConnectionClosedError(None, None),
        ConnectionResetError(),
        TimeoutError(),
        ssl.SSLCertVerificationError(),
    ],
)
def test_real_exception_types_resolve_by_qualified_name(exc: BaseException) -> None:
    """What a transport would send (module + qualname) resolves to a listed, non-default entry."""
    tax = load_taxonomy("v1")
    qualified = f"{type(exc).__module__}.{type(exc).__qualname__}"
    assert canonical_exception(qualified) in tax.exceptions, qualified
    event = Classifier(tax).classify_object(
        {"platform": "genesys", "channel": "rest", "exception": qualified}
    )
    assert event.code != "UNKNOWN_ERROR"


# -- the drawn tree (supervisor/errors.py): every exception class of ours is in it, under its base --------


def drawn_tree(doc: str) -> dict[str, str | None]:
    """``{name: drawn parent}`` from the ``::`` blocks of the errors docstring (a root's parent: None)."""
    tree: dict[str, str | None] = {}
    stack: list[str] = []
    in_block = False
    for line in doc.splitlines():
        if line.endswith("::"):
            in_block = True
            continue
        if in_block and line and not line.startswith("    "):
            in_block = False
        match = re.match(r"^    ((?:│   |    )*)(?:[├└]── )?([A-Za-z_][\w.]*)", line) if in_block else None
        if match is None:
            continue
        depth = len(match.group(1)) // 4 + (1 if "── " in line[: len(match.group(0))] else 0)
        del stack[depth:]
        tree[match.group(2)] = stack[-1] if stack else None
        stack.append(match.group(2))
    return tree


def _drawn_name(cls: type) -> str:
    """A class as the drawing names it: bare for supervisor.errors and builtins, else by module."""
    module = cls.__module__
    if module in ("supervisor.errors", "builtins"):
        return cls.__qualname__
    return f"{module.removeprefix('supervisor.')}.{cls.__qualname__}"


def our_exception_classes() -> dict[str, type]:
    import supervisor

    found: dict[str, type] = {}
    for package in (supervisor, importlib.import_module("machines")):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if info.name.endswith("__main__"):
                continue
            module = importlib.import_module(info.name)
            for obj in vars(module).values():
                if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == info.name:
                    found[_drawn_name(obj)] = obj
    return found


def misdrawn(tree: dict[str, str | None], classes: dict[str, type]) -> list[str]:
    problems = []
    for name, cls in sorted(classes.items()):
        if name not in tree:
            problems.append(f"{name} ({cls.__module__}) is not drawn in supervisor/errors.py")
            continue
        parent = tree[name]
        if parent is None and all(b.__module__ == "builtins" for b in cls.__bases__):
            continue  # a root of the drawing (SupervisorError): Exception's own
        bases = {_drawn_name(b) for b in cls.__bases__} | {
            f"{b.__module__}.{b.__qualname__}" for b in cls.__bases__
        }
        if parent not in bases:
            problems.append(f"{name} is drawn under {parent}, its bases are {sorted(bases)}")
    return problems


def test_every_exception_class_is_in_the_drawn_tree() -> None:
    classes = our_exception_classes()
    assert {"SupervisorError", "TransportFailure", "attributes.model.Refused"} <= set(classes)
    assert misdrawn(drawn_tree(errors.__doc__ or ""), classes) == []


def test_the_tree_check_catches_what_it_should() -> None:
    tree = drawn_tree(errors.__doc__ or "")
    assert tree["ConnectionLost"] == "TransportFailure" and tree["SupervisorError"] is None

    class Undrawn(errors.SupervisorError):
        pass

    assert misdrawn(tree, {"Undrawn": Undrawn}) == [
        f"Undrawn ({__name__}) is not drawn in supervisor/errors.py"
    ]
    # drawn under another base than its own
    assert misdrawn({**tree, "ConnectionLost": "SessionError"}, {"ConnectionLost": errors.ConnectionLost})
