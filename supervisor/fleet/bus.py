"""The fleet bus: PostgreSQL's LISTEN/NOTIFY between the members of a fleet (docs/runtime.md, "Admission across a fleet").

One member, one bus, one LISTEN connection (psycopg 3, async, autocommit). A handler is
registered per channel before :meth:`FleetBus.serve`; ``serve`` LISTENs on every registered
channel and hands each notice to its channel's handler on the event loop. Publishing goes through
a second connection of the bus (psycopg's ``AsyncConnection.notifies()`` holds its connection's
lock while it waits: a query on the listening connection would wait for the next notice), or, in a
writer's own transaction, through :data:`NOTIFY_SQL`.

What PostgreSQL promises, and what this module relies on (PostgreSQL docs, SQL commands, NOTIFY):

* **Delivery at commit.** A notice sent inside a transaction is delivered when, and only if, it
  commits: a rolled-back write announces nothing, and a peer that hears a notice reads what the
  transaction wrote. :data:`NOTIFY_SQL` is usable in any transaction for that reason.
* **Payloads** shorter than 8000 bytes (the default build's limit): :meth:`FleetBus.publish`
  refuses a longer one with a ValueError naming the channel and the size, before it is sent.
* **Self-delivery.** A listening session hears its own notices; the payload is a JSON object
  carrying ``"member"``, and the bus drops those of its own member before any handler sees them.
* **No store-and-forward.** Notices go to the sessions listening *when the transaction commits*.
  A notice sent while this member's LISTEN connection is down (the database restarted, the
  connection was killed, the network broke) is **lost** for this member: the bus reconnects with
  a capped backoff and LISTENs again, but nothing replays what it missed. That is acceptable for
  each channel because none is the record of anything, only a hint that shortens a wait:

  - ``ss_throttle`` (a peer's 429/503 with its Retry-After): a hold of a few seconds. A member
    that missed it sends to the endpoint and meets the platform's own 429, and holds the endpoint
    itself (its pacer's Retry-After pause), as one host does; the hint only saves that refusal.
  - ``ss_circuit`` (a peer's circuit opened): the same; each member's circuit also opens on its
    own failures.
  - ``ss_desired`` and ``ss_attributes`` (a command written to the store by another member): the
    store is the record. Their consumers re-read it when :meth:`FleetBus.on_listening` reports a
    reconnection (``reconnected=True``), and read it on their own schedule anyway.

  A member that cannot reach the database is not admitted anything fleet-wide either: it holds
  no lease for long (docs/runtime.md, "Shards and leases").
* **Channels are per database**, not per schema: two fleets in two schemas of one database hear
  each other's notices (each drops only its own member's). Give each fleet a database of its own.
* A connection that is only waiting would not notice a network that silently stopped carrying
  packets: every ``check_s`` seconds the bus asks the server ``SELECT 1`` (waiting at most
  ``check_s`` seconds for the answer) and reconnects when none comes. Notices that arrive
  meanwhile are kept by psycopg and handed over next.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final

import anyio
import msgspec
import psycopg
from anyio.abc import TaskStatus
from psycopg import AsyncConnection, sql
from psycopg.conninfo import conninfo_to_dict

from supervisor.errors import StoreError
from supervisor.store.pg import describe

__all__ = [
    "CHANNEL_PREFIX",
    "MAX_PAYLOAD_BYTES",
    "NOTIFY_SQL",
    "FleetBus",
    "Notice",
    "capped_backoff",
    "check_channel",
    "check_payload",
]

#: NOTIFY as a function call, usable inside any transaction: the notice is delivered at its commit
#: (and never on rollback). ``pg_notify(channel, payload)`` takes the channel as text, unlike NOTIFY.
NOTIFY_SQL: Final = "SELECT pg_notify(%s, %s)"
#: every fleet channel's name starts with this (ss_throttle, ss_circuit, ss_desired, ss_attributes)
CHANNEL_PREFIX: Final = "ss_"
#: PostgreSQL refuses a payload of 8000 bytes or more ("payload string too long"; the default build)
MAX_PAYLOAD_BYTES: Final = 7999
# identifiers longer than NAMEDATALEN - 1 bytes are truncated by the server: a channel is one
_MAX_CHANNEL_BYTES: Final = 63
#: the waits between reconnection attempts, doubling up to the cap (seconds)
RECONNECT_FIRST_S: Final = 0.1
RECONNECT_CAP_S: Final = 5.0
#: how long a LISTEN connection may wait without a notice before the server is asked whether it is there
CHECK_S: Final = 15.0

Conn = AsyncConnection[tuple[Any, ...]]
Sleep = Callable[[float], Awaitable[None]]
Warn = Callable[[str], object]


@dataclass(frozen=True, slots=True)
class Notice:
    """One notice heard on the bus: its channel, its payload (JSON text), the sending backend's pid."""

    channel: str
    payload: str
    sender_pid: int


def check_channel(channel: str) -> str:
    """``channel`` when it may be a fleet channel, else ValueError saying why."""
    if not channel.startswith(CHANNEL_PREFIX) or channel == CHANNEL_PREFIX:
        raise ValueError(f"fleet bus: channel {channel!r} does not start with {CHANNEL_PREFIX!r}")
    if len(channel.encode()) > _MAX_CHANNEL_BYTES:
        raise ValueError(f"fleet bus: channel {channel!r} is longer than {_MAX_CHANNEL_BYTES} bytes")
    return channel


def check_payload(channel: str, payload: str) -> str:
    """``payload`` when PostgreSQL will carry it (shorter than 8000 bytes), else ValueError."""
    size = len(payload.encode())
    if size > MAX_PAYLOAD_BYTES:
        raise ValueError(
            f"fleet bus: a payload on {channel!r} is {size} bytes; PostgreSQL carries fewer than 8000"
        )
    return payload


class _Own(msgspec.Struct):
    member: str | None = None


def _sender_member(payload: str) -> str | None:
    """The ``"member"`` of a JSON object payload; None for anything else."""
    try:
        return msgspec.json.decode(payload, type=_Own).member
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def _where(conninfo: str) -> str:
    """What errors name: the server and database, never the password."""
    try:
        params = conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError:
        return "fleet bus"
    host = params.get("host") or "localhost"
    return f"fleet bus ({host}/{params.get('dbname') or ''})"


class FleetBus:
    """LISTEN/NOTIFY between the members of a fleet; see the module docstring."""

    def __init__(
        self,
        conninfo: str,
        *,
        member: str,
        password: str | None = None,
        sleep: Sleep = anyio.sleep,
        warn: Warn | None = None,
        check_s: float = CHECK_S,
    ) -> None:
        self.member = member
        self._conninfo = conninfo
        self._password = password
        self._sleep = sleep
        self._warn = warn
        self._check_s = check_s
        self._handlers: dict[str, Callable[[Notice], None]] = {}
        self._listening: list[Callable[[bool], None]] = []
        self._serving = False
        self._publisher: Conn | None = None
        self._publish_lock = anyio.Lock()
        #: the reason the LISTEN connection is down, None while it listens
        self.degraded: str | None = None
        #: the backend pid of the LISTEN connection while it listens
        self.listener_pid: int | None = None
        #: notices handed to handlers, and own notices dropped (counters for status and tests)
        self.delivered = 0
        self.own_dropped = 0

    # -- registration ----------------------------------------------------------------------------

    def on(self, channel: str, handler: Callable[[Notice], None]) -> None:
        """Call ``handler`` (sync, on the loop) with every notice on ``channel`` from another member.

        Register before :meth:`serve`: its LISTENs are made once per connection.
        """
        if self._serving:
            raise RuntimeError("fleet bus: register handlers before serve()")
        if channel in self._handlers:
            raise ValueError(f"fleet bus: channel {channel!r} has a handler already")
        self._handlers[check_channel(channel)] = handler

    def on_listening(self, callback: Callable[[bool], None]) -> None:
        """Call ``callback(reconnected)`` each time the bus LISTENs on its channels: False the first
        time, True after a reconnection (notices sent while it was down are lost: re-read the state)."""
        self._listening.append(callback)

    # -- listening -------------------------------------------------------------------------------

    async def _connect(self) -> Conn:
        extra: dict[str, Any] = {} if self._password is None else {"password": self._password}
        return await AsyncConnection.connect(self._conninfo, autocommit=True, **extra)

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """LISTEN on every registered channel and dispatch notices until cancelled, reconnecting
        after any failure (waits doubling from 0.1 s to 5 s). Started once it first listens."""
        self._serving = True
        started = False
        failures = 0
        try:
            while True:
                try:
                    conn = await self._connect()
                except psycopg.OperationalError as exc:
                    self._down(describe(exc))
                    failures += 1
                    await self._sleep(capped_backoff(failures))
                    continue
                try:
                    async with conn:
                        for channel in sorted(self._handlers):
                            await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
                        self.listener_pid = conn.info.backend_pid
                        self.degraded = None
                        failures = 0
                        for callback in self._listening:
                            callback(started)
                        if not started:
                            started = True
                            task_status.started()
                        await self._listen(conn)
                except (psycopg.OperationalError, TimeoutError) as exc:
                    self._down(describe(exc))
                failures += 1
                await self._sleep(capped_backoff(failures))
        finally:
            self.listener_pid = None
            with anyio.CancelScope(shield=True):
                await self.aclose()

    async def _listen(self, conn: Conn) -> None:
        """Dispatch notices until the connection fails (raises OperationalError, or TimeoutError
        when the server did not answer the check within ``check_s``)."""
        while True:
            async for notify in conn.notifies(timeout=self._check_s):
                self._dispatch(Notice(notify.channel, notify.payload, notify.pid))
            # nothing for check_s seconds: is the server still there?
            with anyio.fail_after(self._check_s):
                await conn.execute("SELECT 1")

    def _dispatch(self, notice: Notice) -> None:
        handler = self._handlers.get(notice.channel)
        if handler is None:
            return
        if _sender_member(notice.payload) == self.member:
            self.own_dropped += 1
            return
        self.delivered += 1
        try:
            handler(notice)
        except Exception as exc:  # (a handler's bug must not stop the bus for every channel)
            if self._warn is not None:
                self._warn(
                    f"fleet bus: the handler of {notice.channel!r} failed: {type(exc).__name__}: {exc}"
                )

    def _down(self, reason: str) -> None:
        self.listener_pid = None
        if self.degraded is None and self._warn is not None:
            self._warn(f"{_where(self._conninfo)}: not listening: {reason}; reconnecting")
        self.degraded = reason

    # -- publishing ------------------------------------------------------------------------------

    async def publish(self, channel: str, payload: str) -> None:
        """NOTIFY ``payload`` on ``channel`` (on the bus's publishing connection, in a transaction of
        its own: delivered at once). ValueError for a channel or payload PostgreSQL would refuse;
        :class:`~supervisor.errors.StoreError` when the database cannot be reached (the notice is
        not sent; the connection is opened again at the next publish)."""
        check_payload(check_channel(channel), payload)
        async with self._publish_lock:
            try:
                if self._publisher is None or self._publisher.closed:
                    self._publisher = await self._connect()
                await self._publisher.execute(NOTIFY_SQL, (channel, payload))
            except psycopg.OperationalError as exc:
                await self._close_publisher()
                raise StoreError(_where(self._conninfo), describe(exc)) from None

    async def _close_publisher(self) -> None:
        publisher, self._publisher = self._publisher, None
        if publisher is not None:
            with contextlib.suppress(psycopg.Error):
                await publisher.close()

    async def aclose(self) -> None:
        """Close the publishing connection (``serve`` closes its own when it ends)."""
        await self._close_publisher()


def capped_backoff(failures: int) -> float:
    """The wait after ``failures`` failures in a row (1, 2, ...): 0.1 s doubling up to 5 s."""
    return min(RECONNECT_CAP_S, RECONNECT_FIRST_S * 2.0 ** max(0, failures - 1))
