"""CXone simulator wire shapes, driven by plain httpx over loopback (docs/platforms.md, "NICE CXone", docs/simulators.md).

Each test checks what the client sees and what the simulator recorded. Time-dependent
behaviour (token expiry, inactivity) uses a FakeClock; long polls are woken by pushed
events, never by sleeping.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from supervisor.clock import FakeClock
from supervisor.errors import SimulatorError
from supervisor.sim.cxone import CxoneSimConfig, CxoneSimulator, ErrorBody
from tests.harness.simulators import StartCxone

pytestmark = [pytest.mark.integration, pytest.mark.anyio, pytest.mark.cxone_sim(seed=3, fake_clock=True)]

POLL = "/inContactAPI/services/v{N}.0/agent-sessions/{sessionId}/get-next-event"
START = "/inContactAPI/services/v{N}.0/agent-sessions"
LEGACY = "/InContactAuthorizationServer/Token"


def basic(user: str, secret: str) -> str:
    return "basic " + base64.b64encode(f"{user}:{secret}".encode()).decode()


class Agent:
    """A minimal CXone agent client: plain httpx, no retries."""

    def __init__(self, sim: CxoneSimulator, http: httpx.AsyncClient, user: str = "agent1") -> None:
        self.sim, self.http, self.user = sim, http, user
        self.token: dict[str, Any] = {}
        self.sid = ""

    @property
    def base(self) -> str:
        return str(self.token["resource_server_base_uri"]) + "services/v23.0/agent-sessions"

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"bearer {self.token['access_token']}"}

    async def login(self) -> dict[str, Any]:
        r = await self.http.post(
            self.sim.urls["auth"] + LEGACY,
            headers={"Authorization": basic("app@vendor", "4600001")},
            json={"grant_type": "password", "username": self.user, "password": "pw", "scope": "AgentApi"},
        )
        assert r.status_code == 200, r.text
        self.token = r.json()
        return self.token

    async def start(self, query: str = "stationPhoneNumber=5551234") -> str:
        r = await self.http.post(f"{self.base}?{query}", headers=self.auth)
        assert r.status_code == 202, r.text
        self.sid = r.json()["sessionId"]
        return self.sid

    async def poll(self, hold: int = 0, sid: str | None = None, **headers: str) -> httpx.Response:
        r = await self.http.get(
            f"{self.base}/{sid or self.sid}/get-next-event",
            params={"timeout": hold},
            headers={**self.auth, **headers},
        )
        if r.status_code == 200 and "sessionId" in r.json() and sid is None:
            self.sid = r.json()["sessionId"]
        return r

    async def post(self, path: str, **params: str) -> httpx.Response:
        return await self.http.post(f"{self.base}/{self.sid}/{path}", params=params, headers=self.auth)


def types(r: httpx.Response) -> list[str]:
    return [e["Type"] for e in r.json()["events"]]


@pytest.fixture
async def agent(cxone_sim: CxoneSimulator, http: httpx.AsyncClient) -> Agent:
    a = Agent(cxone_sim, http)
    await a.login()
    await a.start()
    return a


# ------------------------------------------------------------------------------------ tokens


async def test_legacy_token_shape(cxone_sim: CxoneSimulator, http: httpx.AsyncClient) -> None:
    """AcdToken fields; resource_server_base_uri points at the api listener with a trailing slash."""
    token = await Agent(cxone_sim, http).login()
    assert set(token) == {
        "access_token", "token_type", "expires_in", "refresh_token", "refresh_token_server_uri",
        "resource_server_base_uri", "scope", "agent_id", "team_id", "bus_no",
        "id_token", "issued_token_type",  # auth-token.js reads these too
    }  # fmt: skip
    assert token["token_type"] == "bearer"
    assert token["expires_in"] == 3600
    assert token["resource_server_base_uri"] == cxone_sim.urls["api"] + "/inContactAPI/"
    assert token["refresh_token_server_uri"] == cxone_sim.urls["auth"] + LEGACY
    assert token["scope"] == "AgentApi"
    assert isinstance(token["agent_id"], int)
    assert cxone_sim.recorder.tokens()["issued"] == 1
    assert cxone_sim.recorder.snapshot()["tokens_by_grant"] == {"password": 1}
    assert cxone_sim.recorder.request_count("POST", LEGACY, 200) == 1


async def test_legacy_refresh_grant(cxone_sim: CxoneSimulator, http: httpx.AsyncClient) -> None:
    """Legacy grant_type=refresh_token rotates the pair; a used refresh token is invalid_grant."""
    token = await Agent(cxone_sim, http).login()
    body = {"grant_type": "refresh_token", "refresh_token": token["refresh_token"]}
    headers = {"Authorization": basic("app@vendor", "4600001")}
    r = await http.post(cxone_sim.urls["auth"] + LEGACY, headers=headers, json=body)
    assert r.status_code == 200
    assert r.json()["access_token"] != token["access_token"]
    assert r.json()["agent_id"] == token["agent_id"]
    again = await http.post(cxone_sim.urls["auth"] + LEGACY, headers=headers, json=body)
    assert again.status_code == 400
    assert again.json()["error"] == "invalid_grant"
    assert cxone_sim.recorder.tokens()["refreshed"] == 1
    assert cxone_sim.recorder.tokens()["rejected"] == 1


@pytest.mark.parametrize(
    ("kwargs", "status", "error"),
    [
        ({"json": {"grant_type": "password", "username": "u", "password": "p"}}, 401, "invalid_client"),
        (
            {"headers": {"Authorization": basic("app@vendor", "1")}, "json": {"grant_type": "password"}},
            400,
            "invalid_request",
        ),
        ({"headers": {"Authorization": basic("app@vendor", "1")}, "json": {"grant_type": "magic"}}, 400,
         "unsupported_grant_type"),
        ({"headers": {"Authorization": basic("a@v", "1")}, "content": b"{not json"}, 400, "invalid_request"),
        ({"headers": {"Authorization": basic("a@v", "1")}, "content": b"[1, 2]"}, 400, "invalid_request"),
    ],
)  # fmt: skip
async def test_token_errors_are_oauth_shaped(
    cxone_sim: CxoneSimulator, http: httpx.AsyncClient, kwargs: dict[str, Any], status: int, error: str
) -> None:
    """Malformed token requests get RFC 6749 §5.2 bodies, never a traceback."""
    r = await http.post(cxone_sim.urls["auth"] + LEGACY, **kwargs)
    assert r.status_code == status
    assert set(r.json()) == {"error", "error_description"}
    assert r.json()["error"] == error
    assert "Traceback" not in r.text
    assert cxone_sim.recorder.tokens()["rejected"] == 1


async def test_restricted_credentials(http: httpx.AsyncClient, start_cxone: StartCxone) -> None:
    """A config restricting clients/users refuses others (the FAQ's 401 wording for clients)."""
    config = CxoneSimConfig(client_ids=("good@vendor",), users=("alice",), password="pw")
    sim = await start_cxone(config)
    url = sim.urls["auth"] + LEGACY
    body = {"grant_type": "password", "username": "alice", "password": "pw"}
    bad_client = await http.post(url, headers={"Authorization": basic("evil@vendor", "1")}, json=body)
    assert bad_client.status_code == 401
    assert bad_client.json() == {
        "error": "invalid_client",
        "error_description": "Client application 'evil@vendor' not authorized for user",
    }
    headers = {"Authorization": basic("good@vendor", "1")}
    bad_user = await http.post(url, headers=headers, json={**body, "password": "nope"})
    assert bad_user.status_code == 400
    assert bad_user.json()["error"] == "invalid_grant"
    ok = await http.post(url, headers=headers, json=body)
    assert ok.status_code == 200
    assert sim.recorder.tokens() == {
        "issued": 1,
        "refreshed": 0,
        "rejected": 2,
        "expired": 0,
        "revoked": 0,
    }


# ------------------------------------------------------------------------------ bearer checks


async def test_api_needs_a_valid_bearer(
    cxone_sim: CxoneSimulator, http: httpx.AsyncClient, agent: Agent, clock: FakeClock
) -> None:
    """Missing, unknown and expired tokens → 401 with WWW-Authenticate and an OAuth body."""
    r = await http.post(agent.base + "?stationId=1")
    assert r.status_code == 401
    assert r.json()["error"] == "invalid_request"
    r = await http.post(agent.base + "?stationId=1", headers={"Authorization": "Bearer nope"})
    assert r.status_code == 401
    assert r.json() == {"error": "invalid_token", "error_description": "Invalid token"}
    clock.advance(3600)
    r = await agent.poll()
    assert r.status_code == 401
    assert r.json() == {"error": "invalid_token", "error_description": "Token expired"}
    assert r.headers["WWW-Authenticate"] == 'Bearer error="invalid_token"'
    assert cxone_sim.recorder.tokens()["expired"] == 1
    assert cxone_sim.recorder.request_count("GET", POLL, 401) == 1


async def test_empty_401_body_when_configured(http: httpx.AsyncClient, start_cxone: StartCxone) -> None:
    """auth_error_body=empty: the 401 has no body (the error is in the status line only)."""
    sim = await start_cxone(CxoneSimConfig(auth_error_body=ErrorBody.EMPTY))
    r = await http.post(sim.urls["api"] + "/inContactAPI/services/v23.0/agent-sessions?stationId=1")
    assert r.status_code == 401
    assert r.content == b""


# ---------------------------------------------------------------------------- agent sessions


async def test_start_join_and_any_version(cxone_sim: CxoneSimulator, http: httpx.AsyncClient) -> None:
    """202 {"sessionId"} on start and join, for any v{N}.0; a second start is 409; no station is 400."""
    a = Agent(cxone_sim, http)
    await a.login()
    api = cxone_sim.urls["api"] + "/inContactAPI/services"
    r = await http.post(f"{api}/v2.0/agent-sessions", headers=a.auth)
    assert r.status_code == 400
    assert r.json()["error"] == "invalid_request"
    r = await http.post(f"{api}/v31.0/agent-sessions?stationId=st1&inactivityTimeout=120", headers=a.auth)
    assert r.status_code == 202
    assert list(r.json()) == ["sessionId"]
    again = await http.post(f"{api}/v23.0/agent-sessions?stationId=st1", headers=a.auth)
    assert again.status_code == 409
    join = await http.post(f"{api}/v12.0/agent-sessions/join", headers=a.auth)
    assert join.status_code == 202
    assert join.json()["sessionId"] != r.json()["sessionId"]
    assert cxone_sim.recorder.request_count("POST", START, 202) == 1
    assert cxone_sim.recorder.request_count("POST", START + "/join", 202) == 1


async def test_api_version_restriction(http: httpx.AsyncClient, start_cxone: StartCxone) -> None:
    """api_versions=(23,) answers 404 for v31.0."""
    sim = await start_cxone(CxoneSimConfig(api_versions=(23,)))
    a = Agent(sim, http)
    await a.login()
    r = await http.post(
        sim.urls["api"] + "/inContactAPI/services/v31.0/agent-sessions?stationId=1", headers=a.auth
    )
    assert r.status_code == 404
    assert r.json()["error"] == "not_found"
    await a.start()


async def test_poll_rotates_session_id_and_304_when_idle(cxone_sim: CxoneSimulator, agent: Agent) -> None:
    """200 {"sessionId": new, "events": [...]} then 304 with no body; the 304 keeps the id."""
    first = agent.sid
    r = await agent.poll()
    assert r.status_code == 200
    assert set(r.json()) == {"sessionId", "events"}
    assert r.json()["sessionId"] != first
    assert types(r) == ["AgentSessionStart", "AgentState"]
    start = r.json()["events"][0]
    assert start["AgentId"] == str(agent.token["agent_id"])
    assert start["StationPhoneNumber"] == "5551234"
    idle = await agent.poll()
    assert idle.status_code == 304
    assert idle.content == b""  # RFC 9110 §15.4.5
    assert "Cache-Control" not in idle.headers
    assert cxone_sim.recorder.request_count("GET", POLL, 200) == 1
    assert cxone_sim.recorder.request_count("GET", POLL, 304) == 1


@pytest.mark.parametrize("value", ["61", "-1", "abc", "1.5"])
async def test_poll_timeout_out_of_range_is_400(agent: Agent, value: str) -> None:
    """timeout must be an integer within 0..60."""
    r = await agent.http.get(f"{agent.base}/{agent.sid}/get-next-event?timeout={value}", headers=agent.auth)
    assert r.status_code == 400
    assert r.json()["error"] == "invalid_request"


async def test_stale_id_replays_session_start(agent: Agent) -> None:
    """Polling with an old sessionId replays AgentSessionStart + snapshot, with a new id."""
    old = agent.sid
    await agent.poll()
    await agent.post("state", state="Available")
    r = await agent.poll(sid=old)
    assert r.status_code == 200
    assert types(r) == ["AgentSessionStart", "AgentState"]
    assert r.json()["events"][1]["CurrentState"] == "Available"
    assert r.json()["sessionId"] not in (old, agent.sid)


async def test_long_poll_is_woken_by_a_pushed_contact(cxone_sim: CxoneSimulator, agent: Agent) -> None:
    """A held poll answers as soon as an event arrives (no sleeping in the test)."""
    await agent.poll()
    result: list[httpx.Response] = []

    async def hold() -> None:
        result.append(await agent.poll(hold=30))

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(hold)
            await anyio.wait_all_tasks_blocked()  # the poll is most likely held by now (either way works)
            contact = cxone_sim.push_contact(agent_id=agent.token["agent_id"])
    r = result[0]
    assert r.status_code == 200
    event = r.json()["events"][0]
    assert event["Type"] == "CallContactEvent"
    assert event["ContactID"] == contact.contact_id
    assert event["Status"] == "Incoming"
    assert event["IsInbound"] == "True"


async def test_agent_state_changes(agent: Agent) -> None:
    """POST state → 202 and an AgentState event; unknown states are 400."""
    await agent.poll()
    r = await agent.post("state", state="Unavailable", reason="Lunch")
    assert r.status_code == 202
    assert r.content == b""
    events = (await agent.poll()).json()["events"]
    assert events[0]["Type"] == "AgentState"
    assert events[0]["CurrentState"] == "Unavailable"
    assert events[0]["CurrentOutReason"] == "Lunch"
    bad = await agent.post("state", state="Dancing")
    assert bad.status_code == 400


async def test_interactions(cxone_sim: CxoneSimulator, agent: Agent) -> None:
    """accept / hold / resume / end move the contact and emit CallContactEvents; unknown ids 404."""
    await agent.poll()
    contact = cxone_sim.push_contact(agent_id=agent.token["agent_id"])
    await agent.poll()
    for action, status in [
        ("accept", "Active"),
        ("hold", "Holding"),
        ("resume", "Active"),
        ("end", "Disconnected"),
    ]:
        r = await agent.post(f"interactions/{contact.contact_id}/{action}")
        assert r.status_code == 202, (action, r.text)
        event = (await agent.poll()).json()["events"][-1]
        assert event["Status"] == status
    assert event["FinalState"] == "True"
    r = await agent.post("interactions/123/accept")
    assert r.status_code == 404
    assert r.json()["error"] == "not_found"


async def test_end_then_409(cxone_sim: CxoneSimulator, agent: Agent) -> None:
    """DELETE → 202; the final 200 carries AgentSessionEnd; then 409 on every poll and on DELETE."""
    await agent.poll()
    r = await agent.http.delete(f"{agent.base}/{agent.sid}", headers=agent.auth)
    assert r.status_code == 202
    final = await agent.poll()
    assert final.status_code == 200
    assert types(final) == ["AgentSessionEnd"]
    gone = await agent.poll()
    assert gone.status_code == 409
    assert gone.json()["error"] == "session_ended"
    again = await agent.http.delete(f"{agent.base}/{agent.sid}", headers=agent.auth)
    assert again.status_code == 409
    assert cxone_sim.recorder.request_count("GET", POLL, 409) == 1


async def test_inactivity_timeout_ends_the_session(
    cxone_sim: CxoneSimulator, http: httpx.AsyncClient, clock: FakeClock
) -> None:
    """No request for inactivityTimeout seconds → AgentSessionEnd, then 409; keep-alive resets it."""
    a = Agent(cxone_sim, http)
    await a.login()
    await a.start("stationId=s&inactivityTimeout=30")
    await a.poll()
    clock.advance(25)
    assert (await a.post("keep-alive")).status_code == 202
    clock.advance(25)
    assert (await a.poll()).status_code == 304
    clock.advance(31)
    final = await a.poll()
    assert types(final) == ["AgentSessionEnd"]
    assert final.json()["events"][0]["Reason"] == "inactivity"
    assert (await a.poll()).status_code == 409


async def test_cache_control_hint_and_correlation_id(
    http: httpx.AsyncClient, start_cxone: StartCxone
) -> None:
    """max_age_s adds Cache-Control: max-age=N to 200 and 304 polls; CorrelationId is echoed."""
    sim = await start_cxone(CxoneSimConfig(max_age_s=2))
    a = Agent(sim, http)
    await a.login()
    await a.start()
    r = await a.poll(CorrelationId="corr-1")
    assert r.headers["Cache-Control"] == "max-age=2"
    assert r.headers["CorrelationId"] == "corr-1"
    idle = await a.poll()
    assert idle.status_code == 304
    assert idle.headers["Cache-Control"] == "max-age=2"


async def test_unknown_routes_and_ids_get_json_errors(cxone_sim: CxoneSimulator, agent: Agent) -> None:
    """404 / 405 in CXone's error shape; an id never issued is 404 invalid_session."""
    r = await agent.http.get(cxone_sim.urls["api"] + "/nope")
    assert r.status_code == 404
    assert r.json()["error"] == "not_found"
    r = await agent.http.put(f"{agent.base}/{agent.sid}/state", headers=agent.auth)
    assert r.status_code == 405
    assert r.json()["error"] == "method_not_allowed"
    r = await agent.poll(sid="0" * 32)
    assert r.status_code == 404
    assert r.json()["error"] == "invalid_session"
    r = await agent.http.get(cxone_sim.urls["auth"] + LEGACY)
    assert r.status_code == 405


async def test_recorder_sees_attempts_and_idempotency_keys(cxone_sim: CxoneSimulator, agent: Agent) -> None:
    """Attempts per second by listener, requests by template/status, Idempotency-Key counts."""
    await agent.http.post(
        f"{agent.base}/{agent.sid}/keep-alive", headers={**agent.auth, "Idempotency-Key": "k1"}
    )
    snap = cxone_sim.recorder.snapshot()
    assert snap["attempts_total"]["auth"] == {"accepted": 1, "refused": 0}
    assert snap["attempts_total"]["api"] == {"accepted": 2, "refused": 0}
    assert snap["idempotency_keys"] == {"k1": 1}
    assert cxone_sim.recorder.request_count("POST", START + "/{sessionId}/keep-alive", 202) == 1
    text = str(snap)
    assert agent.token["access_token"] not in text
    assert agent.token["refresh_token"] not in text


async def test_admin_index_and_stats(cxone_sim: CxoneSimulator, agent: Agent) -> None:
    """The admin listener lists the URLs and serves the recorder snapshot."""
    r = await agent.http.get(cxone_sim.urls["admin"] + "/")
    assert r.json()["simulator"] == "cxone"
    assert r.json()["urls"] == cxone_sim.urls
    stats = (await agent.http.get(cxone_sim.urls["admin"] + "/stats")).json()
    assert stats["tokens"]["issued"] == 1


def _consecutive_free_ports(count: int) -> list[int]:
    """Bases P (below the ephemeral range, so other tests' clients do not take them) with P..P+count-1 free."""
    import random
    import socket

    bases = list(range(20000, 32000, 7))
    random.Random(os.getpid()).shuffle(bases)
    found = []
    for base in bases:
        probes = []
        try:
            for offset in range(count):
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                probes.append(sock)
                sock.bind(("127.0.0.1", base + offset))
        except OSError:
            continue
        finally:
            for sock in probes:
                sock.close()
        found.append(base)
        if len(found) == 20:
            break
    return found


async def test_fixed_ports_in_key_order(http: httpx.AsyncClient) -> None:
    """port=P binds auth=P, api=P+1, admin=P+2."""
    for port in _consecutive_free_ports(3):
        sim = CxoneSimulator(port=port)
        try:
            await sim.start()
            break
        except SimulatorError:  # taken between the probe and the bind: try the next run of ports
            continue
    else:
        raise AssertionError("no three consecutive free ports below the ephemeral range")
    try:
        assert sim.urls == {
            "auth": f"http://127.0.0.1:{port}",
            "api": f"http://127.0.0.1:{port + 1}",
            "admin": f"http://127.0.0.1:{port + 2}",
        }
    finally:
        await sim.close()


def test_cli_prints_the_urls_and_serves(tmp_path: Path) -> None:
    """`session-supervisor sim cxone`: first stdout line is the URL JSON; SIGINT stops it."""
    config = tmp_path / "cxone.toml"
    config.write_text('users = ["alice"]\nmax_age_s = 3\n')
    cmd = [sys.executable, "-m", "supervisor", "sim", "cxone", "--seed", "4", "--config", str(config)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        urls = json.loads(proc.stdout.readline())
        assert sorted(urls) == ["admin", "api", "auth"]
        assert all(u.startswith("http://127.0.0.1:") for u in urls.values())
        basic_auth = {"Authorization": basic("app@vendor", "1")}
        body = {"grant_type": "password", "username": "bob", "password": "x"}
        refused = httpx.post(urls["auth"] + LEGACY, headers=basic_auth, json=body, timeout=10)
        assert refused.status_code == 400  # the config restricts users
        token = httpx.post(
            urls["auth"] + LEGACY, headers=basic_auth, json={**body, "username": "alice"}
        ).json()
        assert token["resource_server_base_uri"] == urls["api"] + "/inContactAPI/"
        stats = httpx.get(urls["admin"] + "/stats", timeout=10).json()
        assert stats["tokens"]["issued"] == 1
        # the process watches its own loop: a stall (here the process stopped for 0.3 s) is kept
        assert stats["loop_stalls"]["watched"] is True
        os.kill(proc.pid, signal.SIGSTOP)
        time.sleep(0.3)  # the stall itself: the process is stopped this long
        os.kill(proc.pid, signal.SIGCONT)
        stalls = httpx.get(urls["admin"] + "/stats", timeout=10).json()["loop_stalls"]
        assert stalls["count"] >= 1 and stalls["longest_s"] >= 0.25, stalls
        (ended_at, length) = max(stalls["recent"], key=lambda r: r[1])
        assert length == stalls["longest_s"] and abs(ended_at - time.time()) < 10
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)
    assert proc.returncode in (0, 130, -signal.SIGINT)
    assert "Traceback" not in err
