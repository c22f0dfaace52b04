"""A small blocking client of the socket API, for the ``watch`` and ``ctl`` commands and for scripts.

Every way it can fail is one of three errors with a one-line message: :class:`ApiUnavailable`
(no socket, nobody listening, no permission, closed without a word: the peer check refused
us, or the daemon stopped), :class:`ApiError` (the daemon answered a typed error), or
:class:`CallNotSent` (a call the daemon could not take: not UTF-8, or past one message).
"""

from __future__ import annotations

import errno
import socket
import stat
from collections import deque
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from supervisor.api.protocol import (
    CLIENT_MAX_MESSAGE_BYTES,
    MAX_MESSAGE_BYTES,
    FrameDecoder,
    Reply,
    encode_call,
    parse_reply,
)
from supervisor.errors import ApiError, ApiUnavailable, CallNotSent

__all__ = ["Client", "encode"]


def _is_socket(path: Path) -> bool:
    try:
        return stat.S_ISSOCK(path.stat().st_mode)
    except OSError:
        return False


_RECV = 1 << 16


def encode(method: str, parameters: Mapping[str, Any] | None = None, *, more: bool = False) -> bytes:
    """The call's frame, or :class:`CallNotSent` naming why the daemon could not take it.

    Text that is not UTF-8 (a command-line argument with a stray byte arrives so, PEP 383) cannot be
    JSON; a call past :data:`MAX_MESSAGE_BYTES` would be answered ``MessageTooLarge`` and the
    connection closed. Both are the caller's to fix, so neither is sent.
    """
    try:
        frame = encode_call(method, parameters, more=more)
    except UnicodeEncodeError as exc:
        raise CallNotSent(f"a parameter is not valid UTF-8 text (at position {exc.start + 1})") from None
    size = len(frame) - 1  # the NUL is not part of the message
    if size > MAX_MESSAGE_BYTES:
        raise CallNotSent(
            f"the call is {size} bytes; the daemon reads at most {MAX_MESSAGE_BYTES} bytes per message"
        )
    return frame


class Client:
    """One connection to a socket: :meth:`call` for a reply, :meth:`stream` for a subscription."""

    def __init__(self, path: str | Path, *, timeout: float | None = 30.0) -> None:
        self.path = Path(path)
        self._timeout = timeout
        self._sock: socket.socket | None = None
        self._decoder = FrameDecoder(CLIENT_MAX_MESSAGE_BYTES)
        self._pending: deque[bytes] = deque()
        self._received = 0

    # ------------------------------------------------------------------ connection
    def __enter__(self) -> Client:
        self.connect()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self._timeout)
        try:
            sock.connect(str(self.path))
        except OSError as exc:
            sock.close()
            raise ApiUnavailable(self._why(exc)) from None
        self._sock = sock

    def _why(self, exc: OSError) -> str:
        where = str(self.path)
        if isinstance(exc, FileNotFoundError):
            return f"{where}: no such socket: is the daemon running? (or give --socket PATH)"
        if isinstance(exc, ConnectionRefusedError):
            if not _is_socket(self.path):
                return f"{where}: not a socket"
            return f"{where}: nobody is listening: the daemon is not running"
        if isinstance(exc, PermissionError):
            return f"{where}: permission denied: the socket's mode and group do not let you in"
        if exc.errno == errno.ENOTSOCK or isinstance(exc, NotADirectoryError):
            return f"{where}: not a socket"
        if isinstance(exc, TimeoutError):
            return f"{where}: the daemon did not answer in time"
        return f"{where}: cannot connect: {exc.strerror or exc}"

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    # ------------------------------------------------------------------ calls
    def send(self, method: str, parameters: Mapping[str, Any] | None = None, *, more: bool = False) -> None:
        """Send one call; :class:`CallNotSent` before connecting when the daemon could not take it."""
        frame = encode(method, parameters, more=more)
        sock = self._connected()
        try:
            sock.sendall(frame)
        except OSError as exc:
            raise ApiUnavailable(self._closed_early(exc)) from None

    def call(self, method: str, parameters: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """One call, one reply: its parameters, or the daemon's typed error raised as :class:`ApiError`."""
        self.send(method, parameters)
        reply = self.receive()
        if reply is None:
            raise ApiUnavailable(self._closed_early(None))
        return self._parameters(reply)

    def stream(
        self, method: str, parameters: Mapping[str, Any] | None = None, *, first_timeout: float | None = None
    ) -> Iterator[dict[str, Any]]:
        """A ``more: true`` call: every reply's parameters until the last one or the daemon closes.

        ``first_timeout`` bounds the wait for the first reply; after it the stream waits as long
        as the daemon is quiet.
        """
        self.send(method, parameters, more=True)
        sock = self._connected()
        sock.settimeout(first_timeout if first_timeout is not None else self._timeout)
        first = True
        while True:
            reply = self.receive()
            if reply is None:
                if first:
                    raise ApiUnavailable(self._closed_early(None))
                return  # the daemon closed the stream: it stopped
            if first:
                sock.settimeout(None)
                first = False
            yield self._parameters(reply)
            if not reply.continues:
                return

    @property
    def buffered(self) -> bool:
        """Replies already received and not yet returned (a display redraws when this is False)."""
        return bool(self._pending)

    def receive(self) -> Reply | None:
        """The next reply, or None when the daemon closed the connection."""
        sock = self._connected()
        while not self._pending:
            try:
                data = sock.recv(_RECV)
            except TimeoutError:
                raise ApiUnavailable(f"{self.path}: the daemon did not answer in time") from None
            except OSError as exc:
                if exc.errno in (errno.ECONNRESET, errno.EPIPE):
                    return None
                raise ApiUnavailable(f"{self.path}: {exc.strerror or exc}") from None
            if not data:
                return None
            self._received += len(data)
            self._pending.extend(self._decoder.feed(data))
        return parse_reply(self._pending.popleft())

    def _parameters(self, reply: Reply) -> dict[str, Any]:
        if reply.error is not None:
            raise ApiError.received(reply.error, reply.parameters)
        return reply.parameters

    def _connected(self) -> socket.socket:
        if self._sock is None:
            self.connect()
        assert self._sock is not None
        return self._sock

    def _closed_early(self, exc: OSError | None) -> str:
        if self._received == 0:
            # the peer check closes before any byte is read or sent: nothing else ends a
            # connection this early but a daemon that is stopping
            return (
                f"{self.path}: the daemon closed the connection without answering: your uid and groups "
                "are not allowed on this socket ([sockets] allowUids / allowGids), or it is stopping"
            )
        detail = f": {exc.strerror}" if exc is not None and exc.strerror else ""
        return f"{self.path}: the daemon closed the connection{detail}"
