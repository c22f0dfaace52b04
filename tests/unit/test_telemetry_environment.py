"""The OTEL_* variables the OpenTelemetry SDK reads, read and checked first:
supervisor/telemetry/environment.py, and the pipeline handing the values over so the SDK reads none."""

from __future__ import annotations

import subprocess
import sys

import pytest
from opentelemetry.sdk.resources import Resource

from supervisor.errors import ConfigError
from supervisor.telemetry.environment import SdkSettings, check_sdk_reads, read_sdk_settings
from supervisor.telemetry.export import ExportPipeline
from supervisor.telemetry.scrub import Scrubber
from supervisor.telemetry.settings import ExportSettings

REFUSED = [
    ("OTEL_BSP_MAX_QUEUE_SIZE", "-1"),
    ("OTEL_BSP_MAX_QUEUE_SIZE", "0"),
    ("OTEL_BSP_MAX_QUEUE_SIZE", "²"),
    ("OTEL_BSP_MAX_QUEUE_SIZE", "1" * 400),
    ("OTEL_BSP_SCHEDULE_DELAY", "0"),
    ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "0"),
    ("OTEL_BSP_EXPORT_TIMEOUT", "-5"),
    ("OTEL_METRIC_EXPORT_INTERVAL", "0"),
    ("OTEL_METRIC_EXPORT_INTERVAL", "-1"),
    ("OTEL_METRIC_EXPORT_INTERVAL", "nan"),
    ("OTEL_METRIC_EXPORT_INTERVAL", "inf"),
    ("OTEL_METRIC_EXPORT_TIMEOUT", "soon"),
    ("OTEL_EXPORTER_OTLP_TIMEOUT", "0"),
    ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "²"),
    ("OTEL_EXPORTER_OTLP_METRICS_COMPRESSION", "zstd"),
    ("OTEL_METRICS_EXEMPLAR_FILTER", "sometimes"),
]


@pytest.mark.parametrize(("name", "value"), REFUSED)
def test_a_value_the_sdk_would_refuse_is_one_line_naming_the_variable(name: str, value: str) -> None:
    with pytest.raises(ConfigError) as refused:
        read_sdk_settings({name: value})
    message = str(refused.value)
    assert message.startswith(f"{name}=") and "expected" in message
    assert "\n" not in message and len(message) < 160


def test_values_the_sdk_takes_are_handed_over_and_a_signal_wins_over_the_shared_one() -> None:
    sdk = read_sdk_settings(
        {
            "OTEL_BSP_MAX_QUEUE_SIZE": " 2048 ",
            "OTEL_BSP_SCHEDULE_DELAY": "250",
            "OTEL_METRIC_EXPORT_INTERVAL": "1500.5",
            "OTEL_EXPORTER_OTLP_TIMEOUT": "3",
            "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT": "7.5",
            "OTEL_EXPORTER_OTLP_COMPRESSION": "GZIP",
            "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION": "none",
            "OTEL_METRICS_EXEMPLAR_FILTER": "always_off",
        }
    )
    assert (sdk.max_queue_size, sdk.schedule_delay_ms, sdk.metric_interval_ms) == (2048, 250, 1500.5)
    assert (sdk.traces_timeout_s, sdk.metrics_timeout_s) == (3.0, 7.5)
    assert (sdk.traces_compression, sdk.metrics_compression) == ("none", "gzip")
    assert sdk.exemplar_filter == "always_off"
    assert read_sdk_settings({}) == SdkSettings()  # unset: the SDK's defaults (our queue: 8,192)


def test_the_batch_follows_a_small_queue_unless_it_is_set_larger() -> None:
    # the SDK's default batch (512) with a queue of 100 set alone: the SDK refused both
    assert read_sdk_settings({"OTEL_BSP_MAX_QUEUE_SIZE": "100"}).max_export_batch_size == 100
    with pytest.raises(ConfigError, match=r"OTEL_BSP_MAX_EXPORT_BATCH_SIZE=600: more than the batch queue"):
        read_sdk_settings({"OTEL_BSP_MAX_QUEUE_SIZE": "100", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "600"})


@pytest.mark.parametrize(
    ("name", "value", "problem"),
    [
        ("OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", "-1", "expected an integer >= 0"),
        ("OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", "²", "expected an integer >= 0"),
        ("OTEL_PYTHON_CONTEXT", "threadlocal", "expected one of contextvars_context"),
        ("OTEL_PYTHON_EXPORTER_OTLP_HTTP_CREDENTIAL_PROVIDER", "mine", "come from telemetry.headersFile"),
    ],
)
def test_what_the_sdk_reads_by_itself_is_checked(name: str, value: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem) as refused:
        check_sdk_reads({name: value})
    assert str(refused.value).startswith(name)
    check_sdk_reads(
        {"OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT": "Unset", "OTEL_PYTHON_CONTEXT": "contextvars_context"}
    )


@pytest.fixture
def hostile_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """What made the SDK's constructors raise (or look up a provider by name) before they were checked first."""
    for name, value in {
        "OTEL_BSP_MAX_QUEUE_SIZE": "-1",
        "OTEL_BSP_SCHEDULE_DELAY": "0",
        "OTEL_METRIC_EXPORT_INTERVAL": "0",
        "OTEL_METRICS_EXEMPLAR_FILTER": "sometimes",
        "OTEL_PYTHON_METER_PROVIDER": "nowhere",
        "OTEL_EXPORTER_OTLP_COMPRESSION": "zstd",
    }.items():
        monkeypatch.setenv(name, value)


def test_the_pipeline_hands_every_value_over_so_the_sdk_reads_none(hostile_environment: None) -> None:
    """The settings were read from a clean environment; the process's own is hostile. The SDK's
    constructors read none of it (each of these variables raised in them before)."""
    settings = ExportSettings(
        traces_endpoint="http://127.0.0.1:9/v1/traces",
        metrics_endpoint="http://127.0.0.1:9/v1/metrics",
        sdk=read_sdk_settings({"OTEL_BSP_MAX_QUEUE_SIZE": "64"}),
    )
    pipeline = ExportPipeline(settings, Resource({}), Scrubber([]))
    try:
        assert pipeline.spans is not None and pipeline.metrics is not None
    finally:
        pipeline._flush_and_shutdown()


def test_importing_the_telemetry_package_does_not_import_the_sdk() -> None:
    """With telemetry off the SDK is never imported: it reads OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT at import."""
    probe = (
        "import sys, supervisor.telemetry as t; from supervisor.telemetry import resolve_settings; "
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]"
