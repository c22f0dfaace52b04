"""Fault injection shared by the Genesys and CXone simulators (issue 4, part 3).

A :class:`Fault` is data (a msgspec Struct, so the admin API decodes it straight from JSON);
a :class:`FaultController` holds the injected faults, schedules them on an injected
:class:`~supervisor.clock.Clock`, and answers the simulators' one question at every decision
point: *does a fault of this kind apply to this session and endpoint right now?*

Public API (stable; the CXone simulator builds on it)::

    from supervisor.sim.faults import Fault, FaultController, FaultKind

    faults = FaultController(clock=SystemClock(), seed=1)
    f = faults.inject(Fault(kind=FaultKind.RATE_LIMIT_STORM, share=0.5, params={"retry_after": "5"}))
    faults.match(FaultKind.RATE_LIMIT_STORM, session_key="conv-1", endpoint="GET /api/v2/conversations/{id}")
    faults.active()           # faults injected and not yet expired/spent (pending ones included)
    faults.clear(f.id)        # or faults.clear() for all
    faults.on_activate(cb)    # cb(fault) when a fault's start time is reached (connection faults)
    faults.on_clear(cb)       # cb(fault) when a fault is cleared, expires or is spent
    faults.fire_due()         # run activation/expiry now (the simulators also poll it every 50 ms)
    faults.admission(session_key, endpoint)  # ADMISSION_LIMIT: the refusing Fault, or None = admit

Fault fields:
    kind        a :class:`FaultKind` (JSON: its lower-case value, e.g. ``"drop"``)
    share       0..1, the share of *sessions* hit (default 1.0). Selection is deterministic:
                a session is in the share iff hash(seed-derived salt, fault id, session key) < share,
                so the same session stays in (or out) for the fault's whole life, whatever the order.
    at          seconds from injection until the fault starts (default 0 = now), on the injected clock
    duration_s  seconds it stays active after it starts (None = until cleared)
    count       at most this many hits, then the fault is spent (None = unlimited)
    endpoint    optional filter: an ``fnmatch`` pattern or a substring matched against the endpoint
                string, ``"METHOD /route/template"`` (e.g. ``"PATCH */attributes"``) or for WebSockets
                ``"WS /v1"`` / ``"WS /channels/{id}"``
    params      kind-specific parameters, validated (see :data:`PARAM_SPECS` and the table below)
    id          assigned by :meth:`FaultController.inject` (``"f1"``, ``"f2"``, ...)

Kinds and their params (``retry_after`` is ``"<int seconds>"``, ``"http-date"`` (5 s ahead),
``"http-date:<seconds>"`` or null = no header; :func:`retry_after_header` renders it):

==========================  ===============================================================================
DROP                        WS: ``transport.abort()``, no close frame (client sees 1006). No params.
CLOSE                       WS close frame: ``code`` (1000/1001/1008/1011/1012/1013/4000-4999), ``reason``
BLACKHOLE                   WS: stop reading and answering, keep TCP open; HTTP: hold the request unanswered
ADMISSION_LIMIT             WS handshake: ``rate_per_s`` (>= 0, required; 0 refuses all), ``status`` (429|503, default 429),
                            ``retry_after`` (default "1")
RATE_LIMIT_STORM            HTTP 429 / Genesys WM 4029. ``retry_after`` (default "5")
SERVER_ERROR_BURST          HTTP 5xx: ``status`` (500/502/503/504, default 503), ``retry_after`` (dflt null)
LATENCY                     delay every answer: ``latency_ms`` (>= 0, required)
TOKEN_EXPIRE                tokens issued before the fault started answer 401 as expired (bad.credentials)
TOKEN_REVOKE                tokens and refresh tokens revoked: 401 invalid_token; refresh -> invalid_grant
MISSING_FIELDS              200 responses lose ``fields`` (default conversationId, agentId, status)
CONVERSATION_DRIFT          responses carry another conversation id: ``conversation_id`` (default: a new UUID)
DUPLICATE_MESSAGE           409 on message creation, as if the message id had been seen
QUEUE_FULL                  429 with error code QUEUE_FULL. ``retry_after`` (default null)
SILENT_DROP_ATTRIBUTES      attribute updates answered as success but not persisted. ``after`` (int >= 0,
                            default 0: the first ``after`` matching updates still persist)
SESSION_EXPIRED             Genesys WM: ``mode`` "event" (SessionExpiredEvent push, default) or "code" (4006)
CONNECTION_CLOSED_EVENT     Genesys WM: push ConnectionClosedEvent then close 1000. ``reason`` (optional str)
SOCKET_CLOSING              Genesys notifications: v2.system.socket_closing, then close after ``lead_s``
                            (default: the simulator's configured lead), ``code`` (default 1001)
SESSION_ENDED               CXone: the agent session is ended (get-next-event 409)
STALE_SESSION               CXone: the next poll answers as if the client's session id were old (replay)
MALFORMED_BODY              a 200 whose body is not valid JSON
==========================  ===============================================================================

RATE_LIMIT_STORM, SERVER_ERROR_BURST, QUEUE_FULL and ADMISSION_LIMIT also take ``body``: "json",
"empty" or null (the simulator's choice); CXone honours it, Genesys always answers its JSON shapes.
ADMISSION_LIMIT on CXone counts every HTTP request as an attempt.

Connection faults (DROP, CLOSE, BLACKHOLE, SOCKET_CLOSING, CONNECTION_CLOSED_EVENT, SESSION_EXPIRED
with mode "event") act through :meth:`on_activate` hooks on the connections open when the fault
starts. Without ``duration_s`` that is a one-shot event and the fault is then spent (it leaves
:meth:`active`); with ``duration_s`` they also hit connections opened while the fault is active
(the simulators call :meth:`match` after each handshake). BLACKHOLE is a state: when it ends,
black-holed connections resume.

Every number is finite and bounded (:mod:`supervisor.sim.fault_kinds`, docs/simulators.md).

Errors: :meth:`Fault.validate` / :func:`decode_fault` raise :class:`~supervisor.errors.SimulatorError`
with one line naming the field and its bounds, e.g. ``fault.params.latency_ms: must be a finite
number from 0 to 600000``.
"""

from __future__ import annotations

import asyncio
import fnmatch
import hashlib
import math
import random
import re
from collections.abc import Callable, Iterator
from typing import Any

import msgspec

from supervisor.clock import Clock, SystemClock
from supervisor.errors import SimulatorError
from supervisor.sim.fault_kinds import (
    CONNECTION_KINDS,
    FIELD_RULES,
    MAX_AT_S,
    MAX_COUNT,
    MAX_DURATION_S,
    MAX_ENDPOINT_CHARS,
    PARAM_SPECS,
    FaultKind,
    retry_after_header,
    retry_after_seconds,
)

__all__ = [
    "CONNECTION_KINDS",
    "PARAM_SPECS",
    "Fault",
    "FaultController",
    "FaultKind",
    "decode_fault",
    "retry_after_header",
    "retry_after_seconds",
]


class Fault(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """One injected fault; see the module docstring for the fields and each kind's params."""

    kind: FaultKind
    share: float = 1.0
    at: float = 0.0
    duration_s: float | None = None
    count: int | None = None
    endpoint: str | None = None
    params: dict[str, Any] = msgspec.field(default_factory=dict)
    id: str | None = None

    def validate(self) -> Fault:
        """Check ranges and the kind's params; fill param defaults. Returns self.

        Raises :class:`SimulatorError` with one line naming the field.
        """
        # written so NaN fails each test (every comparison with it is false)
        if not 0.0 <= self.share <= 1.0:
            raise SimulatorError(f"fault.share: {FIELD_RULES['share']}")
        if not (math.isfinite(self.at) and 0 <= self.at <= MAX_AT_S):
            raise SimulatorError(f"fault.at: {FIELD_RULES['at']}")
        if self.duration_s is not None and not (
            math.isfinite(self.duration_s) and 0 < self.duration_s <= MAX_DURATION_S
        ):
            raise SimulatorError(f"fault.duration_s: {FIELD_RULES['duration_s']}")
        if self.count is not None and not 1 <= self.count <= MAX_COUNT:
            raise SimulatorError(f"fault.count: {FIELD_RULES['count']}")
        if self.endpoint is not None and not (0 < len(self.endpoint.strip()) <= MAX_ENDPOINT_CHARS):
            raise SimulatorError(f"fault.endpoint: must be 1 to {MAX_ENDPOINT_CHARS} characters")
        spec = PARAM_SPECS[self.kind]
        for name in self.params:
            if name not in spec:
                allowed = ", ".join(sorted(spec)) or "none"
                kind = self.kind.value
                raise SimulatorError(f"fault.params.{name}: unknown for {kind} (allowed: {allowed})")
        for name, (required, default, check) in spec.items():
            if name not in self.params:
                if required:
                    raise SimulatorError(f"fault.params.{name}: required for {self.kind.value}")
                self.params[name] = default
                continue
            problem = check(self.params[name])
            if problem:
                raise SimulatorError(f"fault.params.{name}: {problem}")
        return self

    def applies_to(self, endpoint: str) -> bool:
        """Whether the ``endpoint`` filter (if any) lets this fault apply to ``endpoint``."""
        return self.endpoint is None or _endpoint_matches(self.endpoint, endpoint)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (what ``GET /faults`` shows)."""
        out: dict[str, Any] = msgspec.to_builtins(self)
        return out


# -- param validators: each returns None when fine, else the problem in a few words ----------------------


_DECODER = msgspec.json.Decoder(Fault)


def decode_fault(data: bytes | str | dict[str, Any]) -> Fault:
    """Decode and validate one fault from JSON text or a dict; one-line :class:`SimulatorError` on error."""
    try:
        fault = msgspec.convert(data, Fault) if isinstance(data, dict) else _DECODER.decode(data)
    except msgspec.ValidationError as exc:
        # msgspec says e.g. "Expected `float`, got `str` - at `$.share`"
        raise SimulatorError(_located(str(exc))) from None
    except msgspec.DecodeError as exc:
        raise SimulatorError(f"fault: invalid JSON ({exc})") from None
    if fault.id is not None:
        raise SimulatorError("fault.id: assigned by the simulator, do not send it")
    return fault.validate()


def _located(message: str) -> str:
    unknown = re.search(r"unknown field `([^`]+)`", message)
    text, sep, where = message.rpartition(" - at `")
    path = where.rstrip("`").replace("$", "fault", 1).replace("[", ".").replace("]", "") if sep else "fault"
    if unknown:
        return f"{path}.{unknown.group(1)}: unknown field"
    if not sep:
        return f"fault: {message}"
    rule = FIELD_RULES.get(path.removeprefix("fault."))
    if rule is not None:
        return f"{path}: {rule}"
    if path == "fault.kind":
        text += " (one of: " + ", ".join(k.value for k in FaultKind) + ")"
    return f"{path}: {text}"


class _State:
    """Book-keeping of one injected fault (not part of the wire shape)."""

    __slots__ = ("admitted", "fired", "hits", "start", "stop", "window")

    def __init__(self, start: float, stop: float | None) -> None:
        self.start = start
        self.stop = stop
        self.hits = 0
        self.fired = False
        self.window = -1  # ADMISSION_LIMIT: the 1 s window being counted
        self.admitted = 0


class FaultController:
    """Holds injected faults; schedules them on the injected clock; answers :meth:`match`.

    Not thread-safe: use it from the simulator's event loop (the admin API does).
    """

    def __init__(self, clock: Clock | None = None, seed: int = 0) -> None:
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._salt = random.Random(seed).getrandbits(64).to_bytes(8, "big")
        self._faults: dict[str, Fault] = {}
        self._state: dict[str, _State] = {}
        self._next = 1
        self._activate_hooks: list[Callable[[Fault], None]] = []
        self._clear_hooks: list[Callable[[Fault], None]] = []

    # -- hooks --------------------------------------------------------------------------------------

    def on_activate(self, hook: Callable[[Fault], None]) -> None:
        """Call ``hook(fault)`` when a fault starts (at injection when ``at`` is 0)."""
        self._activate_hooks.append(hook)

    def on_clear(self, hook: Callable[[Fault], None]) -> None:
        """Call ``hook(fault)`` when a fault is cleared, expires or is spent."""
        self._clear_hooks.append(hook)

    # -- injection ----------------------------------------------------------------------------------

    def inject(self, fault: Fault) -> Fault:
        """Validate, assign an id, schedule; returns the stored fault (with ``id``)."""
        fault.validate()
        fault.id = f"f{self._next}"
        self._next += 1
        start = self._clock.monotonic() + fault.at
        stop = None if fault.duration_s is None else start + fault.duration_s
        self._faults[fault.id] = fault
        self._state[fault.id] = _State(start, stop)
        self.fire_due()
        return fault

    def clear(self, fault_id: str | None = None) -> int:
        """Remove one fault (by id) or all; returns how many were removed."""
        ids = list(self._faults) if fault_id is None else ([fault_id] if fault_id in self._faults else [])
        for fid in ids:
            self._drop(fid)
        return len(ids)

    def active(self) -> list[Fault]:
        """Faults injected and neither cleared, expired nor spent (pending ones included)."""
        self.fire_due()
        return list(self._faults.values())

    def describe(self) -> list[dict[str, Any]]:
        """JSON-able view of :meth:`active` with state (pending/active) and hits."""
        now = self._clock.monotonic()
        out = []
        for fault in self.active():
            assert fault.id is not None
            st = self._state[fault.id]
            item = fault.to_dict()
            item["state"] = "pending" if now < st.start else "active"
            item["hits"] = st.hits
            item["starts_in_s"] = max(0.0, round(st.start - now, 3))
            out.append(item)
        return out

    def hits(self, fault_id: str) -> int:
        """How many times the fault has applied so far (0 for an unknown id)."""
        st = self._state.get(fault_id)
        return 0 if st is None else st.hits

    # -- scheduling ---------------------------------------------------------------------------------

    def fire_due(self) -> None:
        """Start faults whose time has come (calling activation hooks) and end expired ones."""
        now = self._clock.monotonic()
        for fid in list(self._faults):
            fault, st = self._faults.get(fid), self._state.get(fid)
            if fault is None or st is None:
                continue
            if st.stop is not None and now >= st.stop:
                self._drop(fid)
                continue
            if not st.fired and now >= st.start:
                st.fired = True
                for hook in list(self._activate_hooks):
                    hook(fault)
                # a connection fault without a duration is a one-shot event on open connections
                if fid in self._faults and fault.duration_s is None and _one_shot(fault):
                    self._drop(fid)

    async def run(self, interval_s: float = 0.05) -> None:
        """Poll :meth:`fire_due` forever (the simulators run this as a background task)."""
        while True:
            self.fire_due()
            await asyncio.sleep(interval_s)

    # -- decisions ----------------------------------------------------------------------------------

    def selected(self, fault: Fault, session_key: str) -> bool:
        """Whether ``session_key`` is in the fault's share (deterministic, order-independent)."""
        if fault.share >= 1.0:
            return True
        if fault.share <= 0.0:
            return False
        digest = hashlib.blake2b(
            f"{fault.id}\x00{session_key}".encode(), key=self._salt, digest_size=8
        ).digest()
        return int.from_bytes(digest, "big") / 2.0**64 < fault.share

    def candidates(self, kind: FaultKind, session_key: str, endpoint: str = "") -> Iterator[Fault]:
        """Active faults of ``kind`` whose endpoint filter and share include this call (no hit counted)."""
        self.fire_due()
        now = self._clock.monotonic()
        for fid, fault in list(self._faults.items()):
            if fault.kind is not kind:
                continue
            st = self._state[fid]
            if now < st.start:
                continue
            if not fault.applies_to(endpoint):
                continue
            if not self.selected(fault, session_key):
                continue
            yield fault

    def match(self, kind: FaultKind, session_key: str, endpoint: str = "") -> Fault | None:
        """The first active fault of ``kind`` applying to this session and endpoint, counting one hit.

        A fault whose ``count`` is reached is spent and removed (``on_clear`` hooks run).
        """
        for fault in self.candidates(kind, session_key, endpoint):
            self.hit(fault)
            return fault
        return None

    def hit(self, fault: Fault) -> bool:
        """Count one hit of ``fault`` (match does this); spend it when ``count`` is reached.

        Returns False (and counts nothing) when the fault is no longer live, so an activation
        hook walking connections stops acting once ``count`` connections were hit.
        """
        if fault.id is None or fault.id not in self._state:
            return False
        st = self._state[fault.id]
        st.hits += 1
        if fault.count is not None and st.hits >= fault.count:
            self._drop(fault.id)
        return True

    def started_at(self, fault: Fault) -> float:
        """The clock's monotonic time at which ``fault`` starts (or started)."""
        assert fault.id is not None
        return self._state[fault.id].start

    def admission(self, session_key: str, endpoint: str) -> Fault | None:
        """ADMISSION_LIMIT: the fault refusing this handshake, or None to admit it.

        Each ADMISSION_LIMIT fault admits at most ``rate_per_s`` handshakes per clock second
        (fixed windows aligned on whole seconds of ``clock.time()``, the same buckets as the
        :class:`~supervisor.sim.recorder.Recorder`); the excess is refused and counts as a hit.
        """
        second = int(self._clock.time())
        refusing: Fault | None = None
        for fault in list(self.candidates(FaultKind.ADMISSION_LIMIT, session_key, endpoint)):
            assert fault.id is not None
            st = self._state[fault.id]
            if st.window != second:
                st.window, st.admitted = second, 0
            if st.admitted >= float(fault.params["rate_per_s"]):
                refusing = refusing or fault
                self.hit(fault)
        if refusing is None:
            for fault in self.candidates(FaultKind.ADMISSION_LIMIT, session_key, endpoint):
                assert fault.id is not None
                self._state[fault.id].admitted += 1
        return refusing

    # -- internals ----------------------------------------------------------------------------------

    def _drop(self, fault_id: str) -> None:
        fault = self._faults.pop(fault_id, None)
        self._state.pop(fault_id, None)
        if fault is not None:
            for hook in list(self._clear_hooks):
                hook(fault)


def _one_shot(fault: Fault) -> bool:
    if fault.kind not in CONNECTION_KINDS or fault.kind is FaultKind.BLACKHOLE:
        return False
    return fault.kind is not FaultKind.SESSION_EXPIRED or fault.params.get("mode") == "event"


def _endpoint_matches(pattern: str, endpoint: str) -> bool:
    return pattern in endpoint or fnmatch.fnmatchcase(endpoint, pattern)
