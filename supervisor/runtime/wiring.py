"""Wiring: configuration in, the daemon's shared objects out.

:class:`Wiring` builds, once, what every session shares: the taxonomy and its classifier, one
circuit per endpoint, the one retry executor (its hooks publish on the bus), one httpx client
per platform with transport retries at 0, one token cache per credential, one request pipeline
per platform. It then makes each configured session's transport and runner. It decides
nothing and runs nothing: the :class:`~supervisor.runtime.supervisor.Supervisor` runs the
runners, :func:`~supervisor.runtime.main.run_daemon` the lifecycle.
"""

from __future__ import annotations

import os
import random
import zlib
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import quote

import anyio
import httpcore
import httpx
import msgspec
from anyio import to_thread

from machines.channel import ChannelConfig
from machines.circuit import CircuitConfig
from machines.pacing import PacingConfig, Probe
from machines.registry import CircuitRegistry, Endpoints
from machines.session import SessionConfig
from supervisor.api.platform_events import PlatformEvents, WindowLimits
from supervisor.attempts import Attempts
from supervisor.boundary import SessionContext, kept_headers
from supervisor.bus import EventBus
from supervisor.clock import Clock, Rng, SystemClock
from supervisor.config import (
    Config,
    CxoneConfig,
    EventsConfig,
    GenesysConfig,
    Secret,
    SessionKind,
    SessionSpec,
    read_secret,
    table_key,
)
from supervisor.errors import ConfigError
from supervisor.rest.cxone_auth import CxoneApi, CxoneLogin
from supervisor.rest.executor import RetryExecutor, Sleep
from supervisor.rest.hooks import ExecutorHooks, HookChain
from supervisor.rest.pipeline import RequestPipeline
from supervisor.rest.tokens import GenesysClientCredentials, Token, TokenCache, TokenSource
from supervisor.runtime.fence import WriteFence
from supervisor.runtime.hooks import BusHooks
from supervisor.runtime.platform_sinks import cxone_sink, notifications_sink, webmessaging_sink
from supervisor.runtime.resync import Resyncer
from supervisor.runtime.session_runner import SessionRunner
from supervisor.runtime.taxonomy_tap import TaxonomyTap, state_directory
from supervisor.runtime.tenancy import (
    Scope,
    configured_scopes,
    scope_of,
    scope_platform,
    scope_table,
    scope_tenant,
    spec_scope,
)
from supervisor.runtime.tls import TlsContexts
from supervisor.stamp import Stamper
from supervisor.store.shards import shard_of
from supervisor.taxonomy import Channel, Classifier, Platform, Taxonomy, load_taxonomy, resolve_version
from supervisor.transports.base import Transport
from supervisor.transports.channel_pool import ChannelPools, SharedNotificationsTransport
from supervisor.transports.channel_quota import ChannelQuota
from supervisor.transports.fenced_io import FencedBackend, Wire, WriteGuard
from supervisor.transports.wm_history import GuestHistory
from supervisor.vocabulary import GENESYS_STREAMING, GENESYS_WEBMESSAGING, EndpointId

#: what a notifications session's events are handed to, with the session id (an embedder's hook)
NotificationSink = Callable[[str, Mapping[str, Any]], None]

__all__ = ["CREDENTIAL_KEYS", "SESSIONS_PER_CLIENT", "Rotation", "Wiring", "platform_table"]

#: sessions per HTTP client (connection pool) of a platform (see Wiring._clients_for)
SESSIONS_PER_CLIENT = 32

#: the credential files of each platform's table, by config key: what they hold is the credential,
#: compared (and rotated) by its value, never as a change of the table
CREDENTIAL_KEYS: dict[Platform, tuple[str, ...]] = {
    Platform.GENESYS: ("platforms.genesys.clientSecretFile",),
    Platform.CXONE: ("platforms.cxone.clientSecretFile", "platforms.cxone.passwordFile"),
}
_FILE_FIELDS = ("client_secret_file", "password_file")


def platform_table(config: Config, platform: Scope) -> msgspec.Struct | None:
    """``platform``'s table (a scope's: a named tenant's ``[tenants.NAME]``) without the names of its
    credential files (the files' content is compared on its own: a file renamed with the same secret in
    it changes nothing)."""
    table = scope_table(config, platform)
    if table is None:
        return None
    fields = {f: None for f in _FILE_FIELDS if hasattr(table, f)}
    replaced: msgspec.Struct = msgspec.structs.replace(table, **fields)
    return replaced


@dataclass(frozen=True, slots=True)
class Rotation:
    """A rotated credential, already granted a token by its platform (Wiring.trial_rotation)."""

    platform: Scope
    source: TokenSource
    token: Token
    secrets: tuple[Secret | None, ...]


class Wiring:
    """The shared objects of one daemon; an async context manager that owns the HTTP clients."""

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
        hooks: Sequence[ExecutorHooks] = (),
        notification_sink: NotificationSink | None = None,
    ) -> None:
        self.config = config
        self.bus = bus if bus is not None else EventBus()
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.rng: Rng = rng if rng is not None else random.Random(config.daemon.seed)
        self.config_dir = config_dir
        self.environ: Mapping[str, str] = environ if environ is not None else os.environ
        self.sleep = sleep
        # [daemon] stampMember (tests only): the header every request and upgrade carries; the durable
        # store sets its epoch once open (supervisor/stamp.py)
        self.stamper = Stamper(config.daemon.stamp_member)
        self.taxonomy = load_taxonomy(resolve_version(config.daemon.taxonomy_version, self.environ))
        self.classifier = Classifier(self.taxonomy, self.clock)
        # [taxonomy] capture and shadow: told every failure the classifier routes (docs/taxonomy.md)
        self.taxonomy_tap = TaxonomyTap(
            config.taxonomy,
            active=self.taxonomy,
            bus=self.bus,
            clock=self.clock,
            state_dir=state_directory(config.store.path, self.environ),
            headers=kept_headers(),
            sleep=sleep,
        )
        if self.taxonomy_tap.enabled:
            self.classifier.observer = self.taxonomy_tap
        self.circuits = CircuitRegistry(self.clock, _circuit_config(config), self.rng)
        # every endpoint's admission (docs/runtime.md, "One attempt path": decided once, by its Endpoint, through one shell)
        self.attempts = Attempts(_endpoints(config, self.clock, self.circuits))
        self.session_config = _session_config(config)
        bus_hooks = BusHooks(self.bus, self.clock)
        self.executor = RetryExecutor(
            self.classifier,
            self.attempts,
            self.clock,
            rng=self.rng,
            hooks=HookChain([bus_hooks, *hooks]) if hooks else bus_hooks,
            sleep=sleep,
            refresh_before_retry_s=config.tokens.refresh_before_retry,
        )
        # everything below is per scope: the default tenant's by its Platform, a named tenant's by its
        # TenantScope (supervisor/runtime/tenancy.py): one credential, one cache, its own pools
        self.tokens: dict[Scope, TokenCache] = {}
        # where each CXone credential's agent API is (apiUrl, or discovered after each login)
        self.cxone_apis: dict[Scope, CxoneApi] = {}
        # per scope: the first pipeline (calls on no session's behalf), and every shard
        self.pipelines: dict[Scope, RequestPipeline] = {}
        self._shards: dict[Scope, list[RequestPipeline]] = {}
        self.secrets: dict[Scope, tuple[Secret | None, ...]] = {}
        self._clients: dict[Scope, list[httpx.AsyncClient]] = {}
        # a fleet member's (use_fence): the write fence, and one pool per scope and shard, so the
        # sockets aborted at a shard's deadline are that shard's only (docs/runtime.md, "The fence at the write")
        self.fence: WriteFence | None = None
        self._shard_pipelines: dict[tuple[Scope, int], RequestPipeline] = {}
        # per scope: the sessions added over the control socket (the pools are sized for the file's
        # sessions and these together: Wiring.grow)
        self.added: dict[Scope, int] = {}
        self._pool_limits: dict[int, int] = {}
        # every HTTP client's TLS context, one per trust configuration (supervisor/runtime/tls.py)
        self.tls = TlsContexts()
        # Genesys' 20 notification channels per user and app: one count per OAuth client, a named
        # tenant's keyed ``NAME/<clientId>`` (two orgs may even share a client id: their channels do not)
        self.channel_quotas: dict[str, ChannelQuota] = {}
        # shared notification channels (platforms.genesys.sharedChannels): one pool per OAuth client,
        # their channels admitted by the streaming endpoint (docs/runtime.md, "Shared notification channels")
        self.channel_pools = ChannelPools(
            config=ChannelConfig(
                first_delay_s=self.session_config.first_delay_s,
                max_delay_s=max(60.0, self.session_config.first_delay_s[1]),
            ),
            clock=self.clock,
            rng=self.rng,
            sleep=sleep,
            reports=bus_hooks,
            stamp=self.stamper.headers,
            classified=bus_hooks.classified,
        )
        self.channel_pools.local_address = config.fleet.local_address
        self.notification_sink = notification_sink
        # every session's platform events: numbered, windowed, handed to the socket API's platform
        # stream (docs/runtime.md, "Platform events"); on the bus to find the gaps
        self.platform_events = PlatformEvents(
            boot_id=self.bus.boot_id, clock=self.clock, limits=window_limits(config.events)
        )
        self.bus.subscribe(self.platform_events)
        # closes the gaps the hub finds where the platform allows (supervisor/runtime/resync.py); the
        # supervisor attaches its session table and serves it
        self.resyncer = Resyncer(
            self.platform_events,
            in_flight=config.events.resync_in_flight,
            read_conversation=self.read_conversation,
        )

    # ------------------------------------------------------------------ resources
    async def __aenter__(self) -> Wiring:
        try:
            self.secrets = self.read_secrets(self.config)
            for scope in configured_scopes(self.config):
                self._build_platform(scope, self.config, self.secrets)
        except BaseException:
            # a credential that cannot be read must not leak the clients made before it
            await self.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close_clients([c for clients in self._clients.values() for c in clients])
        await self.close_clients([p.client for p in self._shard_pipelines.values()])
        if self.taxonomy_tap.enabled:
            # the capture's last lines are written by its thread: waited for off the loop (bounded)
            with anyio.CancelScope(shield=True):
                await to_thread.run_sync(self.taxonomy_tap.close)

    async def close_clients(self, clients: list[httpx.AsyncClient]) -> None:
        with anyio.CancelScope(shield=True):
            for client in clients:
                await client.aclose()

    def read_secrets(self, config: Config) -> dict[Scope, tuple[Secret | None, ...]]:
        """Every credential ``config`` names, read now (errors name the key, never the value)."""
        out: dict[Scope, tuple[Secret | None, ...]] = {}
        for scope, table in configured_scopes(config).items():
            at = table_key(scope_tenant(scope), scope_platform(scope))
            if isinstance(table, GenesysConfig):
                secret = self._read(table.client_secret_file, f"{at}.clientSecretFile")
                if table.client_id is not None and secret is None:
                    raise ConfigError(f"{at}.clientSecretFile: required with clientId")
                out[scope] = (secret,)
            else:
                secret = self._read(table.client_secret_file, f"{at}.clientSecretFile")
                password = self._read(table.password_file, f"{at}.passwordFile")
                if table.client_id is None or secret is None:
                    raise ConfigError(f"{at}: clientId and clientSecretFile are required")
                out[scope] = (secret, password)
        return out

    def _read(self, name: str | None, key: str) -> Secret | None:
        return read_secret(name, key=key, config_dir=self.config_dir, environ=self.environ)

    def _scopes(self, config: Config) -> list[Scope]:
        """The scopes configured now or in ``config`` (a reload's), each once, in order."""
        return list(dict.fromkeys([*configured_scopes(self.config), *configured_scopes(config)]))

    def rotated(self, config: Config, secrets: Mapping[Scope, tuple[Secret | None, ...]]) -> list[Scope]:
        """The platforms whose credential alone changed: the table the same (but for the files'
        names), a token cache in use, another secret. Those swap their token source (a rotation);
        a platform whose table changed is rebuilt instead (:meth:`reconfigure`)."""
        out = []
        for platform in self._scopes(config):
            same_table = platform_table(self.config, platform) == platform_table(config, platform)
            if same_table and platform in self.tokens and self.secrets.get(platform) != secrets.get(platform):
                out.append(platform)
        return out

    async def trial_rotation(
        self, platform: Scope, config: Config, secrets: Mapping[Scope, tuple[Secret | None, ...]]
    ) -> Rotation:
        """A token from the rotated credential, fetched before anything changes: through the retry
        executor's token step (``oauth.token``, the credential's endpoint and circuit), the cache
        left as it is. Raises OperationError (refused, or retries spent) or CircuitOpenError."""
        tokens = self.tokens[platform]
        source = self._source(platform, config, secrets, self._clients[platform][0])
        # rotated() lists only platforms with a token cache, and the same table: a client id still
        assert source is not None
        if isinstance(source, CxoneLogin) and isinstance(tokens.source, CxoneLogin):
            # logins are counted per credential: the new one's first marks a new login, so the
            # tenant's API is discovered again after it (rest/cxone_auth.py, CxoneApi)
            source.logins = tokens.source.logins
        ctx = SessionContext(
            "credential-rotation", scope_platform(platform), Channel.REST, tenant=scope_tenant(platform)
        )
        token = await self.executor.token(ctx, tokens, partial(tokens.trial, source))
        return Rotation(platform, source, token, secrets[platform])

    def reconfigure(
        self,
        config: Config,
        secrets: dict[Scope, tuple[Secret | None, ...]],
        rotations: Sequence[Rotation] = (),
    ) -> list[httpx.AsyncClient]:
        """Adopt ``config``: rebuild the platforms whose table changed; swap the token source of
        those whose credential alone changed (``rotations``, each already granted a token); apply
        the global settings a running daemon can take (circuits, reconnection, tokens, the REST
        timeout).

        Returns the clients the rebuilt platforms no longer use, for the caller to close once
        the sessions that used them are stopped.
        """
        retired: list[httpx.AsyncClient] = []
        swapped = {rotation.platform: rotation for rotation in rotations}
        # the clients rebuilt below read the trust store anew, once
        self.tls.forget()
        kept = dict(secrets)
        for platform in self._scopes(config):
            if platform_table(self.config, platform) == platform_table(config, platform):
                rotation = swapped.get(platform)
                if rotation is not None:
                    self.tokens[platform].swap(rotation.source, rotation.token)
                    kept[platform] = rotation.secrets
                elif platform in self.secrets:
                    # not rotated (no token cache uses it, or the same secret): what is in use stays
                    kept[platform] = self.secrets[platform]
                continue
            retired.extend(self._clients.pop(platform, []))
            for key in [key for key in self._shard_pipelines if key[0] == platform]:
                retired.append(self._shard_pipelines.pop(key).client)
            self.tokens.pop(platform, None)
            self.cxone_apis.pop(platform, None)
            self.pipelines.pop(platform, None)
            self._shards.pop(platform, None)
            self._build_platform(platform, config, secrets)
        self.config = config
        self.secrets = kept
        self.session_config = _session_config(config)
        self.circuits.configure(_circuit_config(config))
        timeout = httpx.Timeout(config.daemon.request_timeout)
        for clients in self._clients.values():
            for client in clients:
                client.timeout = timeout
        for cache in self.tokens.values():
            cache.early_refresh_s = config.tokens.early_refresh
        self.executor.refresh_before_retry_s = config.tokens.refresh_before_retry
        self.platform_events.limits = window_limits(config.events)
        return retired

    def use_taxonomy(self, taxonomy: Taxonomy) -> None:
        """Switch the active taxonomy version for every classification from now on (seed section 1)."""
        self.taxonomy = taxonomy
        self.classifier.taxonomy = taxonomy
        self.taxonomy_tap.use_taxonomy(taxonomy)

    @property
    def cxone_api(self) -> CxoneApi | None:
        """The default tenant's CXone agent API (``[platforms.cxone]``)."""
        return self.cxone_apis.get(Platform.CXONE)

    def use_fence(self, fence: WriteFence) -> None:
        """This daemon is a fleet member: its sessions' sockets are fenced by their shards' lease
        deadlines, and their HTTP pools are per shard (sessions made from now on); its shared
        channels are fenced by the earliest deadline of the shards each carries."""
        self.fence = fence
        self.channel_pools.fencing = _ChannelFencing(self, fence)

    def wire_for(self, session_id: str) -> Wire:
        """How ``session_id``'s WebSockets are made: its shard's guard (a fleet member), the source address."""
        guard = None if self.fence is None else self.fence.guard(shard_of(session_id))
        return Wire(guard, self.config.fleet.local_address)

    def pipeline_for(self, platform: Scope, session_id: str | None = None) -> RequestPipeline:
        """The request pipeline a session's calls go through (its pool's); the first without a session.
        A fleet member's session: its shard's own pool, fenced by the shard's lease deadline."""
        if self.fence is not None and session_id is not None:
            return self.shard_pipeline(platform, shard_of(session_id))
        shards = self._shards[platform]
        if session_id is None or len(shards) == 1:
            return shards[0]
        return shards[zlib.crc32(session_id.encode()) % len(shards)]

    def shard_pipeline(self, platform: Scope, shard: int) -> RequestPipeline:
        """A fleet member's pipeline of ``shard`` (its pool's connections fenced by the shard's lease
        deadline), made at its first use."""
        key = (platform, shard)
        pipeline = self._shard_pipelines.get(key)
        if pipeline is None:
            assert self.fence is not None
            first = self._shards[platform][0]
            guard = self.fence.guard(shard)
            client = self._client(
                httpx.Timeout(self.config.daemon.request_timeout),
                SESSIONS_PER_CLIENT,
                guard=guard,
                shard=shard,
            )
            pipeline = self._shard_pipelines[key] = RequestPipeline(
                client,
                self.executor,
                tokens=first.tokens,
                rate_limit_headers=self.config.admission.rate_limit_headers,
                tenant=scope_tenant(platform),
                # a request the fence aborted raises Fenced: told to no endpoint (the pipeline's docstring)
                guard=guard,
            )
        return pipeline

    async def read_conversation(self, ctx: SessionContext, conversation_id: str) -> Mapping[str, Any]:
        """A Genesys conversation's current state, ``GET /api/v2/conversations/{id}`` (PY269
        ``ConversationsApi.get_conversation``), through the executor on ``genesys:api`` with the
        session's pool and the credential's token (a resync's snapshot: supervisor/runtime/resync.py).
        Raises OperationError or CircuitOpenError."""
        scope = scope_of(ctx.tenant, Platform.GENESYS)
        gen = scope_table(self.config, scope)
        if not isinstance(gen, GenesysConfig):
            raise ConfigError(f"{table_key(ctx.tenant, Platform.GENESYS)}: not configured")
        response = await self.pipeline_for(scope, ctx.session_id).request(
            "GET",
            f"{gen.api_url.rstrip('/')}/api/v2/conversations/{quote(conversation_id, safe='')}",
            ctx=ctx,
            circuit=EndpointId.api(Platform.GENESYS),
            operation="conversation.get",
            channel=Channel.REST,
            route="/api/v2/conversations/{conversationId}",
        )
        body = response.json()
        return body if isinstance(body, dict) else {}

    def guest_history(self, session_id: str, scope: Scope = Platform.GENESYS) -> GuestHistory | None:
        """The Web Messaging guest history on the Genesys API host, read through the executor on
        ``genesys:api`` (its tenant's) with the session's pool, signed by the guest JWT (not the OAuth token)."""
        gen = scope_table(self.config, scope)
        shards = self._shards.get(scope)
        if not isinstance(gen, GenesysConfig) or not shards:
            return None
        client = self.pipeline_for(scope, session_id).client
        return GuestHistory(RequestPipeline(client, self.executor, tenant=scope_tenant(scope)), gen.api_url)

    @staticmethod
    def _source(
        platform: Scope,
        config: Config,
        secrets: Mapping[Scope, tuple[Secret | None, ...]],
        client: httpx.AsyncClient,
    ) -> TokenSource | None:
        """The token source of ``platform``'s credential, or None (a Genesys table without a client)."""
        table = scope_table(config, platform)
        if isinstance(table, GenesysConfig):
            gen = table
            (secret,) = secrets[platform]
            if gen.client_id is None or secret is None:
                return None
            return GenesysClientCredentials(client, gen.login_url, gen.client_id, secret)
        cx = table
        assert isinstance(cx, CxoneConfig)
        secret, password = secrets[platform]
        # read_secrets checked the client, the configuration the access key (config.py)
        assert cx.client_id is not None and secret is not None
        assert cx.username is not None and password is not None
        return CxoneLogin(client, cx.auth_url, cx.client_id, secret, cx.username, password)

    def _build_platform(
        self, platform: Scope, config: Config, secrets: dict[Scope, tuple[Secret | None, ...]]
    ) -> None:
        """``platform``'s pools, token cache and pipelines (a scope's: a named tenant's are its own,
        their endpoints ``NAME/...``); nothing when ``config`` does not configure it."""
        timeout = httpx.Timeout(config.daemon.request_timeout)
        sessions = sum(1 for spec in config.sessions if spec_scope(spec) == platform) + self.added.get(
            platform, 0
        )
        early = config.tokens.early_refresh
        table = scope_table(config, platform)
        kind, tenant = scope_platform(platform), scope_tenant(platform)
        if isinstance(table, GenesysConfig):
            clients = self._clients_for(platform, timeout, sessions)
            source = self._source(platform, config, secrets, clients[0])
            if source is not None:
                self.tokens[platform] = TokenCache(
                    source, self.clock, early_refresh_s=early, platform=kind, tenant=tenant
                )
            tokens = self.tokens.get(platform)
        elif isinstance(table, CxoneConfig):
            cx = table
            clients = self._clients_for(platform, timeout, sessions)
            login = self._source(platform, config, secrets, clients[0])
            assert login is not None
            tokens = self.tokens[platform] = TokenCache(
                login, self.clock, early_refresh_s=early, platform=kind, tenant=tenant
            )
            # the discovery endpoints are public: their calls carry no token
            discovery = RequestPipeline(clients[0], self.executor, tenant=tenant)
            self.cxone_apis[platform] = CxoneApi(
                tokens, discovery, api_url=cx.api_url, api_version=cx.api_version
            )
        else:
            return
        # one credential, one token cache, one executor: only the connection pools are sharded
        headers = config.admission.rate_limit_headers
        self._shards[platform] = [
            RequestPipeline(c, self.executor, tokens=tokens, rate_limit_headers=headers, tenant=tenant)
            for c in clients
        ]
        self.pipelines[platform] = self._shards[platform][0]

    def _clients_for(self, platform: Scope, timeout: httpx.Timeout, sessions: int) -> list[httpx.AsyncClient]:
        """One HTTP client per :data:`SESSIONS_PER_CLIENT` sessions of the platform (at least one).

        httpcore's pool scans every connection it holds for each request it assigns: with a long
        poll per CXone session, one pool for thousands of sessions spends its CPU there
        (docs/benchmarks.md, "Brownout", has the measurements). Small pools keep that scan short.
        Each session may hold its long poll and one other call (a start, a DELETE) at once.
        """
        shards = max(1, -(-sessions // SESSIONS_PER_CLIENT))
        clients = [self._client(timeout, -(-max(sessions, 1) // shards)) for _ in range(shards)]
        self._clients[platform] = clients
        return clients

    def _client(
        self,
        timeout: httpx.Timeout,
        sessions: int,
        *,
        guard: WriteGuard | None = None,
        shard: int | None = None,
    ) -> httpx.AsyncClient:
        # each client holds at least SESSIONS_PER_CLIENT sessions' worth: a pool made for a few
        # sessions keeps its share when sessions are added later (Wiring.grow)
        per = max(sessions, SESSIONS_PER_CLIENT)
        limits = httpx.Limits(max_connections=2 * per + 20, max_keepalive_connections=per + 10)
        # one retry layer (docs/architecture.md, "Decisions the code relies on"): the transport never retries on its own
        # the TLS context is shared (made once per trust configuration), the pool is the client's own
        tls = self.tls.context()
        local = self.config.fleet.local_address
        transport = httpx.AsyncHTTPTransport(verify=tls, retries=0, limits=limits, local_address=local)
        if guard is not None:
            # a shard's pool: its connections write through the fence (supervisor/transports/fenced_io.py).
            # httpx 0.28 takes no network backend, so the pool it made is replaced by the same pool
            # over ours (httpx's docs, "Custom transports": httpcore's pool is the transport's)
            transport._pool = httpcore.AsyncConnectionPool(
                ssl_context=tls,
                max_connections=limits.max_connections,
                max_keepalive_connections=limits.max_keepalive_connections,
                keepalive_expiry=limits.keepalive_expiry,
                local_address=local,
                retries=0,
                network_backend=FencedBackend(guard),
            )
        # [daemon] stampMember (tests only): each request stamped as it leaves (supervisor/stamp.py)
        # (a shard's pool: stamped with the shard's lease epoch)
        stamp = self._stamp if shard is None else self._shard_stamp(shard)
        hooks = {"request": [stamp]} if self.stamper.member is not None else None
        # (verify: the same context for the transports httpx mounts for proxies from the environment)
        client = httpx.AsyncClient(
            verify=tls, timeout=timeout, transport=transport, follow_redirects=False, event_hooks=hooks
        )
        self._pool_limits[id(client)] = 2 * per + 20
        return client

    async def _stamp(self, request: httpx.Request) -> None:
        request.headers.update(self.stamper.headers())

    def _shard_stamp(self, shard: int) -> Callable[[httpx.Request], Awaitable[None]]:
        headers = self.stamper.for_shard(shard)

        async def stamp(request: httpx.Request) -> None:
            request.headers.update(headers())

        return stamp

    def grow(self, platform: Scope, added: int) -> None:
        """The platform now has ``added`` sessions from the control socket: more pools when the file's
        sessions and these together need them (one per :data:`SESSIONS_PER_CLIENT`). Pools never
        shrink while the daemon runs: a removed session's share stays for the next one added."""
        self.added[platform] = added
        shards = self._shards.get(platform)
        clients = self._clients.get(platform)
        if not shards or clients is None:
            return
        sessions = sum(1 for spec in self.config.sessions if spec_scope(spec) == platform) + added
        wanted = -(-sessions // SESSIONS_PER_CLIENT)
        timeout = httpx.Timeout(self.config.daemon.request_timeout)
        tokens = shards[0].tokens
        while len(clients) < wanted:
            client = self._client(timeout, SESSIONS_PER_CLIENT)
            clients.append(client)
            shards.append(
                RequestPipeline(client, self.executor, tokens=tokens, tenant=scope_tenant(platform))
            )

    def pool_sizes(self, platform: Scope) -> list[int]:
        """The connection limit of each HTTP client (pool) of a platform, in the order they were made."""
        return [self._pool_limits[id(client)] for client in self._clients.get(platform, [])]

    # ------------------------------------------------------------------ sessions
    def transport_for(
        self, spec: SessionSpec, resume: Mapping[str, str] | None = None
    ) -> tuple[Transport, EndpointId]:
        """The transport of one configured session and its connect endpoint (where its connection
        attempts are admitted).

        ``resume``: what the durable store kept of the session's server side (the Web Messaging
        guest token after a planned restart: the same guest session is resumed, newSession:false;
        the CXone agent session's rolling id after a handover: polled on, no new start).
        """
        # the session's tenant: its table, pools, token cache, and endpoints of its own (NAME/...)
        scope, tenant = spec_scope(spec), spec.tenant
        table = scope_table(self.config, scope)
        if spec.kind is SessionKind.WEBMESSAGING:
            from supervisor.transports.webmessaging import WebMessagingTransport

            gen = table
            assert isinstance(gen, GenesysConfig) and gen.webmessaging_url is not None
            ctx = SessionContext(
                spec.id,
                Platform.GENESYS,
                Channel.WEBMESSAGING,
                agent_id=spec.agent_id,
                conversation_id=spec.conversation_id,
                tenant=tenant,
            )
            deployment = spec.deployment_id or gen.deployment_id
            assert deployment is not None
            token = (resume or {}).get("guestToken")
            wm = WebMessagingTransport(
                ctx,
                url=gen.webmessaging_url,
                deployment_id=deployment,
                keepalive=gen.keepalive,
                executor=self.executor,
                guest_token=token,
                resuming=token is not None,
                history=self.guest_history(spec.id, scope),
                send_check_after=gen.send_check_after,
                on_event=webmessaging_sink(self.platform_events, spec.id),
                stamp=self.stamper.for_shard(shard_of(spec.id)),
                wire=self.wire_for(spec.id),
            )
            return wm, GENESYS_WEBMESSAGING.of(tenant)
        if spec.kind is SessionKind.NOTIFICATIONS:
            from supervisor.transports.notifications import NotificationsTransport

            gen = table
            assert isinstance(gen, GenesysConfig)
            ctx = SessionContext(
                spec.id, Platform.GENESYS, Channel.NOTIFICATIONS, agent_id=spec.agent_id, tenant=tenant
            )
            # docs/platforms.md, "Genesys Cloud notifications": the agent's conversation topic (the config requires an agentId)
            topics = [f"v2.users.{spec.agent_id}.conversations"]
            sink = notifications_sink(self.platform_events, spec.id, self._noting(self.notification_sink))
            if gen.shared_channels:
                # a subscription of the agent's topic on a channel its OAuth client shares; the channels'
                # attempts are the streaming endpoint's, as the sessions' are (made with the first of them)
                # (a named tenant's: its own client's pool, pipeline and streaming endpoint)
                gate = self.attempts.connect(GENESYS_STREAMING.of(tenant))
                if tenant is None:
                    self.channel_pools.gate = gate
                pool = self.channel_pools.pool(
                    self.channel_client(spec),
                    pipeline=self.pipeline_for(scope),
                    api_url=gen.api_url,
                    keepalive=gen.keepalive,
                    topic_limit=gen.topics_per_channel,
                    gate=None if tenant is None else gate,
                )
                shared = SharedNotificationsTransport(
                    ctx, pool=pool, topics=topics, keepalive=gen.keepalive, on_event=sink
                )
                return shared, GENESYS_STREAMING.of(tenant)
            nt = NotificationsTransport(
                ctx,
                pipeline=self.pipeline_for(scope, spec.id),
                api_url=gen.api_url,
                topics=topics,
                keepalive=gen.keepalive,
                clock=self.clock,
                sleep=self.sleep,
                # every session of one OAuth client shares the client's 20 channels (the client as
                # the shared channels' pools know it: channel_client, where a tenant's identity enters)
                quota=self.channel_quotas.setdefault(self.channel_client(spec), ChannelQuota()),
                on_event=sink,
                stamp=self.stamper.for_shard(shard_of(spec.id)),
                wire=self.wire_for(spec.id),
            )
            return nt, GENESYS_STREAMING.of(tenant)
        from supervisor.transports.cxone import CONNECT_ENDPOINT, AgentSessionTransport

        cx = table
        assert isinstance(cx, CxoneConfig)
        ctx = SessionContext(
            spec.id, Platform.CXONE, Channel.AGENT_SESSION, agent_id=spec.agent_id, tenant=tenant
        )
        api = self.cxone_apis.get(scope)
        assert api is not None
        at = AgentSessionTransport(
            ctx,
            pipeline=self.pipeline_for(scope, spec.id),
            api=api,
            station_id=spec.station_id,
            station_phone_number=spec.station_phone_number,
            poll_timeout=cx.poll_timeout,
            poll_watchdog=cx.poll_watchdog,
            sleep=self.sleep,
            on_events=cxone_sink(self.platform_events, spec.id),
            on_snapshot=self._snapshot_sink(spec.id),
            # a handover's agent session: polled on with the id the last daemon left, no new start
            resume_session_id=(resume or {}).get("platformSessionId"),
            # a crash's agent session (still logged in, its last id unknown): joined, no start first
            join_first=(resume or {}).get("agentSession") == "join",
        )
        return at, CONNECT_ENDPOINT.of(tenant)

    def client_key(self, scope: Scope) -> str:
        """The identity of ``scope``'s Genesys OAuth client, what its notification channels are counted
        (and shared) by: the client id, a named tenant's ``NAME/<clientId>``."""
        gen = scope_table(self.config, scope)
        client = gen.client_id if isinstance(gen, GenesysConfig) else None
        tenant = scope_tenant(scope)
        return (client or "") if tenant is None else f"{tenant}/{client or ''}"

    def channel_client(self, spec: SessionSpec) -> str:
        """The identity ``spec``'s channels are counted under: its tenant's OAuth client (the credential
        and endpoint identity the platform's 20-channel limit is per): the default tenant's client id, a
        named tenant's ``NAME/<clientId>`` (:meth:`client_key`)."""
        return self.client_key(spec_scope(spec))

    def _snapshot_sink(self, session_id: str) -> Callable[[list[dict[str, Any]]], None]:
        """A CXone session's ``on_snapshot``: the batch delivered flagged ``snapshot``, while the
        resyncer knows it (a gap the batch brings is then told ``snapshot``)."""
        deliver = cxone_sink(self.platform_events, session_id, snapshot=True)
        resyncer = self.resyncer

        def sink(events: list[dict[str, Any]]) -> None:
            with resyncer.snapshot_batch(session_id):
                deliver(events)

        return sink

    def _noting(self, embedder: NotificationSink | None) -> NotificationSink:
        """The notifications embedder's sink, after the resyncer noted the conversation an event names."""
        resyncer = self.resyncer

        def sink(session_id: str, message: Mapping[str, Any]) -> None:
            topic = message.get("topicName")
            if isinstance(topic, str):
                resyncer.noted(session_id, topic, message.get("eventBody"))
            if embedder is not None:
                embedder(session_id, message)

        return sink

    def runner_for(self, spec: SessionSpec, resume: Mapping[str, str] | None = None) -> SessionRunner:
        """A new runner for ``spec`` (a new machine: a full authentication cycle, or the resumption
        of the server session a restart left, ``resume``)."""
        transport, endpoint = self.transport_for(spec, resume)
        return SessionRunner(
            transport,
            classifier=self.classifier,
            # its connection attempts' endpoint (beyond the seed, docs/runtime.md, "Admission": paced to what it admits)
            gate=self.attempts.connect(endpoint),
            bus=self.bus,
            clock=self.clock,
            rng=self.rng,
            # the platform credential's cache: REST calls made for the session use it (a guest's
            # connection never does, its attribute updates do), so a fail-fast that condemns the
            # token revokes it (the next user re-authenticates once); a reload that rebuilds the
            # platform hands the new cache to the sessions it does not restart (Supervisor.reconfigure)
            tokens=self.tokens.get(spec_scope(spec)),
            config=self.session_config,
            sleep=self.sleep,
            # a fleet member's session waits while its shard is fenced: nothing reconnects there
            fence=None if self.fence is None else self.fence.guard(shard_of(spec.id)),
        )


class _ChannelFencing:
    """A fleet member's shared channels: each on an HTTP pool of its own, fenced by the earliest
    lease deadline of the shards it carries (supervisor/transports/channel_pool.py, ChannelFencing)."""

    def __init__(self, wiring: Wiring, fence: WriteFence) -> None:
        self._wiring = wiring
        self._fence = fence

    def guard(self, shards: Callable[[], Collection[int]]) -> WriteGuard:
        return self._fence.earliest(shards)

    def pipeline(self, base: RequestPipeline, guard: WriteGuard) -> RequestPipeline:
        wiring = self._wiring
        timeout = httpx.Timeout(wiring.config.daemon.request_timeout)
        # (a channel's requests are a few: its creation, its subscriptions; the smallest pool)
        client = wiring._client(timeout, 1, guard=guard)
        return RequestPipeline(client, base.executor, tokens=base.tokens, tenant=base.tenant, guard=guard)

    async def retire(self, pipeline: RequestPipeline) -> None:
        await self._wiring.close_clients([pipeline.client])

    def owned(self) -> int:
        return self._fence.owned_count()


def window_limits(events: EventsConfig) -> WindowLimits:
    """``[events]`` as the platform events' windows take it."""
    return WindowLimits(
        events=events.window_events, bytes=events.window_bytes, total_bytes=events.window_total_bytes
    )


def _circuit_config(config: Config) -> CircuitConfig:
    circuit = config.circuit
    return CircuitConfig(
        failure_threshold=circuit.failure_threshold,
        window_s=circuit.window,
        open_s=circuit.open_for,
        probe_timeout_s=circuit.probe_timeout,
    )


def _endpoints(config: Config, clock: Clock, circuits: CircuitRegistry) -> Endpoints:
    settings = config.admission
    connect = rest = None
    if settings.adaptive:
        # connection attempts start paced (a start-up is a storm too); REST calls engage at the
        # first throttle (most endpoints never throttle, and a long poll must not wait for a slot)
        probe = Probe(settings.probe)
        connect = PacingConfig(
            initial_rate=settings.initial_rate, probe=probe, in_flight_floor=settings.connects_in_flight
        )
        # REST calls also slow down once half their token's rate window is spent (the platform's
        # inin-ratelimit-* reading; a pipeline without [admission] rateLimitHeaders reads none)
        rest = PacingConfig(initial_rate=None, probe=probe, headroom=0.5)
    return Endpoints(
        clock,
        circuits,
        connect=connect,
        rest=rest,
        budget=(settings.retry_budget_ratio, settings.retry_budget_min_per_second),
    )


def _session_config(config: Config) -> SessionConfig:
    reconnect = config.reconnect
    return SessionConfig(
        first_delay_s=(reconnect.first_delay_min, reconnect.first_delay_max),
        throttle_jitter_s=reconnect.throttle_jitter,
        horizon_s=reconnect.horizon,
    )
