"""The compiled form of a taxonomy: rule matching and operation detection.

Rules are bucketed by status at compile time, so classifying one envelope scans only the
few rules that can match its status (classify must stay under 20 µs: docs/architecture.md, "Targets").
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


#: the most path segments an endpoint pattern may have (a real API path has about ten)
MAX_PATTERN_SEGMENTS = 64


class EndpointGlob:
    """An endpoint pattern: ``*`` is one path segment, ``**`` any number of them (including none).

    Literal segments compare case-insensitively; a trailing ``/`` on the path is ignored. Matching
    takes time linear in the path's segments for any pattern (docs/taxonomy.md): a pattern with
    at most one ``**`` runs as a regular expression, which then has a single unbounded repetition
    whose segments cannot overlap, so it cannot backtrack catastrophically; a pattern with more
    runs as a set-of-positions automaton over the segments (Thompson's construction), one step
    per path segment whatever the pattern.
    """

    __slots__ = ("_literals", "_many", "_one", "_regex", "_size", "pattern")

    def __init__(self, pattern: str) -> None:
        if not pattern.startswith("/"):
            raise ValueError(f"'{pattern}' must start with '/'")
        segments: list[str] = []
        for segment in pattern.strip("/").split("/"):
            if segment == "**" and segments and segments[-1] == "**":
                continue  # `**/**` matches what `**` matches
            segments.append(segment)
        if len(segments) > MAX_PATTERN_SEGMENTS:
            raise ValueError(f"'{pattern[:60]}...' has more than {MAX_PATTERN_SEGMENTS} segments")
        self.pattern = pattern
        self._size = len(segments)
        # bit i of a mask stands for "the first i pattern segments are matched"
        self._many = self._one = 0
        self._literals: dict[str, int] = {}
        for i, segment in enumerate(segments):
            if segment == "**":
                self._many |= 1 << i
            elif segment == "*":
                self._one |= 1 << i
            else:
                key = segment.lower()
                self._literals[key] = self._literals.get(key, 0) | 1 << i
        self._regex: re.Pattern[str] | None = None
        if segments.count("**") <= 1:
            body = ""
            for segment in segments:
                if segment == "**":
                    body += r"(?:/[^/]+)*"
                elif segment == "*":
                    body += r"/[^/]+"
                else:
                    body += "/" + re.escape(segment)
            self._regex = re.compile(body + "/?", re.IGNORECASE)

    @property
    def literals(self) -> frozenset[str]:
        """The pattern's literal segments, lower-cased (what a route template keeps of a path)."""
        return frozenset(self._literals)

    def fullmatch(self, path: str) -> bool:
        """Whether the whole of ``path`` matches the pattern."""
        if self._regex is not None:
            return self._regex.fullmatch(path) is not None
        return self.run(path)[0]

    def run(self, path: str) -> tuple[bool, int]:
        """(matched, steps) on the automaton, whatever the pattern; a step is one path segment."""
        matched, steps = self._run(_segments(path))
        if not matched and path.endswith("/"):  # the pattern's optional trailing slash
            again, more = self._run(_segments(path[:-1]))
            return again, steps + more
        return matched, steps

    def _closure(self, states: int) -> int:
        # `**` may match no segment: a position before one also stands after it (never two in a row)
        return states | (states & self._many) << 1

    def _run(self, segments: list[str] | None) -> tuple[bool, int]:
        if segments is None:
            return False, 0
        states, steps = self._closure(1), 0
        for segment in segments:
            steps += 1
            advance = states & self._literals.get(segment.lower(), 0)
            stay = 0
            if segment:  # `*` and `**` match non-empty segments only
                advance |= states & self._one
                stay = states & self._many
            states = self._closure(stay | advance << 1)
            if not states:
                return False, steps
        return bool(states >> self._size & 1), steps


def _segments(path: str) -> list[str] | None:
    """The segments of ``/a/b`` (``["a", "b"]``); none for ``""``; None when not a path."""
    if not path:
        return []
    return path[1:].split("/") if path.startswith("/") else None


@dataclass(frozen=True, slots=True)
class OperationMatcher:
    """Names an operation from platform, channel, method and endpoint path."""

    name: str
    platforms: frozenset[str] | None
    channels: frozenset[str] | None
    methods: frozenset[str] | None
    endpoints: tuple[EndpointGlob, ...] | None

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
            endpoints=tuple(EndpointGlob(e) for e in endpoints) if endpoints else None,
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
    # the envelope context's tokenExpired (the token had no time left by our clock)
    token_expired: bool | None
    # the envelope context's tokenWithinRefreshWindow (at most the early-refresh window left)
    token_within_refresh_window: bool | None = None

    @property
    def is_catch_all(self) -> bool:
        return (
            self.platforms is None
            and self.channels is None
            and self.operations is None
            and self.statuses is None
            and self.raw_codes is None
            and self.token_expired is None
            and self.token_within_refresh_window is None
        )

    def matches(
        self,
        platform: str,
        channel: str,
        operation: str | None,
        raw_code: str | None,
        token_expired: bool,
        token_within_refresh_window: bool = False,
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
        if self.token_expired is not None and self.token_expired != token_expired:
            return False
        window = self.token_within_refresh_window
        return window is None or window == token_within_refresh_window


@dataclass(frozen=True, slots=True)
class ResponseSpec:
    """One ``[responses.NAME]`` entry: what a platform's response must carry (seed section 3)."""

    name: str
    platform: str
    channel: str
    required: tuple[str, ...]
    # where the response names its conversation (None: it names none, no drift check)
    conversation_field: str | None = None
    description: str = ""


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
    responses: dict[str, ResponseSpec] = field(default_factory=dict)
    # the version (or overlay path) an overlay extends; None for a complete file
    extends: str | None = None
    _buckets: dict[int | None, tuple[Rule, ...]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        # each status present in any rule gets its own pre-merged list, in file order; one pass over
        # the rules (a range such as 500-599 names many statuses: a pass per status cost ~6 ms per load)
        buckets: dict[int | None, list[Rule]] = {None: []}
        for rule in self.rules:
            for status in rule.statuses or ():
                buckets.setdefault(status, [])
        for rule in self.rules:
            if rule.statuses is None:  # a wildcard rule belongs to every bucket
                for bucket in buckets.values():
                    bucket.append(rule)
            else:
                for status in rule.statuses:
                    buckets[status].append(rule)
        self._buckets.update((status, tuple(rules)) for status, rules in buckets.items())

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
