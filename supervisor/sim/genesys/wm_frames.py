"""Pure pieces of the Web Messaging guest protocol: what a frame asks for, what the server's bodies hold.

The bodies are the fields of the guest SDKs' models (GMT = genesys-messenger-transport-mobile-sdk
``transport/src/commonMain/.../shyrka/receive/``, WMJ = web-messaging-sdk-java ``model/``):

- ``SessionResponse`` (GMT ``SessionResponse.kt``): ``connected, newSession, readOnly,
  maxCustomDataBytes, clearedExistingSession`` plus the optional ``durationSeconds, expirationDate``
  for a new session (GMT ``Response.kt`` ``configureSuccess``); a resumed one is
  ``{connected, newSession}`` only (``configureSuccessWithNewSessionFalse``). There is no
  conversation id, agent or status anywhere in the guest protocol (docs/taxonomy.md, "What the daemon can and cannot verify").
- ``StructuredMessage`` (GMT ``StructuredMessage.kt``): ``id, type, text, direction,
  channel{time,messageId}, content, metadata, events, originatingEntity``.

No I/O here; :mod:`.webmessaging` sends what these build.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = [
    "custom_attributes",
    "disconnect_body",
    "has_presence",
    "inbound_body",
    "resumed_body",
    "session_body",
    "too_large",
]


def custom_attributes(frame: dict[str, Any], message: dict[str, Any]) -> dict[str, Any] | None:
    """The custom attributes of an onMessage frame, wherever a guest SDK puts them; None if none.

    WMJ ``SendMessageRequest`` puts ``channel.metadata.customAttributes`` at the **frame's top
    level** (``WebMessagingClient.sendMessage``); GMT puts them in the message's own
    ``channel`` (``shyrka/send/Channel.kt``; autostart's Presence Join too). Both are read and
    merged; the message's own wins on a conflict [I].
    """
    merged: dict[str, Any] = {}
    found = False
    for holder in (frame, message):
        channel = holder.get("channel")
        meta = channel.get("metadata") if isinstance(channel, dict) else None
        custom = meta.get("customAttributes") if isinstance(meta, dict) else None
        if custom is not None:
            found = True
            if isinstance(custom, dict):
                merged.update(custom)
            else:
                return {"": custom}  # not a map: the size check still applies, storing does not
    return merged if found else None


def too_large(custom: dict[str, Any], limit: int) -> bool:
    """4013: the attributes' JSON is larger than ``maxCustomDataBytes`` (GMT ``Response.kt``)."""
    return len(json.dumps(custom).encode()) > limit


def has_presence(message: dict[str, Any], kind: str) -> bool:
    """Whether an Event message carries a Presence event of ``kind`` (Join, Clear, Disconnect)."""
    events = message.get("events")
    return isinstance(events, list) and any(
        isinstance(e, dict)
        and e.get("eventType") == "Presence"
        and isinstance(e.get("presence"), dict)
        and e["presence"].get("type") == kind
        for e in events
    )


def session_body(
    *,
    new: bool,
    read_only: bool,
    max_custom_data_bytes: int,
    duration_s: int,
    expiration_epoch: int,
    cleared: bool = False,
) -> dict[str, Any]:
    """The ``SessionResponse`` body: only what the platform sends (GMT ``SessionResponse.kt``)."""
    return {
        "connected": True,
        "newSession": new,
        "readOnly": read_only,
        "maxCustomDataBytes": max_custom_data_bytes,
        "clearedExistingSession": cleared,
        "durationSeconds": duration_s,
        "expirationDate": expiration_epoch,
    }


def resumed_body(*, read_only: bool) -> dict[str, Any]:
    """The ``SessionResponse`` body of a resumed session, as GMT's fixture of one has it
    (``androidUnitTest/.../util/Response.kt`` ``configureSuccessWithNewSessionFalse``):
    ``{"connected": true, "newSession": false}``; GMT defaults every other field (``readOnly``
    false). A read-only session says so (``readOnly: true``), else the guest could not know [I]."""
    body: dict[str, Any] = {"connected": True, "newSession": False}
    if read_only:
        body["readOnly"] = True
    return body


def inbound_body(msg_id: str, time: str, message: dict[str, Any]) -> dict[str, Any]:
    """The echo of a guest message: ``StructuredMessage`` Inbound, with what the guest sent."""
    body: dict[str, Any] = {
        "id": msg_id,
        "channel": {"time": time, "messageId": msg_id},
        "type": message.get("type"),
        "direction": "Inbound",
    }
    for name in ("text", "content", "events", "metadata"):
        if message.get(name) is not None:
            body[name] = message[name]
    return body


def disconnect_body(msg_id: str, time: str, read_only: bool) -> dict[str, Any]:
    """The agent ended the conversation: a Presence Disconnect event (docs/platforms.md, "Genesys Cloud Web Messaging").

    GMT ``MessagingClientImpl`` goes to ``State.ReadOnly`` only when ``metadata.readOnly`` is the
    string ``"true"``; with ``"false"`` it reports ``Event.ConversationDisconnect`` and stays
    configured (``MessagingClientConversationDisconnectTest.kt``): a per-deployment choice.
    """
    return {
        "id": msg_id,
        "channel": {"time": time, "messageId": msg_id},
        "type": "Event",
        "direction": "Outbound",
        "events": [{"eventType": "Presence", "presence": {"type": "Disconnect"}}],
        "metadata": {"readOnly": "true" if read_only else "false"},
    }
