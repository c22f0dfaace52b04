"""The pure parts of CXone's login and discovery (supervisor/rest/cxone_auth.py)."""

from __future__ import annotations

import base64
import json

import pytest

from supervisor.rest.cxone_auth import agent_api_base, jwt_claims


@pytest.mark.parametrize(
    ("api", "base"),
    [
        # cxone-configuration's api_endpoint: a host
        (
            "https://api-na1.niceincontact.com",
            "https://api-na1.niceincontact.com/inContactAPI/services/v23.0/",
        ),
        (
            "https://api-na1.niceincontact.com/",
            "https://api-na1.niceincontact.com/inContactAPI/services/v23.0/",
        ),
        # the legacy resource_server_base_uri form apiUrl used to hold, in either case
        (
            "https://api-c7.incontact.com/inContactAPI/",
            "https://api-c7.incontact.com/inContactAPI/services/v23.0/",
        ),
        ("http://127.0.0.1:8/incontactapi", "http://127.0.0.1:8/inContactAPI/services/v23.0/"),
        # a host that happens to be called so is a host
        ("https://incontactapi", "https://incontactapi/inContactAPI/services/v23.0/"),
        ("https://gw.example/cx", "https://gw.example/cx/inContactAPI/services/v23.0/"),
    ],
)
def test_the_agent_api_base(api: str, base: str) -> None:
    assert agent_api_base(api, "v23.0") == base


def _jwt(payload: bytes) -> str:
    return "e30." + base64.urlsafe_b64encode(payload).rstrip(b"=").decode() + ".sig"


def test_jwt_claims_are_decoded_not_verified() -> None:
    assert jwt_claims(_jwt(json.dumps({"tenantId": "t-1"}).encode())) == {"tenantId": "t-1"}


@pytest.mark.parametrize(
    "token",
    ["", "opaque", "a.b", "a.b.c.d", _jwt(b"[1, 2]"), _jwt(b"not json"), "e30.%%%.x", _jwt(b"[" * 5000)],
)
def test_anything_else_is_no_claims(token: str) -> None:
    assert jwt_claims(token) is None
