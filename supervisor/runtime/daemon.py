"""The supervisor: every configured session, under one anyio task group.

``Supervisor`` builds what the sessions share (one httpx client per platform with
transport retries at 0, one token cache per credential, one request pipeline per
platform, one circuit per endpoint, the event bus) and one :class:`SessionRunner` per
configured session. :func:`serve_until_signalled` is the foreground lifecycle of
``session-supervisor run``: SIGTERM/SIGINT stop intake, close sessions with 1001, wait a
bounded grace period, and return; a second signal forces the exit.
"""

from __future__ import annotations

import random
import signal
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import anyio
import httpx
from anyio.abc import TaskGroup

from machines.circuit import CircuitConfig
from machines.registry import CircuitRegistry
from machines.session import SessionConfig
from supervisor.boundary import SessionContext
from supervisor.bus import EventBus
from supervisor.clock import Clock, Rng, SystemClock
from supervisor.config import Config, SessionKind, SessionSpec, read_secret
from supervisor.errors import ConfigError, OperationError, SessionError
from supervisor.rest.pipeline import RequestPipeline
from supervisor.rest.tokens import CxoneCredentials, GenesysClientCredentials, TokenCache
from supervisor.runtime.hooks import BusHooks
from supervisor.runtime.session_runner import SessionRunner, Sleep
from supervisor.runtime.store import SessionStore
from supervisor.taxonomy import Channel, Classifier, Platform, SdkErrorEvent, load_taxonomy, resolve_version
from supervisor.transports.base import Transport


class Supervisor:
    """Owns the shared clients and the runners; use as an async context manager."""

    def __init__(
        self,
        config: Config,
        *,
        bus: EventBus | None = None,
        clock: Clock | None = None,
        rng: Rng | None = None,
        config_dir: Path | None = None,
        environ: Mapping[str, str] | None = None,
        sleep: Sleep = anyio.sleep,
    ) -> None:
        import os

        self.config = config
        self.bus = bus if bus is not None else EventBus()
        self.clock: Clock = clock if clock is not None else SystemClock()
        seed = config.daemon.seed
        self.rng: Rng = rng if rng is not None else random.Random(seed)
        self._config_dir = config_dir
        self._environ = environ if environ is not None else os.environ
        self._sleep = sleep
        self.taxonomy = load_taxonomy(resolve_version(config.daemon.taxonomy_version, self._environ))
        self.classifier = Classifier(self.taxonomy, self.clock)
        circuit = config.circuit
        self.circuits = CircuitRegistry(
            self.clock,
            CircuitConfig(
                failure_threshold=circuit.failure_threshold,
                window_s=circuit.window,
                open_s=circuit.open_for,
                probe_timeout_s=circuit.probe_timeout,
            ),
            self.rng,
        )
        reconnect = config.reconnect
        self.session_config = SessionConfig(
            first_delay_s=(reconnect.first_delay_min, reconnect.first_delay_max),
            throttle_jitter_s=reconnect.throttle_jitter,
        )
        self.store = SessionStore()
        self.hooks = BusHooks(self.bus)
        self.runners: dict[str, SessionRunner] = {}
        self.tokens: dict[str, TokenCache] = {}
        self.pipelines: dict[str, RequestPipeline] = {}
        self._clients: list[httpx.AsyncClient] = []
        self._done: dict[str, anyio.Event] = {}
        self._accepting = True

    # ------------------------------------------------------------------ resources
    async def __aenter__(self) -> Supervisor:
        try:
            self._build()
        except BaseException:
            # a credential that cannot be read must not leak the clients made before it
            await self.__aexit__(None, None, None)
            raise
        return self

    def _build(self) -> None:
        timeout = httpx.Timeout(self.config.daemon.request_timeout)
        platforms = self.config.platforms
        if platforms.genesys is not None:
            client = self._client(timeout)
            gen = platforms.genesys
            if gen.client_id is not None:
                secret = read_secret(
                    gen.client_secret_file,
                    key="platforms.genesys.clientSecretFile",
                    config_dir=self._config_dir,
                    environ=self._environ,
                )
                if secret is None:
                    raise ConfigError("platforms.genesys.clientSecretFile: required with clientId")
                source = GenesysClientCredentials(client, gen.login_url, gen.client_id, secret)
                self.tokens["genesys"] = TokenCache(
                    source, self.clock, early_refresh_s=self.config.tokens.early_refresh, name="genesys"
                )
            self.pipelines["genesys"] = self._pipeline(client, self.tokens.get("genesys"))
        if platforms.cxone is not None:
            client = self._client(timeout)
            cx = platforms.cxone
            secret = read_secret(
                cx.client_secret_file,
                key="platforms.cxone.clientSecretFile",
                config_dir=self._config_dir,
                environ=self._environ,
            )
            password = read_secret(
                cx.password_file,
                key="platforms.cxone.passwordFile",
                config_dir=self._config_dir,
                environ=self._environ,
            )
            if cx.client_id is None or secret is None:
                raise ConfigError("platforms.cxone: clientId and clientSecretFile are required")
            source_cx = CxoneCredentials(client, cx.auth_url, cx.client_id, secret, cx.username, password)
            self.tokens["cxone"] = TokenCache(
                source_cx, self.clock, early_refresh_s=self.config.tokens.early_refresh, name="cxone"
            )
            self.pipelines["cxone"] = self._pipeline(client, self.tokens["cxone"])

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        with anyio.CancelScope(shield=True):
            for client in self._clients:
                await client.aclose()

    def _client(self, timeout: httpx.Timeout) -> httpx.AsyncClient:
        # design.md "One retry layer": the transport never retries on its own
        transport = httpx.AsyncHTTPTransport(retries=0)
        client = httpx.AsyncClient(timeout=timeout, transport=transport, follow_redirects=False)
        self._clients.append(client)
        return client

    def _pipeline(self, client: httpx.AsyncClient, tokens: TokenCache | None) -> RequestPipeline:
        return RequestPipeline(
            client,
            self.classifier,
            self.circuits,
            self.clock,
            tokens=tokens,
            rng=self.rng,
            hooks=self.hooks,
            sleep=self._sleep,
            refresh_before_retry_s=self.config.tokens.refresh_before_retry,
        )

    # ------------------------------------------------------------------ sessions
    def transport_for(self, spec: SessionSpec) -> tuple[Transport, str]:
        """The transport of one configured session and the circuit its connections go through."""
        platforms = self.config.platforms
        if spec.kind is SessionKind.WEBMESSAGING:
            from supervisor.transports.webmessaging import WebMessagingTransport

            gen = platforms.genesys
            assert gen is not None and gen.webmessaging_url is not None
            ctx = SessionContext(
                spec.id,
                Platform.GENESYS,
                Channel.WEBMESSAGING,
                agent_id=spec.agent_id,
                conversation_id=spec.conversation_id,
            )
            deployment = spec.deployment_id or gen.deployment_id
            assert deployment is not None
            wm = WebMessagingTransport(
                ctx, url=gen.webmessaging_url, deployment_id=deployment, keepalive=gen.keepalive
            )
            return wm, "genesys:webmessaging"
        if spec.kind is SessionKind.NOTIFICATIONS:
            from supervisor.transports.notifications import NotificationsTransport

            gen = platforms.genesys
            assert gen is not None
            ctx = SessionContext(spec.id, Platform.GENESYS, Channel.NOTIFICATIONS, agent_id=spec.agent_id)
            topics = [f"v2.users.{spec.agent_id}.conversations"] if spec.agent_id else ["v2.system.heartbeat"]
            nt = NotificationsTransport(
                ctx,
                pipeline=self.pipelines["genesys"],
                api_url=gen.api_url,
                topics=topics,
                keepalive=gen.keepalive,
            )
            return nt, "genesys:streaming"
        from supervisor.transports.cxone import AgentSessionTransport

        cx = platforms.cxone
        assert cx is not None
        ctx = SessionContext(spec.id, Platform.CXONE, Channel.AGENT_SESSION, agent_id=spec.agent_id)
        at = AgentSessionTransport(
            ctx,
            pipeline=self.pipelines["cxone"],
            api_base=cx.api_url,
            api_version=cx.api_version,
            station_id=spec.station_id,
            station_phone_number=spec.station_phone_number,
            poll_timeout=cx.poll_timeout,
            poll_watchdog=cx.poll_watchdog,
            clock=self.clock,
            sleep=self._sleep,
        )
        return at, "cxone:agent-sessions"

    def runner_for(self, spec: SessionSpec) -> SessionRunner:
        transport, circuit = self.transport_for(spec)
        # the platform credential's cache: REST calls made for the session use it, so a
        # fail-fast revokes it too (the next user re-authenticates once, single-flight)
        tokens = self.tokens.get(spec.platform)
        runner = SessionRunner(
            transport,
            classifier=self.classifier,
            circuit=self.circuits.get(circuit),
            bus=self.bus,
            clock=self.clock,
            rng=self.rng,
            store=self.store,
            tokens=tokens,
            config=self.session_config,
            sleep=self._sleep,
        )
        self.runners[spec.id] = runner
        return runner

    def start(self, tg: TaskGroup, spec: SessionSpec) -> SessionRunner:
        """Start supervising one session (a new machine: a full authentication cycle)."""
        if not self._accepting:
            raise ConfigError(f"sessions[{spec.id}]: the supervisor is shutting down")
        previous = self.runners.get(spec.id)
        if previous is not None and not previous.core.terminated:
            raise ConfigError(f"session '{spec.id}' is already supervised")
        runner = self.runner_for(spec)
        tg.start_soon(self._run_runner, runner, name=f"session:{spec.id}")
        return runner

    async def _run_runner(self, runner: SessionRunner) -> None:
        done = self._done[runner.session_id] = anyio.Event()
        try:
            await runner.run()
        finally:
            with anyio.CancelScope(shield=True):
                await runner.transport.aclose()
            done.set()

    def start_all(self, tg: TaskGroup) -> None:
        for spec in self.config.sessions:
            self.start(tg, spec)

    async def shutdown(self, grace_s: float) -> None:
        """Stop intake, close every session with 1001 (going away), wait at most ``grace_s``."""
        self._accepting = False
        for runner in self.runners.values():
            await runner.stop(1001)
        # not shielded: a second signal cancels the drain at once (serve_until_signalled)
        with anyio.move_on_after(grace_s):
            for done in list(self._done.values()):
                await done.wait()

    async def request(self, session_id: str, method: str, url: str, **kwargs: Any) -> httpx.Response:
        """A REST call on behalf of a supervised session, through its platform's pipeline.

        A failure that ends the operation is also fed to the session's machine, so a
        fail-fast trigger (409 on message creation, QUEUE_FULL, 401 invalid_token) ends the
        session at once. Raises OperationError or CircuitOpenError to the caller.
        """
        runner = self.runners[session_id]
        if runner.core.terminated:
            raise SessionError(f"session '{session_id}' is terminated; start it again to re-authenticate")
        pipeline = self.pipelines[runner.ctx.platform.value]
        kwargs.setdefault("circuit", f"{runner.ctx.platform.value}:api")
        # the session may be a WebSocket one; this call is REST (it decides the operation's rules)
        kwargs.setdefault("channel", Channel.REST)
        try:
            return await pipeline.request(method, url, ctx=runner.ctx, **kwargs)
        except OperationError as failure:
            if isinstance(failure.event, SdkErrorEvent):
                runner.operation_failed(failure.event)
            raise

    def states(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for runner in self.runners.values():
            key = runner.state.value
            out[key] = out.get(key, 0) + 1
        return out

    def snapshot(self) -> dict[str, Any]:
        return {
            "sessions": len(self.runners),
            "states": self.states(),
            "openCircuits": sorted(
                cid for cid, c in self.circuits.all().items() if c.state.value != "closed"
            ),
            "tokenRefreshes": sum(t.refreshes for t in self.tokens.values()),
        }


async def serve_until_signalled(supervisor: Supervisor, *, grace_s: float) -> bool:
    """Run every session until SIGTERM/SIGINT, then drain; True when a second signal forced the exit."""
    forced = False
    async with anyio.create_task_group() as tg:
        supervisor.start_all(tg)
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for _ in signals:
                supervisor.bus.publish("DAEMON_STOPPING", {"graceS": grace_s})
                async with anyio.create_task_group() as drain:

                    async def force_on_second_signal() -> None:
                        nonlocal forced
                        async for _ in signals:
                            forced = True
                            drain.cancel_scope.cancel()
                            return

                    drain.start_soon(force_on_second_signal)
                    await supervisor.shutdown(grace_s)
                    drain.cancel_scope.cancel()
                break
        tg.cancel_scope.cancel()
    return forced
