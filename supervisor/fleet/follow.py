"""The owner's side of commands written by other members: notices followed, rows re-read, acted on.

Another member that accepted ``ctl start``/``ctl stop``/``AddSession``/``RemoveSession`` for a session
of ours wrote its desired row and told us on ``ss_desired`` (supervisor/fleet/desired.py). A notice
carries only which session: the row is the truth, so the owner **re-reads it** and does what it says
(:func:`decide`): start a session that should run and does not, stop one that runs and should not,
remove a session added over a control socket whose row is gone. Notices of one session that arrive
before its re-read are followed once (the re-read sees the last write); a notice for a shard not owned
here is dropped (its owner, or the next one at its acquisition, reads the row). A notice on
``ss_attributes`` schedules the send of an update another member accepted into the outbox.

The handlers run on the event loop and never block: they note the session and wake :meth:`serve`,
which re-reads and acts one session at a time.
"""

from __future__ import annotations

import contextlib
import enum
import json
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import anyio
from anyio.abc import TaskStatus

from supervisor.errors import SupervisorError
from supervisor.fleet.desired import ATTRIBUTES_CHANNEL, DESIRED_CHANNEL
from supervisor.store.model import DesiredSession, DesiredState

__all__ = ["DesiredFollower", "Follow", "NoticeBus", "decide"]


class Follow(enum.StrEnum):
    """What the owner does for a session whose desired row another member wrote."""

    START = "start"
    STOP = "stop"
    REMOVE = "remove"
    NOTHING = "nothing"


def decide(row: DesiredSession | None, *, running: bool, added: bool) -> Follow:
    """What the row asks of the owner, given whether the session runs here and whether it is one
    added over a control socket (only such a session is removed when its row is gone)."""
    if row is None:
        return Follow.REMOVE if added else Follow.NOTHING
    if row.state is DesiredState.RUNNING:
        return Follow.NOTHING if running else Follow.START
    if row.state is DesiredState.STOPPED:
        return Follow.STOP if running else Follow.NOTHING
    # TERMINATED is the owner's own verdict (a fail-fast), never a command from a peer
    return Follow.NOTHING


class _Notice(Protocol):
    @property
    def payload(self) -> str: ...


class NoticeBus(Protocol):
    """The fleet bus's registration (supervisor/fleet/bus.py: ``FleetBus.on``, ``on_listening``)."""

    def on(self, channel: str, handler: Callable[[Any], None]) -> None: ...

    def on_listening(self, callback: Callable[[bool], None]) -> None: ...


# the pending entry that stands for every owned session (session ids are never empty)
_EVERYTHING = ""


def _parsed(payload: str) -> dict[str, Any] | None:
    try:
        value = json.loads(payload)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and 0 < len(value) <= 200 else None


class DesiredFollower:
    """Follows ``ss_desired`` and ``ss_attributes`` for the sessions ``owns`` says are here (module docstring)."""

    def __init__(
        self,
        member: str,
        *,
        owns: Callable[[str], bool],
        follow: Callable[[str], Awaitable[None]],
        attributes: Callable[[str, str, str], None] | None = None,
        everything: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.member = member
        self._owns = owns
        self._follow = follow
        self._attributes = attributes
        # every owned session's row followed again (after the bus lost notices)
        self._everything = everything
        self._pending: dict[str, None] = {}  # insertion-ordered set: followed in the order told
        self._wake = anyio.Event()
        #: notices followed, and dropped (ours, malformed, or of a shard not owned here)
        self.followed = 0
        self.dropped = 0

    def register(self, bus: NoticeBus) -> None:
        """The handlers on ``bus`` (before it serves), and the re-read after each of its reconnections."""
        bus.on(DESIRED_CHANNEL, self.on_desired)
        bus.on(ATTRIBUTES_CHANNEL, self.on_attributes)
        bus.on_listening(self.on_listening)

    def on_listening(self, reconnected: bool) -> None:
        """The bus listens again after a reconnection: notices sent meanwhile were lost (PostgreSQL
        keeps none for a session that was not listening), so every owned session's row is re-read."""
        if reconnected and self._everything is not None:
            self._pending[_EVERYTHING] = None
            self._wake.set()

    def _session(self, notice: _Notice) -> tuple[str, dict[str, Any]] | None:
        body = _parsed(notice.payload)
        session_id = None if body is None else _text(body.get("sessionId"))
        if body is None or session_id is None or body.get("member") == self.member:
            self.dropped += 1
            return None
        if not self._owns(session_id):
            self.dropped += 1
            return None
        return session_id, body

    def on_desired(self, notice: _Notice) -> None:
        found = self._session(notice)
        if found is None:
            return
        self._pending[found[0]] = None
        self._wake.set()

    def on_attributes(self, notice: _Notice) -> None:
        found = self._session(notice)
        if found is None or self._attributes is None:
            return
        session_id, body = found
        tenant, conversation = _text(body.get("tenant")), _text(body.get("conversationId"))
        if tenant is None or conversation is None:
            self.dropped += 1
            return
        self.followed += 1
        self._attributes(session_id, tenant, conversation)

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            await self._wake.wait()
            self._wake = anyio.Event()
            while self._pending:
                session_id = next(iter(self._pending))
                del self._pending[session_id]
                if session_id == _EVERYTHING:
                    await self._follow_everything()
                else:
                    await self.follow_now(session_id)

    async def _follow_everything(self) -> None:
        if self._everything is not None:
            with contextlib.suppress(SupervisorError):
                await self._everything()

    async def follow_now(self, session_id: str) -> None:
        """Re-read ``session_id``'s row and act on it now (a failure of the store or of a start is
        the store's and the runtime's to report: the next notice, or the next acquisition, retries)."""
        if not self._owns(session_id):
            return
        self.followed += 1
        # a store that cannot be read reports its health itself (STORE_DEGRADED), a start refused is
        # the runtime's: the row stays, and the shard's next acquisition reads it again
        with contextlib.suppress(SupervisorError):
            await self._follow(session_id)
