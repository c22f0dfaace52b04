"""session-supervisor: keeps contact-center sessions alive and honest.

The package is import-light on purpose: decision code (``supervisor.taxonomy``,
``supervisor.retry``) and ``machines`` import no I/O library, and importing ``supervisor`` itself
pulls in nothing but :mod:`supervisor.distribution` and :mod:`supervisor.exports`. The names it
re-exports (:data:`_EXPORTS`) are imported when first used, not when the package is (PEP 562):
``import supervisor`` stays as cheap as the CLI needs it (tests/unit/test_cli_imports.py), and
``supervisor.GenesysSimulator`` still works.

The import name is shared with supervisord (PyPI ``supervisor``): install this project into a
virtual environment of its own (README, "Install"; :mod:`supervisor.distribution`).
"""

from __future__ import annotations

from supervisor import exports as _exports
from supervisor.distribution import DISTRIBUTION, VERSION

# typing is not imported for the annotations alone (mypy reads any ``TYPE_CHECKING`` as true)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__version__ = VERSION

#: the names re-exported from the package, each with the module that defines it, imported on first use.
#: They are for users of the package: our own modules import a name from its module, and the import-rules
#: test reads this table (``from supervisor import X`` is an import of X's module, floors and all). No
#: ``TYPE_CHECKING`` import repeats them here: the package root sits on the ground floor, and an import
#: of the simulators from it would be one up the stack; a type checker sees them through ``__getattr__``.
_EXPORTS: dict[str, str] = {
    # the loopback simulators' Python API (docs/simulators.md, docs/simulators-cxone.md, "Python API")
    "GenesysSimulator": "supervisor.sim.genesys",
    "GenesysSimConfig": "supervisor.sim.genesys",
    "CxoneSimulator": "supervisor.sim.cxone",
    "CxoneSimConfig": "supervisor.sim.cxone",
    "Fault": "supervisor.sim.faults",
    "FaultKind": "supervisor.sim.faults",
    # the injected clock those examples drive the simulators with
    "FakeClock": "supervisor.clock",
    # the decision core as a library (docs/library.md): each name is a contract, changed only after
    # one minor release of DeprecationWarning (docs/library.md, "Compatibility")
    "ResilientTransport": "supervisor.http",
    "resilient": "supervisor.library.decorator",
    "classify": "supervisor.library.classify",
    "Tokens": "supervisor.library.tokens",
    "RetryDetails": "supervisor.library.hooks",
    "RetryHook": "supervisor.library.hooks",
    "SdkError": "supervisor.errors",
    "CircuitOpenError": "supervisor.errors",
    "SdkErrorEvent": "supervisor.taxonomy.model",
    "TaxonomyClass": "supervisor.taxonomy.model",
    "Trigger": "supervisor.taxonomy.model",
}

__all__ = [
    "DISTRIBUTION",
    "CircuitOpenError",
    "CxoneSimConfig",
    "CxoneSimulator",
    "FakeClock",
    "Fault",
    "FaultKind",
    "GenesysSimConfig",
    "GenesysSimulator",
    "ResilientTransport",
    "RetryDetails",
    "RetryHook",
    "SdkError",
    "SdkErrorEvent",
    "TaxonomyClass",
    "Tokens",
    "Trigger",
    "__version__",
    "classify",
    "resilient",
]


def __getattr__(name: str) -> Any:
    return _exports.resolve(__name__, _EXPORTS, name)


def __dir__() -> list[str]:
    return _exports.names(globals(), _EXPORTS)
