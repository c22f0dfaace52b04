"""Everything the CXone route handlers share, in one object (no module-level state)."""

from __future__ import annotations

from dataclasses import dataclass, field

from aiohttp import web

from supervisor.clock import Clock
from supervisor.sim.cxone.config import CxoneSimConfig
from supervisor.sim.cxone.gate import FaultGate
from supervisor.sim.cxone.state import SessionStore
from supervisor.sim.cxone.tokens import TokenStore
from supervisor.sim.faults import FaultController
from supervisor.sim.recorder import Recorder

#: the aiohttp app key under which each listener's app finds the context
CONTEXT_KEY: web.AppKey[CxoneContext] = web.AppKey("cxone_context")


@dataclass(slots=True)
class CxoneContext:
    """Shared state of one CXone simulator: config, clock, stores, faults, recorder, URLs."""

    config: CxoneSimConfig
    clock: Clock
    tokens: TokenStore
    sessions: SessionStore
    faults: FaultController
    recorder: Recorder
    gate: FaultGate
    #: filled once the listeners are bound: {"auth": "http://127.0.0.1:P", "api": ..., "admin": ...}
    urls: dict[str, str] = field(default_factory=dict)

    def record(self, request: web.Request, endpoint: str, status: int) -> None:
        """Count one answered request (method + route template + status + Idempotency-Key)."""
        _, _, template = endpoint.partition(" ")
        self.recorder.record_request(
            request.method, template, status, idempotency_key=request.headers.get("Idempotency-Key")
        )
