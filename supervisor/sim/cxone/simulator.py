"""The CXone simulator: three loopback listeners (``auth``, ``api``, ``admin``) in one object.

::

    async with CxoneSimulator(CxoneSimConfig(max_age_s=2), seed=7) as sim:
        sim.urls        # {"auth": "http://127.0.0.1:P", "api": "http://127.0.0.1:Q", "admin": ...}
        sim.faults.inject(Fault(kind=FaultKind.QUEUE_FULL, count=1))
        sim.push_contact(agent_id="100001")
        sim.recorder.request_count(status=304)

Binding: ``port=0`` picks free ports; ``port=P`` binds P, P+1, P+2 for auth, api, admin
(in that order). Time comes from ``clock`` (token lifetimes, inactivity, fault schedules);
long polls wait in real time, on an event, for at most the request's ``timeout``.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from types import TracebackType

from aiohttp import web

from supervisor.clock import Clock, SystemClock
from supervisor.errors import SimulatorError
from supervisor.sim import serving
from supervisor.sim.activity import ActivityLog, http_middleware
from supervisor.sim.admin import make_admin_app
from supervisor.sim.cxone import api, auth
from supervisor.sim.cxone.admin_routes import admin_routes
from supervisor.sim.cxone.config import CxoneSimConfig
from supervisor.sim.cxone.context import CONTEXT_KEY, CxoneContext
from supervisor.sim.cxone.gate import FaultGate, FaultWaker
from supervisor.sim.cxone.pipeline import KeyOf, make_middleware
from supervisor.sim.cxone.state import AgentSession, Contact, EndReason, Event, SessionStore
from supervisor.sim.cxone.tokens import TokenStore
from supervisor.sim.faults import FaultController
from supervisor.sim.recorder import Recorder

#: listener names, in port order (``--port P`` binds P, P+1, P+2)
LISTENERS = ("auth", "api", "admin")


class CxoneSimulator:
    """A NICE CXone fake (docs/platforms.md, "NICE CXone") with fault injection and a recorder.

    Attributes:
        config: the :class:`CxoneSimConfig` in force.
        urls: ``{"auth", "api", "admin"}`` base URLs, filled by :meth:`start`.
        faults: the shared :class:`~supervisor.sim.faults.FaultController` (Python fault API).
        recorder: the shared :class:`~supervisor.sim.recorder.Recorder` (what the simulator saw).
        activity: the :class:`~supervisor.sim.activity.ActivityLog` (who did what when; ``GET {admin}/activity``).
        state: the :class:`~supervisor.sim.cxone.state.SessionStore` (agent sessions, events).
        tokens: the :class:`~supervisor.sim.cxone.tokens.TokenStore`.
        gate: the :class:`~supervisor.sim.cxone.gate.FaultGate` (per-kind default error bodies).
    """

    def __init__(
        self,
        config: CxoneSimConfig | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        seed: int = 0,
        clock: Clock | None = None,
    ) -> None:
        self.config = config if config is not None else CxoneSimConfig()
        self.host = host
        self.port = port
        self.clock: Clock = clock if clock is not None else SystemClock()
        rng = random.Random(seed)
        self.faults = FaultController(self.clock, seed)
        self.recorder = Recorder(self.clock)
        self.activity = ActivityLog(self.clock, self.config.activity_capacity)
        self.tokens = TokenStore(
            self.clock,
            random.Random(rng.getrandbits(64)),
            first_agent_id=self.config.first_agent_id,
            bus_no=self.config.bus_no,
            team_id=self.config.team_id,
            early_expiry_s=self.config.token_early_expiry_s,
        )
        self._api_app: web.Application | None = None
        self.state = SessionStore(
            self.clock,
            random.Random(rng.getrandbits(64)),
            default_inactivity_timeout=self.config.inactivity_timeout_s,
            on_change=self._on_change,
        )
        self.urls: dict[str, str] = {}
        self._waker: FaultWaker | None = None
        self._listeners: list[serving.Listener] = []
        self._ticker: asyncio.Task[None] | None = None
        self._ctx: CxoneContext | None = None

    # ------------------------------------------------------------------ lifecycle
    @property
    def gate(self) -> FaultGate:
        """The fault gate (exists once started)."""
        if self._ctx is None:
            raise SimulatorError("the CXone simulator is not started")
        return self._ctx.gate

    async def start(self) -> dict[str, str]:
        """Bind and serve the three listeners; returns :attr:`urls`.

        Raises:
            SimulatorError: already started, or a port could not be bound.
        """
        if self._listeners:
            raise SimulatorError("the CXone simulator is already started")
        socks = serving.bind_sockets(self.host, self.port, LISTENERS)
        for name, sock in socks.items():
            host, port = sock.getsockname()[:2]
            self.urls[name] = serving.format_url("http", str(host), int(port))
        self.tokens.issuer = self.urls["auth"]
        self._waker = FaultWaker(self.faults)
        gate = FaultGate(self.faults, self.recorder, self.clock, self._waker)
        ctx = CxoneContext(
            config=self.config,
            clock=self.clock,
            tokens=self.tokens,
            sessions=self.state,
            faults=self.faults,
            recorder=self.recorder,
            gate=gate,
            urls=self.urls,
        )
        self._ctx = ctx
        auth.install_token_faults(ctx)
        apps = {
            "auth": self._app("auth", ctx, auth.add_routes, auth.auth_key_of, self.activity),
            "api": self._app("api", ctx, api.add_routes, api.api_key_of, self.activity),
            "admin": make_admin_app(
                self.faults,
                self.recorder,
                name="cxone",
                urls=dict(self.urls),
                routes=admin_routes(self.set_agent_state),
                activity=self.activity,
            ),
        }
        self._api_app = apps["api"]
        try:
            for name in LISTENERS:
                listener = await serving.serve_aiohttp(
                    name, apps[name], socks[name], read_timeout_s=self.config.read_timeout_s
                )
                self._listeners.append(listener)
                del socks[name]  # owned by its runner now
        except BaseException:
            for sock in socks.values():
                sock.close()
            await self.close()
            raise
        self._ticker = asyncio.create_task(self.faults.run(), name="cxone-sim-faults")
        return dict(self.urls)

    @staticmethod
    def _app(
        listener: str,
        ctx: CxoneContext,
        add_routes: object,
        key_of: KeyOf,
        activity: ActivityLog,
    ) -> web.Application:
        # the activity middleware outside the pipeline: it records the status the client gets
        middlewares = [http_middleware(activity, listener), make_middleware(listener, ctx, key_of)]
        app = web.Application(client_max_size=256 * 1024, middlewares=middlewares)
        app[CONTEXT_KEY] = ctx
        assert callable(add_routes)
        add_routes(app)
        return app

    async def close(self) -> None:
        """Release held requests, stop the fault ticker and every listener. Idempotent."""
        if self._waker is not None:
            self._waker.close()
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
            self._ticker = None
        listeners, self._listeners = self._listeners, []
        await serving.close_all(listeners)

    async def __aenter__(self) -> CxoneSimulator:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    def _on_change(self, handle_key: str) -> None:
        if self._api_app is not None:
            api.wake_handle(self._api_app, handle_key)

    # ------------------------------------------------------------ test helpers
    def session_of(self, agent_id: str | int) -> AgentSession | None:
        """The agent's live session, if any."""
        return self.state.session_for_agent(str(agent_id))

    def push_contact(
        self,
        *,
        agent_id: str | int | None = None,
        session_key: str | None = None,
        ani: str = "5551230000",
        dnis: str = "5559870000",
        skill: str = "1001",
    ) -> Contact:
        """Route an inbound call to an agent's live session: a ``CallContactEvent`` (Incoming) for every
        poller. Name the session by ``agent_id`` or by its key (the first sessionId).

        Raises:
            SimulatorError: no such live session.
        """
        key = session_key or self._key_for(agent_id)
        return self.state.push_contact(key, ani=ani, dnis=dnis, skill=skill)

    def push_event(
        self, event: Event, *, agent_id: str | int | None = None, session_key: str | None = None
    ) -> None:
        """Queue any event dict on a session (PascalCase keys, string values)."""
        self.state.push_event(session_key or self._key_for(agent_id), event)

    def set_agent_state(self, agent_id: str | int, state: str, reason: str = "") -> AgentSession:
        """Change an agent's state as ``POST agent-sessions/{sessionId}/state`` does (a supervisor or
        the agent's own desktop did it): the ``AgentState`` event follows on every poller.

        Raises:
            SimulatorError: no live session for the agent; SimStateError (400) for a state other
            than Available / Unavailable.
        """
        return self.state.set_state(self._key_for(agent_id), state, reason)

    def end_session(self, *, agent_id: str | int | None = None, session_key: str | None = None) -> None:
        """End a session from the platform side: the next poll gets AgentSessionEnd, then 409."""
        self.state.end(session_key or self._key_for(agent_id), EndReason.FORCED)

    def expire_tokens(self) -> int:
        """Expire every live token now (refresh tokens keep working); returns how many."""
        return self.tokens.expire_all()

    def revoke_tokens(self) -> int:
        """Revoke every live token and its refresh token; returns how many."""
        return self.tokens.revoke_all()

    def _key_for(self, agent_id: str | int | None) -> str:
        if agent_id is None:
            raise SimulatorError("name the session: agent_id= or session_key=")
        session = self.session_of(agent_id)
        if session is None:
            raise SimulatorError(f"agent {agent_id}: no live CXone session")
        return session.key
