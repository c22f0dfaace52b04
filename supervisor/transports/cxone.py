"""NICE CXone Agent Session transport: REST long polling through the request pipeline (docs/runtime.md).

Wire protocol (docs/platforms.md, "NICE CXone")::

    POST   {base}/services/{v}/agent-sessions {"stationId"|"stationPhoneNumber", "asAgentId"?} -> {"sessionId": S0}
    POST   {base}/services/{v}/agent-sessions/join {"asAgentId"}                        -> {"sessionId"}
    GET    {base}/services/{v}/agent-sessions/{S}/get-next-event?timeout=N     -> 200 {"sessionId": S+1, "events"}
                                                                                  304 (no body): idle
                                                                                  409: session ended
    DELETE {base}/services/{v}/agent-sessions/{S} {"forceLogoff","endContacts","ignorePersonalQueue"}
    POST   {base}/services/{v}/agent-sessions/{S}/state {"state", "reason"?}             -> 202: the change
                                                                                  arrives as an AgentState event

The start, join and end parameters go in a JSON body, as NICE's agent SDK sends them
(``@nice-devone/core-sdk`` ``acd-session-manager.js`` ``startSession``/``joinSession``/``endSession``,
``StartSessionRequest``); the generated CXone client's query-string spelling (docs/platforms.md,
"Errors, event shapes and limits") is not used, so a platform that reads only the SDK's form understands every request.

``{base}/services/{v}/`` is the agent API base :class:`~supervisor.rest.cxone_auth.CxoneApi` gives:
``apiUrl`` when configured, else discovered after each login (the id_token's tenant, then
``/.well-known/cxone-configuration``'s ``api_endpoint``; docs/platforms.md "NICE CXone"). Every request
goes through :class:`~supervisor.rest.pipeline.RequestPipeline` (the one retry layer: token, circuit
``cxone:api``, classification, retries, Retry-After), so this module only *describes* what the
platform answered (docs/architecture.md, "Data flows one way"):

* a failed request raises the pipeline's :class:`OperationError` / :class:`CircuitOpenError`
  unchanged (a 409 on a poll is AGENT_SESSION_ENDED, taxonomy v1);
* a poll 200 whose body does not parse is MALFORMED_RESPONSE and one without ``sessionId`` is
  INCOMPLETE_RESPONSE (seed section 3): the pipeline's response check finds both, like any
  other partial success. What only this protocol can see is *named* here and decided by the
  taxonomy (the transport asks the classifier for the code's event, it chooses no class, scope or
  policy): an ``AgentSessionStart`` after the first poll of a connection is the platform's answer
  to a poll on an outdated sessionId (a poll answer that was lost, and the poll retried): the
  platform's own recovery, a snapshot and a new sessionId. NICE's SDK stores the new id and goes
  on (core-sdk ``get-next-event-provider.js``); so does the transport for the session's own agent:
  SESSION_RESYNCED (taxonomy v2: TRANSIENT, not retried) is reported (published) and the new id
  taken, or, when the taxonomy ends the session on it (v1: SESSION_ID_MISMATCH), raised. A replay
  naming another agent is what that recovery cannot explain: SESSION_ID_MISMATCH, raised;
* a poll that does not return within ``poll_watchdog`` seconds (core-sdk: 90 s; the pipeline's
  retries of it included) is abandoned and :meth:`AgentSessionConnection.serve` returns a
  ``TimeoutError`` RawError (NETWORK_TIMEOUT): the only way ``serve`` returns.

``AgentSessionEnd`` is the session's end, as NICE's SDK takes it (``cxone-get-next-adapter.js``:
on ``AgentSessionEnd`` it stops polling and clears the sessionId; it never polls again). The
events are delivered, then the transport *names* AGENT_SESSION_ENDED (the taxonomy decides its
class and scope), as it names SESSION_ID_MISMATCH: no vendor source shows what a poll after
the end answers, so none is sent. A 409 on a poll (the SDK's other end signal) still comes
through the pipeline as AGENT_SESSION_ENDED.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx

from supervisor.attempts import Flight
from supervisor.boundary import Learned, Reporter, SessionContext, raw_from_exception
from supervisor.errors import OperationError, SessionError, TransportFailure
from supervisor.rest.cxone_auth import CxoneApi
from supervisor.rest.pipeline import RequestPipeline, ResponseCheck
from supervisor.taxonomy import RawError, SdkErrorEvent
from supervisor.taxonomy.headers import parse_max_age_ms
from supervisor.vocabulary import CXONE_AGENT_SESSIONS, CloseCode, EndpointId, Platform

__all__ = [
    "CIRCUIT",
    "CONNECT_ENDPOINT",
    "MAX_AGE_CEILING_S",
    "POLL_READ_GRACE_S",
    "AgentSessionConnection",
    "AgentSessionTransport",
    "EventSink",
]

Sleep = Callable[[float], Awaitable[None]]
EventSink = Callable[[list[dict[str, Any]]], None]

#: the circuit every Agent Session API call goes through (one per CXone API endpoint)
CIRCUIT = EndpointId.api(Platform.CXONE)
#: the session's connect endpoint: its starts and joins, paced and gated as connection attempts
CONNECT_ENDPOINT = CXONE_AGENT_SESSIONS
#: the httpx read timeout of a poll is the server's hold time plus this (the server holds up to N s)
POLL_READ_GRACE_S = 10.0
#: a Cache-Control max-age longer than the longest hold CXone allows (60 s) is clamped to it
MAX_AGE_CEILING_S = 60.0
#: close() gives its DELETE (and the pipeline's retries of it) at most this long
CLOSE_TIMEOUT_S = 5.0

_EXISTS = frozenset({409})
# an empty poll is an answer, not a failure (RFC 9110 section 15.4.5)
_NOT_MODIFIED = frozenset({304})
# a poll on an agent session that ended (409, AGENT_SESSION_ENDED) or that the platform no longer knows
_GONE = frozenset({404, 409})
# cxone-get-next-adapter.js: both end the session for NICE's SDK
_END_EVENTS = frozenset({"AgentSessionEnd", "RemoteAgentSessionEnd"})
_START = "agent-session.start"
_JOIN = "agent-session.join"
_POLL = "agent-session.poll"
_END = "agent-session.end"
_STATE = "agent-session.state"


class AgentSessionTransport:
    """Opens CXone agent sessions for one supervised session (the :class:`Transport` protocol).

    ``required_fields``: ``sessionId`` is the session's server-side anchor (the start
    answer); ``agentId`` is the seed's required field (section 3) and CXone documents it
    in ``AgentSessionStart`` (docs/platforms.md, "NICE CXone"), the first event of a session; the
    agent the login's id_token names (``icAgentId``, NICE ``cxone-user.js``; rest/cxone_auth.py)
    stands in when the first poll has no such event. ``status`` is not required: it is the agent state (``AgentState.CurrentState``),
    which the platform need not send on the first poll, and is reported when it does.
    """

    # taxonomy v1 [responses."cxone.agent-session.AgentSession"]: sessionId and agentId (above)
    response_kind = "cxone.agent-session.AgentSession"
    #: a poll 200's required fields: [responses."cxone.agent-session.GetNextEvent"]
    poll_kind = "cxone.agent-session.GetNextEvent"

    def __init__(
        self,
        ctx: SessionContext,
        *,
        pipeline: RequestPipeline,
        api: CxoneApi,
        station_id: str | None = None,
        station_phone_number: str | None = None,
        poll_timeout: int = 30,
        poll_watchdog: float = 90.0,
        sleep: Sleep = anyio.sleep,
        on_events: EventSink | None = None,
        on_snapshot: EventSink | None = None,
        resume_session_id: str | None = None,
        join_first: bool = False,
    ) -> None:
        if not 0 <= poll_timeout <= 60:
            raise ValueError(
                f"poll_timeout must be within 0..60 s (docs/platforms.md, NICE CXone), got {poll_timeout!r}"
            )
        if not poll_watchdog > poll_timeout:
            # the server may hold a poll for poll_timeout: a shorter watchdog abandons every idle poll
            raise ValueError(
                f"poll_watchdog ({poll_watchdog!r} s) must exceed poll_timeout ({poll_timeout!r} s)"
            )
        self.context = ctx
        self.pipeline = pipeline
        self.api = api
        # NICE's StartSessionRequest: stationId and stationPhoneNumber are strings (one may be ""),
        # asAgentId a number (start-session-request.d.ts)
        self._station: dict[str, Any] = {
            "stationId": station_id or "",
            "stationPhoneNumber": station_phone_number or "",
        }
        self._join: dict[str, Any] = {"asAgentId": ""}  # joinSession: {asAgentId: agentId || ''}
        if ctx.agent_id is not None:
            # one application credential, many agents: start the session on the agent's behalf
            agent: int | str = (
                int(ctx.agent_id) if ctx.agent_id.isascii() and ctx.agent_id.isdigit() else ctx.agent_id
            )
            self._station["asAgentId"] = agent
            self._join["asAgentId"] = agent
        #: the sessionId the last start (or join) answered: the agent session's anchor
        self.anchor: str | None = None
        #: the agent session a handover left (its last rolling sessionId): the first open polls on
        #: with it and makes no start; once used (or found ended) every later open starts anew
        self._resume_id = resume_session_id
        #: a crash (or a fleet peer's kill) left the agent session logged in, its last rolling id
        #: unknown: the first open joins it at once, one request where a start would be answered 409
        #: and joined after (two paced slots per session on a takeover); used once
        self._join_first = join_first
        self.poll_timeout = poll_timeout
        self.poll_watchdog = poll_watchdog
        self.sleep = sleep
        self.on_events = on_events
        # the platform's snapshot after a (re)join or a resync: the first poll's AgentSessionStart,
        # the agent's state and open contacts (NICE cxone-get-next-adapter.js), or the replay that
        # answers a poll on an outdated sessionId. Its own sink (a resync's ``snapshot`` flag);
        # without one it goes to ``on_events`` like any batch
        self.on_snapshot = on_snapshot
        base = pipeline.client.timeout
        # the server holds the request up to poll_timeout s: the read timeout must exceed it
        self.poll_http_timeout = httpx.Timeout(
            connect=base.connect, read=poll_timeout + POLL_READ_GRACE_S, write=base.write, pool=base.pool
        )
        # a 200 without the next sessionId cannot go on: the next poll would replay (seed section 3)
        self.poll_check = ResponseCheck(required=pipeline.classifier.required_fields(self.poll_kind))

    @property
    def takes_over(self) -> bool:
        """The next open polls on the agent session a handover left before any start
        (:class:`~supervisor.transports.base.TakesOver`): the runtime admits no start for it."""
        return self._resume_id is not None

    async def _sessions_url(self) -> str:
        # apiUrl, or the API the credential's last login discovered (raises as open() may)
        return await self.api.base(self.context) + "agent-sessions"

    async def open(self, flight: Flight | None = None) -> AgentSessionConnection:
        """Start a platform session, then run its first poll; see the module docstring.

        Raises :class:`OperationError` (a classified failure, a malformed or incomplete
        poll or discovery, a login that gave up), :class:`CircuitOpenError`, or
        :class:`TransportFailure` (the first poll's watchdog).

        The start (and a join after a 409) is the session's connection attempt, on its connect
        endpoint ``cxone:agent-sessions`` only: ``flight``, admitted by the runtime, is the start's
        first attempt, and the retry executor asks that endpoint for every retry and for the join,
        so start-up is paced there as a WebSocket storm is, and each refusal is told to it once.
        The login before it and the first poll after it go through their own endpoints.
        """
        sessions = await self._sessions_url()
        resumed = await self._take_over(sessions)
        if resumed is not None:
            return resumed
        if self._join_first:
            self._join_first = False
            # no live session to join (ended meanwhile): a start, as NICE's SDK starts when it holds
            # none. Which status the platform answers then no vendor source says [inferred]: the
            # simulator's 404, or a 409 like an ended session's poll
            joined = await self._join_session(sessions, flight, ok_statuses=_GONE)
            if joined.status_code not in _GONE:
                return await self._anchored(sessions, joined)
            flight = None  # the join used the admitted slot: the start asks the endpoint anew
        response = await self.pipeline.request(
            "POST",
            sessions,
            ctx=self.context,
            circuit=CONNECT_ENDPOINT,
            admitted=flight,
            operation=_START,
            check=ResponseCheck(),  # a body that does not parse is MALFORMED_RESPONSE
            # 409: the agent already has a live session, one a crashed daemon (or a desktop) left
            ok_statuses=_EXISTS,
            json=self._station,
        )
        if response.status_code in _EXISTS:
            # take it over rather than fail: join gives us our own sessionId chain on the agent's
            # live session (docs/platforms.md, "NICE CXone", POST agent-sessions/join; NICE's SDK joins so)
            # the start's flight has left and been answered: the join asks the same endpoint anew
            response = await self._join_session(sessions, None)
        return await self._anchored(sessions, response)

    async def _join_session(
        self, sessions: str, flight: Flight | None, *, ok_statuses: frozenset[int] = frozenset()
    ) -> httpx.Response:
        """``POST agent-sessions/join`` on the connect endpoint (NICE ``acd-session-manager.js``
        ``joinSession``): our own sessionId chain on the agent's live session."""
        return await self.pipeline.request(
            "POST",
            f"{sessions}/join",
            ctx=self.context,
            circuit=CONNECT_ENDPOINT,
            admitted=flight,
            operation=_JOIN,
            check=ResponseCheck(),
            ok_statuses=ok_statuses,
            json=self._join,
        )

    async def _anchored(self, sessions: str, response: httpx.Response) -> AgentSessionConnection:
        """The connection on the sessionId a start or a join answered, after its first poll."""
        body = _json_object(response)
        start_id = body.get("sessionId") if body is not None else None
        if not isinstance(start_id, str) or not start_id:
            start_id = None
        self.anchor = start_id
        connection = AgentSessionConnection(self, sessions, start_id)
        if start_id is None:
            # no anchor to poll: the runtime's validation of session_response reports
            # INCOMPLETE_RESPONSE (seed section 3); nothing is invented here
            return connection
        await connection.first_poll()
        return connection

    async def _take_over(self, sessions: str) -> AgentSessionConnection | None:
        """Poll on the agent session a handover left, with no start and no join; None when there is
        none to take over, or the platform says it ended (a 409 or 404, or ``AgentSessionEnd``, on
        that poll: then a start).

        What NICE's SDK does with a sessionId it kept (core-sdk 26.2.1 ``cxone-client.js``
        ``onLeaderChanged``: ``hasSessionId`` → ``toggleACDEventEmitter`` → ``startGetNextEvents``
        on the stored ``acd_session_id``). A stored id the platform has since rotated past (a poll
        answered as the daemon stopped) gets the platform's replay, ``AgentSessionStart`` and a new
        id, which a first poll expects.
        """
        session_id, self._resume_id = self._resume_id, None
        if session_id is None:
            return None
        # no flight is admitted for it (``takes_over``): the take-over is a poll on the API endpoint,
        # not a connection attempt; a start after it asks the connect endpoint through the executor
        connection = AgentSessionConnection(self, sessions, session_id)
        try:
            await connection.first_poll()
        except OperationError as failure:
            if failure.event.raw_status in _GONE:
                return None  # the agent session ended meanwhile: a new start
            raise
        if connection.ended:
            return None  # its last poll said AgentSessionEnd (ended for inactivity): a new start
        self.anchor = session_id
        return connection

    async def aclose(self) -> None:
        """Nothing to release: the HTTP client and token cache belong to the pipeline's owner."""

    def resume_record(self) -> dict[str, str]:
        """What ends this agent session after a crash: its anchor (the start or join answer's sessionId)."""
        return {} if self.anchor is None else {"platformSessionId": self.anchor}

    async def end(self, session_id: str) -> None:
        """``DELETE agent-sessions/{session_id}``: end an agent session a crashed daemon left open.

        Raises the pipeline's OperationError (404/409: already gone) or CircuitOpenError.
        """
        await self.pipeline.request(
            "DELETE",
            f"{await self._sessions_url()}/{session_id}",
            ctx=self.context,
            circuit=CIRCUIT,
            operation=_END,
            json={"forceLogoff": False, "endContacts": False, "ignorePersonalQueue": False},
        )


class AgentSessionConnection:
    """One platform agent session: the long-poll loop and its rolling sessionId."""

    def __init__(self, transport: AgentSessionTransport, sessions_url: str, start_id: str | None) -> None:
        self._t = transport
        self._sessions = sessions_url
        # url.template of the calls on this session (telemetry): the rolling id is not part of it
        self._route = urlsplit(sessions_url).path + "/{sessionId}"
        #: the start answer's sessionId: the session's anchor (None when the platform gave none)
        self.start_id = start_id
        #: the rolling sessionId to poll next (mirrored in ``context.platform_session_id``)
        self.session_id = start_id
        self._response: dict[str, Any] = self._session_response([])
        self._next_delay = 0.0  # max-age of the last 304 (seed section 2)
        self._ended = False  # the platform said AgentSessionEnd: the session is over
        self._closed = False
        # the context of the calls on this session, kept while its ids stay the same (a poll every
        # few seconds per agent would build the same one each time)
        self._context: tuple[tuple[object, ...], SessionContext] | None = None

    @property
    def ended(self) -> bool:
        """The platform said ``AgentSessionEnd``: the agent session is over."""
        return self._ended

    @property
    def learned(self) -> Learned:
        """The rolling sessionId to poll next, and the agent the platform named."""
        agent = self._response.get("agentId")
        return Learned(
            platform_session_id=self.session_id, agent_id=agent if isinstance(agent, str) else None
        )

    @property
    def _ctx(self) -> SessionContext:
        base = self._t.context
        agent = self._response.get("agentId")
        key = (base, self.session_id, agent)
        kept = self._context
        if kept is not None and kept[0] == key:
            return kept[1]
        context = base.learned(self.learned)
        self._context = (key, context)
        return context

    @property
    def session_response(self) -> Mapping[str, Any]:
        """``{"sessionId", "agentId", "status"}`` as the platform said them.

        ``sessionId`` is the start answer's (None when it had none); ``agentId`` comes from
        ``AgentSessionStart`` or else the token; ``status`` (``AgentState.CurrentState``) is
        present only when the first poll carried it.
        """
        return self._response

    # ------------------------------------------------------------------ polling
    def _poll_url(self, session_id: str) -> str:
        return f"{self._sessions}/{session_id}/get-next-event"

    async def _poll(self, hold_s: int) -> httpx.Response | None:
        """One get-next-event through the pipeline, or None when the watchdog fired."""
        session_id = self.session_id
        assert session_id is not None
        t = self._t
        with anyio.move_on_after(t.poll_watchdog):
            response = await t.pipeline.request(
                "GET",
                # the query in the URL, not httpx's params: a URL merged with params is parsed
                # twice more per request (the takeover's first polls and every long poll)
                f"{self._poll_url(session_id)}?timeout={hold_s}",
                ctx=self._ctx,
                circuit=CIRCUIT,
                operation=_POLL,
                route=self._route + "/get-next-event",
                ok_statuses=_NOT_MODIFIED,
                check=t.poll_check,
                timeout=t.poll_http_timeout,
            )
            return response
        return None

    def _watchdog_raw(self) -> RawError:
        session_id = self.session_id or ""
        exc = TimeoutError(f"get-next-event did not return within {self._t.poll_watchdog:g} s")
        path = httpx.URL(self._poll_url(session_id)).path
        return raw_from_exception(exc, ctx=self._ctx, method="GET", endpoint=path)

    def _after_304(self, response: httpx.Response) -> None:
        # RFC 9110 section 15.4.5: a 304 has no body, so no new sessionId: keep the current one.
        # RFC 9111 section 5.2.2.1 max-age: the minimum re-poll interval (seed section 2).
        max_age_ms = parse_max_age_ms(response.headers.get("cache-control"))
        self._next_delay = min(max_age_ms / 1000.0, MAX_AGE_CEILING_S) if max_age_ms else 0.0

    def _take(
        self, response: httpx.Response, *, first: bool
    ) -> tuple[list[dict[str, Any]], SdkErrorEvent | None]:
        """Follow the rolling sessionId of a 200: its events, and the resync to report (or raise)."""
        polled = self.session_id or ""
        endpoint = f"GET {response.request.url.path}"
        # the pipeline's check guarantees a JSON object with a sessionId (else INCOMPLETE_RESPONSE)
        body = _json_object(response) or {}
        new_id = str(body["sessionId"])
        # docs/platforms.md, "NICE CXone": every 200 carries a new sessionId to use on the next poll
        self.session_id = new_id
        ctx = self._ctx
        raw_events = body.get("events")
        events = [e for e in raw_events if isinstance(e, dict)] if isinstance(raw_events, list) else []
        resync: SdkErrorEvent | None = None
        replay = None if first else next((e for e in events if e.get("Type") == "AgentSessionStart"), None)
        if replay is not None:
            classifier = self._t.pipeline.classifier
            named, ours = replay.get("AgentId"), self._response.get("agentId")
            if named not in (None, "") and ours is not None and str(named) != str(ours):
                # another agent's session start: nothing the platform's recovery explains
                raise OperationError(
                    classifier.session_id_mismatch(
                        polled,
                        new_id,
                        platform=ctx.platform,
                        channel=ctx.channel,
                        context=ctx.envelope_context(),
                        endpoint=endpoint,
                    )
                )
            # the platform's answer to an outdated sessionId: a snapshot and a new id (module docstring);
            # a replay that names no agent is taken as ours [I]: it keeps the session alive
            resync = classifier.session_resynced(
                polled,
                new_id,
                platform=ctx.platform,
                channel=ctx.channel,
                context=ctx.envelope_context(),
                endpoint=endpoint,
            )
        if any(e.get("Type") in _END_EVENTS for e in events):
            self._ended = True
        return events, resync

    def _end_event(self) -> OperationError:
        """AGENT_SESSION_ENDED, named from the AgentSessionEnd event the platform sent."""
        ctx = self._ctx
        event = self._t.pipeline.classifier.named(
            "AGENT_SESSION_ENDED",
            platform=ctx.platform,
            channel=ctx.channel,
            details="AgentSessionEnd: the platform ended the agent session",
            context=ctx.envelope_context(),
            endpoint=f"GET {httpx.URL(self._poll_url(self.session_id or '')).path}",
        )
        return OperationError(event)

    def _deliver(self, events: list[dict[str, Any]], *, snapshot: bool = False) -> None:
        t = self._t
        sink = (t.on_snapshot or t.on_events) if snapshot else t.on_events
        if events and sink is not None:
            sink(events)

    async def first_poll(self) -> None:
        """The first poll of a new session: ``AgentSessionStart`` (and ``AgentState``) expected."""
        response = await self._poll(0)  # answered at once: the start queued AgentSessionStart
        if response is None:
            raise TransportFailure(self._watchdog_raw(), "first get-next-event timed out")
        events: list[dict[str, Any]] = []
        if response.status_code == 304:
            self._after_304(response)
        else:
            events, _ = self._take(response, first=True)  # the first poll's AgentSessionStart is expected
        self._response = self._session_response(events)
        self._deliver(events, snapshot=True)

    def _session_response(self, events: list[dict[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {"sessionId": self.start_id}
        for event in events:
            kind = event.get("Type")
            if kind == "AgentSessionStart" and event.get("AgentId"):
                out["agentId"] = str(event["AgentId"])
            elif kind == "AgentState" and event.get("CurrentState"):
                out["status"] = str(event["CurrentState"])
        if "agentId" not in out and self._t.context.agent_id is not None:
            # the agent we started the session for (asAgentId), when the platform did not name it
            out["agentId"] = self._t.context.agent_id
        if "agentId" not in out:
            tokens = self._t.pipeline.tokens
            token = tokens.current if tokens is not None else None
            agent = token.extra.get("agent_id") if token is not None else None
            if agent not in (None, ""):
                out["agentId"] = str(agent)
        return out

    async def serve(self, report: Reporter) -> RawError:
        """The long-poll loop (docs/platforms.md, "NICE CXone"); returns only when the watchdog fires.

        Every other end raises: the pipeline's :class:`OperationError` (409 =
        AGENT_SESSION_ENDED, QUEUE_FULL, OAUTH_TOKEN_INVALID, exhausted retries, ...) or
        :class:`CircuitOpenError`, and this module's MALFORMED_RESPONSE, INCOMPLETE_RESPONSE,
        SESSION_ID_MISMATCH and AGENT_SESSION_ENDED (an AgentSessionEnd event). ``report`` gets the
        one event that need not end the connection, a resync (SESSION_RESYNCED): the runtime
        publishes it and says whether the session goes on (v1 ends it); in-call retries belong to
        the pipeline.
        """
        if self.session_id is None:
            raise RuntimeError("serve() needs a session opened with a sessionId")
        while True:
            if self._ended:
                raise self._end_event()  # the SDK stops polling on AgentSessionEnd
            if self._next_delay > 0:
                await self._t.sleep(self._next_delay)
                self._next_delay = 0.0
            response = await self._poll(self._t.poll_timeout)
            if response is None:
                return self._watchdog_raw()
            if response.status_code == 304:
                self._after_304(response)  # empty poll: poll again (after max-age, if any)
                continue
            events, resync = self._take(response, first=False)
            if resync is not None and not await report(resync):
                # the taxonomy ends the session on it (v1): the snapshot is not passed on as news
                raise OperationError(resync, published=True)
            # a resync's batch is the platform's snapshot (AgentSessionStart, state, contacts)
            self._deliver(events, snapshot=resync is not None)

    # ------------------------------------------------------------------ agent state
    async def set_agent_state(self, state: str, reason: str | None = None) -> None:
        """``POST agent-sessions/{sessionId}/state`` ``{"state", "reason"}``, as NICE's agent SDK sends
        it (acd-sdk 26.2.1 ``agent-state-service.js`` ``setAgentState``, on core-sdk's
        ``SET_AGENT_STATE_URI``; ``reason`` left out when there is none, as its ``JSON.stringify``
        drops an undefined one). The platform answers 202; the change itself arrives as an
        ``AgentState`` event on the next poll. Raises the pipeline's OperationError or CircuitOpenError."""
        session_id = self.session_id
        if session_id is None or self._ended or self._closed:
            raise SessionError("the agent session is over")
        body: dict[str, str] = {"state": state}
        if reason is not None:
            body["reason"] = reason
        await self._t.pipeline.request(
            "POST",
            f"{self._sessions}/{session_id}/state",
            ctx=self._ctx,
            circuit=CIRCUIT,
            operation=_STATE,
            route=self._route + "/state",
            json=body,
        )

    # ------------------------------------------------------------------ closing
    async def abandon(self) -> None:
        """A handover: stop polling and leave the agent session logged in, no DELETE; never raises.

        The rolling sessionId (``learned``) is what the next start polls: NICE's SDK keeps it too
        (core-sdk 26.2.1 ``get-next-event-provider.js`` stores every poll's ``sessionId`` as
        ``acd_session_id``), and a restarted client with one polls on without a new start
        (``cxone-client.js`` ``onLeaderChanged``: ``hasSessionId`` → ``toggleACDEventEmitter``). The
        runner cancels the poll in flight.
        """
        self._closed = True

    async def close(self, code: CloseCode = CloseCode.NORMAL_CLOSURE, reason: str = "") -> None:
        """End the platform session with DELETE so no orphan stays logged in; never raises.

        ``code`` and ``reason`` do not change the request: on stop (1000) and on shutdown
        (1001) alike the agent session must not outlive its supervisor. Skipped when the
        platform already said ``AgentSessionEnd`` or never gave a sessionId.
        """
        del code, reason
        if self._closed:
            return
        self._closed = True
        session_id = self.session_id
        if session_id is None or self._ended:
            return
        # shielded: a cancelled runner still logs the agent out, within a bounded time
        with anyio.move_on_after(CLOSE_TIMEOUT_S, shield=True):
            # close() never raises (supervisor/boundary.py): a failed DELETE changes nothing now
            with contextlib.suppress(Exception):
                await self._t.pipeline.request(
                    "DELETE",
                    f"{self._sessions}/{session_id}",
                    ctx=self._ctx,
                    circuit=CIRCUIT,
                    operation=_END,
                    route=self._route,
                    # NICE's EndSessionRequest (end-session-request.d.ts), as endSession sends it
                    json={"forceLogoff": False, "endContacts": False, "ignorePersonalQueue": False},
                )


def _json_object(response: httpx.Response) -> dict[str, Any] | None:
    """The body as a JSON object; ``{}`` for an empty body; None when it does not parse."""
    if not response.content:
        return {}
    try:
        body = response.json()
    except (ValueError, RecursionError):  # RecursionError: a body nested thousands deep
        return None
    return body if isinstance(body, dict) else {}
