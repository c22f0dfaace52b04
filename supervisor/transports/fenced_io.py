"""The write fence on the wire: every byte for a session checked in the same step as its write.

A fleet member may write for a shard only until its lease deadline (supervisor/runtime/fence.py,
docs/runtime.md, "The fence at the write"). Checking where a request enters httpx is too early: the
request then waits for a pooled connection, a TLS handshake, a slot of the event loop, and a
prototype that checked there let 1,353 requests out after the deadline. So the check sits in the
write itself, with no ``await`` between it and the bytes handed to the kernel:

* :class:`FencedTransport` wraps an asyncio transport: ``write``/``writelines`` ask the
  :class:`WriteGuard` first and hand the bytes to the socket's transport in the same synchronous step
  (asyncio's ``Transport.write`` is synchronous: the event loop cannot run between them). A refused
  write aborts the socket (``SO_LINGER`` 0, then ``transport.abort()``: a TCP reset, no FIN, no TLS
  close_notify) and raises :class:`~supervisor.errors.Fenced`; so does a close past the deadline.
* :class:`FencedBackend` is an httpcore ``AsyncNetworkBackend`` whose streams write through a
  :class:`FencedTransport` (httpcore's own AnyIO backend yields to the loop inside ``send``, between
  any check of ours and the socket's write: anyio's ``SocketStream.send`` begins with a checkpoint).
  TLS is layered over the fenced transport (``loop.start_tls``), so handshake records are fenced too.
* :func:`fenced_connection` is the websockets ``ClientConnection`` factory whose transport is a
  :class:`FencedTransport`: frames, pings, pongs and the close frame (websockets writes them all
  through ``Connection.send_data`` → ``transport.write``, websockets/asyncio/connection.py).

Every socket is adopted by its guard, which aborts it when the guard's deadline passes (the
watchdog of supervisor/runtime/fence.py), so a fenced shard holds no socket open either.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final, Protocol

import anyio
import httpcore
from websockets.asyncio.client import ClientConnection

__all__ = ["PLAIN_WIRE", "FencedBackend", "FencedTransport", "Wire", "WriteGuard", "fenced_connection"]

#: struct linger {l_onoff = 1, l_linger = 0}: close() resets the connection (socket(7))
_RESET = struct.pack("ii", 1, 0)


class WriteGuard(Protocol):
    """What a socket asks before it writes (supervisor/runtime/fence.py implements it)."""

    def check(self) -> None:
        """Return when a write may go out now; raise :class:`~supervisor.errors.Fenced` when not."""

    def passed(self) -> bool:
        """Nothing may be written now (what ``check`` would raise for)."""

    async def reopened(self) -> None:
        """Return once writes may go out again (the leases renewed)."""

    def adopt(self, abort: Callable[[], None]) -> Callable[[], None]:
        """Abort the socket (``abort()``) when the guard's deadline passes; returns the release (the
        socket closed on its own)."""


class FencedTransport(asyncio.Transport):
    """An asyncio transport whose writes are checked by ``guard`` in the same step (module docstring)."""

    # loop.start_tls accepts only transports that say so (asyncio/base_events.py, start_tls): every
    # call below goes to the socket's own transport, which is compatible
    _start_tls_compatible = True

    def __init__(self, inner: asyncio.Transport, guard: WriteGuard) -> None:
        super().__init__()
        self._inner = inner
        self._guard = guard
        self._release = guard.adopt(self.abort)

    def fenced(self) -> bool:
        """Nothing may be written on this socket now."""
        return self._guard.passed()

    def check(self) -> None:
        """Raise :class:`~supervisor.errors.Fenced` (the socket reset) when nothing may be written."""
        self._check()

    def _check(self) -> None:
        try:
            self._guard.check()
        except BaseException:
            self.abort()
            raise

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self._check()
        self._inner.write(data)

    def writelines(self, list_of_data: Iterable[bytes | bytearray | memoryview]) -> None:
        self._check()
        self._inner.writelines(list_of_data)

    def write_eof(self) -> None:
        self._inner.write_eof()

    def can_write_eof(self) -> bool:
        return self._inner.can_write_eof()

    def abort(self) -> None:
        """Drop the connection with a TCP reset: asyncio's ``abort`` discards what is buffered, but
        the kernel would still send a FIN (a graceful end) after what it holds; SO_LINGER on, with a
        zero timeout, makes ``close`` discard it all and reset (socket(7), SO_LINGER; RFC 9293 §3.6.1)."""
        self._release()
        sock = self._inner.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
        self._inner.abort()

    def close(self) -> None:
        # a graceful close sends a FIN after what is buffered: past the deadline, a reset instead
        if self._guard.passed():
            self.abort()
            return
        self._release()
        self._inner.close()

    def is_closing(self) -> bool:
        return self._inner.is_closing()

    def _force_close(self, exc: BaseException | None) -> None:
        # asyncio's TLS layer ends its transport this way on a fatal error (asyncio/sslproto.py)
        self._release()
        force = getattr(self._inner, "_force_close", None)
        if force is not None:
            force(exc)
        else:
            self._inner.abort()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._inner.get_extra_info(name, default)

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._inner.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._inner.get_protocol()

    def pause_reading(self) -> None:
        self._inner.pause_reading()

    def resume_reading(self) -> None:
        self._inner.resume_reading()

    def is_reading(self) -> bool:
        return self._inner.is_reading()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._inner.set_write_buffer_limits(high, low)

    def get_write_buffer_size(self) -> int:
        return self._inner.get_write_buffer_size()

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._inner.get_write_buffer_limits()


#: bytes received and not yet read past which the socket stops reading (asyncio's streams' default)
_READ_LIMIT: Final = 64 * 1024


class _Receiving(asyncio.Protocol):
    """One HTTP connection's side of asyncio: what it received, and the flow control of its writes
    (the part of asyncio's streams httpcore needs; their StreamWriter is made for one transport, and
    a connection's transport changes at its TLS handshake)."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.eof = False
        self.error: BaseException | None = None
        # the transport that reads for it (the socket's, then the TLS layer's)
        self.reading: asyncio.Transport | None = None
        self._paused = False
        self._readable: asyncio.Future[None] | None = None
        self._writable: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.reading = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        self._wake_reader()
        if len(self.buffer) > _READ_LIMIT and self.reading is not None:
            self.reading.pause_reading()

    def eof_received(self) -> bool:
        self.eof = True
        self._wake_reader()
        return False  # (the transport closes itself)

    def connection_lost(self, exc: Exception | None) -> None:
        self.eof = True
        self.error = exc
        self._wake_reader()
        self._paused = False
        self._wake_writer()

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self._wake_writer()

    def _wake_reader(self) -> None:
        waiter, self._readable = self._readable, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _wake_writer(self) -> None:
        waiter, self._writable = self._writable, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def read(self, max_bytes: int) -> bytes:
        while not self.buffer and not self.eof:
            self._readable = asyncio.get_running_loop().create_future()
            await self._readable
        if self.buffer:
            data = bytes(self.buffer[:max_bytes])
            del self.buffer[:max_bytes]
            if len(self.buffer) <= _READ_LIMIT and self.reading is not None and not self.reading.is_closing():
                self.reading.resume_reading()
            return data
        if isinstance(self.error, OSError):
            raise self.error
        return b""

    async def drain(self) -> None:
        while self._paused and self.error is None:
            self._writable = asyncio.get_running_loop().create_future()
            await self._writable
        if isinstance(self.error, OSError):
            raise self.error


class _FencedStream(httpcore.AsyncNetworkStream):
    """One HTTP connection's socket: writes through a :class:`FencedTransport` (directly, or through
    the TLS layer over it)."""

    def __init__(self, raw: FencedTransport, protocol: _Receiving, transport: asyncio.Transport) -> None:
        self._raw = raw
        self._protocol = protocol
        # where writes go: the fenced transport, or the TLS layer that writes its records through it
        self._transport = transport

    # (the ``timeout`` parameters are httpcore's AsyncNetworkStream interface)
    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109
        try:
            with anyio.fail_after(timeout):
                return await self._protocol.read(max_bytes)
        except TimeoutError as exc:
            raise httpcore.ReadTimeout(exc) from exc
        except OSError as exc:
            raise httpcore.ReadError(exc) from exc

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109
        if not buffer:
            return
        try:
            if self._protocol.error is not None or self._transport.is_closing():
                raise ConnectionResetError("the connection is closed")
            # the check and the write are one synchronous step (FencedTransport.write; through TLS,
            # the layer's records are checked there too, but a refusal inside it would surface as
            # a lost connection: asked here first, in the same step, it raises Fenced as itself)
            self._raw.check()
            self._transport.write(buffer)
            with anyio.fail_after(timeout):
                await self._protocol.drain()
        except TimeoutError as exc:
            raise httpcore.WriteTimeout(exc) from exc
        except OSError as exc:
            raise httpcore.WriteError(exc) from exc

    async def aclose(self) -> None:
        if self._raw.fenced():
            # past the deadline not even a TLS close_notify or a FIN: a reset
            self._raw.abort()
            return
        self._transport.close()
        self._raw.close()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        try:
            with anyio.fail_after(timeout):
                # the TLS records are written through the fenced transport (its handshake's too)
                tls = await loop.start_tls(
                    self._raw, self._protocol, ssl_context, server_hostname=server_hostname
                )
        except BaseException as exc:
            self._raw.abort()
            if isinstance(exc, TimeoutError):
                raise httpcore.ConnectTimeout(exc) from exc
            if isinstance(exc, OSError):  # ssl.SSLError is one
                raise httpcore.ConnectError(exc) from exc
            raise
        assert tls is not None  # (None only for a transport closed meanwhile: start_tls raises then)
        self._protocol.reading = tls
        return _FencedStream(self._raw, self._protocol, tls)

    def get_extra_info(self, info: str) -> Any:
        transport = self._transport
        if info == "ssl_object":
            return transport.get_extra_info("ssl_object")
        if info == "client_addr":
            return transport.get_extra_info("sockname")
        if info == "server_addr":
            return transport.get_extra_info("peername")
        if info == "socket":
            return transport.get_extra_info("socket")
        if info == "is_readable":
            # an idle pooled connection the server closed or wrote to (httpcore drops it before reuse):
            # asyncio reads eagerly, so what came is in the buffer rather than on the socket
            protocol = self._protocol
            return protocol.eof or bool(protocol.buffer) or self._raw.is_closing()
        return None


class FencedBackend(httpcore.AsyncNetworkBackend):
    """An httpcore network backend whose connections write through ``guard`` (module docstring)."""

    def __init__(self, guard: WriteGuard) -> None:
        self._guard = guard

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        # nothing is written by a TCP connect, but a fenced shard opens no socket either
        self._guard.check()
        loop = asyncio.get_running_loop()
        protocol = _Receiving()
        local = (local_address, 0) if local_address is not None else None
        try:
            with anyio.fail_after(timeout):
                transport, _ = await loop.create_connection(lambda: protocol, host, port, local_addr=local)
        except TimeoutError as exc:
            raise httpcore.ConnectTimeout(exc) from exc
        except OSError as exc:
            raise httpcore.ConnectError(exc) from exc
        for option in socket_options or ():
            transport.get_extra_info("socket").setsockopt(*option)
        raw = FencedTransport(transport, self._guard)
        return _FencedStream(raw, protocol, raw)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("the fenced backend makes TCP connections only")

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(seconds)


def fenced_connection(guard: WriteGuard) -> type[ClientConnection]:
    """A websockets ``ClientConnection`` class (``connect(..., create_connection=...)``) whose
    transport is a :class:`FencedTransport` over ``guard``: the opening handshake, frames, pings and
    the close frame are all fenced."""

    class FencedClientConnection(ClientConnection):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            assert isinstance(transport, asyncio.Transport)
            super().connection_made(FencedTransport(transport, guard))

    # (websockets calls create_connection(protocol, ping_interval=..., ...): the class itself)
    return FencedClientConnection


@dataclass(frozen=True, slots=True)
class Wire:
    """How a session's sockets are made: fenced by ``guard`` (a fleet member; None: one host) and bound
    to ``local_address`` (``[fleet] localAddress``; None: the kernel's choice)."""

    guard: WriteGuard | None = None
    local_address: str | None = None

    def websocket_options(self) -> dict[str, Any]:
        """The keyword arguments of websockets' ``connect`` (those it does not know go to
        ``loop.create_connection``: ``local_addr``)."""
        options: dict[str, Any] = {}
        if self.guard is not None:
            options["create_connection"] = fenced_connection(self.guard)
        if self.local_address is not None:
            options["local_addr"] = (self.local_address, 0)
        return options


#: one host's sockets without a source address: websockets' own connection, nothing bound
PLAIN_WIRE: Final = Wire()
