"""The WebSocket bridge against the daemon and the Genesys simulator, over real sockets (docs/bridge.md).

The daemon runs in-process with its socket API on real Unix sockets; the bridge subscribes to it as
any subscriber does and serves plain WebSocket clients (``websockets``' own client) on loopback. What
a client receives is compared with what its token's scope allows: its agent's sessions, the sessions
it names, nothing else.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from supervisor.api.protocol import Method
from supervisor.bridge.ratelimit import FailureLimiter
from supervisor.bridge.server import Bridge, BridgeSettings, Listen, load_tokens
from supervisor.sim.faults import Fault, FaultKind
from supervisor.sim.genesys import GenesysSimulator
from tests.harness.config import genesys_config
from tests.harness.in_process import Harness
from tests.integration.api_harness import Conn, api_daemon

pytestmark = [pytest.mark.integration, pytest.mark.anyio, pytest.mark.genesys_sim(seed=5)]

AGENT0 = "token-of-agent-a-0"
WM2 = "token-naming-wm-2"
ORIGIN = "https://desktop.example.test"


def line(token: str, **scope: Any) -> str:
    return json.dumps({"sha256": hashlib.sha256(token.encode()).hexdigest(), **scope}) + "\n"


@contextlib.asynccontextmanager
async def bridged(
    h: Harness, tmp: Path, *, limiter: FailureLimiter | None = None
) -> AsyncIterator[tuple[Bridge, str]]:
    tokens = tmp / "tokens"
    tokens.write_text(line(AGENT0, agents=["a-0"]) + line(WM2, sessions=["wm-2"]))
    settings = BridgeSettings(
        socket=h.subscribe, listen=Listen("127.0.0.1", 0), tokens=tokens, origins=frozenset({ORIGIN})
    )
    bridge = Bridge(settings, load_tokens(tokens), limiter=limiter)
    server = await bridge.start()
    async with anyio.create_task_group() as tg:
        tg.start_soon(bridge.follow)
        try:
            yield bridge, f"ws://127.0.0.1:{bridge.port}"
        finally:
            server.close()
            await server.wait_closed()
            tg.cancel_scope.cancel()


async def receive(ws: ClientConnection, limit_s: float = 10.0) -> dict[str, Any]:
    with anyio.fail_after(limit_s):
        message = await ws.recv()
    parsed: dict[str, Any] = json.loads(message)
    return parsed


async def until(ws: ClientConnection, predicate: Any, seen: list[dict[str, Any]]) -> dict[str, Any]:
    while True:
        message = await receive(ws)
        seen.append(message)
        if predicate(message):
            return message


async def stop(h: Harness, session_id: str) -> None:
    conn = await Conn.open(h.control)
    try:
        reply = await conn.call(Method.STOP_SESSION, {"sessionId": session_id})
        assert reply.error is None, reply
    finally:
        await conn.aclose()


async def test_each_token_gets_its_scope_only(genesys_sim: GenesysSimulator, tmp_path: Path) -> None:
    async with api_daemon(genesys_config(genesys_sim.urls, 3), tmp_path) as h:
        await h.wait(lambda: len(h.runners) == 3 and h.all_in("active"))
        async with bridged(h, tmp_path) as (_, url):
            # a script: the bearer header on the upgrade; a browser-like client: the first message
            async with (
                connect(url, additional_headers={"Authorization": f"Bearer {AGENT0}"}) as by_agent,
                connect(url, origin=ORIGIN) as by_session,  # type: ignore[arg-type]
            ):
                await by_session.send(json.dumps({"token": WM2}))
                snapshot = await receive(by_agent)
                assert snapshot["type"] == "snapshot" and isinstance(snapshot["bootId"], str)
                assert [(s["sessionId"], s["agentId"]) for s in snapshot["sessions"]] == [("wm-0", "a-0")]
                assert [s["sessionId"] for s in (await receive(by_session))["sessions"]] == ["wm-2"]

                # another agent's session ends first: nobody here may see it
                await stop(h, "wm-1")
                await stop(h, "wm-0")
                await stop(h, "wm-2")
                seen: list[dict[str, Any]] = []
                ended = await until(by_agent, lambda m: m.get("event") == "SESSION_TERMINATED", seen)
                assert (ended["sessionId"], ended["agentId"]) == ("wm-0", "a-0")
                assert ended["action"] == "REVOKE_LOCAL_STORAGE_AND_REAUTHENTICATE"
                assert {m.get("sessionId") for m in seen} == {"wm-0"}
                # the delta carries no agentId: the bridge routed it by the session's agent from the snapshot
                assert [(m["type"], m["state"]) for m in seen if m["type"] == "delta"] == [
                    ("delta", "terminated")
                ]
                other: list[dict[str, Any]] = []
                await until(by_session, lambda m: m.get("event") == "SESSION_TERMINATED", other)
                assert {m.get("sessionId") for m in other} == {"wm-2"}

            # a client that comes later starts from the bridge's mirror: the session terminated, with its action
            async with connect(url, additional_headers={"Authorization": f"Bearer {AGENT0}"}) as late:
                (row,) = (await receive(late))["sessions"]
                assert row["state"] == "terminated"
                assert row["termination"]["action"] == "REVOKE_LOCAL_STORAGE_AND_REAUTHENTICATE"


async def test_refusals(
    genesys_sim: GenesysSimulator, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with api_daemon(genesys_config(genesys_sim.urls, 1), tmp_path) as h:
        await h.wait(lambda: h.all_in("active"))
        # room for the five failures below (the limit has its own test)
        async with bridged(h, tmp_path, limiter=FailureLimiter(burst=10)) as (bridge, url):
            with pytest.raises(InvalidStatus) as wrong:
                async with connect(url, additional_headers={"Authorization": "Bearer not-a-token"}):
                    pass
            assert wrong.value.response.status_code == 401
            with pytest.raises(InvalidStatus) as elsewhere:
                async with connect(url, origin="https://evil.example.test"):  # type: ignore[arg-type]
                    pass
            assert elsewhere.value.response.status_code == 403
            # a browser of the allowed origin, with a wrong token, and with none
            for first in ({"token": "not-a-token"}, {}, "not json"):
                async with connect(url, origin=ORIGIN) as ws:  # type: ignore[arg-type]
                    await ws.send(first if isinstance(first, str) else json.dumps(first))
                    with pytest.raises(ConnectionClosed) as closed:
                        await receive(ws)
                    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
            # an authenticated client that sends anything more ends its stream
            async with connect(url, additional_headers={"Authorization": f"Bearer {AGENT0}"}) as ws:
                await receive(ws)
                await ws.send("{}")
                with pytest.raises(ConnectionClosed):
                    await receive(ws)
            assert bridge.stats()["failedAuthentications"] == 5  # 401, the origin, three first messages
    out = capsys.readouterr()
    assert "not-a-token" not in out.out + out.err and AGENT0 not in out.out + out.err
    assert [json.loads(x)["event"] for x in out.out.splitlines()].count("BRIDGE_AUTH_FAILED") == 4


async def test_failed_authentications_are_limited_per_address(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    async with api_daemon(genesys_config(genesys_sim.urls, 1), tmp_path) as h:
        await h.wait(lambda: h.all_in("active"))
        # two failures allowed, then one more every 1,000 s: the test's time cannot refill it
        limiter = FailureLimiter(burst=2, rate=0.001)
        async with bridged(h, tmp_path, limiter=limiter) as (bridge, url):
            statuses = []
            for token in ("wrong-1", "wrong-2", AGENT0):
                try:
                    async with connect(url, additional_headers={"Authorization": f"Bearer {token}"}):
                        statuses.append(101)
                except InvalidStatus as exc:
                    statuses.append(exc.response.status_code)
            # the right token too, from the limited address: refused before it is looked at
            assert statuses == [401, 401, 429]
            assert bridge.stats()["rateLimited"] == 1


PLATFORM0 = "token-of-a-0-with-platform-events"


def platform_of(messages: list[dict[str, Any]]) -> list[tuple[str, str, str | None]]:
    return [
        (m["type"], m["sessionId"], m.get("reason")) for m in messages if m["type"] in ("platform", "gap")
    ]


async def test_platform_records_and_since_for_tokens_allowed_them(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(line(PLATFORM0, agents=["a-0"], platform=True) + line(AGENT0, agents=["a-0"]))
    async with api_daemon(genesys_config(genesys_sim.urls, 2), tmp_path) as h:
        await h.wait(lambda: len(h.runners) == 2 and h.all_in("active"))
        settings = BridgeSettings(socket=h.subscribe, listen=Listen("127.0.0.1", 0), tokens=tokens)
        bridge = Bridge(settings, load_tokens(tokens))
        server = await bridge.start()
        async with anyio.create_task_group() as tg:
            tg.start_soon(bridge.follow)
            url = f"ws://127.0.0.1:{bridge.port}"
            earlier = {"bootId": "an-earlier-boot", "seq": 3}
            bearer = "Authorization"
            async with (
                connect(url) as resumed,
                connect(url) as refused,
                connect(url, additional_headers={bearer: f"Bearer {PLATFORM0}"}) as live,
                connect(url, additional_headers={bearer: f"Bearer {AGENT0}"}) as without,
            ):
                # coming back from another boot, naming a-0's session and a-1's
                await resumed.send(
                    json.dumps({"token": PLATFORM0, "since": {"wm-0": earlier, "wm-1": earlier}})
                )
                await refused.send(json.dumps({"token": AGENT0, "since": {"wm-0": earlier}}))
                for ws in (resumed, live, without):
                    assert (await receive(ws))["type"] == "snapshot"
                # since from a token without the platform stream: refused
                with pytest.raises(ConnectionClosed) as closed:
                    await receive(refused)
                assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
                assert "not allowed" in closed.value.rcvd.reason

                # both sessions reconnect: a live gap "reconnected" each; then a-0's session ends (the marker:
                # what a client got before it is everything it was sent of the above)
                genesys_sim.faults.inject(Fault(kind=FaultKind.DROP))
                first: list[dict[str, Any]] = []
                await until(live, lambda m: m.get("reason") == "reconnected", first)
                await h.wait(lambda: h.all_in("active"))
                await stop(h, "wm-0")
                ended = lambda m: m.get("event") == "SESSION_TERMINATED"  # noqa: E731
                got = {name: list[dict[str, Any]]() for name in ("resumed", "live", "without")}
                for name, ws in (("resumed", resumed), ("live", live), ("without", without)):
                    await until(ws, ended, got[name])
            # the window's replay of a-0's session (none of a-1's), then the live gap once, not twice
            assert platform_of(got["resumed"]) == [
                ("gap", "wm-0", "restarted"),
                ("gap", "wm-0", "started"),
                ("gap", "wm-0", "reconnected"),
            ]
            assert platform_of(first + got["live"]) == [("gap", "wm-0", "reconnected")]
            assert platform_of(got["without"]) == []
            server.close()
            await server.wait_closed()
            tg.cancel_scope.cancel()


async def test_the_connection_cap_and_a_revoked_token(
    genesys_sim: GenesysSimulator, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(line(AGENT0, agents=["a-0"]) + line(WM2, sessions=["wm-0"]))
    async with api_daemon(genesys_config(genesys_sim.urls, 1), tmp_path) as h:
        await h.wait(lambda: h.all_in("active"))
        settings = BridgeSettings(
            socket=h.subscribe, listen=Listen("127.0.0.1", 0), tokens=tokens, max_connections=2
        )
        bridge = Bridge(settings, load_tokens(tokens))
        server = await bridge.start()
        async with anyio.create_task_group() as tg:
            tg.start_soon(bridge.follow)
            url = f"ws://127.0.0.1:{bridge.port}"
            async with (
                connect(url, additional_headers={"Authorization": f"Bearer {AGENT0}"}) as revoked,
                connect(url, additional_headers={"Authorization": f"Bearer {WM2}"}) as kept,
            ):
                await receive(revoked)
                await receive(kept)
                for _ in range(3):
                    with pytest.raises(InvalidStatus) as over:
                        async with connect(url, additional_headers={"Authorization": f"Bearer {AGENT0}"}):
                            pass
                    assert over.value.response.status_code == 503
                # counted each time, said once (a client retrying in a loop does not flood the journal)
                assert bridge.stats()["overCap"] == 3
                refused = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
                assert [r["refused"] for r in refused if r["event"] == "BRIDGE_REFUSED"] == [1]
                # SIGHUP's work: AGENT0's line is gone; its client is closed, the other keeps its stream
                tokens.write_text(line(WM2, sessions=["wm-0"]))
                bridge.reload()
                with pytest.raises(ConnectionClosed) as closed:
                    await receive(revoked)
                assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
                await stop(h, "wm-0")
                seen: list[dict[str, Any]] = []
                await until(kept, lambda m: m.get("event") == "SESSION_TERMINATED", seen)
            server.close()
            await server.wait_closed()
            tg.cancel_scope.cancel()


async def test_a_stopping_daemon_ends_each_client_with_its_end_record(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(line(AGENT0, agents=["a-0"]))
    async with anyio.create_task_group() as tg:
        async with api_daemon(genesys_config(genesys_sim.urls, 1), tmp_path) as h:
            await h.wait(lambda: h.all_in("active"))
            settings = BridgeSettings(socket=h.subscribe, listen=Listen("127.0.0.1", 0), tokens=tokens)
            bridge = Bridge(settings, load_tokens(tokens))
            server = await bridge.start()
            tg.start_soon(bridge.follow)
            ws = await connect(
                f"ws://127.0.0.1:{bridge.port}", additional_headers={"Authorization": f"Bearer {AGENT0}"}
            )
            assert (await receive(ws))["type"] == "snapshot"
        # the daemon drained and stopped: what it sent last reaches the client, then the bridge closes it
        seen: list[dict[str, Any]] = []
        with pytest.raises(ConnectionClosed) as closed:
            await until(ws, lambda m: False, seen)
        assert seen[-1] == {"type": "end", "reason": "daemon stopping"}
        assert [(m["type"], m.get("state") or m.get("event")) for m in seen[:-1]] == [
            ("delta", "terminated"),
            ("event", "SESSION_TERMINATED"),
        ]
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1001
        server.close()
        await server.wait_closed()
        tg.cancel_scope.cancel()


async def test_a_client_past_its_buffer_is_told_lagged_then_gets_a_fresh_snapshot(tmp_path: Path) -> None:
    """The bridge's reading of the daemon never waits for a client: records pushed faster than a client's
    connection takes them (here all at once, before its writer runs) are dropped past its buffer and
    counted, then the client gets ``lagged`` and a snapshot of where its sessions are now."""
    tokens = tmp_path / "tokens"
    tokens.write_text(line(AGENT0, agents=["a-0"]))
    settings = BridgeSettings(
        socket=tmp_path / "no-daemon.sock",
        listen=Listen("127.0.0.1", 0),
        tokens=tokens,
        client_buffer_bytes=64 * 1024,
    )
    bridge = Bridge(settings, load_tokens(tokens))
    server = await bridge.start()
    bridge.dispatch(
        {"type": "snapshot", "bootId": "b", "seq": 1, "sessions": [{"sessionId": "wm-0", "agentId": "a-0"}]}
    )
    async with connect(
        f"ws://127.0.0.1:{bridge.port}", additional_headers={"Authorization": f"Bearer {AGENT0}"}
    ) as ws:
        assert (await receive(ws))["sessions"] == [{"sessionId": "wm-0", "agentId": "a-0"}]
        states = ("reconnecting", "connecting", "active")
        for seq in range(2, 1002):  # ~3 KB each: 3 MB for a buffer of 64 KiB
            delta = {"type": "delta", "seq": seq, "sessionId": "wm-0", "state": states[seq % 3], "at": "t"}
            bridge.dispatch({**delta, "reason": "x" * 3000})
        seen: list[dict[str, Any]] = []
        await until(ws, lambda m: m["type"] == "snapshot", seen)
    server.close()
    await server.wait_closed()
    *deltas, lagged, snapshot = seen
    assert lagged == {"type": "lagged", "count": 1000 - len(deltas)} and len(deltas) < 30
    assert [d["seq"] for d in deltas] == list(range(2, 2 + len(deltas)))  # what was kept, in order
    assert snapshot["seq"] == 1001 and snapshot["sessions"][0]["state"] == states[1001 % 3]
