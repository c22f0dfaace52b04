"""The simulators' activity log over real loopback sockets: ``GET {admin}/activity`` (docs/simulators.md, "Activity log")."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import ClientConnection, connect

from supervisor.sim.cxone import CxoneSimConfig, CxoneSimulator
from supervisor.sim.genesys import GenesysSimulator
from supervisor.sim.genesys.config import GenesysSimConfig
from supervisor.stamp import STAMP_HEADER, format_stamp
from tests.harness.activity import ActivityTail
from tests.harness.simulators import Genesys, StartCxone, StartGenesys
from tests.harness.waits import wait_until
from tests.integration.test_sim_cxone_wire import Agent

pytestmark = [pytest.mark.integration, pytest.mark.anyio]


async def activity(http: httpx.AsyncClient, admin: str, **params: Any) -> tuple[list[dict[str, Any]], str]:
    r = await http.get(admin + "/activity", params=params)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/x-ndjson")
    lines = [json.loads(line) for line in r.text.splitlines()]
    return lines, r.headers["X-Activity-Next"]


def local(ws: ClientConnection) -> str:
    host, port = ws.local_address[:2]
    return f"{host}:{port}"


async def configure(ws: ClientConnection, token: str) -> dict[str, Any]:
    await ws.send(json.dumps({"action": "configureSession", "token": token, "deploymentId": "dep-1"}))
    reply: dict[str, Any] = json.loads(await ws.recv())
    return reply


async def test_a_displaced_web_messaging_socket_is_logged_with_both_peers(
    genesys: Genesys, http: httpx.AsyncClient
) -> None:
    token = "guest-token-displaced"
    first_stamp = {STAMP_HEADER: format_stamp("m1", 3)}
    second_stamp = {STAMP_HEADER: format_stamp("m2", 4)}
    async with connect(genesys.wm_url(), additional_headers=first_stamp) as first:
        await configure(first, token)
        async with connect(genesys.wm_url(), additional_headers=second_stamp) as second:
            await configure(second, token)
            await wait_until(
                lambda: any(e["kind"] == "disconnect" for e in genesys.sim.activity.since(0).entries)
            )
            first_peer, second_peer = local(first), local(second)
    lines, _ = await activity(http, genesys.sim.urls["admin"])
    key = genesys.sim.activity.since(0).entries  # the same entries, from the Python side
    assert [e["seq"] for e in key] == [e["seq"] for e in lines]
    (moved,) = [e for e in lines if e["kind"] == "displaced"]
    assert moved["listener"] == "webmessaging"
    assert moved["peer"] == first_peer and moved["member"] == "m1" and moved["epoch"] == 3
    assert moved["by_peer"] == second_peer and moved["by_member"] == "m2" and moved["by_epoch"] == 4
    assert moved["conn"] != moved["by_conn"]
    # every frame of both sockets names the session by a digest, never the guest token itself
    frames = [e for e in lines if e["kind"] == "frame"]
    assert [(e["action"], e["member"]) for e in frames] == [
        ("configureSession", "m1"),
        ("configureSession", "m2"),
    ]
    assert {e["session"] for e in frames} == {moved["session"]}
    assert moved["session"].startswith("wm:")
    connects = [e for e in lines if e["kind"] == "connect"]
    assert [(e["status"], e["peer"]) for e in connects] == [(101, first_peer), (101, second_peer)]
    assert token not in json.dumps(lines)


async def test_a_replaced_notifications_socket_is_logged_with_both_peers(
    genesys: Genesys, http: httpx.AsyncClient
) -> None:
    await genesys.login()
    r = await http.post(genesys.api("/api/v2/notifications/channels"), headers=genesys.auth)
    chan = r.json()
    first_stamp = {STAMP_HEADER: format_stamp("m1", 5)}
    async with connect(chan["connectUri"], additional_headers=first_stamp) as first:
        first_peer = local(first)
        await first.send(json.dumps({"message": "ping"}))
        await first.recv()
        async with connect(
            chan["connectUri"], additional_headers={STAMP_HEADER: format_stamp("m2", 6)}
        ) as second:
            await wait_until(
                lambda: any(e["kind"] == "displaced" for e in genesys.sim.activity.since(0).entries)
            )
            second_peer = local(second)
    lines, _ = await activity(http, genesys.sim.urls["admin"])
    (moved,) = [e for e in lines if e["kind"] == "displaced"]
    assert (moved["listener"], moved["session"]) == ("streaming", chan["id"])
    assert (moved["peer"], moved["member"], moved["epoch"]) == (first_peer, "m1", 5)
    assert (moved["by_peer"], moved["by_member"], moved["by_epoch"]) == (second_peer, "m2", 6)
    (ping,) = [e for e in lines if e["kind"] == "frame"]
    assert (ping["message"], ping["session"], ping["peer"]) == ("ping", chan["id"], first_peer)
    assert sorted(e["peer"] for e in lines if e["kind"] == "disconnect") == sorted([first_peer, second_peer])


async def test_http_requests_carry_receive_time_peer_connection_status_and_stamp(
    genesys: Genesys, http: httpx.AsyncClient
) -> None:
    genesys.clock.advance(100.0)
    at = genesys.clock.time()
    await genesys.login()
    stamped = {**genesys.auth, STAMP_HEADER: format_stamp("node-a", 9)}
    r = await http.get(genesys.api("/api/v2/conversations/unknown-id"), headers=stamped)
    refused = r.status_code  # not a conversation id the platform would issue
    assert refused >= 400
    r = await http.get(genesys.api("/api/v2/conversations/unknown-id"), headers=genesys.auth)
    async with httpx.AsyncClient() as other:
        await other.get(genesys.api("/api/v2/conversations/unknown-id"), headers=genesys.auth)
    lines, after = await activity(http, genesys.sim.urls["admin"])
    login, stamped_get, plain_get, other_get = lines
    assert login["listener"] == "login" and login["endpoint"] == "/oauth/token" and login["status"] == 200
    assert login["session"] == "client"  # the client id the login fault gate keys on
    assert stamped_get["endpoint"] == "/api/v2/conversations/{conversationId}"
    assert stamped_get["status"] == refused and stamped_get["session"] == "unknown-id"
    assert (stamped_get["member"], stamped_get["epoch"]) == ("node-a", 9)
    assert (plain_get["member"], plain_get["epoch"]) == (None, None)  # unstamped: nothing invented
    assert all(e["t"] == at for e in lines)  # the simulator's (fake) clock at receipt
    assert all(e["peer"].startswith("127.0.0.1:") for e in lines)
    # one keep-alive connection carried both requests of the same client; another client is another
    assert stamped_get["conn"] == plain_get["conn"] != other_get["conn"]
    assert stamped_get["peer"] == plain_get["peer"] != other_get["peer"]
    assert after == str(other_get["seq"])
    # read on from the cursor: nothing new, then only what came after
    assert (await activity(http, genesys.sim.urls["admin"], since=after))[0] == []
    await http.get(genesys.api("/api/v2/conversations/x2"), headers=genesys.auth)
    (newer,), _ = await activity(http, genesys.sim.urls["admin"], since=after)
    assert newer["seq"] == int(after) + 1 and newer["session"] == "x2"


@pytest.mark.cxone_sim(seed=3, fake_clock=True)
async def test_each_cxone_poll_names_its_handle(cxone_sim: CxoneSimulator, http: httpx.AsyncClient) -> None:
    agent = Agent(cxone_sim, http)
    await agent.login()
    first = await agent.start()
    cxone_sim.push_contact(agent_id=agent.token["agent_id"])
    r = await agent.poll(0, **{STAMP_HEADER: format_stamp("m1", 2)})
    assert r.status_code == 200
    rolled = agent.sid
    assert rolled != first  # the poll answered the next sessionId
    r = await agent.poll(0)
    assert r.status_code == 304
    lines, _ = await activity(http, cxone_sim.urls["admin"])
    polls = [e for e in lines if e.get("endpoint", "").endswith("/get-next-event")]
    assert [(e["status"], e["handle"]) for e in polls] == [(200, first), (304, first)]
    assert polls[0]["member"] == "m1" and polls[0]["epoch"] == 2 and polls[1]["member"] is None
    agent_id = str(agent.token["agent_id"])
    assert {e["session"] for e in polls} == {agent_id}
    start = [e for e in lines if e.get("method") == "POST" and e["listener"] == "api"]
    assert start and start[0]["status"] == 202 and "handle" not in start[0]


async def test_a_reader_that_fell_behind_gets_a_gap_line(
    start_genesys: StartGenesys, http: httpx.AsyncClient
) -> None:
    sim: GenesysSimulator = await start_genesys(GenesysSimConfig(activity_capacity=2))
    for _ in range(4):
        await http.get(sim.urls["api"] + "/api/v2/conversations/x")  # 401s: recorded all the same
    lines, after = await activity(http, sim.urls["admin"], since=1)
    assert lines[0] == {"kind": "gap", "from": 2, "to": 2, "lost": 1}
    assert [e["seq"] for e in lines[1:]] == [3, 4] and after == "4"
    assert all(e["status"] == 401 for e in lines[1:])
    lines, after = await activity(http, sim.urls["admin"], since=0, limit=1)
    assert lines[0]["lost"] == 2 and [e["seq"] for e in lines[1:]] == [3] and after == "3"


async def test_a_tail_reads_every_entry_once_across_pages_and_says_when_it_fell_behind(
    start_cxone: StartCxone, http: httpx.AsyncClient
) -> None:
    sim = await start_cxone(CxoneSimConfig(activity_capacity=5))
    tail = ActivityTail(sim.urls["admin"], http, page=2)
    for _ in range(4):
        await http.get(sim.urls["api"] + "/nowhere")
    assert [e["seq"] for e in await tail.read()] == [1, 2, 3, 4]  # two pages of two
    assert await tail.read() == [] and tail.complete()
    for _ in range(8):  # more than the ring holds between two reads
        await http.get(sim.urls["api"] + "/nowhere")
    assert [e["seq"] for e in await tail.read()] == [8, 9, 10, 11, 12]
    assert not tail.complete() and tail.gaps == [{"kind": "gap", "from": 5, "to": 7, "lost": 3}]
    assert [e["seq"] for e in tail.entries] == [1, 2, 3, 4, 8, 9, 10, 11, 12]


@pytest.mark.parametrize(
    ("query", "error"),
    [
        ("since=abc", "since: expected a whole number, got 'abc'"),
        ("since=-1", "since: expected a whole number, got '-1'"),
        ("since=5", "since: 5 is past the last entry (0): a cursor of another simulator run?"),
        ("since=1&since=2", "since: given 2 times (once at most)"),
        ("limit=0", "limit: 0 is out of range (1..50000)"),
        ("limit=50001", "limit: 50001 is out of range (1..50000)"),
        ("cursor=3", "cursor: unknown parameter (expected since, limit)"),
    ],
)
async def test_bad_activity_requests_get_one_line_400(
    start_cxone: StartCxone, http: httpx.AsyncClient, query: str, error: str
) -> None:
    sim = await start_cxone(CxoneSimConfig())
    r = await http.get(sim.urls["admin"] + "/activity?" + query)
    assert r.status_code == 400
    assert r.json() == {"error": error}
    assert "\n" not in r.text.strip()
