"""Conversation routes of the API host (docs/platforms.md, "Genesys Cloud Platform REST"), shaped as ``PureCloudPlatformClientV2`` 269.0.0
(PY269, ``apis/conversations_api.py``) calls and deserialises them.

Nothing is created here: an unknown conversation, participant or communication answers 404
``not.found`` and an id that is not a UUID 400 ``bad.request`` (ErrorBody, docs/platforms.md, "Errors, limits and ids"; the exact
message text is [I]). Conversations come from Web Messaging sessions, the admin API or the Python
API (:mod:`.conversations`).

- ``GET /api/v2/conversations`` -> ``ConversationEntityListing`` (PY269 ``get_conversations``, "the
  active conversations of the logged-in user"; the simulator has no users, so every conversation
  not yet disconnected [I]; ``communicationType``, the SDK's one query parameter, is accepted: the
  simulator's conversations are all messaging, so any other type lists none [I]);
- ``GET /api/v2/conversations/messages`` -> ``MessageConversationEntityListing`` (the simulator has
  no users, so it lists every conversation not yet disconnected);
- ``GET /api/v2/conversations/{cid}`` -> ``Conversation`` (no top-level ``state``: PY269 says a read
  never carries one);
- ``GET /api/v2/conversations/messages/{cid}`` -> ``MessageConversation``;
- ``GET /api/v2/conversations/messages/{cid}/messages/{messageId}`` -> ``MessageData``;
- ``PATCH /api/v2/conversations/{cid}/participants/{pid}/attributes`` (``ParticipantAttributes``)
  -> 202, no body (``response_type=None``);
- ``PATCH /api/v2/conversations/messages/{cid}/participants/{pid}/attributes`` -> 202
  ``ParticipantAttributes`` (``response_type='ParticipantAttributes'``: the merged map);
- ``PATCH /api/v2/conversations/messages/{cid}/participants/{pid}`` and the generic
  ``/conversations/{cid}/participants/{pid}`` (``MediaParticipantRequest``) -> 202, no body;
  ``{"state":"disconnected"}`` (any case, as GMT's UI test helper sends ``DISCONNECTED``) ends
  that participant's communication; the agent's end reaches the guest as a Presence Disconnect;
- ``PATCH /api/v2/conversations/messages/{cid}`` (``Conversation{state}``) -> 200 ``Conversation``
  (as read: no ``state``); ``disconnected`` disconnects every participant;
- ``POST /api/v2/conversations/messages/{cid}/communications/{commId}/messages`` (``AdditionalMessage``)
  -> 200 ``MessageData`` with ``normalizedMessage``; only the agent's communication may send (GMT's
  UI helper takes it from ``participants[purpose=agent].messages[0].id``); a repeated
  ``Idempotency-Key`` -> 409 ``conflict`` [I].
"""

from __future__ import annotations

from typing import Any

from supervisor.sim.faults import FaultKind
from supervisor.sim.genesys.context import SimContext
from supervisor.sim.genesys.conversations import (
    Conversation,
    ConversationChange,
    Participant,
    well_formed_id,
)
from supervisor.sim.genesys.rest import MESSAGE_ID, BadRequest, Handler, Reply, Request, not_found, read_json
from supervisor.sim.genesys.wire import ErrorCode, iso_utc

__all__ = ["CONVERSATION_ROUTES", "disconnect"]


def _id(req: Request, name: str) -> str:
    value = req.http.match_info[name]
    if not well_formed_id(value):
        # [I] Genesys ids are UUIDs (docs/platforms.md, "Errors, limits and ids"): a malformed one cannot name anything
        raise BadRequest(f"{name} is not a valid id.", ErrorCode.BAD_REQUEST, 400)
    return value


def _conversation(req: Request) -> Conversation:
    conv = req.ctx.state.conversations.get(_id(req, "conversationId"))
    if conv is None:
        raise not_found()
    return conv


def _participant(req: Request, conv: Conversation) -> Participant:
    part = conv.participants.get(_id(req, "participantId"))
    if part is None:
        raise not_found()
    return part


#: ``communicationType`` values that name messaging (the simulator's only media) [I]
_MESSAGING_TYPES = frozenset({"message", "messages", "messaging", "webmessaging"})


def _listing(entities: list[dict[str, Any]], path: str) -> dict[str, Any]:
    """One page of an entity listing (PY269 ``ConversationEntityListing``: entities, pageSize,
    pageNumber, total, pageCount and the page URIs)."""
    uri = f"{path}?pageSize={max(len(entities), 1)}&pageNumber=1"
    return {
        "entities": entities,
        "pageSize": len(entities),
        "pageNumber": 1,
        "total": len(entities),
        "pageCount": 1,
        "firstUri": uri,
        "lastUri": uri,
        "selfUri": uri,
    }


async def list_conversations(req: Request) -> Reply:
    kind = req.http.query.get("communicationType")
    live = [c for c in req.ctx.state.conversations.all() if c.state != "disconnected"]
    if kind is not None and kind.lower() not in _MESSAGING_TYPES:
        live = []
    return Reply(200, _listing([c.to_wire() for c in live], _CONV))


async def list_message_conversations(req: Request) -> Reply:
    live = [c.message_wire() for c in req.ctx.state.conversations.all() if c.state != "disconnected"]
    body = {"entities": live, "pageSize": len(live), "pageNumber": 1, "total": len(live), "pageCount": 1}
    return Reply(200, body)


async def get_conversation(req: Request) -> Reply:
    conv = _conversation(req)
    return Reply(200, conv.to_wire(), conversation_id=conv.id)


async def get_message_conversation(req: Request) -> Reply:
    conv = _conversation(req)
    return Reply(200, conv.message_wire(), conversation_id=conv.id)


async def get_message(req: Request) -> Reply:
    conv = _conversation(req)
    message = conv.messages.get(_id(req, "messageId"))
    if message is None:
        raise not_found()
    return Reply(200, dict(message), conversation_id=conv.id)


async def _attributes(req: Request) -> tuple[Conversation, Participant, dict[str, str], dict[str, str]]:
    """Store a ``ParticipantAttributes`` body; returns (conv, participant, sent, visible map)."""
    data = await read_json(req.http)
    attrs = data.get("attributes") if isinstance(data, dict) else None
    if not isinstance(attrs, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in attrs.items()
    ):
        raise BadRequest("attributes: must be an object of string values", ErrorCode.INVALID_VALUE)
    ctx = req.ctx
    conv = _conversation(req)
    part = _participant(req, conv)
    for fault in list(ctx.faults.candidates(FaultKind.SILENT_DROP_ATTRIBUTES, conv.id, req.endpoint)):
        assert fault.id is not None
        ctx.drop_seen[fault.id] += 1
        if ctx.drop_seen[fault.id] > int(fault.params["after"]):
            ctx.faults.hit(fault)
            ctx.recorder.record_fault_hit(fault)
            ctx.recorder.record_attributes_dropped(conv.id, attrs)
            # answered as success, not persisted (the seed's edge case 2): the answer shows what
            # was asked for, so the drop stays silent
            return conv, part, attrs, {**part.attributes, **attrs}
        break
    part.attributes.update(attrs)
    ctx.recorder.record_attributes(conv.id, attrs)
    ctx.changed(ConversationChange("attributes", conv, part, attributes=dict(attrs)))
    return conv, part, attrs, dict(part.attributes)


async def patch_attributes(req: Request) -> Reply:
    await _attributes(req)
    return Reply(202)  # PY269 patch_conversation_participant_attributes: response_type None


async def patch_message_attributes(req: Request) -> Reply:
    _, _, _, visible = await _attributes(req)
    # PY269 patch_conversations_message_participant_attributes: response_type ParticipantAttributes
    # (status 202 vs 200 is [I]; the SDK reads only the body)
    return Reply(202, {"attributes": visible}, conversation_id=None)


async def disconnect(
    req_ctx: SimContext, conv: Conversation, part: Participant, disconnect_type: str
) -> bool:
    """End ``part``'s communication and tell the guest and the subscribers; False if already ended."""
    if not req_ctx.state.conversations.disconnect(conv, part, disconnect_type):
        return False
    if part.purpose == "agent" and req_ctx.guest_disconnect is not None:
        await req_ctx.guest_disconnect(conv.id)
    req_ctx.changed(ConversationChange("disconnect", conv, part))
    return True


def _state_of(data: Any) -> str | None:
    state = data.get("state") if isinstance(data, dict) else None
    if state is None:
        return None
    if not isinstance(state, str) or state.lower() not in ("alerting", "connected", "disconnected", "parked"):
        raise BadRequest("state: not a valid participant state", ErrorCode.INVALID_VALUE)
    return state.lower()


async def patch_participant(req: Request) -> Reply:
    data = await read_json(req.http)
    if not isinstance(data, dict):
        raise BadRequest("The request body must be a JSON object.")
    conv = _conversation(req)
    part = _participant(req, conv)
    state = _state_of(data)
    if state == "disconnected":
        # [I] the disconnectType of an API disconnect; PY269 Message.disconnectType allows "client"
        await disconnect(req.ctx, conv, part, "client")
    elif state is not None and state != part.state:
        # [I] only a disconnect is modelled; reconnecting a media participant is refused
        raise BadRequest(f"state: cannot change to {state}", ErrorCode.BAD_REQUEST)
    return Reply(202)  # PY269 patch_conversations_message_participant: response_type None


async def patch_message_conversation(req: Request) -> Reply:
    data = await read_json(req.http)
    conv = _conversation(req)
    if _state_of(data) == "disconnected":
        for part in list(conv.participants.values()):
            await disconnect(req.ctx, conv, part, "client")
    return Reply(200, conv.to_wire(), conversation_id=conv.id)


async def post_message(req: Request) -> Reply:
    data = await read_json(req.http)
    if not isinstance(data, dict):
        raise BadRequest("The request body must be a JSON object.")
    given = [k for k in ("textBody", "mediaIds", "messagingTemplate") if data.get(k) is not None]
    if len(given) != 1:
        raise BadRequest(
            "Exactly one of textBody, mediaIds or messagingTemplate is required.", ErrorCode.INVALID_VALUE
        )
    text = data.get("textBody")
    if given == ["textBody"] and not isinstance(text, str):
        raise BadRequest("textBody: must be a string", ErrorCode.INVALID_VALUE)
    ctx = req.ctx
    conv = _conversation(req)
    sender = conv.communication(_id(req, "communicationId"))
    if sender is None or sender.purpose != "agent":
        raise not_found()  # [I] the customer's communication cannot send agent messages either
    if not sender.connected:
        raise BadRequest("The communication is disconnected.", ErrorCode.BAD_REQUEST)
    # AdditionalMessage has no id (PY269): only the Idempotency-Key header names a repeat [I]
    msg_key = req.http.headers.get("Idempotency-Key")
    if msg_key:
        req.http[MESSAGE_ID] = msg_key
    dup = ctx.gate.hit(FaultKind.DUPLICATE_MESSAGE, conv.id, req.endpoint)
    if dup is not None or (msg_key and msg_key in conv.message_ids):
        raise BadRequest(f"A message with id {str(msg_key)[:64]} already exists.", ErrorCode.CONFLICT, 409)
    if msg_key:
        conv.message_ids.add(msg_key)
    body = message_data(ctx, conv, sender, text if isinstance(text, str) else "")
    conv.messages[body["id"]] = body
    sender.communication.message_ids.append(body["id"])
    if ctx.push_outbound is not None and isinstance(text, str):
        await ctx.push_outbound(conv.id, body["normalizedMessage"])
    ctx.changed(ConversationChange("message", conv, sender, message=body))
    return Reply(200, body, conversation_id=conv.id)


def message_data(ctx: SimContext, conv: Conversation, sender: Participant, text: str) -> dict[str, Any]:
    """PY269 ``MessageData`` of an agent message, with its ``normalizedMessage``
    (``ConversationNormalizedMessage``: what the guest receives as a StructuredMessage body)."""
    now = iso_utc(ctx.clock.time())
    msg_id = ctx.state.uuid()
    customer = conv.customer()
    return {
        "id": msg_id,
        "providerMessageId": msg_id,
        "timestamp": now,
        "fromAddress": sender.user_id or sender.id,
        "toAddress": customer.id,
        "direction": "outbound",
        "messengerType": "webmessaging",
        # PY269 MessageData has no textBody any more: the text is normalizedMessage.text
        "status": "sent",
        "normalizedMessage": {
            "id": msg_id,
            "channel": {"messageId": msg_id, "time": now},
            "type": "Text",
            "text": text,
            "direction": "Outbound",
            "originatingEntity": "Human",
            "status": "Sent",
        },
        "createdBy": {"id": sender.user_id, "selfUri": f"/api/v2/users/{sender.user_id}"},
        "conversationId": conv.id,
        "selfUri": f"/api/v2/conversations/messages/{conv.id}/messages/{msg_id}",
    }


_CONV = "/api/v2/conversations"
_MSG = _CONV + "/messages/{conversationId}"
#: literal routes first: ``/conversations/messages`` must not read as a conversation id
CONVERSATION_ROUTES: list[tuple[str, str, Handler]] = [
    ("GET", _CONV, list_conversations),
    ("GET", _CONV + "/messages", list_message_conversations),
    ("GET", _CONV + "/{conversationId}", get_conversation),
    ("GET", _MSG, get_message_conversation),
    ("PATCH", _MSG, patch_message_conversation),
    ("GET", _MSG + "/messages/{messageId}", get_message),
    ("PATCH", _CONV + "/{conversationId}/participants/{participantId}/attributes", patch_attributes),
    ("PATCH", _MSG + "/participants/{participantId}/attributes", patch_message_attributes),
    ("PATCH", _CONV + "/{conversationId}/participants/{participantId}", patch_participant),
    ("PATCH", _MSG + "/participants/{participantId}", patch_participant),
    ("POST", _MSG + "/communications/{communicationId}/messages", post_message),
]
