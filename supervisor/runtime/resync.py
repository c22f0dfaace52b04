"""Closing the gaps the platform-event hub finds, where each platform allows it (docs/platforms.md, "Gaps").

The hub (supervisor/api/platform_events.py) finds a gap when a session's connection is back (a reconnection,
the daemon's start, a CXone resync) and hands it to :meth:`Resyncer.opened`, synchronously. What is done:

* **Web Messaging**: the guest history (``GET /api/v2/webmessaging/messages`` with the guest JWT, as Genesys'
  mobile transport SDK reads it) is read back to the newest message the session delivered
  (:meth:`~supervisor.transports.webmessaging.WebMessagingConnection.missed_messages`); the gap is told
  ``resync: "replayed"``, then every message missed, oldest first, flagged ``replayed`` (the hub drops one whose
  ``messageId`` the session delivered already: never twice). A history that cannot be read: ``"failed"``. A
  session whose guest session is new (its first connection, ``newSession: true``) missed nothing: ``"none"``.
* **CXone**: the platform itself sends a snapshot after a (re)join or a resync (``AgentSessionStart``, the agent's
  state, its open contacts: NICE ``cxone-get-next-adapter.js``); the transport hands that batch to its snapshot
  sink, which delivers it flagged ``snapshot`` (:meth:`Resyncer.snapshot_batch`). The gap is told
  ``"snapshot"`` when that batch is what brought the session back, else ``"none"``.
* **Genesys notifications** have no replay: ``"none"``; for a conversation topic, each conversation the session
  heard of (:meth:`Resyncer.noted`) is read once over REST (``GET /api/v2/conversations/{id}``, PY269
  ``ConversationsApi.get_conversation``) and delivered flagged ``snapshot`` (``"snapshot"``; a read that fails:
  ``"failed"``).

Every history and snapshot read goes through the one retry executor on ``genesys:api`` (its pace, its circuit,
its retry budget), at most ``[events] resyncInFlight`` at once for the whole daemon.
"""

from __future__ import annotations

import contextlib
import re
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any, Final

import anyio
from anyio.abc import TaskStatus

from supervisor.api.platform_events import GapOpened, GapReason, PlatformEvents, Resync
from supervisor.boundary import SessionContext
from supervisor.errors import CircuitOpenError, OperationError
from supervisor.runtime.session_runner import SessionRunner
from supervisor.runtime.sessions import SessionReader
from supervisor.taxonomy import Channel
from supervisor.transports.base import Connection, HistoryReader

__all__ = ["RESYNC_IN_FLIGHT", "ConversationRead", "Resyncer"]

#: ``[events] resyncInFlight``: history and snapshot reads at once, for the whole daemon
RESYNC_IN_FLIGHT: Final = 16
#: conversations a notifications session remembers for its snapshot (the newest heard)
_CONVERSATIONS: Final = 50
# Genesys ids are UUIDs: nothing else is read as a conversation (a path segment, never a route)
_UUID: Final = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
#: what a Web Messaging message is on the platform stream (the guest socket's frame class)
_WM_EVENT: Final = "StructuredMessage"

#: one conversation's current state (``GET /api/v2/conversations/{id}``), for a session's context
ConversationRead = Callable[[SessionContext, str], Awaitable[Mapping[str, Any]]]


def _conversation_of(topic: str, body: object) -> str | None:
    """The conversation a notification names: a user's conversation event's ``eventBody.id``
    (``v2.users.{id}.conversations``, the topic the daemon subscribes: PY269
    ``QueueConversationEventTopicConversation.id``), or a conversation topic's own id
    (``v2.conversations.{id}.…``)."""
    parts = topic.split(".")
    if len(parts) == 4 and parts[:2] == ["v2", "users"] and parts[3] == "conversations":
        value = body.get("id") if isinstance(body, Mapping) else None
        return value if isinstance(value, str) and _UUID.fullmatch(value) else None
    if len(parts) >= 3 and parts[:2] == ["v2", "conversations"] and _UUID.fullmatch(parts[2]):
        return parts[2]
    return None


class Resyncer:
    """The hub's gap handler (see the module docstring); :meth:`serve` runs its reads."""

    def __init__(
        self,
        hub: PlatformEvents,
        sessions: SessionReader | None = None,
        *,
        in_flight: int = RESYNC_IN_FLIGHT,
        read_conversation: ConversationRead | None = None,
    ) -> None:
        self._hub = hub
        # the session table (the supervisor attaches the one it writes: it is made after the wiring)
        self._sessions = sessions
        self._read_conversation = read_conversation
        self._in_flight = max(in_flight, 1)
        self.limiter: anyio.CapacityLimiter | None = None  # made by serve(), on its event loop
        # gaps waiting for serve() to start their reads; it is woken by the next one
        self._queued: deque[GapOpened] = deque()
        self._wake: anyio.Event | None = None
        # CXone sessions whose snapshot batch is being delivered now
        self._snapshots: set[str] = set()
        # per notifications session: the conversations it heard of, newest last
        self._conversations: dict[str, OrderedDict[str, str]] = {}
        # counts (never content)
        self.replayed = 0
        self.snapshots = 0
        self.failed = 0
        hub.resync_with(self.opened)

    def attach(self, sessions: SessionReader) -> None:
        """The session table whose runners the gaps are closed for."""
        self._sessions = sessions

    def _runner(self, session_id: str) -> SessionRunner | None:
        return None if self._sessions is None else self._sessions.runners.get(session_id)

    # ------------------------------------------------------------------ the hub's side (synchronous)
    def opened(self, gap: GapOpened) -> None:
        """A gap the hub found: told at once when nothing is read for it, else queued for :meth:`serve`."""
        runner = self._runner(gap.session_id)
        channel = None if runner is None else runner.context.channel
        if channel is Channel.AGENT_SESSION:
            # the platform's snapshot is the batch being delivered now (a RESYNCED gap comes right
            # before its replay's batch): told before it, in the same step
            snapshot = gap.reason is GapReason.RESYNCED or gap.session_id in self._snapshots
            self._tell(gap, Resync.SNAPSHOT if snapshot else Resync.NONE)
            return
        if channel is Channel.WEBMESSAGING or (
            channel is Channel.NOTIFICATIONS and self._conversations.get(gap.session_id)
        ):
            self._queued.append(gap)
            if self._wake is not None:
                self._wake.set()
            return
        self._tell(gap, Resync.NONE)

    @contextlib.contextmanager
    def snapshot_batch(self, session_id: str) -> Iterator[None]:
        """While a CXone session's snapshot batch is delivered (the transport's snapshot sink)."""
        self._snapshots.add(session_id)
        try:
            yield
        finally:
            self._snapshots.discard(session_id)

    def noted(self, session_id: str, topic: str, body: object) -> None:
        """A notification a session delivered: the conversation it names is remembered for the
        session's next gap (its snapshot)."""
        conversation = _conversation_of(topic, body)
        if conversation is None:
            return
        known = self._conversations.setdefault(session_id, OrderedDict())
        known.pop(conversation, None)
        known[conversation] = topic
        while len(known) > _CONVERSATIONS:
            known.popitem(last=False)

    def _tell(self, gap: GapOpened, resync: Resync) -> None:
        self._hub.gap(
            gap.session_id,
            seconds=gap.seconds,
            resync=resync,
            reason=gap.reason,
            from_seq=gap.from_seq,
            platform=gap.platform,
        )

    # ------------------------------------------------------------------ the reads
    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Run the reads of the queued gaps (each in its own task, at most ``in_flight`` reading)."""
        self.limiter = anyio.CapacityLimiter(self._in_flight)
        async with anyio.create_task_group() as tg:
            task_status.started()
            while True:
                self._wake = anyio.Event()
                while self._queued:
                    gap = self._queued.popleft()
                    tg.start_soon(self.close_gap, gap, name=f"resync:{gap.session_id}")
                await self._wake.wait()

    async def close_gap(self, gap: GapOpened) -> None:
        """Read what the platform allows for ``gap``, then tell it and deliver what was read."""
        runner = self._runner(gap.session_id)
        if runner is None:
            self._tell(gap, Resync.NONE)
            return
        if runner.context.channel is Channel.WEBMESSAGING:
            await self._replay(gap, runner.live)
        else:
            await self._snapshot(gap, runner.context)

    def _reading(self) -> anyio.CapacityLimiter:
        """A place among the reads in flight (``[events] resyncInFlight``)."""
        if self.limiter is None:
            self.limiter = anyio.CapacityLimiter(self._in_flight)
        return self.limiter

    async def _replay(self, gap: GapOpened, connection: Connection | None) -> None:
        if not isinstance(connection, HistoryReader) or connection is None:
            self._tell(gap, Resync.FAILED if gap.reason is GapReason.RECONNECTED else Resync.NONE)
            return
        if gap.reason is GapReason.STARTED and connection.session_response.get("newSession") is True:
            self._tell(gap, Resync.NONE)  # a new guest session: there was nothing before it
            return
        async with self._reading():
            missed = await connection.missed_messages()
        if missed is None:
            self.failed += 1
            self._tell(gap, Resync.FAILED)
            return
        self._tell(gap, Resync.REPLAYED)
        for message in missed:
            message_id = message.get("id")
            ids = {"messageId": message_id} if isinstance(message_id, str) else {}
            if self._hub.delivered(gap.session_id, "genesys", _WM_EVENT, message, ids, replayed=True):
                self.replayed += 1

    async def _snapshot(self, gap: GapOpened, context: SessionContext) -> None:
        read = self._read_conversation
        known = list(self._conversations.get(gap.session_id, {}).items())
        if read is None or not known:
            self._tell(gap, Resync.NONE)
            return
        states: list[tuple[str, str, Mapping[str, Any]]] = []
        try:
            for conversation, topic in known:
                async with self._reading():
                    states.append((conversation, topic, await read(context, conversation)))
        except (OperationError, CircuitOpenError):
            self.failed += 1
            self._tell(gap, Resync.FAILED)
            return
        self._tell(gap, Resync.SNAPSHOT)
        for conversation, topic, state in states:
            self.snapshots += 1
            self._hub.delivered(
                gap.session_id, "genesys", topic, state, {"conversationId": conversation}, snapshot=True
            )
