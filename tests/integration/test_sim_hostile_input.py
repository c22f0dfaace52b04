"""Hostile input to both simulators over real loopback sockets.

Deeply nested bodies and frames, non-UTF-8 forms, NaN/Infinity/absurd fault values, half-sent
requests and shutdown: every answer is the platform's own error shape, never a 500, a 1011 or
a connection held forever; shutting down closes WebSockets with 1001.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from supervisor.clock import FakeClock
from supervisor.sim.bodies import MAX_JSON_DEPTH
from supervisor.sim.cxone import CxoneSimConfig, CxoneSimulator
from supervisor.sim.genesys import GenesysSimulator
from supervisor.sim.genesys.config import GenesysSimConfig
from tests.harness.simulators import Genesys, StartCxone
from tests.harness.waits import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.anyio, pytest.mark.cxone_sim(seed=3, fake_clock=True)]

DEPTHS = [MAX_JSON_DEPTH + 1, 1_000, 10_000]
MESSAGES = "/api/v2/conversations/messages/c-1/communications/m-1/messages"
V1_TOKEN = "/public/authentication/v1/token"


def deep(depth: int, inner: str = "1") -> str:
    return '{"a":' * depth + inner + "}" * depth


def strict_json(text: str) -> Any:
    def refuse(name: str) -> None:
        raise AssertionError(f"{name} in a JSON answer")

    return json.loads(text, parse_constant=refuse)


# -- class 1: nested bodies and frames answer the platform's 400 ---------------------------------------


@pytest.mark.parametrize("depth", DEPTHS)
async def test_genesys_rest_body_nested_too_deep_is_a_400_error_body(genesys: Genesys, depth: int) -> None:
    await genesys.login()
    r = await genesys.http.post(
        genesys.api(MESSAGES),
        content=deep(depth),
        headers={**genesys.auth, "Content-Type": "application/json"},
    )
    assert r.status_code == 400
    body = r.json()
    assert body["code"] == "bad.request" and body["status"] == 400 and "contextId" in body


async def test_genesys_rest_body_at_the_cap_is_parsed(genesys: Genesys) -> None:
    await genesys.login()
    conv = genesys.sim.create_conversation()
    path = f"/api/v2/conversations/messages/{conv.id}/communications/{conv.agent().communication.id}/messages"
    body = '{"textBody": "hi", "x": ' + deep(MAX_JSON_DEPTH - 2) + "}"
    r = await genesys.http.post(
        genesys.api(path), content=body, headers={**genesys.auth, "Content-Type": "application/json"}
    )
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("depth", DEPTHS)
async def test_web_messaging_frame_nested_too_deep_is_request_failed_and_the_socket_lives(
    genesys: Genesys, depth: int
) -> None:
    async with connect(genesys.wm_url(), max_size=None) as ws:
        await ws.send('{"action":"echo","token":"t","message":' + deep(depth) + "}")
        assert json.loads(await ws.recv()) == {
            "type": "response",
            "class": "string",
            "code": 400,
            "body": "Request failed.",
        }
        await ws.send(json.dumps({"action": "echo", "token": "t", "message": {"text": "still here"}}))
        assert json.loads(await ws.recv())["body"]["text"] == "still here"


@pytest.mark.parametrize("depth", DEPTHS)
async def test_notifications_frame_nested_too_deep_is_a_400_message(genesys: Genesys, depth: int) -> None:
    await genesys.login()
    r = await genesys.http.post(genesys.api("/api/v2/notifications/channels"), headers=genesys.auth)
    async with connect(r.json()["connectUri"], max_size=None) as ws:
        await ws.send('{"message":"subscribe","topics":' + "[" * depth + "]" * depth + "}")
        reply = json.loads(await ws.recv())
        assert reply == {"result": "400", "status": "error", "message": "Unsupported or malformed message."}
        await ws.send('{"message":"ping"}')
        assert json.loads(await ws.recv())["eventBody"] == {"message": "pong"}


@pytest.mark.parametrize("depth", DEPTHS)
async def test_cxone_token_body_nested_too_deep_is_an_oauth_400(
    cxone_sim: CxoneSimulator, depth: int
) -> None:
    async with httpx.AsyncClient(timeout=10) as http:
        r = await http.post(
            cxone_sim.urls["auth"] + V1_TOKEN,
            content='{"grant_type":"password","x":' + deep(depth) + "}",
            headers={"Content-Type": "application/json"},
        )
    assert r.status_code == 400
    assert r.json() == {
        "error": "invalid_request",
        "error_description": f"request body is malformed: nested deeper than {MAX_JSON_DEPTH} levels",
    }


@pytest.mark.parametrize("depth", DEPTHS)
async def test_admin_fault_nested_too_deep_is_a_400(genesys: Genesys, depth: int) -> None:
    r = await genesys.http.post(genesys.sim.urls["admin"] + "/faults", content="[" * depth + "]" * depth)
    assert r.status_code == 400
    assert r.json() == {"error": f"fault: invalid JSON (nested deeper than {MAX_JSON_DEPTH} levels)"}


@pytest.mark.parametrize("query", ["timeout=%C2%B2", "timeout=%D9%A1", "timeout=1e9", "timeout=-1"])
async def test_cxone_query_numbers_that_are_not_ascii_integers_are_a_400(
    cxone_sim: CxoneSimulator, query: str
) -> None:
    async with httpx.AsyncClient(timeout=10) as http:
        token = (
            await http.post(
                cxone_sim.urls["auth"] + "/InContactAuthorizationServer/Token",
                json={"grant_type": "password", "username": "u", "password": "p"},
                headers={"Authorization": "basic YUBiOmM="},
            )
        ).json()
        r = await http.get(
            token["resource_server_base_uri"] + f"services/v23.0/agent-sessions/s-1/get-next-event?{query}",
            headers={"Authorization": "bearer " + token["access_token"]},
        )
    assert r.status_code == 400
    assert r.json() == {
        "error": "invalid_request",
        "error_description": "timeout must be an integer within 0..60",
    }


# -- class 7: non-UTF-8 OAuth forms are OAuth 400s ------------------------------------------------------


@pytest.mark.parametrize("body", [b"grant_type=\xff\xfe", b"grant_type=%FF%FE", b"\xc3("])
async def test_genesys_oauth_form_not_utf8_is_invalid_request(genesys: Genesys, body: bytes) -> None:
    r = await genesys.http.post(
        genesys.sim.urls["login"] + "/oauth/token",
        content=body,
        headers={"Content-Type": "application/x-www-form-urlencoded"},
        auth=("client", "secret"),
    )
    assert r.status_code == 400
    assert r.json()["error"] == "invalid_request"
    assert set(r.json()) == {"error", "description", "error_description"}


@pytest.mark.parametrize(
    "path",
    [V1_TOKEN, "/InContactAuthorizationServer/Token", "/public/authentication/v1/refresh", "/auth/token"],
)
async def test_cxone_oauth_form_not_utf8_is_invalid_request(cxone_sim: CxoneSimulator, path: str) -> None:
    async with httpx.AsyncClient(timeout=10) as http:
        r = await http.post(
            cxone_sim.urls["auth"] + path,
            content=b"grant_type=password&username=\xff",
            headers={"Content-Type": "application/x-www-form-urlencoded", "Authorization": "basic YUBiOmM="},
        )
    assert r.status_code == 400
    assert r.json() == {
        "error": "invalid_request",
        "error_description": "request body is malformed: the form is not UTF-8",
    }


# -- class 7: the admin API refuses non-finite and absurd values, naming the param and its bounds -------


@pytest.mark.parametrize(
    ("fault", "error"),
    [
        (
            '{"kind":"latency","params":{"latency_ms":NaN}}',
            "fault.params.latency_ms: must be a finite number from 0 to 600000",
        ),
        (
            '{"kind":"latency","params":{"latency_ms":1e300}}',
            "fault.params.latency_ms: must be a finite number from 0 to 600000",
        ),
        (
            '{"kind":"latency","params":{"latency_ms":-Infinity}}',
            "fault.params.latency_ms: must be a finite number from 0 to 600000",
        ),
        ('{"kind":"drop","share":NaN}', "fault.share: must be between 0 and 1"),
        (
            '{"kind":"drop","at":Infinity}',
            "fault.at: must be a finite number from 0 to 86400 (seconds from now)",
        ),
        (
            '{"kind":"drop","duration_s":1e308}',
            "fault.duration_s: must be a finite number > 0 and <= 86400, or null (until cleared)",
        ),
        (
            '{"kind":"drop","count":1000000000000}',
            "fault.count: must be an integer from 1 to 1000000000, or null (unlimited)",
        ),
        (
            '{"kind":"rate_limit_storm","params":{"retry_after":1000000000000}}',
            'fault.params.retry_after: must be "<seconds>", "http-date", "http-date:<seconds>" or null, '
            "with seconds from 0 to 86400",
        ),
        (
            '{"kind":"queue_full","params":{"retry_after":"http-date:99999999999999999"}}',
            'fault.params.retry_after: must be "<seconds>", "http-date", "http-date:<seconds>" or null, '
            "with seconds from 0 to 86400",
        ),
        (
            '{"kind":"admission_limit","params":{"rate_per_s":Infinity}}',
            "fault.params.rate_per_s: must be a finite number from 0 to 1000000",
        ),
        (
            '{"kind":"socket_closing","params":{"lead_s":NaN}}',
            "fault.params.lead_s: must be a finite number from 0 to 3600",
        ),
    ],
)
async def test_admin_refuses_values_that_would_hang_or_break_get_faults(
    genesys: Genesys, fault: str, error: str
) -> None:
    admin = genesys.sim.urls["admin"]
    r = await genesys.http.post(admin + "/faults", content=fault)
    assert r.status_code == 400
    assert r.json() == {"error": error}
    listed = await genesys.http.get(admin + "/faults")
    assert strict_json(listed.text) == {"faults": []}


async def test_cxone_admin_refuses_them_too(cxone_sim: CxoneSimulator) -> None:
    async with httpx.AsyncClient(timeout=10) as http:
        r = await http.post(
            cxone_sim.urls["admin"] + "/faults", content='{"kind":"latency","params":{"latency_ms":NaN}}'
        )
        assert r.status_code == 400
        assert r.json() == {"error": "fault.params.latency_ms: must be a finite number from 0 to 600000"}


# -- class 7: half-sent requests are not held forever ---------------------------------------------------


async def exchange(url: str, data: bytes) -> bytes:
    """Send ``data`` and read until the server closes the connection (fails after 10 s)."""
    parts = urlsplit(url)
    stream = await anyio.connect_tcp(parts.hostname or "127.0.0.1", parts.port or 80)
    received = b""
    async with stream:
        await stream.send(data)
        with anyio.fail_after(10):
            while True:
                try:
                    received += await stream.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError, ConnectionResetError):
                    return received


SLOW = 0.2  # the simulators' read timeout in these tests: the wait is for the server to act


@pytest.mark.genesys_sim(GenesysSimConfig(read_timeout_s=SLOW))
@pytest.mark.parametrize("listener", ["login", "api", "admin"])
async def test_genesys_half_sent_headers_are_dropped(genesys: Genesys, listener: str) -> None:
    assert await exchange(genesys.sim.urls[listener], b"POST /oauth/token HTTP/1.1\r\nHost: x\r\n") == b""


@pytest.mark.genesys_sim(GenesysSimConfig(read_timeout_s=SLOW))
@pytest.mark.parametrize(
    ("listener", "path", "shape"),
    [
        ("login", "/oauth/token", "error_description"),
        ("api", MESSAGES, "contextId"),
        ("admin", "/faults", "error"),
    ],
)
async def test_genesys_half_sent_body_is_a_408_in_the_platform_shape(
    genesys: Genesys, listener: str, path: str, shape: str
) -> None:
    await genesys.login()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {genesys.token}\r\n"
        "Authorization: Basic Y2xpZW50OnNlY3JldA==\r\n"
        "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
    )
    if listener == "login":
        head = head.replace(f"Authorization: Bearer {genesys.token}\r\n", "").replace(
            "application/json", "application/x-www-form-urlencoded"
        )
    if listener != "api":
        head = head.replace(f"Authorization: Bearer {genesys.token}\r\n", "")
    answer = await exchange(genesys.sim.urls[listener], head.encode())
    status_line, _, rest = answer.partition(b"\r\n")
    assert status_line == b"HTTP/1.1 408 Request Timeout"
    assert shape in strict_json(rest.partition(b"\r\n\r\n")[2].decode())


async def test_cxone_half_sent_requests_are_dropped_or_408(start_cxone: StartCxone) -> None:
    sim = await start_cxone(CxoneSimConfig(read_timeout_s=SLOW), clock=FakeClock())
    for listener in ("auth", "api", "admin"):
        assert await exchange(sim.urls[listener], b"GET / HTTP/1.1\r\nHost: x\r\n") == b""
    chunked = (
        f"POST {V1_TOKEN} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        'Transfer-Encoding: chunked\r\n\r\n5\r\n{"a":'
    )
    answer = await exchange(sim.urls["auth"], chunked.encode())
    assert answer.startswith(b"HTTP/1.1 408 Request Timeout\r\n")
    assert answer.endswith(
        b'{"error":"invalid_request","error_description":"the request body did not arrive in time"}'
    )


async def test_a_cxone_client_gone_mid_body_is_recorded_499_without_a_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A client that sends half a body and disconnects (it gave up, as a daemon under load does at
    its request timeout): nobody is left to answer; the simulator logs no error and records 499."""
    async with CxoneSimulator(CxoneSimConfig(read_timeout_s=10), clock=FakeClock()) as sim:
        parts = urlsplit(sim.urls["auth"])
        stream = await anyio.connect_tcp(parts.hostname or "127.0.0.1", parts.port or 80)
        async with stream:
            await stream.send(
                f"POST {V1_TOKEN} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                'Content-Length: 100\r\n\r\n{"grant_type":'.encode()
            )
        await wait_until(lambda: sim.recorder.request_count(status=499) == 1, 10)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text


async def test_a_request_within_the_read_timeout_is_served(start_cxone: StartCxone) -> None:
    sim = await start_cxone(CxoneSimConfig(read_timeout_s=5), clock=FakeClock())
    async with (
        httpx.AsyncClient(timeout=10) as http,
    ):
        r = await http.post(
            sim.urls["auth"] + "/auth/token",
            data={"grant_type": "password", "username": "u", "password": "p"},
            auth=("app", "s"),
        )
    assert r.status_code == 200, r.text


# -- class 7: shutting down closes WebSockets with 1001 --------------------------------------------------


async def test_shutdown_closes_web_messaging_and_notifications_sockets_with_1001() -> None:
    sim = GenesysSimulator(GenesysSimConfig(), clock=FakeClock(start=1000.0))
    await sim.start()
    try:
        async with httpx.AsyncClient(timeout=10) as http:
            token = (
                await http.post(
                    sim.urls["login"] + "/oauth/token",
                    data={"grant_type": "client_credentials"},
                    auth=("c", "s"),
                )
            ).json()["access_token"]
            channel = (
                await http.post(
                    sim.urls["api"] + "/api/v2/notifications/channels",
                    headers={"Authorization": f"Bearer {token}"},
                )
            ).json()
        wm = await connect(sim.urls["webmessaging"] + "/v1?deploymentId=d")
        notifications = await connect(channel["connectUri"])
    finally:
        await sim.close()
    for ws in (wm, notifications):
        with anyio.fail_after(10):
            await drain(ws)
        assert ws.close_code == 1001, ws.close_code


async def drain(ws: ClientConnection) -> None:
    """Read until the connection is closed (the close code is then on ``ws``)."""
    try:
        while True:
            await ws.recv()
    except ConnectionClosed:
        return


async def test_shutdown_does_not_wait_on_a_client_that_never_answers_the_close() -> None:
    sim = GenesysSimulator(GenesysSimConfig(), clock=FakeClock(start=1000.0))
    await sim.start()
    url = urlsplit(sim.urls["webmessaging"])
    reader, writer = await asyncio.open_connection(url.hostname, url.port)
    writer.write(
        b"GET /v1?deploymentId=d HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    await writer.drain()
    assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 101")
    with anyio.fail_after(20):  # the grace is 1 s; a hang would end here, not in a sleep
        await sim.close()
    frame = await reader.read(64)
    writer.close()
    # an unmasked close frame (0x88) whose payload starts with 1001 (0x03e9)
    assert frame[:1] == b"\x88" and frame[2:4] == (1001).to_bytes(2, "big")
