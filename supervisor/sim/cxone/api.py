"""CXone Agent Session API routes (docs/platforms.md, "NICE CXone") on the simulator's ``api`` listener.

Every route lives under ``/inContactAPI/services/v{N}.0/`` for any ``N`` (unless
:attr:`CxoneSimConfig.api_versions` restricts it), in any case and with ``//`` tolerated
(:mod:`.routing`), and needs ``Authorization: Bearer``. Parameters come from the query string
(the generated client's spelling, docs/platforms.md, "NICE CXone") or a JSON body whatever its Content-Type (NICE's
agent SDK sends ``JSON.stringify`` with no Content-Type: ``acd-session-manager.js``,
``agent-state-service.js``); the body wins on a conflict [I], and ``""`` or ``null`` count as absent:

===========================================================  =====================================
``POST agent-sessions`` stationId|stationPhoneNumber, ...    202 ``{"sessionId"}``
``POST agent-sessions/join`` asAgentId                         202 ``{"sessionId"}``
``DELETE agent-sessions/{sessionId}`` endContacts, ...         202, no body
``GET agent-sessions/{sessionId}/get-next-event?timeout=N``    200 ``{"sessionId", "events"}`` / 304 /
                                                               400 / 404 / 409
``POST agent-sessions/{sessionId}/state`` state, reason        202, no body
``POST agent-sessions/{sessionId}/interactions/{contactId}/``  202, no body
``accept|hold|resume|end``
``POST agent-sessions/{sessionId}/keep-alive``                 202, no body
===========================================================  =====================================

202 is "accepted, the outcome arrives as events" (docs/platforms.md,
"Errors, event shapes and limits"). Errors are
``{"error", "error_description"}`` (docs/platforms.md, "Errors, event shapes and limits"); 401s may be empty (config).
The route-specific faults live here: SESSION_ENDED (the session is gone: 409 at once),
STALE_SESSION (the poll answers with an AgentSessionStart replay), plus MISSING_FIELDS /
MALFORMED_BODY on the 2xx bodies (via :meth:`FaultGate.rewrite`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from aiohttp import web

from supervisor.sim.activity import ACTIVITY_FIELDS
from supervisor.sim.cxone.auth import bearer_of, check_bearer
from supervisor.sim.cxone.context import CONTEXT_KEY, CxoneContext
from supervisor.sim.cxone.routing import case_insensitive
from supervisor.sim.cxone.state import EndReason, Handle, PollOutcome, SimStateError
from supervisor.sim.cxone.wire import (
    ENDPOINT_KEY,
    SESSION_KEY,
    BodyError,
    empty_response,
    json_response,
    oauth_error,
    read_body,
)
from supervisor.sim.faults import FaultKind

PREFIX = r"/inContactAPI/services/v{N:\d+}.0"
SESSIONS = PREFIX + "/agent-sessions"
ONE_SESSION = SESSIONS + "/{sessionId}"

#: app key of the per-handle wake-up events the long polls wait on
POLL_EVENTS: web.AppKey[dict[str, asyncio.Event]] = web.AppKey("cxone_poll_events", dict)


def _error(exc: SimStateError) -> web.Response:
    return oauth_error(exc.status, exc.error, exc.description)


def _bad(description: str) -> web.Response:
    return oauth_error(400, "invalid_request", description)


#: request key holding the merged query + JSON body parameters
PARAMS: web.RequestKey[dict[str, str]] = web.RequestKey("cxone_params", dict)


async def params_of(request: web.Request) -> dict[str, str]:
    """The query parameters, overlaid with a JSON body's (module docstring); SimStateError(400)
    for a body that is not a JSON object."""
    if PARAMS in request:
        return request[PARAMS]
    try:
        body = await read_body(request, limit=16 * 1024)
    except BodyError as exc:
        raise SimStateError(400, "invalid_request", str(exc)) from None
    merged = dict(request.query.items())
    merged.update({k: v for k, v in body.items() if v not in ("", "null")})
    request[PARAMS] = merged
    return merged


def _flag(params: dict[str, str], name: str) -> bool:
    return params.get(name, "").lower() == "true"


def _int_query(params: dict[str, str], name: str, *, low: int, high: int) -> int | None:
    """An optional integer parameter within ``low..high``; raises SimStateError(400) otherwise."""
    raw = params.get(name)
    if raw is None or raw == "":
        return None
    # ASCII digits only: str.isdigit() is also true for "²", which int() refuses (a 500)
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 9 or not low <= int(raw) <= high:
        raise SimStateError(400, "invalid_request", f"{name} must be an integer within {low}..{high}")
    return int(raw)


def _version_ok(ctx: CxoneContext, request: web.Request) -> bool:
    versions = ctx.config.api_versions
    return not versions or int(request.match_info["N"]) in versions


def _accepted(ctx: CxoneContext, request: web.Request, body: dict[str, Any] | None) -> web.Response:
    """202 with ``body`` (or none), through the MISSING_FIELDS / MALFORMED_BODY rewrite."""
    if body is None:
        return empty_response(202)
    rewritten = ctx.gate.rewrite(request[SESSION_KEY], request[ENDPOINT_KEY], 202, body)
    return rewritten if rewritten is not None else json_response(202, body)


def _prelude(request: web.Request) -> tuple[CxoneContext, str | web.Response]:
    """Version and bearer checks shared by every route: ``(ctx, agent_id)`` or ``(ctx, error)``."""
    ctx = request.app[CONTEXT_KEY]
    if not _version_ok(ctx, request):
        return ctx, oauth_error(404, "not_found", "Unsupported API version")
    token = check_bearer(ctx, request)
    if isinstance(token, web.Response):
        return ctx, token
    return ctx, str(token.agent_id)


def _session_faults(ctx: CxoneContext, request: web.Request, session_id: str) -> None:
    """SESSION_ENDED: end the session silently, so the route itself answers 409."""
    handle = ctx.sessions.handle(session_id)
    if handle is None or handle.session.ended is not None:
        return
    if ctx.gate.match(FaultKind.SESSION_ENDED, request[SESSION_KEY], request[ENDPOINT_KEY]) is not None:
        ctx.sessions.end(handle.session.key, EndReason.FORCED, silent=True)


async def start_session(request: web.Request) -> web.Response:
    """``POST agent-sessions``: log in; 202 ``{"sessionId"}`` (docs/platforms.md, "NICE CXone"; the 202 is [I])."""
    ctx, agent = _prelude(request)
    if isinstance(agent, web.Response):
        return agent
    try:
        params = await params_of(request)
        inactivity = _int_query(params, "inactivityTimeout", low=0, high=86_400)
        as_agent = _int_query(params, "asAgentId", low=1, high=999_999_999)
        session = ctx.sessions.start(
            str(as_agent) if as_agent is not None else agent,
            str(ctx.config.bus_no),
            station_id=params.get("stationId", "")[:64],
            station_phone=params.get("stationPhoneNumber", "")[:32],
            inactivity_timeout=None if inactivity is None else float(inactivity),
            inactivity_force_logout=_flag(params, "inactivityForceLogout"),
        )
    except SimStateError as exc:
        return _error(exc)
    return _accepted(ctx, request, {"sessionId": session.key})


async def join_session(request: web.Request) -> web.Response:
    """``POST agent-sessions/join``: a new sessionId chain on the agent's live session."""
    ctx, agent = _prelude(request)
    if isinstance(agent, web.Response):
        return agent
    try:
        as_agent = _int_query(await params_of(request), "asAgentId", low=1, high=999_999_999)
        handle = ctx.sessions.join(str(as_agent) if as_agent is not None else agent)
    except SimStateError as exc:
        return _error(exc)
    return _accepted(ctx, request, {"sessionId": handle.current_id})


async def _session_action(
    request: web.Request, action: Callable[[CxoneContext, str, dict[str, str]], object]
) -> web.Response:
    """The shape every per-session action shares: auth, session faults, the action, 202 (or its error)."""
    ctx, agent = _prelude(request)
    if isinstance(agent, web.Response):
        return agent
    session_id = request.match_info["sessionId"]
    _session_faults(ctx, request, session_id)
    try:
        action(ctx, session_id, await params_of(request))
    except SimStateError as exc:
        return _error(exc)
    return _accepted(ctx, request, None)


async def end_session(request: web.Request) -> web.Response:
    """``DELETE agent-sessions/{sessionId}``: end it; the next poll gets the final AgentSessionEnd.

    NICE's ``EndSessionRequest`` flags: ``endContacts`` ends the open contacts first; ``forceLogoff``
    and ``ignorePersonalQueue`` are accepted (their platform effects are [I])."""

    def end(ctx: CxoneContext, sid: str, params: dict[str, str]) -> object:
        reason = EndReason.FORCED_LOGOFF if _flag(params, "forceLogoff") else EndReason.CLIENT
        return ctx.sessions.end(sid, reason, end_contacts=_flag(params, "endContacts"))

    return await _session_action(request, end)


async def set_state(request: web.Request) -> web.Response:
    """``POST .../state`` ``{state: Available|Unavailable, reason}``: queues an ``AgentState`` event."""

    def change(ctx: CxoneContext, sid: str, params: dict[str, str]) -> object:
        return ctx.sessions.set_state(sid, params.get("state", ""), params.get("reason", "")[:64])

    return await _session_action(request, change)


async def contact_action(request: web.Request) -> web.Response:
    """``POST .../interactions/{contactId}/{action}``: accept|hold|resume|end; queues a CallContactEvent."""
    contact, verb = request.match_info["contactId"], request.match_info["action"]
    return await _session_action(
        request, lambda ctx, sid, _params: ctx.sessions.contact_action(sid, contact, verb)
    )


async def keep_alive(request: web.Request) -> web.Response:
    """``POST .../keep-alive``: counts as activity for ``inactivityTimeout``."""
    return await _session_action(request, lambda ctx, sid, _params: ctx.sessions.touch(sid))


def _poll_headers(ctx: CxoneContext) -> dict[str, str]:
    # RFC 9111 §5.2.2.1; a re-poll hint (docs/platforms.md, "HTTP semantics" [I]); allowed on a 304 (RFC 9110 §15.4.5)
    max_age = ctx.config.max_age_s
    return {} if max_age is None else {"Cache-Control": f"max-age={max_age}"}


async def get_next_event(request: web.Request) -> web.Response:
    """``GET .../get-next-event?timeout=0..60``: the long poll (docs/platforms.md, "NICE CXone";
    docs/simulators-cxone.md, "get-next-event").

    Holds up to ``timeout`` seconds (real time) for events. 200 ``{"sessionId": next, "events"}``;
    304 with no body when idle at the deadline; 409 once the session ended and its
    AgentSessionEnd was delivered; 404 for an id never issued; 400 for a bad timeout.
    """
    ctx, agent = _prelude(request)
    if isinstance(agent, web.Response):
        return agent
    try:
        high = ctx.config.max_poll_timeout_s
        timeout = _int_query(dict(request.query), "timeout", low=0, high=high) or 0
    except SimStateError as exc:
        return _error(exc)
    session_id = request.match_info["sessionId"]
    handle = ctx.sessions.handle(session_id)
    if handle is None:
        return oauth_error(404, "invalid_session", "Session not found")
    # the activity log names the agent session polled: its first sessionId, which the rolling one replaces
    polled: dict[str, str | int | None] = {"handle": handle.key}
    request[ACTIVITY_FIELDS] = polled
    key, endpoint = request[SESSION_KEY], request[ENDPOINT_KEY]
    events = request.app[POLL_EVENTS]
    wake = events.setdefault(handle.key, asyncio.Event())
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        wake.clear()
        _session_faults(ctx, request, session_id)
        stale = _stale_fault(ctx, handle, session_id, key, endpoint)
        result = ctx.sessions.poll(session_id, force_replay=stale)
        remaining = deadline - loop.time()
        if result.outcome is not PollOutcome.IDLE or remaining <= 0 or ctx.gate.waker.closing.is_set():
            break
        await ctx.gate.waker.wait((wake,), within=remaining)
        if await ctx.gate.hold_blackhole(key, endpoint):  # a black hole that started mid-poll
            return empty_response(503)
    headers = _poll_headers(ctx)
    if result.outcome is PollOutcome.IDLE:
        return empty_response(304, headers)  # RFC 9110 §15.4.5: a 304 has no body
    if result.outcome is PollOutcome.ENDED:
        events.pop(handle.key, None)
        # [I] NICE's SDK never polls after AgentSessionEnd (and maps a poll 409 to the end):
        # what the platform answers here is unknown, so the status is configurable
        status = ctx.config.ended_poll_status
        return oauth_error(status, "session_ended", "The agent session has ended", headers=headers)
    if result.outcome is PollOutcome.UNKNOWN:
        return oauth_error(404, "invalid_session", "Session not found", headers=headers)
    body = {"sessionId": result.next_id, "events": list(result.events)}
    rewritten = ctx.gate.rewrite(key, endpoint, 200, body)
    if rewritten is not None:
        rewritten.headers.update(headers)
        return rewritten
    return json_response(200, body, headers)


def _stale_fault(ctx: CxoneContext, handle: Handle, session_id: str, key: str, endpoint: str) -> bool:
    """STALE_SESSION applies to a live session's current id only (an old id replays anyway)."""
    if handle.session.ended is not None or session_id != handle.current_id:
        return False
    return ctx.gate.match(FaultKind.STALE_SESSION, key, endpoint) is not None


async def api_key_of(request: web.Request, ctx: CxoneContext) -> str:
    """Share key of an API request: the agent id of its session, else of its bearer token, else ""."""
    session_id = request.match_info.get("sessionId")
    if session_id:
        handle = ctx.sessions.handle(session_id)
        if handle is not None:
            return handle.session.agent_id
    _, token = ctx.tokens.check(bearer_of(request))
    return str(token.agent_id) if token is not None else ""


def add_routes(app: web.Application) -> None:
    """Register the Agent Session routes on the ``api`` listener's app."""
    app[POLL_EVENTS] = {}
    app.router.add_post(SESSIONS, start_session)
    app.router.add_post(SESSIONS + "/join", join_session)
    app.router.add_delete(ONE_SESSION, end_session)
    app.router.add_get(ONE_SESSION + "/get-next-event", get_next_event, allow_head=False)
    app.router.add_post(ONE_SESSION + "/state", set_state)
    app.router.add_post(ONE_SESSION + "/interactions/{contactId}/{action}", contact_action)
    app.router.add_post(ONE_SESSION + "/keep-alive", keep_alive)
    case_insensitive(app)


def wake_handle(app: web.Application, handle_key: str) -> None:
    """:class:`SessionStore` ``on_change`` hook: wake the long polls held on that handle."""
    event = app[POLL_EVENTS].get(handle_key)
    if event is not None:
        event.set()
