"""Finished record trees in, ``ReadableSpan``s out, handed to the batch processor.

Spans are built here, after the outcome, from :mod:`supervisor.telemetry.records` with the
times those recorded: the SDK's Tracer would take its ids and its sampling decision when a
span starts, and we need both before (ids for log lines) and after (the outcome) that moment.
``ReadableSpan`` is what a span processor receives from the SDK's own spans; the batch
processor queues it for its worker thread, so nothing here waits on the collector.

The shapes (docs/telemetry.md draws them):

* operation: one INTERNAL span, one CLIENT child per attempt (``http.request.resend_count``
  on every resend), nested operations (a token fetch) as INTERNAL children, ``retry.scheduled``
  span events;
* session segment: one INTERNAL span per lifetime segment, linked to the previous segment and
  the session's first; a connecting segment (the session start) holds the operations made
  during it and, for a WebSocket session, one CLIENT span for the handshake;
* circuit period: one INTERNAL span per open or half-open period, transitions as its events
  (built by supervisor/telemetry/circuits.py with :meth:`SpanFactory.span`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, SpanProcessor
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from supervisor.events import Correlation, SessionTerminated, TerminationReason
from supervisor.rest.hooks import OperationDetails
from supervisor.taxonomy import SdkErrorEvent
from supervisor.telemetry import attributes as A
from supervisor.telemetry.records import Attempt, Operation, Segment
from supervisor.telemetry.sampling import IdSource
from supervisor.vocabulary import CloseCode, SessionState

__all__ = ["ERROR", "UNSET", "SessionShape", "SpanFactory", "context_of"]

_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
ERROR = Status(StatusCode.ERROR)
UNSET = Status(StatusCode.UNSET)
# a termination the session did not suffer: no error status on its last segment
_CLEAN_ENDS = frozenset({TerminationReason.STOPPED, TerminationReason.GRACEFUL_CLOSE})


@dataclass(frozen=True, slots=True)
class SessionShape:
    """What a configured session is (the bus events do not say): kind, platform, its WebSocket."""

    kind: str
    platform: str
    channel: str
    # (server.address, server.port, path template) of its WebSocket; None: no WebSocket
    websocket: tuple[str, int | None, str] | None = None


def context_of(trace_id: int, span_id: int) -> SpanContext:
    return SpanContext(trace_id, span_id, False, _SAMPLED)


def correlate(attrs: dict[str, Any], correlation: Correlation | None) -> None:
    """The correlation ids: ``session.id`` (semantic conventions) and our namespace for the rest."""
    if correlation is None:
        return
    attrs[A.SESSION_ID] = correlation.session_id
    if correlation.agent_id is not None:
        attrs[A.AGENT_ID] = correlation.agent_id
    if correlation.conversation_id is not None:
        attrs[A.CONVERSATION_ID] = correlation.conversation_id
    if correlation.platform_session_id is not None:
        attrs[A.PLATFORM_SESSION_ID] = correlation.platform_session_id
    if correlation.tenant is not None:
        attrs[A.TENANT] = correlation.tenant


def _failure(attrs: dict[str, Any], event: SdkErrorEvent) -> None:
    attrs[A.ERROR_TYPE] = event.code
    attrs[A.ERROR_CLASS] = event.taxonomy_class.value
    if event.raw_code is not None:
        attrs[A.RAW_CODE] = event.raw_code


def _raw_status(attrs: dict[str, Any], status: int | None) -> None:
    # a WebSocket's close code arrives as the raw status (1000-4999); an HTTP status is < 600
    if status is None:
        return
    attrs[A.WS_CLOSE_CODE if status >= CloseCode.NORMAL_CLOSURE else A.HTTP_STATUS] = status


def _websocket(attrs: dict[str, Any], websocket: tuple[str, int | None, str] | None) -> None:
    attrs[A.NETWORK_TRANSPORT] = "tcp"
    attrs[A.NETWORK_PROTOCOL] = "websocket"
    if websocket is not None:
        address, port, path = websocket
        attrs[A.SERVER_ADDRESS] = address
        if port is not None:
            attrs[A.SERVER_PORT] = port
        attrs[A.WS_URL_TEMPLATE] = path


def _operation_name(details: OperationDetails) -> str:
    # an unnamed REST call is "METHOD /its/path" (ids inside): name it by its template instead
    method, route = details.method, details.route
    if method is not None and route is not None and details.operation.startswith(method + " /"):
        return f"{method} {route}"
    return details.operation


class SpanFactory:
    """Builds the spans of finished records and hands them to the processor (never blocks)."""

    def __init__(
        self,
        processor: SpanProcessor,
        resource: Resource,
        ids: IdSource,
        shapes: Mapping[str, SessionShape],
        version: str,
    ) -> None:
        self._processor = processor
        self._resource = resource
        self._ids = ids
        self._shapes = shapes
        self._scope = InstrumentationScope("session_supervisor.telemetry", version, A.SCHEMA_URL)

    def shape(self, session_id: str) -> SessionShape | None:
        return self._shapes.get(session_id)

    def emit(self, spans: list[ReadableSpan]) -> None:
        on_end = self._processor.on_end
        for span in spans:
            on_end(span)

    def span(
        self,
        name: str,
        context: SpanContext,
        parent: SpanContext | None,
        attrs: dict[str, Any],
        start: int,
        end: int,
        *,
        kind: SpanKind = SpanKind.INTERNAL,
        status: Status = UNSET,
        events: list[Event] | None = None,
        links: list[Link] | None = None,
    ) -> ReadableSpan:
        return ReadableSpan(
            name=name,
            context=context,
            parent=parent,
            resource=self._resource,
            attributes=attrs,
            events=events or (),
            links=links or (),
            kind=kind,
            status=status,
            start_time=start,
            end_time=max(end, start),
            instrumentation_scope=self._scope,
        )

    # -- operations -----------------------------------------------------------------------------------
    def emit_operation(self, op: Operation) -> None:
        spans: list[ReadableSpan] = []
        self._operation(op, None, spans)
        self.emit(spans)

    def _operation(self, op: Operation, parent: SpanContext | None, out: list[ReadableSpan]) -> None:
        details = op.details
        context = context_of(*op.ensure_ids())
        ctx = details.context
        attrs: dict[str, Any] = {A.OPERATION: details.operation}
        correlate(attrs, ctx.correlation())
        attrs[A.PLATFORM] = ctx.platform.value
        attrs[A.CHANNEL] = ctx.channel.value
        in_band = details.circuit is None and details.method is None
        self._endpoint(attrs, op, in_band)
        attrs[A.ATTEMPTS] = details.attempts
        if details.circuit is not None:
            attrs[A.CIRCUIT_ID] = str(details.circuit)
        if op.error is not None:
            attrs[A.ERROR_TYPE] = op.error
            if op.event is not None:
                attrs[A.ERROR_CLASS] = op.event.taxonomy_class.value
        if op.exhausted is not None and op.exhausted.give_up is not None:
            attrs[A.RETRY_GIVE_UP] = op.exhausted.give_up
        if op.cancelled:
            attrs[A.CANCELLED] = True
        events = [
            Event(
                A.RETRY_SCHEDULED,
                {
                    A.RETRY_DELAY_MS: retry.delay_s * 1000.0,
                    A.RETRY_REASON: "token_replay" if retry.token_refreshed else "retry",
                    A.RETRY_FROM_RETRY_AFTER: retry.from_retry_after,
                    A.RETRY_BUDGET_REFUSED: retry.budget_refused,
                    A.ERROR_TYPE: retry.code,
                    A.RETRY_POLICY: retry.policy,
                    A.RETRY_ATTEMPT: retry.attempt,
                },
                at,
            )
            for at, retry in op.retries or ()
        ]
        links = None
        if op.link is not None:
            links = [Link(context_of(*op.link.ids), {A.LINK_RELATION: "session_segment"})]
        status = ERROR if op.error is not None else UNSET
        out.append(
            self.span(
                _operation_name(details), context, parent, attrs, op.start, op.end,
                status=status, events=events, links=links,
            )
        )  # fmt: skip
        for attempt in op.attempts:
            out.append(self._attempt(op, attempt, context, in_band))
        for child in op.children or ():
            self._operation(child, context, out)

    def _endpoint(self, attrs: dict[str, Any], op: Operation, in_band: bool) -> None:
        details = op.details
        if in_band:
            # an in-band socket request: no URL, the request type on our WebSocket attributes
            shape = self._shapes.get(details.context.session_id)
            _websocket(attrs, None if shape is None else shape.websocket)
            if details.route is not None:
                attrs[A.WS_REQUEST] = details.route
            return
        if details.method is not None:
            attrs[A.HTTP_METHOD] = details.method
        if details.route is not None:
            attrs[A.URL_TEMPLATE] = details.route
        if details.server_address is not None:
            attrs[A.SERVER_ADDRESS] = details.server_address
        if details.server_port is not None:
            attrs[A.SERVER_PORT] = details.server_port

    def _attempt(
        self, record: Operation, attempt: Attempt, parent: SpanContext, in_band: bool
    ) -> ReadableSpan:
        details = attempt.details
        op = details.operation
        if not attempt.span_id:
            attempt.span_id = self._ids.span_id()
        attrs: dict[str, Any] = {}
        self._endpoint(attrs, record, in_band)
        if details.resend_count:
            # semantic conventions: set on every resend, whatever its cause, absent on the first try
            attrs[A.RESEND_COUNT] = details.resend_count
        if details.resend_reason is not None:
            attrs[A.RESEND_REASON] = details.resend_reason.value
        if details.status is not None:
            _raw_status(attrs, details.status)
        if details.event is not None:
            _failure(attrs, details.event)
        if op.method is not None and op.route is not None:
            name = f"{op.method} {op.route}"
        else:
            name = op.route if in_band and op.route is not None else op.operation
        return self.span(
            name,
            context_of(parent.trace_id, attempt.span_id),
            parent,
            attrs,
            attempt.start,
            attempt.end,
            kind=SpanKind.CLIENT,
            status=ERROR if details.event is not None else UNSET,
        )

    # -- session segments ---------------------------------------------------------------------------
    def emit_segment(self, segment: Segment, correlation: Correlation | None) -> None:
        spans: list[ReadableSpan] = []
        context = context_of(*segment.ids)
        shape = self._shapes.get(segment.session_id)
        attrs: dict[str, Any] = {}
        correlate(attrs, correlation or Correlation(segment.session_id))
        attrs[A.SEGMENT] = segment.state.value
        attrs[A.SEGMENT_INDEX] = segment.index
        if segment.next_state is not None:
            attrs[A.SEGMENT_NEXT] = segment.next_state.value
        if segment.end_reason is not None:
            attrs[A.SEGMENT_END_REASON] = segment.end_reason
        if segment.attempt:
            attrs[A.RECONNECT_ATTEMPT] = segment.attempt
        if segment.dropped_events:
            attrs[A.DROPPED_EVENTS] = segment.dropped_events
        if shape is not None:
            attrs[A.SESSION_KIND] = shape.kind
            attrs[A.PLATFORM] = shape.platform
            attrs[A.CHANNEL] = shape.channel
            if shape.websocket is not None:
                _websocket(attrs, shape.websocket)
        failed = self._segment_outcome(segment, attrs)
        events = [self._error_event(at, event) for at, event in segment.errors or ()]
        events += [
            Event(A.THROTTLED, {A.THROTTLE_RETRY_IN_S: retry_in, A.THROTTLE_DELAY_S: delay}, at)
            for at, retry_in, delay in segment.throttled or ()
        ]
        links = []
        if segment.previous is not None:
            links.append(Link(context_of(*segment.previous), {A.LINK_RELATION: "previous_segment"}))
        if segment.first is not None and segment.first != segment.previous:
            links.append(Link(context_of(*segment.first), {A.LINK_RELATION: "first_segment"}))
        spans.append(
            self.span(
                f"session.{segment.state}", context, None, attrs, segment.start, segment.end,
                status=ERROR if failed else UNSET, events=events, links=links,
            )
        )  # fmt: skip
        last_child_end = segment.start
        for child in segment.children or ():
            self._operation(child, context, spans)
            last_child_end = max(last_child_end, child.end)
        if segment.state is SessionState.CONNECTING and shape is not None and shape.websocket is not None:
            spans.append(self._handshake(segment, shape, context, last_child_end, failed))
        self.emit(spans)

    def _segment_outcome(self, segment: Segment, attrs: dict[str, Any]) -> bool:
        """Termination or failure attributes; True when the segment ended in a failure."""
        termination = segment.termination
        if isinstance(termination, SessionTerminated):
            attrs[A.TERMINATION_REASON] = termination.reason.value
            if termination.trigger is not None:
                attrs[A.TERMINATION_TRIGGER] = termination.trigger.value
            if termination.code is not None:
                attrs[A.ERROR_TYPE] = termination.code
            if termination.raw_code is not None:
                attrs[A.RAW_CODE] = termination.raw_code
            _raw_status(attrs, termination.raw_status)
            return termination.reason not in _CLEAN_ENDS
        if segment.next_state is SessionState.RECONNECTING and segment.end_reason is not None:
            # the transition's reason is the semantic code of the failure that moved it
            attrs[A.ERROR_TYPE] = segment.end_reason
            last = segment.last_error()
            if last is not None:
                _raw_status(attrs, last.raw_status)
            return True
        return False

    def _error_event(self, at: int, event: SdkErrorEvent) -> Event:
        attrs: dict[str, Any] = {}
        _failure(attrs, event)
        _raw_status(attrs, event.raw_status)
        return Event(A.ERROR_CLASSIFIED, attrs, at)

    def _handshake(
        self, segment: Segment, shape: SessionShape, parent: SpanContext, start: int, failed: bool
    ) -> ReadableSpan:
        """The WebSocket opening handshake of a session start, timed from its last REST step."""
        attrs: dict[str, Any] = {}
        _websocket(attrs, shape.websocket)
        if segment.attempt:
            # the upgrade is an HTTP request resent once per reconnection
            attrs[A.RESEND_COUNT] = segment.attempt
            attrs[A.RESEND_REASON] = "reconnect"
        last = segment.last_error() if failed else None
        if last is not None:
            _failure(attrs, last)
            _raw_status(attrs, last.raw_status)
            if last.raw_status is not None and last.raw_status >= CloseCode.NORMAL_CLOSURE:
                # closed after it opened: the upgrade itself was answered 101
                attrs[A.HTTP_STATUS] = A.SWITCHING_PROTOCOLS
        elif failed and segment.end_reason is not None:
            attrs[A.ERROR_TYPE] = segment.end_reason
        elif segment.next_state is SessionState.ACTIVE:
            # the session went active over this socket: its upgrade was answered 101
            attrs[A.HTTP_STATUS] = A.SWITCHING_PROTOCOLS
        path = shape.websocket[2] if shape.websocket is not None else ""
        return self.span(
            f"websocket.open {path}".rstrip(),
            context_of(parent.trace_id, self._ids.span_id()),
            parent,
            attrs,
            start,
            segment.end,
            kind=SpanKind.CLIENT,
            status=ERROR if failed else UNSET,
        )
