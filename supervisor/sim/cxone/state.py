"""Pure state of the CXone Agent Session fake: sessions, the rolling sessionId chain, events.

No I/O and no asyncio here: the aiohttp layer (:mod:`.api`) calls these methods and
turns the results into HTTP. Time comes from an injected :class:`~supervisor.clock.Clock`
and ids from a seeded :class:`random.Random`, so unit tests drive everything with a
:class:`~supervisor.clock.FakeClock` and never sleep.

Model (docs/platforms.md, "NICE CXone"; docs/simulators-cxone.md):

* An :class:`AgentSession` is one agent's logged-in session (started with
  ``POST agent-sessions``). Its *key* is the first sessionId handed out; it never changes
  and is what fault matching and the recorder use.
* Each client attached to it (the starter, and every ``agent-sessions/join``) gets a
  :class:`Handle`: its own rolling sessionId chain and its own event queue. Events are
  broadcast to every handle of the session.
* ``get-next-event`` with the handle's *current* id delivers the queued events and rotates
  the id ("each response carries a new sessionId that must be used on the next poll").
  With an *older* id of the chain it replays ``AgentSessionStart`` plus snapshot events
  (AgentSessionEvents doc), and also rotates. Once the session has ended, the final 200
  carries ``AgentSessionEnd``; every later poll is 409.
* No poll, keep-alive or other request for ``inactivity_timeout`` seconds ends the
  session (checked lazily, on the next access and by :meth:`SessionStore.sweep`).

The records, enums and event shapes live in :mod:`supervisor.sim.cxone.model` (re-exported here).
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Iterable

from supervisor.clock import Clock, iso_utc
from supervisor.sim.cxone.model import (
    STALE_HISTORY,
    AgentSession,
    AgentStateName,
    Contact,
    ContactAction,
    ContactStatus,
    EndReason,
    Event,
    Handle,
    PollOutcome,
    PollResult,
    SimStateError,
    agent_state_event,
    contact_event,
    session_end_event,
    session_start_event,
)

__all__ = [
    "STALE_HISTORY",
    "AgentSession",
    "AgentStateName",
    "Contact",
    "ContactAction",
    "ContactStatus",
    "EndReason",
    "Event",
    "Handle",
    "PollOutcome",
    "PollResult",
    "SessionStore",
    "SimStateError",
    "iso_utc",
]


class SessionStore:
    """Every agent session of one simulator. Pure; see the module docstring for the model.

    ``on_change(handle_key)`` is called whenever a handle gets something new to deliver
    (events queued, session ended), so the I/O layer can wake a held long poll.
    """

    def __init__(
        self,
        clock: Clock,
        rng: random.Random,
        *,
        default_inactivity_timeout: float = 300.0,
        on_change: Callable[[str], None] | None = None,
    ) -> None:
        self._clock = clock
        self._rng = rng
        self._default_inactivity = default_inactivity_timeout
        self._on_change = on_change
        self._sessions: dict[str, AgentSession] = {}
        self._by_agent: dict[str, AgentSession] = {}
        self._ids: dict[str, Handle] = {}

    # ----------------------------------------------------------------- helpers
    def _new_id(self) -> str:
        return f"{self._rng.getrandbits(128):032x}"

    def _now_utc(self) -> str:
        return iso_utc(self._clock.time())

    def _notify(self, handle: Handle) -> None:
        if self._on_change is not None:
            self._on_change(handle.key)

    def _broadcast(self, session: AgentSession, event: Event) -> None:
        for handle in session.handles:
            handle.queue.append(dict(event))
            self._notify(handle)

    def _new_handle(self, session: AgentSession, key: str | None = None) -> Handle:
        first = key if key is not None else self._new_id()
        handle = Handle(key=first, session=session, current_id=first)
        session.handles.append(handle)
        self._ids[first] = handle
        handle.queue.append(session_start_event(session))
        handle.queue.append(agent_state_event(session))
        return handle

    def _rotate(self, handle: Handle) -> str:
        if handle.stale.maxlen is not None and len(handle.stale) == handle.stale.maxlen:
            self._ids.pop(handle.stale[0], None)
        handle.stale.append(handle.current_id)
        handle.current_id = self._new_id()
        self._ids[handle.current_id] = handle
        return handle.current_id

    def _expire_if_idle(self, session: AgentSession) -> None:
        if (
            session.ended is None
            and session.inactivity_timeout > 0
            and self._clock.monotonic() - session.last_activity > session.inactivity_timeout
        ):
            self.end(session.key, EndReason.INACTIVITY)

    def _lookup(self, session_id: str) -> Handle:
        handle = self._ids.get(session_id)
        if handle is None:
            raise SimStateError(404, "invalid_session", "Session not found")
        self._expire_if_idle(handle.session)
        return handle

    def _live(self, session_id: str) -> Handle:
        handle = self._lookup(session_id)
        if handle.session.ended is not None:
            raise SimStateError(409, "session_ended", "The agent session has ended")
        handle.session.last_activity = self._clock.monotonic()
        return handle

    # -------------------------------------------------------------- commands
    def start(
        self,
        agent_id: str,
        bus_no: str,
        *,
        station_id: str = "",
        station_phone: str = "",
        inactivity_timeout: float | None = None,
        inactivity_force_logout: bool = False,
    ) -> AgentSession:
        """``POST agent-sessions``: log the agent in; the returned session's key is its first sessionId.

        Raises:
            SimStateError: 400 without a station, 409 if the agent already has a live session.
        """
        if not station_id and not station_phone:
            raise SimStateError(400, "invalid_request", "stationId or stationPhoneNumber is required")
        existing = self._by_agent.get(agent_id)
        if existing is not None:
            self._expire_if_idle(existing)
            if existing.ended is None:
                # [I] no documented body; join is the documented way to share a session
                raise SimStateError(409, "session_exists", "The agent already has an active session")
        timeout = self._default_inactivity if inactivity_timeout is None else inactivity_timeout
        key = self._new_id()
        now_utc = self._now_utc()
        session = AgentSession(
            key=key,
            agent_id=agent_id,
            bus_no=bus_no,
            station_id=station_id,
            station_phone=station_phone,
            inactivity_timeout=timeout,
            started_utc=now_utc,
            platform_session_id=str(self._rng.randrange(10**8, 10**9)),
            last_activity=self._clock.monotonic(),
            state_since_utc=now_utc,
            agent_uuid=str(uuid.UUID(int=self._rng.getrandbits(128), version=4)),
            inactivity_force_logout=inactivity_force_logout,
        )
        self._sessions[key] = session
        self._by_agent[agent_id] = session
        self._new_handle(session, key)
        return session

    def join(self, agent_id: str) -> Handle:
        """``POST agent-sessions/join``: a new handle (own sessionId chain) on the agent's live session.

        Raises:
            SimStateError: 404 when the agent has no live session.
        """
        session = self._by_agent.get(agent_id)
        if session is not None:
            self._expire_if_idle(session)
        if session is None or session.ended is not None:
            raise SimStateError(404, "session_not_found", "The agent has no active session to join")
        session.last_activity = self._clock.monotonic()
        return self._new_handle(session)

    def end(
        self,
        session_id_or_key: str,
        reason: EndReason = EndReason.CLIENT,
        *,
        silent: bool = False,
        end_contacts: bool = False,
    ) -> AgentSession:
        """End a session (DELETE, inactivity, or forced). Queues ``AgentSessionEnd`` on every handle.

        ``silent`` skips the final 200: the next poll of every handle is already 409 (the
        SESSION_ENDED fault: the session vanished without telling the client).

        Raises:
            SimStateError: 404 for an unknown id, 409 if already ended.
        """
        handle = self._ids.get(session_id_or_key)
        session = handle.session if handle is not None else self._sessions.get(session_id_or_key)
        if session is None:
            raise SimStateError(404, "invalid_session", "Session not found")
        if session.ended is not None:
            raise SimStateError(409, "session_ended", "The agent session has ended")
        if end_contacts:
            # DELETE {"endContacts": true} (NICE end-session-request.d.ts): the open contacts end
            # first, each with its final CallContactEvent [I]
            for contact in session.contacts.values():
                if not contact.final:
                    contact.status, contact.final = ContactStatus.DISCONNECTED, True
                    contact.changed_utc = self._now_utc()
                    self._broadcast(session, contact_event(session, contact))
        session.ended = reason
        if self._by_agent.get(session.agent_id) is session:
            del self._by_agent[session.agent_id]
        if silent:
            for handle in session.handles:
                handle.end_delivered = True
                handle.queue.clear()
                self._notify(handle)
            return session
        self._broadcast(session, session_end_event(session, reason))
        return session

    def touch(self, session_id: str) -> AgentSession:
        """``POST .../keep-alive``: count as activity. Raises 404/409 like every session call."""
        return self._live(session_id).session

    def set_state(self, session_id: str, state: str, reason: str = "") -> AgentSession:
        """``POST .../state?state=&reason=``: change the agent state and queue an ``AgentState`` event.

        Raises:
            SimStateError: 400 for a state other than Available/Unavailable; 404/409 as usual.
        """
        session = self._live(session_id).session
        try:
            name = AgentStateName(state)
        except ValueError:
            raise SimStateError(400, "invalid_request", "state must be Available or Unavailable") from None
        session.agent_state = name
        session.reason = reason if name is AgentStateName.UNAVAILABLE else ""
        session.state_since_utc = self._now_utc()
        self._broadcast(session, agent_state_event(session))
        return session

    def push_contact(
        self, session_key: str, *, ani: str = "5551230000", dnis: str = "5559870000", skill: str = "1001"
    ) -> Contact:
        """Route a new inbound call to the session (tests): queues a ``CallContactEvent`` (Incoming)."""
        session = self.session(session_key)
        if session.ended is not None:
            raise SimStateError(409, "session_ended", "The agent session has ended")
        contact_id = str(self._rng.randrange(10**9, 10**10))
        now_utc = self._now_utc()
        contact = Contact(contact_id, contact_id, ContactStatus.INCOMING, ani, dnis, skill, now_utc, now_utc)
        session.contacts[contact_id] = contact
        self._broadcast(session, contact_event(session, contact))
        return contact

    def push_event(self, session_key: str, event: Event) -> None:
        """Queue an arbitrary event on every handle of the session (tests)."""
        self._broadcast(self.session(session_key), event)

    def contact_action(self, session_id: str, contact_id: str, action: str) -> Contact:
        """``POST .../interactions/{contactId}/{accept|hold|resume|end}``: move the contact, queue its event.

        Raises:
            SimStateError: 404 unknown action or contact; 409 when the action does not fit the status.
        """
        session = self._live(session_id).session
        try:
            verb = ContactAction(action)
        except ValueError:
            raise SimStateError(404, "not_found", f"Unknown interaction action {action[:40]!r}") from None
        contact = session.contacts.get(contact_id)
        if contact is None or contact.final:
            raise SimStateError(404, "not_found", "Contact not found")
        allowed: dict[ContactAction, tuple[Iterable[ContactStatus], ContactStatus]] = {
            ContactAction.ACCEPT: ((ContactStatus.INCOMING,), ContactStatus.ACTIVE),
            ContactAction.HOLD: ((ContactStatus.ACTIVE,), ContactStatus.HOLDING),
            ContactAction.RESUME: ((ContactStatus.HOLDING,), ContactStatus.ACTIVE),
            ContactAction.END: (tuple(ContactStatus), ContactStatus.DISCONNECTED),
        }
        sources, target = allowed[verb]
        if contact.status not in sources:
            raise SimStateError(
                409, "invalid_state", f"Cannot {verb.value} a contact that is {contact.status.value}"
            )
        contact.status = target
        contact.changed_utc = self._now_utc()
        contact.final = target is ContactStatus.DISCONNECTED
        self._broadcast(session, contact_event(session, contact))
        return contact

    # ----------------------------------------------------------------- polling
    def poll(self, session_id: str, *, force_replay: bool = False) -> PollResult:
        """Resolve one ``get-next-event`` attempt (without waiting).

        IDLE means "nothing yet": the caller waits (long poll) and calls again, and answers
        304 if still IDLE at the deadline. ``force_replay`` treats a current id as stale
        (the stale-replay fault).
        """
        handle = self._ids.get(session_id)
        if handle is None:
            return PollResult(PollOutcome.UNKNOWN)
        session = handle.session
        self._expire_if_idle(session)
        key = session.key
        if session.ended is not None:
            if handle.end_delivered:
                return PollResult(PollOutcome.ENDED, key)
            # the final 200: whatever was queued, ending with AgentSessionEnd
            handle.end_delivered = True
            events = tuple(handle.queue)
            handle.queue.clear()
            return PollResult(PollOutcome.EVENTS, key, self._rotate(handle), events)
        session.last_activity = self._clock.monotonic()
        if force_replay or session_id != handle.current_id:
            # AgentSessionEvents: an old id replays AgentSessionStart plus snapshot events;
            # the snapshot supersedes whatever was queued.
            handle.queue.clear()
            snapshot = [session_start_event(session), agent_state_event(session)]
            snapshot += [contact_event(session, c) for c in session.contacts.values() if not c.final]
            return PollResult(PollOutcome.REPLAY, key, self._rotate(handle), tuple(snapshot))
        if not handle.queue:
            return PollResult(PollOutcome.IDLE, key)
        events = tuple(handle.queue)
        handle.queue.clear()
        return PollResult(PollOutcome.EVENTS, key, self._rotate(handle), events)

    def sweep(self) -> list[str]:
        """End every session idle past its inactivity timeout; returns their keys."""
        ended: list[str] = []
        for session in list(self._sessions.values()):
            was = session.ended
            self._expire_if_idle(session)
            if was is None and session.ended is not None:
                ended.append(session.key)
        return ended

    # ---------------------------------------------------------------- queries
    def handle(self, session_id: str) -> Handle | None:
        """The handle a sessionId (current or stale) belongs to, or None."""
        return self._ids.get(session_id)

    def session(self, session_id_or_key: str) -> AgentSession:
        """The session for a key or any of its handles' ids.

        Raises:
            SimStateError: 404 when unknown.
        """
        handle = self._ids.get(session_id_or_key)
        session = handle.session if handle is not None else self._sessions.get(session_id_or_key)
        if session is None:
            raise SimStateError(404, "invalid_session", "Session not found")
        return session

    def session_key_of(self, session_id: str) -> str | None:
        """The stable session key for any sessionId of its chains (fault matching), or None."""
        handle = self._ids.get(session_id)
        return handle.session.key if handle is not None else None

    def session_for_agent(self, agent_id: str) -> AgentSession | None:
        """The agent's live session, if any."""
        return self._by_agent.get(agent_id)

    def sessions(self) -> list[AgentSession]:
        """Every session ever started (live and ended), oldest first."""
        return list(self._sessions.values())
