"""A loopback simulator of Genesys Cloud with fault injection (docs/simulators.md).

::

    async with GenesysSimulator(GenesysSimConfig(), host="127.0.0.1", port=0, seed=1) as sim:
        sim.urls      # {"login": "http://127.0.0.1:P", "api": "http://..", "webmessaging": "ws://..",
                      #  "streaming": "ws://..", "admin": "http://.."}
        sim.faults    # FaultController: sim.faults.inject(Fault(kind=FaultKind.DROP)) / .clear() / .active()
        sim.recorder  # Recorder: what the simulator saw (also GET {admin}/stats)
        sim.activity  # ActivityLog: who did what when (also GET {admin}/activity)

Listeners mirror the real hosts (docs/platforms.md, "Genesys Cloud Web Messaging", "Genesys Cloud notifications", "Genesys Cloud Platform REST"): ``login`` (``POST /oauth/token``), ``api``
(``/api/v2/...``), ``webmessaging`` (``/v1?deploymentId=``), ``streaming`` (``/channels/{id}``),
and ``admin`` (faults and stats, :mod:`supervisor.sim.admin`). With ``port=0`` each binds a free
port; with ``port=P`` they bind P, P+1, P+2, P+3, P+4 in that key order.

Everything time-dependent reads the injected ``clock`` (token lifetimes, rate windows, fault
schedules, channel and session expiry); heartbeats and the socket_closing lead are real-time
waits (wire traffic). Ids and tokens come from ``random.Random(seed)``. Call :meth:`tick` after
advancing a :class:`~supervisor.clock.FakeClock` to apply scheduled faults and expiries at once
(a background task also does it every 50 ms).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from types import TracebackType
from typing import Any

from supervisor.clock import Clock, SystemClock
from supervisor.errors import SimulatorError
from supervisor.sim.activity import ActivityLog, http_middleware
from supervisor.sim.admin import make_admin_app
from supervisor.sim.faults import FaultController
from supervisor.sim.genesys.config import GenesysSimConfig, load_config
from supervisor.sim.genesys.context import FaultGate, SimContext
from supervisor.sim.genesys.conversation_routes import CONVERSATION_ROUTES, disconnect
from supervisor.sim.genesys.conversations import Conversation
from supervisor.sim.genesys.guest import MESSAGES_ROUTE, guest_messages
from supervisor.sim.genesys.notifications import CHANNEL_ROUTES, NotificationsHub
from supervisor.sim.genesys.oauth import make_login_app
from supervisor.sim.genesys.rest import make_api_app
from supervisor.sim.genesys.seeding import admin_routes
from supervisor.sim.genesys.state import GenesysState
from supervisor.sim.genesys.webmessaging import WebMessagingServer
from supervisor.sim.recorder import Recorder
from supervisor.sim.serving import (
    Listener,
    bind_sockets,
    close_all,
    format_url,
    serve_aiohttp,
    serve_websockets,
)

__all__ = ["LISTENERS", "GenesysSimConfig", "GenesysSimulator", "load_config"]

#: listener keys, in port order
LISTENERS: tuple[str, ...] = ("login", "api", "webmessaging", "streaming", "admin")
_TICK_S = 0.05


class GenesysSimulator:
    """The Genesys Cloud simulator: five listeners in one asyncio loop (see the module docstring)."""

    def __init__(
        self,
        config: GenesysSimConfig | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        seed: int = 0,
        clock: Clock | None = None,
    ) -> None:
        self.config = config if config is not None else GenesysSimConfig()
        self.host = host
        self.port = port
        self.seed = seed
        self.clock: Clock = clock if clock is not None else SystemClock()
        rng = random.Random(seed)
        self.faults = FaultController(self.clock, seed=seed)
        self.recorder = Recorder(self.clock)
        self.state = GenesysState(self.config, self.clock, rng)
        gate = FaultGate(self.faults, self.recorder, self.clock)
        self.ctx = SimContext(self.config, self.clock, rng, self.state, self.faults, self.recorder, gate)
        self.activity = self.ctx.activity = ActivityLog(self.clock, self.config.activity_capacity)
        self.webmessaging = WebMessagingServer(self.ctx)
        self.notifications = NotificationsHub(self.ctx)
        self.urls: dict[str, str] = {}
        self._listeners: list[Listener] = []
        self._tasks: list[asyncio.Task[None]] = []

    # -- lifecycle ----------------------------------------------------------------------------------

    async def start(self) -> GenesysSimulator:
        """Bind and serve every listener; raises :class:`SimulatorError` when a port is taken."""
        if self._listeners:
            raise SimulatorError("the simulator is already started")
        socks = bind_sockets(self.host, self.port, LISTENERS)
        try:
            ws_options: dict[str, Any] = {
                "ping_interval": self.config.ws_ping_interval_s,
                "compression": "deflate" if self.config.compression else None,
                "max_size": self.config.ws_max_size,
                "close_timeout": 5,
            }
            # URLs first: channel connectUris point at the streaming listener
            for name, sock in socks.items():
                host, port = sock.getsockname()[:2]
                scheme = "ws" if name in ("webmessaging", "streaming") else "http"
                self.urls[name] = format_url(scheme, str(host), int(port))
            self.ctx.urls = dict(self.urls)
            timeout = self.config.read_timeout_s
            login = make_login_app(self.ctx)
            login.middlewares.insert(0, http_middleware(self.activity, "login"))
            self._listeners.append(
                await serve_aiohttp("login", login, socks["login"], read_timeout_s=timeout)
            )
            api = make_api_app(self.ctx, [*CONVERSATION_ROUTES, *CHANNEL_ROUTES])
            api.router.add_get(MESSAGES_ROUTE, guest_messages)
            api.middlewares.insert(0, http_middleware(self.activity, "api"))
            self._listeners.append(await serve_aiohttp("api", api, socks["api"], read_timeout_s=timeout))
            wm = self.webmessaging
            self._listeners.append(
                await serve_websockets(
                    "webmessaging",
                    wm.handler,
                    socks["webmessaging"],
                    process_request=wm.process_request,
                    **ws_options,
                )
            )
            hub = self.notifications
            self._listeners.append(
                await serve_websockets(
                    "streaming",
                    hub.handler,
                    socks["streaming"],
                    process_request=hub.process_request,
                    **ws_options,
                )
            )
            admin = make_admin_app(
                self.faults,
                self.recorder,
                name="genesys",
                urls=self.urls,
                routes=admin_routes(self.ctx, self.publish),
                activity=self.activity,
            )
            self._listeners.append(
                await serve_aiohttp("admin", admin, socks["admin"], read_timeout_s=timeout)
            )
        except BaseException:
            await close_all(self._listeners)
            self._listeners.clear()
            for sock in socks.values():
                sock.close()
            raise
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._ticker()), loop.create_task(hub.run_heartbeats())]
        return self

    async def close(self) -> None:
        """Stop every listener and background task; idempotent."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        await self.webmessaging.listener.close_all()
        await self.notifications.listener.close_all()
        await close_all(self._listeners)
        self._listeners.clear()

    async def __aenter__(self) -> GenesysSimulator:
        return await self.start()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def _ticker(self) -> None:
        while True:
            with contextlib.suppress(Exception):
                self.tick()
            await asyncio.sleep(_TICK_S)

    # -- Python API for tests and the demo ------------------------------------------------------------

    def rotate_client_secret(self, client_id: str, secret: str) -> None:
        """The platform's administrator gives an OAuth client a new secret: from now on ``POST
        /oauth/token`` accepts only ``secret`` for ``client_id`` (``clients`` then restricts the
        simulator to the clients it names). Tokens issued before stay valid until they expire [I:
        Genesys documents no revocation of a client's tokens when its secret changes]."""
        # ``clients`` is the simulator's account store: the config is frozen, its table is not
        self.config.clients[client_id] = secret

    def tick(self) -> None:
        """Apply due fault schedules and expiries now (after advancing a FakeClock)."""
        self.faults.fire_due()
        self.notifications.sweep()
        self.webmessaging.sweep()

    def heartbeat(self) -> int:
        """Send one notifications heartbeat now; returns the number of sockets."""
        return self.notifications.heartbeat()

    def publish(self, topic: str, body: dict[str, Any], correlation_id: str | None = None) -> int:
        """Send a notifications event to the sockets subscribed to ``topic``; returns how many."""
        return self.notifications.publish(topic, body, correlation_id)

    def system_message(
        self, channel_id: str, kind: str, *, reason: str | None = None, topics: list[str] | None = None
    ) -> bool:
        """Send ``v2.system.<kind>`` (``no_longer_subscribed``, ``subscription_changed``,
        ``token_revoked``) to a channel's socket with its effect, as a SYSTEM_TOPIC fault does."""
        return self.notifications.system_message(channel_id, kind, reason=reason, topics=topics)

    def create_conversation(
        self, *, agent_user_id: str | None = None, attributes: dict[str, str] | None = None
    ) -> Conversation:
        """A new conversation (customer and agent connected), as ``POST {admin}/conversations`` makes."""
        return self.state.conversations.create(agent_user_id=agent_user_id, attributes=attributes)

    def conversation_of(self, guest_token: str) -> Conversation | None:
        """The conversation of a Web Messaging guest session (a guest cannot learn it: docs/taxonomy.md)."""
        sess = self.state.sessions.get(guest_token)
        return self.state.conversations.get(sess.conversation_id) if sess is not None else None

    async def end_conversation(self, conversation_id: str) -> bool:
        """The agent disconnects, as ``PATCH .../participants/{agent} {"state":"disconnected"}`` does:
        the guest gets a Presence Disconnect (read-only by default). False when unknown or already ended."""
        conv = self.state.conversations.get(conversation_id)
        if conv is None:
            return False
        return await disconnect(self.ctx, conv, conv.agent(), "client")

    def ready_line(self) -> dict[str, str]:
        """The URLs keyed login, api, webmessaging, streaming, admin (the CLI prints this as JSON)."""
        return {name: self.urls[name] for name in LISTENERS}
