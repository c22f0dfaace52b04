"""Manual circuit control (``ctl circuit isolate|close|reset``): the runtime's side, and the end of ``--for``.

The decisions are the circuit machine's (machines/circuit.py: ``isolated``, ``close``, ``reset``);
this module finds the endpoint an operator names, asks its gate (supervisor/attempts/shell.py, so the
moves are published like any other, and the sessions an isolation held are woken when it ends), and
keeps the one timer of the daemon that ends an isolation given ``--for`` on time (the first
``admit()`` after the end would notice it too, but nothing may ask for hours, and ``Status`` and
``watch`` must not show an isolation that is over).

An isolation lives in memory only: a restarted daemon starts with every circuit closed
(docs/runtime.md, "Manual circuit control").
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable

import anyio
from anyio.abc import TaskStatus

from supervisor.attempts import Attempts, Gate
from supervisor.bus import EventBus
from supervisor.clock import Clock
from supervisor.config import Config, GenesysConfig, SessionKind, tenant_tables
from supervisor.runtime.hooks import BusHooks
from supervisor.runtime.sessions import ManualMove
from supervisor.vocabulary import (
    CXONE_AGENT_SESSIONS,
    GENESYS_STREAMING,
    GENESYS_WEBMESSAGING,
    CircuitState,
    EndpointId,
    Platform,
)

__all__ = ["ManualCircuits", "configured_endpoints"]

Sleep = Callable[[float], Awaitable[None]]

#: the endpoints whose attempts are connection attempts (paced from the start, places in flight)
_CONNECT = frozenset({GENESYS_WEBMESSAGING, GENESYS_STREAMING, CXONE_AGENT_SESSIONS})


def configured_endpoints(config: Config) -> list[EndpointId]:
    """Every endpoint the configuration's platforms and sessions use, sorted."""
    found: set[EndpointId] = set()
    # every tenant's: the default one's as they were named, a named tenant's NAME/...
    for tenant, table in tenant_tables(config):
        if isinstance(table, GenesysConfig):
            found |= {
                EndpointId.api(Platform.GENESYS).of(tenant),
                EndpointId.oauth(Platform.GENESYS).of(tenant),
            }
        else:
            found |= {
                EndpointId.api(Platform.CXONE).of(tenant),
                EndpointId.oauth(Platform.CXONE).of(tenant),
                CXONE_AGENT_SESSIONS.of(tenant),
            }
    for spec in config.sessions:
        if spec.kind is SessionKind.WEBMESSAGING:
            found.add(GENESYS_WEBMESSAGING.of(spec.tenant))
        elif spec.kind is SessionKind.NOTIFICATIONS:
            found.add(GENESYS_STREAMING.of(spec.tenant))
    return sorted(found)


class ManualCircuits:
    """The control verbs on circuits, and the timer that ends isolations given ``--for``."""

    def __init__(
        self, attempts: Attempts, config: Callable[[], Config], *, bus: EventBus, clock: Clock, sleep: Sleep
    ) -> None:
        self._attempts = attempts
        self._config = config
        self._reports = BusHooks(bus, clock)
        self._clock = clock
        self._sleep = sleep
        # set when an isolation with an end is given: the timer looks again at the earliest end
        self._rearm = anyio.Event()

    def endpoints(self) -> list[EndpointId]:
        """The endpoints an operator may name: those configured, and any the daemon has made."""
        return sorted({*configured_endpoints(self._config()), *self._attempts.endpoints.all()})

    def find(self, name: str) -> EndpointId | None:
        """The endpoint named ``name`` (``genesys:api``), None when the daemon has no such endpoint."""
        return next((e for e in self.endpoints() if str(e) == name), None)

    def _gate(self, endpoint: EndpointId) -> Gate:
        if endpoint in self._attempts.endpoints.all():
            return self._attempts.get(endpoint)
        if EndpointId(endpoint.platform, endpoint.name) in _CONNECT:
            return self._attempts.connect(endpoint)
        if endpoint.name == EndpointId.oauth(endpoint.platform).name:
            return self._attempts.token(endpoint)
        return self._attempts.get(endpoint)

    def isolate(self, endpoint: EndpointId, for_s: float | None = None) -> ManualMove:
        gate = self._gate(endpoint)
        previous = gate.circuit_state
        gate.isolate(self._reports, for_s)
        if for_s is not None:
            self._rearm.set()
        return self._move(gate, previous, True, for_s)

    def close(self, endpoint: EndpointId) -> ManualMove:
        """End an isolation. A circuit that is not isolated is left as it is (``changed`` False):
        closing a tripped (open, half-open) circuit by hand is ``reset``'s, the caller says so."""
        gate = self._gate(endpoint)
        previous = gate.circuit_state
        if previous is not CircuitState.ISOLATED:
            return self._move(gate, previous, False)
        gate.close(self._reports)
        return self._move(gate, previous, True)

    def reset(self, endpoint: EndpointId) -> ManualMove:
        gate = self._gate(endpoint)
        previous = gate.circuit_state
        gate.reset(self._reports)
        return self._move(gate, previous, True)

    def _move(
        self, gate: Gate, previous: CircuitState, changed: bool, for_s: float | None = None
    ) -> ManualMove:
        return ManualMove(gate.endpoint_id, gate.circuit_id, previous, gate.circuit_state, changed, for_s)

    # -- the end of ``--for`` -------------------------------------------------------------------------

    def _next_end(self) -> float:
        ends = [
            until
            for name in self._attempts.endpoints.all()
            if (until := self._attempts.get(name).isolated_until) is not None
        ]
        return min(ends, default=math.inf)

    def _expire_due(self) -> None:
        for name in list(self._attempts.endpoints.all()):
            self._attempts.get(name).expire(self._reports)

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Until cancelled: end each isolation given ``--for`` when its time is up (on the injected
        clock and sleep: a test moves time, nothing waits for it)."""
        task_status.started()
        while True:
            self._rearm = anyio.Event()
            self._expire_due()
            wait = self._next_end() - self._clock.monotonic()
            async with anyio.create_task_group() as tg:
                tg.start_soon(_cancel_when_set, self._rearm, tg.cancel_scope)
                if math.isinf(wait):
                    await anyio.sleep_forever()
                else:
                    await self._sleep(max(wait, 0.0))
                tg.cancel_scope.cancel()


async def _cancel_when_set(event: anyio.Event, scope: anyio.CancelScope) -> None:
    await event.wait()
    scope.cancel()
