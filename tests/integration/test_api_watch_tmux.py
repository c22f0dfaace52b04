"""``watch`` in a real terminal: started in tmux, the pane captured before and after a fault (docs/socket-api.md).

tmux runs on a private server socket (``-L``), so the test neither sees nor touches anyone else's
sessions; the daemon is ``run`` as a subprocess against the Genesys simulator.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from supervisor.sim.faults import Fault, FaultKind
from supervisor.sim.genesys import GenesysSimulator
from tests.harness.config import genesys_config
from tests.harness.waits import wait_until

pytestmark = [
    pytest.mark.integration,
    pytest.mark.anyio,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
    pytest.mark.genesys_sim(seed=4),
]

CLI = [sys.executable, "-m", "supervisor"]


@pytest.fixture
def sockets() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="ss-", dir="/tmp") as d:
        yield Path(d)


class Tmux:
    """One private tmux server holding one session that runs ``command``."""

    def __init__(self, command: list[str], config: Path) -> None:
        self.server = f"ss-test-{os.getpid()}"
        self.command = command
        # the pane stays after watch exits, so its last screen can still be read
        config.write_text("set-option -g remain-on-exit on\n")
        self.config = config

    async def run(self, *args: str) -> str:
        done = await anyio.run_process(
            ["tmux", "-L", self.server, "-f", str(self.config), *args], check=False
        )
        return done.stdout.decode()

    async def start(self) -> None:
        # COLUMNS/LINES from the test's environment would override the pane's real size
        command = " ".join(["env", "-u", "COLUMNS", "-u", "LINES", *self.command])
        await self.run("new-session", "-d", "-s", "watch", "-x", "80", "-y", "24", command)

    async def pane(self) -> str:
        return await self.run("capture-pane", "-p", "-t", "watch")

    async def wait_for(self, *texts: str, limit_s: float = 20.0) -> str:
        """The pane once it shows every one of ``texts`` (polling the terminal, not a timer)."""
        screen = ""
        with anyio.move_on_after(limit_s):
            while True:
                screen = await self.pane()
                if all(t in screen for t in texts):
                    return screen
                await anyio.sleep(0.1)
        raise AssertionError(f"the pane never showed {texts!r}; it shows:\n{screen}")

    async def stop(self) -> None:
        await self.run("kill-server")


async def test_watch_shows_the_table_change_after_a_fault(
    genesys_sim: GenesysSimulator, tmp_path: Path, sockets: Path
) -> None:
    config = tmp_path / "supervisor.toml"
    table = f'[sockets]\nsubscribe = "{sockets / "s.sock"}"\ncontrol = "{sockets / "c.sock"}"\n'
    config.write_text(table + genesys_config(genesys_sim.urls, 3))
    (tmp_path / "genesys-secret").write_text("x")
    daemon = await anyio.open_process([*CLI, "run", "--config", str(config)], stdout=None, stderr=None)
    tmux = Tmux([*CLI, "watch", "--socket", str(sockets / "s.sock")], tmp_path / "tmux.conf")
    try:
        # the socket appears once the daemon listens; watch is started only then
        await wait_until(lambda: (sockets / "c.sock").exists(), 20)
        await tmux.start()
        before = await tmux.wait_for(
            "3 sessions", "active 3", "wm-0", "wm-2", "circuits: genesys:webmessaging closed"
        )
        assert "terminated" not in before

        # the platform lost every guest session: the resumed tokens are answered `newSession: true`,
        # the drift a guest can see (CONVERSATION_STATE_DRIFT)
        genesys_sim.state.sessions.clear()
        genesys_sim.faults.inject(Fault(kind=FaultKind.DROP))
        after = await tmux.wait_for("terminated 3", "CONVERSATION_STATE_DRIFT")
        assert "active 3" not in after
        assert "FAIL_FAST_TRIGGER CONVERSATION_STATE_DRIFT" in after  # the recent-events lines

        done = await anyio.run_process(
            [*CLI, "ctl", "--socket", str(sockets / "c.sock"), "drain"], check=False
        )
        assert done.returncode == 0
        await tmux.wait_for("stream ended")
        with anyio.fail_after(20):
            assert await daemon.wait() == 0
    finally:
        await tmux.stop()
        if daemon.returncode is None:
            daemon.terminate()
            with anyio.move_on_after(10):
                await daemon.wait()
