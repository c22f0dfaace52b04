"""The fence at the write, on the wire: httpx and websockets over real loopback sockets to a raw
counting server that stamps every chunk it receives with the test's CLOCK_BOOTTIME source
(docs/runtime.md, "The fence at the write").

Traffic runs on several connections of two shards; the counting server holds every answer once the
traffic is in full flight, so at the moment the test moves the clock past shard A's deadline every
connection has a request out and none has a byte in flight: whatever the server receives after
that is what the member wrote after the deadline. It must be nothing for A (its sockets reset, not
closed), while B carries on.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import httpcore
import httpx
import pytest
import websockets
from websockets.asyncio.client import connect
from websockets.asyncio.server import ServerConnection, serve

from supervisor.errors import Fenced
from supervisor.runtime.fence import WriteFence
from supervisor.runtime.leases import Lease
from supervisor.transports.fenced_io import FencedBackend, fenced_connection
from tests.harness.leases import ManualBoottime
from tests.harness.waits import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

SHARD_A, SHARD_B = 3, 200
CONNECTIONS = 4  # per shard


@dataclass
class Conn:
    """One accepted connection as the server saw it."""

    peer: tuple[str, int]
    chunks: list[tuple[float, int]] = field(default_factory=list)
    reset: bool = False
    ended: bool = False
    paths: set[bytes] = field(default_factory=set)


class CountingServer(asyncio.Protocol):
    """Stamps each chunk with ``now()``; answers each HTTP request (or WebSocket frame: ``echo``)
    unless :attr:`holding`, then once released."""

    def __init__(self, owner: CountingServers) -> None:
        self.owner = owner
        self.buffer = b""
        self.transport: asyncio.Transport | None = None
        self.conn: Conn | None = None
        self.held: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.conn = Conn(transport.get_extra_info("peername"))
        self.owner.conns.append(self.conn)
        self.owner.live.append(self)

    def data_received(self, data: bytes) -> None:
        assert self.conn is not None
        self.conn.chunks.append((self.owner.now(), len(data)))
        self.buffer += data
        while b"\r\n\r\n" in self.buffer:
            request, _, self.buffer = self.buffer.partition(b"\r\n\r\n")
            self.owner.requests += 1
            self.conn.paths.add(request.split(b" ", 2)[1])
            self.answer(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    def answer(self, data: bytes) -> None:
        if self.owner.holding:
            self.held.append(data)
        elif self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def release(self) -> None:
        held, self.held = self.held, []
        for data in held:
            self.answer(data)

    def connection_lost(self, exc: Exception | None) -> None:
        assert self.conn is not None
        self.conn.ended = True
        self.conn.reset = isinstance(exc, ConnectionResetError)


@dataclass
class CountingServers:
    now: ManualBoottime
    conns: list[Conn] = field(default_factory=list)
    live: list[CountingServer] = field(default_factory=list)
    holding: bool = False
    requests: int = 0

    def outstanding(self) -> int:
        return sum(len(p.held) for p in self.live)

    def release(self) -> None:
        self.holding = False
        for protocol in self.live:
            protocol.release()

    def bytes_after(self, t: float, conns: list[Conn]) -> int:
        return sum(n for c in conns for (at, n) in c.chunks if at >= t)


@contextlib.asynccontextmanager
async def counting_server(
    now: ManualBoottime, tls: ssl.SSLContext | None = None
) -> AsyncIterator[tuple[CountingServers, int]]:
    servers = CountingServers(now)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: CountingServer(servers), "127.0.0.1", 0, ssl=tls)
    port = server.sockets[0].getsockname()[1]
    try:
        yield servers, port
    finally:
        server.close()


def _fence(now: ManualBoottime, a_deadline: float) -> WriteFence:
    fence = WriteFence(now=now, tick_s=0.01)
    fence.follow({SHARD_A: Lease(SHARD_A, 1, a_deadline), SHARD_B: Lease(SHARD_B, 1, now() + 100.0)})
    return fence


def _client(fence: WriteFence, shard: int, trust: ssl.SSLContext | None = None) -> httpx.AsyncClient:
    transport = httpx.AsyncHTTPTransport(retries=0)
    transport._pool = httpcore.AsyncConnectionPool(
        ssl_context=trust, network_backend=FencedBackend(fence.guard(shard))
    )
    return httpx.AsyncClient(transport=transport)


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (openssl, as an operator makes one for a test)."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    made = subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"),
            *("-keyout", str(key), "-out", str(cert)),
        ],
        capture_output=True,
        check=False,
        timeout=30,
    )
    if made.returncode != 0:
        pytest.skip(f"openssl cannot make a test certificate: {made.stderr.decode().strip()[-200:]}")
    return cert, key


async def test_over_tls_the_records_go_through_the_fence_too(certificate: tuple[Path, Path]) -> None:
    """HTTPS through the fenced backend (TLS layered over the fenced transport): requests answered,
    then past the deadline the next one is refused, nothing more reaches the server, the socket reset."""
    cert, key = certificate
    served = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    served.load_cert_chain(cert, key)
    trust = ssl.create_default_context(cafile=str(cert))
    now = ManualBoottime()
    deadline = now() + 1.0
    fence = _fence(now, deadline)
    async with counting_server(now, served) as (server, port), anyio.create_task_group() as tg:
        await tg.start(fence.serve)
        async with _client(fence, SHARD_A, trust) as client:
            for _ in range(5):
                response = await client.get(f"https://127.0.0.1:{port}/s{SHARD_A}")
                assert response.text == "ok"
            now.advance(1.5)
            with pytest.raises(Fenced):
                await client.get(f"https://127.0.0.1:{port}/s{SHARD_A}")
            await wait_until(lambda: all(c.ended for c in server.conns))
        tg.cancel_scope.cancel()
    assert server.requests == 5 and len(server.conns) == 1
    assert server.bytes_after(deadline, server.conns) == 0 and server.conns[0].reset


async def test_no_http_byte_leaves_after_the_shard_deadline_and_its_sockets_are_reset() -> None:
    now = ManualBoottime()
    deadline = now() + 1.0
    fence = _fence(now, deadline)
    fenced: list[BaseException] = []
    served = {SHARD_A: 0, SHARD_B: 0}
    async with counting_server(now) as (server, port), anyio.create_task_group() as tg:
        await tg.start(fence.serve)
        clients = {shard: _client(fence, shard) for shard in (SHARD_A, SHARD_B)}

        async def traffic(shard: int) -> None:
            client = clients[shard]
            while True:
                try:
                    response = await client.get(f"http://127.0.0.1:{port}/s{shard}")
                except (Fenced, httpx.TransportError) as exc:
                    # the next request's write refused, or the answer in flight cut by the reset
                    fenced.append(exc)
                    return
                assert response.text == "ok"
                served[shard] += 1

        for shard in (SHARD_A, SHARD_B):
            for _ in range(CONNECTIONS):
                tg.start_soon(traffic, shard)
        # traffic in full flight, then every answer held: each connection has one request out
        await wait_until(lambda: server.requests >= 200)
        server.holding = True
        await wait_until(lambda: server.outstanding() == 2 * CONNECTIONS)
        a_conns = [c for c in server.conns if f"/s{SHARD_A}".encode() in c.paths]
        now.advance(1.5)  # past A's deadline, within the lag guard's 2 s
        server.release()
        await wait_until(lambda: len(fenced) == CONNECTIONS)
        b_before = served[SHARD_B]
        await wait_until(lambda: served[SHARD_B] >= b_before + 100)
        # A's sockets: aborted (a TCP reset), and not one byte after the deadline from any of them
        a_peers = {c.peer for c in a_conns}
        await wait_until(lambda: sum(1 for c in server.conns if c.reset) >= CONNECTIONS)
        reset = [c for c in server.conns if c.reset]
        b_conns = [c for c in server.conns if c.peer not in a_peers]
        tg.cancel_scope.cancel()
    for client in clients.values():
        await client.aclose()
    assert all(
        isinstance(exc, httpx.TransportError) or getattr(exc, "shards", None) == (SHARD_A,) for exc in fenced
    )
    assert any(isinstance(exc, Fenced) for exc in fenced) or fence.aborted >= CONNECTIONS
    assert len(reset) == CONNECTIONS and {c.peer for c in reset} <= a_peers
    assert server.bytes_after(deadline, [c for c in server.conns if c.peer in a_peers]) == 0
    # B's connections were never reset and carried the traffic after the deadline
    assert not any(c.reset for c in b_conns) and server.bytes_after(deadline, b_conns) > 0


async def test_a_fenced_shard_opens_no_connection() -> None:
    now = ManualBoottime()
    fence = _fence(now, now() - 0.001)
    async with counting_server(now) as (server, port):
        async with _client(fence, SHARD_A) as client:
            with pytest.raises(Fenced):
                await client.get(f"http://127.0.0.1:{port}/")
        assert server.conns == []


async def test_no_websocket_frame_or_ping_leaves_after_the_deadline() -> None:
    """A WebSocket of shard A sends frames (and websockets' own pings); at the deadline the next
    send raises (Fenced as its cause), the socket is reset, and the server received nothing after."""
    now = ManualBoottime()
    deadline = now() + 1.0
    fence = _fence(now, deadline)
    received: list[tuple[float, int]] = []
    ended: list[bool] = []

    async def handler(ws: ServerConnection) -> None:
        try:
            async for message in ws:
                received.append((now(), len(message)))
                await ws.send(message)
        except websockets.ConnectionClosed as exc:
            ended.append(exc.rcvd is None)

    async with serve(handler, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        guard = fence.guard(SHARD_A)
        async with anyio.create_task_group() as tg:
            await tg.start(fence.serve)
            ws = await connect(
                f"ws://127.0.0.1:{port}/", create_connection=fenced_connection(guard), ping_interval=None
            )
            for _ in range(20):
                await ws.send("frame")
                await ws.recv()
            await ws.ping()
            assert guard.sockets == 1
            now.advance(1.5)
            with pytest.raises(websockets.ConnectionClosed) as closed:
                await ws.send("after")
            assert isinstance(closed.value.__cause__, Fenced)
            with pytest.raises(websockets.ConnectionClosed):
                await ws.ping()
            await wait_until(lambda: bool(ended))
            tg.cancel_scope.cancel()
    assert len(received) == 20 and all(at < deadline for at, _ in received)
    assert ended == [True]  # no close frame came: the link was dropped, not closed


async def test_a_fenced_shard_makes_no_websocket_handshake() -> None:
    """The upgrade request is the connection's first write: refused, the socket reset, no upgrade."""
    now = ManualBoottime()
    fence = _fence(now, now() - 0.001)
    upgrades: list[str] = []

    async def handler(ws: ServerConnection) -> None:
        upgrades.append(ws.request.path if ws.request is not None else "")

    async with serve(handler, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await connect(
                f"ws://127.0.0.1:{port}/", create_connection=fenced_connection(fence.guard(SHARD_A))
            )
    assert isinstance(closed.value.__cause__, Fenced)
    assert upgrades == [] and fence.guard(SHARD_A).sockets == 0


async def test_the_loop_lag_guard_fences_every_shard_until_renewed() -> None:
    """A stall of the loop past the bound (seen on the injected CLOCK_BOOTTIME) fences A and B,
    though neither deadline passed; the next renewal lifts it."""
    now = ManualBoottime()
    fence = WriteFence(now=now, tick_s=0.01, loop_lag_s=2.0)
    owned = {s: Lease(s, 1, now() + 100.0) for s in (SHARD_A, SHARD_B)}
    fence.follow(owned)
    a, b = fence.guard(SHARD_A), fence.guard(SHARD_B)
    async with anyio.create_task_group() as tg:
        await tg.start(fence.serve)
        a.check()
        b.check()
        now.advance(2.5)  # the loop (as the watchdog sees it) woke 2.5 s late
        await wait_until(lambda: fence.lagging)
        for guard in (a, b):
            with pytest.raises(Fenced):
                guard.check()
        fence.follow(owned)  # the leases renewed
        a.check()
        b.check()
        tg.cancel_scope.cancel()
    assert fence.stalls == 1
