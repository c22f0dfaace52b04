"""The lifecycle and the signals recorded before it ran: a stop recorded before the
readiness moment is never ready and drains what started; SIGHUPs recorded before it are one reload
once it serves. Real signals to this process, through a record of the test's own."""

from __future__ import annotations

import os
import random
import signal
from collections.abc import Iterator

import anyio
import pytest
from anyio.abc import TaskStatus

from supervisor.config import parse_config
from supervisor.runtime.main import run_daemon
from supervisor.runtime.signals import HANDLED, SignalRecord, receiving
from supervisor.runtime.supervisor import Supervisor
from supervisor.runtime.wiring import Wiring
from tests.unit.test_bus_and_lifecycle import CONFIG

pytestmark = pytest.mark.anyio


@pytest.fixture
def record() -> Iterator[SignalRecord]:
    before = {sig: signal.getsignal(sig) for sig in HANDLED}
    made = SignalRecord().install()
    try:
        yield made
    finally:
        made.release(redeliver=False)
        for sig, handler in before.items():
            signal.signal(sig, handler)


async def test_a_stop_recorded_before_ready_is_never_ready_and_drains(record: SignalRecord) -> None:
    os.kill(os.getpid(), signal.SIGHUP)  # a reload asked for, then the stop: the stop wins
    os.kill(os.getpid(), signal.SIGTERM)  # during start-up: before the loop existed
    said: list[str] = []

    async def body() -> None:
        said.append("body")

    async def reload() -> None:
        said.append("reload")

    config = parse_config(CONFIG, "test.toml")
    async with Wiring(config, rng=random.Random(1), environ={}) as wiring:
        supervisor = Supervisor(wiring)
        with anyio.fail_after(10), receiving(record) as signals:
            forced = await run_daemon(
                supervisor,
                grace_s=0.1,
                body=body,
                on_ready=lambda: said.append("ready"),
                on_stopping=lambda: said.append("stopping"),
                on_reload=reload,
                signals=signals,
            )
            assert signals.stopped_by == signal.SIGTERM
    assert not forced
    assert said == ["stopping"]  # never ready, no body, no reload (the drain ignores the SIGHUP)
    assert {r.termination.reason.value for r in supervisor.runners.values() if r.termination} == {"STOPPED"}


async def test_sighups_recorded_before_ready_are_one_reload_once_it_serves(record: SignalRecord) -> None:
    for _ in range(3):
        os.kill(os.getpid(), signal.SIGHUP)
    said: list[str] = []
    reloaded = anyio.Event()

    async def reload() -> None:
        said.append("reload")
        reloaded.set()

    async def body() -> None:
        await reloaded.wait()
        await anyio.wait_all_tasks_blocked()  # a second reload would run now
        said.append("body done")

    config = parse_config(CONFIG, "test.toml")
    async with Wiring(config, rng=random.Random(1), environ={}) as wiring:
        supervisor = Supervisor(wiring)
        with anyio.fail_after(10), receiving(record) as signals:
            await run_daemon(
                supervisor,
                grace_s=0.1,
                body=body,
                on_ready=lambda: said.append("ready"),
                on_reload=reload,
                signals=signals,
            )
    assert said == ["ready", "reload", "body done"]


async def test_on_drained_runs_once_the_drain_is_over_and_before_the_services_stop(
    record: SignalRecord,
) -> None:
    """A fleet member frees its shards there: after every session was let go of (their rows written),
    while its services (the fleet bus, the socket API) still run."""
    said: list[str] = []

    async def service(*, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        try:
            await anyio.sleep_forever()
        finally:
            said.append("service stopped")

    config = parse_config(CONFIG, "test.toml")
    async with Wiring(config, rng=random.Random(1), environ={}) as wiring:
        supervisor = Supervisor(wiring)

        async def drained() -> None:
            runners = list(supervisor.runners.values())
            said.append(
                f"drained: {len(runners)} sessions, all let go of: {all(map(supervisor.finished, runners))}"
            )

        async def body() -> None:
            said.append("body")

        with anyio.fail_after(20), receiving(record) as signals:
            await run_daemon(
                supervisor, grace_s=10.0, services=[service], body=body, on_drained=drained, signals=signals
            )
    assert len(supervisor.runners) > 0
    assert said == [
        "body",
        f"drained: {len(supervisor.runners)} sessions, all let go of: True",
        "service stopped",
    ]
