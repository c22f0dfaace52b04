"""Where telemetry goes and how much of it: the ``[telemetry]`` table over the standard OTEL_* variables.

Precedence, key by key (docs/telemetry.md): the config table wins; else the standard
environment variable; else the OpenTelemetry default. Telemetry is **off** unless an endpoint
is configured (``telemetry.endpoint``, ``OTEL_EXPORTER_OTLP_ENDPOINT`` or a signal's own
``OTEL_EXPORTER_OTLP_{TRACES,METRICS}_ENDPOINT``), and ``OTEL_SDK_DISABLED=true`` turns it off
whatever else says.

Collector credentials are secrets: they come from ``telemetry.headersFile``, a credential file
read like the platforms' (:func:`supervisor.config.read_secret`: ``$CREDENTIALS_DIRECTORY``
first), never from the unit's environment. ``OTEL_EXPORTER_OTLP_*HEADERS`` is refused rather
than ignored: the OTLP exporter would otherwise read it behind our back.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote

from supervisor.config import TelemetrySettings as TelemetryTable
from supervisor.config import read_secret
from supervisor.errors import ConfigError
from supervisor.telemetry.environment import SdkSettings, check_sdk_reads, read_sdk_settings

__all__ = ["DEFAULT_SERVICE_NAME", "ExportSettings", "resolve_settings"]

DEFAULT_SERVICE_NAME = "session-supervisor"
_PROTOCOL = "http/protobuf"
_HEADER_VARS = (
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    "OTEL_EXPORTER_OTLP_METRICS_HEADERS",
)
_PROTOCOL_VARS = (
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
)


@dataclass(frozen=True, slots=True)
class ExportSettings:
    """Resolved telemetry settings; ``traces_endpoint``/``metrics_endpoint`` are full signal URLs."""

    traces_endpoint: str | None
    metrics_endpoint: str | None
    sample_ratio: float = 1.0
    service_name: str = DEFAULT_SERVICE_NAME
    resource: Mapping[str, str] = field(default_factory=dict)
    # collector headers from the credential file; their values are secrets (scrubbed everywhere)
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    # per-request export timeout; None: the exporter's own (OTEL_EXPORTER_OTLP_TIMEOUT, 10 s)
    export_timeout_s: float | None = None
    # metric export interval; None: OTEL_METRIC_EXPORT_INTERVAL (60 s)
    metric_interval_s: float | None = None
    # what the SDK's constructors would read from OTEL_* (checked; handed over explicitly)
    sdk: SdkSettings = field(default_factory=SdkSettings)
    # the Prometheus scrape endpoint's (host, port); None: none (``[telemetry] prometheus``)
    prometheus: tuple[str, int] | None = None

    @property
    def enabled(self) -> bool:
        return self.traces_endpoint is not None or self.metrics_endpoint is not None or self.metered

    @property
    def metered(self) -> bool:
        """Metrics are collected: pushed over OTLP, scraped by Prometheus, or both."""
        return self.metrics_endpoint is not None or self.prometheus is not None

    @property
    def secret_values(self) -> tuple[str, ...]:
        return tuple(v for v in self.headers.values() if v)


def resolve_settings(
    table: TelemetryTable,
    environ: Mapping[str, str],
    *,
    config_dir: Path | None = None,
    prometheus_key: str = "telemetry.prometheus",
) -> ExportSettings | None:
    """The settings to export with, or None when telemetry is off. Raises ConfigError.

    ``prometheus_key`` locates ``table.prometheus`` in the errors about it (the file and the key).
    """
    if _true(environ.get("OTEL_SDK_DISABLED")):
        return None
    traces = _signal_endpoint(table.endpoint, environ, "TRACES", "v1/traces")
    metrics = _signal_endpoint(table.endpoint, environ, "METRICS", "v1/metrics")
    where = prometheus_key
    prometheus = None if table.prometheus is None else prometheus_address(table.prometheus, where)
    if traces is None and metrics is None and prometheus is None:
        return None
    if traces is not None or metrics is not None:
        _check_otlp_environment(environ)
    # the values the SDK's constructors would read, checked and handed to them (environment.py);
    # what it reads from the process environment itself is checked there too
    sdk = read_sdk_settings(environ)
    check_sdk_reads(environ)
    if environ is not os.environ:
        check_sdk_reads(os.environ)
    if prometheus is not None:
        check_prometheus_extra(where)
    secret = read_secret(
        table.headers_file, key="telemetry.headersFile", config_dir=config_dir, environ=environ
    )
    headers = {} if secret is None else parse_headers(secret.reveal(), "telemetry.headersFile")
    resource = _resource_attributes(environ)
    service = table.service_name or environ.get("OTEL_SERVICE_NAME") or resource.get("service.name")
    return ExportSettings(
        traces_endpoint=traces,
        metrics_endpoint=metrics,
        sample_ratio=table.sample_ratio if table.sample_ratio is not None else _env_ratio(environ),
        service_name=service or DEFAULT_SERVICE_NAME,
        resource=resource,
        headers=headers,
        sdk=sdk,
        prometheus=prometheus,
    )


def _check_otlp_environment(environ: Mapping[str, str]) -> None:
    """What the OTLP exporters would read behind our back: credentials, another protocol."""
    # the OTLP exporter reads these straight from the process environment: check both
    for env in (environ, os.environ):
        for name in _HEADER_VARS:
            if env.get(name):
                raise ConfigError(
                    f"{name} is set: collector credentials come from telemetry.headersFile "
                    "(a credential file), never from the environment"
                )
        for name in _PROTOCOL_VARS:
            value = env.get(name)
            if value and value.strip().lower() != _PROTOCOL:
                raise ConfigError(
                    f"{name}={value}: only OTLP over HTTP with protobuf ({_PROTOCOL}) is built in"
                )


#: how to get what ``[telemetry] prometheus`` needs (pyproject.toml's optional dependencies)
PROMETHEUS_EXTRA = "pip install 'session-supervisor[prometheus]'"
# the module of the [prometheus] extra the scrape endpoint is built on (supervisor/telemetry/prometheus.py)
PROMETHEUS_MODULE = "opentelemetry.exporter.prometheus"


def prometheus_address(value: str, where: str) -> tuple[str, int]:
    """``[telemetry] prometheus`` as (host, port): a bare port (or ``:port``) is loopback, 127.0.0.1.

    The host is an IP literal (``[...]`` around IPv6) or ``localhost`` (127.0.0.1): a name that DNS
    could answer differently from one start to the next is not accepted. Any other address than
    loopback is bound as written: the endpoint has no authentication, so putting it on a network is
    the configuration's explicit choice (docs/telemetry.md, "Prometheus").
    """
    host, sep, port_text = value.rpartition(":")
    if not sep:
        host = ""
    host = host.removeprefix("[").removesuffix("]") or "127.0.0.1"
    if host == "localhost":
        host = "127.0.0.1"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        raise ConfigError(f"{where}: {value!r}: {host!r} is not an IP address") from None
    port = int(port_text) if port_text.isdigit() else 0
    if not 1 <= port <= 65535:
        raise ConfigError(f"{where}: {value!r}: expected a port from 1 to 65535")
    return str(address), port


def check_prometheus_extra(where: str) -> None:
    """The ``[prometheus]`` extra is installed (its import is the check); else one line naming it."""
    try:
        importlib.import_module(PROMETHEUS_MODULE)
    except ImportError as exc:
        raise ConfigError(
            f"{where}: the Prometheus endpoint needs the [prometheus] extra ({PROMETHEUS_EXTRA}): {exc}"
        ) from None


def _true(value: str | None) -> bool:
    return value is not None and value.strip().lower() == "true"


def _signal_endpoint(base: str | None, environ: Mapping[str, str], signal: str, path: str) -> str | None:
    """The spec's rule: a base URL gets the signal path appended; a signal's own URL is used as is."""
    if base is not None:
        return f"{base.rstrip('/')}/{path}"
    own = environ.get(f"OTEL_EXPORTER_OTLP_{signal}_ENDPOINT")
    if own:
        return own
    shared = environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    return f"{shared.rstrip('/')}/{path}" if shared else None


def _env_ratio(environ: Mapping[str, str]) -> float:
    """OTEL_TRACES_SAMPLER(_ARG) as our ratio; the SDK's default (parentbased_always_on) is 1."""
    sampler = (environ.get("OTEL_TRACES_SAMPLER") or "parentbased_always_on").strip().lower()
    if sampler in ("always_off", "parentbased_always_off"):
        return 0.0
    if sampler in ("traceidratio", "parentbased_traceidratio"):
        try:
            ratio = float(environ.get("OTEL_TRACES_SAMPLER_ARG", "1.0"))
        except ValueError:
            raise ConfigError(
                f"OTEL_TRACES_SAMPLER_ARG={environ.get('OTEL_TRACES_SAMPLER_ARG')}: expected a ratio in [0, 1]"
            ) from None
        if not 0.0 <= ratio <= 1.0:
            raise ConfigError(f"OTEL_TRACES_SAMPLER_ARG={ratio}: expected a ratio in [0, 1]")
        return ratio
    return 1.0


def _pairs(text: str) -> list[tuple[str, str]]:
    out = []
    for chunk in text.replace("\n", ",").split(","):
        if not chunk.strip():
            continue
        key, sep, value = chunk.partition("=")
        if not sep or not key.strip():
            raise ValueError(chunk)
        out.append((unquote(key.strip()), unquote(value.strip())))
    return out


def parse_headers(text: str, key: str) -> dict[str, str]:
    """``name=value`` pairs, comma- or newline-separated, percent-decoded (the OTEL_*_HEADERS format)."""
    try:
        pairs = _pairs(text)
    except ValueError:
        # never echo the line: it is a credential
        raise ConfigError(f"{key}: expected name=value pairs (comma- or newline-separated)") from None
    return {name.lower(): value for name, value in pairs}


def _resource_attributes(environ: Mapping[str, str]) -> dict[str, str]:
    text = environ.get("OTEL_RESOURCE_ATTRIBUTES", "")
    try:
        return dict(_pairs(text))
    except ValueError:
        raise ConfigError("OTEL_RESOURCE_ATTRIBUTES: expected key=value pairs, comma-separated") from None


def package_version() -> str:
    try:
        return importlib.metadata.version("session-supervisor")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - running from a bare tree
        return "0"
