"""Conversations of the Genesys simulator: participants, their communications, and who may create them.

Pure data plus small decisions; no I/O. A conversation exists only once something created it,
as on the platform (docs/taxonomy.md, "What the daemon can and cannot verify"): a Web Messaging ``configureSession`` that starts a session, the
admin API's ``POST {admin}/conversations``, or the Python API
(:meth:`~supervisor.sim.genesys.GenesysSimulator.create_conversation`). Every lookup of an unknown
id answers None, and the routes turn that into 404 ``not.found`` (docs/platforms.md, "Errors, limits and ids").

Shapes follow ``PureCloudPlatformClientV2`` 269.0.0 (PY269):

- ``models/conversation.py`` ``Conversation``: ``id, startTime, endTime, participants, selfUri``; **no**
  ``state`` on a read ("When reading conversations, this field will never have a value present":
  it is an update's input only);
- ``models/participant.py`` ``Participant``: ``id, startTime, endTime, connectedTime, userId, purpose,
  participantType, attributes, messages[Message]`` and **no** participant-level ``state``;
- ``models/message.py`` ``Message`` (one messaging communication): ``id`` (the communicationId),
  ``state``/``initialState`` (``alerting|connected|parked|disconnected``), ``direction``,
  ``disconnectType``, ``connectedTime``, ``disconnectedTime``, ``type`` (``webmessaging``), ``messages``.

Simulator choice, documented in docs/simulators.md: a new conversation is routed to an agent at
once (the agent participant with a ``userId`` and a connected communication), so an agent-side
send has a communication to use without an ACD.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "UUID_RE",
    "Communication",
    "Conversation",
    "ConversationChange",
    "ConversationStore",
    "Participant",
    "well_formed_id",
]

#: Genesys ids (conversation, participant, communication, user) are UUIDs (docs/platforms.md, "Errors, limits and ids")
UUID_RE = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
#: PY269 models/message.py allowed ``state`` values
COMMUNICATION_STATES = ("alerting", "connected", "parked", "disconnected")


def well_formed_id(value: str) -> bool:
    """Whether ``value`` is a UUID, the only form Genesys gives its ids."""
    return UUID_RE.match(value) is not None


@dataclass(slots=True)
class Communication:
    """One messaging communication of a participant (PY269 ``Message``)."""

    id: str
    state: str
    direction: str  # inbound for the customer (the guest wrote first), outbound for the agent
    connected_time: str
    disconnected_time: str | None = None
    disconnect_type: str | None = None
    message_ids: list[str] = field(default_factory=list)  # the MessageDetails of this communication

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "state": self.state,
            "initialState": "connected",
            "held": False,
            "direction": self.direction,
            "type": "webmessaging",
            "provider": "PureCloud Messaging",
            "connectedTime": self.connected_time,
            "messages": [{"messageId": m, "messageStatus": "sent"} for m in self.message_ids],
        }
        if self.disconnected_time is not None:
            out["disconnectedTime"] = self.disconnected_time
        if self.disconnect_type is not None:
            out["disconnectType"] = self.disconnect_type
        return out


@dataclass(slots=True)
class Participant:
    """A conversation participant (PY269 ``Participant``): its state is its communications'."""

    id: str
    purpose: str  # "customer" or "agent"
    start_time: str
    communication: Communication
    user_id: str | None = None  # the agent's user (PY269 Participant.userId)
    end_time: str | None = None
    attributes: dict[str, str] = field(default_factory=dict)

    @property
    def state(self) -> str:
        """The state of the participant's communication (for the media-participant views)."""
        return self.communication.state

    @property
    def connected(self) -> bool:
        return self.communication.state != "disconnected"

    def to_wire(self) -> dict[str, Any]:
        """PY269 ``Participant``: ``messages[]`` carries the communication, no participant ``state``."""
        out: dict[str, Any] = {
            "id": self.id,
            "startTime": self.start_time,
            "connectedTime": self.communication.connected_time,
            "purpose": self.purpose,
            "participantType": "External" if self.purpose == "customer" else "Internal",
            "attributes": dict(self.attributes),
            "messages": [self.communication.to_wire()],
        }
        if self.user_id is not None:
            out["userId"] = self.user_id
        if self.end_time is not None:
            out["endTime"] = self.end_time
        return out

    def media_wire(self) -> dict[str, Any]:
        """PY269 ``MessageMediaParticipant``: a media participant *is* its communication, so it has a ``state``."""
        comm = self.communication
        out: dict[str, Any] = {
            "id": self.id,
            "startTime": self.start_time,
            "connectedTime": comm.connected_time,
            "purpose": self.purpose,
            "state": comm.state,
            "direction": comm.direction,
            "held": False,
            "attributes": dict(self.attributes),
            "type": "webmessaging",
            "messages": [{"messageId": m, "messageStatus": "sent"} for m in comm.message_ids],
        }
        if self.user_id is not None:
            out["user"] = {"id": self.user_id, "selfUri": f"/api/v2/users/{self.user_id}"}
        if self.end_time is not None:
            out["endTime"] = self.end_time
        if comm.disconnect_type is not None:
            out["disconnectType"] = comm.disconnect_type
        return out


@dataclass(slots=True)
class Conversation:
    """A messaging conversation: one customer and one agent participant."""

    id: str
    start_time: str
    participants: dict[str, Participant]
    end_time: str | None = None
    message_ids: set[str] = field(default_factory=set)  # Idempotency-Key values seen (409 [I])
    messages: dict[str, dict[str, Any]] = field(default_factory=dict)  # MessageData by id
    transcript: list[dict[str, Any]] = field(default_factory=list)  # guest-visible messages

    def customer(self) -> Participant:
        return next(p for p in self.participants.values() if p.purpose == "customer")

    def agent(self) -> Participant:
        return next(p for p in self.participants.values() if p.purpose == "agent")

    @property
    def state(self) -> str:
        """``connected`` while anyone is connected, then ``disconnected``: the simulator's own view,
        never on the wire (PY269 ``Conversation.state`` has no value when read)."""
        return "connected" if any(p.connected for p in self.participants.values()) else "disconnected"

    def communication(self, communication_id: str) -> Participant | None:
        """The participant whose communication has this id, or None."""
        return next((p for p in self.participants.values() if p.communication.id == communication_id), None)

    def remember(self, message: dict[str, Any], keep: int = 500) -> None:
        """Keep a Web Messaging message for the guest REST transcript (the newest ``keep``)."""
        self.transcript.append(message)
        if len(self.transcript) > keep:
            del self.transcript[: len(self.transcript) - keep]

    def to_wire(self) -> dict[str, Any]:
        """PY269 ``Conversation`` (``GET /api/v2/conversations/{id}``): without ``state``, which a
        read never carries (PY269); who is connected is each participant's ``messages[].state``."""
        out: dict[str, Any] = {
            "id": self.id,
            "startTime": self.start_time,
            "participants": [p.to_wire() for p in self.participants.values()],
            "selfUri": f"/api/v2/conversations/{self.id}",
        }
        if self.end_time is not None:
            out["endTime"] = self.end_time
        return out

    def message_wire(self) -> dict[str, Any]:
        """PY269 ``MessageConversation`` (``GET /api/v2/conversations/messages/{id}``)."""
        return {
            "id": self.id,
            "participants": [p.media_wire() for p in self.participants.values()],
            "selfUri": f"/api/v2/conversations/messages/{self.id}",
        }


class ConversationStore:
    """Every conversation of one simulator; ids from the simulator's seeded ``new_id``."""

    def __init__(self, new_id: Callable[[], str], now_iso: Callable[[], str]) -> None:
        self._new_id = new_id
        self._now = now_iso
        self._by_id: dict[str, Conversation] = {}

    def __contains__(self, conversation_id: object) -> bool:
        return conversation_id in self._by_id

    def __len__(self) -> int:
        return len(self._by_id)

    def get(self, conversation_id: str) -> Conversation | None:
        """The conversation, or None (never created: the routes answer 404)."""
        return self._by_id.get(conversation_id)

    def all(self) -> list[Conversation]:
        return list(self._by_id.values())

    def create(
        self, *, agent_user_id: str | None = None, attributes: dict[str, str] | None = None
    ) -> Conversation:
        """A new conversation with a customer and an agent participant, both connected."""
        now = self._now()
        customer = Participant(
            self._new_id(),
            "customer",
            now,
            Communication(self._new_id(), "connected", "inbound", now),
            attributes=dict(attributes or {}),
        )
        agent = Participant(
            self._new_id(),
            "agent",
            now,
            Communication(self._new_id(), "connected", "outbound", now),
            user_id=agent_user_id or self._new_id(),
        )
        conv = Conversation(self._new_id(), now, {customer.id: customer, agent.id: agent})
        self._by_id[conv.id] = conv
        return conv

    def disconnect(self, conv: Conversation, participant: Participant, disconnect_type: str) -> bool:
        """Disconnect one participant's communication; False when it already was.

        ``disconnect_type`` is PY269 ``Message.disconnectType`` (``client``, ``endpoint``, ...). The
        conversation gets its ``endTime`` once nobody is connected.
        """
        if not participant.connected:
            return False
        now = self._now()
        comm = participant.communication
        comm.state = "disconnected"
        comm.disconnected_time = now
        comm.disconnect_type = disconnect_type
        participant.end_time = now
        if conv.state == "disconnected":
            conv.end_time = now
        return True


@dataclass(frozen=True, slots=True)
class ConversationChange:
    """What happened to a conversation, for the notifications it publishes (GN-2).

    ``kind``: ``"message"`` (a message was sent; ``message`` is its MessageData), ``"attributes"``
    (``attributes`` were set on ``participant``), ``"disconnect"`` (``participant`` left).
    """

    kind: str
    conversation: Conversation
    participant: Participant | None = None
    attributes: dict[str, str] = field(default_factory=dict)
    message: dict[str, Any] = field(default_factory=dict)
