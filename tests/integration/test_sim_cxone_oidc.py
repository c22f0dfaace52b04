"""The CXone simulator's login as the real platform answers it (docs/platforms.md), over loopback.

The back-end login is OpenID Connect: the discovery document names the token endpoint, which takes a
form-encoded ``password`` grant (access key id and secret) or ``refresh_token`` grant with the client
authenticated by HTTP Basic or form fields, and answers RFC 6749 section 5.1 plus an ``id_token``
whose ``tenantId`` locates the tenant's API host at ``/.well-known/cxone-configuration``. The regional
``/public/authentication/v1/token`` is a token exchange only (NICE's SDK, ``cxone-auth.js``), answered
in camelCase. Anything else is refused as an OAuth server refuses it (RFC 6749 section 5.2).
"""

from __future__ import annotations

import base64
import json
from typing import Any
from urllib.parse import quote_plus

import httpx
import pytest

from supervisor.sim.cxone import CxoneSimConfig, CxoneSimulator
from supervisor.sim.faults import Fault, FaultKind
from tests.harness.simulators import StartCxone

TOKEN = "/auth/token"
SECRET = "s+cr/t=%2B"  # every character RFC 6749 section 2.3.1's form-encoding changes

pytestmark = [
    pytest.mark.integration,
    pytest.mark.anyio,
    pytest.mark.cxone_sim(
        CxoneSimConfig(
            client_ids=("my-client",), client_secret=SECRET, users=("AKID1",), password="AKSECRET"
        ),
        seed=5,
        fake_clock=True,
    ),
]
FORM = {"Content-Type": "application/x-www-form-urlencoded"}


def basic(client_id: str, secret: str) -> dict[str, str]:
    """RFC 6749 section 2.3.1: each part form-encoded, then Basic."""
    pair = f"{quote_plus(client_id)}:{quote_plus(secret)}"
    return {"Authorization": "Basic " + base64.b64encode(pair.encode()).decode()}


def claims(jwt: str) -> dict[str, Any]:
    payload = jwt.split(".")[1]
    out: dict[str, Any] = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return out


async def login(sim: CxoneSimulator, http: httpx.AsyncClient) -> dict[str, Any]:
    r = await http.post(
        sim.urls["auth"] + TOKEN,
        data={"grant_type": "password", "username": "AKID1", "password": "AKSECRET"},
        headers=basic("my-client", SECRET),
    )
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


async def test_discovery_names_the_token_endpoint(cxone_sim: CxoneSimulator, http: httpx.AsyncClient) -> None:
    r = await http.get(cxone_sim.urls["auth"] + "/.well-known/openid-configuration")
    assert r.status_code == 200
    doc = r.json()
    assert doc["issuer"] == cxone_sim.urls["auth"]
    assert doc["token_endpoint"] == cxone_sim.urls["auth"] + TOKEN
    assert {"password", "refresh_token"} <= set(doc["grant_types_supported"])


async def test_password_grant_answers_oidc_tokens_without_a_resource_base(
    cxone_sim: CxoneSimulator, http: httpx.AsyncClient
) -> None:
    r = await http.post(
        cxone_sim.urls["auth"] + TOKEN,
        content=b"grant_type=password&username=AKID1&password=AKSECRET",
        headers={**FORM, **basic("my-client", SECRET)},
    )
    assert r.status_code == 200, r.text
    assert r.headers["Cache-Control"] == "no-store"
    body = r.json()
    assert set(body) == {"access_token", "token_type", "expires_in", "refresh_token", "id_token"}
    assert body["expires_in"] == 3600
    # the claims NICE's SDK decodes (cxone-user.js setUserDetails) and the tenant discovery needs
    id_claims = claims(body["id_token"])
    assert id_claims["tenantId"] == cxone_sim.tokens.tenant_id
    assert id_claims["iss"] == cxone_sim.urls["auth"] and id_claims["aud"] == "my-client"
    assert {"icAgentId", "icBUId", "icClusterId", "teamId", "name", "given_name", "family_name"} <= set(
        id_claims
    )
    assert id_claims["sub"].startswith("user:")
    assert cxone_sim.recorder.snapshot()["tokens_by_grant"] == {"password": 1}


async def test_client_secret_may_come_as_form_fields(
    cxone_sim: CxoneSimulator, http: httpx.AsyncClient
) -> None:
    r = await http.post(
        cxone_sim.urls["auth"] + TOKEN,
        data={
            "grant_type": "password",
            "username": "AKID1",
            "password": "AKSECRET",
            "client_id": "my-client",
            "client_secret": SECRET,
        },
    )
    assert r.status_code == 200, r.text


@pytest.mark.parametrize(
    ("kwargs", "status", "error"),
    [
        # a JSON body is not the form RFC 6749 section 3.2 requires
        (
            {"json": {"grant_type": "password", "username": "AKID1", "password": "AKSECRET"},
             "headers": basic("my-client", SECRET)},
            400,
            "invalid_request",
        ),
        ({"data": {"grant_type": "password", "username": "AKID1", "password": "AKSECRET"}}, 401, "invalid_client"),
        (
            {"data": {"grant_type": "password", "username": "AKID1", "password": "AKSECRET"},
             "headers": basic("my-client", "wrong")},
            401,
            "invalid_client",
        ),
        (
            {"data": {"grant_type": "password", "username": "AKID1", "password": "AKSECRET",
                      "client_id": "my-client", "client_secret": SECRET},
             "headers": basic("my-client", SECRET)},
            400,
            "invalid_request",
        ),
        (
            {"data": {"grant_type": "password", "username": "AKID1", "password": "nope"},
             "headers": basic("my-client", SECRET)},
            400,
            "invalid_grant",
        ),
        ({"data": {"grant_type": "password", "username": "AKID1"}, "headers": basic("my-client", SECRET)},
         400, "invalid_request"),
        ({"data": {"grant_type": "client_credentials"}, "headers": basic("my-client", SECRET)},
         400, "unsupported_grant_type"),
        ({"data": {"grant_type": "authorization_code", "code": "x"}, "headers": basic("my-client", SECRET)},
         400, "unsupported_grant_type"),
        ({"data": {"username": "AKID1", "password": "AKSECRET"}, "headers": basic("my-client", SECRET)},
         400, "invalid_request"),
    ],
)  # fmt: skip
async def test_refusals_are_rfc_6749_errors(
    cxone_sim: CxoneSimulator, http: httpx.AsyncClient, kwargs: dict[str, Any], status: int, error: str
) -> None:
    r = await http.post(cxone_sim.urls["auth"] + TOKEN, **kwargs)
    assert r.status_code == status, r.text
    assert r.json()["error"] == error and set(r.json()) == {"error", "error_description"}
    if status == 401 and "headers" in kwargs:
        assert r.headers["WWW-Authenticate"] == "Basic"  # the client tried Basic (RFC 6749 section 5.2)
    assert cxone_sim.recorder.tokens()["rejected"] == 1 and cxone_sim.recorder.tokens()["issued"] == 0
    assert SECRET not in r.text and "AKSECRET" not in r.text


async def test_refresh_grant_rotates_and_is_single_use(
    cxone_sim: CxoneSimulator, http: httpx.AsyncClient
) -> None:
    first = await login(cxone_sim, http)
    url = cxone_sim.urls["auth"] + TOKEN
    form = {"grant_type": "refresh_token", "refresh_token": first["refresh_token"], "scope": "openid"}
    r = await http.post(url, data=form, headers=basic("my-client", SECRET))
    assert r.status_code == 200, r.text
    assert set(r.json()) == {"access_token", "token_type", "expires_in", "refresh_token", "id_token"}
    assert r.json()["access_token"] != first["access_token"]
    again = await http.post(url, data=form, headers=basic("my-client", SECRET))
    assert again.status_code == 400 and again.json()["error"] == "invalid_grant"
    assert cxone_sim.recorder.tokens()["refreshed"] == 1


async def test_nice_sdk_refresh_form_labelled_json_is_answered(
    cxone_sim: CxoneSimulator, http: httpx.AsyncClient
) -> None:
    """cxone-auth.js getRefreshToken posts `grant_type=refresh_token&scope=openid&refresh_token=…` as text
    under initHeader's `Content-Type: application/json`: the body is read as the form it is. (NICE's
    browser client is public and authenticates no client on refresh; the simulator's clients are
    confidential, so the client rides in the form here.)"""
    first = await login(cxone_sim, http)
    text = f"grant_type=refresh_token&scope=openid&refresh_token={first['refresh_token']}"
    r = await http.post(
        cxone_sim.urls["auth"] + TOKEN,
        content=(text + f"&client_id=my-client&client_secret={quote_plus(SECRET)}").encode(),
        headers={"Content-Type": "application/json"},
    )
    assert r.status_code == 200, r.text


async def test_refresh_refusals(cxone_sim: CxoneSimulator, http: httpx.AsyncClient) -> None:
    first = await login(cxone_sim, http)
    url = cxone_sim.urls["auth"] + TOKEN
    wider = await http.post(
        url,
        data={"grant_type": "refresh_token", "refresh_token": first["refresh_token"], "scope": "openid root"},
        headers=basic("my-client", SECRET),
    )
    assert wider.status_code == 400 and wider.json()["error"] == "invalid_scope"
    missing = await http.post(url, data={"grant_type": "refresh_token"}, headers=basic("my-client", SECRET))
    assert missing.status_code == 400 and missing.json()["error"] == "invalid_request"
    unknown = await http.post(
        url, data={"grant_type": "refresh_token", "refresh_token": "nope"}, headers=basic("my-client", SECRET)
    )
    assert unknown.status_code == 400 and unknown.json()["error"] == "invalid_grant"


async def test_a_refresh_token_is_the_clients_own(http: httpx.AsyncClient, start_cxone: StartCxone) -> None:
    sim = await start_cxone(seed=1)
    r = await http.post(
        sim.urls["auth"] + TOKEN,
        data={"grant_type": "password", "username": "u", "password": "p"},
        headers=basic("one", "s"),
    )
    other = await http.post(
        sim.urls["auth"] + TOKEN,
        data={"grant_type": "refresh_token", "refresh_token": r.json()["refresh_token"]},
        headers=basic("another", "s"),
    )
    assert other.status_code == 400 and other.json()["error"] == "invalid_grant"


async def test_cxone_configuration_needs_the_tokens_tenant(
    cxone_sim: CxoneSimulator, http: httpx.AsyncClient
) -> None:
    tenant = claims((await login(cxone_sim, http))["id_token"])["tenantId"]
    url = cxone_sim.urls["auth"] + "/.well-known/cxone-configuration"
    r = await http.get(url, params={"tenantId": tenant})
    assert r.status_code == 200
    body = r.json()
    assert body["api_endpoint"] == cxone_sim.urls["api"]
    # cxone-configuration.js parseData reads these too
    assert {"area", "cluster", "domain", "acdDomain", "uhDomain"} <= set(body)
    missing = await http.get(url)
    assert missing.status_code == 400 and missing.json()["error"] == "invalid_request"
    other = await http.get(url, params={"tenantId": "11e85da0-f32c-7e10-898c-0242ac110003"})
    assert other.status_code == 404


async def test_faults_reach_the_oidc_routes(cxone_sim: CxoneSimulator, http: httpx.AsyncClient) -> None:
    """MISSING_FIELDS strips a discovery answer's api_endpoint; an endpoint pattern names /auth/token."""
    token = await login(cxone_sim, http)
    tenant = claims(token["id_token"])["tenantId"]
    cxone_sim.faults.inject(
        Fault(
            kind=FaultKind.MISSING_FIELDS,
            endpoint="*cxone-configuration",
            params={"fields": ["api_endpoint"]},
        )
    )
    cxone_sim.faults.inject(Fault(kind=FaultKind.SERVER_ERROR_BURST, endpoint="POST */auth/token", count=1))
    conf = await http.get(
        cxone_sim.urls["auth"] + "/.well-known/cxone-configuration", params={"tenantId": tenant}
    )
    assert conf.status_code == 200 and "api_endpoint" not in conf.json() and "area" in conf.json()
    r = await http.post(
        cxone_sim.urls["auth"] + TOKEN,
        data={"grant_type": "password", "username": "AKID1", "password": "AKSECRET"},
        headers=basic("my-client", SECRET),
    )
    assert r.status_code >= 500
    assert cxone_sim.recorder.request_count("POST", TOKEN, r.status_code) == 1


async def test_the_api_answers_the_oidc_token_at_the_discovered_host(
    cxone_sim: CxoneSimulator, http: httpx.AsyncClient
) -> None:
    token = await login(cxone_sim, http)
    tenant = claims(token["id_token"])["tenantId"]
    conf = (
        await http.get(
            cxone_sim.urls["auth"] + "/.well-known/cxone-configuration", params={"tenantId": tenant}
        )
    ).json()
    r = await http.post(
        conf["api_endpoint"] + "/inContactAPI/services/v23.0/agent-sessions",
        json={"stationPhoneNumber": "5551234"},
        headers={"Authorization": f"Bearer {token['access_token']}"},
    )
    assert r.status_code == 202, r.text


# ------------------------------------------------------------------ the regional v1 token service


async def test_v1_token_is_a_token_exchange_answered_in_camel_case(
    cxone_sim: CxoneSimulator, http: httpx.AsyncClient
) -> None:
    token = await login(cxone_sim, http)
    regional = {"Authorization": "Basic " + base64.b64encode(b"my-client@cxone").decode()}
    r = await http.post(
        cxone_sim.urls["auth"] + "/public/authentication/v1/token",
        json={"accessToken": token["access_token"]},
        headers=regional,
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) == {"accessToken", "accessTokenExpiry", "refreshToken"}
    assert body["accessTokenExpiry"] == 3600
    r = await http.post(
        cxone_sim.urls["auth"] + "/public/authentication/v1/refresh",
        json={"token": body["refreshToken"]},
        headers=regional,
    )
    assert r.status_code == 200 and set(r.json()) == {"accessToken", "accessTokenExpiry", "refreshToken"}
    no_basic = await http.post(
        cxone_sim.urls["auth"] + "/public/authentication/v1/refresh", json={"token": "x"}
    )
    assert no_basic.status_code == 401 and no_basic.json()["error"] == "invalid_client"


@pytest.mark.parametrize(
    "kwargs",
    [
        # what the daemon used to send: a JSON password grant with the client in the body
        {"json": {"grant_type": "password", "client_id": "my-client", "client_secret": SECRET,
                  "username": "AKID1", "password": "AKSECRET"}},
        {"json": {"grant_type": "client_credentials"}, "headers": basic("my-client", SECRET)},
        {"data": {"grant_type": "password", "username": "AKID1", "password": "AKSECRET"},
         "headers": {"Authorization": "Basic " + base64.b64encode(b"my-client@cxone").decode()}},
    ],
)  # fmt: skip
async def test_v1_token_refuses_any_login(
    cxone_sim: CxoneSimulator, http: httpx.AsyncClient, kwargs: dict[str, Any]
) -> None:
    r = await http.post(cxone_sim.urls["auth"] + "/public/authentication/v1/token", **kwargs)
    assert r.status_code in (400, 401), r.text
    assert r.json()["error"] in ("invalid_request", "invalid_client")
    assert cxone_sim.recorder.tokens()["issued"] == 0
