"""A loopback stand-in for NICE CXone that answers from fixtures restating the vendors' wire shapes.

Not the simulator: this server keeps no model beyond what a test needs (a rolling sessionId, the
tokens it issued), answers every request from the fixtures below, and records each request as
:class:`Seen` (method, path, query, content type, form or JSON fields, the Authorization scheme and
principal) so a test compares what the *daemon* sends with what a vendor client sends. Header order,
User-Agent and telemetry headers are not recorded.

Each fixture restates, in our own words, a shape from (versions as in docs/platforms.md):

* NICE = ``nice-devone/nice-cxone-agent-sdk`` 26.2.1 (the compiled ``@nice-devone/*`` sources):
  ``auth-sdk`` ``open-id-configuration.js`` (the discovery fields it reads), ``common-sdk``
  ``auth-token.js`` (the token answer's fields), ``auth-sdk`` ``cxone-user.js`` ``setUserDetails``
  (the id_token claims it decodes), ``common-sdk`` ``cxone-configuration.js`` (the tenant discovery's
  fields), ``core-sdk`` ``acd-session-manager.js`` (the start answer's ``sessionId``),
  ``get-next-event-response.d.ts`` (``{sessionId, events}``), ``agent-session-start-event.js`` and
  ``agent-state-event.js`` (the event fields);
* COG = ``Cognigy/Extensions`` ``extensions/cxone/src/api/cxone-api-client.ts`` (commit 6bfc614): an
  independent client's access-key login (form ``password`` grant, Basic client), and the discovery
  of ``api_endpoint`` at ``{iss}/.well-known/cxone-configuration?tenantId=…``.
"""

from __future__ import annotations

import base64
import json
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote_plus

from aiohttp import web

from supervisor.sim import serving

#: the tenant id of NICE's own example (cxone-auth.js getCXoneConfiguration's doc comment)
TENANT = "11e85da0-f32c-7e10-898c-0242ac110003"
AGENT = "100001"


def _b64url(data: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


def id_token(issuer: str, client_id: str, **overrides: Any) -> str:
    """An unsigned JWT with the claims NICE's cxone-user.js setUserDetails decodes (tenantId,
    icAgentId, icBUId, icClusterId, teamId, name, given_name, family_name, sub ``user:<uuid>``)."""
    claims: dict[str, Any] = {
        "iss": issuer,
        "aud": client_id,
        "sub": "user:11ed6f7c-0a1b-2c3d-4e5f-0242ac110002",
        "tenantId": TENANT,
        "icAgentId": AGENT,
        "icBUId": 4600001,
        "icClusterId": "C32",
        "teamId": "2000",
        "name": "api.agent@example.com",
        "given_name": "Api",
        "family_name": "Agent",
        "iat": 1_800_000_000,
        "exp": 1_800_003_600,
    }
    claims.update(overrides)
    return f"{_b64url({'alg': 'none', 'typ': 'JWT'})}.{_b64url(claims)}.sig"


def openid_configuration(issuer: str) -> dict[str, Any]:
    """NICE open-id-configuration.js reads these (plus issuer, OpenID Connect Discovery section 3)."""
    return {
        "issuer": issuer,
        "authorization_endpoint": issuer + "/auth/authorize",
        "token_endpoint": issuer + "/auth/token",
        "end_session_endpoint": issuer + "/auth/authorize/logout",
        "jwks_uri": issuer + "/auth/jwks",
        "display_values_supported": ["page", "popup"],
        "code_challenge_methods_supported": ["S256"],
    }


def token_answer(n: int, issuer: str, client_id: str, **id_claims: Any) -> dict[str, Any]:
    """NICE auth-token.js parseData / COG CXoneTokenResponse: no resource_server_base_uri."""
    return {
        "access_token": f"AT-{n}",
        "token_type": "Bearer",
        "expires_in": 3600,
        "refresh_token": f"RT-{n}",
        "id_token": id_token(issuer, client_id, **id_claims),
    }


def cxone_configuration(api: str) -> dict[str, Any]:
    """NICE cxone-configuration.js parseData reads api_endpoint, area, cluster, domain, acdDomain,
    uhDomain; COG reads api_endpoint."""
    return {
        "api_endpoint": api,
        "area": "na1",
        "cluster": "C32",
        "domain": "niceincontact.com",
        "acdDomain": "nice-incontact.com",
        "uhDomain": "nicecxone.com",
    }


def session_start(session_id: str, agent: str = AGENT) -> dict[str, str]:
    """agent-session-start-event.js parse: the fields it reads (PascalCase, string values)."""
    return {
        "Type": "AgentSessionStart",
        "BusNo": "4600001",
        "AgentId": agent,
        "SessionId": session_id,
        "StationId": "",
        "StationPhoneNumber": "5551234",
        "StationCallerId": "5551234",
        "IISHost": "api-c32",
        "VCHost": "vc-c32",
    }


def agent_state() -> dict[str, Any]:
    """agent-state-event.js parse (keys read case-sensitively)."""
    return {
        "Type": "AgentState",
        "CurrentState": "Unavailable",
        "CurrentOutReason": "",
        "IsAcw": "False",
        "NextStates": [],
        "NextIsAcw": "False",
        "AcwTimeout": "0",
    }


@dataclass(frozen=True)
class Seen:
    """One request as the daemon sent it."""

    method: str
    path: str
    query: dict[str, str]
    content_type: str | None
    form: dict[str, str] | None
    json: Any
    auth_scheme: str | None
    # Basic: the client id (form-decoded, RFC 6749 section 2.3.1); Bearer: the token
    principal: str | None
    # Basic: the client secret (form-decoded)
    secret: str | None = None


@dataclass
class Answer:
    status: int
    body: Any = None


@dataclass
class CxonePlatform:
    """The fixture server: the OpenID login, the tenant discovery, the agent-session API."""

    client_id: str
    client_secret: str
    access_key_id: str
    access_key_secret: str
    url: str = ""
    seen: list[Seen] = field(default_factory=list)
    #: scripted answers for the next requests of a kind ("openid", "password", "refresh_token", "discovery")
    script: dict[str, deque[Answer]] = field(default_factory=dict)
    #: called on every poll, before it is answered (a test's clock moves here)
    on_poll: Callable[[Seen], None] | None = None
    #: drop the answer of the next poll (the id has rolled on the platform's side)
    lose_next_poll: bool = False
    #: the AgentId the next replay names (another agent's: what no recovery explains)
    replay_agent: str = AGENT
    tokens: int = 0
    issued: set[str] = field(default_factory=set)
    chain: list[str] = field(default_factory=list)
    _listener: serving.Listener | None = None

    # ------------------------------------------------------------------ lifecycle
    async def __aenter__(self) -> CxonePlatform:
        app = web.Application()
        app.router.add_get("/.well-known/openid-configuration", self._openid)
        app.router.add_get("/.well-known/cxone-configuration", self._cxone_configuration)
        app.router.add_post("/auth/token", self._token)
        sessions = "/inContactAPI/services/{version}/agent-sessions"
        app.router.add_post(sessions, self._start)
        app.router.add_get(sessions + "/{sid}/get-next-event", self._poll)
        app.router.add_delete(sessions + "/{sid}", self._end)
        sock = serving.bind_sockets("127.0.0.1", 0, ("cxone",))["cxone"]
        host, port = sock.getsockname()[:2]
        self.url = serving.format_url("http", str(host), int(port))
        self._listener = await serving.serve_aiohttp("cxone", app, sock, read_timeout_s=30.0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._listener is not None:
            await serving.close_all([self._listener])

    def answer(self, kind: str, *answers: Answer) -> None:
        self.script.setdefault(kind, deque()).extend(answers)

    def requests(self, method: str, path: str) -> list[Seen]:
        return [s for s in self.seen if s.method == method and s.path == path]

    # ------------------------------------------------------------------ recording
    async def _record(self, request: web.Request) -> Seen:
        raw = await request.read()
        ctype = request.headers.get("Content-Type")
        form = json_body = None
        if raw:
            if ctype is not None and ctype.startswith("application/x-www-form-urlencoded"):
                form = dict(parse_qsl(raw.decode(), keep_blank_values=True))
            else:
                json_body = json.loads(raw)
        scheme, principal, secret = None, None, None
        auth = request.headers.get("Authorization")
        if auth is not None:
            scheme, _, value = auth.partition(" ")
            if scheme == "Basic":
                user, _, password = base64.b64decode(value).decode().partition(":")
                principal, secret = unquote_plus(user), unquote_plus(password)
            else:
                principal = value
        seen = Seen(
            request.method,
            request.path,
            dict(request.query),
            ctype,
            form,
            json_body,
            scheme,
            principal,
            secret,
        )
        self.seen.append(seen)
        return seen

    def _scripted(self, kind: str) -> Answer | None:
        queue = self.script.get(kind)
        return queue.popleft() if queue else None

    @staticmethod
    def _json(answer: Answer) -> web.Response:
        if answer.body is None:
            return web.Response(status=answer.status)
        return web.json_response(answer.body, status=answer.status)

    # ------------------------------------------------------------------ auth host
    async def _openid(self, request: web.Request) -> web.Response:
        await self._record(request)
        scripted = self._scripted("openid")
        if scripted is not None:
            return self._json(scripted)
        return web.json_response(openid_configuration(self.url))

    async def _token(self, request: web.Request) -> web.Response:
        seen = await self._record(request)
        form = seen.form or {}
        if (seen.principal, seen.secret) != (self.client_id, self.client_secret):
            return web.json_response({"error": "invalid_client"}, status=401)
        grant = form.get("grant_type", "")
        scripted = self._scripted(grant)
        if scripted is not None:
            return self._json(scripted)
        if grant == "password" and (form.get("username"), form.get("password")) == (
            self.access_key_id,
            self.access_key_secret,
        ):
            return self._issue()
        if grant == "refresh_token" and form.get("refresh_token") == f"RT-{self.tokens}":
            return self._issue()
        return web.json_response({"error": "invalid_grant"}, status=400)

    def _issue(self) -> web.Response:
        self.tokens += 1
        self.issued.add(f"AT-{self.tokens}")
        answer = token_answer(self.tokens, self.url, self.client_id)
        return web.json_response(answer, headers={"Cache-Control": "no-store"})

    async def _cxone_configuration(self, request: web.Request) -> web.Response:
        seen = await self._record(request)
        scripted = self._scripted("discovery")
        if scripted is not None:
            return self._json(scripted)
        if seen.query.get("tenantId") != TENANT:
            return web.json_response({"error": "not_found"}, status=404)
        return web.json_response(cxone_configuration(self.url))

    # ------------------------------------------------------------------ agent sessions
    def _authorized(self, seen: Seen) -> bool:
        return seen.auth_scheme == "Bearer" and seen.principal in self.issued

    def _next_id(self) -> str:
        self.chain.append(f"S{len(self.chain)}")
        return self.chain[-1]

    async def _start(self, request: web.Request) -> web.Response:
        seen = await self._record(request)
        if not self._authorized(seen):
            return web.json_response({"error": "invalid_token"}, status=401)
        # acd-session-manager.js startSession reads resp.data.sessionId
        return web.json_response({"sessionId": self._next_id()}, status=202)

    async def _poll(self, request: web.Request) -> web.StreamResponse:
        seen = await self._record(request)
        if self.on_poll is not None:
            self.on_poll(seen)
        if not self._authorized(seen):
            return web.json_response({"error": "invalid_token"}, status=401)
        sid = request.match_info["sid"]
        if sid not in self.chain:
            return web.json_response({"error": "invalid_session"}, status=404)
        if sid != self.chain[-1]:
            # an outdated id: the platform replays AgentSessionStart and a snapshot, with a new id
            new = self._next_id()
            events = [session_start(new, self.replay_agent), agent_state()]
            return web.json_response({"sessionId": new, "events": events})
        if self.lose_next_poll:
            # the answer is produced (the id rolls on) and lost on the way: the connection drops
            self.lose_next_poll = False
            self._next_id()
            assert request.transport is not None
            request.transport.abort()
            return web.Response(status=200)
        if len(self.chain) == 1:
            new = self._next_id()  # the first poll of a session: its start and the agent's state
            return web.json_response({"sessionId": new, "events": [session_start(new), agent_state()]})
        return web.Response(status=304)

    async def _end(self, request: web.Request) -> web.Response:
        await self._record(request)
        return web.Response(status=202)
