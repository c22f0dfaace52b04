"""A supervisor wired to the loopback simulators, with the short durations the tests use.

Everything runs over real sockets against our simulators: no transport is mocked. Waits
are for outcomes (a state reached, a request recorded), bounded by a deadline; no test
sleeps for a timer or asserts on a duration.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import TaskGroup

from supervisor.bus import EventBus
from supervisor.clock import Clock, SystemClock
from supervisor.config import Config, parse_config
from supervisor.events import Published, wire
from supervisor.rest.executor import Sleep
from supervisor.runtime.supervisor import Supervisor
from supervisor.runtime.wiring import NotificationSink, Wiring
from supervisor.sim.cxone import CxoneSimulator
from supervisor.sim.genesys import GenesysSimulator
from tests.integration.conftest import wait_until


@dataclass
class Recorded:
    """Every bus event in its wire form, with the monotonic time it was published."""

    clock: Clock
    events: list[tuple[float, str, dict[str, Any]]] = field(default_factory=list)
    published: list[Published] = field(default_factory=list)

    def __call__(self, published: Published) -> None:
        self.published.append(published)
        self.events.append((self.clock.monotonic(), published.event.name, wire(published)))

    def named(self, name: str) -> list[dict[str, Any]]:
        return [p for _, n, p in self.events if n == name]

    def timed(self, name: str) -> list[tuple[float, dict[str, Any]]]:
        return [(t, p) for t, n, p in self.events if n == name]


@dataclass
class Harness:
    supervisor: Supervisor
    recorded: Recorded
    tg: TaskGroup
    genesys: GenesysSimulator | None = None
    cxone: CxoneSimulator | None = None

    @property
    def runners(self) -> dict[str, Any]:
        return self.supervisor.runners

    def states(self) -> dict[str, int]:
        return self.supervisor.states()

    def all_in(self, state: str) -> bool:
        return all(r.state.value == state for r in self.runners.values())

    async def wait(self, predicate: Callable[[], bool], limit_s: float = 10.0) -> None:
        """Wait for an outcome (a state reached, a request recorded), bounded by ``limit_s``."""
        await wait_until(predicate, limit_s)

    def terminations(self) -> dict[str, Any]:
        return {sid: r.termination for sid, r in self.runners.items() if r.termination is not None}


def genesys_config(urls: dict[str, str], sessions: int, **overrides: Any) -> str:
    lines = [
        "[daemon]",
        f"seed = {overrides.get('seed', 7)}",
        "shutdownGrace = 2.0",
        "[reconnect]",
        f"firstDelayMin = {overrides.get('first_min', 0.2)}",
        f"firstDelayMax = {overrides.get('first_max', 0.8)}",
        f"horizon = {overrides.get('horizon', 600.0)}",
        "[circuit]",
        f"openFor = {overrides.get('open_for', 1.0)}",
        f"probeTimeout = {overrides.get('probe_timeout', 2.0)}",
        "[tokens]",
        f"earlyRefresh = {overrides.get('early_refresh', 0.0)}",
        "[admission]",
        f"adaptive = {'true' if overrides.get('adaptive', True) else 'false'}",
        f"retryBudgetRatio = {overrides.get('retry_budget_ratio', 0.1)}",
        f"retryBudgetMinPerSecond = {overrides.get('retry_budget_min', 5.0)}",
        f"connectsInFlight = {overrides.get('connects_in_flight', 128)}",
        "[platforms.genesys]",
        f'loginUrl = "{urls["login"]}"',
        f'apiUrl = "{urls["api"]}"',
        f'webmessagingUrl = "{urls["webmessaging"]}"',
        f'streamingUrl = "{urls["streaming"]}"',
        'clientId = "demo-client"',
        'clientSecretFile = "genesys-secret"',
        'deploymentId = "dep-1"',
        "[platforms.genesys.keepalive]",
        "echoInterval = 0",
        "pingInterval = 5.0",
        "pingTimeout = 5.0",
        f"openTimeout = {overrides.get('open_timeout', 10.0)}",
    ]
    for i in range(sessions):
        lines += [
            "[[sessions]]",
            f'id = "wm-{i}"',
            'platform = "genesys"',
            'kind = "webmessaging"',
            f'agentId = "a-{i}"',
        ]
        # a guest learns no conversation (docs/taxonomy.md): the configuration names the one it is on
        conversations = overrides.get("conversations", ())
        if i < len(conversations):
            lines.append(f'conversationId = "{conversations[i]}"')
    for i in range(overrides.get("notifications", 0)):
        lines += [
            "[[sessions]]",
            f'id = "nt-{i}"',
            'platform = "genesys"',
            'kind = "notifications"',
            f'agentId = "n-{i}"',
        ]
    return "\n".join(lines) + "\n"


def cxone_config(
    urls: dict[str, str],
    sessions: int,
    *,
    poll_timeout: int = 1,
    watchdog: float = 5.0,
    horizon: float = 600.0,
    open_for: float = 30.0,
) -> str:
    lines = [
        "[daemon]",
        "seed = 3",
        "shutdownGrace = 2.0",
        "[circuit]",
        f"openFor = {open_for}",
        "[reconnect]",
        f"horizon = {horizon}",
        "firstDelayMin = 0.2",
        "firstDelayMax = 0.8",
        "[platforms.cxone]",
        f'authUrl = "{urls["auth"]}"',
        'clientId = "app@vendor"',
        'clientSecretFile = "cxone-secret"',
        'username = "agent1"',  # the access key id
        'passwordFile = "cxone-password"',  # the access key secret
        f"pollTimeout = {poll_timeout}",
        f"pollWatchdog = {watchdog}",
    ]
    for i in range(sessions):
        lines += [
            "[[sessions]]",
            f'id = "cx-{i}"',
            'platform = "cxone"',
            'kind = "agent-session"',
            f'stationId = "station-{i}"',
            f'agentId = "{100001 + i}"',
        ]
    return "\n".join(lines) + "\n"


@contextlib.asynccontextmanager
async def supervised(
    config_text: str,
    tmp: Path,
    *,
    genesys: GenesysSimulator | None = None,
    cxone: CxoneSimulator | None = None,
    clock: Clock | None = None,
    start: bool = True,
    sleep: Sleep | None = None,
    notification_sink: NotificationSink | None = None,
) -> AsyncIterator[Harness]:
    (tmp / "genesys-secret").write_text("not-a-real-secret")
    (tmp / "cxone-secret").write_text("not-a-real-secret")
    (tmp / "cxone-password").write_text("not-a-real-access-key-secret")
    config: Config = parse_config(config_text, "test.toml")
    clock = clock or SystemClock()
    bus = EventBus()
    recorded = Recorded(clock)
    bus.subscribe(recorded)
    seed = config.daemon.seed or 0
    async with (
        Wiring(
            config,
            bus=bus,
            clock=clock,
            rng=random.Random(seed),
            config_dir=tmp,
            environ={},
            sleep=sleep or anyio.sleep,
            notification_sink=notification_sink,
        ) as wiring,
        anyio.create_task_group() as tg,
    ):
        sup = Supervisor(wiring)
        if start:
            await tg.start(sup.serve)
        harness = Harness(sup, recorded, tg, genesys, cxone)
        try:
            yield harness
        finally:
            await sup.shutdown(2.0)
            tg.cancel_scope.cancel()
