"""The daemon's configuration: one TOML file, validated on load (docs/configuration.md).

Errors name the file, the key and the problem (``supervisor.toml: sessions[2].platform:
invalid enum value 'genesis'``). Secrets are never in the file itself: ``clientSecretFile``
and ``passwordFile`` name files, relative ones resolved in ``$CREDENTIALS_DIRECTORY``
(systemd ``LoadCredential=``) first, then next to the config file. A secret's value never
appears in any output: :class:`Secret` hides it from ``repr`` and ``str``.
"""

from __future__ import annotations

import enum
import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import msgspec

from supervisor.errors import ConfigError

_Seconds = Annotated[float, msgspec.Meta(ge=0.0, le=86_400.0)]
_PositiveSeconds = Annotated[float, msgspec.Meta(gt=0.0, le=86_400.0)]
_Url = Annotated[str, msgspec.Meta(pattern=r"^(https?|wss?)://[^\s/]+(/\S*)?$")]
_Id = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]


class Secret:
    """A credential value that never prints."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


class SessionKind(enum.StrEnum):
    WEBMESSAGING = "webmessaging"  # Genesys Web Messaging guest session (WebSocket)
    NOTIFICATIONS = "notifications"  # Genesys notifications channel (REST + WebSocket)
    AGENT_SESSION = "agent-session"  # CXone agent session (REST long polling)


class Keepalive(msgspec.Struct, frozen=True, rename="camel", forbid_unknown_fields=True):
    # Genesys SDKs ping every 15 s (platforms.md section 1); a missing pong is 1011/1006
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


class CxoneConfig(msgspec.Struct, frozen=True, rename="camel", forbid_unknown_fields=True):
    auth_url: _Url
    # normally taken from the token response's resource_server_base_uri
    api_url: _Url | None = None
    api_version: Annotated[str, msgspec.Meta(pattern=r"^v\d+\.0$")] = "v23.0"
    client_id: _Id | None = None
    client_secret_file: str | None = None
    username: _Id | None = None
    password_file: str | None = None
    # get-next-event?timeout= (0..60 s, platforms.md section 6)
    poll_timeout: Annotated[int, msgspec.Meta(ge=0, le=60)] = 30
    # restart a poll that never returns (core-sdk watchdog: 90 s)
    poll_watchdog: _PositiveSeconds = 90.0


class SessionSpec(msgspec.Struct, frozen=True, rename="camel", forbid_unknown_fields=True):
    id: _Id
    platform: str
    kind: SessionKind
    agent_id: _Id | None = None
    conversation_id: _Id | None = None
    deployment_id: _Id | None = None
    station_id: _Id | None = None
    station_phone_number: _Id | None = None


class ReconnectConfig(msgspec.Struct, frozen=True, rename="camel", forbid_unknown_fields=True):
    # seed edge case 1: "a randomized initial delay between 2 and 8 seconds"
    first_delay_min: _Seconds = 2.0
    first_delay_max: _Seconds = 8.0
    # beyond the seed: reconnections deferred by an open circuit come back spread over
    # U(0, throttleJitter) past its open period, not all in the same second (docs/benchmarks.md)
    throttle_jitter: _Seconds = 10.0


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


class DaemonSettings(msgspec.Struct, frozen=True, rename="camel", forbid_unknown_fields=True):
    taxonomy_version: str = "v1"
    shutdown_grace: _PositiveSeconds = 10.0
    request_timeout: _PositiveSeconds = 15.0
    # seeds the daemon's randomness (jitter) for reproducible runs; None draws from the OS
    seed: int | None = None


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


class Platforms(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    genesys: GenesysConfig | None = None
    cxone: CxoneConfig | None = None


class Config(msgspec.Struct, frozen=True, rename="camel", forbid_unknown_fields=True):
    platforms: Platforms
    sessions: list[SessionSpec] = msgspec.field(default_factory=list)
    daemon: DaemonSettings = msgspec.field(default_factory=DaemonSettings)
    reconnect: ReconnectConfig = msgspec.field(default_factory=ReconnectConfig)
    circuit: CircuitSettings = msgspec.field(default_factory=CircuitSettings)
    tokens: TokenSettings = msgspec.field(default_factory=TokenSettings)
    telemetry: TelemetrySettings = msgspec.field(default_factory=TelemetrySettings)


_AT = re.compile(r"^(?P<msg>.*?) - at `\$(?P<path>[^`]*)`$")


def _located(origin: str, exc: msgspec.ValidationError) -> ConfigError:
    text = str(exc)
    match = _AT.match(text)
    if not match:
        return ConfigError(f"{origin}: {text}")
    path = match.group("path").lstrip(".") or "(top level)"
    message = match.group("msg")
    return ConfigError(f"{origin}: {path}: {message[0].lower()}{message[1:]}")


def parse_config(data: Mapping[str, Any] | str, origin: str) -> Config:
    """Validate a configuration document; ``origin`` names it in errors."""
    try:
        raw = tomllib.loads(data) if isinstance(data, str) else dict(data)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{origin}: not valid TOML: {exc}") from None
    try:
        config = msgspec.convert(raw, Config)
    except msgspec.ValidationError as exc:
        raise _located(origin, exc) from None
    _check(config, origin)
    return config


def _check(config: Config, origin: str) -> None:
    if config.reconnect.first_delay_min > config.reconnect.first_delay_max:
        raise ConfigError(f"{origin}: reconnect.firstDelayMin: must be <= reconnect.firstDelayMax")
    cxone = config.platforms.cxone
    if cxone is not None and cxone.poll_watchdog <= cxone.poll_timeout:
        raise ConfigError(
            f"{origin}: platforms.cxone.pollWatchdog: must exceed pollTimeout ({cxone.poll_timeout} s)"
        )
    seen: set[str] = set()
    for i, spec in enumerate(config.sessions):
        where = f"sessions[{i}]"
        if spec.id in seen:
            raise ConfigError(f"{origin}: {where}.id: duplicate session id '{spec.id}'")
        seen.add(spec.id)
        if spec.platform not in ("genesys", "cxone"):
            raise ConfigError(
                f"{origin}: {where}.platform: expected 'genesys' or 'cxone', got '{spec.platform}'"
            )
        if getattr(config.platforms, spec.platform) is None:
            raise ConfigError(f"{origin}: {where}.platform: [platforms.{spec.platform}] is not configured")
        if spec.platform == "cxone" and spec.kind is not SessionKind.AGENT_SESSION:
            raise ConfigError(f"{origin}: {where}.kind: a cxone session is an 'agent-session'")
        if spec.platform == "genesys" and spec.kind is SessionKind.AGENT_SESSION:
            raise ConfigError(
                f"{origin}: {where}.kind: a genesys session is 'webmessaging' or 'notifications'"
            )
        genesys = config.platforms.genesys
        if spec.kind is SessionKind.WEBMESSAGING and genesys is not None:
            if genesys.webmessaging_url is None:
                raise ConfigError(f"{origin}: platforms.genesys.webmessagingUrl: required by {where}")
            if (spec.deployment_id or genesys.deployment_id) is None:
                raise ConfigError(
                    f"{origin}: {where}.deploymentId: required (or platforms.genesys.deploymentId)"
                )
        if spec.kind is SessionKind.NOTIFICATIONS and genesys is not None and genesys.client_id is None:
            raise ConfigError(f"{origin}: platforms.genesys.clientId: required by {where}")


def load_config(path: str | Path) -> Config:
    """Read and validate a configuration file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{p}: no such configuration file") from None
    except (OSError, ValueError) as exc:  # ValueError: undecodable, or a NUL in the path
        raise ConfigError(f"{p}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    return parse_config(text, str(p))


def read_secret(
    name: str | None, *, key: str, config_dir: Path | None, environ: Mapping[str, str]
) -> Secret | None:
    """Read a credential file: absolute, else in ``$CREDENTIALS_DIRECTORY``, else beside the config.

    ``key`` names the config key in errors; the value is never included in one.
    """
    if name is None:
        return None
    candidates: list[Path] = []
    p = Path(name)
    if p.is_absolute():
        candidates.append(p)
    else:
        cred_dir = environ.get("CREDENTIALS_DIRECTORY")
        if cred_dir:
            candidates.append(Path(cred_dir) / name)
        if config_dir is not None:
            candidates.append(config_dir / name)
    for candidate in candidates:
        try:
            value = candidate.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            continue
        except (OSError, ValueError) as exc:  # ValueError: undecodable, or a NUL in the name
            raise ConfigError(
                f"{key}: cannot read credential file {candidate}: {type(exc).__name__}"
            ) from None
        if not value:
            raise ConfigError(f"{key}: credential file {candidate} is empty")
        return Secret(value)
    where = " or ".join(str(c) for c in candidates) or name
    raise ConfigError(f"{key}: credential file not found ({where})")


def default_environ() -> Mapping[str, str]:
    return os.environ
