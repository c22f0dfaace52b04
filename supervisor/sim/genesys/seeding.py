"""Simulator-only conveniences on the admin listener: make conversations, publish events.

Real Genesys has no such routes: conversations exist because a customer or a flow started them.
Tests and the demo need a conversation without running a guest, so the admin API (never the
platform API) can make one; nothing on the platform API invents one (docs/taxonomy.md, "What the daemon can and cannot verify").

- ``POST {admin}/conversations`` with an optional ``{"agentUserId": "...", "attributes": {...}}``
  -> 201, the new conversation as ``GET /api/v2/conversations/{id}`` shows it;
- ``GET {admin}/conversations`` -> ``{"conversations": [Conversation, ...]}``;
- ``POST {admin}/publish`` ``{"topic": "...", "body": {...}}`` -> ``{"sockets": n}``: a notifications
  event on that topic, as :meth:`~supervisor.sim.genesys.GenesysSimulator.publish` does.

Errors are the admin API's one line ``{"error": "<field>: <problem>"}`` with 400.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from supervisor.sim.bodies import MalformedBody, parse_json
from supervisor.sim.genesys.context import SimContext

__all__ = ["admin_routes"]

AdminHandler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Publish = Callable[[str, dict[str, Any]], int]


def _error(message: str) -> web.Response:
    return web.json_response({"error": message}, status=400)


async def _body(request: web.Request) -> Any:
    raw = await request.read()
    if not raw.strip():
        return {}
    return parse_json(raw)


def admin_routes(ctx: SimContext, publish: Publish) -> list[tuple[str, str, AdminHandler]]:
    """The admin routes above, bound to one simulator."""

    async def create(request: web.Request) -> web.Response:
        try:
            data = await _body(request)
        except MalformedBody as exc:
            return _error(f"conversation: invalid JSON ({exc})")
        if not isinstance(data, dict):
            return _error("conversation: must be a JSON object")
        agent = data.get("agentUserId")
        if agent is not None and not (isinstance(agent, str) and 0 < len(agent) <= 64):
            return _error("conversation.agentUserId: must be a string of 1 to 64 characters")
        attrs = data.get("attributes", {})
        if not isinstance(attrs, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in attrs.items()
        ):
            return _error("conversation.attributes: must be an object of string values")
        conv = ctx.state.conversations.create(agent_user_id=agent, attributes=attrs)
        return web.json_response(conv.to_wire(), status=201)

    async def listing(request: web.Request) -> web.Response:
        return web.json_response({"conversations": [c.to_wire() for c in ctx.state.conversations.all()]})

    async def publish_event(request: web.Request) -> web.Response:
        try:
            data = await _body(request)
        except MalformedBody as exc:
            return _error(f"event: invalid JSON ({exc})")
        topic = data.get("topic") if isinstance(data, dict) else None
        body = data.get("body") if isinstance(data, dict) else None
        if not isinstance(topic, str) or not 0 < len(topic) <= 200:
            return _error("event.topic: must be a string of 1 to 200 characters")
        if not isinstance(body, dict):
            return _error("event.body: must be a JSON object")
        return web.json_response({"sockets": publish(topic, body)})

    return [
        ("POST", "/conversations", create),
        ("GET", "/conversations", listing),
        ("POST", "/publish", publish_event),
    ]
