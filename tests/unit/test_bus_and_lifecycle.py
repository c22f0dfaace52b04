"""The bus stamps typed events; the lifecycle says "ready" only once every service has started."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import TaskStatus

from supervisor.bus import EventBus, JsonLineSink
from supervisor.config import parse_config
from supervisor.events import (
    Correlation,
    DaemonStarted,
    Published,
    RetryAttempt,
    RetryKind,
    SessionTransition,
    wire,
)
from supervisor.runtime.main import run_daemon
from supervisor.runtime.supervisor import Supervisor
from supervisor.runtime.wiring import Wiring
from supervisor.vocabulary import CircuitState, SessionState

pytestmark = pytest.mark.anyio


def test_the_bus_stamps_a_strictly_rising_seq_and_one_boot_id() -> None:
    bus = EventBus()
    seen: list[Published] = []
    bus.subscribe(seen.append)
    for i in range(5):
        bus.publish(
            SessionTransition(
                f"s-{i}", SessionState.CONNECTING, SessionState.ACTIVE, "validated", "VALIDATED", "t"
            )
        )
    assert [p.seq for p in seen] == [1, 2, 3, 4, 5] and bus.seq == 5
    assert {p.boot_id for p in seen} == {bus.boot_id}
    assert EventBus().boot_id != bus.boot_id  # a restart is a new boot


def test_a_failing_sink_is_counted_and_skipped() -> None:
    bus = EventBus()
    seen: list[int] = []

    def broken(published: Published) -> None:
        raise RuntimeError("sink down")

    bus.subscribe(broken)
    bus.subscribe(lambda p: seen.append(p.seq))
    bus.publish(DaemonStarted(1, "x.toml"))
    assert seen == [1] and bus.sink_failures == 1


def test_session_and_circuit_transitions_are_told_apart_by_type() -> None:
    from supervisor.events import CircuitTransition

    a = SessionTransition(
        "s-1", SessionState.ACTIVE, SessionState.RECONNECTING, "connection_lost", "ABNORMAL_CLOSURE", "t"
    )
    b = CircuitTransition("circuit:x", CircuitState.CLOSED, CircuitState.OPEN, "trip", "RATE_LIMITED", "t")
    assert (a.name, b.name) == ("SESSION_TRANSITION", "CIRCUIT_TRANSITION")
    assert a.fields()["machineId"] == "s-1" and b.fields()["machineId"] == "circuit:x"


def test_the_wire_form_keeps_the_documented_names_and_adds_seq_and_boot_id() -> None:
    bus = EventBus(boot_id="boot-1")
    lines: list[str] = []

    class Stream:
        def write(self, text: str) -> None:
            lines.append(text)

        def flush(self) -> None:
            pass

    bus.subscribe(JsonLineSink(Stream()))  # type: ignore[arg-type]
    retry = RetryAttempt(
        "wm-3", RetryKind.RECONNECT, 1, 4.71, "ABNORMAL_CLOSURE", "network", "2026-11-29T22:09:32.279Z"
    )
    published = bus.publish(retry, Correlation("wm-3", agent_id="a-3", conversation_id="c-3"))
    assert wire(published) == {
        "event": "RETRY_ATTEMPT",
        "sessionId": "wm-3",
        "agentId": "a-3",
        "conversationId": "c-3",
        "timestamp": "2026-11-29T22:09:32.279Z",
        "kind": "reconnect",
        "attempt": 1,
        "delayS": 4.71,
        "code": "ABNORMAL_CLOSURE",
        "policy": "network",
        "seq": 1,
        "bootId": "boot-1",
    }
    assert lines == [
        '{"event":"RETRY_ATTEMPT","sessionId":"wm-3","agentId":"a-3","conversationId":"c-3",'
        '"timestamp":"2026-11-29T22:09:32.279Z","kind":"reconnect","attempt":1,"delayS":4.71,'
        '"code":"ABNORMAL_CLOSURE","policy":"network","seq":1,"bootId":"boot-1"}\n'
    ]


CONFIG = """
[daemon]
seed = 1
[platforms.genesys]
loginUrl = "http://127.0.0.1:9/login"
apiUrl = "http://127.0.0.1:9/api"
webmessagingUrl = "ws://127.0.0.1:9/wm"
deploymentId = "d"
[reconnect]
firstDelayMin = 30.0
firstDelayMax = 30.0
[[sessions]]
id = "wm-0"
platform = "genesys"
kind = "webmessaging"
[[sessions]]
id = "wm-1"
platform = "genesys"
kind = "webmessaging"
"""


async def test_ready_only_after_every_service_started_and_every_session_handed_over(tmp_path: Path) -> None:
    """The readiness moment: services started in order, sessions handed over."""
    config = parse_config(CONFIG, "test.toml")
    order: list[str] = []
    gate = anyio.Event()

    def service(name: str, wait: bool) -> Any:
        async def serve(*, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
            if wait:
                await gate.wait()  # a socket still binding: readiness must wait for it
            order.append(f"{name} started")
            task_status.started()
            await anyio.sleep_forever()

        return serve

    async with Wiring(config, rng=random.Random(1), environ={}) as wiring:
        supervisor = Supervisor(wiring)

        def ready() -> None:
            order.append(f"ready with {sorted(supervisor.runners)}")

        async def body() -> None:
            order.append("body")

        async with anyio.create_task_group() as tg:
            tg.start_soon(
                lambda: run_daemon(
                    supervisor,
                    grace_s=0.1,
                    services=[service("subscribe", True), service("telemetry", False)],
                    body=body,
                    on_ready=ready,
                )
            )
            await anyio.wait_all_tasks_blocked()
            assert order == []  # the first service has not started: not ready
            assert sorted(supervisor.runners) == ["wm-0", "wm-1"]  # but the sessions are handed over
            gate.set()
    assert order == ["subscribe started", "telemetry started", "ready with ['wm-0', 'wm-1']", "body"]


async def test_a_stop_request_drains_like_a_signal(tmp_path: Path) -> None:
    config = parse_config(CONFIG, "test.toml")
    stop = anyio.Event()
    stopping: list[str] = []
    async with Wiring(config, rng=random.Random(1), environ={}) as wiring:
        supervisor = Supervisor(wiring)
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(
                    lambda: run_daemon(
                        supervisor,
                        grace_s=0.1,
                        on_ready=stop.set,  # ask for the drain as soon as it is ready
                        on_stopping=lambda: stopping.append("stopping"),
                        stop=stop,
                    )
                )
    assert stopping == ["stopping"]
    assert {r.termination.reason.value for r in supervisor.runners.values() if r.termination} == {"STOPPED"}
