"""A daemon with its durable state (store, attribute service), wired to the Genesys simulator.

The in-process daemon of :mod:`tests.harness.in_process` with ``durable=True``: real loopback
sockets, a real SQLite file; the attribute service's work runs when a test calls
:meth:`~tests.harness.in_process.Harness.settle` or ``run_due`` after moving the fake clock, so the
verification delay is a clock decision the test controls (nothing sleeps for it). Its configuration:
:func:`tests.harness.config.attributes_config`.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from supervisor.clock import Clock
from supervisor.rest.executor import Sleep
from supervisor.sim.genesys import GenesysSimulator
from tests.harness.in_process import Harness, supervised

__all__ = ["customer_attributes", "durable_daemon"]


@contextlib.asynccontextmanager
async def durable_daemon(
    config_text: str, tmp: Path, *, clock: Clock, sleep: Sleep | None = None
) -> AsyncIterator[Harness]:
    """The daemon with its store and attribute service, on ``clock`` (a FakeClock to :meth:`settle`)."""
    async with supervised(config_text, tmp, clock=clock, sleep=sleep, durable=True) as harness:
        yield harness


def customer_attributes(sim: GenesysSimulator, conversation_id: str) -> dict[str, str]:
    """The attributes the simulator holds for the conversation's customer."""
    conv = sim.state.conversations.get(conversation_id)
    assert conv is not None
    return dict(conv.customer().attributes)
