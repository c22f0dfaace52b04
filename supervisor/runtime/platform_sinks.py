"""The transports' event sinks, wired to the platform events hub (docs/runtime.md, "Platform events").

Each transport hands over what its platform delivered, as the platform sent it; these sinks name
the event's type and the ids it carries, and give it to :class:`~supervisor.api.platform_events.PlatformEvents`
(one ``delivered`` per event). Nothing here logs or publishes the content (customer data):

* **CXone** (``AgentSessionTransport.on_events``): every event of a ``get-next-event`` answer; its
  type is the event's ``Type`` (``AgentState``, ``CallContactEvent``, ...; docs/platforms.md, "NICE
  CXone"), the body the event object itself; ids: ``contactId`` (``ContactID``), ``masterContactId``
  (``MasterID``), ``agentId`` (``AgentId``) where the event names them;
* **Genesys notifications** (``NotificationsTransport.on_event``; heartbeats and ``v2.system`` topics
  never reach it): the type is the ``topicName``, the body the ``eventBody``; ids: ``conversationId``
  (a conversation topic's ``eventBody.id``) and ``correlationId`` (``metadata.CorrelationId``);
* **Web Messaging** (``WebMessagingTransport.on_event``): the conversation's inbound frames (its
  ``CONVERSATION_CLASSES``); the type is the frame's ``class``, the body the frame's ``body``; ids:
  ``messageId`` (``body.id``, what a replayed message is deduplicated by).

An embedder's notification sink (the wiring's ``notification_sink``) still gets each notification
as before. A sink never raises into its transport (a body the hub cannot take must not end the
session's connection): such a failure is counted (``PlatformEvents.failures``), never logged with
its content.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from supervisor.api.platform_events import PlatformEvents
from supervisor.vocabulary import Platform

if TYPE_CHECKING:
    from supervisor.runtime.sessions import SessionReader

__all__ = ["cxone_sink", "notifications_sink", "session_describer", "webmessaging_sink"]

_CXONE = Platform.CXONE.value
_GENESYS = Platform.GENESYS.value
# CXone event keys -> the record's id fields (NICE common-sdk: cxone-indicator.js reads ContactID,
# call-contact-event.js MasterID; agent-session-start-event.js AgentId)
_CXONE_IDS = (("ContactID", "contactId"), ("MasterID", "masterContactId"), ("AgentId", "agentId"))
_CONVERSATION_TOPIC = ".conversations"


def _text(value: object) -> str | None:
    if isinstance(value, str) and value:
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


def _deliver(
    hub: PlatformEvents,
    session_id: str,
    platform: str,
    event_type: str,
    body: Any,
    ids: dict[str, str],
    *,
    snapshot: bool = False,
) -> None:
    try:
        hub.delivered(session_id, platform, event_type, body, ids, snapshot=snapshot)
    except Exception:  # the session's connection goes on; the count says something was lost
        hub.failures += 1


def cxone_sink(
    hub: PlatformEvents, session_id: str, *, snapshot: bool = False
) -> Callable[[list[dict[str, Any]]], None]:
    """A CXone session's ``on_events``: each event of a poll, in order; with ``snapshot``, its
    ``on_snapshot`` (the platform's snapshot after a (re)join or a resync, flagged ``snapshot``)."""

    def sink(events: list[dict[str, Any]]) -> None:
        for event in events:
            ids: dict[str, str] = {}
            for key, name in _CXONE_IDS:
                value = _text(event.get(key))
                if value is not None:
                    ids[name] = value
            _deliver(hub, session_id, _CXONE, _text(event.get("Type")) or "", event, ids, snapshot=snapshot)

    return sink


def notifications_sink(
    hub: PlatformEvents,
    session_id: str,
    embedder: Callable[[str, Mapping[str, Any]], None] | None = None,
) -> Callable[[Mapping[str, Any]], None]:
    """A notifications session's ``on_event``: one topic event (``topicName``, ``eventBody``)."""

    def sink(message: Mapping[str, Any]) -> None:
        topic = _text(message.get("topicName")) or ""
        body = message.get("eventBody")
        ids: dict[str, str] = {}
        if topic.endswith(_CONVERSATION_TOPIC) and isinstance(body, Mapping):
            conversation = _text(body.get("id"))
            if conversation is not None:
                ids["conversationId"] = conversation
        metadata = message.get("metadata")
        if isinstance(metadata, Mapping):
            correlation = _text(metadata.get("CorrelationId"))
            if correlation is not None:
                ids["correlationId"] = correlation
        _deliver(hub, session_id, _GENESYS, topic, body, ids)
        if embedder is not None:
            embedder(session_id, message)

    return sink


def webmessaging_sink(hub: PlatformEvents, session_id: str) -> Callable[[str, Mapping[str, Any]], None]:
    """A Web Messaging session's ``on_event``: one inbound frame of the conversation (class, body)."""

    def sink(frame_class: str, body: Mapping[str, Any]) -> None:
        ids: dict[str, str] = {}
        message_id = _text(body.get("id"))
        if message_id is not None:
            ids["messageId"] = message_id
        _deliver(hub, session_id, _GENESYS, frame_class, body, ids)

    return sink


def session_describer(sessions: SessionReader) -> Callable[[str], tuple[str | None, str | None]]:
    """A session's (platform, agentId) as the session table knows them now (what it learned included)."""

    def describe(session_id: str) -> tuple[str | None, str | None]:
        spec = sessions.spec(session_id)
        runner = sessions.runners.get(session_id)
        platform = spec.platform.value if spec is not None else None
        agent = runner.context.agent_id if runner is not None else None
        if agent is None and spec is not None:
            agent = spec.agent_id
        return platform, agent

    return describe
