"""Telemetry through the entry points (docs/telemetry.md): ``run`` with [telemetry] or OTEL_* alone, ``demo --otlp``.

``run`` is a real process against the Genesys simulator, exporting to the loopback receiver:
its JSON lines gain traceId/spanId that name spans the receiver got, the collector's auth
header comes from the credential file, the environment's is refused, and SIGTERM still exits
0. ``demo --otlp`` exports a whole scenario.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from supervisor.cli import main
from supervisor.sim.faults import Fault, FaultKind
from supervisor.sim.genesys import GenesysSimulator
from tests.harness.config import genesys_config
from tests.harness.process import Output
from tests.harness.waits import wait_until
from tests.integration.otlp_receiver import OtlpReceiver
from tests.integration.semconv_checks import semantic_convention_problems

pytestmark = [pytest.mark.integration, pytest.mark.genesys_sim(seed=2)]

TOKEN = "collector-token-from-a-credential-file"


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    server = OtlpReceiver()
    yield server
    server.stop()


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(extra)
    return env


async def run_until_stopped(config: Path, env: dict[str, str], sessions: int) -> tuple[int, Output]:
    process = await anyio.open_process(
        [sys.executable, "-m", "supervisor", "run", "--config", str(config)], stdin=None, env=env
    )
    lines = Output(process)
    async with anyio.create_task_group() as tg:
        tg.start_soon(lines.pump)
        await wait_until(
            lambda: len([r for r in lines.named("SESSION_TRANSITION") if r["to"] == "active"]) == sessions, 20
        )
        assert lines.named("DAEMON_STARTED")
        process.send_signal(signal.SIGTERM)
        with anyio.fail_after(15):
            code = await process.wait()
    return code, lines


@pytest.mark.anyio
async def test_run_exports_with_the_config_table_and_credential_file_headers(
    genesys_sim: GenesysSimulator, tmp_path: Path, receiver: OtlpReceiver
) -> None:
    config = tmp_path / "supervisor.toml"
    text = genesys_config(genesys_sim.urls, 2).replace(
        "[daemon]", f'[telemetry]\nendpoint = "{receiver.url}"\nheadersFile = "collector-headers"\n[daemon]'
    )
    config.write_text(text)
    (tmp_path / "genesys-secret").write_text("s3cr3t-value")
    (tmp_path / "collector-headers").write_text(f"x-api-key={TOKEN}\n")
    # the table wins: an environment endpoint pointing elsewhere is ignored
    env = clean_env(OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9")
    code, lines = await run_until_stopped(config, env, 2)
    assert code == 0
    assert await lines.stderr() == ""
    # the final flush happened within the drain: the STOPPED terminations are there
    stopped = [s for s in receiver.spans if s.attr("session_supervisor.termination.reason") == "STOPPED"]
    assert sorted(s.attr("session.id") for s in stopped) == ["wm-0", "wm-1"]
    assert {r.headers.get("x-api-key") for r in receiver.requests} == {TOKEN}
    (resource,) = {tuple(sorted(s.resource.items())) for s in receiver.spans}
    attrs = dict(resource)
    assert attrs["service.name"] == "session-supervisor"
    assert attrs["service.instance.id"] == lines.records[0]["bootId"]  # bootId is the instance
    # every SESSION_TERMINATED line names the segment span that carries its reason
    for line in lines.named("SESSION_TERMINATED"):
        span = receiver.by_id(line["spanId"])
        assert span is not None and span.trace_id == line["traceId"]
        assert span.attr("session_supervisor.termination.reason") == "STOPPED"
    assert all("traceId" not in r for r in lines.named("DAEMON_STARTED"))
    assert all(TOKEN not in line for line in lines.raw)


@pytest.mark.anyio
async def test_otel_exporter_otlp_endpoint_alone_turns_export_on(
    genesys_sim: GenesysSimulator, tmp_path: Path, receiver: OtlpReceiver
) -> None:
    config = tmp_path / "supervisor.toml"
    config.write_text(genesys_config(genesys_sim.urls, 1))
    (tmp_path / "genesys-secret").write_text("s3cr3t-value")
    env = clean_env(OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url, OTEL_SERVICE_NAME="cc-supervisor-eu")
    process = await anyio.open_process(
        [sys.executable, "-m", "supervisor", "run", "--config", str(config)], stdin=None, env=env
    )
    lines = Output(process)
    async with anyio.create_task_group() as tg:
        tg.start_soon(lines.pump)
        await wait_until(lambda: any(r["to"] == "active" for r in lines.named("SESSION_TRANSITION")), 20)
        genesys_sim.faults.inject(Fault(kind=FaultKind.DROP))
        await wait_until(
            lambda: len([r for r in lines.named("SESSION_TRANSITION") if r["to"] == "active"]) == 2, 20
        )
        process.send_signal(signal.SIGTERM)
        with anyio.fail_after(15):
            code = await process.wait()
    assert code == 0
    paths = {r.path for r in receiver.requests}
    assert paths == {"/v1/traces", "/v1/metrics"}  # the standard paths under the base URL
    assert {s.resource["service.name"] for s in receiver.spans} == {"cc-supervisor-eu"}
    (retry,) = [r for r in lines.named("RETRY_ATTEMPT") if r["kind"] == "reconnect"]
    span = receiver.by_id(retry["spanId"])
    assert span is not None and span.name == "session.reconnecting"
    assert any(p.metric == "session_supervisor.sessions" for p in receiver.points)


def test_collector_headers_from_the_environment_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "supervisor.toml"
    config.write_text(
        genesys_config(
            {
                "login": "http://127.0.0.1:1",
                "api": "http://127.0.0.1:1",
                "webmessaging": "ws://127.0.0.1:1",
                "streaming": "ws://127.0.0.1:1",
            },
            1,
        )
    )
    (tmp_path / "genesys-secret").write_text("s3cr3t-value")
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318",
        "OTEL_EXPORTER_OTLP_HEADERS": "x-api-key=leak",
    }
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        with pytest.raises(SystemExit) as exited:
            main(["run", "--config", str(config), "--check"])
    assert exited.value.code == 1
    err = capsys.readouterr().err
    assert "OTEL_EXPORTER_OTLP_HEADERS" in err and "telemetry.headersFile" in err
    assert "leak" not in err and "Traceback" not in err


def test_demo_otlp_exports_the_scenario(
    receiver: OtlpReceiver, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # the demo ignores the shell's OTEL_* variables: this resource attribute must not reach a span
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "x=y")
    with pytest.raises(SystemExit) as exited:
        main(
            [
                "demo",
                "--scenario",
                "graceful-close",
                "--fast",
                "--sessions",
                "10",
                "--json",
                "--otlp",
                receiver.url,
            ]
        )
    out, err = capsys.readouterr()
    assert exited.value.code == 0, err
    summary: dict[str, Any] = json.loads(out)
    closed = {t["sessionId"] for t in summary["terminated"] if t["reason"] == "GRACEFUL_CLOSE"}
    assert closed
    traced = {
        s.attr("session.id")
        for s in receiver.spans
        if s.attr("session_supervisor.termination.reason") == "GRACEFUL_CLOSE"
    }
    assert traced == closed
    assert {s.resource["service.name"] for s in receiver.spans} == {"session-supervisor-demo"}
    assert any(s.name == "agent-session.start" for s in receiver.spans)  # every operation traced (ratio 1)
    polls = [s for s in receiver.spans if s.name == "agent-session.poll"]
    assert polls
    # our route template, never the rolling session id
    templates = {s.attr("url.template") for s in polls}
    assert len(templates) == 1 and templates.pop().endswith("/agent-sessions/{sessionId}/get-next-event")
    assert any(p.metric == "session_supervisor.session.terminations" for p in receiver.points)
    # the resource is the one the project builds (telemetry.sdk.version from the SDK), never the environment's
    assert all("x" not in s.resource for s in receiver.spans)
    # semantic conventions: every successful HTTP attempt and opened WebSocket carries its status,
    # the resource and the scope their schema URL
    assert semantic_convention_problems(receiver.spans) == []
    assert any(s.attr("http.response.status_code") == 101 for s in receiver.spans)


@pytest.mark.parametrize("url", ["localhost:4318", "ws://127.0.0.1:4318", "http://"])
def test_demo_otlp_needs_an_http_url(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["demo", "--otlp", url])
    assert exited.value.code == 2
    assert "--otlp" in capsys.readouterr().err
