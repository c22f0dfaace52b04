"""``session-supervisor sim genesys``: first stdout line = the URLs as JSON, runs until SIGTERM/SIGINT."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.integration

CMD = [sys.executable, "-m", "supervisor", "sim"]


def start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*CMD, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parents[2],
    )


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_prints_urls_then_serves_until_signalled(sig: signal.Signals) -> None:
    proc = start("genesys", "--seed", "3", "--token-ttl", "600")
    try:
        assert proc.stdout is not None
        urls = json.loads(proc.stdout.readline())
        assert list(urls) == ["login", "api", "webmessaging", "streaming", "admin"]
        assert all(u.startswith(("http://127.0.0.1:", "ws://127.0.0.1:")) for u in urls.values())
        token = httpx.post(
            urls["login"] + "/oauth/token", data={"grant_type": "client_credentials"}, auth=("any", "thing")
        )
        assert token.json()["expires_in"] == 600
        assert httpx.get(urls["admin"] + "/stats").json()["tokens"]["issued"] == 1
    finally:
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "args",
    [["genesys", "--port", "70000"], ["genesys", "--token-ttl", "0"], ["genesys", "--nope"], ["mars"]],
)
def test_bad_options_are_usage_errors(args: list[str]) -> None:
    result = subprocess.run([*CMD, *args], capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


def test_bad_config_file_names_the_key(tmp_path: Path) -> None:
    config = tmp_path / "sim.toml"
    config.write_text('token_ttl_s = "soon"\n')
    result = subprocess.run(
        [*CMD, "genesys", "--config", str(config)], capture_output=True, text=True, timeout=30, check=False
    )
    assert result.returncode == 2
    assert "token_ttl_s" in result.stderr
    assert "Traceback" not in result.stderr


def test_config_file_restricts_clients(tmp_path: Path) -> None:
    config = tmp_path / "sim.toml"
    config.write_text('deployments = ["dep"]\n[clients]\nknown = "s3cret"\n')
    proc = start("genesys", "--config", str(config))
    try:
        assert proc.stdout is not None
        urls = json.loads(proc.stdout.readline())
        login = urls["login"] + "/oauth/token"
        form = {"grant_type": "client_credentials"}
        assert httpx.post(login, data=form, auth=("known", "s3cret")).status_code == 200
        denied = httpx.post(login, data=form, auth=("other", "x"))
        assert denied.status_code == 401 and denied.json()["error"] == "invalid_client"
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert "s3cret" not in err
