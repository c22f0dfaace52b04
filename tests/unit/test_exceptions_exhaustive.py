"""Every exception httpx and websockets can raise is mapped by the taxonomy (httpx's own
``test_httpcore_all_exceptions_mapped`` pattern): a library upgrade that adds one fails here."""

from __future__ import annotations

import inspect
import ssl
import warnings
from types import ModuleType

import httpx
import pytest
import websockets.exceptions

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
