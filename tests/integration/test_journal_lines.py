"""The daemon's output as journald reads it, without systemd (docs/systemd.md, "The journal").

``run`` as a child process exporting to a collector that answers every export 429: the
OpenTelemetry exporter's retry warning, a text line on stderr before, is one ``LOG_RECORD`` event
line among the others, and nothing else is written. With ``$JOURNAL_STREAM`` naming the pipe the
test reads (a launcher sets it from ``/proc/<pid>/fd/1`` and ``exec``s the daemon, as systemd
connects its stream and sets the variable), each line leads with its ``<N>`` priority; without it,
no line does. A fatal error before serving stays one ``session-supervisor: error:`` line (``<3>``
before it when stderr is the journal stream).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from supervisor.sim.genesys import GenesysSimulator
from tests.harness.config import genesys_config
from tests.harness.process import Output, spawn
from tests.harness.waits import wait_until
from tests.integration.otlp_receiver import OtlpReceiver

pytestmark = [pytest.mark.integration, pytest.mark.anyio, pytest.mark.genesys_sim(seed=5)]

SECRET = "s3cr3t-genesys-client-secret"
#: systemd's side: the variable set to the device and inode of the daemon's standard output (or error)
LAUNCHER_STDOUT = ["sh", "-c", 'export JOURNAL_STREAM="$(stat -L -c %d:%i /proc/$$/fd/1)"; exec "$0" "$@"']
LAUNCHER_STDERR = ["sh", "-c", 'export JOURNAL_STREAM="$(stat -L -c %d:%i /proc/$$/fd/2)"; exec "$0" "$@"']
PREFIXED = re.compile(r"^<([0-7])>(\{.*\})$")
EXPORTER = "opentelemetry.exporter.otlp.proto.http.trace_exporter"


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    server = OtlpReceiver(refuse=10**6, retry_after="1")  # every export: 429, retried a second later
    yield server
    server.stop()


def config(directory: Path, sim: GenesysSimulator, receiver: OtlpReceiver) -> Path:
    path = directory / "supervisor.toml"
    text = genesys_config(sim.urls, 2)
    path.write_text(f'[telemetry]\nendpoint = "{receiver.url}"\n' + text)
    (directory / "genesys-secret").write_text(SECRET)
    return path


def environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_") and k != "JOURNAL_STREAM"}
    env["OTEL_BSP_SCHEDULE_DELAY"] = "100"  # export the first spans at once: the failure comes early
    return env


async def serve_then_stop(path: Path, launcher: list[str]) -> tuple[int, Output]:
    """A start, an export failure, a stop: the daemon's output."""
    process = await spawn(
        path, env=environment(), launcher=[*launcher, sys.executable] if launcher else (), stdin=None
    )
    lines = Output(process, json_lines=False)

    def seen(text: str) -> bool:
        return any(text in line for line in lines.raw)

    async with anyio.create_task_group() as tg:
        tg.start_soon(lines.pump)
        await wait_until(
            lambda: seen('"DAEMON_STARTED"') and seen(f'"logger":"{EXPORTER}","message":"Transient error'), 30
        )
        process.send_signal(signal.SIGTERM)
        with anyio.fail_after(20):
            code = await process.wait()
    return code, lines


def decoded(raw: list[str]) -> list[tuple[int | None, dict[str, Any]]]:
    out: list[tuple[int | None, dict[str, Any]]] = []
    for line in raw:
        found = PREFIXED.match(line)
        if found is not None:
            out.append((int(found.group(1)), json.loads(found.group(2))))
        else:
            out.append((None, json.loads(line)))  # a line that is not JSON fails the test here
    return out


async def test_under_journald_every_line_is_one_json_object_led_by_its_priority(
    genesys_sim: GenesysSimulator, tmp_path: Path, receiver: OtlpReceiver
) -> None:
    code, lines = await serve_then_stop(config(tmp_path, genesys_sim, receiver), LAUNCHER_STDOUT)
    assert code == 0
    assert await lines.stderr() == ""  # stderr is not the journal stream here, and nothing went there
    records = decoded(lines.raw)
    assert all(priority is not None for priority, _ in records), lines.raw[:5]
    by_event: dict[str, set[int | None]] = {}
    for priority, record in records:
        by_event.setdefault(record["event"], set()).add(priority)
    assert by_event["DAEMON_STARTED"] == {5}
    assert by_event["DAEMON_STOPPED"] == {5}
    assert by_event["SESSION_TRANSITION"] == {6}
    exported = [(p, r) for p, r in records if r["event"] == "LOG_RECORD" and r["logger"] == EXPORTER]
    # the exporter's retry (a warning), and its giving up (an error) if the run lasted that long
    assert exported and all(p == {"warning": 4, "error": 3}[r["level"]] for p, r in exported), exported
    retried = [r for _, r in exported if r["level"] == "warning"]
    assert retried and "Too Many Requests" in retried[0]["message"], exported
    assert all("seq" in r and "bootId" in r for _, r in records)
    assert SECRET not in "\n".join(lines.raw)


async def test_without_journald_the_lines_carry_no_prefix_and_the_exporter_still_writes_json(
    genesys_sim: GenesysSimulator, tmp_path: Path, receiver: OtlpReceiver
) -> None:
    code, lines = await serve_then_stop(config(tmp_path, genesys_sim, receiver), [])
    assert code == 0
    assert await lines.stderr() == ""  # the exporter's warning used to be a text line here
    records = decoded(lines.raw)
    assert all(priority is None for priority, _ in records)
    assert any(r["event"] == "LOG_RECORD" and r["logger"] == EXPORTER for _, r in records)


def test_a_fatal_error_before_serving_stays_one_text_line_with_its_priority(tmp_path: Path) -> None:
    broken = tmp_path / "supervisor.toml"
    broken.write_text("[daemon]\nshutdownGrace = 'soon'\n")
    env = {k: v for k, v in os.environ.items() if k != "JOURNAL_STREAM"}
    for launcher, lead in ((LAUNCHER_STDERR, "<3>"), ([], "")):
        done = subprocess.run(
            [*launcher, sys.executable, "-m", "supervisor", "run", "--config", str(broken)],
            capture_output=True,
            text=True,
            env=env,
            timeout=50,
            check=False,
        )
        assert done.returncode == 1
        assert done.stdout == ""
        (line,) = done.stderr.splitlines()
        assert line.startswith(f"{lead}session-supervisor: error: ") and "shutdownGrace" in line, line
