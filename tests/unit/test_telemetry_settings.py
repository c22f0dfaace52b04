"""Telemetry settings: the [telemetry] table over the standard OTEL_* variables (docs/telemetry.md)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from supervisor.config import TelemetrySettings, parse_config
from supervisor.errors import ConfigError
from supervisor.telemetry.sampling import Sampler
from supervisor.telemetry.settings import DEFAULT_SERVICE_NAME, parse_headers, resolve_settings

TABLE = TelemetrySettings()


def test_off_unless_an_endpoint_is_configured() -> None:
    assert resolve_settings(TABLE, {}) is None
    assert (
        resolve_settings(TelemetrySettings(sample_ratio=0.5, service_name="x"), {"OTEL_SERVICE_NAME": "y"})
        is None
    )


def test_otel_exporter_otlp_endpoint_alone_turns_it_on_with_the_standard_defaults() -> None:
    settings = resolve_settings(TABLE, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/"})
    assert settings is not None
    assert settings.traces_endpoint == "http://collector:4318/v1/traces"
    assert settings.metrics_endpoint == "http://collector:4318/v1/metrics"
    assert settings.sample_ratio == 1.0  # the SDK's default sampler: parentbased_always_on
    assert settings.service_name == DEFAULT_SERVICE_NAME
    assert settings.headers == {}


def test_a_signal_specific_endpoint_is_used_as_is_and_alone() -> None:
    settings = resolve_settings(TABLE, {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/custom/traces"})
    assert settings is not None
    assert settings.traces_endpoint == "http://c:4318/custom/traces"
    assert settings.metrics_endpoint is None  # metrics stay off: nothing says where they go


def test_the_config_table_wins_over_the_environment() -> None:
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://env:4318",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://env:4318/v1/traces",
        "OTEL_SERVICE_NAME": "from-env",
        "OTEL_TRACES_SAMPLER": "traceidratio",
        "OTEL_TRACES_SAMPLER_ARG": "0.25",
    }
    table = TelemetrySettings(endpoint="https://table:4318", sample_ratio=0.1, service_name="from-table")
    settings = resolve_settings(table, env)
    assert settings is not None
    assert settings.traces_endpoint == "https://table:4318/v1/traces"
    assert settings.metrics_endpoint == "https://table:4318/v1/metrics"
    assert settings.sample_ratio == 0.1
    assert settings.service_name == "from-table"


@pytest.mark.parametrize(
    ("sampler", "arg", "ratio"),
    [
        ("always_on", None, 1.0),
        ("always_off", None, 0.0),
        ("parentbased_always_off", None, 0.0),
        ("traceidratio", "0.3", 0.3),
        ("parentbased_traceidratio", "0.05", 0.05),
    ],
)
def test_otel_traces_sampler_sets_the_ratio(sampler: str, arg: str | None, ratio: float) -> None:
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_SAMPLER": sampler}
    if arg is not None:
        env["OTEL_TRACES_SAMPLER_ARG"] = arg
    settings = resolve_settings(TABLE, env)
    assert settings is not None and settings.sample_ratio == ratio


def test_service_name_and_resource_attributes_from_the_environment() -> None:
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318",
        "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=prod,service.name=from-resource,team=cc%20ops",
    }
    settings = resolve_settings(TABLE, env)
    assert settings is not None
    assert settings.service_name == "from-resource"
    assert settings.resource["team"] == "cc ops"
    settings = resolve_settings(TABLE, {**env, "OTEL_SERVICE_NAME": "named"})
    assert settings is not None and settings.service_name == "named"


def test_otel_sdk_disabled_turns_everything_off() -> None:
    table = TelemetrySettings(endpoint="http://table:4318")
    assert resolve_settings(table, {"OTEL_SDK_DISABLED": "true"}) is None
    assert resolve_settings(table, {"OTEL_SDK_DISABLED": "false"}) is not None


@pytest.mark.parametrize(
    "name",
    ["OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_METRICS_HEADERS"],
)
def test_collector_credentials_never_come_from_the_environment(name: str) -> None:
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", name: "authorization=Bearer%20leaked"}
    with pytest.raises(ConfigError) as info:
        resolve_settings(TABLE, env)
    assert name in str(info.value) and "telemetry.headersFile" in str(info.value)
    assert "leaked" not in str(info.value)


@pytest.mark.parametrize("protocol", ["grpc", "http/json"])
def test_only_otlp_http_protobuf_is_built_in(protocol: str) -> None:
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": protocol}
    with pytest.raises(ConfigError, match="http/protobuf"):
        resolve_settings(TABLE, env)
    ok = {**env, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}
    assert resolve_settings(TABLE, ok) is not None


def test_headers_come_from_a_credential_file_read_like_the_other_secrets(tmp_path: Path) -> None:
    creds = tmp_path / "creds"
    creds.mkdir()
    (creds / "otel-headers").write_text("Authorization=Bearer%20abc123\nx-tenant=eu-1, x-key = k\n")
    table = TelemetrySettings(endpoint="http://c:4318", headers_file="otel-headers")
    # $CREDENTIALS_DIRECTORY first (systemd LoadCredential=), then beside the config
    settings = resolve_settings(table, {"CREDENTIALS_DIRECTORY": str(creds)}, config_dir=tmp_path)
    assert settings is not None
    assert settings.headers == {"authorization": "Bearer abc123", "x-tenant": "eu-1", "x-key": "k"}
    assert "abc123" not in repr(settings)
    assert set(settings.secret_values) == {"Bearer abc123", "eu-1", "k"}


def test_a_missing_or_malformed_headers_file_is_a_config_error_that_never_echoes_it(tmp_path: Path) -> None:
    table = TelemetrySettings(endpoint="http://c:4318", headers_file="nope")
    with pytest.raises(ConfigError, match=r"telemetry\.headersFile: credential file not found"):
        resolve_settings(table, {}, config_dir=tmp_path)
    (tmp_path / "bad").write_text("just-a-secret-token")
    table = TelemetrySettings(endpoint="http://c:4318", headers_file="bad")
    with pytest.raises(ConfigError) as info:
        resolve_settings(table, {}, config_dir=tmp_path)
    assert "just-a-secret-token" not in str(info.value)
    with pytest.raises(ConfigError):
        parse_headers("=value", "k")


def test_the_config_table_is_validated() -> None:
    base = {"platforms": {}}
    config = parse_config(
        {**base, "telemetry": {"endpoint": "http://127.0.0.1:4318", "sampleRatio": 0.2}}, "t"
    )
    assert config.telemetry.endpoint == "http://127.0.0.1:4318" and config.telemetry.sample_ratio == 0.2
    with pytest.raises(ConfigError, match=r"telemetry\.sampleRatio"):
        parse_config({**base, "telemetry": {"sampleRatio": 1.5}}, "t")
    with pytest.raises(ConfigError, match=r"telemetry\.endpoint"):
        parse_config({**base, "telemetry": {"endpoint": "grpc://c:4317"}}, "t")
    with pytest.raises(ConfigError, match="unknown field `headers`"):
        parse_config({**base, "telemetry": {"headers": "x=y"}}, "t")  # no inline credentials


def test_the_sampler_decides_by_ratio_per_operation_and_once_per_session() -> None:
    import random

    assert not any(Sampler(0.0).coin() for _ in range(1000))
    assert all(Sampler(1.0).coin() for _ in range(1000))
    half = Sampler(0.5, random.Random(1))
    share = sum(half.coin() for _ in range(10_000)) / 10_000
    assert 0.45 < share < 0.55
    sampler = Sampler(0.5)
    decisions = {sid: sampler.session(sid) for sid in (f"s-{i}" for i in range(400))}
    assert all(sampler.session(sid) is d for sid, d in decisions.items())  # stable per id
    assert 0.35 < sum(decisions.values()) / len(decisions) < 0.65
    with pytest.raises(ValueError, match="ratio"):
        Sampler(1.5)


# -- the Prometheus endpoint ([telemetry] prometheus) --------------------------------------------------


@pytest.mark.parametrize(
    ("value", "address"),
    [
        ("9464", ("127.0.0.1", 9464)),  # a bare port is loopback
        (":9464", ("127.0.0.1", 9464)),
        ("localhost:9100", ("127.0.0.1", 9100)),
        ("127.0.0.1:9464", ("127.0.0.1", 9464)),
        ("[::1]:9464", ("::1", 9464)),
        # any other address only when written out: the endpoint has no authentication
        ("0.0.0.0:9464", ("0.0.0.0", 9464)),
        ("10.1.2.3:9464", ("10.1.2.3", 9464)),
    ],
)
def test_the_prometheus_endpoint_is_loopback_unless_an_address_is_written(
    value: str, address: tuple[str, int]
) -> None:
    settings = resolve_settings(TelemetrySettings(prometheus=value), {})
    assert settings is not None and settings.enabled and settings.metered
    assert settings.prometheus == address
    # Prometheus alone: nothing is pushed, no span is traced
    assert settings.traces_endpoint is None and settings.metrics_endpoint is None


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('prometheus = "metrics.example:9464"', "telemetry.prometheus"),  # a DNS name: not accepted
        ('prometheus = "9464/metrics"', "telemetry.prometheus"),
        ('prometheus = "http://127.0.0.1:9464"', "telemetry.prometheus"),
    ],
)
def test_a_prometheus_address_that_is_not_host_port_is_refused_where_it_is_read(
    text: str, problem: str
) -> None:
    with pytest.raises(ConfigError, match=problem):
        parse_config(f"[platforms]\n[telemetry]\n{text}\n", "supervisor.toml")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0", "expected a port from 1 to 65535"),
        ("70000", "expected a port from 1 to 65535"),
        ("999.1.1.1:9464", "'999.1.1.1' is not an IP address"),
    ],
)
def test_a_prometheus_address_out_of_range_is_one_located_line(value: str, message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        resolve_settings(
            TelemetrySettings(prometheus=value), {}, prometheus_key="a.toml: telemetry.prometheus"
        )
    assert str(raised.value) == f"a.toml: telemetry.prometheus: {value!r}: {message}"


def test_otel_sdk_disabled_turns_the_prometheus_endpoint_off_too() -> None:
    assert resolve_settings(TelemetrySettings(prometheus="9464"), {"OTEL_SDK_DISABLED": "true"}) is None


def test_a_prometheus_endpoint_without_the_extra_is_one_line_naming_the_key_and_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the extra's module cannot be imported (None in sys.modules: what an absent package does)
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.prometheus", None)
    with pytest.raises(ConfigError) as raised:
        resolve_settings(
            TelemetrySettings(prometheus="9464"), {}, prometheus_key="a.toml: telemetry.prometheus"
        )
    (line,) = str(raised.value).splitlines()
    assert line.startswith(
        "a.toml: telemetry.prometheus: the Prometheus endpoint needs the [prometheus] extra "
        "(pip install 'session-supervisor[prometheus]'): "
    )
