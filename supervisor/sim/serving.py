"""Listeners for the simulators: bind a socket ourselves, serve aiohttp or websockets on it.

Several listeners live in one asyncio loop without signal handlers (the CLI owns signals).
Binding the socket ourselves lets ``port=0`` pick a free port we then read back.

Public API (stable; the CXone simulator builds on it)::

    socks = bind_sockets("127.0.0.1", 0, ["login", "api", "admin"])   # port P != 0: P, P+1, P+2 in order
    http = await serve_aiohttp("api", app, socks["api"])             # -> Listener(url="http://127.0.0.1:P")
    ws = await serve_websockets("webmessaging", handler, socks["webmessaging"],
                                process_request=admit, ping_interval=None)   # -> Listener(url="ws://...")
    await http.close(); await ws.close()      # or: await close_all([http, ws])

Both servers shut down promptly (open WebSockets are aborted, not awaited for 10 s).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from aiohttp import web
from websockets.asyncio.server import Server, ServerConnection, serve

from supervisor.errors import SimulatorError

__all__ = ["Listener", "bind_sockets", "close_all", "format_url", "serve_aiohttp", "serve_websockets"]

# enough for the 5,000-connection benchmark's handshake bursts
_BACKLOG = 4096


def format_url(scheme: str, host: str, port: int) -> str:
    """``scheme://host:port``, bracketing IPv6 literals (RFC 3986 §3.2.2)."""
    try:
        if ipaddress.ip_address(host).version == 6:
            host = f"[{host}]"
    except ValueError:
        pass
    return f"{scheme}://{host}:{port}"


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(_BACKLOG)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        raise SimulatorError(f"cannot bind {host}:{port}: {exc.strerror or exc}") from None
    return sock


def bind_sockets(host: str, port: int, names: Sequence[str]) -> dict[str, socket.socket]:
    """Bind one listening socket per name: all on free ports when ``port`` is 0, else P, P+1, ... in order.

    Raises :class:`SimulatorError` (naming host and port) when a port cannot be bound; nothing stays bound.
    """
    if not 0 <= port <= 65535 or (port and port + len(names) - 1 > 65535):
        raise SimulatorError(f"port {port}: out of range for {len(names)} listeners")
    socks: dict[str, socket.socket] = {}
    try:
        for i, name in enumerate(names):
            socks[name] = _bind(host, port + i if port else 0)
    except SimulatorError:
        for sock in socks.values():
            sock.close()
        raise
    return socks


class Listener:
    """One bound, serving listener: its name, URL and a ``close()``."""

    def __init__(self, name: str, url: str, closer: Callable[[], Awaitable[None]]) -> None:
        self.name = name
        self.url = url
        self._closer = closer
        self._closed = False

    async def close(self) -> None:
        """Stop serving and drop open connections; idempotent."""
        if not self._closed:
            self._closed = True
            await self._closer()

    def __repr__(self) -> str:
        return f"Listener({self.name!r}, {self.url!r})"


def _port(sock: socket.socket) -> tuple[str, int]:
    addr = sock.getsockname()
    return str(addr[0]), int(addr[1])


async def serve_aiohttp(name: str, app: web.Application, sock: socket.socket) -> Listener:
    """Serve ``app`` on ``sock`` (no signal handlers, no access log); returns its ``http://`` Listener."""
    runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    site = web.SockSite(runner, sock, backlog=_BACKLOG)
    await site.start()
    host, port = _port(sock)
    return Listener(name, format_url("http", host, port), runner.cleanup)


async def serve_websockets(
    name: str,
    handler: Callable[[ServerConnection], Awaitable[None]],
    sock: socket.socket,
    **kwargs: Any,
) -> Listener:
    """Serve a websockets (new asyncio API) ``handler`` on ``sock``; ``kwargs`` go to ``serve``.

    Returns its ``ws://`` Listener; closing it aborts open connections at once.
    """
    server: Server = await serve(handler, sock=sock, **kwargs)
    host, port = _port(sock)

    async def closer() -> None:
        # close_connections=False then abort: shutting a simulator down must not wait for
        # thousands of closing handshakes
        server.close(close_connections=False)
        for conn in list(server.all_connections):
            conn.transport.abort()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(server.wait_closed(), 5.0)

    return Listener(name, format_url("ws", host, port), closer)


async def close_all(listeners: Iterable[Listener]) -> None:
    """Close every listener, even when one fails."""
    for listener in listeners:
        with contextlib.suppress(Exception):
            await listener.close()
