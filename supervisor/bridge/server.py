"""The bridge process: one subscriber of the daemon's subscribe socket, served over WebSocket (docs/bridge.md).

* **Upstream**: one connection to the subscribe socket (``Subscribe`` with the ``terminations`` stream,
  and ``platform`` when some token may have it), read in order; each record goes through the
  :class:`~supervisor.bridge.routing.Mirror` and, encoded once, into the outbox of every client whose
  scope allows it. Nothing on that path waits for a client. When the daemon is gone the bridge tells its
  clients (``end``), closes them, and connects again (1 s, doubling to 30 s).
* **Clients** (``websockets``' asyncio server): the upgrade is checked in ``process_request`` before
  anything else: the Origin allow list (a browser sends Origin; none is allowed until ``--origin`` names
  it; a client without Origin is not a browser and passes), the per-address limit of failed
  authentications, the connection cap, and ``Authorization: Bearer`` when given. A client without that
  header (a browser cannot set it) sends ``{"token": "..."}`` as its first message within the handshake
  timeout. It then receives the socket's records, one JSON object per message, and sends nothing more.
* **Tokens** are re-read on SIGHUP (a bad file keeps the old set and says so); clients whose token was
  removed or re-scoped are closed (they connect again under the new scope).

Every line the bridge prints is one JSON object on stdout (``BRIDGE_*``), never with a token in it:
it logs peers, counts and reasons, not what a client sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import http
import ipaddress
import json
import logging
import math
import ssl
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response
from websockets.protocol import State

from supervisor.api.protocol import CLIENT_MAX_MESSAGE_BYTES, FrameDecoder, Method, encode_call, parse_reply
from supervisor.bridge.outbox import Outbox
from supervisor.bridge.ratelimit import FailureLimiter
from supervisor.bridge.routing import Mirror, Route, Routed
from supervisor.bridge.tokens import Scope, TokenSet, digest_of, parse_tokens
from supervisor.clock import iso_utc
from supervisor.errors import ApiError, ConfigError

__all__ = ["Bridge", "BridgeSettings", "Listen", "load_tokens", "parse_listen"]

_encode = msgspec.json.Encoder().encode
# a client sends one small message, its token; anything larger is not one (RFC 6455 close 1009)
_CLIENT_MAX_MESSAGE = 4096
# RFC 6455 §7.4.1: 1008 policy violation (authentication, a message on a stream that takes none),
# 1001 going away (the daemon stops), 1013 try again later (the client fell behind for too long)
_POLICY = 1008
_GOING_AWAY = 1001
_TRY_AGAIN_LATER = 1013
_RECONNECT_FIRST_S = 1.0
_RECONNECT_MAX_S = 30.0
_REFUSAL_LINE_EVERY_S = 10.0


@dataclass(frozen=True, slots=True)
class Listen:
    host: str
    port: int

    @property
    def loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False  # a name other than localhost: it may resolve anywhere


def parse_listen(text: str) -> Listen:
    """``HOST:PORT`` (``[v6]:PORT`` for IPv6), or :class:`ConfigError`."""
    host, sep, port = text.rpartition(":")
    if not sep or not host:
        raise ConfigError(f"--listen {text!r}: expected HOST:PORT (e.g. 127.0.0.1:8765)")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"--listen {text!r}: the port must be a number from 0 to 65535")
    return Listen(host, int(port))


def load_tokens(path: Path) -> TokenSet:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the tokens file: {exc.strerror or exc}") from None
    return parse_tokens(text, str(path))


@dataclass(frozen=True, slots=True)
class BridgeSettings:
    socket: Path
    listen: Listen
    tokens: Path
    origins: frozenset[str] = frozenset()
    tls: ssl.SSLContext | None = None
    # the subscribe socket's defaults ([sockets], docs/socket-api.md "Limits")
    max_connections: int = 128
    client_buffer_bytes: int = 1 << 20
    lagged_disconnect_after: float = 10.0
    handshake_timeout: float = 5.0


@dataclass(eq=False)
class _Client:
    connection: ServerConnection
    peer: str
    scope: Scope
    digest: bytes
    outbox: Outbox
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    # why the bridge is ending this client (the daemon is gone): its writer sends what is pending, then closes
    ending: tuple[int, str] | None = None
    # the sessions whose platform records come through this client's own subscription (``since``), not the shared one
    resumed: frozenset[str] = frozenset()


class _Log:
    """One JSON object per line on stdout; a line that cannot be written is dropped, never raised."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock

    def __call__(self, event: str, **fields: Any) -> None:
        line = {"event": event, "timestamp": iso_utc(self._clock()), **fields}
        with contextlib.suppress(OSError, ValueError):
            sys.stdout.write(json.dumps(line) + "\n")
            sys.stdout.flush()


class Bridge:
    """See the module docstring."""

    def __init__(
        self,
        settings: BridgeSettings,
        tokens: TokenSet,
        *,
        limiter: FailureLimiter | None = None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.tokens = tokens
        self.limiter = limiter or FailureLimiter()
        self.mirror = Mirror()
        self.log = _Log(wall)
        self._clients: set[_Client] = set()
        # the clients by agent and by session named in their scope: a record costs the few that may want it
        self._by_agent: dict[str, set[_Client]] = {}
        self._by_session: dict[str, set[_Client]] = {}
        # connections admitted by the upgrade and not yet ended (the cap counts them), with the scope of an
        # Authorization header; one whose handshake failed after the check never reaches the handler: it is
        # pruned when closed, so a client that drops its upgrades cannot hold the cap's slots
        self._admitted: dict[ServerConnection, _Authorized | None] = {}
        self._upstream_platform = tokens.any_platform
        self._upstream: asyncio.StreamWriter | None = None
        self.delivered = 0
        # upgrades refused at the connection cap, and when that was last said
        self.over_cap = 0
        self._over_cap_logged = -math.inf
        self.server: Server | None = None

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> Server:
        listen = self.settings.listen
        # no logger of websockets' own: at debug level it prints request headers (Authorization among them)
        quiet = logging.getLogger("supervisor.bridge.websockets")
        quiet.propagate = False
        quiet.addHandler(logging.NullHandler())
        self.server = await serve(
            self._handle,
            listen.host,
            listen.port,
            ssl=self.settings.tls,
            process_request=self._check_upgrade,
            max_size=_CLIENT_MAX_MESSAGE,
            server_header=None,
            logger=quiet,
        )
        return self.server

    @property
    def port(self) -> int:
        assert self.server is not None
        return int(self.server.sockets[0].getsockname()[1])

    def stats(self) -> dict[str, int]:
        return {
            "clients": len(self._clients),
            "failedAuthentications": self.limiter.failures,
            "rateLimited": self.limiter.refused,
            "overCap": self.over_cap,
            "delivered": self.delivered,
        }

    def reload(self) -> None:
        """SIGHUP: read the tokens file again; a bad one keeps the current tokens."""
        try:
            tokens = load_tokens(self.settings.tokens)
        except ConfigError as exc:
            self.log("BRIDGE_TOKENS_RELOAD_FAILED", problem=str(exc), kept=len(self.tokens))
            return
        self.tokens = tokens
        closed = 0
        for client in list(self._clients):
            if tokens.scope_of_digest(client.digest) != client.scope:
                closed += 1
                self._end(client, _POLICY, "token revoked or changed: connect again")
        self.log("BRIDGE_TOKENS_RELOADED", tokens=len(tokens), closed=closed)
        if tokens.any_platform != self._upstream_platform:
            # the platform stream is asked for at Subscribe: subscribe again with the new streams
            self._upstream_platform = tokens.any_platform
            if self._upstream is not None:
                self._upstream.close()

    # ------------------------------------------------------------------ the upgrade
    def _check_upgrade(self, connection: ServerConnection, request: Request) -> Response | None:
        peer = str(connection.remote_address[0])
        now = time.monotonic()
        limiter = self.limiter
        if not limiter.allows(peer, now):
            return connection.respond(http.HTTPStatus.TOO_MANY_REQUESTS, "too many failed authentications\n")
        origin = request.headers.get("Origin")
        if origin is not None and origin not in self.settings.origins:
            # a page of another site: counted as a failed authentication (it may be probing)
            limiter.failed(peer, now)
            self.log(
                "BRIDGE_REFUSED", peer=peer, reason="origin not allowed", origin=origin[:200], **self.stats()
            )
            return connection.respond(http.HTTPStatus.FORBIDDEN, "origin not allowed (--origin)\n")
        if len(self._admitted) >= self.settings.max_connections:
            for gone in [c for c in self._admitted if c.state is State.CLOSED]:
                del self._admitted[gone]
        if len(self._admitted) >= self.settings.max_connections:
            # one line per 10 s with the count, not one per refusal: a client retrying in a loop would
            # flood the journal (as the daemon's own peer refusals, supervisor/api/refusals.py)
            self.over_cap += 1
            if now - self._over_cap_logged >= _REFUSAL_LINE_EVERY_S:
                self._over_cap_logged = now
                self.log(
                    "BRIDGE_REFUSED",
                    peer=peer,
                    reason="too many connections",
                    limit=self.settings.max_connections,
                    refused=self.over_cap,
                )
            return connection.respond(http.HTTPStatus.SERVICE_UNAVAILABLE, "too many connections\n")
        authorization = _authorization(request.headers)
        if authorization is not None:
            scheme, _, token = authorization.partition(" ")
            scope = self.tokens.scope_of(token.strip()) if scheme.lower() == "bearer" else None
            if scope is None:
                self._failed(peer, now, "Authorization")
                return connection.respond(http.HTTPStatus.UNAUTHORIZED, "authentication failed\n")
            self._admitted[connection] = (scope, digest_of(token.strip()), None)
        else:
            self._admitted[connection] = None
        return None

    def _failed(self, peer: str, now: float, how: str) -> None:
        self.limiter.failed(peer, now)
        self.log("BRIDGE_AUTH_FAILED", peer=peer, via=how, **self.stats())

    # ------------------------------------------------------------------ one client
    async def _handle(self, connection: ServerConnection) -> None:
        peer = str(connection.remote_address[0])
        try:
            authorized = self._admitted.get(connection)
            if authorized is None:
                authorized = await self._first_message(connection, peer)
                if authorized is None:
                    return
            scope, digest, since = authorized
            if since and not scope.platform:
                await connection.close(
                    _POLICY, "since resumes the platform stream: this token is not allowed it"
                )
                return
            client = _Client(connection, peer, scope, digest, Outbox(self.settings.client_buffer_bytes))
            client.resumed = frozenset(since or ())
            self._add(client)
            tasks: list[asyncio.Future[None]] = []
            try:
                if self.mirror.ready:
                    self._push(client, self._snapshot(client))
                if since:
                    tasks.append(asyncio.ensure_future(self._resume(client, since)))
                writer = asyncio.ensure_future(self._write(client))
                reader = asyncio.ensure_future(self._read(client))
                await asyncio.wait({writer, reader}, return_when=asyncio.FIRST_COMPLETED)
                tasks += (writer, reader)
            finally:
                self._drop(client)
                for task in tasks:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError, ConnectionClosed):
                        await task
        finally:
            self._admitted.pop(connection, None)

    async def _first_message(self, connection: ServerConnection, peer: str) -> _Authorized | None:
        """A browser's authentication: ``{"token": "...", "since": {...}}`` within the handshake timeout."""
        try:
            async with asyncio.timeout(self.settings.handshake_timeout):
                message = await connection.recv()
        except TimeoutError:
            self._failed(peer, time.monotonic(), "timeout")
            await connection.close(_POLICY, "no token within the handshake timeout")
            return None
        except ConnectionClosed:
            return None
        token: object = None
        since: object = None
        with contextlib.suppress(ValueError):
            parsed = json.loads(message)
            if isinstance(parsed, dict):
                token, since = parsed.get("token"), parsed.get("since")
        scope = self.tokens.scope_of(token) if isinstance(token, str) else None
        if scope is None or not isinstance(token, str):
            self._failed(peer, time.monotonic(), "message")
            await connection.close(_POLICY, "authentication failed")
            return None
        if since is not None and not (isinstance(since, dict) and since):
            await connection.close(_POLICY, "since: expected an object of session ids (docs/socket-api.md)")
            return None
        return scope, digest_of(token), since

    async def _resume(self, client: _Client, since: dict[str, Any]) -> None:
        """A client coming back with ``since``: its own subscription of the socket for those sessions.

        The daemon replays what the client missed from its windows, then goes on live
        (docs/socket-api.md, "Coming back with `since`"); the shared subscription's records of those sessions
        are not sent to this client (:attr:`_Client.resumed`), so each record reaches it once, in order. The
        daemon checks ``since`` as any subscriber's (a refusal closes the client with the daemon's problem).
        When this subscription ends, the client is ended too: it would miss its sessions' records.
        """
        call = {"filter": {"sessions": sorted(since)}, "streams": ["platform"], "since": since}
        reason = "the daemon closed the resumed stream: connect again"
        code = _GOING_AWAY
        writer: asyncio.StreamWriter | None = None
        try:
            reader, writer = await asyncio.open_unix_connection(str(self.settings.socket))
            writer.write(encode_call(Method.SUBSCRIBE, call, more=True))
            decoder = FrameDecoder(CLIENT_MAX_MESSAGE_BYTES)
            while data := await reader.read(1 << 16):
                for frame in decoder.feed(data):
                    reply = parse_reply(frame)
                    if reply.error is not None:
                        code = _POLICY
                        problem = str(reply.parameters.get("problem", reply.error))
                        reason = f"since refused by the daemon: {problem}"[:120]
                        return
                    record = reply.parameters
                    session_id = record.get("sessionId")
                    if record.get("type") not in ("platform", "gap") or not isinstance(session_id, str):
                        continue  # its snapshot, deltas, lagged notices: the shared stream's to send
                    agent = self.mirror.agent_of(session_id)
                    if agent is None and isinstance(record.get("agentId"), str):
                        agent = record["agentId"]
                    if client.scope.allows(session_id, agent):
                        self._push(client, _encode(record))
        except (OSError, ApiError):
            pass
        finally:
            if writer is not None:
                writer.close()
            if client in self._clients:
                self._end(client, code, reason)

    async def _read(self, client: _Client) -> None:
        """A client sends nothing after its token: a message ends its stream (as a call on a subscription)."""
        connection = client.connection
        await connection.recv()
        await connection.close(_POLICY, "the stream takes no messages: close it and connect again")

    async def _write(self, client: _Client) -> None:
        outbox = client.outbox
        connection = client.connection
        while True:
            messages = outbox.take(lambda: self._snapshot(client))
            if not messages and client.ending is not None:
                await connection.close(*client.ending)
                return
            if not messages:
                client.wake.clear()
                await client.wake.wait()
                continue
            for message in messages:
                # UTF-8 JSON already: a text frame without decoding it to str and back
                await connection.send(message, text=True)
            self.delivered += len(messages)

    def _snapshot(self, client: _Client) -> bytes:
        return _encode(self.mirror.snapshot_for(client.scope))

    def _push(self, client: _Client, text: bytes, size: int | None = None) -> None:
        loop = asyncio.get_running_loop()
        if client.outbox.push(text, len(text) if size is None else size, loop.time()):
            loop.call_later(self.settings.lagged_disconnect_after, self._lag_deadline, client)
        client.wake.set()

    def _lag_deadline(self, client: _Client) -> None:
        after = self.settings.lagged_disconnect_after
        if client in self._clients and client.outbox.overdue(asyncio.get_running_loop().time(), after):
            self.log("BRIDGE_CLIENT_DISCONNECTED", peer=client.peer, reason="lagged", seconds=after)
            self._drop(client)
            client.connection.transport.abort()

    def _add(self, client: _Client) -> None:
        self._clients.add(client)
        for agent in client.scope.agents:
            self._by_agent.setdefault(agent, set()).add(client)
        for session in client.scope.sessions:
            self._by_session.setdefault(session, set()).add(client)

    def _drop(self, client: _Client) -> None:
        self._clients.discard(client)
        for index, keys in ((self._by_agent, client.scope.agents), (self._by_session, client.scope.sessions)):
            for key in keys:
                members = index.get(key)
                if members is not None:
                    members.discard(client)
                    if not members:
                        del index[key]

    # ------------------------------------------------------------------ upstream
    def dispatch(self, message: dict[str, Any]) -> None:
        """One record of the subscribe socket to the clients it is for. Never awaits."""
        routed = self.mirror.apply(message)
        route = routed.route
        if route is Route.NOBODY:
            return
        if route is Route.SNAPSHOT:
            for client in self._clients:
                self._push(client, self._snapshot(client))
            return
        text = _encode(message)
        size = len(text)
        if route in (Route.EVERYONE, Route.END):
            for client in self._clients:
                self._push(client, text, size)
            return
        resumable = route is Route.PLATFORM
        for client in self._candidates(routed):
            if routed.allows(client.scope) and not (resumable and routed.session_id in client.resumed):
                self._push(client, text, size)

    def _candidates(self, routed: Routed) -> set[_Client]:
        found: set[_Client] = set()
        if routed.agent_id is not None:
            found |= self._by_agent.get(routed.agent_id, set())
        if routed.session_id is not None:
            found |= self._by_session.get(routed.session_id, set())
        return found

    async def follow(self) -> None:
        """Read the subscribe socket for ever: connect, subscribe, dispatch; again when it ends."""
        wait = _RECONNECT_FIRST_S
        while True:
            problem = await self._subscribe_once()
            if problem is None:
                wait = _RECONNECT_FIRST_S
            self.log(
                "BRIDGE_UPSTREAM_LOST",
                socket=str(self.settings.socket),
                problem=problem or "the daemon ended the stream",
                retryS=wait,
            )
            self._end_clients("daemon unavailable")
            await asyncio.sleep(wait)
            wait = min(wait * 2, _RECONNECT_MAX_S)

    async def _subscribe_once(self) -> str | None:
        """One subscription until it ends: None after a stream that was served, else why it failed."""
        try:
            reader, writer = await asyncio.open_unix_connection(str(self.settings.socket))
        except OSError as exc:
            return f"cannot connect: {exc.strerror or exc}"
        self._upstream = writer
        streams = ["terminations", *(["platform"] if self._upstream_platform else [])]
        served = False
        try:
            writer.write(encode_call(Method.SUBSCRIBE, {"streams": streams}, more=True))
            decoder = FrameDecoder(CLIENT_MAX_MESSAGE_BYTES)
            while True:
                data = await reader.read(1 << 16)
                if not data:
                    return None if served else "the daemon closed the connection without answering"
                for frame in decoder.feed(data):
                    reply = parse_reply(frame)
                    if reply.error is not None:
                        return f"{reply.error}: {reply.parameters.get('problem', '')}".rstrip(": ")
                    if not served:
                        served = True
                        self.log(
                            "BRIDGE_UPSTREAM_CONNECTED", socket=str(self.settings.socket), streams=streams
                        )
                    self.dispatch(reply.parameters)
        except ApiError as exc:
            return str(exc)
        except OSError as exc:
            return exc.strerror or str(exc)
        finally:
            self._upstream = None
            writer.close()
            self.mirror.reset()

    def _end_clients(self, reason: str) -> None:
        """The daemon is gone: each client gets what is pending (``end`` among them), then is closed; one
        that does not take it within the handshake timeout is cut."""
        for client in list(self._clients):
            self._end(client, _GOING_AWAY, reason)

    def _end(self, client: _Client, code: int, reason: str) -> None:
        """Stop routing to ``client``; its writer sends what is pending, then closes with ``code``."""
        self._drop(client)
        client.ending = (code, reason)
        client.wake.set()
        asyncio.get_running_loop().call_later(
            self.settings.handshake_timeout, client.connection.transport.abort
        )


#: a client's scope, its token's digest (to find it again after a reload), and its ``since`` (or None)
_Authorized = tuple[Scope, bytes, dict[str, Any] | None]


def _authorization(headers: Headers) -> str | None:
    value = headers.get("Authorization")
    return None if value is None else str(value)
