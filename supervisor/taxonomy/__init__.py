"""The versioned error taxonomy: envelopes, normalizers, classifier, response validation.

Pure decision code: imports no I/O library (tests/unit/test_import_rules.py enforces it).

The names below are re-exported lazily (:mod:`supervisor.exports`, PEP 562): importing the package,
or one of its modules, does not import the others. ``watch`` needs :class:`Platform` (its filter),
not the classifier and the loader (docs/runtime.md, "Floors"). For a type checker the same names are imported
under ``TYPE_CHECKING``; tests/unit/test_cli_imports.py holds that list and :data:`_EXPORTS` equal.
"""

from __future__ import annotations

from supervisor import exports as _exports

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from supervisor.taxonomy.classifier import SESSION_REQUIRED_FIELDS, Classifier
    from supervisor.taxonomy.envelope import RawError, envelope_from_json, envelope_from_object
    from supervisor.taxonomy.loader import (
        DEFAULT_VERSION,
        ENV_VAR,
        compile_taxonomy,
        load_taxonomy,
        resolve_version,
        shipped_versions,
    )
    from supervisor.taxonomy.model import (
        Channel,
        CodeSpec,
        Jitter,
        Platform,
        RetryPolicy,
        Scope,
        SdkErrorEvent,
        TaxonomyClass,
        Trigger,
    )
    from supervisor.taxonomy.rules import Taxonomy

#: each re-exported name and the module that defines it
_EXPORTS: dict[str, str] = {
    "SESSION_REQUIRED_FIELDS": "supervisor.taxonomy.classifier",
    "Classifier": "supervisor.taxonomy.classifier",
    "RawError": "supervisor.taxonomy.envelope",
    "envelope_from_json": "supervisor.taxonomy.envelope",
    "envelope_from_object": "supervisor.taxonomy.envelope",
    "DEFAULT_VERSION": "supervisor.taxonomy.loader",
    "ENV_VAR": "supervisor.taxonomy.loader",
    "compile_taxonomy": "supervisor.taxonomy.loader",
    "load_taxonomy": "supervisor.taxonomy.loader",
    "resolve_version": "supervisor.taxonomy.loader",
    "shipped_versions": "supervisor.taxonomy.loader",
    "Channel": "supervisor.taxonomy.model",
    "CodeSpec": "supervisor.taxonomy.model",
    "Jitter": "supervisor.taxonomy.model",
    "Platform": "supervisor.taxonomy.model",
    "RetryPolicy": "supervisor.taxonomy.model",
    "Scope": "supervisor.taxonomy.model",
    "SdkErrorEvent": "supervisor.taxonomy.model",
    "TaxonomyClass": "supervisor.taxonomy.model",
    "Trigger": "supervisor.taxonomy.model",
    "Taxonomy": "supervisor.taxonomy.rules",
}

__all__ = [
    "DEFAULT_VERSION",
    "ENV_VAR",
    "SESSION_REQUIRED_FIELDS",
    "Channel",
    "Classifier",
    "CodeSpec",
    "Jitter",
    "Platform",
    "RawError",
    "RetryPolicy",
    "Scope",
    "SdkErrorEvent",
    "Taxonomy",
    "TaxonomyClass",
    "Trigger",
    "compile_taxonomy",
    "envelope_from_json",
    "envelope_from_object",
    "load_taxonomy",
    "resolve_version",
    "shipped_versions",
]


def __getattr__(name: str) -> Any:
    return _exports.resolve(__name__, _EXPORTS, name)


def __dir__() -> list[str]:
    return _exports.names(globals(), _EXPORTS)
