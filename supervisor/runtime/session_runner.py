"""One supervised session: the session machine decides, this task executes its effects.

    connecting ──open()+validate──► active ──serve() ends──► reconnecting ──timer──► connecting
         └──────────────── fail-fast / exhausted / graceful close ─────────► terminated
         └──────────────── daemon stop with a store (a handover) ──────────► handed-over

* The session's connect endpoint admits every connection attempt, through the attempt shell
  (supervisor/attempts/; its :class:`~machines.endpoint.Endpoint` decides): the slot of its pace
  while the session waits to reconnect, then its circuit; a due reconnection it refuses is
  deferred without counting (RECONNECTION_THROTTLED, seed edge case 1). The admitted attempt
  (:class:`~supervisor.attempts.Flight`) goes with ``transport.open`` to where it is made (a
  WebSocket handshake, a CXone session start) and is answered there or here, once. Only attempts
  (handshakes, session starts, REST calls) are told to an endpoint, never the drop of an
  established connection: a mass drop must not trip the breaker and delay everyone's recovery.
  The runner keeps effects and timers only.
* Every response is validated before the session may go active: missing required fields
  (INCOMPLETE_RESPONSE) or another conversationId than ours (CONVERSATION_STATE_DRIFT).
* The runner is the one owner of what the session learns (its conversation, the platform's
  session id, the agent): transports report it through ``connection.learned``; the runner
  merges it into its immutable :class:`~supervisor.boundary.SessionContext` and builds every
  correlation from there.
* A connection that rolls over in place (a Genesys notifications channel replaced before the
  platform drops it, transports/base.py ``Rolling``) stays the session's connection: the runner
  takes what the new side learned and publishes CONNECTION_ROLLED_OVER; the session stays active.
* On termination the durable store closes the session's server side (its guest token wiped,
  supervisor/runtime/durable.py), the credential's cached token is dropped too when the taxonomy flags the failure ``revokesCredential``, subscribers get SESSION_TERMINATED with
  REVOKE_LOCAL_STORAGE_AND_REAUTHENTICATE, and nothing reconnects: only a new runner (a full
  authentication cycle) brings the session back.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

import anyio
import msgspec

from machines.effects import Effect, Reconnect, ScheduleReconnect, SessionHandedOver, SessionTerminated
from machines.session import SessionConfig, SessionCore
from supervisor.attempts import Flight, Gate, Late, Refused
from supervisor.boundary import SessionContext
from supervisor.bus import EventBus
from supervisor.clock import Clock, Rng, iso_utc
from supervisor.errors import (
    ChannelLimit,
    CircuitOpenError,
    Fenced,
    OperationError,
    SessionError,
    TransportFailure,
)
from supervisor.events import ConnectionRolledOver, Correlation, ErrorClassified
from supervisor.rest.tokens import TokenCache
from supervisor.runtime.hooks import BusHooks
from supervisor.runtime.publish import publish_effects
from supervisor.taxonomy import Classifier, RawError, Scope, SdkErrorEvent, TaxonomyClass
from supervisor.transports.base import (
    AgentStateSetter,
    Connection,
    MessageSender,
    Rolling,
    Rollover,
    TakesOver,
    Transport,
)
from supervisor.vocabulary import CloseCode, SessionState

Sleep = Callable[[float], Awaitable[None]]
#: how long a notifications session refused ChannelLimit waits before it asks for a place again [I]
CHANNEL_LIMIT_WAIT_S = 30.0


def connection_lost(event: SdkErrorEvent) -> SdkErrorEvent:
    """The failure ended (or prevented) the connection itself, so it is session-level.

    A 429 on the WebSocket upgrade is operation-scoped in the taxonomy, but when the
    operation *is* the connection, the session must reconnect (TRANSIENT) or end
    (PERMANENT): there is no session left to carry on with.
    """
    if event.reconnect or event.fail_fast or event.taxonomy_class is TaxonomyClass.NONE:
        return event
    return msgspec.structs.replace(event, reconnect=True, scope=Scope.SESSION)


def _decided(error: OperationError) -> SdkErrorEvent:
    event = error.event
    if not isinstance(event, SdkErrorEvent):  # pragma: no cover - OperationError always carries one
        raise TypeError(f"OperationError without an SdkErrorEvent: {event!r}")
    return event


class ShardFence(Protocol):
    """The write fence of the session's shard, as the runner waits on it (supervisor/runtime/fence.py,
    ShardGuard)."""

    def passed(self) -> bool:
        """The shard's lease deadline passed (or the loop stalled): nothing may be written."""

    async def reopened(self) -> None:
        """Return once writes may go out again."""


class SessionRunner:
    """Runs one session until it terminates; :meth:`stop` ends it on purpose."""

    def __init__(
        self,
        transport: Transport,
        *,
        classifier: Classifier,
        gate: Gate,
        bus: EventBus,
        clock: Clock,
        rng: Rng,
        tokens: TokenCache | None = None,
        config: SessionConfig | None = None,
        sleep: Sleep = anyio.sleep,
        fence: ShardFence | None = None,
    ) -> None:
        self.transport = transport
        # a fleet member's session: its shard's write fence (None: one host). Past the shard's lease
        # deadline nothing is written (the sockets refuse, supervisor/runtime/fence.py) and the runner
        # makes no attempt either: it waits for the lease to be renewed, or for the shard's loss to
        # abandon it (docs/runtime.md, "The fence at the write")
        self._fence = fence
        #: the session waits for its shard's lease (fenced: nothing attempted meanwhile)
        self.fenced = False
        # the session's connect endpoint (its circuit; beyond the seed, docs/runtime.md, "Admission": its pace and its
        # places in flight), and where its moves are published
        self._gate = gate
        self._reports = BusHooks(bus, clock)
        # what the session is: configured ids, then what it learned (merged here only)
        self._context: SessionContext = transport.context
        self.session_id = self._context.session_id
        self.core = SessionCore(self.session_id, clock, rng, config)
        self._classifier = classifier
        self._bus = bus
        self._clock = clock
        self._tokens = tokens
        self._sleep = sleep
        self._due: float | None = None
        # the session waits because an isolation of its own connect endpoint refused it (woken
        # when it ends); an isolated REST or token endpoint's refusal is waited out by its timer
        self._held_by_gate = False
        # the connection attempt admitted while the session waited to reconnect
        self._flight: Flight | None = None
        self._connection: Connection | None = None
        self._serve_scope: anyio.CancelScope | None = None
        self._wait_scope: anyio.CancelScope | None = None
        self._reported: tuple[RawError, SdkErrorEvent] | None = None
        self._close_code = CloseCode.NORMAL_CLOSURE
        self.termination: SessionTerminated | None = None
        self.connects = 0

    @property
    def state(self) -> SessionState:
        return self.core.state

    @property
    def tokens(self) -> TokenCache | None:
        """The platform credential's token cache this session revokes on a fail-fast that condemns it."""
        return self._tokens

    def use_tokens(self, tokens: TokenCache | None) -> None:
        """The platform was rebuilt by a reload that did not restart this session (a Web Messaging
        guest keeps its connection when the OAuth client changes): revoke the new cache from now on."""
        self._tokens = tokens

    @property
    def context(self) -> SessionContext:
        """The session as known now: configured ids plus what it learned (the live connection's too)."""
        connection = self._connection
        return self._context if connection is None else self._context.learned(connection.learned)

    def correlation(self) -> Correlation:
        return self.context.correlation()

    # ------------------------------------------------------------------ lifecycle
    async def run(self) -> None:
        """Until terminated: connect, serve, and reconnect when the machine says so."""
        try:
            while not self.core.terminated:
                if self._fenced():
                    await self._await_fence()
                elif self.core.state is SessionState.RECONNECTING:
                    await self._await_reconnect()
                else:
                    await self._connect_and_serve()
        finally:
            flight, self._flight = self._flight, None
            if flight is not None:
                flight.abandon()  # admitted, then stopped before it was made
            connection, self._connection = self._connection, None
            if connection is not None:
                with anyio.CancelScope(shield=True):
                    await self._let_go(connection)

    async def stop(self, code: CloseCode = CloseCode.NORMAL_CLOSURE) -> None:
        """End the session on purpose: 1000 for an explicit stop, 1001 on daemon shutdown."""
        if self.core.terminated:
            return
        self._close_code = code
        self._execute(self.core.stop())

    @property
    def close_code(self) -> CloseCode:
        """The code the connection was (or will be) closed with: 1000 on a stop, 1001 on a shutdown."""
        return self._close_code

    def hand_over(self) -> None:
        """Daemon shutdown with a store: leave the session alive on the platform for the next start
        (SESSION_HANDED_OVER; the connection abandoned, not closed: docs/runtime.md, "Lifecycle")."""
        if self.core.terminated:
            return
        self._execute(self.core.hand_over())

    async def _let_go(self, connection: Connection) -> None:
        """The runner is done with ``connection``: abandoned when the session was handed over, else closed."""
        if self.core.handed_over:
            # what the connection learned (CXone's rolling id) is what the next start takes over
            self._remember(self._context.learned(connection.learned))
            await connection.abandon()
        else:
            await connection.close(self._close_code)

    def operation_failed(self, event: SdkErrorEvent) -> None:
        """An operation done for this session (a REST call, an in-band request) failed for good.

        A fail-fast trigger (409 duplicate message, QUEUE_FULL, invalid token, ...) ends the
        session here; an operation-scoped failure only fails that operation.
        """
        # only a fail-fast reaches the machine: an operation that merely failed (or spent its
        # retries) says nothing about the connection, which the transport watches itself
        if event.fail_fast and not self.core.terminated:
            self._execute(self.core.failure(event))

    @property
    def live(self) -> Connection | None:
        """The session's connection while it serves (None between connections)."""
        return self._connection

    @property
    def read_only(self) -> bool:
        """The live connection's conversation takes no more messages from us (GMT goes read-only on
        an agent's Presence Disconnect whose ``metadata.readOnly`` is ``"true"``)."""
        connection = self._connection
        return isinstance(connection, MessageSender) and connection.read_only

    def _live(self) -> Connection:
        connection = self._connection
        if self.core.state is not SessionState.ACTIVE or connection is None:
            raise SessionError(f"session '{self.session_id}' is {self.core.state.value}, not active")
        return connection

    async def send_message(
        self, text: str, *, metadata: Mapping[str, str] | None = None, client_id: str | None = None
    ) -> Mapping[str, Any]:
        """Send a conversation message on the live connection, through the one retry executor.

        ``client_id`` goes with every send of it (the platform's record of it is looked for by it
        before it is ever sent again). Raises :class:`SessionError` when the session is not active
        or its transport sends no messages, :class:`OperationError` when the message failed for
        good (a fail-fast one also ends the session).
        """
        connection = self._live()
        if not isinstance(connection, MessageSender):
            raise SessionError(
                f"session '{self.session_id}' ({self._context.channel.value}) sends no messages"
            )
        try:
            return await connection.send_message(text, metadata=metadata, client_id=client_id)
        except OperationError as failure:
            self.operation_failed(_decided(failure))
            raise

    async def set_agent_state(self, state: str, reason: str | None = None) -> None:
        """Set the agent's state on the live connection (CXone), through the one retry executor.

        Raises :class:`SessionError` when the session is not active or its transport has no agent
        state, :class:`OperationError` when the platform refused it for good.
        """
        connection = self._live()
        if not isinstance(connection, AgentStateSetter):
            raise SessionError(
                f"session '{self.session_id}' ({self._context.channel.value}) has no agent state"
            )
        try:
            await connection.set_agent_state(state, reason)
        except OperationError as failure:
            self.operation_failed(_decided(failure))
            raise

    # ------------------------------------------------------------------ states
    async def _pause(self, seconds: float, *, held: bool = False) -> None:
        """Wait, but wake at once when the session is stopped (``held``: or when the isolation of
        the connect endpoint that refused it ends, whoever ends it)."""
        with anyio.CancelScope() as scope:
            # (within the wait of :meth:`_admitted`, whose scope a stop cancels once this sleep is over)
            outer, self._wait_scope = self._wait_scope, scope
            try:
                if held:
                    with self._gate.woken_on_release(scope):
                        await self._sleep(seconds)
                else:
                    await self._sleep(seconds)
            finally:
                self._wait_scope = outer

    def _stopped(self) -> bool:
        return self.core.terminated

    def _fenced(self) -> bool:
        """The session's shard is fenced here (its lease deadline passed, or the loop stalled)."""
        return self._fence is not None and self._fence.passed()

    async def _await_fence(self) -> None:
        """Wait, attempting nothing, until the shard's lease is renewed (a stop or the shard's loss
        wakes it: the runner is then stopped or handed over)."""
        fence = self._fence
        assert fence is not None
        self.fenced = True
        try:
            with anyio.CancelScope() as scope:
                self._wait_scope = scope
                await fence.reopened()
            self._wait_scope = None
        finally:
            self.fenced = False

    async def _admitted(self) -> Flight | Refused | None:
        """Wait for the connect endpoint's next slot, then ask its circuit: the admitted attempt,
        or the circuit's refusal; None when the session ended meanwhile.

        A slot past the reconnection horizon ends the session there (the machine gives up:
        HORIZON) instead of waiting for it.
        """
        # a stop cancels the whole wait, this one scope: the sleeps until a slot (no scope each: a
        # take-over's guests sleep thousands of times a second) and a place in the gate's line of
        # callers the pace has no slot for yet (woken by the gate, not by a timer of its own)
        with anyio.CancelScope() as scope:
            self._wait_scope = scope
            try:
                answer = await self._gate.ask(
                    self._reports, self._sleep, deadline=self.core.horizon_deadline, stopped=self._stopped
                )
            finally:
                self._wait_scope = None
        if scope.cancelled_caught:
            return None
        if isinstance(answer, Late):
            if self.core.state is SessionState.RECONNECTING:
                self._execute(self.core.reconnect_due(answer.wait_s))
            return None
        return answer

    async def _await_reconnect(self) -> None:
        due = self._due if self._due is not None else self._clock.monotonic()
        wait = due - self._clock.monotonic()
        if wait > 0:
            # a session an isolation of its own connect endpoint holds comes back when it ends
            await self._pause(wait, held=self.core.held and self._held_by_gate)
        if self.core.state is not SessionState.RECONNECTING:
            return  # stopped while waiting
        answer = await self._admitted()
        if answer is None:
            return  # stopped, or the endpoint's next slot falls past the horizon
        if isinstance(answer, Refused):
            # seed edge case 1: the circuit is open: defer, not counted, RECONNECTION_THROTTLED
            # (isolated by an operator: the same, and the horizon stands still meanwhile)
            self._held_by_gate = answer.isolated
            self._execute(self.core.reconnect_due(max(answer.retry_in_s, 0.001), held=answer.isolated))
            return
        self._flight = answer
        self._execute(self.core.reconnect_due(None))

    async def _connect_and_serve(self) -> None:
        flight: Flight | None
        flight, self._flight = self._flight, None
        transport = self.transport
        # a take-over is not a connection attempt: it makes no start (a CXone poll on the stored
        # sessionId), so it books no slot of the connect endpoint's pace, a slot it would never
        # use (the pace grows only on used ones: 2,000 take-overs crawled at its initial rate).
        # A start it falls back to (the session ended meanwhile) asks that endpoint itself.
        takes_over = isinstance(transport, TakesOver) and transport.takes_over
        if flight is None and not takes_over:
            answer = await self._admitted()
            if answer is None:
                return
            if isinstance(answer, Refused):
                self._held_by_gate = answer.isolated
                self._execute(self.core.connect_refused(max(answer.retry_in_s, 0.001), held=answer.isolated))
                return
            flight = answer
        self.connects += 1
        connection: Connection | None = None
        deadline = self.core.horizon_deadline
        try:
            with anyio.CancelScope() as scope:
                # stop() cancels a pending open: a hung handshake never delays shutdown; and an
                # attempt of a reconnection never runs past its horizon (an attempt's own REST
                # retries on a black-holed endpoint can take minutes)
                self._wait_scope = scope
                if deadline is not None:
                    scope.deadline = anyio.current_time() + max(deadline - self._clock.monotonic(), 0.0)
                connection = await self.transport.open(flight)
            self._wait_scope = None
            if connection is None:
                if scope.cancelled_caught and not self.core.terminated:
                    # the horizon passed mid-attempt: a timeout, which the machine turns into HORIZON
                    raw = RawError(
                        platform=self._context.platform,
                        channel=self._context.channel,
                        exception="TimeoutError",
                    )
                    self._connect_failed(self._classify(raw), flight)
                elif flight is not None:
                    flight.abandon()  # stopped while connecting
                return
            if self.core.terminated:
                # stopped (or handed over) just as the connection opened: never serve it
                if flight is not None:
                    flight.abandon()
                with anyio.CancelScope(shield=True):
                    await self._let_go(connection)
                return
        except TransportFailure as failure:
            self._connect_failed(self._classify(failure.raw), flight)
            return
        except OperationError as failure:
            self._connect_failed(self._unpublished(failure), flight)
            return
        except Fenced:
            # the shard's deadline passed at the attempt's first byte: nothing was sent, nothing is
            # counted against the endpoint, and the machine is left as it is (the run loop waits)
            if flight is not None:
                flight.abandon()
            return
        except ChannelLimit:
            # a shared notifications channel has no room and the client holds all it may (its
            # configuration and AddSession refuse this beforehand; a reload can still get here):
            # wait for a place, not counted, within the horizon [I]
            if flight is not None:
                flight.abandon()
            if not self.core.terminated:
                self._execute(self.core.connect_refused(CHANNEL_LIMIT_WAIT_S))
            return
        except CircuitOpenError as refused:
            # an endpoint behind this connection (token endpoint, REST API) is open: wait, not
            # counted, within the horizon; the attempt was not made, so its endpoint learns
            # nothing (a lost probe times out by itself)
            if flight is not None:
                flight.abandon()
            if not self.core.terminated:
                self._held_by_gate = False  # (another endpoint's circuit: its own timer says when)
                self._execute(
                    self.core.connect_refused(max(refused.retry_in_s, 0.001), held=refused.isolated)
                )
            return
        # the endpoint answered (unless the transport told it already, where the attempt was made)
        if flight is not None:
            flight.settle(None)
        context = self._context.learned(connection.learned)
        problem = self._classifier.validate_response(
            connection.session_response,
            platform=context.platform,
            channel=context.channel,
            kind=self.transport.response_kind,
            # what we held before this connection: a resumed session must name the same conversation
            expected_conversation_id=self._context.conversation_id,
            context=context.envelope_context(),
        )
        if problem is not None:
            self._bus.publish(ErrorClassified(problem))
        self._connection = connection
        self._execute(self.core.session_response(problem))
        if self.core.state is not SessionState.ACTIVE:
            return
        self._remember(context)
        if isinstance(connection, Rolling):
            connection.on_rolled_over = self._rolled_over
        await self._serve(connection)

    def _connect_failed(self, event: SdkErrorEvent, flight: Flight | None) -> None:
        if self._fenced():
            # the attempt failed because its shard was fenced (a socket reset at the deadline, a
            # write refused): the platform said nothing, so nothing is told or counted
            if flight is not None:
                flight.abandon()
            return
        # the connect endpoint hears of the failure when the attempt was made and nobody told it
        # yet (a CXone start's answers were told by the retry executor, a notifications channel
        # that could not be created never reached its handshake): each attempt once (none was
        # admitted for a take-over)
        if flight is not None:
            flight.settle(event)
        if self.core.terminated:
            return  # stopped while the attempt was failing: nothing left to decide
        self._execute(self.core.failure(connection_lost(event)))

    async def _serve(self, connection: Connection) -> None:
        ended: RawError | None = None
        failure: SdkErrorEvent | None = None
        refused: CircuitOpenError | None = None
        with anyio.CancelScope() as scope:
            self._serve_scope = scope
            try:
                try:
                    ended = await connection.serve(self._report)
                except* Fenced:
                    # a request of the connection's own (a CXone poll, a channel's renewal, in a task
                    # group of the transport's) met the fence: the connection is lost here as if its
                    # link dropped; the run loop then waits for the lease
                    ended = None
            except TransportFailure as exc:
                ended = exc.raw
            except OperationError as exc:
                failure = self._unpublished(exc)
            except CircuitOpenError as exc:
                refused = exc
        self._serve_scope = None
        if self.core.terminated:
            return  # stopped, or a reported fail-fast already ended it
        if refused is not None:
            await self._refused_while_serving(connection, refused)
            return
        if failure is None and ended is not None:
            failure = self._event_for(ended)
        if failure is None:
            failure = self._classify(
                RawError(
                    platform=self._context.platform,
                    channel=self._context.channel,
                    close_code=CloseCode.ABNORMAL_CLOSURE,
                )
            )
        # what the connection learned while serving (CXone's rolling id) stays with the session
        self._remember(self._context.learned(connection.learned))
        self._connection = None
        with anyio.CancelScope(shield=True):
            await connection.close(CloseCode.NORMAL_CLOSURE if failure.graceful else CloseCode.GOING_AWAY)
        if self.core.terminated:
            return  # stopped (ctl stop, drain, a fail-fast elsewhere) while the connection closed
        lost = connection_lost(failure)
        if lost.reconnect:
            # the platform dropped the connection: the pace learned before it is stale (a drop
            # right after a start-up of thousands would meet the restarted platform at that pace)
            self._gate.lost(self._reports)
        self._execute(self.core.failure(lost))

    async def _refused_while_serving(self, connection: Connection, refused: CircuitOpenError) -> None:
        """The connection's own next request (a CXone poll) found its endpoint's circuit open.

        Nothing failed on this session: the endpoint is paused for everyone. So nothing is
        classified (a made-up CONNECTION_FAILED / OSError with no endpoint was published here
        once); the connection is closed and the session waits for the circuit like a refused
        reconnection (RECONNECTION_THROTTLED, not counted as an attempt, within the horizon).
        """
        self._remember(self._context.learned(connection.learned))
        self._connection = None
        with anyio.CancelScope(shield=True):
            await connection.close(CloseCode.GOING_AWAY)
        if not self.core.terminated:
            self._held_by_gate = False
            self._execute(self.core.connect_refused(max(refused.retry_in_s, 0.001), held=refused.isolated))

    async def _report(self, raw: RawError | SdkErrorEvent) -> bool:
        """In-band failure from a live connection (or an event its transport named, published here):
        True when the connection may go on."""
        if isinstance(raw, SdkErrorEvent):
            event = raw
            self._bus.publish(ErrorClassified(event))
            self._reported = None
        else:
            event = self._classify(raw)
            self._reported = (raw, event)
        if event.fail_fast or event.reconnect or event.graceful:
            return False
        self._execute(self.core.failure(event))
        return not self.core.terminated

    def _rolled_over(self, rollover: Rollover) -> None:
        """The live connection replaced its platform side in place: keep what the new side is (its
        platform id) and say so; the session stays active (docs/runtime.md, "Notifications rollover")."""
        connection = self._connection
        if connection is None or self.core.terminated:
            return
        self._remember(self._context.learned(connection.learned))
        event = ConnectionRolledOver(
            self.session_id,
            rollover.reason,
            rollover.previous,
            rollover.current,
            rollover.make_before_break,
            rollover.overlap_s,
            rollover.duplicates_dropped,
            iso_utc(self._clock.time()),
            rollover.code,
        )
        self._bus.publish(event, self.correlation())

    # ------------------------------------------------------------------ effects
    def _execute(self, effects: list[Effect]) -> None:
        publish_effects(self._bus, effects, self.correlation())
        for effect in effects:
            if isinstance(effect, ScheduleReconnect):
                self._due = effect.at
            elif isinstance(effect, Reconnect):
                self._due = None
            elif isinstance(effect, SessionTerminated):
                self._terminated(effect)
            elif isinstance(effect, SessionHandedOver):
                self._cancel_waits()

    def _terminated(self, effect: SessionTerminated) -> None:
        self.termination = effect
        # seed section 3: "revoke local session storage" and force a full authentication cycle (the
        # durable store closes the session's server side when the runner ends: supervisor/runtime/durable.py)
        if self._tokens is not None and effect.revokes_credential:
            # the platform credential's token is shared by the sessions that use it: drop it when
            # the token itself failed, so the next use re-authenticates (once, single-flight)
            self._tokens.revoke()
        self._cancel_waits()

    def _cancel_waits(self) -> None:
        """Wake the task: a serve, an open or a wait in progress ends now."""
        for scope in (self._serve_scope, self._wait_scope):
            if scope is not None:
                scope.cancel()

    # ------------------------------------------------------------------ classification
    def _classify(self, raw: RawError) -> SdkErrorEvent:
        event = self._classifier.classify(raw)
        self._bus.publish(ErrorClassified(event))
        return event

    def _unpublished(self, error: OperationError) -> SdkErrorEvent:
        """The decided event of ``error``, published here when the executor did not (a named one)."""
        event = _decided(error)
        if not error.published:
            self._bus.publish(ErrorClassified(event))
        return event

    def _event_for(self, raw: RawError) -> SdkErrorEvent:
        reported = self._reported
        if reported is not None and reported[0] is raw:
            return reported[1]  # already classified (and published) when it was reported
        return self._classify(raw)

    def _remember(self, context: SessionContext) -> None:
        """Keep what the session learned (the correlations and the durable store read it from here)."""
        self._context = context
