"""Metrics: counters fed by the bus, gauges and token counters read when the reader collects.

Every label is bounded by construction: states, taxonomy codes, policy names, termination
reasons and triggers, circuit ids (one per configured endpoint), credential names, HTTP status
codes. Never a session, agent or conversation id, never an operation's path (docs/telemetry.md
lists each instrument and its labels).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from opentelemetry.metrics import CallbackOptions, Meter, Observation

from machines.registry import Endpoints
from supervisor.attributes.events import AttributeMismatch
from supervisor.events import (
    CircuitTransition,
    Correlation,
    Event,
    PacingChanged,
    ReconnectionThrottled,
    RetryAttempt,
    RetryExhausted,
    RetryKind,
    RetrySuccess,
    SessionTerminated,
    SessionTransition,
)
from supervisor.rest.tokens import TokenCache
from supervisor.taxonomy import Channel, SdkErrorEvent
from supervisor.telemetry import attributes as A
from supervisor.vocabulary import CircuitState, Scope, SessionState

__all__ = ["Metrics"]

# a refused WebSocket upgrade (the platform's admission control), by HTTP status
_ADMISSION = frozenset({429, 503})
_WEBSOCKET_CHANNELS = frozenset({Channel.WEBMESSAGING, Channel.NOTIFICATIONS})


class Metrics:
    """The instruments, and the bus events that move them."""

    def __init__(
        self,
        meter: Meter,
        *,
        sessions: Callable[[], Mapping[SessionState, int]],
        circuits: Callable[[], Mapping[str, CircuitState]],
        segment_attempt: Callable[[str], int],
    ) -> None:
        self._sessions = sessions
        self._circuits = circuits
        self._segment_attempt = segment_attempt
        self._tokens: Mapping[Scope, TokenCache] = {}
        self._endpoints: Endpoints | None = None
        self._outbox: Callable[[], int | None] | None = None
        self._counts: dict[str, Callable[[], int]] = {}
        # the last rate PACING_CHANGED told, per (endpoint, kind): None while unpaced (beyond the seed)
        self._pacing: dict[tuple[str, str], float | None] = {}
        # [taxonomy] shadow: divergences by (active code, shadow code), read when collected
        self._shadow: Callable[[], Mapping[tuple[str, str], int]] = dict
        meter.create_observable_gauge(
            A.M_SESSIONS,
            [self._observe_sessions],
            unit="{session}",
            description="Supervised sessions by state",
        )
        self.reconnect_attempts = meter.create_counter(
            A.M_RECONNECT_ATTEMPTS,
            unit="{attempt}",
            description="Reconnections scheduled, by cause and policy",
        )
        self.reconnect_outcomes = meter.create_counter(
            A.M_RECONNECT_OUTCOMES,
            unit="{outcome}",
            description="Reconnection outcomes: recovered, failed, throttled (deferred by an open circuit), exhausted",
        )
        self.retries = meter.create_counter(
            A.M_RETRIES, unit="{retry}", description="Operation retries by code, policy and reason"
        )
        self.exhausted = meter.create_counter(
            A.M_RETRY_EXHAUSTED,
            unit="{operation}",
            description="Retry budgets spent (operations and reconnections)",
        )
        meter.create_observable_gauge(
            A.M_CIRCUIT_STATE,
            [self._observe_circuits],
            unit="1",
            description="1 for each circuit's current state (closed, open, half_open, isolated), 0 for the others",
        )
        self.circuit_transitions = meter.create_counter(
            A.M_CIRCUIT_TRANSITIONS, unit="{transition}", description="Circuit transitions by endpoint"
        )
        meter.create_observable_counter(
            A.M_TOKEN_FETCHES, [self._observe("fetches")], unit="{fetch}", description="Tokens fetched"
        )
        meter.create_observable_counter(
            A.M_TOKEN_REFRESHES,
            [self._observe("refreshes")],
            unit="{refresh}",
            description="Tokens refreshed (a fetch that replaced a token)",
        )
        meter.create_observable_counter(
            A.M_TOKEN_FAILURES,
            [self._observe("failures")],
            unit="{failure}",
            description="Token fetches the token endpoint refused or never answered",
        )
        self.handshake_refusals = meter.create_counter(
            A.M_HANDSHAKE_REFUSALS,
            unit="{refusal}",
            description="WebSocket upgrades refused by the platform's admission control (429, 503)",
        )
        self.terminations = meter.create_counter(
            A.M_TERMINATIONS, unit="{session}", description="Session terminations by reason and trigger"
        )
        meter.create_observable_counter(
            A.M_SINK_FAILURES, [self._count("sink")], unit="{failure}", description="Event-bus sink failures"
        )
        meter.create_observable_counter(
            A.M_EXPORT_FAILURES,
            [self._count("export")],
            unit="{export}",
            description="Telemetry exports that failed (collector down, refusing, too slow)",
        )
        # adaptive pacing (beyond the seed, docs/runtime.md, "Admission"): the rate each endpoint is paced at, and why it moved
        meter.create_observable_gauge(
            A.M_PACING_RATE,
            [self._observe_pacing],
            unit="{attempt}/s",
            description="Attempts per second an endpoint is paced at (connect or rest), once pacing engaged",
        )
        self.pacing_changes = meter.create_counter(
            A.M_PACING_CHANGES,
            unit="{change}",
            description="Pacing changes: throttled (rate cut), probe (rate doubled), pause (Retry-After lengthened)",
        )
        # the retry budget across calls (beyond the seed, docs/runtime.md, "Admission"): what it turned away
        meter.create_observable_counter(
            A.M_RETRY_BUDGET_REFUSALS,
            [self._observe_budgets],
            unit="{retry}",
            description="Retries that came due and were not sent: the endpoint's retry budget was spent",
        )
        # attribute updates (docs/attributes.md): the durable outbox, and what verification could not repair
        meter.create_observable_gauge(
            A.M_OUTBOX_DEPTH,
            [self._observe_outbox],
            unit="{update}",
            description="Attribute updates waiting in the durable outbox to be sent or verified",
        )
        self.mismatches = meter.create_counter(
            A.M_ATTRIBUTE_MISMATCHES,
            unit="{key}",
            description="Attribute keys whose read-back differed and could not be repaired (ATTRIBUTE_MISMATCH)",
        )
        # the socket API's subscribers (docs/socket-api.md): read from its hub once it exists
        meter.create_observable_gauge(
            A.M_SUBSCRIBERS,
            [self._count("subscribers")],
            unit="{subscriber}",
            description="Subscribers connected to the subscribe socket",
        )
        meter.create_observable_counter(
            A.M_LAGGED_NOTICES,
            [self._count("lagged")],
            unit="{notice}",
            description="`lagged` notices sent to subscribers that fell behind (each followed by a snapshot)",
        )
        meter.create_observable_counter(
            A.M_LAGGED_DISCONNECTS,
            [self._count("lag_disconnects")],
            unit="{subscriber}",
            description="Subscribers cut off after staying over their buffer past laggedDisconnectAfter",
        )

        meter.create_observable_counter(
            A.M_SHADOW_DIVERGENCES,
            [self._observe_shadow],
            unit="{failure}",
            description="Failures the shadow taxonomy routes otherwise than the active one, by both codes",
        )

    # -- what the façade wires in after the daemon's objects exist ------------------------------------
    def observe_tokens(self, tokens: Mapping[Scope, TokenCache]) -> None:
        self._tokens = tokens

    def observe_endpoints(self, endpoints: Endpoints) -> None:
        """The endpoints whose retry budgets the refusals are read from."""
        self._endpoints = endpoints

    def observe_outbox(self, depth: Callable[[], int | None]) -> None:
        """The durable outbox's depth (None while there is no store)."""
        self._outbox = depth

    def observe_shadow(self, read: Callable[[], Mapping[tuple[str, str], int]]) -> None:
        """The shadow taxonomy's divergence counts (every one, not only those reported)."""
        self._shadow = read

    def count(self, name: str, read: Callable[[], int]) -> None:
        """Read a running count (``sink``: bus sink failures, ``export``: failed exports; the socket
        API's ``subscribers``, ``lagged`` notices and ``lag_disconnects``)."""
        self._counts[name] = read

    # -- the bus ----------------------------------------------------------------------------------------
    def event(self, event: Event, correlation: Correlation | None = None) -> None:
        """Count what ``event`` says; a named tenant's session's counts (its ``correlation``'s tenant) also
        carry ``session_supervisor.tenant`` (the default tenant's series stay as they were)."""
        tenant = None if correlation is None else correlation.tenant
        self._session_event(event, {} if tenant is None else {A.TENANT: tenant})

    def _session_event(self, event: Event, named: dict[str, Any]) -> None:
        kind = type(event)
        if kind is RetryAttempt:
            assert isinstance(event, RetryAttempt)
            if event.kind is RetryKind.RECONNECT:
                self.reconnect_attempts.add(
                    1, {A.ERROR_TYPE: event.code, A.RETRY_POLICY: event.policy, **named}
                )
            else:
                reason = "token_replay" if event.token_refreshed else "retry"
                self.retries.add(
                    1,
                    {
                        A.ERROR_TYPE: event.code,
                        A.RETRY_POLICY: event.policy,
                        A.RETRY_REASON: reason,
                        A.RETRY_FROM_RETRY_AFTER: event.from_retry_after,
                        **named,
                    },
                )
        elif kind is RetrySuccess:
            assert isinstance(event, RetrySuccess)
            if event.kind is RetryKind.RECONNECT:
                self.reconnect_outcomes.add(1, {A.OUTCOME: "recovered", **named})
        elif kind is RetryExhausted:
            assert isinstance(event, RetryExhausted)
            attrs: dict[str, Any] = {
                A.RETRY_KIND: event.kind.value,
                A.ERROR_TYPE: event.code,
                A.RETRY_POLICY: event.policy,
                **named,
            }
            if event.give_up is not None:
                attrs[A.RETRY_GIVE_UP] = event.give_up
            self.exhausted.add(1, attrs)
            if event.kind is RetryKind.RECONNECT:
                self.reconnect_outcomes.add(1, {A.OUTCOME: "exhausted", **named})
        elif kind is ReconnectionThrottled:
            self.reconnect_outcomes.add(1, {A.OUTCOME: "throttled", **named})
        elif kind is SessionTransition:
            assert isinstance(event, SessionTransition)
            # read before the segment tracker moves on: was the failed attempt a reconnection?
            failed = event.source is SessionState.CONNECTING and event.target is SessionState.RECONNECTING
            if failed and self._segment_attempt(event.session_id) > 0:
                self.reconnect_outcomes.add(1, {A.OUTCOME: "failed", **named})
        elif kind is SessionTerminated:
            assert isinstance(event, SessionTerminated)
            attrs = {A.TERMINATION_REASON: event.reason.value, **named}
            if event.trigger is not None:
                attrs[A.TERMINATION_TRIGGER] = event.trigger.value
            if event.code is not None:
                attrs[A.ERROR_TYPE] = event.code
            self.terminations.add(1, attrs)
        elif kind is PacingChanged:
            assert isinstance(event, PacingChanged)
            self._pacing[(str(event.endpoint), event.kind)] = event.rate
            self.pacing_changes.add(
                1,
                {
                    A.PACING_ENDPOINT: str(event.endpoint),
                    A.PACING_KIND: event.kind,
                    A.PACING_REASON: event.reason,
                },
            )
        elif kind is AttributeMismatch:
            assert isinstance(event, AttributeMismatch)
            self.mismatches.add(len(event.keys))
        elif kind is CircuitTransition:
            assert isinstance(event, CircuitTransition)
            self.circuit_transitions.add(
                1,
                {
                    A.CIRCUIT_ID: event.circuit_id,
                    A.CIRCUIT_FROM: event.source.value,
                    A.CIRCUIT_TO: event.target.value,
                },
            )

    def connection_failure(self, event: SdkErrorEvent, session_state: SessionState | None) -> None:
        """A session's connection attempt failed: count a refused WebSocket upgrade."""
        status = event.raw_status
        if (
            session_state is SessionState.CONNECTING
            and status in _ADMISSION
            and event.channel in _WEBSOCKET_CHANNELS
        ):
            self.handshake_refusals.add(1, {A.HTTP_STATUS: status, A.CHANNEL: event.channel})

    # -- observable instruments -------------------------------------------------------------------------
    def _observe_sessions(self, options: CallbackOptions) -> Iterable[Observation]:
        counts = self._sessions()
        return [Observation(counts.get(state, 0), {A.SESSION_STATE: state.value}) for state in SessionState]

    def _observe_circuits(self, options: CallbackOptions) -> Iterable[Observation]:
        # every endpoint's circuit: one that never moved is closed (a dashboard counts them by state)
        states: dict[str, CircuitState] = {}
        if self._endpoints is not None:
            states = {endpoint.circuit_id: CircuitState.CLOSED for endpoint in self._endpoints.all().values()}
        states.update(self._circuits())
        out = []
        for circuit_id, current in sorted(states.items()):
            for state in CircuitState:
                value = 1 if state is current else 0
                out.append(Observation(value, {A.CIRCUIT_ID: circuit_id, A.CIRCUIT_STATE: state.value}))
        return out

    def _observe(self, field: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def observe(options: CallbackOptions) -> Iterable[Observation]:
            return [
                Observation(int(getattr(cache, field)), {A.CREDENTIAL: platform.value})
                for platform, cache in sorted(self._tokens.items(), key=lambda item: item[0].value)
            ]

        return observe

    def _observe_pacing(self, options: CallbackOptions) -> Iterable[Observation]:
        return [
            Observation(rate, {A.PACING_ENDPOINT: endpoint, A.PACING_KIND: kind})
            for (endpoint, kind), rate in sorted(self._pacing.items())
            if rate is not None
        ]

    def _observe_budgets(self, options: CallbackOptions) -> Iterable[Observation]:
        endpoints = self._endpoints
        if endpoints is None:
            return []
        out = []
        # (the reader's thread: a copy of the table, made in one step)
        for name, endpoint in sorted(endpoints.all().items()):
            refused = endpoint.retries_refused
            if refused is not None:
                out.append(Observation(refused, {A.ENDPOINT: str(name)}))
        return out

    def _observe_outbox(self, options: CallbackOptions) -> Iterable[Observation]:
        depth = None if self._outbox is None else self._outbox()
        return [] if depth is None else [Observation(depth)]

    def _observe_shadow(self, options: CallbackOptions) -> Iterable[Observation]:
        return [
            Observation(count, {A.TAXONOMY_ACTIVE_CODE: active, A.TAXONOMY_SHADOW_CODE: shadow})
            for (active, shadow), count in sorted(self._shadow().items())
        ]

    def _count(self, name: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def observe(options: CallbackOptions) -> Iterable[Observation]:
            read = self._counts.get(name)
            return [] if read is None else [Observation(read())]

        return observe
