"""Fixtures for the integration tests: the anyio backend and a Genesys simulator on loopback.

The simulator runs on a :class:`~supervisor.clock.FakeClock`: tests advance it (then call
``sim.tick()``) for token lifetimes, rate windows and fault schedules; nothing sleeps for a timer.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
import pytest

from supervisor.clock import FakeClock
from supervisor.sim.genesys import GenesysSimulator
from supervisor.sim.genesys.config import GenesysSimConfig


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True, scope="session")
def _no_default_socket_paths() -> Iterator[None]:
    """Daemons started by the tests bind their sockets where a test says, or not at all: never in the
    developer's $XDG_RUNTIME_DIR, where a real daemon may be listening (docs/socket-api.md)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("XDG_RUNTIME_DIR", raising=False)
        yield


@pytest.fixture(autouse=True)
def _lock_files_in_a_temporary_directory(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Daemons started by the tests put their lock file (daemon.lockFile's default, under
    $RUNTIME_DIRECTORY) in a temporary directory of the test's, never in the shared
    /tmp/session-supervisor-<uid>/, where a daemon killed with -9 leaves its file (227 of
    them from test runs). A test that names lockFile or $RUNTIME_DIRECTORY itself still wins."""
    monkeypatch.setenv("RUNTIME_DIRECTORY", str(tmp_path_factory.mktemp("runtime")))


async def wait_until(predicate: Callable[[], bool], limit_s: float = 5.0) -> None:
    """Wait for an event the test cannot await directly (a server-side effect); fail after ``limit_s``."""
    with anyio.fail_after(limit_s):
        while True:
            if predicate():
                return
            await anyio.sleep(0.005)  # polling a server-side effect, not waiting for a timer


@dataclass
class Genesys:
    """A running simulator, its fake clock and a plain httpx client with a token."""

    sim: GenesysSimulator
    clock: FakeClock
    http: httpx.AsyncClient
    token: str = ""

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def api(self, path: str) -> str:
        return self.sim.urls["api"] + path

    async def login(self, client_id: str = "client", secret: str = "secret") -> dict[str, Any]:
        r = await self.http.post(
            self.sim.urls["login"] + "/oauth/token",
            data={"grant_type": "client_credentials"},
            auth=(client_id, secret),
        )
        assert r.status_code == 200, r.text
        body: dict[str, Any] = r.json()
        self.token = body["access_token"]
        return body

    def wm_url(self, deployment: str = "dep-1") -> str:
        return f"{self.sim.urls['webmessaging']}/v1?deploymentId={deployment}&application=test"


def make_config(**overrides: Any) -> GenesysSimConfig:
    return GenesysSimConfig(**overrides)


@pytest.fixture
def sim_config() -> GenesysSimConfig:
    """Override in a module to change the simulator's config."""
    return GenesysSimConfig()


@pytest.fixture
async def genesys(sim_config: GenesysSimConfig) -> AsyncIterator[Genesys]:
    clock = FakeClock(start=1000.0)
    async with (
        GenesysSimulator(sim_config, host="127.0.0.1", port=0, seed=7, clock=clock) as sim,
        httpx.AsyncClient(timeout=10.0) as http,
    ):
        yield Genesys(sim, clock, http)
