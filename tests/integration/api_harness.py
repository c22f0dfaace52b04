"""The socket API over real Unix sockets, in front of a supervisor wired to the simulators.

:func:`api_daemon` starts the supervisor and the :class:`~supervisor.api.server.SocketApi` the
way ``run_daemon`` does (the board on the bus before any session moves, the sockets bound
before they are used); :class:`Conn` is a small async client speaking the wire protocol, and
:class:`Watcher` a subscriber that reads everything into a list as it arrives.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import SocketStream

from supervisor.api.protocol import FrameDecoder, Method, Reply, encode_call, parse_reply
from supervisor.api.server import SocketApi
from supervisor.config import SocketsConfig
from supervisor.sim.cxone import CxoneSimulator
from supervisor.sim.genesys import GenesysSimulator
from tests.integration.runtime_harness import Harness, supervised


@contextlib.contextmanager
def short_dir() -> Any:
    """A directory whose socket paths fit sun_path (pytest's tmp_path may not)."""
    with tempfile.TemporaryDirectory(prefix="ss-", dir="/tmp") as d:
        yield Path(d)


@dataclass
class ApiHarness:
    daemon: Harness
    api: SocketApi
    subscribe: Path
    control: Path

    @property
    def bus_transitions(self) -> list[dict[str, Any]]:
        return self.daemon.recorded.named("SESSION_TRANSITION")


@contextlib.asynccontextmanager
async def api_daemon(
    config_text: str,
    tmp: Path,
    *,
    genesys: GenesysSimulator | None = None,
    cxone: CxoneSimulator | None = None,
    sockets: SocketsConfig | None = None,
    stop: anyio.Event | None = None,
    reload: Any = None,
) -> AsyncIterator[ApiHarness]:
    with short_dir() as directory:
        paths = (directory / "subscribe.sock", directory / "control.sock")
        async with supervised(config_text, tmp, genesys=genesys, cxone=cxone, start=False) as daemon:
            api = SocketApi(
                daemon.supervisor,
                sockets or SocketsConfig(),
                environ={},
                paths=paths,
                stop=stop,
                reload=reload,
            )
            await daemon.tg.start(daemon.supervisor.serve)
            await daemon.tg.start(api.serve)
            yield ApiHarness(daemon, api, *paths)


class Conn:
    """One client connection: send calls, read replies (None at EOF)."""

    def __init__(self, stream: SocketStream) -> None:
        self.stream = stream
        self.decoder = FrameDecoder(64 * 1024 * 1024)
        self.pending: deque[bytes] = deque()
        self.received = 0

    @classmethod
    async def open(cls, path: Path) -> Conn:
        return cls(await anyio.connect_unix(path))

    async def send_raw(self, data: bytes) -> None:
        await self.stream.send(data)

    async def send(self, method: str, parameters: dict[str, Any] | None = None, **flags: bool) -> None:
        await self.stream.send(encode_call(method, parameters, **flags))

    async def reply(self, limit_s: float = 10.0) -> Reply | None:
        with anyio.fail_after(limit_s):
            while not self.pending:
                try:
                    data = await self.stream.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError, ConnectionResetError):
                    return None
                self.received += len(data)
                self.pending.extend(self.decoder.feed(data))
        return parse_reply(self.pending.popleft())

    async def call(self, method: str, parameters: dict[str, Any] | None = None) -> Reply:
        await self.send(method, parameters)
        reply = await self.reply()
        assert reply is not None, f"{method}: the connection closed"
        return reply

    async def aclose(self) -> None:
        await self.stream.aclose()


@dataclass
class Watcher:
    """A subscriber that reads every message as it arrives (run it in a task group)."""

    conn: Conn
    messages: list[dict[str, Any]] = field(default_factory=list)
    closed: bool = False

    @classmethod
    async def subscribe(cls, path: Path, parameters: dict[str, Any] | None = None) -> Watcher:
        conn = await Conn.open(path)
        await conn.send(Method.SUBSCRIBE, parameters or {}, more=True)
        return cls(conn)

    async def run(self) -> None:
        try:
            while True:
                reply = await self.conn.reply(limit_s=60.0)
                if reply is None:
                    self.closed = True
                    return
                assert reply.error is None, reply
                self.messages.append(reply.parameters)
        finally:
            with anyio.CancelScope(shield=True):
                await self.conn.aclose()

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [m for m in self.messages if m["type"] == kind]

    @property
    def snapshot(self) -> dict[str, Any]:
        return self.messages[0]
