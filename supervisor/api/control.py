"""The control socket: list and show sessions, start, stop, drain, switch the taxonomy, reload.

Calls on one connection are answered in order (pipelining is fine; reading pauses while a batch
is answered, so pending calls are bounded by one read). Every verb answers a result or a typed
error (protocol.ApiFault); every verb that changes something is published as
``CONTROL_COMMAND`` with the caller's uid, gid and pid, done or refused.

* ``StartSession``: a configured session that is not running gets a new runner (a new machine,
  a full authentication cycle): after a fail-fast this is the seed's "user-initiated
  re-authentication". A session still running is refused (``SessionRunning``).
* ``UseTaxonomy``: a shipped version or an absolute path to a regular file (at most 1 MiB, read
  off the event loop), validated completely before it replaces the classifier's taxonomy
  (``TAXONOMY_SWITCHED``); a file that does not validate is refused and nothing changes.
* ``Reload``: the reload function of the daemon; ``Unsupported`` until one is given.
* ``IsolateCircuit`` / ``CloseCircuit`` / ``ResetCircuit``: an operator's hand on one endpoint's
  circuit (docs/runtime.md, "Manual circuit control"); an endpoint the daemon does not have is
  ``NoSuchEndpoint`` (naming those it has), closing a circuit that is open or half-open rather than
  isolated is ``NotIsolated`` (that is a reset). ``CIRCUIT_MANUAL`` says what moved.

What the verbs act on is handed over at construction (supervisor/runtime/sessions.py): the session
table to read, the control operations, the taxonomy switch, the desired sessions and the attribute
service of the store; never the supervisor itself.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Final

import anyio
from anyio import to_thread

from supervisor.api.board import StateBoard
from supervisor.api.connection import Connection
from supervisor.api.control_attributes import AttributeVerbs, Publish
from supervisor.api.control_messages import MessageVerbs
from supervisor.api.control_sessions import SessionVerbs
from supervisor.api.events import ControlCommand, Peer, TaxonomySwitched
from supervisor.api.idl import service_reply
from supervisor.api.messages import parse_subscription
from supervisor.api.not_owner import not_owner
from supervisor.api.protocol import (
    CONTROL,
    SERVICE,
    ApiFault,
    Call,
    Method,
    check_method,
    encode_error,
    encode_reply,
    parse_call,
)
from supervisor.api.roles import ControlRoles, Role, permission_denied, required_role
from supervisor.api.signatures import check_parameters
from supervisor.attributes import AttributeService
from supervisor.bus import EventBus
from supervisor.clock import Clock, iso_utc
from supervisor.distribution import VERSION
from supervisor.errors import ApiError, ConfigError, StoreError, SupervisorError, TaxonomyError
from supervisor.fleet.desired import REQUESTED, FleetDesk
from supervisor.fleet.view import FleetView, fleet_wire
from supervisor.runtime.sessions import (
    CircuitControl,
    DesiredSessions,
    ManualMove,
    Owner,
    SessionControl,
    SessionMessaging,
    SessionOwners,
    SessionReader,
    TaxonomySwitch,
)
from supervisor.store.model import DesiredState
from supervisor.taxonomy import Taxonomy, load_taxonomy
from supervisor.vocabulary import CircuitState, CloseCode, EndpointId, SessionState

__all__ = ["ControlService", "Reload"]

#: the daemon's reload function: re-read config and credentials, return a summary
Reload = Callable[[], Awaitable[Mapping[str, Any]]]

_KNOWN = {
    SERVICE: frozenset({Method.GET_INFO.value, Method.GET_INTERFACE_DESCRIPTION.value}),
    CONTROL: frozenset(m.value for m in Method if m.value.startswith(CONTROL + ".")),
}
_STATES = frozenset(s.value for s in SessionState)
# the CONTROL_COMMAND verb of each method that changes something (as its handler publishes it)
_VERBS: Final[Mapping[str, str]] = {
    Method.START_SESSION: "start",
    Method.STOP_SESSION: "stop",
    Method.DRAIN: "drain",
    Method.USE_TAXONOMY: "taxonomy.use",
    Method.RELOAD: "reload",
    Method.SET_ATTRIBUTES: "attributes.set",
    Method.RESOLVE_MISMATCH: "mismatch.resolve",
    Method.ISOLATE_CIRCUIT: "circuit.isolate",
    Method.CLOSE_CIRCUIT: "circuit.close",
    Method.RESET_CIRCUIT: "circuit.reset",
    Method.SEND_MESSAGE: "send",
    Method.SET_AGENT_STATE: "agent-state",
    Method.ADD_SESSION: "sessions.add",
    Method.REMOVE_SESSION: "sessions.remove",
}
#: the methods on named sessions: each goes through the owner lookup first (NotOwner)
_ON_SESSIONS: Final = frozenset(
    {
        Method.SHOW_SESSION.value,
        Method.START_SESSION.value,
        Method.STOP_SESSION.value,
        Method.SET_ATTRIBUTES.value,
        Method.SEND_MESSAGE.value,
        Method.SET_AGENT_STATE.value,
        Method.REMOVE_SESSION.value,
    }
)
#: the verbs on a named session any fleet member accepts (docs/socket-api.md, "A fleet"); the others
#: answer NotOwner {owner, host, shard, epoch}. Start and stop: the desired state written here for the
#: owner (supervisor/fleet/desired.py)
_ANY_MEMBER: Final = frozenset({Method.START_SESSION.value, Method.STOP_SESSION.value})
#: ... and the verbs that find each session's owner themselves: RemoveSession per id, SetAttributes (the
#: update committed to the outbox here, its owner told)
_EACH_ITS_OWN: Final = frozenset({Method.REMOVE_SESSION.value, Method.SET_ATTRIBUTES.value})
#: the longest isolation ``--for`` gives (a week: a maintenance window, not a way to switch an endpoint off)
MAX_ISOLATION_S: Final = 7 * 24 * 3600.0
_MAX_TAXONOMY_BYTES: Final = 1 << 20
# a control client that does not read its reply for this long is cut off
_WRITE_TIMEOUT_S: Final = 30.0


def _no_such_session(session_id: str) -> ApiError:
    return ApiError(
        ApiFault.NO_SUCH_SESSION,
        {"sessionId": session_id, "problem": f"no configured session '{session_id}'"},
    )


def _session_id(parameters: Mapping[str, Any]) -> str:
    value = parameters.get("sessionId")
    if not isinstance(value, str) or not 0 < len(value) <= 200:
        raise ApiError(
            ApiFault.INVALID_PARAMETER,
            {"parameter": "sessionId", "problem": "sessionId: expected a string of 1 to 200 characters"},
        )
    return value


class ControlService:
    """Handles each connection of the control socket (see the module docstring)."""

    def __init__(
        self,
        sessions: SessionReader,
        operations: SessionControl,
        board: StateBoard,
        *,
        bus: EventBus,
        taxonomy: TaxonomySwitch,
        clock: Clock,
        handshake_timeout: float,
        idle_timeout: float = 60.0,
        stop: anyio.Event | None = None,
        reload: Reload | None = None,
        sockets: Callable[[], dict[str, Any]] = dict,
        desired: DesiredSessions | None = None,
        attributes: AttributeService | None = None,
        roles: ControlRoles | None = None,
        circuits: CircuitControl | None = None,
        messaging: SessionMessaging | None = None,
        owners: SessionOwners | None = None,
        fleet: FleetDesk | None = None,
        fleet_view: Callable[[], FleetView] | None = None,
    ) -> None:
        self.sessions = sessions
        # a fleet member's commands for sessions other members own; None: one host, or a store of its own
        self.fleet = fleet
        # the fleet as this member's leases see it (Status's ``fleet``); None: not a fleet member
        self.fleet_view = fleet_view
        # who answers for a session (the one lookup; None: this process answers for every session)
        self.owners = owners
        # manual circuit control; None: a daemon that offers none (the verbs answer Unsupported)
        self.circuits = circuits
        self.operations = operations
        self._bus = bus
        self._taxonomy = taxonomy
        # who may do what (supervisor/api/roles.py); None: every peer let in is an administrator
        self.roles = roles
        # calls refused for the caller's role (Status: sockets.control.deniedCalls)
        self.denied = 0
        self.board = board
        self._clock = clock
        self._handshake = handshake_timeout
        self._idle = idle_timeout
        self._stop = stop
        self.reload = reload
        self._sockets = sockets
        # desired sessions and attribute updates (docs/attributes.md); None: a daemon without a store
        self.desired = desired
        self.attribute_verbs = AttributeVerbs(attributes, owners=owners, fleet=fleet)
        # a message or an agent state on a live session's behalf; None: not offered (Unsupported)
        self.message_verbs = MessageVerbs(sessions, messaging)
        # sessions added and removed at run time (supervisor/api/control_sessions.py)
        self.session_verbs = SessionVerbs(sessions, operations, owners=owners, fleet=fleet)

    # ------------------------------------------------------------------ connection
    def configure(self, *, roles: ControlRoles, handshake_timeout: float, idle_timeout: float) -> None:
        """Reloaded roles (asked again at every call) and the timeouts of the calls to come."""
        self.roles = roles
        self._handshake = handshake_timeout
        self._idle = idle_timeout

    def _role(self, peer: Peer) -> Role | None:
        return Role.ADMINISTRATOR if self.roles is None else self.roles.role_of(peer)

    async def handle(self, connection: Connection) -> None:
        peer = connection.peer
        if self._role(peer) is None:  # the accept loop refuses such a peer first; never serve one
            connection.close()
            return
        frames = await self._first_call(connection)
        while frames:
            # asked at every call: a reload may have changed the peer's role since it connected
            role = self._role(peer)
            if role is None:
                connection.close()
                return
            replies = [await self._answer(peer, role, frame) for frame in frames]
            data = b"".join(r for r in replies if r)
            if data and not await connection.send(data, max_wait_s=_WRITE_TIMEOUT_S):
                return
            frames = await self._next_calls(connection)

    async def _next_calls(self, connection: Connection) -> list[bytes] | None:
        """The next calls, within the idle timeout counted from the last answer (None: closed)."""
        # a script may wait between calls, but not hold one of maxConnections slots forever
        with anyio.move_on_after(self._idle) as waited:
            try:
                return await connection.receive()
            except ApiError as error:
                connection.fail(error)
                return None
        if waited.cancelled_caught:
            connection.fail(
                ApiError(
                    ApiFault.IDLE_TIMEOUT,
                    {
                        "seconds": self._idle,
                        "problem": "no call since the last answer within the idle timeout",
                    },
                    fatal=True,
                )
            )
        return None

    async def _first_call(self, connection: Connection) -> list[bytes] | None:
        """The first messages, within the handshake timeout (None: closed, timed out, or too large)."""
        with anyio.move_on_after(self._handshake) as waited:
            try:
                return await connection.receive()
            except ApiError as error:
                connection.fail(error)
                return None
        if waited.cancelled_caught:
            connection.fail(
                ApiError(
                    ApiFault.HANDSHAKE_TIMEOUT,
                    {"seconds": self._handshake, "problem": "no call within the handshake timeout"},
                    fatal=True,
                )
            )
        return None

    async def _answer(self, peer: Peer, role: Role, frame: bytes) -> bytes:
        """The reply frame to one call (b"" for a oneway call); never raises for the caller's input."""
        oneway = False
        try:
            call = parse_call(frame)
            oneway = call.oneway
            check_method(call.method, _KNOWN)
            # the caller's role first: a verb it may not use reaches nothing, its parameters included
            self._check_role(peer, role, call)
            # every parameter's type, as the interface description declares it, before any verb runs
            check_parameters(call.method, call.parameters)
            # a verb on a session this process does not own reaches nothing here: its owner answers
            # for it, or (a fleet's start and stop) the desired state is written for the owner
            forwarded = await self._check_owner(peer, call)
            result = forwarded if forwarded is not None else await self._dispatch(peer, call)
        except ApiError as error:
            return b"" if oneway else encode_error(error)
        return b"" if oneway else encode_reply(result)

    async def _dispatch(self, peer: Peer, call: Call) -> dict[str, Any]:
        method, parameters = call.method, call.parameters
        if method.startswith(SERVICE + "."):
            return service_reply(call, [CONTROL])
        if method == Method.STATUS:
            return self.status()
        if method == Method.LIST_SESSIONS:
            return self.list_sessions(parameters)
        if method == Method.SHOW_SESSION:
            return self.show_session(_session_id(parameters))
        verbs: dict[str, Callable[[Peer, Mapping[str, Any]], Awaitable[dict[str, Any]]]] = {
            Method.START_SESSION: self.start_session,
            Method.STOP_SESSION: self.stop_session,
            Method.DRAIN: self.drain,
            Method.USE_TAXONOMY: self.use_taxonomy,
            Method.RELOAD: self.reload_config,
            Method.ISOLATE_CIRCUIT: self.isolate_circuit,
            Method.CLOSE_CIRCUIT: self.close_circuit,
            Method.RESET_CIRCUIT: self.reset_circuit,
        }
        if method in verbs:
            return await verbs[method](peer, parameters)
        attributes = self.attribute_verbs

        def published(
            verb: str, session_id: str | None, target: str | None
        ) -> Callable[[ApiError | None], None]:
            return self._published(verb, peer, session_id=session_id, target=target)

        attribute_verbs: dict[str, Callable[[Publish, Mapping[str, Any]], Awaitable[dict[str, Any]]]] = {
            Method.SET_ATTRIBUTES: attributes.set_attributes,
            Method.LIST_MISMATCHES: attributes.list_mismatches,
            Method.RESOLVE_MISMATCH: attributes.resolve_mismatch,
            Method.ATTRIBUTES_STATUS: attributes.status,
            Method.SEND_MESSAGE: self.message_verbs.send_message,
            Method.SET_AGENT_STATE: self.message_verbs.set_agent_state,
            Method.ADD_SESSION: self.session_verbs.add_sessions,
            Method.REMOVE_SESSION: self.session_verbs.remove_sessions,
        }
        return await attribute_verbs[method](published, parameters)

    def _check_role(self, peer: Peer, role: Role, call: Call) -> None:
        """PermissionDenied (counted, published as CONTROL_COMMAND) when ``role`` does not include the method's."""
        needed = required_role(call.method)
        if role.may(needed):
            return
        self.denied += 1
        error = permission_denied(call.method, needed, role, peer)
        session_id = call.parameters.get("sessionId")
        self._published(
            _VERBS.get(call.method, call.method.rsplit(".", 1)[-1]),
            peer,
            session_id=session_id if isinstance(session_id, str) and 0 < len(session_id) <= 200 else None,
            required=needed.value,
        )(error)
        raise error

    async def _check_owner(self, peer: Peer, call: Call) -> dict[str, Any] | None:
        """NotOwner (published as CONTROL_COMMAND for a verb that changes something) when a session
        the call names is in a shard this process does not own (supervisor/runtime/leases.py); on a
        fleet, a start or stop of such a session is written for its owner instead (its answer)."""
        owners = self.owners
        if owners is None or call.method not in _ON_SESSIONS:
            return None
        fleet = self.fleet
        if fleet is not None and call.method in _EACH_ITS_OWN:
            # answered by the verb: here, or written for the owner (SessionVerbs.remove_sessions,
            # AttributeVerbs.set_attributes)
            return None
        named = call.parameters.get("sessionIds") if call.method == Method.REMOVE_SESSION else None
        ids = named if isinstance(named, list) else [call.parameters.get("sessionId")]
        for session_id in ids:
            if not isinstance(session_id, str) or not 0 < len(session_id) <= 200:
                continue  # the verb refuses it as it always did
            owner = owners.owner_of(session_id)
            if owner.here:
                continue
            if fleet is not None and call.method in _ANY_MEMBER:
                running = call.method == Method.START_SESSION
                return await self._desire_elsewhere(peer, fleet, session_id, running)
            error = await self._not_owner(session_id, owner)
            verb = _VERBS.get(call.method)
            if verb is not None:
                self._published(verb, peer, session_id=session_id)(error)
            raise error
        return None

    async def _not_owner(self, session_id: str, owner: Owner) -> ApiError:
        """``NotOwner {owner, host, shard, epoch}``: a fleet's lease table says who (one short query)."""
        if self.fleet is not None:
            try:
                found = await self.fleet.locate(session_id)
            except StoreError:
                pass  # the database is away: who owns it is not known here now (owner null)
            else:
                owner = Owner(found.shard, False, found.owner, found.host, found.epoch)
        return not_owner(session_id, owner)

    async def _desire_elsewhere(
        self, peer: Peer, fleet: FleetDesk, session_id: str, running: bool
    ) -> dict[str, Any]:
        """``ctl start``/``ctl stop`` of a session another member owns: its desired state written and
        the owner told in one transaction, answered once it committed (supervisor/fleet/desired.py)."""
        verb = "start" if running else "stop"
        publish = self._published(verb, peer, session_id=session_id)
        spec = self.sessions.spec(session_id)
        # the row's own platform when this configuration does not declare it (added over a control socket)
        platform = None
        if spec is not None:  # the session's scope: its platform, a named tenant's NAME/<platform>
            platform = spec.platform.value if spec.tenant is None else f"{spec.tenant}/{spec.platform.value}"
        state = DesiredState.RUNNING if running else DesiredState.STOPPED
        try:
            forwarded = await fleet.desire(session_id, platform, state, None if running else "ctl stop")
        except StoreError as exc:
            error = ApiError(
                ApiFault.STORE_UNAVAILABLE,
                {"sessionId": session_id, "problem": f"{exc}; nothing was recorded"},
            )
            publish(error)
            raise error from None
        if forwarded is None:
            error = _no_such_session(session_id)
            publish(error)
            raise error
        publish(None)
        answer: dict[str, Any] = {"sessionId": session_id, "state": REQUESTED}
        if running:
            previous = forwarded.previous
            answer["reauthenticated"] = previous is not None and previous.state is not DesiredState.RUNNING
        answer["forwarded"] = forwarded.as_wire()
        return answer

    def _published(
        self,
        verb: str,
        peer: Peer,
        *,
        session_id: str | None = None,
        target: str | None = None,
        required: str | None = None,
    ) -> Callable[[ApiError | None], None]:
        def publish(error: ApiError | None) -> None:
            self._bus.publish(
                ControlCommand(
                    verb,
                    peer,
                    error is None,
                    iso_utc(self._clock.time()),
                    session_id=session_id,
                    target=target,
                    error=None if error is None else error.name,
                    required=required,
                )
            )

        return publish

    # ------------------------------------------------------------------ read-only verbs
    def status(self) -> dict[str, Any]:
        board = self.board
        total, by_state = board.counts()
        return {
            "bootId": board.boot_id,
            "uptimeSeconds": round(self._clock.monotonic() - board.started_monotonic, 3),
            "startedAt": board.started_at,
            "version": VERSION,
            "taxonomy": self._taxonomy.taxonomy.version,
            "draining": self._stop is not None and self._stop.is_set(),
            "seq": board.seq,
            "sessions": {"total": total, "byState": dict(sorted(by_state.items()))},
            "circuits": board.circuits(),
            "sockets": self._sockets(),
            **({} if self.fleet_view is None else {"fleet": fleet_wire(self.fleet_view())}),
        }

    def list_sessions(self, parameters: Mapping[str, Any]) -> dict[str, Any]:
        selection = {key: parameters.get(key) for key in ("platforms", "states", "sessions")}
        subscription = parse_subscription({"filter": selection}, known_states=_STATES)
        board = self.board
        return {"sessions": [row.as_wire(board.circuit_of(row)) for row in board.matching(subscription)]}

    def show_session(self, session_id: str) -> dict[str, Any]:
        row = self.board.row(session_id)
        if row is None:
            raise _no_such_session(session_id)
        return {"session": row.as_wire(self.board.circuit_of(row))}

    # ------------------------------------------------------------------ verbs that change something
    async def start_session(self, peer: Peer, parameters: Mapping[str, Any]) -> dict[str, Any]:
        session_id = _session_id(parameters)
        publish = self._published("start", peer, session_id=session_id)
        try:
            spec = self.sessions.spec(session_id)
            if spec is None:
                raise _no_such_session(session_id)
            previous = self.sessions.runners.get(session_id)
            if previous is not None and not previous.core.terminated:
                state = previous.state.value
                raise ApiError(
                    ApiFault.SESSION_RUNNING,
                    {
                        "sessionId": session_id,
                        "state": state,
                        "problem": f"session '{session_id}' is {state}",
                    },
                )
            try:
                runner = self.operations.start(spec)
            except ConfigError as exc:
                raise ApiError(ApiFault.NOT_ACCEPTING, {"problem": str(exc)}) from None
        except ApiError as error:
            publish(error)
            raise
        publish(None)
        # after a restart, a session stopped or ended by a fail-fast has no runner yet: still a re-authentication
        down = self.desired is not None and self.desired.was_down(session_id)
        return {
            "sessionId": session_id,
            "state": runner.state.value,
            "reauthenticated": previous is not None or down,
        }

    async def stop_session(self, peer: Peer, parameters: Mapping[str, Any]) -> dict[str, Any]:
        session_id = _session_id(parameters)
        publish = self._published("stop", peer, session_id=session_id)
        runner = self.sessions.runners.get(session_id)
        if runner is None:
            error = _no_such_session(session_id)
            publish(error)
            raise error
        publish(None)
        # published first: subscribers see who asked before the transitions it causes
        await self.operations.stop(session_id, CloseCode.NORMAL_CLOSURE)
        if self.desired is not None:
            # it stays stopped across a restart, until `ctl start`
            await self.desired.desire(session_id, runner.context.scope, False, "ctl stop")
        return {"sessionId": session_id, "state": runner.state.value}

    async def drain(self, peer: Peer, parameters: Mapping[str, Any]) -> dict[str, Any]:
        publish = self._published("drain", peer)
        stop = self._stop
        if stop is None:
            error = _unsupported(Method.DRAIN, "this daemon was started without a stop request")
            publish(error)
            raise error
        end_sessions = parameters.get("endSessions", False)
        if end_sessions is True:
            # before the drain begins: it reads this when it decides what to do with each session
            self.operations.end_sessions_at_drain()
        publish(None)
        stop.set()
        return {"draining": True, "handover": self.operations.hands_over}

    async def use_taxonomy(self, peer: Peer, parameters: Mapping[str, Any]) -> dict[str, Any]:
        version = parameters.get("version")
        if not isinstance(version, str) or not 0 < len(version) <= 4096 or "\0" in version:
            raise ApiError(
                ApiFault.INVALID_PARAMETER,
                {
                    "parameter": "version",
                    "problem": "version: a shipped version (v1, v2) or an absolute path",
                },
            )
        publish = self._published("taxonomy.use", peer, target=version)
        try:
            taxonomy = await _load(version)
        except ApiError as error:
            publish(error)
            raise
        previous = self._taxonomy.taxonomy.version
        # one assignment: every classification from now on uses the new version, none sees half of it
        self._taxonomy.use_taxonomy(taxonomy)
        publish(None)
        self._bus.publish(
            TaxonomySwitched(previous, taxonomy.version, taxonomy.origin, peer, iso_utc(self._clock.time()))
        )
        return {"previous": previous, "version": taxonomy.version, "origin": taxonomy.origin}

    async def reload_config(self, peer: Peer, parameters: Mapping[str, Any]) -> dict[str, Any]:
        publish = self._published("reload", peer)
        if self.reload is None:
            error = _unsupported(Method.RELOAD, "this daemon has no reload function yet")
            publish(error)
            raise error
        try:
            result = await self.reload()
        except SupervisorError as exc:
            error = ApiError(ApiFault.RELOAD_FAILED, {"problem": str(exc)})
            publish(error)
            raise error from None
        publish(None)
        return {"result": dict(result)}

    # ------------------------------------------------------------------ circuits
    def _endpoint(self, method: str, verb: str, peer: Peer, parameters: Mapping[str, Any]) -> EndpointId:
        """The endpoint a circuit verb names; refused (and published) when the daemon has none such."""
        name = parameters.get("endpoint")
        if not isinstance(name, str) or not 0 < len(name) <= 200:
            raise ApiError(
                ApiFault.INVALID_PARAMETER,
                {"parameter": "endpoint", "problem": "endpoint: expected a string of 1 to 200 characters"},
            )
        publish = self._published(verb, peer, target=name)
        circuits = self.circuits
        if circuits is None:
            error = _unsupported(method, "this daemon offers no manual circuit control")
            publish(error)
            raise error
        endpoint = circuits.find(name)
        if endpoint is None:
            known = [str(e) for e in circuits.endpoints()]
            error = ApiError(
                ApiFault.NO_SUCH_ENDPOINT,
                {
                    "endpoint": name,
                    "endpoints": known,
                    "problem": f"no endpoint '{name}' (this daemon has: {', '.join(known) or 'none'})",
                },
            )
            publish(error)
            raise error
        return endpoint

    async def isolate_circuit(self, peer: Peer, parameters: Mapping[str, Any]) -> dict[str, Any]:
        for_s = parameters.get("forSeconds")
        if for_s is not None and not (isinstance(for_s, int | float) and 0 < for_s <= MAX_ISOLATION_S):
            raise ApiError(
                ApiFault.INVALID_PARAMETER,
                {
                    "parameter": "forSeconds",
                    "problem": f"forSeconds: expected a number of seconds within (0, {MAX_ISOLATION_S:.0f}]",
                },
            )
        endpoint = self._endpoint(Method.ISOLATE_CIRCUIT, "circuit.isolate", peer, parameters)
        assert self.circuits is not None  # (_endpoint refused a daemon without)
        self._published("circuit.isolate", peer, target=str(endpoint))(None)
        move = self.circuits.isolate(endpoint, None if for_s is None else float(for_s))
        return _move_wire(move)

    async def close_circuit(self, peer: Peer, parameters: Mapping[str, Any]) -> dict[str, Any]:
        endpoint = self._endpoint(Method.CLOSE_CIRCUIT, "circuit.close", peer, parameters)
        assert self.circuits is not None
        publish = self._published("circuit.close", peer, target=str(endpoint))
        move = self.circuits.close(endpoint)
        if not move.changed and move.previous is not CircuitState.CLOSED:
            state = move.previous.value
            error = ApiError(
                ApiFault.NOT_ISOLATED,
                {
                    "endpoint": str(endpoint),
                    "state": state,
                    "problem": f"circuit of '{endpoint}' is {state}, not isolated: reset it to close it",
                },
            )
            publish(error)
            raise error
        publish(None)
        return _move_wire(move)

    async def reset_circuit(self, peer: Peer, parameters: Mapping[str, Any]) -> dict[str, Any]:
        endpoint = self._endpoint(Method.RESET_CIRCUIT, "circuit.reset", peer, parameters)
        assert self.circuits is not None
        self._published("circuit.reset", peer, target=str(endpoint))(None)
        return _move_wire(self.circuits.reset(endpoint))


def _move_wire(move: ManualMove) -> dict[str, Any]:
    out: dict[str, Any] = {
        "endpoint": str(move.endpoint),
        "circuitId": move.circuit_id,
        "previous": move.previous.value,
        "state": move.state.value,
        "changed": move.changed,
    }
    if move.for_s is not None:
        out["forSeconds"] = move.for_s
    return out


def _unsupported(method: str, problem: str) -> ApiError:
    return ApiError(ApiFault.UNSUPPORTED, {"method": method, "problem": problem})


async def _load(version: str) -> Taxonomy:
    """Load and validate a taxonomy; every failure is an ``InvalidTaxonomy`` naming the problem."""

    def invalid(problem: str) -> ApiError:
        return ApiError(ApiFault.INVALID_TAXONOMY, {"version": version, "problem": problem})

    is_path = "/" in version or version.endswith(".toml")
    if is_path:
        path = Path(version)
        if not path.is_absolute():
            raise invalid(f"{version}: give an absolute path (the daemon's working directory is not yours)")
        try:
            info = os.stat(path)
        except OSError as exc:
            raise invalid(f"{version}: {exc.strerror}") from None
        # never /dev/zero or a FIFO: a control call must not hang the daemon on a read
        if not stat.S_ISREG(info.st_mode):
            raise invalid(f"{version}: not a regular file")
        if info.st_size > _MAX_TAXONOMY_BYTES:
            raise invalid(f"{version}: larger than {_MAX_TAXONOMY_BYTES} bytes")
    try:
        # off the event loop: sessions keep being served while the file is read and compiled
        return await to_thread.run_sync(load_taxonomy, version)
    except TaxonomyError as exc:
        raise invalid(str(exc)) from None
