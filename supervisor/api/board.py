"""The state board: every session's row, derived from the bus, for snapshots and deltas.

Subscribed to the bus before any session starts (the API is built before ``run_daemon``), the
board follows what the runtime publishes and keeps, per session: state and since when,
platform and kind, agent / conversation / platform-session ids, reconnection attempts, the
last classified error (code, class) and the termination. The circuit of a session's endpoint
is read live from the registry when a row is rendered. A session the board has not heard from
yet (its runner made, its first attempt not yet reported) is seeded from its runner.

Snapshots and deltas are consistent by construction: publishing is synchronous, so the board
has applied exactly the events up to :attr:`seq` whenever anything reads it, and each change
is handed to ``on_change`` (the fan-out) with the seq of the event that caused it.

It reads the session table and the circuits it is given (supervisor/runtime/sessions.py), never
the supervisor.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from supervisor.api.events import ControlCommand
from supervisor.api.messages import Delta, Subscription
from supervisor.clock import Clock, iso_utc
from supervisor.events import (
    ErrorClassified,
    Published,
    RetryAttempt,
    RetryKind,
    SessionTerminated,
    SessionTransition,
)
from supervisor.runtime.sessions import CircuitReader, Origin, SessionReader
from supervisor.vocabulary import CircuitState, EndpointId, SessionState

__all__ = ["Row", "StateBoard"]

# what a delta says when the session came back through the control socket's start verb
STARTED = "STARTED"
# the state of a row heard of on the bus before (or without) a runner: no session state yet
UNKNOWN = "unknown"


def _wire(state: SessionState | None) -> str:
    return UNKNOWN if state is None else state.value


@dataclass(slots=True)
class Row:
    """One session as subscribers see it."""

    session_id: str
    platform: str
    kind: str
    endpoint: EndpointId | None
    # None: heard of before (or without) a runner (``"unknown"`` on the wire)
    state: SessionState | None
    since: str
    agent_id: str | None = None
    conversation_id: str | None = None
    platform_session_id: str | None = None
    attempts: int = 0
    last_error: dict[str, str] | None = None
    termination: dict[str, Any] | None = None
    # "config" (the file's) or "api" (added over the control socket)
    origin: str = "config"
    # the named tenant ([tenants.NAME]); None: the default tenant's, and the row says nothing
    tenant: str | None = None

    @property
    def wire_state(self) -> str:
        """The state as the wire names it (``"unknown"`` for a row without a runner yet)."""
        return _wire(self.state)

    def columns(self, circuit: dict[str, str] | None) -> dict[str, Any]:
        """The columns a delta carries besides its state change (``tenant``: a named tenant's session's)."""
        out: dict[str, Any] = {
            "platform": self.platform,
            "attempts": self.attempts,
            "lastError": self.last_error,
            "circuit": circuit,
        }
        if self.tenant is not None:
            out["tenant"] = self.tenant
        return out

    def as_wire(self, circuit: dict[str, str] | None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "sessionId": self.session_id,
            "state": self.wire_state,
            "since": self.since,
            "platform": self.platform,
            "kind": self.kind,
            "agentId": self.agent_id,
            "conversationId": self.conversation_id,
            "attempts": self.attempts,
            "lastError": self.last_error,
            "circuit": circuit,
            "origin": self.origin,
        }
        if self.platform_session_id is not None:
            out["platformSessionId"] = self.platform_session_id
        if self.termination is not None:
            out["termination"] = self.termination
        if self.tenant is not None:
            out["tenant"] = self.tenant
        return out


Change = Callable[[Published, Delta | None], None]


def _ignore(published: Published, delta: Delta | None) -> None:
    return None


class StateBoard:
    """A bus sink: applies each event to the rows, then hands the change to ``on_change``."""

    def __init__(
        self, sessions: SessionReader, circuits: CircuitReader, clock: Clock, *, boot_id: str
    ) -> None:
        self._sessions = sessions
        self._circuits = circuits
        self._clock = clock
        self._rows: dict[str, Row] = {}
        # the rows by wire state, kept as rows come and move: ``Status`` counts them without a walk
        # over every row (a monitor polling it during a take-over of 7,000 sessions paid ~5 ms a call)
        self._by_state: Counter[str] = Counter()
        self._endpoints: dict[str, EndpointId | None] = {}
        # a session seeded from its runner has been in its state at least since the board started
        self.started_at = iso_utc(clock.time())
        self.started_monotonic = clock.monotonic()
        self.seq = 0
        self.boot_id = boot_id
        self.on_change: Change = _ignore

    # ------------------------------------------------------------------ following the bus
    def __call__(self, published: Published) -> None:
        self.seq = published.seq
        delta = self._apply(published)
        self.on_change(published, delta)

    def _apply(self, published: Published) -> Delta | None:
        event = published.event
        correlation = published.correlation
        if isinstance(event, SessionTransition):
            row = self._rows.get(event.session_id)
            if row is None:
                # first heard of now: its runner has already moved, so the row starts where the move began
                seeded = self._seed(event.session_id)
                seeded.state = event.source
                row = self._put(event.session_id, seeded)
            self._learn(row, published)
            previous = row.state
            self._move(row, event.target)
            row.since = event.timestamp
            if event.target is SessionState.ACTIVE:
                row.attempts = 0
            return self._delta(published.seq, row, _wire(previous), event.timestamp, event.reason)
        if isinstance(event, RetryAttempt) and event.kind is RetryKind.RECONNECT:
            row = self._row(event.session_id)
            row.attempts = event.attempt
        elif isinstance(event, ErrorClassified):
            session_id = event.event.context.get("sessionId")
            # a failure classified for no session (a token endpoint's own context, "oauth", when a
            # reload tries a rotated credential) makes no row: it would show as a session
            if isinstance(session_id, str) and self._known(session_id):
                row = self._row(session_id)
                sdk = event.event
                row.last_error = {"code": sdk.code, "class": sdk.taxonomy_class.value, "at": sdk.timestamp}
        elif isinstance(event, SessionTerminated):
            row = self._row(event.session_id)
            row.termination = {
                "reason": event.reason.value,
                "trigger": None if event.trigger is None else event.trigger.value,
                "code": event.code,
                "action": event.action,
                "at": event.timestamp,
            }
        elif isinstance(event, ControlCommand) and event.verb == "start" and event.ok and event.session_id:
            # a new runner: a new machine in its first state, nothing carried over
            old = self._rows.get(event.session_id)
            fresh = self._seed(event.session_id)
            fresh.since = event.timestamp
            self._put(event.session_id, fresh)
            return self._delta(
                published.seq, fresh, None if old is None else old.wire_state, event.timestamp, STARTED
            )
        elif correlation is not None and correlation.session_id in self._rows:
            self._learn(self._rows[correlation.session_id], published)
        return None

    def _learn(self, row: Row, published: Published) -> None:
        correlation = published.correlation
        if correlation is None:
            return
        row.agent_id = correlation.agent_id or row.agent_id
        row.conversation_id = correlation.conversation_id or row.conversation_id
        row.platform_session_id = correlation.platform_session_id or row.platform_session_id

    def _delta(self, seq: int, row: Row, previous: str | None, at: str, reason: str) -> Delta:
        return Delta(
            seq, row.session_id, row.wire_state, previous, at, reason, row.columns(self.circuit_of(row))
        )

    # ------------------------------------------------------------------ rows
    def _known(self, session_id: str) -> bool:
        return (
            session_id in self._rows
            or session_id in self._sessions.runners
            or self._sessions.spec(session_id) is not None
        )

    def _row(self, session_id: str) -> Row:
        row = self._rows.get(session_id)
        if row is None:
            row = self._put(session_id, self._seed(session_id))
        return row

    def _put(self, session_id: str, row: Row) -> Row:
        """``row`` is ``session_id``'s from now on (a new one, or one replacing it), counted by state."""
        old = self._rows.get(session_id)
        if old is not None:
            self._by_state[old.wire_state] -= 1
        self._rows[session_id] = row
        self._by_state[row.wire_state] += 1
        return row

    def _move(self, row: Row, state: SessionState) -> None:
        """``row`` is in ``state`` now, counted there."""
        self._by_state[row.wire_state] -= 1
        row.state = state
        self._by_state[row.wire_state] += 1

    def _seed(self, session_id: str) -> Row:
        """A row from the session's runner as it is now (or a bare one for a session without a runner)."""
        runner = self._sessions.runners.get(session_id)
        if runner is None:
            # heard of on the bus before (or without) a runner: what the configuration says of it
            spec = self._sessions.spec(session_id)
            platform, kind = ("", "") if spec is None else (spec.platform.value, spec.kind.value)
            agent = None if spec is None else spec.agent_id
            return Row(
                session_id,
                platform,
                kind,
                self.endpoint_of(session_id),
                None,
                self.started_at,
                agent_id=agent,
                origin=self._origin(session_id),
                tenant=None if spec is None else spec.tenant,
            )
        context = runner.context
        row = Row(
            session_id,
            context.platform.value,
            context.channel.value,
            self.endpoint_of(session_id),
            runner.state,
            self.started_at,
            agent_id=context.agent_id,
            conversation_id=context.conversation_id,
            platform_session_id=context.platform_session_id,
            attempts=runner.core.attempts,
            origin=self._origin(session_id),
            tenant=context.tenant,
        )
        if runner.termination is not None:
            t = runner.termination
            row.termination = {
                "reason": t.reason.value,
                "trigger": None if t.trigger is None else t.trigger.value,
                "code": t.code,
                "action": t.action,
                "at": t.timestamp,
            }
        return row

    def _origin(self, session_id: str) -> str:
        return (self._sessions.origin_of(session_id) or Origin.CONFIG).value

    def rows(self) -> list[Row]:
        """Every supervised session (the runners' order), seeded where the bus has not spoken yet."""
        for session_id in self._sessions.runners:
            self._row(session_id)
        return list(self._rows.values())

    def counts(self) -> tuple[int, dict[str, int]]:
        """How many rows :meth:`rows` would give, and how many of them are in each wire state
        (states with none left out), without building them: whether a runner the bus has not spoken
        of yet needs a row is one set comparison, not a call per session."""
        runners = self._sessions.runners
        if not runners.keys() <= self._rows.keys():
            missing = runners.keys() - self._rows.keys()
            for session_id in runners:  # seeded in the runners' order, as rows() seeds them
                if session_id in missing:
                    self._row(session_id)
        return len(self._rows), {state: n for state, n in self._by_state.items() if n}

    def row(self, session_id: str) -> Row | None:
        if session_id not in self._rows and session_id not in self._sessions.runners:
            return None
        return self._row(session_id)

    def platform_of(self, session_id: str) -> str:
        row = self._rows.get(session_id)
        if row is not None:
            return row.platform
        runner = self._sessions.runners.get(session_id)
        return "" if runner is None else runner.context.platform.value

    # ------------------------------------------------------------------ circuits
    def endpoint_of(self, session_id: str) -> EndpointId | None:
        """The circuit endpoint a session connects through (the session table says), cached."""
        if session_id not in self._endpoints:
            self._endpoints[session_id] = self._sessions.endpoint_of(session_id)
        return self._endpoints[session_id]

    def endpoint_of_circuit(self, circuit_id: str) -> EndpointId | None:
        """The endpoint whose circuit ``circuit_id`` is (a circuit event names its circuit); None for
        a circuit the daemon has not made."""
        return next(
            (
                endpoint
                for endpoint, circuit in self._circuits.all().items()
                if circuit.circuit_id == circuit_id
            ),
            None,
        )

    def circuit_of(self, row: Row) -> dict[str, str] | None:
        if row.endpoint is None:
            return None
        circuit = self._circuits.all().get(row.endpoint)
        # a circuit is made on first use: none yet means nothing has been refused (closed)
        state = CircuitState.CLOSED if circuit is None else circuit.state
        return {"endpoint": str(row.endpoint), "state": state.value}

    def circuits(self) -> list[dict[str, str]]:
        return [
            {"endpoint": str(endpoint), "circuitId": circuit.circuit_id, "state": circuit.state.value}
            # a named tenant's endpoint says whose it is
            | ({"tenant": endpoint.tenant} if endpoint.tenant else {})
            for endpoint, circuit in sorted(self._circuits.all().items())
        ]

    # ------------------------------------------------------------------ views
    def matching(self, subscription: Subscription) -> Iterable[Row]:
        for row in self.rows():
            if subscription.sessions is not None and row.session_id not in subscription.sessions:
                continue
            if subscription.platforms is not None and row.platform not in subscription.platforms:
                continue
            if subscription.states is not None and row.state not in subscription.states:
                continue
            yield row

    def snapshot(self, subscription: Subscription) -> dict[str, Any]:
        """``{type, bootId, seq, sessions}`` of the matching sessions as of bus ``seq``."""
        return {
            "type": "snapshot",
            "bootId": self.boot_id,
            "seq": self.seq,
            "sessions": [row.as_wire(self.circuit_of(row)) for row in self.matching(subscription)],
        }
