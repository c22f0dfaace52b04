"""Genesys simulator, WebSocket faults (docs/simulators.md, "Faults"): drop, close codes, black hole, admission limit."""

from __future__ import annotations

import json

import anyio
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from supervisor.sim.faults import Fault, FaultKind
from tests.harness.simulators import Genesys
from tests.harness.waits import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

ECHO = {"action": "echo", "token": "t", "message": {"type": "Text", "text": "ping"}}


async def configured(g: Genesys, token: str) -> ClientConnection:
    ws = await connect(g.wm_url())
    await ws.send(json.dumps({"action": "configureSession", "token": token, "deploymentId": "dep-1"}))
    assert json.loads(await ws.recv())["code"] == 200
    return ws


async def closed_code(ws: ClientConnection) -> int | None:
    with pytest.raises(ConnectionClosed):
        await ws.recv()
    return ws.close_code


async def test_drop_is_seen_as_1006(genesys: Genesys) -> None:
    ws = await configured(genesys, "tok-1")
    fault = genesys.sim.faults.inject(Fault(kind=FaultKind.DROP))
    assert await closed_code(ws) == 1006
    assert ws.protocol.close_rcvd is None  # no close frame on the wire
    assert fault.id is not None and genesys.sim.recorder.fault_hits(fault.id) == 1
    assert genesys.sim.faults.active() == []  # a one-shot event
    assert genesys.sim.recorder.events("drop", listener="webmessaging") == 1
    await wait_until(lambda: genesys.sim.recorder.connections_open("webmessaging") == 0)


@pytest.mark.parametrize("code", [1000, 1001, 1011, 1012, 1013])
async def test_close_with_a_chosen_code(genesys: Genesys, code: int) -> None:
    ws = await configured(genesys, "tok-2")
    r = await genesys.http.post(
        genesys.sim.urls["admin"] + "/faults", json={"kind": "close", "params": {"code": code}}
    )
    assert r.status_code == 201
    assert await closed_code(ws) == code
    assert ws.protocol.close_rcvd is not None and ws.protocol.close_rcvd.code == code  # a real close frame


async def test_drop_a_share_of_sessions(genesys: Genesys) -> None:
    tokens = [f"share-{i}" for i in range(16)]
    sockets = {t: await configured(genesys, t) for t in tokens}
    fault = genesys.sim.faults.inject(Fault(kind=FaultKind.DROP, share=0.5))
    expected = {t for t in tokens if genesys.sim.faults.selected(fault, t)}
    assert 0 < len(expected) < len(tokens)
    for token in expected:
        assert await closed_code(sockets[token]) == 1006
    for token in set(tokens) - expected:  # the others still answer
        await sockets[token].send(json.dumps(ECHO))
        assert json.loads(await sockets[token].recv())["class"] == "StructuredMessage"
        await sockets[token].close()
    assert fault.id is not None and genesys.sim.recorder.fault_hits(fault.id) == len(expected)


async def test_drop_count_limits_victims(genesys: Genesys) -> None:
    sockets = [await configured(genesys, f"count-{i}") for i in range(4)]
    fault = genesys.sim.faults.inject(Fault(kind=FaultKind.DROP, count=2))
    assert fault.id is not None
    assert genesys.sim.recorder.fault_hits(fault.id) == 2
    for ws in sockets:
        await ws.close()


async def test_scheduled_drop_fires_when_the_clock_gets_there(genesys: Genesys) -> None:
    ws = await configured(genesys, "tok-3")
    genesys.sim.faults.inject(Fault(kind=FaultKind.DROP, at=60))
    await ws.send(json.dumps(ECHO))
    assert json.loads(await ws.recv())["code"] == 200  # not yet
    genesys.clock.advance(60)
    genesys.sim.tick()
    assert await closed_code(ws) == 1006


async def test_drop_with_duration_also_hits_new_connections(genesys: Genesys) -> None:
    genesys.sim.faults.inject(Fault(kind=FaultKind.DROP, duration_s=5))
    async with connect(genesys.wm_url()) as ws:
        await ws.send(json.dumps(ECHO))
        assert await closed_code(ws) == 1006
    genesys.clock.advance(5)
    async with connect(genesys.wm_url()) as ws:
        await ws.send(json.dumps(ECHO))
        assert json.loads(await ws.recv())["code"] == 200


async def test_blackhole_keeps_the_socket_open_and_answers_nothing(genesys: Genesys) -> None:
    ws = await configured(genesys, "tok-4")
    fault = genesys.sim.faults.inject(Fault(kind=FaultKind.BLACKHOLE))
    assert fault.id is not None
    await ws.send(json.dumps(ECHO))
    with anyio.move_on_after(0.2) as scope:  # a bounded wait for an absence, not a timing assertion
        await ws.recv()
    assert scope.cancelled_caught
    assert genesys.sim.recorder.ws_messages("webmessaging", "in", "echo") == 0
    assert genesys.sim.recorder.connections_open("webmessaging") == 1
    genesys.sim.faults.clear(fault.id)  # the held frame is read and answered now
    assert json.loads(await ws.recv())["class"] == "StructuredMessage"
    await ws.close()


@pytest.mark.parametrize(("status", "retry_after"), [(429, "2"), (503, None)])
async def test_admission_limit_refuses_the_excess(
    genesys: Genesys, status: int, retry_after: str | None
) -> None:
    fault = genesys.sim.faults.inject(
        Fault(
            kind=FaultKind.ADMISSION_LIMIT,
            endpoint="WS /v1",
            params={"rate_per_s": 2, "status": status, "retry_after": retry_after},
        )
    )
    accepted = [await connect(genesys.wm_url()) for _ in range(2)]
    with pytest.raises(InvalidStatus) as refused:
        await connect(genesys.wm_url())
    assert refused.value.response.status_code == status
    assert refused.value.response.headers.get("Retry-After") == retry_after
    genesys.clock.advance(1)  # the next one-second window
    accepted.append(await connect(genesys.wm_url()))
    rec = genesys.sim.recorder
    rows = rec.attempts_per_second("webmessaging")
    assert [(r["accepted"], r["refused"]) for r in rows] == [(2, 1), (1, 0)]
    assert rec.peak_attempts_per_second("webmessaging") == 3
    assert rec.peak_attempts_per_second("webmessaging", "accepted") == 2
    assert fault.id is not None and rec.fault_hits(fault.id) == 1
    for ws in accepted:
        await ws.close()


async def test_handshake_latency_is_recorded(genesys: Genesys) -> None:
    fault = genesys.sim.faults.inject(
        Fault(kind=FaultKind.LATENCY, params={"latency_ms": 1}, endpoint="WS /v1")
    )
    async with connect(genesys.wm_url()) as ws:
        await ws.send(json.dumps(ECHO))
        await ws.recv()
    assert fault.id is not None and genesys.sim.recorder.fault_hits(fault.id) == 2  # handshake + frame
