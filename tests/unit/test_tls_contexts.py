"""Every HTTP client of the daemon shares one TLS context per trust configuration (a CA bundle is
loaded once, not once per connection pool); the pools stay one per client."""

from __future__ import annotations

import random
import ssl
from typing import Any

import httpx
import pytest

from supervisor.config import parse_config
from supervisor.runtime.tls import TlsContexts
from supervisor.runtime.wiring import SESSIONS_PER_CLIENT, Wiring
from supervisor.taxonomy import Platform

pytestmark = pytest.mark.anyio

SESSIONS = 100

CONFIG = """
[daemon]
seed = 1
[platforms.genesys]
loginUrl = "http://127.0.0.1:9/login"
apiUrl = "http://127.0.0.1:9/api"
webmessagingUrl = "ws://127.0.0.1:9/wm"
deploymentId = "d"
""" + "".join(
    f'[[sessions]]\nid = "wm-{i}"\nplatform = "genesys"\nkind = "webmessaging"\n' for i in range(SESSIONS)
)


def pool_of(client: httpx.AsyncClient) -> Any:
    # httpx keeps its transport and httpcore pool private: read to see what each client really uses
    return getattr(client, "_transport")._pool  # noqa: B009


async def test_the_http_clients_share_one_tls_context_and_keep_their_own_pools() -> None:
    """100 sessions: four clients (one per 32 sessions), four pools, one CA bundle loaded."""
    config = parse_config(CONFIG, "test.toml")
    async with Wiring(config, rng=random.Random(1), environ={}) as wiring:
        clients = [wiring.pipeline_for(Platform.GENESYS, f"wm-{i}").client for i in range(SESSIONS)]
        distinct = {id(c): c for c in clients}.values()
        assert len(distinct) == -(-SESSIONS // SESSIONS_PER_CLIENT) == 4
        pools = {id(pool_of(c)) for c in distinct}
        assert len(pools) == 4
        contexts = {id(pool_of(c)._ssl_context) for c in distinct}
        assert len(contexts) == 1
        assert wiring.tls.made == 1
        # sessions added later get new pools with the same context
        wiring.grow(Platform.GENESYS, 64)
        grown = wiring._clients[Platform.GENESYS]
        assert len(grown) == 6 and len({id(pool_of(c)._ssl_context) for c in grown}) == 1
        assert wiring.tls.made == 1


def test_a_context_per_trust_configuration_and_a_fresh_one_after_forget() -> None:
    environ: dict[str, str] = {}
    tls = TlsContexts(environ)
    first = tls.context()
    # (verification stays on: the same context httpx makes by default)
    assert (
        isinstance(first, ssl.SSLContext) and first.verify_mode is ssl.CERT_REQUIRED and first.check_hostname
    )
    assert tls.context() is first
    tls.forget()
    assert tls.context() is not first and tls.made == 2
