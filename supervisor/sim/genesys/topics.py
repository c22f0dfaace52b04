"""Which notification topics exist, which are permitted, and what conversation activity publishes.

A topic is accepted only when it fits a template the platform documents (PY269 topic models;
the developer centre's notifications pages [D]); anything else is ``Rejected`` (GN-1). Templates
have one ``{id}`` (a UUID on the platform; any short token here, so tests and the demo may use
readable ids) and, for the conversation detail events, a fixed suffix. ``denied_topics``
(config globs) stand for topics the client lacks permission for: they are ``Rejected`` with the
template's ``missingPermissions`` [I: the permission names and the ``rejectionReason`` texts].

:func:`events_for` maps a :class:`~supervisor.sim.genesys.conversations.ConversationChange` to the
events real Genesys publishes for it (GN-2, PY269 models):

- every change: ``v2.users.{agentUserId}.conversations.messages`` (a
  ``ConversationMessageEventTopicMessageConversation`` snapshot: participants are media participants
  with ``state``) and ``v2.users.{agentUserId}.conversations`` (``ConversationEventTopicConversation``:
  participants with ``messages[]`` communications);
- attributes: ``v2.detail.events.conversation.{cid}.attributes`` (``AttributeUpdateEvent``);
- a disconnect: ``v2.detail.events.conversation.{cid}.customer.end`` (``CustomerEndEvent``) or
  ``.user.end`` for the agent.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from typing import Any

from supervisor.sim.genesys.conversations import ConversationChange

__all__ = ["TEMPLATES", "Topic", "TopicVerdict", "available_topics", "events_for", "judge"]

_ID = r"[A-Za-z0-9_-]{1,64}"
_DETAIL_SUFFIXES = (
    "acd.start",
    "acd.end",
    "acw",
    "attributes",
    "customer.start",
    "customer.end",
    "flow.start",
    "flow.end",
    "user.start",
    "user.end",
    "wrapup",
    "outbound",
)


@dataclass(frozen=True, slots=True)
class Topic:
    """A documented topic template and the permissions it needs [I: names]."""

    template: str
    description: str
    permissions: tuple[str, ...]
    regex: re.Pattern[str]


def _topic(template: str, description: str, *permissions: str) -> Topic:
    pattern = re.escape(template).replace(re.escape("{id}"), _ID)
    pattern = pattern.replace(re.escape("{suffix}"), "(?:" + "|".join(map(re.escape, _DETAIL_SUFFIXES)) + ")")
    return Topic(template, description, permissions, re.compile(f"^{pattern}$"))


TEMPLATES: tuple[Topic, ...] = (
    _topic("v2.users.{id}.conversations", "A user's conversations", "conversation:communication:view"),
    _topic(
        "v2.users.{id}.conversations.messages",
        "A user's messaging conversations",
        "conversation:message:view",
    ),
    _topic("v2.users.{id}.presence", "A user's presence"),
    _topic("v2.users.{id}.routingStatus", "A user's routing status", "routing:agent:view"),
    _topic("v2.users.{id}.conversationsummary", "A user's conversation summary"),
    _topic("v2.routing.queues.{id}.conversations", "A queue's conversations", "routing:queue:view"),
    _topic(
        "v2.routing.queues.{id}.conversations.messages",
        "A queue's messaging conversations",
        "routing:queue:view",
    ),
    _topic(
        "v2.detail.events.conversation.{id}.{suffix}",
        "Detail events of one conversation",
        "analytics:conversationDetail:view",
    ),
)


@dataclass(frozen=True, slots=True)
class TopicVerdict:
    """What the platform says about one requested topic (PY269 ``ChannelTopic``)."""

    id: str
    permitted: bool
    reason: str = ""
    missing: tuple[str, ...] = ()

    def to_wire(self) -> dict[str, Any]:
        if self.permitted:
            return {"id": self.id, "state": "Permitted"}
        out: dict[str, Any] = {"id": self.id, "state": "Rejected", "rejectionReason": self.reason}
        if self.missing:
            out["missingPermissions"] = list(self.missing)
        return out


def judge(topic: str, denied: tuple[str, ...]) -> TopicVerdict:
    """Permitted, or Rejected because no template fits or a ``denied_topics`` glob matches."""
    template = next((t for t in TEMPLATES if t.regex.match(topic)), None)
    if template is None:
        return TopicVerdict(topic, False, f"The topic {topic[:120]} is not a valid topic.")
    if any(fnmatch.fnmatchcase(topic, glob) for glob in denied):
        missing = template.permissions or ("notifications:topic:view",)
        return TopicVerdict(topic, False, "Missing permissions for the topic.", missing)
    return TopicVerdict(topic, True)


def available_topics() -> dict[str, Any]:
    """``GET /api/v2/notifications/availabletopics``: PY269 ``AvailableTopicEntityListing``."""
    return {
        "entities": [
            {
                "id": t.template,
                "description": t.description,
                "requiresPermissions": list(t.permissions),
                "transports": ["All"],
            }
            for t in TEMPLATES
        ]
    }


def events_for(change: ConversationChange, now_ms: int) -> list[tuple[str, dict[str, Any]]]:
    """The (topic, eventBody) pairs real Genesys publishes for ``change`` (module docstring)."""
    conv = change.conversation
    snapshot = {k: v for k, v in conv.to_wire().items() if k != "selfUri"}
    media = {k: v for k, v in conv.message_wire().items() if k != "selfUri"}
    out: list[tuple[str, dict[str, Any]]] = []
    agent_user = conv.agent().user_id
    if agent_user:
        out.append((f"v2.users.{agent_user}.conversations.messages", media))
        out.append((f"v2.users.{agent_user}.conversations", snapshot))
    part = change.participant
    detail = f"v2.detail.events.conversation.{conv.id}"
    if change.kind == "attributes" and part is not None:
        body = {
            "eventTime": now_ms,
            "conversationId": conv.id,
            "participantId": part.id,
            "attributes": dict(change.attributes),
        }
        out.append((detail + ".attributes", body))
    elif change.kind == "disconnect" and part is not None:
        body = {
            "eventTime": now_ms,
            "conversationId": conv.id,
            "participantId": part.id,
            "sessionId": part.communication.id,
            "disconnectType": part.communication.disconnect_type or "client",
            "mediaType": "MESSAGE",
            "messageType": "webmessaging",
        }
        if part.purpose == "agent":
            body["userId"] = part.user_id
            out.append((detail + ".user.end", body))
        else:
            out.append((detail + ".customer.end", body))
    return out
