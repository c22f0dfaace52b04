"""Data of the CXone Agent Session fake: enums, records and the wire shapes of events.

Event payloads are ``dict[str, Any]``: PascalCase keys, string values with booleans as ``"True"`` /
``"False"`` as on the wire (docs/platforms.md, "Errors, event shapes and limits"), except ``AgentState.NextStates``, a
list of ``{"State", "OutReason"}`` objects. The field names are the ones NICE's agent SDK reads
(``@nice-devone/common-sdk`` ``model/agent/agent-state-event.js``, ``agent-session-start-event.js``,
``agent-session-end-event.js``, ``model/contact/call-contact-event.js``). Pure; no I/O.
"""

from __future__ import annotations

import collections
import enum
from dataclasses import dataclass, field
from typing import Any

Event = dict[str, Any]

#: How many superseded sessionIds a handle remembers as "stale" (replay) before they
#: become unknown (404). Bounds memory for long-lived sessions polled every second.
STALE_HISTORY = 64


class AgentStateName(enum.StrEnum):
    """Agent states a client may request with ``POST .../state`` (docs/platforms.md, "NICE CXone")."""

    AVAILABLE = "Available"
    UNAVAILABLE = "Unavailable"


class ContactStatus(enum.StrEnum):
    """``CallContactEvent.Status`` values the fake moves a contact through."""

    INCOMING = "Incoming"
    ACTIVE = "Active"
    HOLDING = "Holding"
    DISCONNECTED = "Disconnected"


class ContactAction(enum.StrEnum):
    """The ``interactions/{contactId}/<action>`` verbs the fake implements."""

    ACCEPT = "accept"
    HOLD = "hold"
    RESUME = "resume"
    END = "end"


class EndReason(enum.StrEnum):
    """Why a session ended (kept for tests and stats; not on the wire)."""

    CLIENT = "client"  # DELETE agent-sessions/{id}
    FORCED_LOGOFF = "forced_logoff"  # DELETE with forceLogoff: true [I]
    INACTIVITY = "inactivity"  # inactivityTimeout ran out
    FORCED = "forced"  # a test or the SESSION_END fault ended it


class PollOutcome(enum.Enum):
    """What a ``get-next-event`` call resolves to, before any fault is applied."""

    EVENTS = "events"  # 200 with events and a new sessionId
    IDLE = "idle"  # nothing queued: wait, then 304 (RFC 9110 §15.4.5: no body)
    REPLAY = "replay"  # stale id: 200 with AgentSessionStart + snapshot and a new sessionId
    ENDED = "ended"  # 409: the session is over and AgentSessionEnd was delivered
    UNKNOWN = "unknown"  # never issued (or forgotten): 404 [I]


class SimStateError(Exception):
    """A request the fake refuses; ``status`` and ``error`` become the HTTP error."""

    def __init__(self, status: int, error: str, description: str) -> None:
        super().__init__(description)
        self.status = status
        self.error = error
        self.description = description


def _tf(value: bool) -> str:
    """CXone's wire booleans are the strings ``"True"`` / ``"False"``."""
    return "True" if value else "False"


@dataclass(slots=True)
class Contact:
    """One call contact routed to the agent (a ``CallContactEvent`` source)."""

    contact_id: str
    master_id: str
    status: ContactStatus
    ani: str
    dnis: str
    skill: str
    start_utc: str
    changed_utc: str
    final: bool = False


@dataclass(slots=True)
class Handle:
    """One client's view of a session: its sessionId chain and its event queue."""

    key: str
    session: AgentSession
    current_id: str
    stale: collections.deque[str] = field(default_factory=lambda: collections.deque(maxlen=STALE_HISTORY))
    queue: list[Event] = field(default_factory=list)
    end_delivered: bool = False


@dataclass(slots=True)
class AgentSession:
    """One agent's logged-in session."""

    key: str
    agent_id: str
    bus_no: str
    station_id: str
    station_phone: str
    inactivity_timeout: float
    started_utc: str
    platform_session_id: str
    last_activity: float
    agent_state: AgentStateName = AgentStateName.UNAVAILABLE
    reason: str = ""
    state_since_utc: str = ""
    contacts: dict[str, Contact] = field(default_factory=dict)
    handles: list[Handle] = field(default_factory=list)
    ended: EndReason | None = None
    agent_uuid: str = ""
    inactivity_force_logout: bool = False


@dataclass(frozen=True, slots=True)
class PollResult:
    """The outcome of :meth:`SessionStore.poll`: what to answer and with which next id."""

    outcome: PollOutcome
    session_key: str | None = None
    next_id: str | None = None
    events: tuple[Event, ...] = ()


def session_start_event(session: AgentSession) -> Event:
    """``AgentSessionStart`` (docs/platforms.md, "NICE CXone")."""
    # docs/platforms.md, "NICE CXone": this SessionId is the platform's id, not the API sessionId
    return {
        "Type": "AgentSessionStart",
        "BusNo": session.bus_no,
        "AgentId": session.agent_id,
        "SessionId": session.platform_session_id,
        "StationId": session.station_id,
        "StationPhoneNumber": session.station_phone,
        "StationCallerId": session.station_phone,
        "DialerCampaign": "",
        "DialerCampaignStartTime": "",
        "SupervisorPermissionLevel": "0",
        "CanMask": "False",
        "IISHost": "127.0.0.1",
        "VCHost": "127.0.0.1",
        "StartTimeUTC": session.started_utc,
        # read by agent-session-start-event.js parse; neutral values [I]
        "AgentSchedulePermission": "False",
        "ScoreRecordingsPermission": "False",
        "HideAgentStatePermission": "False",
        "ClientConnectorPort": "0",
        "CanMultiPartyConference": "False",
        "MaxConcurrentChats": "0",
        "CanRecord": "False",
        "EnabledForMCH": "False",
        "UseCustomerCard": "False",
        "AgentUUId": session.agent_uuid,
        "EntityMode": "",
        "portNo": "0",
    }


def agent_state_event(session: AgentSession) -> Event:
    """``AgentState`` with the session's current state, in the names NICE's SDK reads
    (``agent-state-event.js`` ``parse``: ``CurrentState``, ``CurrentOutReason``, ``StartTimeUTC``,
    ``AcwTimeout``, ``IsAcw``, ``NextStates[{State, OutReason}]``, ``NextIsAcw``; JS reads keys
    case-sensitively, so ``IsACW`` or ``CurrentOutState`` would read as absent)."""
    return {
        "Type": "AgentState",
        "BusNo": session.bus_no,
        "AgentId": session.agent_id,
        "CurrentState": session.agent_state.value,
        "CurrentOutReason": session.reason,
        "StartTimeUTC": session.state_since_utc or session.started_utc,
        "AcwTimeout": "0",
        "IsAcw": "False",
        "NextStates": [],  # index 0 = the next state, 1 = the one after (nothing pending here)
        "NextIsAcw": "False",
        "IsExternal": "False",
    }


def contact_event(session: AgentSession, contact: Contact) -> Event:
    """``CallContactEvent`` for the contact's current status."""
    return {
        "Type": "CallContactEvent",
        "BusNo": session.bus_no,
        "AgentId": session.agent_id,
        "ContactID": contact.contact_id,
        "MasterID": contact.master_id,
        "Status": contact.status.value,
        # call-contact-event.js types originalState as a boolean (its meaning is [I])
        "OriginalState": "False",
        "CallType": "Regular",
        "DNIS": contact.dnis,
        "ANI": contact.ani,
        "Skill": contact.skill,
        "IsInbound": "True",
        "StartTimeUTC": contact.start_utc,
        "LastStateChangeTimeUTC": contact.changed_utc,
        "ScreenPopUrl": "",
        "DisconnectCode": "None" if not contact.final else "AgentDisconnect",
        "IsLogging": "False",
        "Timeout": "",
        "AllowDispositions": "False",
        "FinalState": _tf(contact.final),
        "ParentContactId": "",
        # the rest of what call-contact-event.js reads; neutral values [I]
        "StartTime": contact.start_utc,
        "LastStateChangeTime": contact.changed_utc,
        "ScreenPopUrlVariables": "",
        "Label": "",
        "IsLinked": "False",
        "TimeZones": "",
        "OtherInformation": "",
        "OtherInformationNewFormat": "",
        "BlendingToSkillName": "",
        "DeliveryType": "",
        "CustomData": "",
        "ComplianceRecord": "False",
        "ConfirmationRequired": "False",
        "OmniGroupId": "",
        "ExternalId": "",
        "AnsMachineOverride": "False",
        "AnsMachineOverrideEndTime": "",
        "InteractionId": contact.contact_id,
    }


_END_MESSAGES = {
    EndReason.CLIENT: "Agent session ended",
    EndReason.FORCED_LOGOFF: "Agent session ended",
    EndReason.INACTIVITY: "Inactivity timeout",
    EndReason.FORCED: "Agent session ended by the platform",
}


def session_end_event(session: AgentSession, reason: EndReason) -> Event:
    """``AgentSessionEnd`` as ``agent-session-end-event.js`` reads it: ``IISHost``, ``VCHost``,
    ``Message``, ``Success`` ("True" when the client ended it; the texts are [I]). ``Reason``
    is a simulator extension (why it ended)."""
    return {
        "Type": "AgentSessionEnd",
        "BusNo": session.bus_no,
        "AgentId": session.agent_id,
        "IISHost": "127.0.0.1",
        "VCHost": "127.0.0.1",
        "Message": _END_MESSAGES[reason],
        "Success": _tf(reason in (EndReason.CLIENT, EndReason.FORCED_LOGOFF)),
        "Reason": reason.value,
    }
