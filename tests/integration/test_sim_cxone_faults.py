"""Every CXone fault: what a plain httpx client sees, and what the simulator recorded.

Faults are injected through the Python API (``sim.faults``) and, for one of each style,
through the admin HTTP API. Scheduled faults run on a FakeClock; nothing here sleeps to
wait for a timer (the only waits are bounded loops for a request to *reach* the server).
"""

from __future__ import annotations

import base64
import contextlib
import email.utils
from typing import Any

import anyio
import httpx
import pytest

from supervisor.clock import FakeClock
from supervisor.sim.cxone import CxoneSimulator, ErrorBody
from supervisor.sim.faults import Fault, FaultKind

pytestmark = [pytest.mark.integration, pytest.mark.anyio, pytest.mark.cxone_sim(seed=11, fake_clock=True)]

POLL = "/inContactAPI/services/v{N}.0/agent-sessions/{sessionId}/get-next-event"
START = "/inContactAPI/services/v{N}.0/agent-sessions"
LEGACY = "/InContactAuthorizationServer/Token"


class Agent:
    """A minimal CXone agent client: plain httpx, no retries."""

    def __init__(self, sim: CxoneSimulator, http: httpx.AsyncClient, user: str = "agent1") -> None:
        self.sim, self.http, self.user = sim, http, user
        self.token: dict[str, Any] = {}
        self.sid = ""

    @property
    def base(self) -> str:
        return self.sim.urls["api"] + "/inContactAPI/services/v23.0/agent-sessions"

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"bearer {self.token.get('access_token', '')}"}

    async def login(self) -> httpx.Response:
        basic = base64.b64encode(b"app@vendor:4600001").decode()
        r = await self.http.post(
            self.sim.urls["auth"] + LEGACY,
            headers={"Authorization": f"basic {basic}"},
            json={"grant_type": "password", "username": self.user, "password": "pw"},
        )
        if r.status_code == 200:
            self.token = r.json()
        return r

    async def refresh(self) -> httpx.Response:
        basic = base64.b64encode(b"app@vendor:4600001").decode()
        r = await self.http.post(
            self.sim.urls["auth"] + LEGACY,
            headers={"Authorization": f"basic {basic}"},
            json={"grant_type": "refresh_token", "refresh_token": self.token["refresh_token"]},
        )
        if r.status_code == 200:
            self.token = r.json()
        return r

    async def start(self) -> httpx.Response:
        r = await self.http.post(self.base + "?stationId=st1", headers=self.auth)
        if r.status_code == 202 and "sessionId" in r.json():
            self.sid = r.json()["sessionId"]
        return r

    async def poll(self, hold: int = 0) -> httpx.Response:
        r = await self.http.get(f"{self.base}/{self.sid}/get-next-event?timeout={hold}", headers=self.auth)
        if r.status_code == 200:
            with contextlib.suppress(ValueError):  # MALFORMED_BODY
                self.sid = r.json().get("sessionId", self.sid)
        return r

    @property
    def key(self) -> str:
        return str(self.token["agent_id"])


@pytest.fixture
async def agent(cxone_sim: CxoneSimulator, http: httpx.AsyncClient) -> Agent:
    """Logged in, session started, first events drained."""
    a = Agent(cxone_sim, http)
    assert (await a.login()).status_code == 200
    assert (await a.start()).status_code == 202
    assert (await a.poll()).status_code == 200
    return a


async def until(predicate: Any) -> None:
    """Wait (bounded) until the server has seen something; never used to wait for a timer."""
    with anyio.fail_after(5):
        while not predicate():  # noqa: ASYNC110 - the server sets no event we could await
            await anyio.sleep(0.005)


# ----------------------------------------------------------------------------- black hole


async def test_blackhole_holds_the_poll_until_cleared(cxone_sim: CxoneSimulator, agent: Agent) -> None:
    """BLACKHOLE: the request is never answered while the fault lasts; it completes after clear()."""
    fault = cxone_sim.faults.inject(Fault(kind=FaultKind.BLACKHOLE, endpoint="*get-next-event"))
    assert fault.id is not None
    fault_id = fault.id
    result: list[httpx.Response] = []

    async def held() -> None:
        result.append(await agent.poll())

    async with anyio.create_task_group() as tg:
        tg.start_soon(held)
        await until(lambda: cxone_sim.recorder.fault_hits(fault_id) == 1)
        # matched but unanswered: only the fixture's first poll is recorded; other routes still answer
        assert cxone_sim.recorder.request_count("GET", POLL) == 1
        r = await agent.http.post(f"{agent.base}/{agent.sid}/keep-alive", headers=agent.auth)
        assert r.status_code == 202
        assert result == []
        cxone_sim.faults.clear(fault_id)
    assert result[0].status_code == 304
    assert cxone_sim.recorder.request_count("GET", POLL, 304) == 1


async def test_scheduled_blackhole_ends_with_its_duration(
    cxone_sim: CxoneSimulator, agent: Agent, clock: FakeClock
) -> None:
    """A black hole with duration_s releases held requests when the (fake) clock passes its end."""
    fault = cxone_sim.faults.inject(Fault(kind=FaultKind.BLACKHOLE, duration_s=30))
    assert fault.id is not None
    fault_id = fault.id
    result: list[httpx.Response] = []

    async def held() -> None:
        result.append(await agent.poll())

    async with anyio.create_task_group() as tg:
        tg.start_soon(held)
        await until(lambda: cxone_sim.recorder.fault_hits(fault_id) == 1)
        clock.advance(30)  # the controller's ticker expires it and wakes the held request
    assert result[0].status_code == 304


# ------------------------------------------------------------------------------- 429 / 5xx


@pytest.mark.parametrize(
    ("retry_after", "expect"),
    [("7", "7"), (3, "3"), ("http-date", "date"), ("http-date:12", "date:12"), (None, None)],
)
async def test_rate_limit_storm(
    cxone_sim: CxoneSimulator, agent: Agent, retry_after: Any, expect: str | None
) -> None:
    """429 with Retry-After as seconds, as an HTTP-date, or absent; JSON body by default."""
    fault = cxone_sim.faults.inject(
        Fault(kind=FaultKind.RATE_LIMIT_STORM, params={"retry_after": retry_after})
    )
    r = await agent.poll()
    assert r.status_code == 429
    assert r.json()["error_code"] == "TooManyRequests"
    assert set(r.json()) == {"error_code", "error_message"}
    if expect is None:
        assert "Retry-After" not in r.headers
    elif expect.startswith("date"):
        ahead = int(expect.partition(":")[2] or 5)
        when = email.utils.parsedate_to_datetime(r.headers["Retry-After"])
        assert when.timestamp() == pytest.approx(cxone_sim.clock.time() + ahead, abs=1)
    else:
        assert r.headers["Retry-After"] == expect
    assert cxone_sim.recorder.request_count("GET", POLL, 429) == 1
    assert fault.id is not None
    assert cxone_sim.recorder.fault_hits(fault.id) == 1


async def test_rate_limit_storm_with_empty_body_and_count(cxone_sim: CxoneSimulator, agent: Agent) -> None:
    """The empty-body variant; ``count`` limits the storm, then normal service resumes."""
    cxone_sim.faults.inject(Fault(kind=FaultKind.RATE_LIMIT_STORM, count=2, params={"body": "empty"}))
    statuses = [(await agent.poll()).status_code for _ in range(3)]
    assert statuses == [429, 429, 304]
    r = await agent.poll()
    assert r.status_code == 304
    assert cxone_sim.recorder.request_count("GET", POLL, 429) == 2


async def test_queue_full(cxone_sim: CxoneSimulator, agent: Agent) -> None:
    """QUEUE_FULL: 429 with error_code QUEUE_FULL (no Retry-After unless asked)."""
    cxone_sim.faults.inject(Fault(kind=FaultKind.QUEUE_FULL, endpoint="*/interactions/*"))
    r = await agent.http.post(f"{agent.base}/{agent.sid}/interactions/1/accept", headers=agent.auth)
    assert r.status_code == 429
    assert r.json()["error_code"] == "QUEUE_FULL"
    assert "Retry-After" not in r.headers
    assert (await agent.poll()).status_code == 304  # other endpoints unaffected
    assert cxone_sim.recorder.request_count(status=429) == 1


@pytest.mark.parametrize("status", [500, 502, 503, 504])
async def test_server_error_burst(cxone_sim: CxoneSimulator, agent: Agent, status: int) -> None:
    """5xx bursts, empty body by default, optional Retry-After."""
    cxone_sim.faults.inject(
        Fault(kind=FaultKind.SERVER_ERROR_BURST, params={"status": status, "retry_after": "2"})
    )
    r = await agent.poll()
    assert r.status_code == status
    assert r.content == b""
    assert r.headers["Retry-After"] == "2"
    assert cxone_sim.recorder.request_count("GET", POLL, status) == 1


async def test_server_error_with_json_body(cxone_sim: CxoneSimulator, agent: Agent) -> None:
    """The {"error","error_description"} variant (param ``body``), without Retry-After."""
    cxone_sim.faults.inject(
        Fault(kind=FaultKind.SERVER_ERROR_BURST, params={"status": 502, "body": "json"}, count=1)
    )
    r = await agent.poll()
    assert r.status_code == 502
    assert r.json() == {"error": "bad_gateway", "error_description": "Bad Gateway"}
    assert "Retry-After" not in r.headers
    # the per-kind default (Python API) when the fault does not say
    cxone_sim.gate.error_bodies[FaultKind.SERVER_ERROR_BURST] = ErrorBody.JSON
    cxone_sim.faults.inject(Fault(kind=FaultKind.SERVER_ERROR_BURST, params={"status": 500}))
    assert (await agent.poll()).json()["error"] == "server_error"


async def test_latency(cxone_sim: CxoneSimulator, agent: Agent) -> None:
    """LATENCY delays the answer (not timed here) and is recorded as a hit."""
    fault = cxone_sim.faults.inject(Fault(kind=FaultKind.LATENCY, params={"latency_ms": 5}, count=1))
    assert (await agent.poll()).status_code == 304
    assert fault.id is not None
    assert cxone_sim.recorder.fault_hits(fault.id) == 1


# ----------------------------------------------------------------------------------- tokens


async def test_token_expiry_then_refresh(cxone_sim: CxoneSimulator, agent: Agent) -> None:
    """TOKEN_EXPIRE: 401 invalid_token "Token expired"; the refresh token still works."""
    cxone_sim.faults.inject(Fault(kind=FaultKind.TOKEN_EXPIRE))
    r = await agent.poll()
    assert r.status_code == 401
    assert r.json() == {"error": "invalid_token", "error_description": "Token expired"}
    assert (await agent.refresh()).status_code == 200
    assert (await agent.poll()).status_code == 304  # tokens issued after the fault started work
    assert cxone_sim.recorder.tokens()["expired"] == 1
    assert cxone_sim.recorder.tokens()["refreshed"] == 1


async def test_token_revocation(cxone_sim: CxoneSimulator, agent: Agent) -> None:
    """TOKEN_REVOKE: 401 "Token revoked"; the refresh answers invalid_grant; a new login works."""
    cxone_sim.faults.inject(Fault(kind=FaultKind.TOKEN_REVOKE))
    r = await agent.poll()
    assert r.status_code == 401
    assert r.json()["error_description"] == "Token revoked"
    refresh = await agent.refresh()
    assert refresh.status_code == 400
    assert refresh.json()["error"] == "invalid_grant"
    assert (await agent.login()).status_code == 200
    assert (await agent.poll()).status_code == 304
    assert cxone_sim.recorder.tokens()["revoked"] == 1
    assert cxone_sim.recorder.tokens()["rejected"] == 1


async def test_token_fault_respects_share(cxone_sim: CxoneSimulator, http: httpx.AsyncClient) -> None:
    """share=0.5 hits exactly the agents the controller selects (deterministic per seed)."""
    agents = [Agent(cxone_sim, http, user=f"agent{i}") for i in range(12)]
    for a in agents:
        await a.login()
    fault = cxone_sim.faults.inject(Fault(kind=FaultKind.TOKEN_REVOKE, share=0.5))
    hit = {a.key for a in agents if (await a.start()).status_code == 401}
    assert hit == {a.key for a in agents if cxone_sim.faults.selected(fault, a.key)}
    assert 0 < len(hit) < len(agents)


# ---------------------------------------------------------------------------- bad 200s


async def test_missing_session_id_in_poll(cxone_sim: CxoneSimulator, agent: Agent) -> None:
    """MISSING_FIELDS on get-next-event: a 200 without sessionId; the old id then replays."""
    cxone_sim.faults.inject(Fault(kind=FaultKind.MISSING_FIELDS, params={"fields": ["sessionId"]}, count=1))
    cxone_sim.push_contact(agent_id=agent.key)
    r = await agent.poll()
    assert r.status_code == 200
    assert "sessionId" not in r.json()
    assert r.json()["events"][0]["Type"] == "CallContactEvent"
    replay = await agent.poll()  # the client could not learn the new id: its id is now stale
    assert [e["Type"] for e in replay.json()["events"]][:2] == ["AgentSessionStart", "AgentState"]


async def test_missing_default_fields_on_start(cxone_sim: CxoneSimulator, http: httpx.AsyncClient) -> None:
    """The default field list (conversationId→sessionId/ContactID, agentId, status) strips the start answer."""
    a = Agent(cxone_sim, http)
    await a.login()
    cxone_sim.faults.inject(Fault(kind=FaultKind.MISSING_FIELDS, endpoint="POST */agent-sessions", count=1))
    r = await a.start()
    assert r.status_code == 202
    assert r.json() == {}


async def test_missing_event_fields(cxone_sim: CxoneSimulator, agent: Agent) -> None:
    """Field names also apply inside events (case-insensitive): ContactID and Status vanish."""
    fields = ["conversationId", "agentId", "status"]  # conversationId stands for sessionId and ContactID
    cxone_sim.faults.inject(
        Fault(kind=FaultKind.MISSING_FIELDS, endpoint="*get-next-event", count=1, params={"fields": fields})
    )
    cxone_sim.push_contact(agent_id=agent.key)
    event = (await agent.poll()).json()["events"][0]
    assert "ContactID" not in event
    assert "Status" not in event
    assert "AgentId" not in event
    assert event["Type"] == "CallContactEvent"


async def test_missing_fields_on_token(cxone_sim: CxoneSimulator, http: httpx.AsyncClient) -> None:
    """A token answer without resource_server_base_uri."""
    cxone_sim.faults.inject(
        Fault(kind=FaultKind.MISSING_FIELDS, params={"fields": ["resource_server_base_uri"]})
    )
    r = await Agent(cxone_sim, http).login()
    assert r.status_code == 200
    assert "resource_server_base_uri" not in r.json()
    assert "access_token" in r.json()


async def test_malformed_body(cxone_sim: CxoneSimulator, agent: Agent) -> None:
    """MALFORMED_BODY: a 200 whose body is not JSON."""
    cxone_sim.faults.inject(Fault(kind=FaultKind.MALFORMED_BODY, count=1))
    cxone_sim.push_contact(agent_id=agent.key)
    r = await agent.poll()
    assert r.status_code == 200
    with pytest.raises(ValueError, match=r"."):
        r.json()


# --------------------------------------------------------------------- session faults


async def test_session_ended_fault_is_409_at_once(cxone_sim: CxoneSimulator, agent: Agent) -> None:
    """SESSION_ENDED: the next poll is 409 (no final AgentSessionEnd), and so is everything after."""
    cxone_sim.faults.inject(Fault(kind=FaultKind.SESSION_ENDED, count=1))
    r = await agent.poll()
    assert r.status_code == 409
    assert r.json()["error"] == "session_ended"
    assert (await agent.poll()).status_code == 409
    state = await agent.http.post(f"{agent.base}/{agent.sid}/state?state=Available", headers=agent.auth)
    assert state.status_code == 409
    assert cxone_sim.recorder.request_count("GET", POLL, 409) == 2
    assert (await agent.start()).status_code == 202  # a fresh session is possible


async def test_session_ended_wakes_a_held_poll(cxone_sim: CxoneSimulator, agent: Agent) -> None:
    """A fault that starts while a poll is held answers that poll (409) at once."""
    result: list[httpx.Response] = []

    async def held() -> None:
        result.append(await agent.poll(hold=30))

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(held)
            # start + first poll + the held poll reached the server
            await until(lambda: cxone_sim.recorder.attempts_total("api")["accepted"] == 3)
            cxone_sim.faults.inject(Fault(kind=FaultKind.SESSION_ENDED))
    assert result[0].status_code == 409


async def test_stale_session_replay(cxone_sim: CxoneSimulator, agent: Agent) -> None:
    """STALE_SESSION: the poll with the current id answers an AgentSessionStart replay and a new id."""
    before = agent.sid
    cxone_sim.faults.inject(Fault(kind=FaultKind.STALE_SESSION, count=1))
    r = await agent.poll()
    assert r.status_code == 200
    assert [e["Type"] for e in r.json()["events"]] == ["AgentSessionStart", "AgentState"]
    assert r.json()["sessionId"] != before
    assert (await agent.poll()).status_code == 304


# ------------------------------------------------------------------- schedule / admission


async def test_scheduled_fault_starts_at_its_time(
    cxone_sim: CxoneSimulator, agent: Agent, clock: FakeClock
) -> None:
    """``at`` delays the fault on the injected clock."""
    cxone_sim.faults.inject(Fault(kind=FaultKind.SERVER_ERROR_BURST, at=60))
    assert (await agent.poll()).status_code == 304
    clock.advance(60)
    assert (await agent.poll()).status_code == 503


async def test_admission_limit_refuses_and_records(
    cxone_sim: CxoneSimulator, http: httpx.AsyncClient
) -> None:
    """ADMISSION_LIMIT: beyond rate_per_s requests in a clock second are refused (429) and counted."""
    cxone_sim.faults.inject(
        Fault(kind=FaultKind.ADMISSION_LIMIT, endpoint="*/Token", params={"rate_per_s": 2})
    )
    statuses = [(await Agent(cxone_sim, http, f"u{i}").login()).status_code for i in range(3)]
    assert statuses == [200, 200, 429]
    assert cxone_sim.recorder.attempts_total("auth") == {"accepted": 2, "refused": 1}
    assert cxone_sim.recorder.peak_attempts_per_second("auth", "refused") == 1


# ------------------------------------------------------------------------------- admin API


async def test_faults_through_the_admin_api(cxone_sim: CxoneSimulator, agent: Agent) -> None:
    """POST /faults → effect on the client → GET /faults shows hits → DELETE clears → GET /stats."""
    admin = cxone_sim.urls["admin"]
    body = {"kind": "queue_full", "params": {"retry_after": "4"}, "endpoint": "*get-next-event"}
    created = await agent.http.post(admin + "/faults", json=body)
    assert created.status_code == 201
    fault_id = created.json()["faults"][0]["id"]
    r = await agent.poll()
    assert r.status_code == 429
    assert r.headers["Retry-After"] == "4"
    listed = (await agent.http.get(admin + "/faults")).json()["faults"]
    assert listed[0]["hits"] == 1
    assert (await agent.http.delete(f"{admin}/faults/{fault_id}")).json() == {"cleared": 1}
    assert (await agent.poll()).status_code == 304
    stats = (await agent.http.get(admin + "/stats")).json()
    assert stats["fault_hits"][fault_id] == {"kind": "queue_full", "hits": 1}
    rows = {(row["endpoint"], row["status"]): row["count"] for row in stats["requests"]}
    assert rows[(POLL, 429)] == 1
    bad = await agent.http.post(admin + "/faults", json={"kind": "queue_full", "params": {"nope": 1}})
    assert bad.status_code == 400


async def test_close_releases_held_requests(http: httpx.AsyncClient) -> None:
    """Shutting the simulator down answers held long polls (304) and black holes (503) at once."""
    sim = CxoneSimulator()
    await sim.start()
    polling, holed = Agent(sim, http, "p"), Agent(sim, http, "h")
    for a in (polling, holed):
        await a.login()
        await a.start()
        await a.poll()
    fault = sim.faults.inject(Fault(kind=FaultKind.BLACKHOLE, endpoint="*keep-alive"))
    assert fault.id is not None
    fault_id = fault.id
    results: dict[str, int] = {}

    async def long_poll() -> None:
        results["poll"] = (await polling.poll(hold=60)).status_code

    async def keep_alive() -> None:
        r = await holed.http.post(f"{holed.base}/{holed.sid}/keep-alive", headers=holed.auth)
        results["blackhole"] = r.status_code

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(long_poll)
            tg.start_soon(keep_alive)
            await until(lambda: sim.recorder.fault_hits(fault_id) == 1)
            await until(lambda: sim.recorder.attempts_total("api")["accepted"] == 6)
            await sim.close()
    assert results == {"poll": 304, "blackhole": 503}
