"""What every part of the Genesys simulator shares (:class:`SimContext`), and the HTTP fault gate.

The gate applies the request-level faults common to the login and API hosts, in this order:
LATENCY (sleep), BLACKHOLE (hold the request until the fault ends), SERVER_ERROR_BURST,
RATE_LIMIT_STORM, QUEUE_FULL (answer an error instead of the handler), then after the handler
MISSING_FIELDS, CONVERSATION_DRIFT and MALFORMED_BODY (rewrite a 200 JSON body).
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec
from aiohttp import web

from supervisor.clock import Clock
from supervisor.sim.activity import ActivityLog
from supervisor.sim.faults import Fault, FaultController, FaultKind, retry_after_header
from supervisor.sim.genesys.config import GenesysSimConfig
from supervisor.sim.genesys.conversations import ConversationChange
from supervisor.sim.genesys.state import GenesysState
from supervisor.sim.recorder import Recorder

__all__ = ["ErrorFactory", "FaultGate", "SimContext"]

#: (status, kind of fault, Retry-After value or None) -> the platform-shaped error response
#: (status, kind, Retry-After, the fault's ``message`` param: the error's text when given)
ErrorFactory = Callable[[int, FaultKind, str | None, str | None], web.Response]


@dataclass(slots=True)
class SimContext:
    """The simulator's shared parts; WebSocket modules register their push hooks here."""

    config: GenesysSimConfig
    clock: Clock
    rng: random.Random
    state: GenesysState
    faults: FaultController
    recorder: Recorder
    gate: FaultGate
    urls: dict[str, str] = field(default_factory=dict)
    # who did what when (GET {admin}/activity); the simulator gives it its clock and capacity
    activity: ActivityLog = field(default_factory=ActivityLog)
    # SILENT_DROP_ATTRIBUTES: matching updates seen per fault id (its ``after`` param)
    drop_seen: Counter[str] = field(default_factory=Counter)
    # set by webmessaging: push an agent (Outbound) message to the guest's open connections
    push_outbound: Callable[[str, dict[str, Any]], Awaitable[int]] | None = None
    # set by webmessaging: the agent left; the guest gets a Presence Disconnect and goes read-only
    guest_disconnect: Callable[[str], Awaitable[int]] | None = None
    # set by notifications: publish the events a change of a conversation causes (GN-2)
    conversation_changed: Callable[[ConversationChange], None] | None = None
    # set by notifications: tell a channel's socket it was evicted, then close it
    channel_evicted: Callable[[str], None] | None = None
    # set by notifications: a channel's subscriptions were just stored (REST or socket)
    channel_subscribed: Callable[[str], None] | None = None

    def changed(self, change: ConversationChange) -> None:
        """Tell the notifications hub what happened to a conversation (no-op before it exists)."""
        if self.conversation_changed is not None:
            self.conversation_changed(change)


class FaultGate:
    """Request-level faults for aiohttp handlers (login and API hosts)."""

    def __init__(self, faults: FaultController, recorder: Recorder, clock: Clock) -> None:
        self._faults = faults
        self._recorder = recorder
        self._clock = clock
        self._holes: dict[str, asyncio.Event] = {}
        faults.on_clear(self._released)

    def _released(self, fault: Fault) -> None:
        event = self._holes.pop(fault.id or "", None)
        if event is not None:
            event.set()

    def hit(self, kind: FaultKind, session_key: str, endpoint: str) -> Fault | None:
        """``FaultController.match`` plus recording the hit."""
        fault = self._faults.match(kind, session_key, endpoint)
        if fault is not None:
            self._recorder.record_fault_hit(fault)
        return fault

    async def hold(self, fault: Fault) -> None:
        """Wait until ``fault`` is cleared, expires or is spent (BLACKHOLE)."""
        if fault.id is None or fault.id not in {f.id for f in self._faults.active()}:
            return
        event = self._holes.setdefault(fault.id, asyncio.Event())
        await event.wait()

    async def before(self, session_key: str, endpoint: str, error: ErrorFactory) -> web.Response | None:
        """Apply the pre-handler faults; a response means "answer this instead"."""
        latency = self.hit(FaultKind.LATENCY, session_key, endpoint)
        if latency is not None:
            await asyncio.sleep(float(latency.params["latency_ms"]) / 1000.0)
        hole = self.hit(FaultKind.BLACKHOLE, session_key, endpoint)
        if hole is not None:
            await self.hold(hole)
        burst = self.hit(FaultKind.SERVER_ERROR_BURST, session_key, endpoint)
        if burst is not None:
            return error(
                int(burst.params["status"]), burst.kind, self._retry_after(burst), burst.params.get("message")
            )
        storm = self.hit(FaultKind.RATE_LIMIT_STORM, session_key, endpoint)
        if storm is not None:
            return error(429, storm.kind, self._retry_after(storm), storm.params.get("message"))
        full = self.hit(FaultKind.QUEUE_FULL, session_key, endpoint)
        if full is not None:
            return error(429, full.kind, self._retry_after(full), None)
        return None

    def _retry_after(self, fault: Fault) -> str | None:
        return retry_after_header(fault.params.get("retry_after"), self._clock.time())

    def after(self, session_key: str, endpoint: str, body: Any, conversation_id: str | None) -> bytes | Any:
        """Rewrite a successful JSON body per MISSING_FIELDS / CONVERSATION_DRIFT / MALFORMED_BODY.

        Returns the (possibly new) body object, or raw bytes for a malformed body.
        """
        if not isinstance(body, dict):
            return body
        # drift and missing fields only spend a hit on bodies that carry what they change
        if conversation_id is not None:
            drift = self.hit(FaultKind.CONVERSATION_DRIFT, session_key, endpoint)
            if drift is not None:
                other = drift.params.get("conversation_id") or _other_id(conversation_id)
                body = _replace_conversation(body, conversation_id, other)
        for fault in self._faults.candidates(FaultKind.MISSING_FIELDS, session_key, endpoint):
            fields = fault.params["fields"]
            if any(name in body for name in fields) and self._faults.hit(fault):
                self._recorder.record_fault_hit(fault)
                body = {k: v for k, v in body.items() if k not in fields}
                break
        if self.hit(FaultKind.MALFORMED_BODY, session_key, endpoint) is not None:
            return msgspec.json.encode(body)[:-1] + b',"truncated'
        return body


def _other_id(conversation_id: str | None) -> str:
    # a deterministic "other" UUID that is never the one the client holds
    base = conversation_id or "00000000-0000-4000-8000-000000000000"
    flipped = "f" if base[0] != "f" else "e"
    return flipped + base[1:]


def _replace_conversation(body: dict[str, Any], old: str | None, new: str) -> dict[str, Any]:
    out = dict(body)
    for key in ("id", "conversationId"):
        if key in out and (old is None or out[key] == old):
            out[key] = new
    return out
