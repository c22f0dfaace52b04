"""The session table, and the typed interfaces the daemon's parts are given instead of the supervisor.

The composition root (supervisor/runtime/assembly.py) builds one :class:`SessionTable` first and hands
it to whoever needs it at construction: the :class:`~supervisor.runtime.supervisor.Supervisor` writes
it (a runner started, replaced, removed; the configuration a reload adopted), everyone else reads it
through :class:`SessionReader`. That breaks the old knot where the store needed the supervisor (and got
it late, through a back-reference set once the supervisor served) and the supervisor needed the store.

The other interfaces are what one part needs of another, named by that need (docs/runtime.md, "One attempt path"):

* :class:`SessionBook`: what the supervisor asks of the durable store (which sessions run at start,
  what they resume; the write-ahead and the end of each runner);
* :class:`SessionControl`: the control operations (start a configured session, stop one);
* :class:`SessionMessaging`: what is done on a live session's behalf (a message, the agent's state);
* :class:`TaxonomySwitch`: the active taxonomy and switching it (``ctl taxonomy use``);
* :class:`DesiredSessions`: what must stay down across a restart (``ctl stop`` / ``ctl start``);
* :class:`CircuitReader`: every endpoint's circuit, read (status lines, rows, summaries);
* :class:`CircuitControl`: an operator's hand on a circuit (``ctl circuit isolate|close|reset``);
* :class:`SessionOwners`: who answers for a session (the one lookup the socket API's verbs go
  through; supervisor/runtime/leases.py).

The socket API, the systemd glue and the demo import these, never the supervisor, its wiring or the
store's class (``tests/unit/test_import_rules.py`` holds them to it).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Protocol

import anyio
from anyio.abc import TaskStatus

from supervisor.config import Config, SessionSpec
from supervisor.runtime.session_runner import SessionRunner
from supervisor.store.model import DesiredSession
from supervisor.taxonomy import Taxonomy
from supervisor.vocabulary import CircuitState, CloseCode, EndpointId, Scope, SessionState

__all__ = [
    "CircuitControl",
    "CircuitReader",
    "CircuitView",
    "DesiredSessions",
    "ManualMove",
    "Origin",
    "Owner",
    "Plan",
    "SessionBook",
    "SessionControl",
    "SessionMessaging",
    "SessionOwners",
    "SessionReader",
    "SessionTable",
    "TaxonomySwitch",
]


class Origin(enum.StrEnum):
    """Where a session's entry comes from (``origin`` in Status and the snapshot)."""

    CONFIG = "config"  # a [[sessions]] entry of the configuration file
    API = "api"  # added over the control socket (AddSession), kept in the store


@dataclass(frozen=True, slots=True)
class Plan:
    """Whether a configured session runs at start, and what it resumes (the store's answer)."""

    start: bool
    resume: Mapping[str, str] | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class Owner:
    """Who answers for a session: its shard, whether this process owns it, and the owner's fleet
    identity when known (this process's when ``here``), with the host it is reached on and the
    shard's owner epoch when a fleet's lease table said them (supervisor/fleet/owners.py)."""

    shard: int
    here: bool
    identity: str | None = None
    host: str | None = None
    epoch: int | None = None


class SessionOwners(Protocol):
    """The one lookup (session → owner) every verb on a session goes through: on one host always
    "here"; a fleet changes the lookup, not the verbs (supervisor/runtime/leases.py)."""

    def owner_of(self, session_id: str) -> Owner:
        """Who answers for ``session_id`` (any id: one never configured is in a shard too)."""

    def require(self, session_id: str) -> None:
        """Raise :class:`~supervisor.errors.NotOwner` unless this process answers for ``session_id``."""


class SessionReader(Protocol):
    """The supervised sessions, read: their runners by id and the configuration they come from."""

    @property
    def config(self) -> Config:
        """The configuration in force (the last one a reload adopted)."""

    @property
    def runners(self) -> Mapping[str, SessionRunner]:
        """Every session with a runner, in the order they were started (read-only)."""

    def spec(self, session_id: str) -> SessionSpec | None:
        """The entry of a session (the file's, or one added over the control socket), None when neither names it."""

    def origin_of(self, session_id: str) -> Origin | None:
        """Where a session's entry comes from (the file or the control socket), None when neither names it."""

    @property
    def added(self) -> Mapping[str, SessionSpec]:
        """The sessions added over the control socket, in the order they were added (read-only)."""

    def endpoint_of(self, session_id: str) -> EndpointId | None:
        """The circuit endpoint a configured session connects through (None: not configured)."""

    def states(self) -> dict[SessionState, int]:
        """How many sessions are in each state."""


class SessionControl(Protocol):
    """The control operations on sessions (the control socket's start and stop)."""

    def start(self, spec: SessionSpec, resume: Mapping[str, str] | None = None) -> SessionRunner:
        """A new runner for a configured session (a full authentication cycle); raises ConfigError when
        the daemon takes no session (draining) or the session is still supervised."""

    async def stop(self, session_id: str, code: CloseCode = CloseCode.NORMAL_CLOSURE) -> None:
        """End one session on purpose; unknown ids raise SessionError."""

    async def add_sessions(self, specs: Sequence[SessionSpec]) -> list[SessionRunner]:
        """Sessions added over the control socket: kept in the store, then started (raises
        StoreError when they cannot be kept, ConfigError when the daemon takes no session)."""

    async def remove_session(self, session_id: str) -> None:
        """A session added over the control socket: closed as ``stop`` closes it, and forgotten."""

    def end_sessions_at_drain(self) -> None:
        """The coming drain ends every session (``ctl drain --end-sessions``) instead of handing
        them over to the next start."""

    @property
    def hands_over(self) -> bool:
        """What the drain will do to the sessions: True leaves them alive for the next start."""


class SessionMessaging(Protocol):
    """What the control socket does on a live session's behalf: send a message, set the agent's state."""

    async def send_message(
        self,
        session_id: str,
        text: str,
        *,
        metadata: Mapping[str, str] | None = None,
        client_id: str | None = None,
    ) -> Mapping[str, Any]:
        """Send a guest message (Web Messaging); the platform's record of it. Raises SessionError
        (unknown, not active, no messages on this kind), OperationError (refused, or unconfirmed)."""

    async def set_agent_state(self, session_id: str, state: str, reason: str | None = None) -> None:
        """Ask for the agent's state (CXone). Raises SessionError or OperationError."""


class TaxonomySwitch(Protocol):
    """The taxonomy every classification uses, and switching it at run time (seed section 1)."""

    @property
    def taxonomy(self) -> Taxonomy: ...

    def use_taxonomy(self, taxonomy: Taxonomy) -> None: ...


class DesiredSessions(Protocol):
    """What should be alive after a restart (the durable store's desired sessions)."""

    def was_down(self, session_id: str) -> bool:
        """The store says the session was stopped or terminated (a start re-authenticates it)."""

    async def desire(
        self, session_id: str, platform: Scope, running: bool, reason: str | None = None
    ) -> None:
        """``ctl start`` / ``ctl stop``: kept across restarts."""


class CircuitView(Protocol):
    """What a reader sees of one circuit: its id and state. Only an endpoint drives a circuit
    (machines/endpoint.py); the edges read, never admit or record (tests/unit/test_import_rules.py)."""

    @property
    def circuit_id(self) -> str: ...

    @property
    def state(self) -> CircuitState: ...


class CircuitReader(Protocol):
    """Every endpoint's circuit breaker made so far (a circuit is made on first use)."""

    def all(self) -> Mapping[EndpointId, CircuitView]: ...


@dataclass(frozen=True, slots=True)
class ManualMove:
    """What one ``ctl circuit`` verb did to an endpoint's circuit: its state before and after
    (``changed`` False: nothing to do, closing a circuit that is closed), and ``for_s`` of an
    isolation that ends by itself."""

    endpoint: EndpointId
    circuit_id: str
    previous: CircuitState
    state: CircuitState
    changed: bool
    for_s: float | None = None


class CircuitControl(Protocol):
    """Manual control of the endpoints' circuits (supervisor/runtime/circuits.py; the decisions are
    the circuit machine's). An isolation lives in memory: a restart closes every circuit."""

    def find(self, name: str) -> EndpointId | None:
        """The endpoint named ``name`` (``genesys:api``); None when the daemon has no such endpoint."""

    def endpoints(self) -> list[EndpointId]:
        """The endpoints an operator may name."""

    def isolate(self, endpoint: EndpointId, for_s: float | None = None) -> ManualMove:
        """Admit nothing to ``endpoint`` until closed, reset or ``for_s`` seconds from now."""

    def close(self, endpoint: EndpointId) -> ManualMove:
        """End its isolation; a circuit not isolated is left as it is (``changed`` False: the caller
        refuses to close an open or half-open one, which is reset, not closed)."""

    def reset(self, endpoint: EndpointId) -> ManualMove:
        """Closed with its counters cleared, from any state."""


class SessionBook(Protocol):
    """What survives a restart (supervisor/runtime/durable.py): which sessions run, what they resume.

    It works by shard (supervisor/store/shards.py): :meth:`acquire` loads the shards this process now
    owns, :meth:`planned` ends their orphans, :meth:`release` forgets the shards it lost.
    """

    @property
    def epoch(self) -> int:
        """The owner epoch the store took when it opened (0 without a store): SoloLeases' epoch."""

    async def acquire(self, shards: Collection[int]) -> frozenset[int]:
        """Load the desired sessions and the session ledger of ``shards`` (now owned), and end the
        sessions of those shards a stop left longer ago than ``handover.maxAgeSeconds``; returns
        the shards whose sessions may start (a fleet member's shard whose rows could not be read
        before its lease ended is not run)."""

    def release(self, shards: Collection[int]) -> None:
        """``shards`` are no longer owned: forget what was loaded of them (no store write)."""

    def plan(self, spec: SessionSpec) -> Plan:
        """Whether a configured session runs now, and what its transport resumes."""

    def planned(self, shards: Collection[int]) -> None:
        """Every session of ``shards`` that runs has been handed over: what is left open on a server
        of those shards (and only those) is orphaned, and ended."""

    def added_sessions(self, config: Config) -> list[SessionSpec]:
        """The sessions added over the control socket that the store kept, valid on ``config``, in
        the order they were added (an id the file now declares is the file's)."""

    async def keep_added(self, specs: Sequence[SessionSpec]) -> None:
        """Keep sessions added over the control socket (raises StoreError when they cannot be kept)."""

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """The book's own work (attribute updates, ending orphans); started at once."""

    async def opening(self, runner: SessionRunner, resumed: bool) -> None:
        """Before a runner's first connection attempt (write-ahead)."""

    async def ended(self, runner: SessionRunner, *, draining: bool) -> None:
        """A runner's task ended (its close sent)."""

    async def forget(self, session_id: str) -> None:
        """The session left the configuration."""

    def follow_attributes(self, session_id: str, tenant: str, conversation_id: str) -> None:
        """An attribute update of ``session_id`` another fleet member accepted into the outbox: send it."""

    async def reread_shards(self, shards: Collection[int]) -> dict[str, DesiredSession]:
        """The desired rows of ``shards`` read again from the store, kept (by session id)."""

    async def reread(self, session_id: str) -> DesiredSession | None:
        """The session's desired row read again from the store (another fleet member wrote it), kept
        as what the book knows of it; None: it has none. Raises StoreError when it cannot be read."""

    def hands_over(self) -> bool:
        """A drain leaves the sessions alive for the next start (a store that can write, and the
        configuration's ``handover.onStop`` is ``handover``); False: it ends them."""

    def ends_at_stop(self) -> bool:
        """A drain ends the sessions on the platform (a store, and ``handover.onStop`` is ``end``)."""

    def draining(self) -> None:
        """The drain began."""


class SessionTable:
    """The runners by session id and the configuration in force; a :class:`SessionReader`.

    Only the supervisor writes it (:meth:`put`, :meth:`discard`, :meth:`configure`). ``endpoint_for``
    says which circuit endpoint a configured session connects through (the wiring decides it).
    """

    def __init__(self, config: Config, *, endpoint_for: Callable[[SessionSpec], EndpointId]) -> None:
        self._runners: dict[str, SessionRunner] = {}
        self._view: Mapping[str, SessionRunner] = MappingProxyType(self._runners)
        self._endpoint_for = endpoint_for
        self._config = config
        self._specs = _specs(config)
        # sessions added over the control socket: never in the file, kept in the store
        self._added: dict[str, SessionSpec] = {}
        self._added_view: Mapping[str, SessionSpec] = MappingProxyType(self._added)

    # ------------------------------------------------------------------ read
    @property
    def config(self) -> Config:
        return self._config

    @property
    def runners(self) -> Mapping[str, SessionRunner]:
        return self._view

    def spec(self, session_id: str) -> SessionSpec | None:
        spec = self._specs.get(session_id)
        return spec if spec is not None else self._added.get(session_id)

    def origin_of(self, session_id: str) -> Origin | None:
        if session_id in self._specs:
            return Origin.CONFIG
        return Origin.API if session_id in self._added else None

    @property
    def added(self) -> Mapping[str, SessionSpec]:
        return self._added_view

    def endpoint_of(self, session_id: str) -> EndpointId | None:
        spec = self.spec(session_id)
        return None if spec is None else self._endpoint_for(spec)

    def states(self) -> dict[SessionState, int]:
        out: dict[SessionState, int] = {}
        for runner in self._runners.values():
            key = runner.state
            out[key] = out.get(key, 0) + 1
        return out

    # ------------------------------------------------------------------ write (the supervisor's)
    def put(self, runner: SessionRunner) -> None:
        """``runner`` now serves its session (a runner it replaces is no longer in the table)."""
        self._runners[runner.session_id] = runner

    def discard(self, runner: SessionRunner) -> bool:
        """Take ``runner`` out, only if it still serves its session; True when it did."""
        if self._runners.get(runner.session_id) is not runner:
            return False
        del self._runners[runner.session_id]
        return True

    def add(self, spec: SessionSpec) -> None:
        """A session added over the control socket (its entry; a runner is put separately)."""
        self._added[spec.id] = spec

    def drop(self, session_id: str) -> None:
        """A session added over the control socket was removed."""
        self._added.pop(session_id, None)

    def configure(self, config: Config) -> None:
        """The configuration a reload adopted."""
        self._config = config
        self._specs = _specs(config)


def _specs(config: Config) -> dict[str, SessionSpec]:
    out: dict[str, SessionSpec] = {}
    for spec in config.sessions:
        out.setdefault(spec.id, spec)  # the first entry of an id, as a scan of the list found it
    return out
