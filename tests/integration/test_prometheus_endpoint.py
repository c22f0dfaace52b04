"""The Prometheus scrape endpoint through ``run`` (docs/telemetry.md, "Prometheus"): ``[telemetry] prometheus``.

``run`` is a real process against the Genesys simulator; the test scrapes its endpoint over HTTP as
Prometheus does and reads the exposition with prometheus-client's own parser: sessions by state,
the reconnections a drop caused, the resource as ``target_info``. A port another process holds ends
the start with one line; without the ``[prometheus]`` extra, ``run --check`` says so in one line
naming the file and the key.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import anyio
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from supervisor.sim.faults import Fault, FaultKind
from supervisor.sim.genesys import GenesysSimulator
from tests.harness.config import genesys_config
from tests.harness.process import CLI, Output
from tests.harness.waits import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.genesys_sim(seed=3)]

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def scrape(port: int) -> Samples:
    """One scrape of the endpoint, as Prometheus makes it: every sample by name and labels."""
    response = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5.0)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    samples: Samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            # the instrumentation scope is on every series (otel_scope_name="session_supervisor.telemetry", ...)
            labels = {k: v for k, v in sample.labels.items() if not k.startswith("otel_scope_")}
            if sample.name.startswith("session_supervisor_"):
                assert sample.labels["otel_scope_name"] == "session_supervisor.telemetry"
            samples[(sample.name, frozenset(labels.items()))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def series(samples: Samples, name: str) -> dict[frozenset[tuple[str, str]], float]:
    return {labels: v for (n, labels), v in samples.items() if n == name}


async def run(command: list[str]) -> subprocess.CompletedProcess[str]:
    """A command to its end, as a script runs it: exit code and the text of its output."""
    with anyio.fail_after(30):
        done = await anyio.run_process(command, env=clean_env(), check=False)
    return subprocess.CompletedProcess(command, done.returncode, done.stdout.decode(), done.stderr.decode())


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}


def configured(tmp_path: Path, genesys_sim: GenesysSimulator, sessions: int, address: str) -> Path:
    config = tmp_path / "supervisor.toml"
    text = genesys_config(genesys_sim.urls, sessions)
    config.write_text(text.replace("[daemon]", f'[telemetry]\nprometheus = "{address}"\n[daemon]'))
    (tmp_path / "genesys-secret").write_text("s3cr3t-value")
    return config


@pytest.mark.anyio
async def test_run_serves_sessions_by_state_and_reconnections_to_a_scrape(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    port = free_port()
    config = configured(tmp_path, genesys_sim, 2, f"127.0.0.1:{port}")
    process = await anyio.open_process([*CLI, "run", "--config", str(config)], stdin=None, env=clean_env())
    lines = Output(process)
    async with anyio.create_task_group() as tg:
        tg.start_soon(lines.pump)

        def actives() -> int:
            return len([r for r in lines.named("SESSION_TRANSITION") if r["to"] == "active"])

        await wait_until(lambda: actives() == 2, 20)
        samples = await anyio.to_thread.run_sync(scrape, port)
        assert value(samples, "session_supervisor_sessions", session_supervisor_session_state="active") == 2
        assert (
            value(samples, "session_supervisor_sessions", session_supervisor_session_state="reconnecting")
            == 0
        )
        # the resource, as Prometheus' target_info: the SDK's version, this boot's instance id
        (info,) = series(samples, "target_info")
        labels = dict(info)
        assert labels["service_name"] == "session-supervisor"
        assert labels["service_instance_id"] == lines.records[0]["bootId"]
        assert labels["telemetry_sdk_version"]
        assert not series(samples, "session_supervisor_reconnection_attempts_total")  # nothing dropped yet

        genesys_sim.faults.inject(Fault(kind=FaultKind.DROP))
        await wait_until(lambda: actives() == 4, 20)
        samples = await anyio.to_thread.run_sync(scrape, port)
        attempts = series(samples, "session_supervisor_reconnection_attempts_total")
        assert sum(attempts.values()) == 2
        assert {dict(labels)["error_type"] for labels in attempts} == {"ABNORMAL_CLOSURE"}
        assert (
            value(
                samples,
                "session_supervisor_reconnection_outcomes_total",
                session_supervisor_outcome="recovered",
            )
            == 2
        )
        assert value(samples, "session_supervisor_sessions", session_supervisor_session_state="active") == 2

        process.send_signal(signal.SIGTERM)
        with anyio.fail_after(15):
            code = await process.wait()
    assert code == 0
    assert await lines.stderr() == ""
    # the port is given back with the daemon's end
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0


@pytest.mark.anyio
async def test_a_port_another_process_holds_ends_the_start_with_one_line(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        config = configured(tmp_path, genesys_sim, 1, f"127.0.0.1:{port}")
        result = await run([*CLI, "run", "--config", str(config)])
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"session-supervisor: error: telemetry.prometheus: cannot listen on 127.0.0.1:{port}: Address already in use"
    ]


# the [prometheus] extra taken away: its module cannot be imported (what an environment without it does)
WITHOUT_THE_EXTRA = (
    "import sys; sys.modules['opentelemetry.exporter.prometheus'] = None; "
    "from supervisor.cli import main; main(sys.argv[1:])"
)


@pytest.mark.anyio
async def test_run_check_without_the_extra_is_one_line_naming_the_file_the_key_and_the_extra(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    config = configured(tmp_path, genesys_sim, 1, "9464")
    result = await run([sys.executable, "-c", WITHOUT_THE_EXTRA, "run", "--config", str(config), "--check"])
    assert result.returncode == 1
    (line,) = result.stderr.splitlines()
    assert line.startswith(
        f"session-supervisor: error: {config}: telemetry.prometheus: the Prometheus endpoint needs the "
        "[prometheus] extra (pip install 'session-supervisor[prometheus]'): "
    )
    # with the extra, the same file checks
    checked = await run([*CLI, "run", "--config", str(config), "--check"])
    assert checked.returncode == 0, checked.stderr


@pytest.mark.parametrize(
    "address", ["localhost", "http://127.0.0.1:9464", "metrics.example:9464", "9464/metrics"]
)
def test_demo_prometheus_needs_an_address(address: str, capsys: pytest.CaptureFixture[str]) -> None:
    from supervisor.cli import main

    with pytest.raises(SystemExit) as exited:
        main(["demo", "--prometheus", address])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "--prometheus" in err and "Traceback" not in err
