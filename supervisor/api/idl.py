"""The interfaces in varlink's own description language, and the ``org.varlink.service`` methods. Pure.

Each socket answers ``org.varlink.service.GetInfo`` and ``GetInterfaceDescription`` for its
interfaces, so a generic varlink client (``varlinkctl introspect``, systemd ≥ 255) can list
and call them. docs/socket-api.md describes the same in prose, with examples.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from supervisor.api.protocol import CONTROL, PROTOCOL, SERVICE, STATE, ApiFault, Call, Method
from supervisor.distribution import VERSION
from supervisor.errors import ApiError

__all__ = ["DESCRIPTIONS", "service_reply"]

_SESSION = """\
# One supervised session as a row: what a snapshot lists and ShowSession returns.
type Session (
  sessionId: string,
  state: string,
  # ISO-8601 UTC, when it entered this state
  since: string,
  platform: string,
  kind: string,
  agentId: ?string,
  conversationId: ?string,
  platformSessionId: ?string,
  # reconnection attempts since it was last active
  attempts: int,
  lastError: ?(code: string, class: string, at: string),
  circuit: ?(endpoint: string, state: string),
  termination: ?object,
  # "config": declared by the configuration file; "api": added over the control socket (AddSession)
  origin: ?string,
  # the named tenant ([tenants.NAME]) the session runs on; absent: the default tenant ([platforms.*])
  tenant: ?string
)
"""

_STATE = (
    f"""\
# Session state, read-only: a snapshot, then one delta per change (docs/socket-api.md).
interface {STATE}

"""
    + _SESSION
    + """
# agents and eventTypes narrow the platform stream only (its records and gaps; eventTypes not gaps).
type Filter (
  platforms: ?[]string,
  states: ?[]string,
  sessions: ?[]string,
  agents: ?[]string,
  eventTypes: ?[]string
)

# What a client of the platform stream saw of one session: the bootId and the last sessionSeq.
type Seen (bootId: string, seq: int)

# Call with more: true. Replies, each with a type: snapshot (bootId, seq, sessions), delta (seq,
# sessionId, state, previous, at, reason, platform, attempts, lastError, circuit), event (an
# opt-in stream's event in its wire form), lagged (count; a snapshot follows), end (reason);
# with the platform stream also platform (bootId, sessionId, sessionSeq, agentId, platform,
# eventType, the ids the event names, body, receivedAt, replayed, snapshot) and gap (bootId,
# sessionId, agentId, platform, fromSeq, toSeq, seconds, resync, reason, at).
# streams: circuits, retries, throttling, rollovers, terminations, errors, backpressure, attributes,
# control, daemon, all; and platform (not part of all; PermissionDenied unless the peer is in
# [sockets] platformAllowUids / platformAllowGids). since (per session id; with the platform stream):
# what was missed from the daemon's window, or a gap naming what fell out.
method Subscribe(filter: ?Filter, streams: ?[]string, since: ?[string]Seen) -> (
  type: string,
  bootId: ?string,
  seq: ?int,
  sessions: ?[]Session,
  sessionId: ?string,
  state: ?string,
  previous: ?string,
  at: ?string,
  reason: ?string,
  count: ?int,
  event: ?string,
  sessionSeq: ?int,
  agentId: ?string,
  platform: ?string,
  eventType: ?string,
  body: ?object,
  receivedAt: ?string,
  replayed: ?bool,
  snapshot: ?bool,
  fromSeq: ?int,
  toSeq: ?int,
  seconds: ?float,
  resync: ?string
)

# The platform stream to a peer its allow-lists do not name.
error PermissionDenied (stream: string, problem: string)
"""
)

_CONTROL = (
    f"""\
# Control of the daemon: stricter than the subscribe socket; every verb that changes something is
# published as a CONTROL_COMMAND event with the caller's uid, gid and pid. Each method needs a role:
# observer (reads), operator (sessions and attributes), administrator (Drain, Reload, UseTaxonomy,
# IsolateCircuit, CloseCircuit, ResetCircuit).
interface {CONTROL}

"""
    + _SESSION
    + """
type Count (total: int, byState: [string]int)
# tenant: a named tenant's endpoint (NAME/genesys:api); absent for the default tenant's
type Circuit (endpoint: string, circuitId: string, state: string, tenant: ?string)

# A fleet member's view of the fleet (absent on one host): its members and each shard's owner and epoch.
type FleetMember (member: string, host: string, state: string, live: bool, shards: int,
  heartbeatAgeSeconds: ?float, mine: bool)
type FleetShard (shard: int, owner: ?string, epoch: int, mine: bool)
# problem: why the view is as the member last read it (the database cannot be reached now)
type Fleet (member: string, problem: ?string, members: []FleetMember, shards: []FleetShard)
# A verb accepted for a session another fleet member owns: recorded for it (state "requested").
type Forwarded (owner: ?string, host: ?string, shard: int, epoch: int)

method Status() -> (bootId: string, uptimeSeconds: float, startedAt: string, version: string,
  taxonomy: string, draining: bool, sessions: Count, circuits: []Circuit, sockets: object, fleet: ?Fleet)
method ListSessions(sessions: ?[]string, platforms: ?[]string, states: ?[]string) -> (sessions: []Session)
method ShowSession(sessionId: string) -> (session: Session)
# A configured session that is not running (never started, stopped, or terminated by a fail-fast):
# a new runner, a full authentication cycle.
method StartSession(sessionId: string) -> (sessionId: string, state: string, reauthenticated: bool,
  forwarded: ?Forwarded)
# Close 1000 (CXone: end the agent session); idempotent.
method StopSession(sessionId: string) -> (sessionId: string, state: string, forwarded: ?Forwarded)
# Drain like SIGTERM, then exit. With a store the sessions are handed over (left alive for the next
# start: handover true); endSessions ends them on the platform instead (closeSession, DELETE).
method Drain(endSessions: ?bool) -> (draining: bool, handover: bool)
# A shipped version (v1, v2) or a taxonomy file; validated before it replaces the active one.
method UseTaxonomy(version: string) -> (previous: string, version: string, origin: string)
method Reload() -> (result: object)
# Attribute updates of a session's conversation, or of a Genesys conversation by its id with no session
# (exactly one of sessionId, conversationId; platform "genesys" is implied, "cxone" is refused: Unsupported)
# (docs/attributes.md). Answered once the update is durably in the outbox (acknowledged); a full queue
# answers Backpressure (try again after retryAfterSeconds). sessionId is null in the answer to an update
# by conversation id. tenant: the named tenant whose credential writes a conversation given by id
# (absent: the default tenant's); a session's update goes out with its own tenant's.
method SetAttributes(sessionId: ?string, conversationId: ?string, platform: ?string,
  attributes: [string]string, tenant: ?string) -> (accepted: bool, updateId: string,
  sessionId: ?string, conversationId: string, coalesced: bool, coalescedKeys: []string, queueDepth: int)
# What verification could not repair; values of sensitive keys are never shown.
method ListMismatches(includeResolved: ?bool) -> (mismatches: []object)
# resolution: "resend" (send our value again) or "accept-server" (keep what the server holds).
method ResolveMismatch(mismatchId: int, resolution: string) -> (mismatch: object)
method AttributesStatus() -> (attributes: object)
# Manual circuit control of one endpoint (genesys:api, cxone:agent-sessions, ...; Status lists them). An
# isolated circuit admits nothing until closed, reset or forSeconds have passed; its sessions wait in
# reconnecting and their horizon stands still. In memory only: a restart closes every circuit.
method IsolateCircuit(endpoint: string, forSeconds: ?float) -> (endpoint: string, circuitId: string,
  previous: string, state: string, changed: bool, forSeconds: ?float)
# Ends an isolation (a closed circuit: changed false); an open or half-open circuit is reset, not closed.
method CloseCircuit(endpoint: string) -> (endpoint: string, circuitId: string, previous: string,
  state: string, changed: bool)
# Closed with its counters cleared, from any state (after a false trip).
method ResetCircuit(endpoint: string) -> (endpoint: string, circuitId: string, previous: string,
  state: string, changed: bool)
# A guest message on a live Web Messaging session, through the retry executor; clientId (default: a new
# UUID) goes with every send of it. Answered with the platform's message id once the platform has it
# (its echo, or the guest history entry found by clientId when the echo was lost).
method SendMessage(sessionId: string, text: string, clientId: ?string) -> (sessionId: string,
  messageId: string, clientId: string)
# The agent state of a live CXone session (POST agent-sessions/{id}/state); the platform answers 202 and
# the change arrives as an AgentState event.
method SetAgentState(sessionId: string, state: string, reason: ?string) -> (sessionId: string,
  state: string, reason: ?string, accepted: bool)
# Sessions added at run time (docs/socket-api.md, "AddSession"): at most 200 entries per call, each the
# configuration's [[sessions]] fields (platform implied by kind), validated as the file's entries are and
# answered on its own in results (added, or refused with error and problem); kept in the store, then started.
method AddSession(sessions: []object) -> (results: []object, added: int, refused: int)
# Sessions added over the control socket: closed as StopSession closes them, and forgotten (the store too).
method RemoveSession(sessionIds: []string) -> (results: []object, removed: int)

error NoSuchSession (sessionId: string)
error SessionRunning (sessionId: string, state: string)
error NotAccepting (problem: string)
error InvalidTaxonomy (version: string, problem: string)
error Unsupported (method: string, problem: string)
error ReloadFailed (problem: string)
error Backpressure (tenant: string, queueDepth: int, limit: int, retryAfterSeconds: float, problem: string)
error StoreUnavailable (problem: string)
error SessionTerminated (sessionId: string, problem: string)
error NoConversation (sessionId: string, problem: string)
error NoSuchMismatch (mismatchId: int, problem: string)
error AlreadyResolved (mismatchId: int, problem: string)
error NotResolvable (mismatchId: int, problem: string)
error SessionNotActive (sessionId: string, state: string, problem: string)
error WrongSessionKind (sessionId: string, kind: string, problem: string)
error ReadOnlyConversation (sessionId: string, problem: string)
# The platform refused it for good: code is the taxonomy's, status the platform's own (HTTP, or Web Messaging's).
error PlatformRejected (sessionId: string, code: string, status: ?int, problem: string)
# No answer, and not found in the platform's echoes or the guest history after: it may have arrived.
error SendUnconfirmed (sessionId: string, clientId: string, resent: bool, problem: string)
# The caller's role (observer, operator, administrator) does not include the one the method needs.
error PermissionDenied (method: string, role: string, granted: string, problem: string)
error InvalidSessionSpec (index: int, sessionId: ?string, problem: string)
error SessionExists (index: int, sessionId: string, origin: string, problem: string)
error ConfiguredSession (sessionId: string, problem: string)
error NoStore (problem: string)
error NoSuchEndpoint (endpoint: string, endpoints: []string, problem: string)
error NotIsolated (endpoint: string, state: string, problem: string)
# A notifications session would need one more channel than its OAuth client may hold (channels of topics each).
error ChannelLimit (index: int, sessionId: string, channels: int, topics: int, problem: string)
# The session's shard is not owned by this process (owner: the fleet identity of the one that owns it, when known).
error NotOwner (sessionId: string, shard: int, owner: ?string, host: ?string, epoch: ?int, problem: string)
"""
)

_PROTOCOL = f"""\
# Errors of the framing itself, on either socket.
interface {PROTOCOL}

error InvalidMessage (problem: string)
error MessageTooLarge (limit: int, problem: string)
error HandshakeTimeout (seconds: float, problem: string)
# The control socket: no call for this long after the last answer.
error IdleTimeout (seconds: float, problem: string)
error TooManyConnections (limit: int, problem: string)
error StreamTakesNoCalls (problem: string)
error InternalError (problem: string)
"""

_SERVICE = f"""\
interface {SERVICE}

method GetInfo() -> (vendor: string, product: string, version: string, url: string, interfaces: []string)
method GetInterfaceDescription(interface: string) -> (description: string)

error InterfaceNotFound (interface: string)
error MethodNotFound (method: string)
error MethodNotImplemented (method: string)
error InvalidParameter (parameter: string)
error PermissionDenied ()
error ExpectedMore ()
"""

#: interface -> its description, for GetInterfaceDescription
DESCRIPTIONS: Final = {SERVICE: _SERVICE, STATE: _STATE, CONTROL: _CONTROL, PROTOCOL: _PROTOCOL}


def service_reply(call: Call, interfaces: Iterable[str]) -> dict[str, Any]:
    """Answer an ``org.varlink.service`` call for a socket serving ``interfaces``."""
    served = [SERVICE, *interfaces, PROTOCOL]
    if call.method == Method.GET_INFO:
        return {
            "vendor": "session-supervisor",
            "product": "session-supervisor",
            "version": VERSION,
            # no public home yet: varlink allows an empty url
            "url": "",
            "interfaces": served,
        }
    interface = call.parameters.get("interface")
    if not isinstance(interface, str):
        raise ApiError(
            ApiFault.INVALID_PARAMETER,
            {"parameter": "interface", "problem": "interface: expected a string"},
        )
    if interface not in served:
        raise ApiError(ApiFault.INTERFACE_NOT_FOUND, {"interface": interface[:200]})
    return {"description": DESCRIPTIONS[interface]}
