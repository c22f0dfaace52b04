"""Fixtures of the conformance suite: the loopback simulators, driven by the vendors' own clients.

Genesys: ``PureCloudPlatformClientV2`` 269.0.0 (a test-only dependency, pyproject ``test`` extra),
pointed at the simulator in the way that works: the token from ``ApiClient(host=login)``
(``get_client_credentials_token`` posts to ``get_conf_url("login", host)``, which only rewrites
``//api.`` to ``//login.``, so on loopback it is the host itself), then ``client.host = api`` for
every API call. ``Configuration`` is a process-wide singleton, so the host is set per client.
The SDK is synchronous (urllib3): calls run in a worker thread while the simulator serves on the
event loop. CXone: no Python client exists; tests send the requests NICE's agent SDK builds
(``@nice-devone/*`` compiled sources), byte for byte where it matters, with httpx.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, TypeVar

import anyio
import pytest

from tests.harness.simulators import Genesys


class _ImportedAtFirstUse:
    """``PureCloudPlatformClientV2``, imported when a test first uses it: the import takes 5 s of CPU
    (thousands of model modules), which every pytest run paid at collection, the heavy suites' runs
    of one test each included. Installed by the ``test`` extra: a missing SDK fails its tests."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # pytest's look for fixtures and marks in every module global
            raise AttributeError(name)
        return getattr(importlib.import_module("PureCloudPlatformClientV2"), name)


G: Any = _ImportedAtFirstUse()

__all__ = ["G", "sdk"]

T = TypeVar("T")


async def sdk(call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run one blocking SDK call off the event loop the simulator serves on."""
    return await anyio.to_thread.run_sync(lambda: call(*args, **kwargs))


@pytest.fixture
async def api_client(genesys: Genesys) -> Any:
    """A PY269 ApiClient holding a client-credentials token from the simulator, aimed at its API host."""
    client = G.ApiClient(host=genesys.sim.urls["login"])
    await sdk(client.get_client_credentials_token, "conformance-client", "secret")
    client.host = genesys.sim.urls["api"]
    return client
