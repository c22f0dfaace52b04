"""The compiled form of a taxonomy: rule matching and operation detection.

Rules are bucketed by status at compile time, so classifying one envelope scans only the
few rules that can match its status (classify must stay under 20 µs: design.md targets).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from supervisor.taxonomy.model import CodeSpec, RetryPolicy

# statuses we index; anything else (e.g. an absent status) uses the "no status" bucket
_STATUS_RANGE = range(100, 7000)


def parse_status_spec(spec: int | str | list[int | str] | None) -> frozenset[int] | None:
    """``429`` | ``"4xx"`` | ``"4000-4999"`` | a list of those → a set of statuses (None = any)."""
    if spec is None:
        return None
    items = spec if isinstance(spec, list) else [spec]
    out: set[int] = set()
    for item in items:
        if isinstance(item, bool):
            raise ValueError(f"{item!r} is not a status")
        if isinstance(item, int):
            if item not in _STATUS_RANGE:
                raise ValueError(f"{item} is outside 100-6999")
            out.add(item)
            continue
        text = item.strip().lower()
        if re.fullmatch(r"[1-6]xx", text, re.ASCII):
            first = int(text[0]) * 100
            out.update(range(first, first + 100))
        elif m := re.fullmatch(r"(\d{3,4})\s*-\s*(\d{3,4})", text, re.ASCII):
            low, high = int(m.group(1)), int(m.group(2))
            if low > high or low not in _STATUS_RANGE or high not in _STATUS_RANGE:
                raise ValueError(f"'{item}' is not a valid range within 100-6999")
            out.update(range(low, high + 1))
        elif text.isascii() and text.isdigit():
            out.add(int(text))
        else:
            raise ValueError(f"'{item}' is not a status, 'Nxx' or 'low-high'")
    if not out:
        raise ValueError("an empty list matches nothing")
    return frozenset(out)


def _glob_to_regex(pattern: str) -> re.Pattern[str]:
    """``*`` is one path segment, ``**`` any number of them (including none)."""
    if not pattern.startswith("/"):
        raise ValueError(f"'{pattern}' must start with '/'")
    body = ""
    for segment in pattern.strip("/").split("/"):
        if segment == "**":
            body += r"(?:/[^/]+)*"
        elif segment == "*":
            body += r"/[^/]+"
        else:
            body += "/" + re.escape(segment)
    return re.compile(body + "/?", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class OperationMatcher:
    """Names an operation from platform, channel, method and endpoint path."""

    name: str
    platforms: frozenset[str] | None
    channels: frozenset[str] | None
    methods: frozenset[str] | None
    endpoints: tuple[re.Pattern[str], ...] | None

    @classmethod
    def build(
        cls,
        name: str,
        platforms: tuple[str, ...] | None,
        channels: tuple[str, ...] | None,
        methods: tuple[str, ...] | None,
        endpoints: tuple[str, ...] | None,
    ) -> OperationMatcher:
        return cls(
            name=name,
            platforms=frozenset(platforms) if platforms else None,
            channels=frozenset(channels) if channels else None,
            methods=frozenset(m.upper() for m in methods) if methods else None,
            endpoints=tuple(_glob_to_regex(e) for e in endpoints) if endpoints else None,
        )

    def matches(self, platform: str, channel: str, method: str | None, path: str | None) -> bool:
        if self.platforms is not None and platform not in self.platforms:
            return False
        if self.channels is not None and channel not in self.channels:
            return False
        if self.methods is not None and (method is None or method.upper() not in self.methods):
            return False
        if self.endpoints is not None:
            if path is None:
                return False
            return any(p.fullmatch(path) for p in self.endpoints)
        return True


@dataclass(frozen=True, slots=True)
class Rule:
    """One ``[[rules]]`` entry: every given key must match."""

    index: int
    spec: CodeSpec
    platforms: frozenset[str] | None
    channels: frozenset[str] | None
    operations: frozenset[str] | None
    statuses: frozenset[int] | None
    raw_codes: frozenset[str] | None
    token_expired: bool | None

    @property
    def is_catch_all(self) -> bool:
        return (
            self.platforms is None
            and self.channels is None
            and self.operations is None
            and self.statuses is None
            and self.raw_codes is None
            and self.token_expired is None
        )

    def matches(
        self,
        platform: str,
        channel: str,
        operation: str | None,
        raw_code: str | None,
        token_expired: bool,
    ) -> bool:
        # status was already matched by the bucket this rule sits in
        if self.platforms is not None and platform not in self.platforms:
            return False
        if self.channels is not None and channel not in self.channels:
            return False
        if self.operations is not None and operation not in self.operations:
            return False
        if self.raw_codes is not None and raw_code not in self.raw_codes:
            return False
        return self.token_expired is None or self.token_expired == token_expired


@dataclass(slots=True)
class Taxonomy:
    """A checked, compiled taxonomy version."""

    version: str
    description: str
    origin: str
    policies: dict[str, RetryPolicy]
    codes: dict[str, CodeSpec]
    operations: tuple[OperationMatcher, ...]
    rules: tuple[Rule, ...]
    close_codes: dict[int, CodeSpec]
    close_default: CodeSpec
    exceptions: dict[str, CodeSpec]
    exception_default: CodeSpec
    sources: dict[str, str]
    _buckets: dict[int | None, tuple[Rule, ...]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        # each status present in any rule gets its own pre-merged list, in file order
        statuses: set[int] = set()
        for rule in self.rules:
            if rule.statuses is not None:
                statuses.update(rule.statuses)
        wildcard = tuple(r for r in self.rules if r.statuses is None)
        self._buckets[None] = wildcard
        for status in statuses:
            self._buckets[status] = tuple(r for r in self.rules if r.statuses is None or status in r.statuses)

    def rules_for(self, status: int | None) -> tuple[Rule, ...]:
        bucket = self._buckets.get(status)
        return bucket if bucket is not None else self._buckets[None]

    def operation_of(self, platform: str, channel: str, method: str | None, path: str | None) -> str | None:
        for op in self.operations:
            if op.matches(platform, channel, method, path):
                return op.name
        return None

    def source_of(self, platform: str, channel: str) -> str:
        key = f"{platform}.{channel}"
        found = self.sources.get(key)
        if found is not None:
            return found
        return f"{platform}_{channel}".upper().replace("-", "_")
