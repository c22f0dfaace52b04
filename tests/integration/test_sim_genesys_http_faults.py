"""Genesys simulator, HTTP faults (docs/simulators.md, "Faults"): what the httpx client sees and what was recorded."""

from __future__ import annotations

import json

import anyio
import httpx
import pytest

from supervisor.sim.faults import Fault, FaultKind
from tests.harness.simulators import Genesys
from tests.harness.waits import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

CONV = "/api/v2/conversations/{conversationId}"
ATTRS = "/api/v2/conversations/{conversationId}/participants/{participantId}/attributes"


def cid(g: Genesys) -> str:
    """A conversation that exists: the simulator invents none (docs/taxonomy.md, "What the daemon can and cannot verify"), so each test seeds one."""
    return g.sim.create_conversation().id


async def get_conv(g: Genesys, conversation_id: str) -> httpx.Response:
    return await g.http.get(g.api(f"/api/v2/conversations/{conversation_id}"), headers=g.auth)


async def inject_via_admin(g: Genesys, fault: dict[str, object]) -> str:
    r = await g.http.post(g.sim.urls["admin"] + "/faults", json=fault)
    assert r.status_code == 201, r.text
    fid: str = r.json()["faults"][0]["id"]
    return fid


@pytest.mark.parametrize(
    ("retry_after", "expect"),
    [("5", "5"), ("http-date", "GMT"), (None, None)],
)
async def test_429_storm_retry_after_forms(
    genesys: Genesys, retry_after: str | None, expect: str | None
) -> None:
    await genesys.login()
    fid = await inject_via_admin(
        genesys, {"kind": "rate_limit_storm", "params": {"retry_after": retry_after}}
    )
    r = await get_conv(genesys, cid(genesys))
    assert r.status_code == 429
    assert r.json()["code"] == "too.many.requests"
    if expect is None:
        assert "Retry-After" not in r.headers
    else:
        assert expect in r.headers["Retry-After"]
    assert genesys.sim.recorder.fault_hits(fid) == 1
    assert genesys.sim.recorder.request_count("GET", CONV, 429) == 1


@pytest.mark.parametrize("status", [500, 502, 503, 504])
async def test_5xx_burst_with_count(genesys: Genesys, status: int) -> None:
    await genesys.login()
    fid = await inject_via_admin(
        genesys, {"kind": "server_error_burst", "count": 2, "params": {"status": status}}
    )
    conversation = cid(genesys)
    first, second, third = [await get_conv(genesys, conversation) for _ in range(3)]
    assert [first.status_code, second.status_code, third.status_code] == [status, status, 200]
    assert first.json()["status"] == status
    assert first.json()["code"] in {
        "internal.server.error",
        "bad.gateway",
        "service.unavailable",
        "request.timeout",
    }
    assert genesys.sim.recorder.fault_hits(fid) == 2
    assert genesys.sim.faults.active() == []  # spent


async def test_latency_fault_is_applied_and_recorded(genesys: Genesys) -> None:
    await genesys.login()
    fault = genesys.sim.faults.inject(
        Fault(kind=FaultKind.LATENCY, params={"latency_ms": 1}, endpoint="GET *")
    )
    assert (await get_conv(genesys, cid(genesys))).status_code == 200
    assert fault.id is not None
    assert genesys.sim.recorder.fault_hits(fault.id) == 1


async def test_blackhole_holds_the_request_until_cleared(genesys: Genesys) -> None:
    await genesys.login()
    fault = genesys.sim.faults.inject(Fault(kind=FaultKind.BLACKHOLE, endpoint=CONV))
    assert fault.id is not None
    fid = fault.id
    result: list[httpx.Response] = []

    async def call() -> None:
        result.append(await get_conv(genesys, cid(genesys)))

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        await wait_until(lambda: genesys.sim.recorder.fault_hits(fid) == 1)
        assert result == []  # held: nothing answered
        genesys.sim.faults.clear(fid)
    assert result[0].status_code == 200


async def test_token_expire_fault_hits_existing_tokens_only(genesys: Genesys) -> None:
    await genesys.login()
    old = genesys.auth
    fid = await inject_via_admin(genesys, {"kind": "token_expire"})
    r = await genesys.http.get(genesys.api(f"/api/v2/conversations/{cid(genesys)}"), headers=old)
    assert r.status_code == 401
    assert r.json()["code"] == "bad.credentials"
    genesys.clock.advance(1)
    await genesys.login()  # a new token works: the fault only expires tokens issued before it
    assert (await get_conv(genesys, cid(genesys))).status_code == 200
    assert genesys.sim.recorder.tokens()["expired"] == 1
    assert genesys.sim.recorder.fault_hits(fid) == 1


async def test_token_revoke_is_invalid_token_and_kills_refresh(genesys: Genesys) -> None:
    body = await genesys.login()
    await inject_via_admin(genesys, {"kind": "token_revoke"})
    r = await get_conv(genesys, cid(genesys))
    assert r.status_code == 401
    assert r.json()["error"] == "invalid_token"
    assert r.json()["code"] == "bad.credentials"
    assert 'error="invalid_token"' in r.headers["WWW-Authenticate"]
    refresh = await genesys.http.post(
        genesys.sim.urls["login"] + "/oauth/token",
        data={"grant_type": "refresh_token", "refresh_token": body["refresh_token"]},
        auth=("client", "secret"),
    )
    assert refresh.status_code == 400
    assert refresh.json()["error"] == "invalid_grant"
    assert genesys.sim.recorder.tokens()["revoked"] == 1


async def test_missing_fields_fault(genesys: Genesys) -> None:
    await genesys.login()
    await inject_via_admin(
        genesys, {"kind": "missing_fields", "params": {"fields": ["state", "participants"]}}
    )
    conversation = cid(genesys)
    body = (await get_conv(genesys, conversation)).json()
    assert "state" not in body and "participants" not in body
    assert body["id"] == conversation


async def test_conversation_drift_fault(genesys: Genesys) -> None:
    await genesys.login()
    mine = cid(genesys)
    await inject_via_admin(genesys, {"kind": "conversation_drift"})
    body = (await get_conv(genesys, mine)).json()
    assert body["id"] != mine  # the conversation resource names another conversation


async def test_malformed_body_fault(genesys: Genesys) -> None:
    await genesys.login()
    await inject_via_admin(genesys, {"kind": "malformed_body", "count": 1})
    r = await get_conv(genesys, cid(genesys))
    assert r.status_code == 200
    with pytest.raises(json.JSONDecodeError):
        json.loads(r.content)


async def test_duplicate_message_fault(genesys: Genesys) -> None:
    await genesys.login()
    fid = await inject_via_admin(genesys, {"kind": "duplicate_message"})
    conv = genesys.sim.create_conversation()
    comm = conv.agent().communication.id
    r = await genesys.http.post(
        genesys.api(f"/api/v2/conversations/messages/{conv.id}/communications/{comm}/messages"),
        json={"textBody": "first time"},
        headers=genesys.auth,
    )
    assert r.status_code == 409
    assert r.json()["code"] == "conflict"
    assert genesys.sim.recorder.fault_hits(fid) == 1


async def test_queue_full_fault(genesys: Genesys) -> None:
    await genesys.login()
    await inject_via_admin(genesys, {"kind": "queue_full", "params": {"retry_after": "2"}})
    r = await get_conv(genesys, cid(genesys))
    assert r.status_code == 429
    assert r.json()["code"] == "QUEUE_FULL"
    assert r.json()["details"] == [{"errorCode": "QUEUE_FULL"}]
    assert r.headers["Retry-After"] == "2"


async def test_silent_drop_of_attribute_updates_after_n(genesys: Genesys) -> None:
    """The seed's edge case 2: 200-class answers, yet updates past the 15th are not persisted."""
    await genesys.login()
    conv = genesys.sim.create_conversation()
    conversation, p1 = conv.id, conv.customer().id
    fid = await inject_via_admin(genesys, {"kind": "silent_drop_attributes", "params": {"after": 15}})
    url = genesys.api(f"/api/v2/conversations/{conversation}/participants/{p1}/attributes")
    statuses = []
    for i in range(20):
        r = await genesys.http.patch(url, json={"attributes": {f"k{i}": "v"}}, headers=genesys.auth)
        statuses.append(r.status_code)
    assert statuses == [202] * 20
    rec = genesys.sim.recorder
    assert set(rec.attributes(conversation)) == {f"k{i}" for i in range(15)}
    assert rec.attributes_dropped(conversation) == 5
    assert rec.fault_hits(fid) == 5
    server = (await get_conv(genesys, conversation)).json()
    stored = next(p for p in server["participants"] if p["id"] == p1)["attributes"]
    assert "k19" not in stored and "k0" in stored


async def test_share_selects_conversations_deterministically(genesys: Genesys) -> None:
    await genesys.login()
    fault = genesys.sim.faults.inject(Fault(kind=FaultKind.SERVER_ERROR_BURST, share=0.5))
    ids = [f"conv-{i}" for i in range(40)]
    expected = {c for c in ids if genesys.sim.faults.selected(fault, c)}
    assert 0 < len(expected) < 40
    failed = set()
    for conversation in ids:
        for _ in range(2):  # the same conversation stays in (or out)
            if (await get_conv(genesys, conversation)).status_code == 503:
                failed.add(conversation)
    assert failed == expected


async def test_scheduled_fault_uses_the_injected_clock(genesys: Genesys) -> None:
    await genesys.login()
    await inject_via_admin(genesys, {"kind": "server_error_burst", "at": 30, "duration_s": 10})
    listed = (await genesys.http.get(genesys.sim.urls["admin"] + "/faults")).json()["faults"]
    assert listed[0]["state"] == "pending"
    conversation = cid(genesys)
    assert (await get_conv(genesys, conversation)).status_code == 200
    genesys.clock.advance(30)
    assert (await get_conv(genesys, conversation)).status_code == 503
    genesys.clock.advance(10)
    assert (await get_conv(genesys, conversation)).status_code == 200
    assert genesys.sim.faults.active() == []


async def test_endpoint_filter_limits_the_fault(genesys: Genesys) -> None:
    await genesys.login()
    await inject_via_admin(genesys, {"kind": "server_error_burst", "endpoint": "PATCH */attributes"})
    conv = genesys.sim.create_conversation()
    conversation = conv.id
    assert (await get_conv(genesys, conversation)).status_code == 200
    r = await genesys.http.patch(
        genesys.api(f"/api/v2/conversations/{conversation}/participants/{conv.customer().id}/attributes"),
        json={"attributes": {"a": "b"}},
        headers=genesys.auth,
    )
    assert r.status_code == 503
    assert genesys.sim.recorder.request_count("PATCH", ATTRS, 503) == 1
