"""Listeners for the simulators: bind a socket ourselves, serve aiohttp or websockets on it.

Several listeners live in one asyncio loop without signal handlers (the CLI owns signals).
Binding the socket ourselves lets ``port=0`` pick a free port we then read back.

Public API (stable; the CXone simulator builds on it)::

    socks = bind_sockets("127.0.0.1", 0, ["login", "api", "admin"])   # port P != 0: P, P+1, P+2 in order
    http = await serve_aiohttp("api", app, socks["api"], read_timeout_s=60)   # -> Listener(url="http://127.0.0.1:P")
    ws = await serve_websockets("webmessaging", handler, socks["webmessaging"],
                                process_request=admit, ping_interval=None)   # -> Listener(url="ws://...")
    await http.close(); await ws.close()      # or: await close_all([http, ws])

Both servers shut down promptly: open WebSockets get a close frame with 1001 (going away,
RFC 6455 §7.4.1) and at most :data:`WS_CLOSE_GRACE_S` for the closing handshake, then are aborted.

HTTP listeners never hold a half-sent request forever: the headers must arrive within
``read_timeout_s`` of the connection opening (or of the previous response), else the connection
is closed (aiohttp's ``keepalive_timeout``, which aiohttp arms when a connection opens since its
fix "idle connections not being closed if no request was received", aio-libs/aiohttp#13681, in
the 3.14.5 installed here; older releases armed it only after a first response); a body
must then arrive within ``read_timeout_s`` too, else the request fails with 408 in the app's own
error shape (its error middleware sees an ``HTTPRequestTimeout``) and the connection is closed.
WebSocket handshakes are bounded by websockets' ``open_timeout`` (10 s by default).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.protocol import State

from supervisor.errors import SimulatorError
from supervisor.sim.limits import DEFAULT_READ_TIMEOUT_S
from supervisor.vocabulary import CloseCode

__all__ = ["Listener", "bind_sockets", "close_all", "format_url", "serve_aiohttp", "serve_websockets"]

# enough for the 5,000-connection benchmark's handshake bursts
_BACKLOG = 4096
#: on shutdown, how long open WebSockets get to answer our 1001 close frame before being aborted
WS_CLOSE_GRACE_S = 1.0


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


class _BodyTimeout(web.HTTPRequestTimeout, TimeoutError):
    """The body did not arrive in time. An HTTPException, so the app's error middleware answers
    it in the platform's shape; a TimeoutError, so aiohttp's lingering read after the response
    swallows it and closes the connection instead of logging an unhandled exception."""


def _body_deadline(timeout_s: float) -> Middleware:
    @web.middleware
    async def deadline(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not request.body_exists:
            return await handler(request)
        content = request.content

        def expire() -> None:
            if not content.is_eof():  # wakes a handler waiting in request.read() with the error
                content.set_exception(_BodyTimeout(reason="the request body did not arrive in time"))

        timer = asyncio.get_running_loop().call_later(timeout_s, expire)
        try:
            return await handler(request)
        finally:
            # a body still unread stays on the clock: aiohttp drains it after the response
            # (lingering), and that wait must end at the deadline too
            if content.is_eof():
                timer.cancel()

    return deadline


async def serve_aiohttp(
    name: str, app: web.Application, sock: socket.socket, *, read_timeout_s: float = DEFAULT_READ_TIMEOUT_S
) -> Listener:
    """Serve ``app`` on ``sock`` (no signal handlers, no access log); returns its ``http://`` Listener.

    ``read_timeout_s`` bounds the wait for a request's headers and then for its body (module docstring).
    """
    app.middlewares.insert(0, _body_deadline(read_timeout_s))  # outermost: its timer covers every read
    runner = web.AppRunner(
        app,
        handle_signals=False,
        access_log=None,
        shutdown_timeout=0.5,
        keepalive_timeout=read_timeout_s,
    )
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

    Returns its ``ws://`` Listener; closing it closes open connections with 1001 (going away).
    """
    server: Server = await serve(handler, sock=sock, **kwargs)
    host, port = _port(sock)

    async def closer() -> None:
        server.close(close_connections=False)  # stop accepting; the connections are ours to close
        await _going_away(list(server.all_connections))
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(server.wait_closed(), 5.0)

    return Listener(name, format_url("ws", host, port), closer)


async def _going_away(conns: list[ServerConnection]) -> None:
    """Close every connection with 1001, all at once; abort what has not closed after the grace.

    Clients then see "going away" (and reconnect elsewhere) rather than an abnormal 1006, and
    shutting a simulator down never waits for thousands of closing handshakes one by one.
    """
    closing = []
    for conn in conns:
        with contextlib.suppress(Exception):
            conn.transport.resume_reading()  # a black-holed socket must read the client's reply
        if conn.protocol.state is State.OPEN:
            closing.append(asyncio.ensure_future(conn.close(CloseCode.GOING_AWAY, "server shutting down")))
    if closing:
        await asyncio.wait(closing, timeout=WS_CLOSE_GRACE_S)
        for task in closing:
            task.cancel()
        await asyncio.gather(*closing, return_exceptions=True)  # nothing left pending or unretrieved
    for conn in conns:
        if conn.protocol.state is not State.CLOSED:
            conn.transport.abort()


async def close_all(listeners: Iterable[Listener]) -> None:
    """Close every listener, even when one fails."""
    for listener in listeners:
        with contextlib.suppress(Exception):
            await listener.close()
