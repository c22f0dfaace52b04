"""A supervisor with its durable state (store, attribute service), wired to the Genesys simulator.

Real loopback sockets, a real SQLite file; the attribute service's work runs when a test calls
:meth:`AttributesHarness.settle` or ``run_due`` after moving the fake clock, so the verification
delay is a clock decision the test controls (nothing sleeps for it).
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel

from supervisor.attributes import AttributeService
from supervisor.bus import EventBus
from supervisor.clock import Clock, FakeClock
from supervisor.config import parse_config
from supervisor.rest.executor import Sleep
from supervisor.runtime.durable import Durable
from supervisor.runtime.supervisor import Supervisor, session_table
from supervisor.runtime.wiring import Wiring
from supervisor.sim.genesys import GenesysSimulator
from supervisor.store import UpdateOutcome
from tests.integration.conftest import wait_until
from tests.integration.runtime_harness import Recorded, genesys_config


def attributes_config(
    urls: dict[str, str],
    conversations: list[str],
    *,
    store: Path | None,
    queue_depth: int = 50,
    verify_after: float = 3.0,
    sensitive: tuple[str, ...] = (),
    synchronous: str = "normal",
    notifications: int = 0,
    request_timeout: float | None = None,
) -> str:
    """Web Messaging sessions ``wm-i`` bound to ``conversations[i]`` (the conversation a post-call
    middleware writes to), plus the ``[store]`` and ``[attributes]`` tables."""
    text = genesys_config(urls, 0, notifications=notifications)
    if request_timeout is not None:
        text = text.replace("[daemon]\n", f"[daemon]\nrequestTimeout = {request_timeout}\n", 1)
    for i, conversation in enumerate(conversations):
        text += (
            f'[[sessions]]\nid = "wm-{i}"\nplatform = "genesys"\nkind = "webmessaging"\n'
            f'agentId = "a-{i}"\nconversationId = "{conversation}"\n'
        )
    if store is not None:
        text += f'[store]\npath = "{store}"\nsynchronous = "{synchronous}"\n'
    keys = ", ".join(f'"{k}"' for k in sensitive)
    text += f"[attributes]\nqueueDepth = {queue_depth}\nverifyAfter = {verify_after}\nsensitive = [{keys}]\n"
    return text


@dataclass
class AttributesHarness:
    supervisor: Supervisor
    durable: Durable
    recorded: Recorded
    clock: Clock

    @property
    def service(self) -> AttributeService:
        return self.durable.attributes

    async def wait_active(self, n: int, limit_s: float = 20.0) -> None:
        await wait_until(lambda: self.supervisor.states().get("active", 0) == n, limit_s)

    async def settle(self, *, limit: int = 5000) -> dict[str, UpdateOutcome]:
        """Run the service's work, moving the fake clock to each next due time, until every
        acknowledged update is verified, repaired or flagged."""
        clock = self.clock
        assert isinstance(clock, FakeClock)
        service = self.service
        for _ in range(limit):
            await service.run_due()
            outcomes = await service.outcomes()
            if all(o is not UpdateOutcome.PENDING for o in outcomes.values()):
                return outcomes
            due = service.scheduler.next_due()
            assert due is not None, "updates are pending and nothing is scheduled"
            if due > clock.monotonic():
                clock.set(due)
        raise AssertionError("the attribute updates did not settle")


@contextlib.asynccontextmanager
async def durable_daemon(
    config_text: str,
    tmp: Path,
    *,
    clock: Clock,
    sleep: Sleep | None = None,
    environ: Mapping[str, str] | None = None,
    background: bool = False,
    prepare: Callable[[Wiring], Any] | None = None,
) -> AsyncIterator[AttributesHarness]:
    (tmp / "genesys-secret").write_text("not-a-real-secret")
    config = parse_config(config_text, "test.toml")
    bus = EventBus()
    recorded = Recorded(clock)
    bus.subscribe(recorded)
    async with Wiring(
        config,
        bus=bus,
        clock=clock,
        rng=random.Random(config.daemon.seed or 0),
        config_dir=tmp,
        environ={},
        sleep=sleep or anyio.sleep,
    ) as wiring:
        if prepare is not None:
            prepare(wiring)
        sessions = session_table(wiring)
        durable = await Durable.open(
            config,
            sessions=sessions,
            wiring=wiring,
            environ=environ or {},
            bus=bus,
            clock=clock,
            background=background,
        )
        supervisor = Supervisor(wiring, durable, sessions=sessions)
        try:
            async with anyio.create_task_group() as tg:
                await tg.start(supervisor.serve)
                try:
                    yield AttributesHarness(supervisor, durable, recorded, clock)
                finally:
                    await supervisor.shutdown(2.0)
                    tg.cancel_scope.cancel()
        finally:
            await durable.aclose()


def advancing(clock: FakeClock) -> Sleep:
    """The retry executor's sleep on a fake clock: a backoff moves time instead of waiting for it."""

    async def sleep(seconds: float) -> None:
        clock.advance(max(0.0, seconds))
        await anyio.lowlevel.checkpoint()

    return sleep


def customer_attributes(sim: GenesysSimulator, conversation_id: str) -> dict[str, str]:
    conv = sim.state.conversations.get(conversation_id)
    assert conv is not None
    return dict(conv.customer().attributes)
