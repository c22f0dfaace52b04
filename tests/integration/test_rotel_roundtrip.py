"""The spans' semantic conventions through a real OpenTelemetry collector: rotel (PyPI ``rotel``, pinned).

The demo exports a storm to rotel over OTLP/HTTP; rotel passes it on, over OTLP/HTTP, to the project's own
receiver, the gate of tests/integration/test_telemetry_cli.py. The same checks hold on what came through:
a collector keeps ``http.response.status_code`` on the attempts and the handshakes, ``error.type``, the
resource's ``telemetry.sdk.version`` and the schema URLs (tests/integration/semconv_checks.py).

A heavy suite (.ci/heavy-suites): its own CI step. rotel is installed with pip when absent; when it
cannot be, one line, a failure in CI and a skip elsewhere (tests/harness/tools.py).
"""

from __future__ import annotations

import importlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from types import ModuleType

import pytest

from tests.harness.tools import missing, run_install
from tests.integration.otlp_receiver import OtlpReceiver
from tests.integration.semconv_checks import semantic_convention_problems

# the first test installs rotel when it is absent (a wheel with the collector inside)
pytestmark = [pytest.mark.rotel, pytest.mark.integration, pytest.mark.timeout(180)]

ROTEL = "rotel==0.0.1a15"


@pytest.fixture(scope="module")
def rotel() -> ModuleType:
    try:
        return importlib.import_module("rotel")
    except ImportError:
        pass
    why = run_install(
        [[sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", ROTEL]], 150
    )
    importlib.invalidate_caches()
    try:
        return importlib.import_module("rotel")
    except ImportError as exc:
        missing(f"rotel: {ROTEL} is not installed and could not be: {why or exc}")
        raise  # (missing() fails or skips)


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    server = OtlpReceiver()
    yield server
    server.stop()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_collector_passes_the_semantic_conventions_on(rotel: ModuleType, receiver: OtlpReceiver) -> None:
    http_port, grpc_port = free_port(), free_port()
    collector = rotel.Rotel(
        enabled=True,
        otlp_http_endpoint=f"127.0.0.1:{http_port}",
        otlp_grpc_endpoint=f"127.0.0.1:{grpc_port}",
        exporter=rotel.OTLPExporter(endpoint=receiver.url, protocol="http"),
    )
    collector.start()
    try:
        demo = subprocess.run(
            [
                sys.executable, "-m", "supervisor", "demo", "--scenario", "storm", "--fast", "--json",
                "--sessions", "10", "--otlp", f"http://127.0.0.1:{http_port}",
            ],
            capture_output=True, text=True, timeout=120,
            env={**{k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}, "OTEL_RESOURCE_ATTRIBUTES": "x=y"},
        )  # fmt: skip
        assert demo.returncode == 0, demo.stderr
        # rotel batches: what the demo exported arrives within its batch timeout
        deadline = time.monotonic() + 30
        while (
            not any(s.name == "session.reconnecting" for s in receiver.spans) and time.monotonic() < deadline
        ):
            time.sleep(0.2)
    finally:
        collector.stop()
    spans = list(receiver.spans)
    assert any(s.name == "session.reconnecting" for s in spans)
    assert semantic_convention_problems(spans) == []
    assert all("x" not in s.resource for s in spans)
    assert any(s.attr("http.response.status_code") == 101 for s in spans)
    assert any(s.kind == "CLIENT" and s.attr("http.response.status_code") == 200 for s in spans)
