"""The daemon's configuration: one TOML file, validated on load (docs/configuration.md).

Errors name the file, the key and the problem (``supervisor.toml: sessions[2].platform:
invalid enum value 'genesis'``). Secrets are never in the file itself: ``clientSecretFile``
and ``passwordFile`` name files, relative ones resolved in ``$CREDENTIALS_DIRECTORY``
(systemd ``LoadCredential=``) first, then next to the config file (supervisor/credentials.py). A
secret's value never appears in any output: :class:`Secret` hides it from ``repr`` and ``str``.

Every file is read with one bounded read: the configuration up to :data:`MAX_CONFIG_BYTES`, a
credential file up to :data:`MAX_CREDENTIAL_BYTES` (docs/configuration.md, "Limits"), so a
path to ``/dev/zero`` or a FIFO fed forever is an error, not a hang. URLs are checked for what
a connection needs (scheme per key, host, port; supervisor/config_urls.py) so ``run --check``
refuses what ``run`` could not use.
"""

from __future__ import annotations

import enum
import re
import tomllib
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Final, Literal

import msgspec

from supervisor.config_durable import AttributesConfig, FleetConfig, HandoverConfig, StoreConfig
from supervisor.config_urls import HTTP, WS, url_problem

# their home was here: importers keep importing them from supervisor.config
from supervisor.credentials import MAX_CREDENTIAL_BYTES as MAX_CREDENTIAL_BYTES
from supervisor.credentials import Secret as Secret
from supervisor.credentials import default_environ as default_environ
from supervisor.credentials import read_secret as read_secret
from supervisor.errors import ConfigError, located
from supervisor.stamp import MEMBER_PATTERN
from supervisor.taxonomy.loader import DEFAULT_VERSION, LimitError, parse_toml, read_capped
from supervisor.vocabulary import Platform

#: the largest configuration file read (about 7,000 sessions)
MAX_CONFIG_BYTES = 1024 * 1024
#: Genesys allows 20 notification channels per user and app (docs/platforms.md, "Genesys Cloud notifications"); every
#: notifications session of this daemon opens one with the one ``platforms.genesys.clientId``
GENESYS_CHANNELS_PER_CLIENT = 20
#: the topics one channel carries (docs/platforms.md, "Genesys Cloud notifications"): with shared channels
#: (``platforms.genesys.sharedChannels``) a notifications session is one topic on a channel its client shares
GENESYS_TOPICS_PER_CHANNEL = 1000

_Seconds = Annotated[float, msgspec.Meta(ge=0.0, le=86_400.0)]
_PositiveSeconds = Annotated[float, msgspec.Meta(gt=0.0, le=86_400.0)]
# checked beyond its length by _check_url: the scheme each key needs, the host and the port
_Url = Annotated[str, msgspec.Meta(min_length=1, max_length=2048)]
_Id = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]


class SessionKind(enum.StrEnum):
    WEBMESSAGING = "webmessaging"  # Genesys Web Messaging guest session (WebSocket)
    NOTIFICATIONS = "notifications"  # Genesys notifications channel (REST + WebSocket)
    AGENT_SESSION = "agent-session"  # CXone agent session (REST long polling)


class Keepalive(msgspec.Struct, frozen=True, rename="camel", forbid_unknown_fields=True):
    # Genesys SDKs ping every 15 s (docs/platforms.md, "Genesys Cloud Web Messaging"); a missing pong is 1011/1006
    ping_interval: _PositiveSeconds = 15.0
    ping_timeout: _PositiveSeconds = 10.0
    # app-level `echo` health check (GMT HealthCheckProvider: 30 s cooldown); 0 disables it
    echo_interval: _Seconds = 30.0
    echo_timeout: _PositiveSeconds = 10.0
    open_timeout: _PositiveSeconds = 10.0


class GenesysConfig(msgspec.Struct, frozen=True, rename="camel", forbid_unknown_fields=True):
    login_url: _Url
    api_url: _Url
    webmessaging_url: _Url | None = None
    streaming_url: _Url | None = None
    client_id: _Id | None = None
    client_secret_file: str | None = None
    deployment_id: _Id | None = None
    keepalive: Keepalive = msgspec.field(default_factory=Keepalive)
    # a Web Messaging send unanswered within keepalive.openTimeout is looked for (a late echo, the
    # guest history) this long after, before it is sent again (once, with the same client id)
    send_check_after: _Seconds = 3.0
    # notifications sessions share the OAuth client's channels, up to 1,000 topics each (docs/runtime.md,
    # "Shared notification channels"); off: each session is a channel of its own, 20 sessions at most
    shared_channels: bool = True
    # the topics one shared channel carries at most: the platform's 1,000, or fewer to spread the events
    topics_per_channel: Annotated[int, msgspec.Meta(ge=1, le=GENESYS_TOPICS_PER_CHANNEL)] = (
        GENESYS_TOPICS_PER_CHANNEL
    )


class CxoneConfig(msgspec.Struct, frozen=True, rename="camel", forbid_unknown_fields=True):
    # the OpenID Connect issuer (https://cxone.niceincontact.com): discovery and the token endpoint
    auth_url: _Url
    # the agent API host (api_endpoint); unset: discovered after each login (rest/cxone_auth.py)
    api_url: _Url | None = None
    api_version: Annotated[str, msgspec.Meta(pattern=r"^v\d+\.0$")] = "v23.0"
    # the OpenID client registered for the application, and its secret
    client_id: _Id | None = None
    client_secret_file: str | None = None
    # the access key: its id and (in the file) its secret, the password grant's username and password
    username: _Id | None = None
    password_file: str | None = None
    # get-next-event?timeout= (0..60 s, docs/platforms.md, "NICE CXone")
    poll_timeout: Annotated[int, msgspec.Meta(ge=0, le=60)] = 30
    # restart a poll that never returns (core-sdk watchdog: 90 s)
    poll_watchdog: _PositiveSeconds = 90.0


#: a tenant's name (``[tenants.NAME]``): it prefixes the tenant's endpoint ids, metric labels and stored
#: keys (``NAME/genesys:api``), so no '/', ':' or '.' (a key path separator) and no spaces
TENANT_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
_TenantName = Annotated[str, msgspec.Meta(pattern=f"^{TENANT_NAME.pattern}$")]


class GenesysTenant(GenesysConfig, frozen=True, tag_field="platform", tag="genesys"):
    """``[tenants.NAME]`` with ``platform = "genesys"``: one Genesys org (its region's hosts, its own
    OAuth client), the keys of ``[platforms.genesys]`` and the same model."""


class CxoneTenant(CxoneConfig, frozen=True, tag_field="platform", tag="cxone"):
    """``[tenants.NAME]`` with ``platform = "cxone"``: one CXone business unit (its own access key),
    the keys of ``[platforms.cxone]`` and the same model."""


TenantTable = GenesysTenant | CxoneTenant


class SessionSpec(msgspec.Struct, frozen=True, rename="camel", forbid_unknown_fields=True):
    id: _Id
    platform: Platform
    kind: SessionKind
    agent_id: _Id | None = None
    conversation_id: _Id | None = None
    deployment_id: _Id | None = None
    station_id: _Id | None = None
    station_phone_number: _Id | None = None
    # the ``[tenants.NAME]`` the session runs on; None: the default tenant, ``[platforms.<platform>]``
    tenant: _TenantName | None = None


class ReconnectConfig(msgspec.Struct, frozen=True, rename="camel", forbid_unknown_fields=True):
    # seed edge case 1: "a randomized initial delay between 2 and 8 seconds"
    first_delay_min: _Seconds = 2.0
    first_delay_max: _Seconds = 8.0
    # beyond the seed: reconnections deferred by an open circuit come back spread over
    # U(0, throttleJitter) past its open period, not all in the same second (docs/benchmarks.md)
    throttle_jitter: _Seconds = 10.0
    # beyond the seed: how long a lost session keeps reconnecting before it ends RETRY_EXHAUSTED
    # (give-up reason HORIZON); the vendors' SDKs keep trying 5 (Genesys) and 10 minutes (NICE)
    horizon: _PositiveSeconds = 600.0


class CircuitSettings(msgspec.Struct, frozen=True, rename="camel", forbid_unknown_fields=True):
    # seed section 2: 5 consecutive transient errors within 10 s open it for 30 s
    failure_threshold: Annotated[int, msgspec.Meta(ge=1, le=1000)] = 5
    window: _PositiveSeconds = 10.0
    open_for: _PositiveSeconds = 30.0
    probe_timeout: _PositiveSeconds = 10.0


class TokenSettings(msgspec.Struct, frozen=True, rename="camel", forbid_unknown_fields=True):
    # seed edge case 3: a 5-minute early refresh, and a refresh before any retry within 60 s of expiry
    early_refresh: _Seconds = 300.0
    refresh_before_retry: _Seconds = 60.0


class AdmissionSettings(msgspec.Struct, frozen=True, rename="camel", forbid_unknown_fields=True):
    # beyond the seed (docs/runtime.md, "Admission"): pace connection attempts and REST calls to what each endpoint
    # admits (slow start, then a cut on 429/503 and a gentle probe up); false turns pacing off
    adaptive: bool = True
    # connection attempts per second per endpoint to start from (start-up and storms alike)
    initial_rate: Annotated[float, msgspec.Meta(gt=0.0, le=100_000.0)] = 20.0
    # how the rate grows back after a cut: "aimd" (additive) or "cubic" (RFC 9438, botocore's);
    # docs/benchmarks.md "Admission at a binding limit" measures both
    probe: Literal["aimd", "cubic"] = "aimd"
    # connection attempts in flight to one endpoint at once: at least this many, more when twice
    # the attempts admitted per second times the shortest handshake calls for more (a long round
    # trip); 128, not 32: a smaller cap slowed the recovery of a 5,000-session storm (docs/benchmarks.md,
    # "5,000 sessions")
    connects_in_flight: Annotated[int, msgspec.Meta(ge=1, le=100_000)] = 128
    # retries may add at most this share of an endpoint's calls (within 10 s) ...
    retry_budget_ratio: Annotated[float, msgspec.Meta(ge=0.0, le=10.0)] = 0.1
    # ... plus this many retries per second whatever the traffic
    retry_budget_min_per_second: Annotated[float, msgspec.Meta(ge=0.0, le=100_000.0)] = 5.0
    # read Genesys' inin-ratelimit-count/allowed/reset from every REST answer and slow an endpoint's
    # calls before its token's rate window is spent (docs/runtime.md, "Admission"); false: only a
    # 429 slows them
    rate_limit_headers: bool = True
    # a start seeds each connect endpoint's pace with the limit the store kept from a previous run (the rate
    # it was refused at), when it is at most this old: slow start stops below it instead of crossing
    # it (docs/runtime.md, "Admission"); 0: never (every start discovers the limit again)
    learned_limit_max_age: _Seconds = 3600.0


class DaemonSettings(msgspec.Struct, frozen=True, rename="camel", forbid_unknown_fields=True):
    taxonomy_version: str = DEFAULT_VERSION
    shutdown_grace: _PositiveSeconds = 10.0
    request_timeout: _PositiveSeconds = 15.0
    # seeds the daemon's randomness (jitter) for reproducible runs; None draws from the OS
    seed: int | None = None
    # the lock that keeps a second daemon off this configuration; None: a file named after the
    # configuration in $RUNTIME_DIRECTORY, else $XDG_RUNTIME_DIR/session-supervisor/, else /tmp
    lock_file: Annotated[str, msgspec.Meta(min_length=1, max_length=4096)] | None = None
    # event lines held for a slow standard output before lines are dropped (and counted)
    event_buffer_bytes: Annotated[int, msgspec.Meta(ge=4096, le=1 << 30)] = 8 * 1024 * 1024
    # tests only: stamp every request and WebSocket upgrade with this member name and the store's
    # epoch (header X-Session-Supervisor-Stamp, which the simulators log: supervisor/stamp.py); unset,
    # the default, adds nothing
    stamp_member: Annotated[str, msgspec.Meta(pattern=MEMBER_PATTERN)] | None = None


_Uid = Annotated[int, msgspec.Meta(ge=0, le=4_294_967_294)]
# sockaddr_un.sun_path holds 108 bytes, the terminating NUL included (unix(7))
_SocketPath = Annotated[str, msgspec.Meta(pattern=r"^/", max_length=107)]


class SocketsConfig(msgspec.Struct, frozen=True, rename="camel", forbid_unknown_fields=True):
    """The socket API (docs/socket-api.md): a read-only subscribe socket and a stricter control socket."""

    enabled: bool = True
    # filesystem paths (never the abstract namespace); unset: $XDG_RUNTIME_DIR/session-supervisor/
    subscribe: _SocketPath | None = None
    control: _SocketPath | None = None
    # octal, as chmod takes it; never world-writable (the peer check still applies on top)
    mode: Annotated[str, msgspec.Meta(pattern=r"^0?[0-7]{3}$")] = "0660"
    # the socket files' group (a name or a gid; the daemon must be a member): an ops group
    group: Annotated[str, msgspec.Meta(min_length=1, max_length=64)] | _Uid | None = None
    # who may connect besides the daemon's own uid and root; gids match primary or supplementary groups
    allow_uids: list[_Uid] = msgspec.field(default_factory=list)
    allow_gids: list[_Uid] = msgspec.field(default_factory=list)
    # the control socket's own list: never wider than the subscribe socket's; administrators
    # unless a role list below names them (docs/socket-api.md, "Roles")
    control_allow_uids: list[_Uid] = msgspec.field(default_factory=list)
    control_allow_gids: list[_Uid] = msgspec.field(default_factory=list)
    # control socket roles: observers read, operators act on sessions and attributes;
    # each list a subset of the subscribe socket's (the control socket is never wider)
    observer_uids: list[_Uid] = msgspec.field(default_factory=list)
    observer_gids: list[_Uid] = msgspec.field(default_factory=list)
    operator_uids: list[_Uid] = msgspec.field(default_factory=list)
    operator_gids: list[_Uid] = msgspec.field(default_factory=list)
    # the subscribe socket's platform stream (customer data): these besides the daemon's own uid and root;
    # each list a subset of allowUids / allowGids (a peer must be let in to the socket first)
    platform_allow_uids: list[_Uid] = msgspec.field(default_factory=list)
    platform_allow_gids: list[_Uid] = msgspec.field(default_factory=list)
    # per subscriber: pending bytes past this are dropped and the subscriber told it lagged
    subscriber_buffer_bytes: Annotated[int, msgspec.Meta(ge=4096, le=1 << 30)] = 1 << 20
    # a subscriber over its buffer this long without catching up is disconnected
    lagged_disconnect_after: _Seconds = 10.0
    max_connections: Annotated[int, msgspec.Meta(ge=1, le=100_000)] = 128
    handshake_timeout: _PositiveSeconds = 5.0
    # a control connection with no call this long after its last answer is closed (idle
    # connections held every slot of maxConnections)
    control_idle_timeout: _PositiveSeconds = 60.0

    def __post_init__(self) -> None:
        # msgspec reports a ValueError raised here with the table's location
        if int(self.mode, 8) & 0o002:
            raise ValueError(f"mode {self.mode} is world-writable: give a group access instead (allowGids)")
        if not set(self.control_allow_uids) <= set(self.allow_uids):
            raise ValueError(
                "controlAllowUids must be a subset of allowUids (the control socket is never wider)"
            )
        if not set(self.control_allow_gids) <= set(self.allow_gids):
            raise ValueError(
                "controlAllowGids must be a subset of allowGids (the control socket is never wider)"
            )
        for name, ids, allowed in (
            ("observerUids", self.observer_uids, self.allow_uids),
            ("operatorUids", self.operator_uids, self.allow_uids),
            ("observerGids", self.observer_gids, self.allow_gids),
            ("operatorGids", self.operator_gids, self.allow_gids),
        ):
            if not set(ids) <= set(allowed):
                whole = "allowUids" if name.endswith("Uids") else "allowGids"
                raise ValueError(f"{name} must be a subset of {whole} (the control socket is never wider)")
        for name, ids, allowed in (
            ("platformAllowUids", self.platform_allow_uids, self.allow_uids),
            ("platformAllowGids", self.platform_allow_gids, self.allow_gids),
        ):
            extra = sorted(set(ids) - set(allowed))
            if extra:
                whole = "allowUids" if name.endswith("Uids") else "allowGids"
                raise ValueError(
                    f"{name} must be a subset of {whole}: {extra[0]} could never connect to the subscribe socket"
                )
        for kind, observers, operators in (
            ("uid", self.observer_uids, self.operator_uids),
            ("gid", self.observer_gids, self.operator_gids),
        ):
            both = sorted(set(observers) & set(operators))
            if both:
                lists = "observerUids and operatorUids" if kind == "uid" else "observerGids and operatorGids"
                raise ValueError(f"{kind} {both[0]} is in both {lists}: give each one role")
        if self.subscribe is not None and self.subscribe == self.control:
            raise ValueError("subscribe and control must be two different paths")

    @property
    def mode_bits(self) -> int:
        return int(self.mode, 8)


class EventsConfig(msgspec.Struct, frozen=True, rename="camel", forbid_unknown_fields=True):
    """``[events]``: the platform events' windows in memory (docs/configuration.md, docs/socket-api.md)."""

    # per session: the last records kept for subscribers that come back with ``since``
    window_events: Annotated[int, msgspec.Meta(ge=0, le=100_000)] = 100
    window_bytes: Annotated[int, msgspec.Meta(ge=0, le=1 << 30)] = 64 * 1024
    # every session's window together: past it the daemon's oldest records go first
    window_total_bytes: Annotated[int, msgspec.Meta(ge=0, le=1 << 40)] = 256 * 1024 * 1024
    # history and snapshot reads that close gaps, at most this many at once
    resync_in_flight: Annotated[int, msgspec.Meta(ge=1, le=10_000)] = 16


# ``[telemetry] prometheus``: ``port``, ``:port``, ``host:port`` with an IPv4 literal or ``localhost``, ``[v6]:port``
PROMETHEUS_ADDRESS = r"^(?:(?:\[[0-9A-Fa-f:.]+\]|[0-9]{1,3}(?:\.[0-9]{1,3}){3}|localhost)?:)?[0-9]{1,5}$"


class TelemetrySettings(msgspec.Struct, frozen=True, rename="camel", forbid_unknown_fields=True):
    """``[telemetry]``: OpenTelemetry export (docs/telemetry.md); each key wins over its OTEL_* variable."""

    # the collector's OTLP/HTTP base URL (``/v1/traces``, ``/v1/metrics`` appended); none: off
    # unless OTEL_EXPORTER_OTLP_*ENDPOINT says otherwise
    endpoint: Annotated[str, msgspec.Meta(pattern=r"^https?://[^\s/]+(/\S*)?$")] | None = None
    # share of successful operations traced; failures, retries and terminations always are
    sample_ratio: Annotated[float, msgspec.Meta(ge=0.0, le=1.0)] | None = None
    service_name: _Id | None = None
    # a credential file of collector headers (``name=value``, one per line or comma-separated)
    headers_file: str | None = None
    # a Prometheus scrape endpoint, ``host:port`` (an IP literal or ``localhost``) or a bare ``port``
    # (127.0.0.1); needs the ``[prometheus]`` extra (docs/telemetry.md, "Prometheus")
    prometheus: Annotated[str, msgspec.Meta(pattern=PROMETHEUS_ADDRESS)] | None = None


class TaxonomySettings(msgspec.Struct, frozen=True, rename="camel", forbid_unknown_fields=True):
    """``[taxonomy]``: a taxonomy change tried on what production sees (docs/taxonomy.md, "Capture",
    "Shadow"). The active version stays ``daemon.taxonomyVersion``."""

    # every classified failure's envelope, reduced to what routes it, appended to this file (a path
    # relative to the state directory, or an absolute one inside it); none: off
    capture: Annotated[str, msgspec.Meta(min_length=1, max_length=4096)] | None = None
    # the capture file and its rotated predecessors (PATH.1, PATH.2, ...), all of them together at
    # most captureMaxBytes
    capture_files: Annotated[int, msgspec.Meta(ge=1, le=100)] = 3
    capture_max_bytes: Annotated[int, msgspec.Meta(ge=4096, le=1 << 40)] = 64 * 1024 * 1024
    # a candidate version (or overlay path) that classifies every failure too, never routes
    shadow: Annotated[str, msgspec.Meta(min_length=1, max_length=4096)] | None = None


class Platforms(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    genesys: GenesysConfig | None = None
    cxone: CxoneConfig | None = None


class Config(msgspec.Struct, frozen=True, rename="camel", forbid_unknown_fields=True):
    # the default tenant; may be left out when [tenants.*] tables name every platform used
    platforms: Platforms = msgspec.field(default_factory=Platforms)
    # named tenants: one Genesys org or CXone business unit each (docs/configuration.md, "Tenants");
    # the [platforms.*] tables are the default tenant
    tenants: dict[str, TenantTable] = msgspec.field(default_factory=dict)
    sessions: list[SessionSpec] = msgspec.field(default_factory=list)
    daemon: DaemonSettings = msgspec.field(default_factory=DaemonSettings)
    reconnect: ReconnectConfig = msgspec.field(default_factory=ReconnectConfig)
    circuit: CircuitSettings = msgspec.field(default_factory=CircuitSettings)
    tokens: TokenSettings = msgspec.field(default_factory=TokenSettings)
    telemetry: TelemetrySettings = msgspec.field(default_factory=TelemetrySettings)
    admission: AdmissionSettings = msgspec.field(default_factory=AdmissionSettings)
    sockets: SocketsConfig = msgspec.field(default_factory=SocketsConfig)
    events: EventsConfig = msgspec.field(default_factory=EventsConfig)
    # the durable store and attribute updates (docs/attributes.md; supervisor/config_durable.py)
    store: StoreConfig = msgspec.field(default_factory=StoreConfig)
    # with [store] url: this daemon's membership of the fleet sharing that store (supervisor/fleet/)
    fleet: FleetConfig = msgspec.field(default_factory=FleetConfig)
    # what a stop does to the sessions with a store: hand them over (default) or end them
    handover: HandoverConfig = msgspec.field(default_factory=HandoverConfig)
    attributes: AttributesConfig = msgspec.field(default_factory=AttributesConfig)
    taxonomy: TaxonomySettings = msgspec.field(default_factory=TaxonomySettings)


_INVALID_ENUM = "invalid enum value "


def _located(origin: str, exc: msgspec.ValidationError) -> ConfigError:
    path, problem = located(str(exc))
    if problem.startswith(_INVALID_ENUM):
        kind = _field_type(path)
        if kind is Platform:
            # a session's platform, said as the configuration docs say it: "expected 'genesys' or 'cxone'"
            got = problem.removeprefix(_INVALID_ENUM)
            problem = f"expected {' or '.join(repr(p.value) for p in Platform)}, got {got}"
        else:
            choices = _choices(kind)
            if choices:
                problem += f" (expected one of: {', '.join(choices)})"
    return ConfigError(f"{origin}: {path or '(top level)'}: {problem}")


def _field_type(path: str) -> Any:
    """The type of the field at ``path`` (``admission.probe``, ``sessions[0].kind``); None if none."""
    kind: Any = Config
    for name in re.sub(r"\[\d+\]", "", path).split("."):
        while typing.get_origin(kind) in (list, types.UnionType, typing.Union):
            kind = next(a for a in typing.get_args(kind) if a is not type(None))
        if not (isinstance(kind, type) and issubclass(kind, msgspec.Struct)):
            return None
        by_name = {f.encode_name: f.type for f in msgspec.structs.fields(kind)}
        if name not in by_name:
            return None
        kind = by_name[name]
    while typing.get_origin(kind) in (types.UnionType, typing.Union, typing.Annotated):
        kind = next(a for a in typing.get_args(kind) if a is not type(None))
    return kind


def _choices(kind: Any) -> list[str]:
    """The values a field of type ``kind`` accepts, if it is a choice."""
    if typing.get_origin(kind) is typing.Literal:
        return [str(a) for a in typing.get_args(kind)]
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return [str(m.value) for m in kind]
    return []


def parse_config(data: Mapping[str, Any] | str, origin: str) -> Config:
    """Validate a configuration document; ``origin`` names it in errors."""
    try:
        raw = parse_toml(data) if isinstance(data, str) else dict(data)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{origin}: not valid TOML: {exc}") from None
    except LimitError as exc:
        raise ConfigError(f"{origin}: {exc}") from None
    _check_tenant_tables(raw.get("tenants"), origin)
    try:
        config = msgspec.convert(raw, Config)
    except msgspec.ValidationError as exc:
        raise _located(origin, exc) from None
    _check(config, origin)
    return config


def _check_tenant_tables(tenants: object, origin: str) -> None:
    """Each ``[tenants.NAME]`` table on its own, so an error names its table (msgspec locates an error
    in a table of tables as ``tenants[...]``): the name, then the table as ``[platforms.<platform>]``'s
    model validates it."""
    if not isinstance(tenants, Mapping):
        return  # not a table: the whole document's validation says so
    for name, table in tenants.items():
        if not isinstance(name, str) or TENANT_NAME.fullmatch(name) is None:
            raise ConfigError(
                f"{origin}: tenants.{name}: invalid tenant name: 1 to 64 letters, digits, '-' or '_', "
                "starting with a letter or digit"
            )
        if isinstance(table, Mapping) and table.get("platform") not in {p.value for p in Platform}:
            got = table.get("platform")
            problem = "required" if got is None else f"got {got!r}"
            raise ConfigError(
                f"{origin}: tenants.{name}.platform: expected {' or '.join(repr(p.value) for p in Platform)}, "
                f"{problem}"
            )
        try:
            msgspec.convert(table, TenantTable)
        except msgspec.ValidationError as exc:
            path, problem = located(str(exc))
            suffix = path.removeprefix("$").lstrip(".")
            field = f"tenants.{name}.{suffix}" if suffix else f"tenants.{name}"
            raise ConfigError(f"{origin}: {field}: {problem}") from None


def tenant_tables(config: Config) -> list[tuple[str | None, GenesysConfig | CxoneConfig]]:
    """Every configured tenant: the default one's tables (name None), then the named ones, by name."""
    out: list[tuple[str | None, GenesysConfig | CxoneConfig]] = []
    if config.platforms.genesys is not None:
        out.append((None, config.platforms.genesys))
    if config.platforms.cxone is not None:
        out.append((None, config.platforms.cxone))
    out.extend((name, config.tenants[name]) for name in sorted(config.tenants))
    return out


def table_key(tenant: str | None, platform: Platform) -> str:
    """Where a tenant's table is in the file, as errors name it: ``platforms.genesys``, ``tenants.NAME``."""
    return f"platforms.{platform.value}" if tenant is None else f"tenants.{tenant}"


def platform_of(table: GenesysConfig | CxoneConfig) -> Platform:
    return Platform.GENESYS if isinstance(table, GenesysConfig) else Platform.CXONE


def _check_url(origin: str, key: str, url: str | None, schemes: tuple[str, ...]) -> None:
    if url is not None:
        problem = url_problem(url, schemes)
        if problem is not None:
            raise ConfigError(f"{origin}: {key}: {problem}")


def _check_urls(config: Config, origin: str) -> None:
    for tenant, table in tenant_tables(config):
        at = table_key(tenant, platform_of(table))
        if isinstance(table, GenesysConfig):
            _check_url(origin, f"{at}.loginUrl", table.login_url, HTTP)
            _check_url(origin, f"{at}.apiUrl", table.api_url, HTTP)
            _check_url(origin, f"{at}.webmessagingUrl", table.webmessaging_url, WS)
            _check_url(origin, f"{at}.streamingUrl", table.streaming_url, WS)
        else:
            _check_url(origin, f"{at}.authUrl", table.auth_url, HTTP)
            _check_url(origin, f"{at}.apiUrl", table.api_url, HTTP)


def _check(config: Config, origin: str) -> None:
    _check_urls(config, origin)
    if config.reconnect.first_delay_min > config.reconnect.first_delay_max:
        raise ConfigError(f"{origin}: reconnect.firstDelayMin: must be <= reconnect.firstDelayMax")
    for tenant, table in tenant_tables(config):
        if isinstance(table, CxoneConfig):
            _check_cxone(table, table_key(tenant, Platform.CXONE), origin)
    channels: dict[str | None, int] = {}
    seen: set[str] = set()
    for i, spec in enumerate(config.sessions):
        where = f"sessions[{i}]"
        if spec.id in seen:
            raise ConfigError(f"{origin}: {where}.id: duplicate session id '{spec.id}'")
        seen.add(spec.id)
        if spec.kind is SessionKind.NOTIFICATIONS:
            channels[spec.tenant] = channels.get(spec.tenant, 0) + 1
        check_session(config, spec, origin, where, notifications=channels.get(spec.tenant, 0))


def _check_cxone(cxone: CxoneConfig, at: str, origin: str) -> None:
    # CXone's back-end login is an access key's OpenID password grant (docs/configuration.md);
    # no vendor source shows a client-credentials one
    access_key = (
        ("username", cxone.username, "the access key id"),
        ("passwordFile", cxone.password_file, "the file holding the access key secret"),
    )
    for key, value, what in access_key:
        if value is None:
            raise ConfigError(f"{origin}: {at}.{key}: required: {what} (CXone logs in with an access key)")
    if cxone.poll_watchdog <= cxone.poll_timeout:
        raise ConfigError(f"{origin}: {at}.pollWatchdog: must exceed pollTimeout ({cxone.poll_timeout} s)")


def session_table(config: Config, spec: SessionSpec) -> GenesysConfig | CxoneConfig | None:
    """The table ``spec`` runs on: its tenant's (``[tenants.NAME]``), else ``[platforms.<platform>]``;
    None when there is none (or the tenant is of another platform)."""
    if spec.tenant is None:
        table: GenesysConfig | CxoneConfig | None = getattr(config.platforms, spec.platform.value)
        return table
    named = config.tenants.get(spec.tenant)
    return named if named is not None and platform_of(named) is spec.platform else None


def check_session(config: Config, spec: SessionSpec, origin: str, where: str, *, notifications: int) -> None:
    """Whether ``spec`` can run on ``config``'s platforms: the one check of a session entry, for the
    file's ``[[sessions]]`` and for sessions added over the control socket alike.

    ``notifications``: the notifications sessions of the session's tenant there would be with this one
    (Genesys' channel limit is per OAuth client, and each tenant has its own).
    """
    if spec.tenant is not None:
        named = config.tenants.get(spec.tenant)
        if named is None:
            raise ConfigError(
                f"{origin}: {where}.tenant: no tenant '{spec.tenant}' ([tenants.{spec.tenant}])"
            )
        if platform_of(named) is not spec.platform:
            raise ConfigError(
                f"{origin}: {where}.tenant: tenant '{spec.tenant}' is a {platform_of(named)} tenant, "
                f"not {spec.platform}"
            )
    elif getattr(config.platforms, spec.platform.value) is None:
        raise ConfigError(f"{origin}: {where}.platform: [platforms.{spec.platform}] is not configured")
    if spec.platform is Platform.CXONE and spec.kind is not SessionKind.AGENT_SESSION:
        raise ConfigError(f"{origin}: {where}.kind: a cxone session is an 'agent-session'")
    if spec.platform is Platform.GENESYS and spec.kind is SessionKind.AGENT_SESSION:
        raise ConfigError(f"{origin}: {where}.kind: a genesys session is 'webmessaging' or 'notifications'")
    genesys = session_table(config, spec)
    at = table_key(spec.tenant, Platform.GENESYS)
    if spec.kind is SessionKind.WEBMESSAGING and isinstance(genesys, GenesysConfig):
        if genesys.webmessaging_url is None:
            raise ConfigError(f"{origin}: {at}.webmessagingUrl: required by {where}")
        if (spec.deployment_id or genesys.deployment_id) is None:
            raise ConfigError(f"{origin}: {where}.deploymentId: required (or {at}.deploymentId)")
    if spec.kind is SessionKind.NOTIFICATIONS and isinstance(genesys, GenesysConfig):
        if genesys.client_id is None:
            raise ConfigError(f"{origin}: {at}.clientId: required by {where}")
        if spec.agent_id is None:
            # the channel's topic is the agent's (v2.users.{id}.conversations): no agent, no topic
            raise ConfigError(f"{origin}: {where}.agentId: required by a notifications session")
        capacity = notification_capacity(genesys)
        if notifications > capacity:
            # a 21st channel would evict the oldest: two sessions would fight over a channel forever
            raise ConfigError(
                f"{origin}: {where}.kind: more than {capacity} notifications sessions; "
                f"Genesys allows {GENESYS_CHANNELS_PER_CLIENT} notification channels per user and app "
                f"({at}.clientId is shared by all of them)"
            )


def notification_capacity(genesys: GenesysConfig) -> int:
    """How many notifications sessions the Genesys client can carry: one per channel, or, with
    shared channels, one topic each on at most 20 channels of 1,000 topics."""
    per_channel = genesys.topics_per_channel if genesys.shared_channels else 1
    return GENESYS_CHANNELS_PER_CLIENT * per_channel


#: the platform each session kind runs on (a spec added over the control socket may leave it out)
KIND_PLATFORM: Final[Mapping[SessionKind, Platform]] = {
    SessionKind.WEBMESSAGING: Platform.GENESYS,
    SessionKind.NOTIFICATIONS: Platform.GENESYS,
    SessionKind.AGENT_SESSION: Platform.CXONE,
}


def parse_session(
    raw: object, config: Config, origin: str, where: str, *, notifications: int | Mapping[str | None, int]
) -> SessionSpec:
    """One session entry given as data (a JSON object over the control socket), validated exactly as
    a ``[[sessions]]`` entry of the file is: the same fields and types, then :func:`check_session`.

    ``platform`` may be left out: the kind implies it (a given one is checked against the kind).
    ``notifications``: the notifications sessions there are already, per tenant (None: the default
    tenant; a bare count is the default tenant's). Errors are located at ``where``
    (``sessions[3].kind: ...``), as the file's are.
    """
    if isinstance(raw, Mapping) and "platform" not in raw and isinstance(raw.get("kind"), str):
        implied = next((p for k, p in KIND_PLATFORM.items() if k.value == raw["kind"]), None)
        if implied is not None:
            raw = {**raw, "platform": implied.value}
    try:
        spec = msgspec.convert(raw, SessionSpec)
    except msgspec.ValidationError as exc:
        path, problem = located(str(exc))
        # msgspec locates it in the entry ($.kind): said as the file's errors say it (sessions[3].kind)
        suffix = path.removeprefix("$").lstrip(".")
        field = f"{where}.{suffix}" if suffix else where
        wrapped = msgspec.ValidationError(f"{problem} - at `$.{field}`")
        raise _located(origin, wrapped) from None
    extra = 1 if spec.kind is SessionKind.NOTIFICATIONS else 0
    if isinstance(notifications, Mapping):
        there = notifications.get(spec.tenant, 0)
    else:
        there = notifications if spec.tenant is None else 0
    check_session(config, spec, origin, where, notifications=there + extra)
    return spec


def load_config(path: str | Path) -> Config:
    """Read and validate a configuration file."""
    p = Path(path)
    try:
        text = read_capped(p, MAX_CONFIG_BYTES).decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{p}: no such configuration file") from None
    except LimitError as exc:
        raise ConfigError(f"{p}: {exc}") from None
    except (OSError, ValueError) as exc:  # ValueError: undecodable, or a NUL in the path
        raise ConfigError(f"{p}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    return parse_config(text, str(p))
