"""Load and check a taxonomy file (TOML), and compile it into lookup tables.

Errors name the file, the key and the problem, e.g.
``v2.toml: codes.RATE_LIMITED.policy: unknown policy 'ratelimit' (known: fail_fast, ...)``.

Every file is read with one bounded read (:func:`read_capped`, :data:`MAX_TAXONOMY_BYTES`) and
parsed by :func:`parse_toml`, which refuses what nests deeper than ``MAX_NESTING`` levels before
it can exhaust the stack or take quadratic time (docs/taxonomy.md, "Limits").

The active version is chosen by config (``taxonomy.version``) and can be overridden by the
environment variable ``SESSION_SUPERVISOR_TAXONOMY`` for a staged rollout (seed section 1:
"Use feature flags to toggle taxonomy versions during platform upgrades"). A version is
either the name of a file shipped in ``supervisor/taxonomy/data`` (``v1``) or a path.
"""

from __future__ import annotations

import os
import re
import stat
import tomllib
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from supervisor.errors import TaxonomyError, located
from supervisor.taxonomy.envelope import MAX_NESTING, nesting_exceeds
from supervisor.taxonomy.model import (
    Channel,
    CodeSpec,
    Jitter,
    Platform,
    RetryPolicy,
    Scope,
    TaxonomyClass,
    Trigger,
)
from supervisor.taxonomy.responses import compile_responses
from supervisor.taxonomy.rules import OperationMatcher, Rule, Taxonomy, parse_status_spec

ENV_VAR = "SESSION_SUPERVISOR_TAXONOMY"
#: v2 follows the vendors' clients (docs/taxonomy.md "Versions"); v1 stays shipped, unchanged
DEFAULT_VERSION = "v2"
SCHEMA = 1
# codes the classifier itself emits, so every taxonomy version must define them
REQUIRED_CODES = (
    "INCOMPLETE_RESPONSE",
    "CONVERSATION_STATE_DRIFT",
    "SESSION_ID_MISMATCH",
    "AGENT_SESSION_ENDED",
    "TOKEN_REFRESH_FAILED",
    "UNKNOWN_ERROR",
)

#: the largest taxonomy file read (the shipped v1 is 25 KiB)
MAX_TAXONOMY_BYTES = 1024 * 1024

_StrOrList = str | list[str]


class LimitError(ValueError):
    """A file or document is refused by one of the documented input limits (a size cap, a nesting
    depth, a file that is not a regular file); the message says which."""


class NotRegularFile(LimitError):
    """The path names a FIFO, a device, a directory or a socket: never read."""


# what st_mode says a path is, for the one-line refusal
_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISSOCK, "a socket"),
)


def _refuse_unless_regular(mode: int) -> None:
    if stat.S_ISREG(mode):
        return
    kind = next((name for test, name in _KINDS if test(mode)), "not a file")
    raise NotRegularFile(f"not a regular file ({kind})")


def read_capped(path: str | Path, cap: int) -> bytes:
    """A regular file's content, at most ``cap`` bytes: :class:`LimitError` past ``cap``,
    :class:`NotRegularFile` for anything else; ``OSError`` / ``ValueError`` as ``open``.

    Nothing here waits on another process. A FIFO's open(2) blocks until a writer comes (fifo(7)),
    and a daemon reading its configuration on its event loop then answers nobody, keeps no session
    alive and ignores SIGTERM. So the path is checked with stat(2) first (a device is
    never even opened), then opened ``O_NONBLOCK`` (a FIFO's open returns at once) and checked
    again with fstat(2) on what was opened (the path may have been replaced in between); only a
    regular file is read, with one bounded read of ``cap + 1`` bytes.
    """
    _refuse_unless_regular(os.stat(path).st_mode)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        _refuse_unless_regular(os.fstat(fd).st_mode)
        # O_NONBLOCK changes nothing for a regular file's reads; read(2) may still return short
        chunks: list[bytes] = []
        left = cap + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > cap:
        size = f"{cap // 1024 // 1024} MiB" if cap >= 1024 * 1024 else f"{cap // 1024} KiB"
        raise LimitError(f"larger than the {size} cap")
    return data


# tomllib spends time quadratic in the parts of one dotted key (``a.b.c = 1``, ``[a.b.c]``,
# ``{a.b.c = 1}``): minutes for a 1 MiB ``a.a.a...``. A chain of MAX_NESTING parts or more is
# refused before parsing: with the document's root that is past the cap whichever form holds it
# (``[a.b]`` nests a table one level deeper than ``a.b = 1``, so a cut at one more part let a
# 64-part ``a.a... = 1`` through while its ``[a.a...]`` was refused). The search is linear (a chain
# is tried only where one starts, and possessive quantifiers never backtrack).
_BARE = r"[A-Za-z0-9_-]++"
_QUOTED = r"""(?:"(?:[^"\\\n]|\\.)*+"|'[^'\n]*+')"""
_LONG_DOTTED_KEY = re.compile(
    rf"(?<![.A-Za-z0-9_-])(?:{_BARE}|{_QUOTED})(?:[ \t]*+\.[ \t]*+(?:{_BARE}|{_QUOTED})){{{MAX_NESTING - 1}}}"
)


def parse_toml(text: str) -> dict[str, Any]:
    """``tomllib.loads``; nested (or a dotted key) past ``MAX_NESTING`` is a :class:`LimitError`."""
    chain = _LONG_DOTTED_KEY.search(text)
    if chain is not None:
        line = text.count("\n", 0, chain.start()) + 1
        raise LimitError(f"line {line}: a dotted key of {MAX_NESTING} parts or more (past the nesting cap)")
    try:
        doc = tomllib.loads(text)
    except RecursionError:  # tomllib hit the interpreter's limit: far past MAX_NESTING
        raise LimitError(f"nested deeper than {MAX_NESTING} levels") from None
    if nesting_exceeds(doc, MAX_NESTING):
        raise LimitError(f"nested deeper than {MAX_NESTING} levels")
    return doc


class _PolicyFile(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    max_retries: int
    base_delay_ms: int = 0
    max_delay_ms: int = 0
    jitter: Jitter = Jitter.ADDITIVE
    honors_retry_after: bool = False
    retry_after_ceiling_ms: int = 180_000
    description: str = ""


class _CodeFile(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    # `class` is a Python keyword: the file key is "class"
    taxonomy_class: TaxonomyClass = msgspec.field(name="class")
    scope: Scope
    policy: str
    trigger: Trigger | None = None
    reconnect: bool = False
    reconcile_before_retry: bool = False
    graceful: bool = False
    replay_with_fresh_token: bool = False
    revokes_credential: bool = False
    circuit_neutral: bool = False
    description: str = ""


class _OperationFile(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    name: str
    platform: _StrOrList | None = None
    channel: _StrOrList | None = None
    method: _StrOrList | None = None
    endpoint: _StrOrList | None = None


class _RuleFile(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    code: str
    platform: _StrOrList | None = None
    channel: _StrOrList | None = None
    operation: _StrOrList | None = None
    status: int | str | list[int | str] | None = None
    raw_code: _StrOrList | None = None
    token_expired: bool | None = None
    token_within_refresh_window: bool | None = None


class _TaxonomyFile(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    schema: int
    version: str
    # per-key sections are decoded entry by entry, so an error can name the key
    policies: dict[str, dict[str, Any]]
    codes: dict[str, dict[str, Any]]
    rules: list[_RuleFile]
    close_codes: dict[str, str]
    exceptions: dict[str, str]
    description: str = ""
    sources: dict[str, str] = msgspec.field(default_factory=dict)
    operations: list[_OperationFile] = msgspec.field(default_factory=list)
    responses: dict[str, dict[str, Any]] = msgspec.field(default_factory=dict)


_CODE_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")


def _located(origin: str, exc: msgspec.ValidationError, prefix: str = "") -> TaxonomyError:
    """Turn msgspec's ``... - at `$.codes.X.class``` into ``origin: codes.X.class: ...``."""
    path, problem = located(str(exc), prefix)
    return TaxonomyError(f"{origin}: {path or '(top level)'}: {problem}")


_E = TypeVar("_E")


def _entry(origin: str, where: str, value: object, kind: type[_E]) -> _E:
    try:
        return msgspec.convert(value, kind)
    except msgspec.ValidationError as exc:
        raise _located(origin, exc, where) from exc


def _as_tuple(value: _StrOrList | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    return (value,) if isinstance(value, str) else tuple(value)


def _check_members(origin: str, key: str, values: tuple[str, ...] | None, enum_values: set[str]) -> None:
    for value in values or ():
        if value not in enum_values:
            known = ", ".join(sorted(enum_values))
            raise TaxonomyError(f"{origin}: {key}: unknown value '{value}' (known: {known})")


def _check_flags(origin: str, where: str, spec: _CodeFile, policy: RetryPolicy) -> None:
    """The behaviour flags must agree with the class: the runtime acts on them without asking."""
    cls = spec.taxonomy_class
    if spec.graceful and (cls is not TaxonomyClass.NONE or spec.scope is not Scope.SESSION or spec.reconnect):
        raise TaxonomyError(
            f"{origin}: {where}.graceful: a graceful end is class NONE, scope session, without reconnect"
        )
    if spec.replay_with_fresh_token and (cls is not TaxonomyClass.TRANSIENT or policy.max_retries < 1):
        raise TaxonomyError(
            f"{origin}: {where}.replayWithFreshToken: a replay is TRANSIENT with a policy of at least one retry"
        )
    fail_fast = spec.trigger is not None or cls is TaxonomyClass.STATE_CORRUPTING
    fail_fast = fail_fast or (cls is TaxonomyClass.PERMANENT and spec.scope is Scope.SESSION)
    if spec.revokes_credential and not fail_fast:
        raise TaxonomyError(
            f"{origin}: {where}.revokesCredential: only a code that ends the session (fail-fast) revokes"
        )
    if spec.circuit_neutral and cls is not TaxonomyClass.TRANSIENT:
        # only TRANSIENT failures count toward a circuit: the flag would say nothing elsewhere
        raise TaxonomyError(
            f"{origin}: {where}.circuitNeutral: only a TRANSIENT code counts toward a circuit, "
            f"so only one can be exempted"
        )


def _document(data: Mapping[str, Any] | bytes | str, origin: str) -> dict[str, Any]:
    """A taxonomy file's document (TOML parsed within the limits), or a located TaxonomyError."""
    try:
        if isinstance(data, bytes | str):
            return parse_toml(data.decode() if isinstance(data, bytes) else data)
        return dict(data)
    except tomllib.TOMLDecodeError as exc:
        raise TaxonomyError(f"{origin}: not valid TOML: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise TaxonomyError(f"{origin}: not UTF-8 text: {exc}") from exc
    except LimitError as exc:
        raise TaxonomyError(f"{origin}: {exc}") from None


def compile_taxonomy(
    data: Mapping[str, Any] | bytes | str, origin: str, *, base_dir: Path | None = None
) -> Taxonomy:
    """Check a taxonomy document and compile it. ``origin`` names it in errors.

    A document with ``extends`` is an overlay (:func:`merge_overlay`): its base is loaded first (a
    shipped version, or a path relative to ``base_dir``) and the overlay laid over it.
    """
    raw = _document(data, origin)
    extends: str | None = None
    if "extends" in raw:
        raw, extends = _overlaid(raw, origin, base_dir, (origin,))
    return _compile(raw, origin, extends)


def _compile(raw: dict[str, Any], origin: str, extends: str | None) -> Taxonomy:
    try:
        doc = msgspec.convert(raw, _TaxonomyFile)
    except msgspec.ValidationError as exc:
        raise _located(origin, exc) from exc

    if doc.schema != SCHEMA:
        raise TaxonomyError(f"{origin}: schema: unsupported schema {doc.schema} (this build reads {SCHEMA})")
    if not doc.version.strip():
        raise TaxonomyError(f"{origin}: version: must not be empty")

    policies: dict[str, RetryPolicy] = {}
    for name, raw_pol in doc.policies.items():
        where = f"policies.{name}"
        pol = _entry(origin, where, raw_pol, _PolicyFile)
        if pol.max_retries < 0 or pol.max_retries > 100:
            raise TaxonomyError(f"{origin}: {where}.maxRetries: must be between 0 and 100")
        if pol.base_delay_ms < 0 or pol.max_delay_ms < 0 or pol.retry_after_ceiling_ms < 0:
            raise TaxonomyError(f"{origin}: {where}: delays must not be negative")
        if pol.max_delay_ms < pol.base_delay_ms:
            raise TaxonomyError(f"{origin}: {where}.maxDelayMs: must be >= baseDelayMs")
        policies[name] = RetryPolicy(
            name=name,
            max_retries=pol.max_retries,
            base_delay_ms=pol.base_delay_ms,
            max_delay_ms=pol.max_delay_ms,
            jitter=pol.jitter,
            honors_retry_after=pol.honors_retry_after,
            retry_after_ceiling_ms=pol.retry_after_ceiling_ms,
            description=pol.description,
        )

    codes: dict[str, CodeSpec] = {}
    for name, raw_spec in doc.codes.items():
        where = f"codes.{name}"
        spec = _entry(origin, where, raw_spec, _CodeFile)
        if not _CODE_NAME.match(name):
            raise TaxonomyError(f"{origin}: {where}: a semantic code is UPPER_SNAKE_CASE")
        policy = policies.get(spec.policy)
        if policy is None:
            known = ", ".join(sorted(policies))
            raise TaxonomyError(f"{origin}: {where}.policy: unknown policy '{spec.policy}' (known: {known})")
        if spec.taxonomy_class is not TaxonomyClass.TRANSIENT and policy.max_retries > 0:
            raise TaxonomyError(
                f"{origin}: {where}.policy: a {spec.taxonomy_class} code must not retry "
                f"(policy '{spec.policy}' allows {policy.max_retries})"
            )
        if spec.trigger is not None and spec.taxonomy_class in (TaxonomyClass.TRANSIENT, TaxonomyClass.NONE):
            raise TaxonomyError(
                f"{origin}: {where}.trigger: a fail-fast trigger cannot be {spec.taxonomy_class}"
            )
        _check_flags(origin, where, spec, policy)
        codes[name] = CodeSpec(
            code=name,
            taxonomy_class=spec.taxonomy_class,
            scope=spec.scope,
            policy=policy,
            trigger=spec.trigger,
            reconnect=spec.reconnect,
            reconcile_before_retry=spec.reconcile_before_retry,
            graceful=spec.graceful,
            replay_with_fresh_token=spec.replay_with_fresh_token,
            revokes_credential=spec.revokes_credential,
            circuit_neutral=spec.circuit_neutral,
            description=spec.description,
        )
    for required in REQUIRED_CODES:
        if required not in codes:
            raise TaxonomyError(f"{origin}: codes.{required}: missing (the classifier emits it)")

    def code_ref(where: str, name: str) -> CodeSpec:
        found = codes.get(name)
        if found is None:
            raise TaxonomyError(f"{origin}: {where}: unknown code '{name}'")
        return found

    platforms = {p.value for p in Platform}
    channels = {c.value for c in Channel}
    operations: list[OperationMatcher] = []
    for i, op in enumerate(doc.operations):
        where = f"operations[{i}]"
        _check_members(origin, f"{where}.platform", _as_tuple(op.platform), platforms)
        _check_members(origin, f"{where}.channel", _as_tuple(op.channel), channels)
        try:
            operations.append(
                OperationMatcher.build(
                    op.name,
                    _as_tuple(op.platform),
                    _as_tuple(op.channel),
                    _as_tuple(op.method),
                    _as_tuple(op.endpoint),
                )
            )
        except ValueError as exc:
            raise TaxonomyError(f"{origin}: {where}.endpoint: {exc}") from exc
    known_operations = {op.name for op in operations}

    rules: list[Rule] = []
    for i, rule in enumerate(doc.rules):
        where = f"rules[{i}]"
        _check_members(origin, f"{where}.platform", _as_tuple(rule.platform), platforms)
        _check_members(origin, f"{where}.channel", _as_tuple(rule.channel), channels)
        _check_members(origin, f"{where}.operation", _as_tuple(rule.operation), known_operations)
        try:
            statuses = parse_status_spec(rule.status)
        except ValueError as exc:
            raise TaxonomyError(f"{origin}: {where}.status: {exc}") from exc
        raw_codes = _as_tuple(rule.raw_code)
        rules.append(
            Rule(
                index=i,
                spec=code_ref(f"{where}.code", rule.code),
                platforms=frozenset(_as_tuple(rule.platform) or ()) or None,
                channels=frozenset(_as_tuple(rule.channel) or ()) or None,
                operations=frozenset(_as_tuple(rule.operation) or ()) or None,
                statuses=statuses,
                raw_codes=frozenset(raw_codes) if raw_codes else None,
                token_expired=rule.token_expired,
                token_within_refresh_window=rule.token_within_refresh_window,
            )
        )
    if not rules or not rules[-1].is_catch_all:
        raise TaxonomyError(f"{origin}: rules: the last rule must be a catch-all (only `code`)")

    close_codes: dict[int, CodeSpec] = {}
    close_default: CodeSpec | None = None
    for key, name in doc.close_codes.items():
        where = f"closeCodes.{key}"
        if key == "*":
            close_default = code_ref(where, name)
            continue
        if not (key.isascii() and key.isdigit()) or not 1000 <= int(key) <= 4999:
            raise TaxonomyError(f"{origin}: {where}: a close code is an integer from 1000 to 4999, or '*'")
        close_codes[int(key)] = code_ref(where, name)
    if close_default is None:
        raise TaxonomyError(f"{origin}: closeCodes.*: missing (the default for unknown close codes)")

    exceptions: dict[str, CodeSpec] = {}
    exception_default: CodeSpec | None = None
    for key, name in doc.exceptions.items():
        if key == "*":
            exception_default = code_ref("exceptions.*", name)
        else:
            exceptions[key] = code_ref(f"exceptions.{key}", name)
    if exception_default is None:
        raise TaxonomyError(f"{origin}: exceptions.*: missing (the default for unknown exceptions)")

    responses = compile_responses(origin, doc.responses, platforms, channels)

    sources = dict(doc.sources)
    for key in sources:
        platform, _, channel = key.partition(".")
        if platform not in platforms or channel not in channels:
            raise TaxonomyError(f"{origin}: sources.{key}: expected 'platform.channel'")

    return Taxonomy(
        version=doc.version,
        description=doc.description,
        origin=origin,
        policies=policies,
        codes=codes,
        operations=tuple(operations),
        rules=tuple(rules),
        close_codes=close_codes,
        close_default=close_default,
        exceptions=exceptions,
        exception_default=exception_default,
        sources=sources,
        responses=responses,
        extends=extends,
    )


def shipped_versions() -> list[str]:
    """Names of the taxonomy versions shipped in the package, e.g. ``['v1']``."""
    data = resources.files("supervisor.taxonomy") / "data"
    return sorted(p.name.removesuffix(".toml") for p in data.iterdir() if p.name.endswith(".toml"))


def _is_version_name(ref: str) -> bool:
    """``v1``, ``v2``: a shipped version's name; anything with a dot or a slash is a path."""
    return re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]*", ref) is not None


def _shipped(ref: str) -> bytes:
    resource = resources.files("supervisor.taxonomy") / "data" / f"{ref}.toml"
    if not resource.is_file():
        known = ", ".join(shipped_versions())
        raise TaxonomyError(f"taxonomy version '{ref}' is not shipped (shipped: {known}; or give a path)")
    return resource.read_bytes()


def _read_file(ref: str) -> bytes:
    try:
        return read_capped(ref, MAX_TAXONOMY_BYTES)
    except FileNotFoundError:
        raise TaxonomyError(f"{ref}: no such taxonomy file") from None
    except OSError as exc:
        raise TaxonomyError(f"{ref}: cannot read: {exc.strerror or exc}") from None
    except ValueError as exc:  # LimitError, or a NUL in the path
        raise TaxonomyError(f"{ref}: cannot read: {exc}") from None


def load_taxonomy(version_or_path: str | Path = DEFAULT_VERSION) -> Taxonomy:
    """Load a shipped version by name (``v1``) or a taxonomy file (or an overlay) by path."""
    ref = str(version_or_path)
    if isinstance(version_or_path, str) and _is_version_name(ref):
        return compile_taxonomy(_shipped(ref), f"{ref}.toml")
    return compile_taxonomy(_read_file(ref), ref, base_dir=Path(ref).parent)


# -- overlays ---------------------------------------------------------------------------------------

#: how many overlays may stand on one another before the shipped version under them
MAX_OVERLAY_DEPTH = 8
# tables whose entries an overlay adds to or replaces, key by key
_BY_KEY = ("policies", "codes", "closeCodes", "exceptions", "sources", "responses")
# lists whose entries an overlay puts before the base's: first match wins, so they are tried first
_FIRST = ("rules", "operations")


def merge_overlay(base: Mapping[str, Any], overlay: Mapping[str, Any], origin: str) -> dict[str, Any]:
    """The document of ``overlay`` laid over ``base`` (docs/taxonomy.md, "Overlays").

    ``[codes.*]`` (and the other keyed tables: policies, closeCodes, exceptions, sources,
    responses) add to or replace the base's, entry by entry; ``[[rules]]`` and ``[[operations]]``
    are tried before the base's; ``version`` (required), ``description`` and ``schema`` replace the
    base's. Any other key is kept, so the compile refuses it as it refuses it in any file.
    """
    if not isinstance(overlay.get("version"), str):
        raise TaxonomyError(f"{origin}: version: required in an overlay (the name events and diff show)")
    merged = {k: v for k, v in base.items() if k != "extends"}
    for key, value in overlay.items():
        if key == "extends":
            continue
        if key in _BY_KEY:
            if not isinstance(value, dict):
                raise TaxonomyError(f"{origin}: {key}: expected a table")
            merged[key] = {**base.get(key, {}), **value}
        elif key in _FIRST:
            if not isinstance(value, list):
                raise TaxonomyError(f"{origin}: {key}: expected an array of tables")
            merged[key] = [*value, *base.get(key, [])]
        else:
            merged[key] = value
    return merged


def _overlaid(
    raw: dict[str, Any], origin: str, base_dir: Path | None, chain: tuple[str, ...]
) -> tuple[dict[str, Any], str]:
    """``raw`` (an overlay) merged over its base, resolved down to a shipped version; the base's name.

    Errors are located in the file that has them: an unknown base, a cycle of overlays, one
    standing on more than :data:`MAX_OVERLAY_DEPTH` others.
    """
    ref = raw["extends"]
    if not isinstance(ref, str) or not ref.strip():
        raise TaxonomyError(f"{origin}: extends: expected a shipped version (v2) or a path")
    if _is_version_name(ref):
        try:
            content = _shipped(ref)
        except TaxonomyError as exc:
            raise TaxonomyError(f"{origin}: extends: {exc}") from None
        return merge_overlay(_document(content, f"{ref}.toml"), raw, origin), ref
    path = Path(ref) if Path(ref).is_absolute() or base_dir is None else base_dir / ref
    key = os.path.realpath(path)
    seen = [os.path.realpath(c) for c in chain]
    if key in seen:
        cycle = " → ".join([*chain[seen.index(key) :], str(path)])
        raise TaxonomyError(f"{origin}: extends: a cycle of overlays: {cycle}")
    if len(chain) > MAX_OVERLAY_DEPTH:
        raise TaxonomyError(f"{origin}: extends: more than {MAX_OVERLAY_DEPTH} overlays deep")
    if not path.exists():
        raise TaxonomyError(f"{origin}: extends: {ref}: no such taxonomy file (nor a shipped version)")
    base = _document(_read_file(str(path)), str(path))
    if "extends" in base:
        base, _ = _overlaid(base, str(path), path.parent, (*chain, str(path)))
    return merge_overlay(base, raw, origin), ref


def resolve_version(configured: str | None, environ: Mapping[str, str]) -> str:
    """The active taxonomy: the environment override wins over config, then the default."""
    override = environ.get(ENV_VAR, "").strip()
    if override:
        return override
    return configured or DEFAULT_VERSION
