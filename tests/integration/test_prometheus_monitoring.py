"""docs/monitoring/ against a real Prometheus (Debian's ``prometheus`` 2.42, with ``promtool``): pytest -m prometheus.

* ``promtool check rules`` on the alert rules and ``promtool test rules`` on their unit tests;
* a real Prometheus scraping the daemon's endpoint (``demo --scenario storm --fast --prometheus``)
  every 250 ms, then every dashboard query and every alert expression evaluated through its HTTP API
  over the run: each returns data for the series the run produced. The ones a storm cannot fill are
  listed below with the reason, and they must stay empty (a query that suddenly returns data there
  is a change to look at, not a pass).

A heavy suite (.ci/heavy-suites): its own CI step. Prometheus is installed with apt-get when absent;
when it cannot be, one line, a failure in CI and a skip elsewhere (tests/harness/tools.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.harness.tools import missing, run_install

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "docs" / "monitoring"

# the first test installs Debian's package when it is absent (apt-get update and install: about a minute)
pytestmark = [pytest.mark.prometheus, pytest.mark.timeout(300)]

SCRAPE_S = 0.25
JOB = "session-supervisor"

# the dashboard's panels a storm leaves empty, and why (the query still runs: its names are checked)
EMPTY_PANELS = {
    "Retries exhausted by give-up reason": "nothing gives up in a storm: every session recovers",
    "Attribute outbox depth": "the storm runs without the durable store: there is no outbox",
    "Attribute mismatches": "the storm sends no attribute update",
    "Handshake refusals": "its admission limit leaves room for the storm's busiest second: none refused (asserted)",
}
# the alerts a storm does not raise, and why
QUIET_ALERTS = {
    "SessionSupervisorReconnectionsFailing": "reconnections succeed once admitted: failures never outnumber recoveries",
    "SessionSupervisorSessionsTerminated": "no session ends in a storm",
    "SessionSupervisorRetriesExhausted": "nothing gives up in a storm",
    "SessionSupervisorRetryBudgetRefusing": "reconnections are not operation retries: no retry budget is spent",
    "SessionSupervisorAttributeOutboxBacklog": "no durable store in the storm",
    "SessionSupervisorAttributeMismatches": "no attribute update in the storm",
    "SessionSupervisorTelemetryExportFailing": "no OTLP export in this run: nothing can fail",
    "SessionSupervisorHandshakeRefusals": "no handshake is refused in this storm (asserted)",
    "SessionSupervisorCircuitOpen": "nothing is refused, so no circuit opens (the circuits' closed series are there)",
}


@dataclass(frozen=True)
class Tools:
    prometheus: str
    promtool: str


@pytest.fixture(scope="module")
def tools() -> Tools:
    found = shutil.which("prometheus"), shutil.which("promtool")
    if None in found:
        why = run_install(
            [
                ["apt-get", "update", "-qq"],
                ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "prometheus"],
            ],
            timeout_s=240,
        )
        found = shutil.which("prometheus"), shutil.which("promtool")
        if None in found:
            missing(
                f"prometheus: Debian's prometheus package (prometheus, promtool) is not installed and could not be: {why}"
            )
    prometheus, promtool = found
    assert prometheus is not None and promtool is not None
    return Tools(prometheus, promtool)


def promtool(tools: Tools, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([tools.promtool, *args], cwd=MONITORING, capture_output=True, text=True, timeout=60)


def test_the_alert_rules_are_valid(tools: Tools) -> None:
    result = promtool(tools, "check", "rules", "alerts.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 10 rules found" in result.stdout


def test_the_alerts_fire_when_their_unit_tests_say(tools: Tools) -> None:
    result = promtool(tools, "test", "rules", "alerts-test.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def running_prometheus(tools: Tools, tmp_path: Path, target: str) -> Iterator[str]:
    """A Prometheus scraping ``target`` every 250 ms; yields its base URL, stopped at the end."""
    port = free_port()
    config = tmp_path / "prometheus.yml"
    # JSON is YAML: the alert rules loaded as an operator loads them (their queries come back from the API)
    config.write_text(
        json.dumps(
            {
                "global": {"scrape_interval": f"{int(SCRAPE_S * 1000)}ms", "scrape_timeout": "200ms"},
                "rule_files": [str(MONITORING / "alerts.yml")],
                "scrape_configs": [{"job_name": JOB, "static_configs": [{"targets": [target]}]}],
            }
        )
    )
    log = (tmp_path / "prometheus.log").open("w")
    process = subprocess.Popen(
        [
            tools.prometheus,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/-/ready", timeout=1.0).status_code == 200:
                    break
            assert process.poll() is None, (tmp_path / "prometheus.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "prometheus never became ready"
            time.sleep(0.1)
        # its scrape manager takes the targets up to 5 s after the start (it throttles discovery updates):
        # the run begins once the target is being scraped (refused until the daemon listens: up 0)
        while not _instant(url, f'up{{job="{JOB}"}}'):
            assert time.monotonic() < deadline, "prometheus never scraped its target"
            time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
        log.close()


def _instant(url: str, expr: str) -> list[dict[str, Any]]:
    body = httpx.get(f"{url}/api/v1/query", params={"query": expr}, timeout=10.0).json()
    assert body["status"] == "success", f"{expr}: {body}"
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def query_range(url: str, expr: str, start: float, end: float) -> list[dict[str, Any]]:
    response = httpx.get(
        f"{url}/api/v1/query_range",
        params={"query": expr, "start": start, "end": end, "step": SCRAPE_S},
        timeout=10.0,
    )
    body = response.json()
    assert body["status"] == "success", f"{expr}: {body}"
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def dashboard_queries() -> dict[str, str]:
    """Panel title -> its query, the dashboard's variables given the values this run has."""
    dashboard = json.loads((MONITORING / "dashboard.json").read_text())
    out = {}
    for panel in dashboard["panels"]:
        (target,) = panel["targets"]
        expr = target["expr"].replace("$__rate_interval", "2s").replace("$job", JOB)
        assert "$" not in expr, f"{panel['title']}: a variable this test does not know: {expr}"
        out[panel["title"]] = expr
    return out


def alert_expressions(url: str) -> dict[str, str]:
    """The alert rules Prometheus loaded from alerts.yml: name -> expression."""
    body = httpx.get(f"{url}/api/v1/rules", params={"type": "alert"}, timeout=10.0).json()
    assert body["status"] == "success", body
    return {rule["name"]: rule["query"] for group in body["data"]["groups"] for rule in group["rules"]}


def test_every_dashboard_query_and_alert_returns_data_from_a_storm_it_scraped(
    tools: Tools, tmp_path: Path
) -> None:
    target_port = free_port()
    with running_prometheus(tools, tmp_path, f"127.0.0.1:{target_port}") as url:
        start = time.time()
        demo = subprocess.run(
            [
                sys.executable, "-m", "supervisor", "demo", "--scenario", "storm", "--fast", "--json",
                "--sessions", "50", "--prometheus", f"127.0.0.1:{target_port}",
            ],
            capture_output=True, text=True, timeout=120,
            env={k: v for k, v in os.environ.items() if not k.startswith("OTEL_")},
        )  # fmt: skip
        end = time.time()
        assert demo.returncode == 0, demo.stderr
        summary = json.loads(demo.stdout)
        assert summary["terminated"] == []
        assert summary["rejectedAttempts"] == 0  # (the empty refusal panel's reason)
        # Prometheus scraped the run: up was 1 for a while
        up = query_range(url, f'up{{job="{JOB}"}} == 1', start, end)
        assert up and len(up[0]["values"]) >= 4, up

        answered: dict[str, bool] = {}
        problems = []
        for title, expr in dashboard_queries().items():
            result = query_range(url, expr, start, end)
            answered[title] = bool(result)
            if title == "Terminations":
                # no session ends in a storm (the scenario's expected outcome, asserted above); the drain at
                # the run's end stops them all, which a scrape during it may see: STOPPED, and only that
                reasons = {r["metric"].get("session_supervisor_termination_reason") for r in result}
                if reasons - {"STOPPED"}:
                    problems.append(f"panel {title!r}: terminations other than the drain's: {reasons}")
                continue
            if answered[title] == (title in EMPTY_PANELS):
                problems.append(f"panel {title!r}: {'data' if answered[title] else 'no data'}: {expr}")
        alerts = alert_expressions(url)
        assert len(alerts) == 10
        for name, expr in alerts.items():
            fired = bool(query_range(url, expr, start, end))
            if fired == (name in QUIET_ALERTS):
                problems.append(f"alert {name}: {'data' if fired else 'no data'}: {expr}")
            # whether it fired or not, every metric it names is one the run produced, or one of the
            # series a storm does not make (the empty panels name them)
            for metric in set(re.findall(r"session_supervisor_\w+(?=[{\[])", expr)):
                if not query_range(url, f"count({metric})", start, end):
                    # the Terminations panel's series exist only if a scrape fell within the final drain
                    # (no session ends in a storm), so its metric may be absent as the empty panels' are
                    names_empty = any(
                        metric in dashboard_queries()[t] for t in (*EMPTY_PANELS, "Terminations")
                    )
                    if not names_empty:
                        problems.append(f"alert {name}: {metric} has no series")
        assert not problems, "\n" + "\n".join(problems)
