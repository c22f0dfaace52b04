"""Golden test of every event line: each event the daemon can publish, byte for byte as it goes out.

Refactors of the runtime keep one rule, "no wire format changes"; this test holds it to that.
The examples (tests/golden/event_examples.py: one or more per concrete Event subclass, fixed seq,
bootId, ids and timestamps) go through the daemon's own sinks, never through a copy of them:

* ``tests/golden/event_lines.ndjson``: the JSON line on standard output, as
  :class:`supervisor.runtime.stdout.StdoutEvents` writes it into a real pipe:
  ``{"example": NAME, "line": LINE}``, LINE verbatim without its newline;
* ``tests/golden/event_frames.ndjson``: what a subscriber of the socket API asking for every stream
  receives for the same event (the state board, then the fan-out into the subscriber's outbox:
  supervisor/api/board.py, supervisor/api/fanout.py): ``{"example": NAME, "frames": [FRAME, ...]}``,
  each FRAME verbatim without its NUL terminator. A SESSION_TRANSITION reaches subscribers as a
  ``delta`` only, a successful ``start`` command as a delta and an event;
* ``tests/golden/sdk_error_events.ndjson``: the typed SdkErrorEvent's own JSON (seed section 1), as
  ``session-supervisor classify --taxonomy v1`` prints it for the envelopes of
  ``event_examples.ENVELOPES``: ``{"envelope": NAME, "line": LINE}``.

The test fails when a concrete event class (found by importing every module of ``supervisor`` and
``machines`` and walking ``Event``'s subclasses) has no example, when an example's line differs from
its golden line, when an example has no golden line, and when a golden line has no example.

Regenerating the golden files is a **wire-format change**: journald queries, scripts reading
``watch --json`` and the collector all read these lines. Do it only on purpose, never to make a
refactor pass, and say in the commit message and in docs/runtime.md ("Events") or docs/socket-api.md
which lines changed and why::

    SESSION_SUPERVISOR_REGOLDEN=1 .venv/bin/python -m pytest tests/unit/test_event_lines_golden.py

rewrites the three files from today's code and fails, naming the examples whose lines changed, so a
run with the variable set is never green by accident; review ``git diff tests/golden`` and run again
without it. An event class added later needs an example in event_examples.py and then a regenerated
golden file (its new lines are the only diff).
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import json
import os
import pkgutil
import socket
import sys
import typing
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Final

import anyio
import msgspec
import pytest
from click.testing import CliRunner

import machines
import supervisor
from supervisor.api.board import StateBoard
from supervisor.api.connection import Connection
from supervisor.api.fanout import Hub, Subscriber
from supervisor.api.messages import parse_subscription
from supervisor.bus import EventBus
from supervisor.cli import cli
from supervisor.clock import FakeClock
from supervisor.config import parse_config
from supervisor.events import Event, ManualAction, RetryKind, RolloverReason, TerminationReason
from supervisor.runtime.stdout import StdoutEvents
from supervisor.runtime.supervisor import Supervisor
from supervisor.runtime.wiring import Wiring
from supervisor.taxonomy import Scope, TaxonomyClass, Trigger
from supervisor.vocabulary import CircuitState, SessionState
from tests.golden.event_examples import (
    BOOT_ID,
    CLASSIFY_TAXONOMY,
    ENVELOPES,
    EXAMPLES,
    PEER,
    SECRETS_IN_ENVELOPES,
    SEQ,
    SOCKET_CONFIG,
    T0,
    Example,
)
from tests.harness.waits import wait_until

pytestmark = pytest.mark.anyio

GOLDEN_DIR: Final = Path(__file__).resolve().parents[1] / "golden"
LINES_FILE: Final = GOLDEN_DIR / "event_lines.ndjson"
FRAMES_FILE: Final = GOLDEN_DIR / "event_frames.ndjson"
SDK_FILE: Final = GOLDEN_DIR / "sdk_error_events.ndjson"
REGOLDEN: Final = "SESSION_SUPERVISOR_REGOLDEN"

#: the enums whose values appear on an event line: every value must be in some example. SessionState
#: and CircuitState reach the line through str-typed fields (machines/session.py, machines/circuit.py)
WIRE_ENUMS: Final[tuple[type[enum.Enum], ...]] = (
    SessionState,
    CircuitState,
    RetryKind,
    TerminationReason,
    Trigger,
    RolloverReason,
    TaxonomyClass,
    Scope,
    ManualAction,
)


# -- finding every event class --------------------------------------------------------------------------


def _import_everything() -> None:
    for package in (supervisor, machines):
        for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if module.name.rsplit(".", 1)[-1] == "__main__":
                continue  # runs the CLI
            importlib.import_module(module.name)


def _subclasses(cls: type) -> Iterator[type]:
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def _module_binding(cls: type) -> object:
    target: object = sys.modules.get(cls.__module__)
    for part in cls.__qualname__.split("."):
        target = getattr(target, part, None)
    return target


def event_classes() -> set[type[Event]]:
    """Every concrete Event subclass of the package: it has a wire ``name``.

    ``@dataclass(slots=True)`` builds a new class in place of the one the ``class`` statement made,
    and that one stays among ``Event.__subclasses__()`` (still referenced, a collection does not
    remove it): the module's binding is the live one. A class no module binds (defined in a
    function) is kept: it can be published too.
    """
    _import_everything()
    found: set[type[Event]] = set()
    for cls in _subclasses(Event):
        if not cls.__module__.startswith(("supervisor.", "machines.")):
            continue  # a test's own event
        if not isinstance(getattr(cls, "name", None), str):
            continue  # an abstract base: never published as such
        bound = _module_binding(cls)
        if bound is not None and bound is not cls:
            continue  # the class statement's class, replaced by the dataclass decorator
        found.add(cls)
    return found


def test_every_event_class_has_an_example() -> None:
    """An event added later fails here until it has an example (and so a golden line)."""
    classes = event_classes()
    covered = {type(example.event) for example in EXAMPLES}
    missing = sorted(f"{cls.__module__}.{cls.__qualname__} ({cls.name})" for cls in classes - covered)
    assert not missing, "event classes without an example in tests/golden/event_examples.py: " + ", ".join(
        missing
    )
    # the walk found the package's events, not nothing (a broken walk would pass the check above)
    assert len(classes) >= 36 and covered <= classes


def test_wire_names_and_example_names_are_unique() -> None:
    by_name: dict[str, list[str]] = {}
    for cls in event_classes():
        by_name.setdefault(cls.name, []).append(cls.__qualname__)
    assert {name: owners for name, owners in by_name.items() if len(owners) > 1} == {}
    names = [example.name for example in EXAMPLES]
    assert len(names) == len(set(names))
    envelopes = [name for name, _ in ENVELOPES]
    assert len(envelopes) == len(set(envelopes))


def _enum_values(value: object) -> Iterator[enum.Enum]:
    if isinstance(value, enum.Enum):
        yield value
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for field in dataclasses.fields(value):
            yield from _enum_values(getattr(value, field.name))
    elif isinstance(value, msgspec.Struct):
        for name in value.__struct_fields__:
            yield from _enum_values(getattr(value, name))
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _enum_values(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _enum_values(item)


def _enums_in_hint(hint: object) -> Iterator[type[enum.Enum]]:
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        yield hint
    for arg in typing.get_args(hint):
        yield from _enums_in_hint(arg)


def test_every_value_of_every_wire_enum_is_in_an_example() -> None:
    """A renamed or added enum value changes lines: each value is in some example's line."""
    seen = {value for example in EXAMPLES for value in _enum_values(example.event)}
    missing = sorted(f"{type(v).__name__}.{v.name}" for cls in WIRE_ENUMS for v in cls if v not in seen)
    assert not missing, "enum values no example carries: " + ", ".join(missing)
    # an event field typed with an enum not listed above would escape the check: list it
    typed = {
        found
        for cls in event_classes()
        for hint in typing.get_type_hints(cls).values()
        for found in _enums_in_hint(hint)
    }
    assert typed <= set(WIRE_ENUMS), (
        f"add to WIRE_ENUMS: {sorted(c.__name__ for c in typed - set(WIRE_ENUMS))}"
    )


# -- rendering through the daemon's own sinks ---------------------------------------------------------


def _read_available(fd: int) -> bytes:
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


async def stdout_lines(examples: Sequence[Example]) -> list[bytes]:
    """Each example's line as the stdout sink writes it into a real pipe, newline included."""
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    bus = EventBus(BOOT_ID)
    sink = StdoutEvents(bus, fd=write_end)
    received = bytearray()

    def drained() -> bool:
        received.extend(_read_available(read_end))
        return received.count(b"\n") >= len(examples)

    try:
        async with anyio.create_task_group() as tg:
            await tg.start(sink.serve)
            for example in examples:
                sink(example.published())
            # the writer thread's progress, read as it comes (a pipe holds 64 KiB)
            await wait_until(drained, 20)
            await sink.flush(1.0)
            tg.cancel_scope.cancel()
    finally:
        os.close(read_end)
        os.close(write_end)
    assert sink.dropped == 0 and sink.written == len(examples)
    lines = bytes(received).splitlines(keepends=True)
    assert len(lines) == len(examples)
    return lines


async def socket_frames(examples: Sequence[Example]) -> list[list[bytes]]:
    """Each example's reply frames as a subscriber of every stream gets them, NUL terminators included.

    A fresh state board per example: a delta carries what the board knew of the session before
    (``previous``, ``attempts``), so each example's frames depend on that example alone.
    """
    clock = FakeClock()
    bus = EventBus(BOOT_ID)
    subscription = parse_subscription({"streams": ["all"]}, known_states=[s.value for s in SessionState])
    out: list[list[bytes]] = []
    async with Wiring(parse_config(SOCKET_CONFIG, "golden.toml"), bus=bus, clock=clock, environ={}) as wiring:
        daemon = Supervisor(wiring)
        ours, theirs = socket.socketpair(socket.AF_UNIX)
        with ours, theirs:
            for example in examples:
                board = StateBoard(daemon.sessions, wiring.circuits, clock, boot_id=bus.boot_id)
                hub = Hub(board, publish=bus.publish, timestamp=lambda: T0)
                subscriber = Subscriber(
                    Connection(ours, PEER),
                    subscription,
                    cap_bytes=1 << 20,
                    lagged_disconnect_after=5.0,
                    snapshot=hub.snapshot_frame,
                )
                hub.add(subscriber)
                snapshot, _ = subscriber.outbox.take()
                assert len(snapshot) == 1 and b'"type":"snapshot"' in snapshot[0]
                board(example.published())
                frames, recovery = subscriber.outbox.take()
                assert not recovery
                out.append(frames)
    return out


def classify_lines(envelopes: Sequence[tuple[str, str]]) -> list[bytes]:
    """``session-supervisor classify --taxonomy v1`` over the envelopes: one line each, newline included."""
    stdin = "".join(envelope + "\n" for _, envelope in envelopes)
    result = CliRunner().invoke(cli, ["classify", "--taxonomy", CLASSIFY_TAXONOMY], input=stdin)
    assert result.exit_code == 0, result.output
    lines = result.stdout_bytes.splitlines(keepends=True)
    assert len(lines) == len(envelopes)
    return lines


# -- the golden files ---------------------------------------------------------------------------------

_encode = msgspec.json.Encoder().encode


def _strip(raw: bytes, terminator: bytes) -> bytes:
    """``raw`` without its one terminator; the terminator is part of the wire format, so it is checked."""
    assert raw.endswith(terminator), f"not terminated by {terminator!r}: {raw!r}"
    body = raw[: -len(terminator)]
    assert terminator not in body, f"{terminator!r} inside one message: {raw!r}"
    return body


def golden_line(key: str, name: str, field: str, raw_json: bytes) -> bytes:
    """One golden line: ``{"KEY": NAME, "FIELD": RAW}`` with RAW embedded verbatim (it is JSON already)."""
    return b'{"' + key.encode() + b'":' + _encode(name) + b',"' + field.encode() + b'":' + raw_json + b"}"


def _read_golden(path: Path, key: str) -> dict[str, bytes]:
    golden: dict[str, bytes] = {}
    if not path.exists():
        return golden
    for number, line in enumerate(path.read_bytes().splitlines(), 1):
        name = json.loads(line)[key]
        assert name not in golden, f"{path.name}:{number}: {name!r} twice"
        golden[name] = line
    return golden


def _few(names: list[str], most: int = 8) -> str:
    shown = ", ".join(names[:most])
    return f"{len(names)} [{shown}{', ...' if len(names) > most else ''}]"


def _shown(path: Path) -> str:
    root = GOLDEN_DIR.parents[1]
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)


def _compare(path: Path, key: str, rendered: Iterable[tuple[str, bytes]]) -> None:
    """The rendered lines against the golden file (or the file rewritten, when asked: see the docstring)."""
    now = dict(rendered)
    golden = _read_golden(path, key)
    changed = [name for name in now if name in golden and golden[name] != now[name]]
    added = [name for name in now if name not in golden]
    stale = [name for name in golden if name not in now]
    if os.environ.get(REGOLDEN) == "1":
        text = b"".join(line + b"\n" for line in now.values())
        if path.exists() and path.read_bytes() == text:
            return
        path.write_bytes(text)
        pytest.fail(
            f"{path.name} rewritten (a wire-format change: note it): changed {_few(changed)}, "
            f"added {_few(added)}, removed {_few(stale)}; review `git diff {_shown(path)}` and run "
            f"again without {REGOLDEN}",
            pytrace=False,
        )
    problems = [
        f"{name}: the line changed\n  golden: {golden[name].decode()}\n  now:    {now[name].decode()}"
        for name in changed
    ]
    problems += [f"{name}: no golden line (a new example? regenerate on purpose)" for name in added]
    problems += [f"{name}: a golden line without an example (removed or renamed?)" for name in stale]
    if problems:
        heading = f"{path.name} (see the module docstring before regenerating):"
        pytest.fail("\n".join([heading, *problems]), pytrace=False)
    # same lines, same order: the file reads as the table does
    assert list(golden) == list(now), f"{path.name}: lines out of the examples' order (regenerate)"


async def test_stdout_event_lines_match_the_golden_file() -> None:
    lines = await stdout_lines(EXAMPLES)
    rendered = []
    for example, raw in zip(EXAMPLES, lines, strict=True):
        body = _strip(raw, b"\n")
        decoded = json.loads(body)
        # the line is this example's (the pipe kept the order) with the bus's stamps
        assert (decoded["event"], decoded["seq"], decoded["bootId"]) == (example.event.name, SEQ, BOOT_ID)
        rendered.append((example.name, golden_line("example", example.name, "line", body)))
    _compare(LINES_FILE, "example", rendered)


async def test_socket_api_frames_match_the_golden_file() -> None:
    frames_per_example = await socket_frames(EXAMPLES)
    rendered = []
    for example, frames in zip(EXAMPLES, frames_per_example, strict=True):
        bodies = [_strip(frame, b"\0") for frame in frames]
        # every event reaches a subscriber of every stream, a session transition as its delta
        types = [json.loads(body)["parameters"]["type"] for body in bodies]
        assert "event" in types or "delta" in types, example.name
        joined = b"[" + b",".join(bodies) + b"]"
        rendered.append((example.name, golden_line("example", example.name, "frames", joined)))
    _compare(FRAMES_FILE, "example", rendered)


def test_classified_sdk_error_events_match_the_golden_file() -> None:
    for name, envelope in ENVELOPES:
        # the event's timestamp is the envelope's; without one it would be the wall clock's
        assert "timestamp" in json.loads(envelope), name
    lines = classify_lines(ENVELOPES)
    # regenerating must never bless a leak: the credentials in the envelopes stay out of the lines
    for secret in SECRETS_IN_ENVELOPES:
        assert not [raw for raw in lines if secret.encode() in raw], secret
    rendered = [
        (name, golden_line("envelope", name, "line", _strip(raw, b"\n")))
        for (name, _), raw in zip(ENVELOPES, lines, strict=True)
    ]
    _compare(SDK_FILE, "envelope", rendered)


def test_a_golden_line_embeds_the_rendered_bytes_verbatim() -> None:
    """The golden format itself: the raw line sits in the golden line unchanged, and it reads as JSON."""
    raw = b'{"event":"X","f":1.50,"s":"a\\u00e9"}'
    line = golden_line("example", "x.y", "line", raw)
    assert line == b'{"example":"x.y","line":' + raw + b"}"
    assert json.loads(line) == {"example": "x.y", "line": {"event": "X", "f": 1.5, "s": "aé"}}


def test_a_changed_line_fails_with_its_example_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparison fails on a changed, a missing and a stale line, naming each example."""
    monkeypatch.delenv(REGOLDEN, raising=False)
    golden = tmp_path / "golden.ndjson"
    golden.write_bytes(
        golden_line("example", "a", "line", b'{"x":1}')
        + b"\n"
        + golden_line("example", "gone", "line", b'{"x":2}')
        + b"\n"
    )
    rendered = [
        ("a", golden_line("example", "a", "line", b'{"x":10}')),
        ("new", golden_line("example", "new", "line", b'{"x":3}')),
    ]
    with pytest.raises(pytest.fail.Exception) as failure:
        _compare(golden, "example", rendered)
    message = str(failure.value)
    assert "a: the line changed" in message
    assert "new: no golden line" in message
    assert "gone: a golden line without an example" in message


def test_regenerating_rewrites_the_file_and_never_passes_silently(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(REGOLDEN, "1")
    golden = tmp_path / "golden.ndjson"
    golden.write_bytes(golden_line("example", "a", "line", b'{"x":1}') + b"\n")
    rendered = [("a", golden_line("example", "a", "line", b'{"x":2}'))]
    with pytest.raises(pytest.fail.Exception, match=r"rewritten .*changed 1 \[a\], added 0 \[\]"):
        _compare(golden, "example", rendered)
    assert golden.read_bytes() == rendered[0][1] + b"\n"
    # nothing to rewrite: the run passes
    _compare(golden, "example", rendered)
