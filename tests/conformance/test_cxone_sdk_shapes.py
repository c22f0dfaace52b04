"""CXone, held against NICE's agent SDK (``nice-devone/nice-cxone-agent-sdk``, the compiled
``@nice-devone/*`` 26.2.1 sources): no Python client exists, so each request here is the one the SDK
builds, paraphrased from its sources (cited per test): the OpenID and CXone discovery
(``cxone-auth.js`` ``getOpenIDConfiguration``, ``getCXoneConfiguration``), the path spellings of
``api-uri-constants.js``, ``JSON.stringify`` bodies sent with a browser's ``text/plain`` Content-Type
(``http-request.js``; ``http-util-service.js`` adds none), the whoami-derived base
(``whoami-response.js``), and the fields its event parsers read (``common-sdk`` models).
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import httpx
import pytest

from supervisor.clock import FakeClock
from supervisor.sim.cxone import CxoneSimulator

pytestmark = [pytest.mark.integration, pytest.mark.anyio, pytest.mark.cxone_sim(seed=3, fake_clock=True)]

TEXT = {"Content-Type": "text/plain;charset=UTF-8"}  # what a browser sends for a string body
JSON = {"Content-Type": "application/json"}  # http-util-service.js initHeader('', 'application/json')


def jwt_claims(token: str) -> dict[str, Any]:
    """security-helper.js parseJwt: JSON.parse(atob(token.split('.')[1]))."""
    payload = token.split(".")[1]
    claims: dict[str, Any] = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return claims


class Sdk:
    """What NICE's SDK holds after login: a token and the ACD base from whoami."""

    def __init__(self, sim: CxoneSimulator, http: httpx.AsyncClient) -> None:
        self.sim, self.http = sim, http
        self.token: dict[str, Any] = {}
        self.acd = ""
        self.session = ""

    @property
    def bearer(self) -> dict[str, str]:
        # http-util-service.js initHeader: Authorization + Originating-Service-Identifier, no Content-Type
        return {
            "Authorization": f"Bearer {self.token['access_token']}",
            "Originating-Service-Identifier": "x",
        }

    async def login(self) -> None:
        auth = self.sim.urls["auth"]
        # cxone-auth.js getOpenIDConfiguration: GET {cxoneHostname}/.well-known/openid-configuration
        oidc = (await self.http.get(auth + "/.well-known/openid-configuration", headers=JSON)).json()
        # the daemon's own grant stands in for the browser's OAuth code flow (not modelled)
        r = await self.http.post(
            oidc["token_endpoint"],
            data={"grant_type": "password", "username": "u", "password": "p"},
            auth=("app", "s"),
        )
        assert r.status_code == 200, r.text
        self.token = r.json()
        # cxone-user.js setUserDetails: the id_token's tenantId; then getCXoneConfiguration
        tenant = jwt_claims(self.token["id_token"])["tenantId"]
        conf = await self.http.get(
            auth + "/.well-known/cxone-configuration", params={"tenantId": tenant}, headers=JSON
        )
        assert conf.status_code == 200, conf.text
        self.acd = conf.json()["api_endpoint"]  # cxone-configuration.js: acdApiBaseUri
        # cxone-auth.js getWhoAmIData: no bearer, {"token"}, lower-case path; its base wins
        who = await self.http.post(
            auth + "/incontactauthorizationserver/token/whoami",
            content=json.dumps({"token": self.token["access_token"]}),
            headers=JSON,
        )
        assert who.status_code == 200, who.text
        body = who.json()
        assert {
            "agent_id",
            "bus_no",
            "team_id",
            "expires_in",
            "iss",
            "sub",
            "refresh_token_server_uri",
        } <= set(body)
        # whoami-response.js: resource_server_base_uri with /incontactapi/ removed, case-insensitively
        whoami_acd = re.sub("/incontactapi/", "", body["resource_server_base_uri"], flags=re.I)
        assert whoami_acd == self.acd  # the two discoveries agree on the API host
        self.acd = whoami_acd

    async def call(self, method: str, path: str, body: Any = None) -> httpx.Response:
        content = None if body is None else json.dumps(body)
        headers = {**self.bearer, **(TEXT if content is not None else {})}
        return await self.http.request(method, self.acd + path, content=content, headers=headers)

    async def poll(self, hold_s: int = 0) -> httpx.Response:
        # GET_NEXT_EVENT_URI: .../agent-sessions/{sessionId}/get-next-event?timeout={timeoutSec}
        r = await self.call(
            "GET",
            f"/InContactAPI/services/v23.0/agent-sessions/{self.session}/get-next-event?timeout={hold_s}",
        )
        if r.status_code == 200:
            self.session = r.json()["sessionId"]  # the SDK stores response.sessionId every time
        return r


@pytest.fixture
async def nice(cxone_sim: CxoneSimulator, http: httpx.AsyncClient) -> Sdk:
    client = Sdk(cxone_sim, http)
    await client.login()
    return client


async def start(nice: Sdk) -> None:
    # acd-session-manager.js startSession: StartSessionRequest as a JSON body
    r = await nice.call(
        "POST",
        "/InContactAPI/services/v23.0/agent-sessions",
        {"stationId": "", "stationPhoneNumber": "5551234", "inactivityTimeout": 45},
    )
    assert r.status_code == 202, r.text
    nice.session = r.json()["sessionId"]  # the SDK rejects an answer without it


async def test_start_join_state_and_events_as_the_sdk_reads_them(
    nice: Sdk, cxone_sim: CxoneSimulator
) -> None:
    await start(nice)
    first = (await nice.poll()).json()["events"]
    start_event = next(e for e in first if e["Type"] == "AgentSessionStart")
    assert {"IISHost", "VCHost", "AgentUUId", "ClientConnectorPort", "portNo"} <= set(start_event)
    # joinSession: {asAgentId: agentId || ''}
    joined = await nice.call("POST", "/InContactAPI/services/v23.0/agent-sessions/join", {"asAgentId": ""})
    assert joined.status_code == 202 and joined.json()["sessionId"]
    # agent-state-service.js setAgentState
    r = await nice.call(
        "POST",
        f"/InContactAPI/services/v23.0/agent-sessions/{nice.session}/state",
        {"state": "Unavailable", "reason": "Break"},
    )
    assert r.status_code == 202
    state = next(e for e in (await nice.poll()).json()["events"] if e["Type"] == "AgentState")
    # agent-state-event.js parse: JS reads keys case-sensitively
    assert state["CurrentState"] == "Unavailable" and state["CurrentOutReason"] == "Break"
    assert state["IsAcw"] in ("True", "False") and state["NextIsAcw"] in ("True", "False")
    assert isinstance(state["NextStates"], list) and state["AcwTimeout"].isdigit()
    session = cxone_sim.state.sessions()[0]
    assert session.station_phone == "5551234" and session.inactivity_timeout == 45


async def test_join_as_another_agent_reaches_that_agents_session_or_404(
    nice: Sdk, cxone_sim: CxoneSimulator
) -> None:
    """joinSession({asAgentId}): a supervisor's token joins the named agent's live session (a chain
    of its own on the same session); an agent with no live session is a 404."""
    await start(nice)
    await nice.poll()
    (live,) = cxone_sim.state.sessions()
    joined = await nice.call(
        "POST", "/InContactAPI/services/v23.0/agent-sessions/join", {"asAgentId": int(live.agent_id)}
    )
    assert joined.status_code == 202, joined.text
    assert joined.json()["sessionId"] and cxone_sim.state.sessions() == [live]  # no second session
    nobody = await nice.call(
        "POST", "/InContactAPI/services/v23.0/agent-sessions/join", {"asAgentId": 999_999}
    )
    assert nobody.status_code == 404


async def test_every_sdk_path_spelling_reaches_the_route(nice: Sdk, cxone_sim: CxoneSimulator) -> None:
    await start(nice)
    await nice.poll()
    sid = nice.session
    # KEEP_ALIVE_URI on v31.0; lower-case and "//" spellings of the same host (api-uri-constants.js)
    for path in (
        f"/InContactAPI/services/v31.0/agent-sessions/{sid}/keep-alive",
        f"/incontactapi/services/v23.0/agent-sessions/{sid}/keep-alive",
        f"/incontactapi//services/v23.0/agent-sessions/{sid}/keep-alive",
        f"/inContactAPI/services/v2.0/agent-sessions/{sid}/keep-alive",
    ):
        r = await nice.call("POST", path)
        assert r.status_code == 202, (path, r.text)
    # the canonical template is what faults and stats name
    assert (
        cxone_sim.recorder.request_count(
            "POST", "/inContactAPI/services/v{N}.0/agent-sessions/{sessionId}/keep-alive", 202
        )
        == 4
    )


async def test_end_session_body_and_the_end_event(nice: Sdk, cxone_sim: CxoneSimulator) -> None:
    await start(nice)
    await nice.poll()
    contact = cxone_sim.push_contact(agent_id=cxone_sim.state.sessions()[0].agent_id)
    call = next(e for e in (await nice.poll()).json()["events"] if e["Type"] == "CallContactEvent")
    assert call["OriginalState"] in ("True", "False")  # call-contact-event.js: a boolean
    # acd-session-manager.js endSession: DELETE with EndSessionRequest
    r = await nice.call(
        "DELETE",
        f"/InContactAPI/services/v23.0/agent-sessions/{nice.session}",
        {"forceLogoff": False, "endContacts": True, "ignorePersonalQueue": False},
    )
    assert r.status_code == 202 and r.content == b""  # the SDK turns an empty body into {}
    events = (await nice.poll()).json()["events"]
    ended_contact = next(e for e in events if e["Type"] == "CallContactEvent")
    assert ended_contact["ContactID"] == contact.contact_id and ended_contact["FinalState"] == "True"
    end = events[-1]
    # agent-session-end-event.js parse
    assert end["Type"] == "AgentSessionEnd" and end["Success"] == "True"
    assert {"IISHost", "VCHost", "Message"} <= set(end)


async def test_v1_token_exchange_refresh_and_jwt_claims(
    nice: Sdk, cxone_sim: CxoneSimulator, http: httpx.AsyncClient, clock: FakeClock
) -> None:
    # cxone-auth.js getRegionalAccessTokenByToken: Basic base64("{clientId}@cxone"), no colon, no secret
    basic = {"Authorization": "Basic " + base64.b64encode(b"my-client@cxone").decode()}
    r = await http.post(
        cxone_sim.urls["auth"] + "/public/authentication/v1/token",
        content=json.dumps({"accessToken": nice.token["access_token"]}),
        headers={**basic, "Content-Type": "application/json"},
    )
    assert r.status_code == 200, r.text
    exchanged = r.json()
    # auth-token.js parseData: access_token || accessToken, expires_in || accessTokenExpiry, ...
    assert {"accessToken", "refreshToken", "accessTokenExpiry"} <= set(exchanged)
    claims = jwt_claims(exchanged["accessToken"])
    assert claims["exp"] > clock.time()  # validation-utils.js validateToken
    assert claims["icAgentId"] and claims["sub"].startswith("user:")
    assert jwt_claims(nice.token["id_token"])["icBUId"] == 4600001  # cxone-user.js setUserDetails
    # the regional refresh: same Basic header, {"token"}; refresh tokens are single-use
    refresh = {"token": exchanged["refreshToken"]}
    url = cxone_sim.urls["auth"] + "/public/authentication/v1/refresh"
    first = await http.post(
        url, content=json.dumps(refresh), headers={**basic, "Content-Type": "application/json"}
    )
    assert first.status_code == 200 and first.json()["accessToken"] != exchanged["accessToken"]
    again = await http.post(
        url, content=json.dumps(refresh), headers={**basic, "Content-Type": "application/json"}
    )
    assert again.status_code == 400 and again.json()["error"] == "invalid_grant"


async def test_oidc_refresh_as_the_sdk_sends_it(
    nice: Sdk, cxone_sim: CxoneSimulator, http: httpx.AsyncClient
) -> None:
    """cxone-auth.js getRefreshToken: `grant_type=refresh_token&scope=openid&refresh_token=…` as text with
    `Content-Type: application/json`, to the discovered tokenEndpoint (the client authenticates here:
    the simulator models confidential back-end clients, not NICE's public browser client)."""
    text = f"grant_type=refresh_token&scope=openid&refresh_token={nice.token['refresh_token']}"
    r = await http.post(
        cxone_sim.urls["auth"] + "/auth/token", content=text.encode(), headers=JSON, auth=("app", "s")
    )
    assert r.status_code == 200, r.text
    assert r.json()["access_token"] != nice.token["access_token"]


async def test_whoami_refuses_an_unknown_token(cxone_sim: CxoneSimulator, http: httpx.AsyncClient) -> None:
    r = await http.post(
        cxone_sim.urls["auth"] + "/InContactAuthorizationServer/Token/whoami", json={"token": "nope"}
    )
    assert r.status_code == 401 and r.json()["error"] == "invalid_token"
