"""Genesys simulator, HTTP side: OAuth and Platform REST wire shapes (docs/platforms.md, "Genesys Cloud Platform REST"), driven by httpx.

Each test checks what the client sees and what the simulator recorded.
"""

from __future__ import annotations

import base64
import email.utils
import uuid

import httpx
import pytest

from supervisor.sim.faults import Fault, FaultKind
from supervisor.sim.genesys.config import GenesysSimConfig
from tests.harness.simulators import Genesys

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

CONV = "/api/v2/conversations/{conversationId}"
ATTRS = "/api/v2/conversations/{conversationId}/participants/{participantId}/attributes"
MSGS = "/api/v2/conversations/messages/{conversationId}/communications/{communicationId}/messages"
ERROR_KEYS = {"message", "code", "status", "contextId", "details", "errors"}


def conv_id() -> str:
    """A well-formed id the simulator never issued."""
    return str(uuid.uuid4())


def seeded(g: Genesys) -> str:
    """A conversation that exists (the simulator invents none: docs/taxonomy.md)."""
    return g.sim.create_conversation().id


# -- OAuth (§4) ---------------------------------------------------------------------------------------


async def test_client_credentials_token_shape_and_record(genesys: Genesys) -> None:
    body = await genesys.login()
    assert body["token_type"] == "bearer"
    assert body["expires_in"] == 86400
    assert isinstance(body["access_token"], str) and body["access_token"]
    assert genesys.sim.recorder.tokens()["issued"] == 1
    snapshot = str(genesys.sim.recorder.snapshot())
    assert body["access_token"] not in snapshot  # never the token values in stats
    assert body["refresh_token"] not in snapshot


async def test_refresh_grant_issues_a_new_access_token(genesys: Genesys) -> None:
    first = await genesys.login()
    r = await genesys.http.post(
        genesys.sim.urls["login"] + "/oauth/token",
        data={"grant_type": "refresh_token", "refresh_token": first["refresh_token"]},
        auth=("client", "secret"),
    )
    assert r.status_code == 200
    assert r.json()["access_token"] != first["access_token"]
    assert genesys.sim.recorder.tokens()["refreshed"] == 1
    bad = await genesys.http.post(
        genesys.sim.urls["login"] + "/oauth/token",
        data={"grant_type": "refresh_token", "refresh_token": "nope"},
        auth=("client", "secret"),
    )
    assert bad.status_code == 400
    assert bad.json()["error"] == "invalid_grant"


@pytest.mark.parametrize(
    ("headers", "data", "status", "error"),
    [
        ({}, {"grant_type": "client_credentials"}, 401, "invalid_client"),
        ({"Authorization": "Basic !!!"}, {"grant_type": "client_credentials"}, 401, "invalid_client"),
        ({"Authorization": "Basic " + base64.b64encode(b"c:s").decode()}, {}, 400, "invalid_request"),
        (
            {"Authorization": "Basic " + base64.b64encode(b"c:s").decode()},
            {"grant_type": "password"},
            400,
            "unsupported_grant_type",
        ),
    ],
)
async def test_oauth_errors_have_the_login_shape(
    genesys: Genesys, headers: dict[str, str], data: dict[str, str], status: int, error: str
) -> None:
    r = await genesys.http.post(genesys.sim.urls["login"] + "/oauth/token", data=data, headers=headers)
    assert r.status_code == status
    body = r.json()
    assert set(body) == {"error", "description", "error_description"}
    assert body["error"] == error
    assert "Traceback" not in r.text


async def test_oauth_json_body_is_invalid_request(genesys: Genesys) -> None:
    r = await genesys.http.post(
        genesys.sim.urls["login"] + "/oauth/token", json={"grant_type": "client_credentials"}, auth=("c", "s")
    )
    assert r.status_code == 400
    assert r.json()["error"] == "invalid_request"


@pytest.mark.genesys_sim(GenesysSimConfig(clients={"known": "right"}, token_ttl_s=300))
async def test_restricted_clients_and_configured_ttl(genesys: Genesys) -> None:
    url = genesys.sim.urls["login"] + "/oauth/token"
    wrong = await genesys.http.post(url, data={"grant_type": "client_credentials"}, auth=("known", "wrong"))
    assert wrong.status_code == 401
    assert wrong.json()["error"] == "invalid_client"
    assert "wrong" not in wrong.text  # the secret is never echoed
    body = await genesys.login("known", "right")
    assert body["expires_in"] == 300
    assert genesys.sim.recorder.tokens() | {} == {
        "issued": 1,
        "refreshed": 0,
        "rejected": 1,
        "expired": 0,
        "revoked": 0,
    }


# -- Platform REST (§3, §5) ---------------------------------------------------------------------------


async def test_missing_bearer_is_authentication_required(genesys: Genesys) -> None:
    r = await genesys.http.get(genesys.api(f"/api/v2/conversations/{conv_id()}"))
    assert r.status_code == 401
    body = r.json()
    assert set(body) == ERROR_KEYS
    assert body["code"] == "authentication.required"
    assert r.headers["ININ-Correlation-Id"] == body["contextId"]


async def test_unknown_token_is_bad_credentials(genesys: Genesys) -> None:
    r = await genesys.http.get(
        genesys.api(f"/api/v2/conversations/{conv_id()}"), headers={"Authorization": "Bearer nope"}
    )
    assert r.status_code == 401
    assert r.json()["code"] == "bad.credentials"
    assert r.json()["message"] == "Invalid login credentials."


async def test_token_expires_by_the_clock(genesys: Genesys) -> None:
    await genesys.login()
    cid = seeded(genesys)
    assert (
        await genesys.http.get(genesys.api(f"/api/v2/conversations/{cid}"), headers=genesys.auth)
    ).status_code == 200
    genesys.clock.advance(86400)
    r = await genesys.http.get(genesys.api(f"/api/v2/conversations/{cid}"), headers=genesys.auth)
    assert r.status_code == 401
    assert r.json()["code"] == "bad.credentials"
    assert genesys.sim.recorder.tokens()["expired"] == 1


async def test_get_conversation_shape_and_headers(genesys: Genesys) -> None:
    await genesys.login()
    cid = seeded(genesys)
    r = await genesys.http.get(
        genesys.api(f"/api/v2/conversations/{cid}"), headers={**genesys.auth, "ININ-Correlation-Id": "corr-1"}
    )
    assert r.status_code == 200
    body = r.json()
    # PY269 Conversation.state: "When reading conversations, this field will never have a value present"
    assert body["id"] == cid and "state" not in body
    assert {p["purpose"] for p in body["participants"]} == {"customer", "agent"}
    for part in body["participants"]:
        # PY269 Participant: no participant-level state; its communication is in messages[]
        assert "state" not in part
        (comm,) = part["messages"]
        assert comm["state"] == "connected" and comm["type"] == "webmessaging" and comm["id"]
    agent = next(p for p in body["participants"] if p["purpose"] == "agent")
    assert agent["userId"]
    # no simulator extension fields: the seed's names are not the platform's
    assert not {"conversationId", "agentId", "status"} & set(body)
    assert r.headers["ININ-Correlation-Id"] == "corr-1"
    assert r.headers["inin-ratelimit-allowed"] == "300"
    assert r.headers["inin-ratelimit-count"] == "1"
    assert int(r.headers["inin-ratelimit-reset"]) == 60
    assert genesys.sim.recorder.request_count("GET", CONV, 200) == 1


@pytest.mark.parametrize(
    ("method", "path", "status", "code"),
    [
        ("GET", "/api/v2/conversations/{u}", 404, "not.found"),
        ("GET", "/api/v2/conversations/not-a-uuid", 400, "bad.request"),
        ("GET", "/api/v2/conversations/messages/{u}", 404, "not.found"),
        ("PATCH", "/api/v2/conversations/{u}/participants/{u}/attributes", 404, "not.found"),
        ("PATCH", "/api/v2/conversations/{c}/participants/{u}/attributes", 404, "not.found"),
        ("PATCH", "/api/v2/conversations/messages/{c}/participants/{u}", 404, "not.found"),
        ("POST", "/api/v2/conversations/messages/{u}/communications/{u}/messages", 404, "not.found"),
        ("POST", "/api/v2/conversations/messages/{c}/communications/{u}/messages", 404, "not.found"),
        ("POST", "/api/v2/conversations/messages/{c}/communications/c1/messages", 400, "bad.request"),
    ],
)
async def test_nothing_is_invented_unknown_ids_are_404_malformed_400(
    genesys: Genesys, method: str, path: str, status: int, code: str
) -> None:
    await genesys.login()
    url = genesys.api(path.format(u=conv_id(), c=seeded(genesys)))
    body = {"attributes": {"a": "b"}, "textBody": "hi", "state": "disconnected"}
    r = await genesys.http.request(method, url, json=body, headers=genesys.auth)
    assert r.status_code == status, r.text
    assert set(r.json()) == ERROR_KEYS and r.json()["code"] == code
    assert len(genesys.sim.state.conversations) == 1  # only the seeded one


async def test_list_route_is_not_read_as_a_conversation_id(genesys: Genesys) -> None:
    await genesys.login()
    cid = seeded(genesys)
    r = await genesys.http.get(genesys.api("/api/v2/conversations/messages"), headers=genesys.auth)
    assert r.status_code == 200
    assert [c["id"] for c in r.json()["entities"]] == [cid]


async def test_attributes_patch_is_202_and_persisted(genesys: Genesys) -> None:
    await genesys.login()
    cid = seeded(genesys)
    conv = (await genesys.http.get(genesys.api(f"/api/v2/conversations/{cid}"), headers=genesys.auth)).json()
    pid = conv["participants"][0]["id"]
    r = await genesys.http.patch(
        genesys.api(f"/api/v2/conversations/{cid}/participants/{pid}/attributes"),
        json={"attributes": {"survey": "yes"}},
        headers={**genesys.auth, "Idempotency-Key": "k-1"},
    )
    assert r.status_code == 202
    assert r.content == b""
    # the messaging variant answers PY269's ParticipantAttributes: the merged map
    r = await genesys.http.patch(
        genesys.api(f"/api/v2/conversations/messages/{cid}/participants/{pid}/attributes"),
        json={"attributes": {"plan": "gold"}},
        headers=genesys.auth,
    )
    assert r.status_code == 202 and r.json() == {"attributes": {"survey": "yes", "plan": "gold"}}
    after = (await genesys.http.get(genesys.api(f"/api/v2/conversations/{cid}"), headers=genesys.auth)).json()
    stored = next(p for p in after["participants"] if p["id"] == pid)["attributes"]
    assert stored == {"survey": "yes", "plan": "gold"}
    rec = genesys.sim.recorder
    assert rec.attributes(cid) == {"survey": "yes", "plan": "gold"}
    assert rec.idempotency_keys() == {"k-1": 1}
    assert rec.request_count("PATCH", ATTRS, 202) == 1


@pytest.mark.parametrize(
    ("body", "content_type", "status", "code"),
    [
        (b'{"attributes": {"a": 1}}', "application/json", 400, "invalid.value"),
        (b'{"attributes": ', "application/json", 400, "bad.request"),
        (b"attributes=1", "application/x-www-form-urlencoded", 415, "unsupported.media.type"),
    ],
)
async def test_malformed_patch_gets_an_error_body(
    genesys: Genesys, body: bytes, content_type: str, status: int, code: str
) -> None:
    await genesys.login()
    conv = genesys.sim.create_conversation()
    r = await genesys.http.patch(
        genesys.api(f"/api/v2/conversations/{conv.id}/participants/{conv.customer().id}/attributes"),
        content=body,
        headers={**genesys.auth, "Content-Type": content_type},
    )
    assert r.status_code == status
    assert set(r.json()) == ERROR_KEYS
    assert r.json()["code"] == code


async def test_unknown_route_and_method_get_error_bodies(genesys: Genesys) -> None:
    await genesys.login()
    r = await genesys.http.get(genesys.api("/api/v2/nothing/here"), headers=genesys.auth)
    assert r.status_code == 404
    assert r.json()["code"] == "not.found"
    r = await genesys.http.delete(
        genesys.api(f"/api/v2/conversations/{seeded(genesys)}"), headers=genesys.auth
    )
    assert r.status_code == 405
    assert set(r.json()) == ERROR_KEYS


async def test_agent_message_and_409_on_repeated_id(genesys: Genesys) -> None:
    await genesys.login()
    conv = genesys.sim.create_conversation()
    cid, comm = conv.id, conv.agent().communication.id
    url = genesys.api(f"/api/v2/conversations/messages/{cid}/communications/{comm}/messages")
    headers = {**genesys.auth, "Idempotency-Key": "m-1"}
    r = await genesys.http.post(url, json={"textBody": "hello"}, headers=headers)
    assert r.status_code == 200
    body = r.json()
    assert body["conversationId"] == cid
    assert body["status"] == "sent" and body["direction"] == "outbound"  # PY269 enums are lowercase
    assert body["messengerType"] == "webmessaging" and "textBody" not in body  # not in PY269 MessageData
    normalized = body["normalizedMessage"]  # PY269 269 MessageData.normalizedMessage
    assert normalized["text"] == "hello" and normalized["direction"] == "Outbound"
    assert "agentId" not in body
    for key in ("id", "timestamp", "fromAddress", "toAddress", "selfUri"):
        assert key in body
    got = await genesys.http.get(
        genesys.api(f"/api/v2/conversations/messages/{cid}/messages/{body['id']}"), headers=genesys.auth
    )
    assert got.json() == body
    again = await genesys.http.post(url, json={"textBody": "hello"}, headers=headers)
    assert again.status_code == 409
    assert again.json()["code"] == "conflict"
    both = await genesys.http.post(url, json={"textBody": "a", "mediaIds": ["x"]}, headers=genesys.auth)
    assert both.status_code == 400
    customer = conv.customer().communication.id
    theirs = await genesys.http.post(
        genesys.api(f"/api/v2/conversations/messages/{cid}/communications/{customer}/messages"),
        json={"textBody": "not mine"},
        headers=genesys.auth,
    )
    assert theirs.status_code == 404
    rec = genesys.sim.recorder
    assert rec.message_ids() == {"m-1": 2}
    assert rec.request_count("POST", MSGS, 200) == 1
    assert rec.request_count("POST", MSGS, 409) == 1


async def test_participant_disconnect_over_the_wire(genesys: Genesys) -> None:
    """GMT's UI test helper: PATCH .../participants/{agent} {"state":"DISCONNECTED"}, then poll messages[0]."""
    await genesys.login()
    conv = genesys.sim.create_conversation()
    agent = conv.agent()
    r = await genesys.http.patch(
        genesys.api(f"/api/v2/conversations/messages/{conv.id}/participants/{agent.id}"),
        json={"state": "DISCONNECTED"},
        headers=genesys.auth,
    )
    assert r.status_code == 202 and r.content == b""
    body = (
        await genesys.http.get(genesys.api(f"/api/v2/conversations/{conv.id}"), headers=genesys.auth)
    ).json()
    wire = next(p for p in body["participants"] if p["id"] == agent.id)
    assert wire["messages"][0]["state"] == "disconnected" and wire["endTime"]
    customer = next(p for p in body["participants"] if p["purpose"] == "customer")
    assert customer["messages"][0]["state"] == "connected"  # the customer is still there
    r = await genesys.http.patch(
        genesys.api(f"/api/v2/conversations/messages/{conv.id}"),
        json={"state": "disconnected"},
        headers=genesys.auth,
    )
    ended = r.json()
    assert r.status_code == 200 and ended["endTime"] and "state" not in ended  # answered as a read
    assert {p["messages"][0]["state"] for p in ended["participants"]} == {"disconnected"}
    sent = await genesys.http.post(
        genesys.api(
            f"/api/v2/conversations/messages/{conv.id}/communications/{agent.communication.id}/messages"
        ),
        json={"textBody": "too late"},
        headers=genesys.auth,
    )
    assert sent.status_code == 400


async def test_admin_seeds_conversations_and_validates(genesys: Genesys) -> None:
    admin = genesys.sim.urls["admin"]
    r = await genesys.http.post(
        admin + "/conversations", json={"agentUserId": "u-1", "attributes": {"a": "b"}}
    )
    assert r.status_code == 201
    body = r.json()
    assert genesys.sim.state.conversations.get(body["id"]) is not None
    agent = next(p for p in body["participants"] if p["purpose"] == "agent")
    assert agent["userId"] == "u-1"
    listed = (await genesys.http.get(admin + "/conversations")).json()["conversations"]
    assert [c["id"] for c in listed] == [body["id"]]
    bad = await genesys.http.post(admin + "/conversations", json={"attributes": {"a": 1}})
    assert bad.status_code == 400 and bad.json()["error"].startswith("conversation.attributes:")


@pytest.mark.genesys_sim(GenesysSimConfig(rate_limit=3))
async def test_per_token_rate_limit_answers_429_with_retry_after(genesys: Genesys) -> None:
    await genesys.login()
    url = genesys.api(f"/api/v2/conversations/{seeded(genesys)}")
    for _ in range(3):
        assert (await genesys.http.get(url, headers=genesys.auth)).status_code == 200
    genesys.clock.advance(20)
    r = await genesys.http.get(url, headers=genesys.auth)
    assert r.status_code == 429
    assert r.json()["code"] == "too.many.requests"
    assert r.json()["message"] == "Rate limit exceeded the maximum [3] requests within [60] seconds"
    assert r.headers["Retry-After"] == "40"
    assert r.headers["inin-ratelimit-count"] == "4"
    genesys.clock.advance(40)
    assert (await genesys.http.get(url, headers=genesys.auth)).status_code == 200
    assert genesys.sim.recorder.request_count("GET", CONV, 429) == 1


# -- admin API --------------------------------------------------------------------------------------


async def test_admin_api_faults_and_stats(genesys: Genesys) -> None:
    admin = genesys.sim.urls["admin"]
    r = await genesys.http.post(
        admin + "/faults", json={"kind": "server_error_burst", "params": {"status": 502}}
    )
    assert r.status_code == 201
    fid = r.json()["faults"][0]["id"]
    listed = (await genesys.http.get(admin + "/faults")).json()["faults"]
    assert [f["id"] for f in listed] == [fid]
    assert listed[0]["state"] == "active"
    bad = await genesys.http.post(admin + "/faults", json={"kind": "close", "params": {"code": 1234}})
    assert bad.status_code == 400
    assert bad.json()["error"].startswith("fault.params.code:")
    assert "\n" not in bad.json()["error"]
    junk = await genesys.http.post(admin + "/faults", content=b"{nope")
    assert junk.status_code == 400 and "invalid JSON" in junk.json()["error"]
    assert (await genesys.http.delete(admin + f"/faults/{fid}")).json() == {"cleared": 1}
    assert (await genesys.http.delete(admin + "/faults/f999")).status_code == 404
    await genesys.login()
    stats = (await genesys.http.get(admin + "/stats")).json()
    assert stats["tokens"]["issued"] == 1
    assert (await genesys.http.post(admin + "/stats/reset")).json() == {"reset": True}
    assert (await genesys.http.get(admin + "/stats")).json()["tokens"]["issued"] == 0
    index = (await genesys.http.get(admin + "/")).json()
    assert set(index["urls"]) == {"login", "api", "webmessaging", "streaming", "admin"}


async def test_http_date_retry_after_helper_round_trips(genesys: Genesys) -> None:
    await genesys.login()
    genesys.sim.faults.inject(Fault(kind=FaultKind.RATE_LIMIT_STORM, params={"retry_after": "http-date:30"}))
    r = await genesys.http.get(genesys.api(f"/api/v2/conversations/{conv_id()}"), headers=genesys.auth)
    when = email.utils.parsedate_to_datetime(r.headers["Retry-After"])
    assert when.timestamp() == pytest.approx(genesys.clock.time() + 30, abs=1)


async def test_no_stack_trace_on_garbage(genesys: Genesys) -> None:
    await genesys.login()
    r = await genesys.http.request(
        "POST",
        genesys.api(f"/api/v2/conversations/messages/{conv_id()}/communications/c/messages"),
        content=b"\xff\xfe",
        headers={**genesys.auth, "Content-Type": "application/json"},
    )
    assert r.status_code == 400
    assert "Traceback" not in r.text
    assert isinstance(httpx.Response(200, json=r.json()).json(), dict)
