"""The CXone simulator's ``token_early_expiry_s`` (docs/taxonomy.md, "The 401 rule"): a token that stops working a
few seconds before the lifetime it announced, as a platform whose clock runs ahead of ours does."""

from __future__ import annotations

import base64
import json
import random
from pathlib import Path

import msgspec
import pytest

from supervisor.clock import FakeClock
from supervisor.errors import ConfigError
from supervisor.sim.cxone.config import CxoneSimConfig, load_config
from supervisor.sim.cxone.tokens import TokenStatus, TokenStore


def _claims(jwt: str) -> dict[str, int]:
    payload = jwt.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))  # type: ignore[no-any-return]


def test_a_token_stops_working_early_but_announces_its_full_lifetime() -> None:
    clock = FakeClock(start=1000.0)
    store = TokenStore(clock, random.Random(1), early_expiry_s=5.0)
    token = store.issue(client_id="app@vendor", user="u", scope="AgentApi", ttl_s=120.0, refresh_uri="/t")
    claims = _claims(token.access_token)
    assert claims["exp"] - claims["iat"] == 120  # what it announces (with expires_in = ttl, auth.py)
    clock.advance(114.9)
    assert store.check(token.access_token)[0] is TokenStatus.VALID
    clock.advance(0.1)  # 5 s before the announced end
    assert store.check(token.access_token)[0] is TokenStatus.EXPIRED
    # the refresh token still works: the platform expired the access token, it did not revoke it
    assert store.refresh(token.refresh_token, ttl_s=120.0).access_token != token.access_token


def test_by_default_a_token_works_for_exactly_the_lifetime_it_announced() -> None:
    assert CxoneSimConfig().token_early_expiry_s == 0.0
    clock = FakeClock(start=1000.0)
    store = TokenStore(clock, random.Random(1))
    token = store.issue(client_id="app@vendor", user="u", scope="AgentApi", ttl_s=120.0, refresh_uri="/t")
    clock.advance(119.9)
    assert store.check(token.access_token)[0] is TokenStatus.VALID
    clock.advance(0.1)
    assert store.check(token.access_token)[0] is TokenStatus.EXPIRED


@pytest.mark.parametrize("value", [-1.0, 120.0, 500.0])
def test_an_early_expiry_outside_the_lifetime_is_refused(value: float) -> None:
    with pytest.raises(
        msgspec.ValidationError, match="token_early_expiry_s must be >= 0 and less than token_ttl_s"
    ):
        msgspec.convert({"token_ttl_s": 120, "token_early_expiry_s": value}, CxoneSimConfig)


def test_the_config_file_names_the_key_when_it_is_wrong(tmp_path: Path) -> None:
    path = tmp_path / "cxone.toml"
    path.write_text('token_early_expiry_s = "soon"\n')
    with pytest.raises(ConfigError, match=r"cxone.toml: token_early_expiry_s: Expected `float`"):
        load_config(path)
    path.write_text("token_ttl_s = 60\ntoken_early_expiry_s = 3\n")
    assert load_config(path).token_early_expiry_s == 3.0
