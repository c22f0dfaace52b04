"""The bridge's acceptance in a real browser: docs/bridge-example.html in headless Chromium (docs/bridge.md).

The Genesys simulator, the daemon (in-process, its socket API on real Unix sockets), the bridge (the
``session-supervisor bridge`` command, a subprocess), the example page served over HTTP on loopback,
and Debian's ``chromium`` driven over the DevTools protocol with ``websockets`` (no browser-driving
dependency). The page authenticates with its first message, shows agent a-0's session, and shows the
reconnection prompt when the simulator ends it; agent a-1's session, ended at the same moment, is not
on the page. The heavy suite ``bridge`` (.ci/heavy-suites): chromium is installed with apt-get when
absent; when it cannot be, the test fails in CI and skips elsewhere with one line (tests/harness/tools.py).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import http.server
import itertools
import json
import re
import shutil
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import Process
from websockets.asyncio.client import ClientConnection, connect

from supervisor.sim.faults import Fault, FaultKind
from supervisor.sim.genesys import GenesysSimulator
from tests.harness.config import genesys_config
from tests.harness.tools import missing, run_install
from tests.harness.waits import wait_until
from tests.integration.api_harness import api_daemon
from tests.integration.test_api_cli import Output

DOCS = Path(__file__).resolve().parents[2] / "docs"
TOKEN = "desktop-token-of-a-0-Kw93"

# the first run installs Debian's chromium when it is absent (apt-get update and install: a minute or two)
pytestmark = [
    pytest.mark.bridge,
    pytest.mark.timeout(300),
    pytest.mark.integration,
    pytest.mark.anyio,
    pytest.mark.genesys_sim(seed=5),
]


@pytest.fixture(scope="module")
def chromium_path() -> str:
    """Debian's chromium, installed when absent; without it the test fails in CI and skips elsewhere."""
    found = shutil.which("chromium")
    if found is None:
        why = run_install(
            [
                ["apt-get", "update", "-qq"],
                ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "chromium"],
            ],
            timeout_s=240,
        )
        found = shutil.which("chromium")
        if found is None:
            missing(f"bridge: Debian's chromium is not installed and could not be: {why}")
    assert found is not None
    return found


@contextlib.contextmanager
def serve_docs() -> Iterator[str]:
    """docs/ over HTTP on loopback (the page's origin); quiet."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            return

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(DOCS)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class DevTools:
    """One page of a browser over the DevTools protocol (flat sessions on the browser's socket)."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.ids = itertools.count(1)
        self.session: str | None = None

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        number = next(self.ids)
        message: dict[str, Any] = {"id": number, "method": method, "params": params}
        if self.session is not None:
            message["sessionId"] = self.session
        await self.ws.send(json.dumps(message))
        with anyio.fail_after(20):
            while True:
                reply = json.loads(await self.ws.recv())
                if reply.get("id") == number:
                    assert "error" not in reply, reply
                    result: dict[str, Any] = reply["result"]
                    return result

    async def open(self, url: str) -> None:
        target = await self.send("Target.createTarget", url=url)
        attached = await self.send("Target.attachToTarget", targetId=target["targetId"], flatten=True)
        self.session = attached["sessionId"]

    async def evaluate(self, expression: str) -> Any:
        result = await self.send("Runtime.evaluate", expression=expression, returnByValue=True)
        return result["result"].get("value")


@contextlib.asynccontextmanager
async def chromium(program: str, tmp: Path) -> AsyncIterator[DevTools]:
    process = await anyio.open_process(
        [
            program,
            "--headless=new",
            # root in a container has no user namespace to sandbox in
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--no-default-browser-check",
            f"--user-data-dir={tmp / 'chromium'}",
            "--remote-debugging-address=127.0.0.1",
            "--remote-debugging-port=0",
            "about:blank",
        ]
    )
    try:
        url = await _devtools_url(process)
        async with connect(url, max_size=None) as ws:
            yield DevTools(ws)
    finally:
        process.terminate()
        with anyio.move_on_after(10):
            await process.wait()
        if process.returncode is None:
            process.kill()
            await process.wait()


async def _devtools_url(process: Process) -> str:
    """The browser's DevTools socket, from the line chromium prints on stderr."""
    assert process.stderr is not None
    seen = b""
    with anyio.fail_after(30):
        async for chunk in process.stderr:
            seen += chunk
            found = re.search(rb"DevTools listening on (ws://\S+)", seen)
            if found:
                return found.group(1).decode()
    raise AssertionError(f"chromium printed no DevTools address: {seen[-2000:]!r}")


# null until the page has loaded (the target opens on about:blank first)
PAGE_STATE = """document.readyState !== 'complete' || !document.getElementById('prompt') ? null : JSON.stringify({
  status: document.getElementById('status').textContent,
  rows: Array.from(document.querySelectorAll('#sessions tr td:first-child')).map(td => td.textContent),
  prompt: document.getElementById('prompt').className,
  promptSessions: document.getElementById('prompt').dataset.sessions || null,
  action: document.getElementById('prompt').dataset.action || null,
  text: document.getElementById('prompt-text').textContent,
  visible: document.getElementById('prompt').offsetParent !== null
})"""


async def test_the_example_page_shows_the_reconnection_prompt(
    chromium_path: str, genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(
        json.dumps({"sha256": hashlib.sha256(TOKEN.encode()).hexdigest(), "agents": ["a-0"]}) + "\n"
    )
    async with api_daemon(genesys_config(genesys_sim.urls, 2), tmp_path) as h:
        await h.wait(lambda: len(h.runners) == 2 and h.all_in("active"))
        with serve_docs() as origin:
            bridge = await anyio.open_process(
                [
                    sys.executable,
                    "-m",
                    "supervisor",
                    "bridge",
                    "--socket",
                    str(h.subscribe),
                    "--listen",
                    "127.0.0.1:0",
                    "--tokens",
                    str(tokens),
                    "--origin",
                    origin,
                ]
            )
            output = Output(bridge)
            async with anyio.create_task_group() as tg:
                tg.start_soon(output.pump)
                await wait_until(
                    lambda: any(r.get("event") == "BRIDGE_UPSTREAM_CONNECTED" for r in output.records), 20
                )
                (listening,) = [r for r in output.records if r.get("event") == "BRIDGE_LISTENING"]
                page = f"{origin}/bridge-example.html#bridge={listening['url']}&token={TOKEN}"
                async with chromium(chromium_path, tmp_path) as browser:
                    await browser.open(page)
                    state: dict[str, Any] = {}

                    async def shows(predicate: Any) -> None:
                        with anyio.fail_after(30):
                            while True:
                                now = await browser.evaluate(PAGE_STATE)
                                if now is not None:
                                    state.update(json.loads(now))
                                if state and predicate(state):
                                    return
                                await anyio.sleep(0.1)  # polling a page the test cannot await

                    await shows(lambda s: s["status"] == "connected" and s["rows"] == ["wm-0"])
                    assert state["prompt"] == "" and not state["visible"]

                    # the platform lost both guest sessions: resumed, each is answered newSession, a fail-fast
                    genesys_sim.state.sessions.clear()
                    genesys_sim.faults.inject(Fault(kind=FaultKind.DROP))
                    await h.wait(lambda: all(r.core.terminated for r in h.runners.values()), 20)

                    await shows(lambda s: s["prompt"] == "shown")
                    assert state["visible"] and state["promptSessions"] == "wm-0"  # not a-1's wm-1
                    assert state["action"] == "REVOKE_LOCAL_STORAGE_AND_REAUTHENTICATE"
                    assert state["text"].startswith("Session wm-0 ended (")
                    assert state["rows"] == ["wm-0"]
                bridge.terminate()
                with anyio.fail_after(10):
                    assert await bridge.wait() == 0
    printed = "\n".join(output.lines) + output.err
    assert TOKEN not in printed and output.err == ""
