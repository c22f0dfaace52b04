"""One daemon's telemetry: what the entry points wire in (docs/telemetry.md).

:class:`Telemetry` is wired into the daemon at four points and nowhere else (docs/architecture.md:
nothing calls a tracer from business code): executor hooks, the bus sink, the trace-context provider, the
exporter service. Import it through the package (``from supervisor.telemetry import Telemetry``):
the package checks what the OpenTelemetry SDK reads at import before this module loads it.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import anyio
from anyio.abc import TaskStatus
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.version import __version__ as SDK_VERSION

from machines.registry import Endpoints
from supervisor.config import (
    Config,
    CxoneConfig,
    GenesysConfig,
    SessionKind,
    platform_of,
    read_secret,
    session_table,
    table_key,
    tenant_tables,
)
from supervisor.errors import ConfigError
from supervisor.events import (
    CircuitHalfOpened,
    CircuitOpened,
    CircuitTransition,
    DaemonStopping,
    ErrorClassified,
    Published,
    ReconnectionThrottled,
    RetryAttempt,
    SessionTerminated,
    SessionTransition,
)
from supervisor.rest.hooks import ExecutorHooks
from supervisor.rest.tokens import TokenCache
from supervisor.telemetry import attributes as A
from supervisor.telemetry.circuits import CircuitTracker
from supervisor.telemetry.correlate import TraceContextProvider, session_of
from supervisor.telemetry.export import CloseReport, ExportPipeline
from supervisor.telemetry.metrics import Metrics
from supervisor.telemetry.operations import OperationTracer
from supervisor.telemetry.records import CURRENT
from supervisor.telemetry.sampling import IdSource, Sampler
from supervisor.telemetry.scrub import Scrubber
from supervisor.telemetry.segments import SessionTracker
from supervisor.telemetry.settings import ExportSettings, package_version, resolve_settings
from supervisor.telemetry.spans import SessionShape, SpanFactory
from supervisor.vocabulary import Scope

if TYPE_CHECKING:
    from supervisor.telemetry.prometheus import PrometheusEndpoint

__all__ = ["FLUSH_CAP_S", "Telemetry", "configured_secrets", "shapes_of"]


# docs/robustness.md, "Telemetry": force_flush with ~2 s; a healthy collector takes a few hundred ms for 5,000 spans
FLUSH_CAP_S = 2.0


class Telemetry:
    """One daemon's telemetry: hooks, bus sink, trace-context provider and exporter service."""

    def __init__(
        self,
        settings: ExportSettings,
        *,
        boot_id: str,
        shapes: Mapping[str, SessionShape] | None = None,
        secrets: Sequence[str] = (),
        rng: random.Random | None = None,
    ) -> None:
        self.settings = settings
        version = package_version()
        # built here, not with Resource.create: that merges OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME
        # from the process environment by itself, and the demo promises to ignore the shell's OTEL_*
        # (settings.resource holds what resolve_settings read from the environment it was given)
        self.resource = Resource(
            {
                A.TELEMETRY_SDK_LANGUAGE: "python",
                A.TELEMETRY_SDK_NAME: "opentelemetry",
                **settings.resource,
                A.TELEMETRY_SDK_VERSION: SDK_VERSION,
                A.SERVICE_NAME: settings.service_name,
                A.SERVICE_VERSION: version,
                # the JSON lines' bootId: a restart is a new instance
                A.SERVICE_INSTANCE: boot_id,
            },
            schema_url=A.SCHEMA_URL,
        )
        self.scrubber = Scrubber([*secrets, *settings.secret_values])
        self.pipeline = ExportPipeline(settings, self.resource, self.scrubber)
        ids = IdSource(rng)
        sampler = Sampler(settings.sample_ratio, rng)
        shapes = dict(shapes or {})
        factory = SpanFactory(self.pipeline.processor, self.resource, ids, shapes, version)
        self.sessions = SessionTracker(factory, sampler, ids, shapes)
        self.circuits = CircuitTracker(factory, ids)
        self.operations = OperationTracer(factory, sampler, ids, self.sessions)
        self.tracing = settings.traces_endpoint is not None
        self.metrics = Metrics(
            self.pipeline.meter("session_supervisor.telemetry", version, A.SCHEMA_URL),
            sessions=self.sessions.states,
            circuits=lambda: self.circuits.states,
            segment_attempt=self._segment_attempt,
        )
        self.metrics.count("export", lambda: self.pipeline.export_failures)
        self._stopping: tuple[float, float] | None = None
        self.closed: CloseReport | None = None

    @classmethod
    def from_config(
        cls,
        config: Config,
        *,
        environ: Mapping[str, str],
        boot_id: str,
        config_dir: Path | None = None,
    ) -> Telemetry | None:
        """Telemetry for a daemon configured by ``config``, or None when it is off. Raises ConfigError."""
        settings = resolve_settings(config.telemetry, environ, config_dir=config_dir)
        if settings is None:
            return None
        return cls(
            settings,
            boot_id=boot_id,
            shapes=shapes_of(config),
            secrets=configured_secrets(config, environ=environ, config_dir=config_dir),
        )

    # -- wiring -------------------------------------------------------------------------------------------
    @property
    def hooks(self) -> list[ExecutorHooks]:
        return [self.operations] if self.tracing else []

    @property
    def trace_context(self) -> TraceContextProvider | None:
        if not self.tracing:
            return None
        return TraceContextProvider(self.operations, self.sessions, self.circuits)

    def observe(
        self,
        *,
        tokens: Mapping[Scope, TokenCache],
        sink_failures: Any = None,
        endpoints: Endpoints | None = None,
        outbox: Callable[[], int | None] | None = None,
        shadow_divergences: Callable[[], Mapping[tuple[str, str], int]] | None = None,
    ) -> None:
        """What metrics read from the daemon's objects once they exist (tokens, the bus, the
        endpoints' retry budgets, the durable outbox, the shadow taxonomy's divergences)."""
        self.metrics.observe_tokens(tokens)
        if shadow_divergences is not None:
            self.metrics.observe_shadow(shadow_divergences)
        if sink_failures is not None:
            self.metrics.count("sink", lambda: int(sink_failures.sink_failures))
        if endpoints is not None:
            self.metrics.observe_endpoints(endpoints)
        if outbox is not None:
            self.metrics.observe_outbox(outbox)

    @property
    def bindings(self) -> list[PrometheusEndpoint]:
        """What the lifecycle binds before any session starts: the Prometheus endpoint, when configured."""
        endpoint = self.pipeline.prometheus
        return [] if endpoint is None else [endpoint]

    def observe_subscribers(
        self, *, subscribers: Callable[[], int], lagged: Callable[[], int], disconnected: Callable[[], int]
    ) -> None:
        """The socket API's counts (its hub is above this floor: callables, not the hub)."""
        self.metrics.count("subscribers", subscribers)
        self.metrics.count("lagged", lagged)
        self.metrics.count("lag_disconnects", disconnected)

    # -- the bus sink ---------------------------------------------------------------------------------------
    def __call__(self, published: Published) -> None:
        event = published.event
        kind = type(event)
        correlation = published.correlation
        self.metrics.event(event, correlation)
        if correlation is not None:
            self.sessions.correlate(correlation)
        if kind is SessionTransition:
            assert isinstance(event, SessionTransition)
            self.sessions.transition(event)
        elif kind is SessionTerminated:
            assert isinstance(event, SessionTerminated)
            self.sessions.terminated(event)
        elif kind is RetryAttempt:
            assert isinstance(event, RetryAttempt)
            self.sessions.retry(event)
        elif kind is ReconnectionThrottled:
            assert isinstance(event, ReconnectionThrottled)
            self.sessions.throttled(event)
        elif kind is ErrorClassified:
            assert isinstance(event, ErrorClassified)
            # a failure classified inside an operation is that operation's (its attempt span)
            session = session_of(event, correlation)
            if CURRENT.get() is None and session is not None:
                segment = self.sessions.segment_of(session)
                self.metrics.connection_failure(event.event, None if segment is None else segment.state)
                self.sessions.failure(session, event.event)
        elif kind is CircuitTransition:
            assert isinstance(event, CircuitTransition)
            self.circuits.transition(event)
        elif kind is CircuitOpened:
            assert isinstance(event, CircuitOpened)
            self.circuits.opened(event)
        elif kind is CircuitHalfOpened:
            assert isinstance(event, CircuitHalfOpened)
            self.circuits.half_opened(event)
        elif kind is DaemonStopping:
            assert isinstance(event, DaemonStopping)
            # the drain starts: the final flush gets what is left of this grace period
            self._stopping = (time.monotonic(), event.grace_s)

    def _segment_attempt(self, session_id: str) -> int:
        segment = self.sessions.segment_of(session_id)
        return 0 if segment is None else segment.attempt

    # -- lifecycle ----------------------------------------------------------------------------------------
    def service(self, grace_s: float) -> Any:
        """A ``run_daemon`` service: started at once; when cancelled, the bounded final flush."""

        async def serve(*, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
            task_status.started()
            try:
                await anyio.sleep_forever()
            finally:
                await self.close(self.budget(grace_s))

        return serve

    def budget(self, grace_s: float) -> float:
        """The final flush's wait: what is left of the drain's grace period, at most FLUSH_CAP_S.

        The cap keeps a forced exit (a second signal, which the service cannot tell from a
        drain that ended) from waiting out a long grace period on a collector that hangs.
        """
        left = grace_s
        if self._stopping is not None:
            started, grace = self._stopping
            left = started + grace - time.monotonic()
        return max(0.0, min(left, FLUSH_CAP_S))

    async def flush(self, limit_s: float = 10.0) -> bool:
        """Export what is queued now; True when done within ``limit_s`` (the loop is never blocked)."""
        return await self.pipeline.flush(limit_s)

    async def close(self, budget_s: float) -> CloseReport:
        """End open segments and periods, flush and shut the exporters down within ``budget_s``."""
        if self.closed is not None:
            return self.closed
        self.sessions.close()
        self.circuits.close()
        self.closed = await self.pipeline.close(budget_s)
        return self.closed

    @property
    def export_failures(self) -> int:
        return self.pipeline.export_failures


def shapes_of(config: Config) -> dict[str, SessionShape]:
    """What each configured session is, and where its WebSocket goes (spans need both)."""
    from supervisor.transports.webmessaging import ENDPOINT

    shapes: dict[str, SessionShape] = {}
    for spec in config.sessions:
        # the session's tenant's table (a named tenant's org has its own hosts)
        table = session_table(config, spec)
        genesys = table if isinstance(table, GenesysConfig) else None
        websocket: tuple[str, int | None, str] | None = None
        if spec.kind is SessionKind.WEBMESSAGING and genesys is not None and genesys.webmessaging_url:
            websocket = _socket(genesys.webmessaging_url, ENDPOINT)
        elif spec.kind is SessionKind.NOTIFICATIONS:
            # the socket goes where the channel's connectUri says; the streaming host is the usual one
            url = genesys.streaming_url if genesys is not None else None
            websocket = _socket(url, "/channels/{channelId}") if url else None
        # a session kind is named as its channel (webmessaging, notifications, agent-session)
        shapes[spec.id] = SessionShape(spec.kind.value, spec.platform.value, spec.kind.value, websocket)
    return shapes


def _socket(url: str, path: str) -> tuple[str, int | None, str]:
    parts = urlsplit(url)
    return parts.hostname or "", parts.port, parts.path.rstrip("/") + path


def configured_secrets(config: Config, *, environ: Mapping[str, str], config_dir: Path | None) -> list[str]:
    """The configured credentials' values, for the scrubber (an unreadable one is Wiring's error)."""
    names: list[tuple[str | None, str]] = []
    # every tenant's: the default one's ([platforms.*]) and each [tenants.NAME]'s
    for tenant, table in tenant_tables(config):
        at = table_key(tenant, platform_of(table))
        names.append((table.client_secret_file, f"{at}.clientSecretFile"))
        if isinstance(table, CxoneConfig):
            names.append((table.password_file, f"{at}.passwordFile"))
    out = []
    for name, key in names:
        try:
            secret = read_secret(name, key=key, config_dir=config_dir, environ=environ)
        except ConfigError:
            continue
        if secret is not None:
            out.append(secret.reveal())
    return out
