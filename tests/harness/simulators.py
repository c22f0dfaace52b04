"""The loopback simulators as fixtures: one per kind, configured by a marker; factories for more.

* ``genesys_sim`` / ``cxone_sim``: a :class:`GenesysSimulator` / :class:`CxoneSimulator` serving on
  loopback for the test, closed after it. What it runs with is said by the marker of the same name,
  on the test, its class or its module (the nearest one wins, key by key)::

      pytestmark = pytest.mark.genesys_sim(seed=21)              # the module's simulators

      @pytest.mark.genesys_sim(GenesysSimConfig(max_channels=1))  # this test's configuration
      async def test_...(genesys_sim: GenesysSimulator) -> None: ...

  The marker takes the simulator's config (positional or ``config=``), ``seed`` (default 0) and
  ``fake_clock=True`` to run it on the test's ``clock`` fixture (:mod:`tests.harness.clocks`)
  instead of the system clock (token lifetimes, rate windows and fault schedules then move only when
  the test moves that clock).
* ``start_genesys`` / ``start_cxone``: factories, for a test that needs a simulator configured in its
  body, or more than one: ``sim = await start_genesys(config, seed=9)``; each is closed after the test.
  A test that asserts on what happens when the simulator closes (its log, its sockets' close codes),
  a fixed port, or one simulator per Hypothesis example still opens it in its body
  (``async with GenesysSimulator(...)``): a fixture's would close too late, or once for all examples.
* ``genesys``: the Genesys simulator on the test's fake clock with a plain httpx client and a login
  helper (:class:`Genesys`), for the tests of the simulator and of the transports; the same
  ``genesys_sim`` marker configures it (its seed defaults to 7).
* ``http``: a plain httpx client (10 s timeout).

``tests/unit/test_shared_scaffolding.py`` fails when a test module defines a fixture of its own that
makes a simulator.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from typing import Any, Protocol

import httpx
import pytest

from supervisor.clock import Clock, FakeClock
from supervisor.sim.cxone import CxoneSimConfig, CxoneSimulator
from supervisor.sim.genesys import GenesysSimulator
from supervisor.sim.genesys.config import GenesysSimConfig

__all__ = ["Genesys", "StartCxone", "StartGenesys", "sim_options"]

GENESYS_MARKER = "genesys_sim"
CXONE_MARKER = "cxone_sim"


def pytest_configure(config: pytest.Config) -> None:
    for name, kind in ((GENESYS_MARKER, "GenesysSimConfig"), (CXONE_MARKER, "CxoneSimConfig")):
        config.addinivalue_line(
            "markers",
            f"{name}(config=None, *, seed=0, fake_clock=False): the test's {name} fixture runs with this "
            f"{kind}, seed, and on the `clock` fixture when fake_clock",
        )


class StartGenesys(Protocol):
    def __call__(
        self, config: GenesysSimConfig | None = None, *, seed: int = 0, clock: Clock | None = None
    ) -> Awaitable[GenesysSimulator]: ...


class StartCxone(Protocol):
    def __call__(
        self, config: CxoneSimConfig | None = None, *, seed: int = 0, clock: Clock | None = None
    ) -> Awaitable[CxoneSimulator]: ...


def sim_options(request: pytest.FixtureRequest, marker: str, **defaults: Any) -> dict[str, Any]:
    """The simulator's keyword arguments from ``marker`` on the test, its class and its module (the
    nearest one wins, key by key), over ``defaults``; ``fake_clock`` becomes ``clock=`` the test's
    ``clock`` fixture."""
    options = dict(defaults)
    for mark in reversed(list(request.node.iter_markers(marker))):  # farthest first: nearest wins
        if len(mark.args) > 1:
            raise TypeError(f"@pytest.mark.{marker}: one positional argument (the config), got {mark.args}")
        if mark.args:
            options["config"] = mark.args[0]
        options.update(mark.kwargs)
    unknown = set(options) - {"config", "seed", "fake_clock"}
    if unknown:
        raise TypeError(f"@pytest.mark.{marker}: unknown option(s) {sorted(unknown)}")
    if options.pop("fake_clock", False):
        options["clock"] = request.getfixturevalue("clock")
    return options


@pytest.fixture
async def start_genesys() -> AsyncIterator[StartGenesys]:
    async with contextlib.AsyncExitStack() as stack:

        async def start(
            config: GenesysSimConfig | None = None, *, seed: int = 0, clock: Clock | None = None
        ) -> GenesysSimulator:
            return await stack.enter_async_context(GenesysSimulator(config, seed=seed, clock=clock))

        yield start


@pytest.fixture
async def start_cxone() -> AsyncIterator[StartCxone]:
    async with contextlib.AsyncExitStack() as stack:

        async def start(
            config: CxoneSimConfig | None = None, *, seed: int = 0, clock: Clock | None = None
        ) -> CxoneSimulator:
            return await stack.enter_async_context(CxoneSimulator(config, seed=seed, clock=clock))

        yield start


@pytest.fixture
async def genesys_sim(request: pytest.FixtureRequest, start_genesys: StartGenesys) -> GenesysSimulator:
    """The Genesys simulator the ``genesys_sim`` marker describes (module docstring)."""
    return await start_genesys(**sim_options(request, GENESYS_MARKER))


@pytest.fixture
async def cxone_sim(request: pytest.FixtureRequest, start_cxone: StartCxone) -> CxoneSimulator:
    """The CXone simulator the ``cxone_sim`` marker describes (module docstring)."""
    return await start_cxone(**sim_options(request, CXONE_MARKER))


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=10.0) as client:
        yield client


@dataclass
class Genesys:
    """A running Genesys simulator, its fake clock and a plain httpx client with a token."""

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


@pytest.fixture
async def genesys(
    request: pytest.FixtureRequest, start_genesys: StartGenesys, clock: FakeClock, http: httpx.AsyncClient
) -> Genesys:
    """The Genesys simulator on the test's fake clock, with a plain client (module docstring)."""
    options = sim_options(request, GENESYS_MARKER, seed=7)
    options.pop("clock", None)  # always the test's fake clock: tests advance it, then call sim.tick()
    return Genesys(await start_genesys(**options, clock=clock), clock, http)
