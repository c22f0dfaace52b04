"""The versioned error taxonomy: envelopes, normalizers, classifier, response validation.

Pure decision code: imports no I/O library (tests/unit/test_import_rules.py enforces it).
"""

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
