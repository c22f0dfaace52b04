"""Request-level faults of the CXone fake, shared by the auth and API listeners.

:class:`FaultGate` applies, in this order, the faults that do not depend on the route:
BLACKHOLE (hold the request unanswered until the fault ends), LATENCY (delay),
RATE_LIMIT_STORM (429), QUEUE_FULL (429 ``QUEUE_FULL``), SERVER_ERROR_BURST (5xx). Then,
on the way out, MALFORMED_BODY and MISSING_FIELDS rewrite 2xx JSON bodies.

Body shapes of the error faults: CXone documents none for throttling (docs/platforms.md, "Errors, event shapes and limits" [I]),
so both are offered: ``{"error_code", "error_message"}`` for 429s and
``{"error", "error_description"}`` for 5xx, or an empty body. The choice comes from the
fault's ``body`` param when the shared fault schema has one (see NOTES_FOR_GENESYS.txt),
else from :attr:`FaultGate.error_bodies` (settable from Python, per kind).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from typing import Any

from aiohttp import web

from supervisor.clock import Clock
from supervisor.sim.cxone.config import ErrorBody
from supervisor.sim.cxone.wire import empty_response, json_response, oauth_error
from supervisor.sim.fault_kinds import retry_after_header
from supervisor.sim.faults import Fault, FaultController, FaultKind
from supervisor.sim.recorder import Recorder

#: MISSING_FIELDS names (case-insensitive) → the CXone keys they remove. A Genesys-style
#: ``conversationId`` means CXone's conversation-like ids: the API ``sessionId`` and the
#: event's ``ContactID``. Any other name removes the key of that name (any case).
FIELD_ALIASES: dict[str, tuple[str, ...]] = {"conversationid": ("sessionid", "contactid")}

_5XX_ERRORS = {
    500: ("server_error", "Internal Server Error"),
    502: ("bad_gateway", "Bad Gateway"),
    503: ("service_unavailable", "Service Unavailable"),
    504: ("gateway_timeout", "Gateway Timeout"),
}


class FaultWaker:
    """Wakes held requests whenever a fault starts or ends (or the simulator closes)."""

    def __init__(self, faults: FaultController) -> None:
        self._event = asyncio.Event()
        self.closing = asyncio.Event()
        faults.on_activate(self._poke)
        faults.on_clear(self._poke)

    def _poke(self, _fault: Fault | None = None) -> None:
        self._event.set()
        self._event = asyncio.Event()

    def close(self) -> None:
        """Release every held request (simulator shutdown)."""
        self.closing.set()
        self._poke()

    async def wait(self, extra: Iterable[asyncio.Event] = (), within: float | None = None) -> None:
        """Return on a fault change, on close, when an ``extra`` event is set, or after ``within`` s."""
        events = [self._event, self.closing, *extra]
        tasks = [asyncio.ensure_future(e.wait()) for e in events]
        try:
            await asyncio.wait(tasks, timeout=within, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task


class FaultGate:
    """Applies the route-independent faults; see the module docstring."""

    def __init__(self, faults: FaultController, recorder: Recorder, clock: Clock, waker: FaultWaker) -> None:
        self.faults = faults
        self.recorder = recorder
        self.clock = clock
        self.waker = waker
        #: body shape per error-fault kind when the fault has no ``body`` param
        self.error_bodies: dict[FaultKind, ErrorBody] = {
            FaultKind.RATE_LIMIT_STORM: ErrorBody.JSON,
            FaultKind.QUEUE_FULL: ErrorBody.JSON,
            FaultKind.SERVER_ERROR_BURST: ErrorBody.EMPTY,
        }

    def match(self, kind: FaultKind, key: str, endpoint: str) -> Fault | None:
        """:meth:`FaultController.match`, recording the hit in the recorder."""
        fault = self.faults.match(kind, key, endpoint)
        if fault is not None:
            self.recorder.record_fault_hit(fault)
        return fault

    def admission(self, key: str, endpoint: str) -> web.Response | None:
        """ADMISSION_LIMIT: a 429/503 refusing this request, or None to admit it."""
        fault = self.faults.admission(key, endpoint)
        if fault is None:
            return None
        self.recorder.record_fault_hit(fault)
        headers = self._retry_after(fault)
        status = int(fault.params["status"])
        if status == 429:
            return self._throttled(fault, "TooManyRequests", "Too many connection attempts")
        error, description = _5XX_ERRORS[503]
        return oauth_error(
            status, error, description, empty=self.body_of(fault) is ErrorBody.EMPTY, headers=headers
        )

    def body_of(self, fault: Fault) -> ErrorBody:
        """``json`` or ``empty`` for an error fault: its ``body`` param, else the per-kind default."""
        value = fault.params.get("body")
        if value in (ErrorBody.JSON.value, ErrorBody.EMPTY.value):
            return ErrorBody(value)
        return self.error_bodies.get(fault.kind, ErrorBody.JSON)

    async def hold_blackhole(self, key: str, endpoint: str) -> bool:
        """BLACKHOLE: wait while a black hole covers this call. True if the simulator is closing."""
        if self.match(FaultKind.BLACKHOLE, key, endpoint) is None:
            return False
        while not self.waker.closing.is_set():
            if next(self.faults.candidates(FaultKind.BLACKHOLE, key, endpoint), None) is None:
                return False
            await self.waker.wait()
        return True

    async def before(self, key: str, endpoint: str) -> web.StreamResponse | None:
        """Apply the pre-route faults; a response means "answer this and skip the route"."""
        if await self.hold_blackhole(key, endpoint):
            return empty_response(503)
        fault = self.match(FaultKind.LATENCY, key, endpoint)
        if fault is not None:
            await asyncio.sleep(float(fault.params["latency_ms"]) / 1000.0)
        fault = self.match(FaultKind.RATE_LIMIT_STORM, key, endpoint)
        if fault is not None:
            text = fault.params.get("message") or "Rate limit exceeded; retry later"
            return self._throttled(fault, "TooManyRequests", text)
        fault = self.match(FaultKind.QUEUE_FULL, key, endpoint)
        if fault is not None:
            return self._throttled(fault, "QUEUE_FULL", "The queue is full; no capacity for the request")
        fault = self.match(FaultKind.SERVER_ERROR_BURST, key, endpoint)
        if fault is not None:
            status = int(fault.params["status"])
            headers = self._retry_after(fault)
            error, description = _5XX_ERRORS.get(status, _5XX_ERRORS[500])
            description = fault.params.get("message") or description
            empty = self.body_of(fault) is ErrorBody.EMPTY
            return oauth_error(status, error, description, empty=empty, headers=headers)
        return None

    def _retry_after(self, fault: Fault) -> dict[str, str]:
        value = retry_after_header(fault.params.get("retry_after"), self.clock.time())
        return {} if value is None else {"Retry-After": value}

    def _throttled(self, fault: Fault, code: str, message: str) -> web.Response:
        headers = self._retry_after(fault)
        if self.body_of(fault) is ErrorBody.EMPTY and fault.kind is not FaultKind.QUEUE_FULL:
            return empty_response(429, headers)
        # QUEUE_FULL always names itself: without the code it would be a plain 429 storm
        return json_response(429, {"error_code": code, "error_message": message}, headers)

    def rewrite(self, key: str, endpoint: str, status: int, body: dict[str, Any]) -> web.Response | None:
        """MALFORMED_BODY / MISSING_FIELDS on a 2xx JSON answer; None to send ``body`` unchanged."""
        if not 200 <= status < 300:
            return None
        if self.match(FaultKind.MALFORMED_BODY, key, endpoint) is not None:
            # a 200 whose body is not JSON (cut mid-object), as a broken proxy would send
            return web.Response(status=status, body=b'{"sessionId": "', content_type="application/json")
        fault = self.match(FaultKind.MISSING_FIELDS, key, endpoint)
        if fault is None:
            return None
        return json_response(status, strip_fields(body, fault.params["fields"]))


def strip_fields(body: dict[str, Any], fields: Iterable[str]) -> dict[str, Any]:
    """``body`` without the named fields, at the top level and inside each of ``body["events"]``."""
    doomed: set[str] = set()
    for name in fields:
        lower = name.lower()
        doomed.add(lower)
        doomed.update(FIELD_ALIASES.get(lower, ()))
    out = {k: v for k, v in body.items() if k.lower() not in doomed}
    events = out.get("events")
    if isinstance(events, list):
        out["events"] = [
            {k: v for k, v in e.items() if k.lower() not in doomed} if isinstance(e, dict) else e
            for e in events
        ]
    return out
