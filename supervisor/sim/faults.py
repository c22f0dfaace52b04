"""Fault injection shared by the Genesys and CXone simulators (docs/simulators.md).

A :class:`Fault` is data (a msgspec Struct, so the admin API decodes it straight from JSON);
a :class:`FaultController` holds the injected faults, schedules them on an injected
:class:`~supervisor.clock.Clock`, and answers the simulators' one question at every decision
point: *does a fault of this kind apply to this session and endpoint right now?*

Public API (stable; the CXone simulator builds on it; the controller lives in
:mod:`supervisor.sim.fault_controller`, the kinds and :class:`Fault` in :mod:`supervisor.sim.fault_kinds`)::

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
MISSING_FIELDS              200 responses lose ``fields`` (default connected, id, sessionId: one field each
                            platform really sends and the daemon requires; docs/taxonomy.md)
CONVERSATION_DRIFT          responses carry another conversation id: ``conversation_id`` (default: a new UUID)
DUPLICATE_MESSAGE           409 on message creation, as if the message id had been seen
QUEUE_FULL                  429 with error code QUEUE_FULL. ``retry_after`` (default null)
SILENT_DROP_ATTRIBUTES      attribute updates answered as success but not persisted. ``after`` (int >= 0,
                            default 0: the first ``after`` matching updates still persist)
SESSION_EXPIRED             Genesys WM: ``mode`` "event" (SessionExpiredEvent push, default) or "code" (4006)
CONNECTION_CLOSED_EVENT     Genesys WM: push ConnectionClosedEvent then close 1000. ``reason`` (optional str)
SOCKET_CLOSING              Genesys notifications: v2.system.socket_closing, then close after ``lead_s``
                            (default: the simulator's configured lead), ``code`` (default 1001)
SYSTEM_TOPIC                Genesys notifications: v2.system.<``type``> (no_longer_subscribed: the channel
                            loses its topics; subscription_changed: they become ``topics``; token_revoked:
                            its token is revoked, then the channel closes), ``reason`` (PY269's)
SESSION_ENDED               CXone: the agent session is ended (get-next-event 409)
STALE_SESSION               CXone: the next poll answers as if the client's session id were old (replay)
MALFORMED_BODY              a 200 whose body is not valid JSON
==========================  ===============================================================================

RATE_LIMIT_STORM and SERVER_ERROR_BURST also take ``message``: the error's text (a short string) instead of
the simulator's own.
RATE_LIMIT_STORM, SERVER_ERROR_BURST, QUEUE_FULL and ADMISSION_LIMIT also take ``body``: "json",
"empty" or null (the simulator's choice); CXone honours it, Genesys always answers its JSON shapes.
ADMISSION_LIMIT on CXone counts every HTTP request as an attempt.

Connection faults (DROP, CLOSE, BLACKHOLE, SOCKET_CLOSING, SYSTEM_TOPIC, CONNECTION_CLOSED_EVENT,
SESSION_EXPIRED with mode "event") act through :meth:`on_activate` hooks on the connections open
when the fault starts. Without ``duration_s`` that is a one-shot event and the fault is then spent
(it leaves :meth:`active`); with ``duration_s`` they also hit connections opened while the fault is
active (the simulators call :meth:`match` after each handshake). BLACKHOLE is a state: when it ends,
black-holed connections resume.

Every number is finite and bounded (:mod:`supervisor.sim.fault_kinds`, docs/simulators.md).

Errors: :meth:`Fault.validate` / :func:`decode_fault` raise :class:`~supervisor.errors.SimulatorError`
with one line naming the field and its bounds, e.g. ``fault.params.latency_ms: must be a finite
number from 0 to 600000``.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from supervisor.errors import SimulatorError, located
from supervisor.sim.fault_controller import FaultController
from supervisor.sim.fault_kinds import (
    CONNECTION_KINDS,
    FIELD_RULES,
    PARAM_SPECS,
    Fault,
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
    where, problem = located(message)
    path = "fault" + ("." + where.replace("[", ".").replace("]", "") if where else "")
    if unknown:
        return f"{path}.{unknown.group(1)}: unknown field"
    if " - at `" not in message:
        return f"fault: {message}"
    text = problem[:1].upper() + problem[1:]
    rule = FIELD_RULES.get(path.removeprefix("fault."))
    if rule is not None:
        return f"{path}: {rule}"
    if path == "fault.kind":
        text += " (one of: " + ", ".join(k.value for k in FaultKind) + ")"
    return f"{path}: {text}"
