"""Simulator-only conveniences on the CXone admin listener: what a supervisor or an agent's desktop does.

Real CXone changes an agent's state through the agent-sessions state route the agent's own session
calls (``POST agent-sessions/{sessionId}/state``, docs/simulators-cxone.md); a test that holds no
agent token does the same through the admin API, and the platform side of it is identical (the
``AgentState`` event follows on every poller):

- ``POST {admin}/agents/{agentId}/state`` ``{"state": "Available" | "Unavailable", "reason": "..."}``
  -> 200 ``{"agentId", "state", "reason"}``; 404 when the agent has no live session; 400 for
  anything else (one line ``{"error": "<field>: <problem>"}``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from supervisor.errors import SimulatorError
from supervisor.sim.bodies import MalformedBody, parse_json
from supervisor.sim.cxone.model import AgentSession, SimStateError

__all__ = ["admin_routes"]

AdminHandler = Callable[[web.Request], Awaitable[web.StreamResponse]]
#: the simulator's ``set_agent_state(agent_id, state, reason)``
SetAgentState = Callable[[str, str, str], AgentSession]
_MAX_TEXT = 64


def _error(message: str, status: int = 400) -> web.Response:
    return web.json_response({"error": message}, status=status)


def admin_routes(set_agent_state: SetAgentState) -> list[tuple[str, str, AdminHandler]]:
    """The admin routes above, bound to one simulator's ``set_agent_state``."""

    async def agent_state(request: web.Request) -> web.Response:
        agent_id = request.match_info["agentId"]
        raw = await request.read()
        try:
            data = parse_json(raw) if raw.strip() else {}
        except MalformedBody as exc:
            return _error(f"state: invalid JSON ({exc})")
        if not isinstance(data, dict):
            return _error("state: must be a JSON object")
        state, reason = data.get("state"), data.get("reason", "")
        if not isinstance(state, str) or not 0 < len(state) <= _MAX_TEXT:
            return _error(f"state.state: must be a string of 1 to {_MAX_TEXT} characters")
        if not isinstance(reason, str) or len(reason) > _MAX_TEXT:
            return _error(f"state.reason: must be a string of at most {_MAX_TEXT} characters")
        try:
            session = set_agent_state(agent_id, state, reason)
        except SimulatorError as exc:
            return _error(f"agentId: {exc}", 404)
        except SimStateError as exc:
            return _error(f"state.state: {exc.description}", exc.status)
        return web.json_response(
            {"agentId": agent_id, "state": session.agent_state.value, "reason": session.reason}
        )

    return [("POST", "/agents/{agentId}/state", agent_state)]
