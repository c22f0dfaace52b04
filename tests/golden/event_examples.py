"""The examples of the event-line golden test (tests/unit/test_event_lines_golden.py).

One or more example instances per concrete :class:`~supervisor.events.Event` subclass, each named
(the golden files are keyed by these names), covering every optional field present and absent and
every value of the enums an event line carries. Fixed values only: one ``seq``, one ``bootId``,
fixed timestamps and ids, so a line changes only when the wire format does.

The arguments are what production passes (the machines pass :class:`SessionState` and
:class:`CircuitState` members as ``source``/``target``; a retry gives up with a
:class:`GiveUpReason` *value*): a refactor that retypes a field changes these constructors, never the
golden lines. Also the RawError envelopes whose ``classify`` output (the typed SdkErrorEvent's own
JSON, the seed's section 1 contract) is kept golden.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from supervisor.api.events import (
    ControlCommand,
    Peer,
    PeerRefused,
    SocketApiListening,
    SubscriberDisconnected,
    TaxonomySwitched,
)
from supervisor.attributes.events import (
    AttributeMismatch,
    AttributeMismatchResolved,
    RateLimitBackpressure,
    RateLimitBackpressureReleased,
)
from supervisor.events import (
    CircuitClosed,
    CircuitHalfOpened,
    CircuitManual,
    CircuitOpened,
    CircuitTransition,
    ConnectionRolledOver,
    Correlation,
    CredentialAccepted,
    CredentialRefused,
    DaemonForcedExit,
    DaemonStarted,
    DaemonStopped,
    DaemonStopping,
    ErrorClassified,
    Event,
    EventsDropped,
    LogRecorded,
    ManualAction,
    PacingChanged,
    Published,
    ReconnectionThrottled,
    RetryAttempt,
    RetryExhausted,
    RetryKind,
    RetrySuccess,
    RolloverReason,
    SessionHandedOver,
    SessionTerminated,
    SessionTransition,
    ShadowDivergence,
    TaxonomyCaptureFailed,
    TerminationReason,
    TraceIds,
)
from supervisor.fleet.events import FleetDegraded, FleetRecovered
from supervisor.retry.backoff import GiveUpReason
from supervisor.runtime.reconcile import SessionReconciled
from supervisor.runtime.reload import ConfigReloaded, ConfigReloadFailed
from supervisor.store.events import StoreDegraded, StoreRecovered
from supervisor.store.model import Resolution
from supervisor.systemd.degraded import DaemonDegraded, DaemonRecovered
from supervisor.systemd.watchdog import WatchdogResumed, WatchdogWithheld
from supervisor.taxonomy import Jitter, RetryPolicy, Scope, SdkErrorEvent, TaxonomyClass, Trigger
from supervisor.vocabulary import CircuitState, EndpointId, Platform, SessionState

__all__ = [
    "BOOT_ID",
    "CLASSIFY_TAXONOMY",
    "ENVELOPES",
    "EXAMPLES",
    "SECRETS_IN_ENVELOPES",
    "SEQ",
    "SOCKET_CONFIG",
    "Example",
]

#: every example is published as this seq of this boot (the bus stamps these; fixed here)
SEQ: Final = 4711
BOOT_ID: Final = "0b5e2c7a-3d41-4f6e-9a1b-7c2d8e9f0a13"
#: the OpenTelemetry ids of a line that belongs to a span (32 and 16 lowercase hex digits)
TRACE: Final[TraceIds] = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7")

T0: Final = "2024-05-14T09:32:11.004Z"
T1: Final = "2024-05-14T09:32:15.718Z"
T2: Final = "2024-05-14T09:33:02.000Z"

CONVERSATION: Final = "9b5f7c1e-2d4a-4f5e-9a7b-1c2d3e4f5a6b"
AGENT: Final = "agent-19283"
CIRCUIT_WM: Final = "circuit:genesys:webmessaging"
CIRCUIT_CX: Final = "circuit:cxone:rest"

# the correlations the runtime attaches (SessionContext.correlation): all ids, some, the bare session
WM1: Final = Correlation("wm-1", agent_id=AGENT, conversation_id=CONVERSATION)
WM2: Final = Correlation("wm-2")
WM3: Final = Correlation("wm-3", agent_id=AGENT)
WM4: Final = Correlation("wm-4", agent_id=AGENT, conversation_id=CONVERSATION)
# a CXone agent session: its rolling platform session id
CX1: Final = Correlation("cx-1", agent_id="agent-7", conversation_id="c-7", platform_session_id="s-43")
# a Genesys notifications session: the channel id is the platform session id
NT1: Final = Correlation("nt-1", agent_id=AGENT, platform_session_id="streaming-1-5f0e")

#: the daemon configuration the socket form is rendered under: the board names a session's platform
#: and circuit from it (SESSION_TRANSITION reaches subscribers as a ``delta`` with those columns)
SOCKET_CONFIG: Final = """
[platforms.genesys]
loginUrl = "http://127.0.0.1:9"
apiUrl = "http://127.0.0.1:9"
webmessagingUrl = "ws://127.0.0.1:9"
deploymentId = "d-1"
""" + "".join(
    f'[[sessions]]\nid = "wm-{i}"\nplatform = "genesys"\nkind = "webmessaging"\nagentId = "{AGENT}"\n'
    for i in range(1, 5)
)

PEER: Final = Peer(pid=48213, uid=1000, gid=1000, groups=(1000, 27))
OPERATOR: Final = Peer(pid=51007, uid=1001, gid=1001)

# the policies an SdkErrorEvent names (its wire form shows the name only)
NETWORK: Final = RetryPolicy("network", 3, 1000, 30000, Jitter.ADDITIVE)
RATE_LIMIT: Final = RetryPolicy("rate_limit", 2, 1000, 60000, Jitter.FULL, honors_retry_after=True)
SERVER_ERROR: Final = RetryPolicy("server_error", 3, 500, 8000, Jitter.DECORRELATED, honors_retry_after=True)
TOKEN_REFRESH: Final = RetryPolicy("token_refresh", 1)
FAIL_FAST: Final = RetryPolicy("fail_fast", 0)
NONE: Final = RetryPolicy("none", 0)


@dataclass(frozen=True, slots=True)
class Example:
    """One event as the bus would hand it to the sinks, under a name the golden files key on."""

    name: str
    event: Event
    correlation: Correlation | None = None
    trace: TraceIds | None = None

    def published(self) -> Published:
        trace_id, span_id = self.trace if self.trace is not None else (None, None)
        return Published(SEQ, BOOT_ID, self.event, self.correlation, trace_id, span_id)


def _sdk(
    code: str,
    cls: TaxonomyClass,
    scope: Scope,
    policy: RetryPolicy,
    *,
    source: str,
    raw_status: int | None,
    raw_code: str | None,
    platform: str,
    channel: str,
    context: dict[str, object],
    retryable: bool = False,
    budget: int = 0,
    timestamp: str = T0,
    **rest: object,
) -> ErrorClassified:
    event = SdkErrorEvent(
        timestamp=timestamp,
        source=source,
        raw_status=raw_status,
        raw_code=raw_code,
        taxonomy_class=cls,
        retryable=retryable,
        max_retry_budget=budget,
        context=context,
        code=code,
        scope=scope,
        taxonomy_version="v2",
        policy=policy,
        platform=platform,
        channel=channel,
        **rest,  # type: ignore[arg-type]
    )
    return ErrorClassified(event)


def _terminated(
    session: str,
    reason: TerminationReason,
    trigger: Trigger | None,
    raw_status: int | None,
    raw_code: str | None,
    code: str | None,
    *,
    revokes: bool = False,
) -> SessionTerminated:
    return SessionTerminated(
        session, reason, trigger, raw_status, raw_code, T1, code, revokes_credential=revokes
    )


_WM_CONTEXT: Final = {"conversationId": CONVERSATION, "agentId": AGENT, "endpoint": None, "sessionId": "wm-2"}

EXAMPLES: Final[tuple[Example, ...]] = (
    # -- SESSION_TRANSITION: every state as from and to (the machines pass SessionState members) ----
    Example(
        "session_transition.validated",
        SessionTransition("wm-1", SessionState.CONNECTING, SessionState.ACTIVE, "validated", "VALIDATED", T0),
        WM1,
        TRACE,
    ),
    Example(
        "session_transition.connection_lost",
        SessionTransition(
            "wm-2", SessionState.ACTIVE, SessionState.RECONNECTING, "connection_lost", "ABNORMAL_CLOSURE", T0
        ),
        WM2,
    ),
    Example(
        "session_transition.reconnect_due",
        SessionTransition(
            "wm-3", SessionState.RECONNECTING, SessionState.CONNECTING, "reconnect", "RECONNECT_DUE", T1
        ),
        WM3,
    ),
    Example(
        "session_transition.hand_over",
        SessionTransition(
            "cx-1", SessionState.ACTIVE, SessionState.HANDED_OVER, "hand_over", "HANDED_OVER", T1
        ),
        CX1,
    ),
    Example(
        "session_transition.fail_fast",
        SessionTransition(
            "wm-4", SessionState.RECONNECTING, SessionState.TERMINATED, "fail_fast", "FAIL_FAST_TRIGGER", T1
        ),
        WM4,
    ),
    # a session the configuration no longer names (removed by a reload): no platform, no circuit
    Example(
        "session_transition.unconfigured_session",
        SessionTransition("gone-1", SessionState.ACTIVE, SessionState.TERMINATED, "stop", "STOPPED", T2),
        Correlation("gone-1"),
    ),
    # -- RETRY_ATTEMPT: a reconnection (no operation fields), an operation with each flag --------------
    Example(
        "retry_attempt.reconnect",
        RetryAttempt("wm-2", RetryKind.RECONNECT, 1, 4.71, "ABNORMAL_CLOSURE", "network", T0),
        WM2,
        TRACE,
    ),
    Example(
        "retry_attempt.operation",
        RetryAttempt(
            "cx-1", RetryKind.OPERATION, 2, 2.0, "SERVER_ERROR", "server_error", T0, "agent-session.state"
        ),
        CX1,
    ),
    Example(
        "retry_attempt.operation_from_retry_after",
        RetryAttempt(
            "cx-1",
            RetryKind.OPERATION,
            1,
            3.0,
            "RATE_LIMITED",
            "rate_limit",
            T0,
            "agent-session.poll",
            from_retry_after=True,
        ),
        CX1,
    ),
    Example(
        "retry_attempt.operation_token_refreshed",
        RetryAttempt(
            "nt-1",
            RetryKind.OPERATION,
            1,
            0.0,
            "TOKEN_EXPIRED",
            "token_refresh",
            T0,
            "notifications.channel.subscribe",
            token_refreshed=True,
        ),
        NT1,
    ),
    Example(
        "retry_attempt.operation_budget_refused",
        RetryAttempt(
            "wm-1",
            RetryKind.OPERATION,
            3,
            1.234,
            "SERVER_ERROR",
            "server_error",
            T1,
            "message.create",
            budget_refused=True,
        ),
        WM1,
    ),
    # -- RETRY_SUCCESS ---------------------------------------------------------------------------------
    Example("retry_success.reconnect", RetrySuccess("wm-2", RetryKind.RECONNECT, 3, timestamp=T1), WM2),
    Example(
        "retry_success.operation",
        RetrySuccess("nt-1", RetryKind.OPERATION, 1, "notifications.channel.create", timestamp=T1),
        NT1,
        TRACE,
    ),
    # -- RETRY_EXHAUSTED: each way to give up, and none ------------------------------------------------
    Example(
        "retry_exhausted.reconnect_horizon",
        RetryExhausted(
            "wm-2",
            RetryKind.RECONNECT,
            7,
            "ABNORMAL_CLOSURE",
            "network",
            GiveUpReason.HORIZON.value,
            timestamp=T2,
        ),
        WM2,
    ),
    # the circuit stayed open past the horizon: no failure was last (machines/session.py _give_up)
    Example(
        "retry_exhausted.reconnect_circuit_open",
        RetryExhausted(
            "wm-3",
            RetryKind.RECONNECT,
            0,
            "CIRCUIT_OPEN",
            "circuit",
            GiveUpReason.HORIZON.value,
            timestamp=T2,
        ),
        WM3,
    ),
    Example(
        "retry_exhausted.reconnect_retry_after_ceiling",
        RetryExhausted(
            "wm-1",
            RetryKind.RECONNECT,
            1,
            "RATE_LIMITED",
            "rate_limit",
            GiveUpReason.RETRY_AFTER_EXCEEDS_CEILING.value,
            timestamp=T2,
        ),
        WM1,
    ),
    Example(
        "retry_exhausted.operation_budget",
        RetryExhausted(
            "cx-1",
            RetryKind.OPERATION,
            3,
            "SERVER_ERROR",
            "server_error",
            GiveUpReason.BUDGET_EXHAUSTED.value,
            "agent-session.state",
            timestamp=T2,
        ),
        CX1,
    ),
    Example(
        "retry_exhausted.operation_retry_budget",
        RetryExhausted(
            "nt-1",
            RetryKind.OPERATION,
            1,
            "SERVER_ERROR",
            "server_error",
            GiveUpReason.RETRY_BUDGET_EXHAUSTED.value,
            "notifications.channel.subscriptions",
            timestamp=T2,
        ),
        NT1,
    ),
    Example(
        "retry_exhausted.operation_no_reason",
        RetryExhausted(
            "cx-1",
            RetryKind.OPERATION,
            2,
            "NETWORK_TIMEOUT",
            "network",
            None,
            "agent-session.poll",
            timestamp=T2,
        ),
        CX1,
    ),
    # -- RECONNECTION_THROTTLED (seed edge case 1) -----------------------------------------------------
    Example("reconnection_throttled", ReconnectionThrottled("wm-2", 2, 12.5, 5.25, timestamp=T1), WM2),
    # -- SESSION_TERMINATED: the seed's JSON (section 3) for every trigger and every reason -----------
    Example(
        "session_terminated.oauth_token_invalid",
        _terminated(
            "wm-1",
            TerminationReason.FAIL_FAST_TRIGGER,
            Trigger.OAUTH_TOKEN_INVALID,
            401,
            "invalid_token",
            "OAUTH_TOKEN_INVALID",
            revokes=True,
        ),
        WM1,
        TRACE,
    ),
    Example(
        "session_terminated.sip_registration_failed",
        _terminated(
            "wm-3",
            TerminationReason.FAIL_FAST_TRIGGER,
            Trigger.SIP_REGISTRATION_FAILED,
            403,
            "FORBIDDEN",
            "SIP_REGISTRATION_FAILED",
        ),
        WM3,
    ),
    Example(
        "session_terminated.queue_full",
        _terminated(
            "cx-1", TerminationReason.FAIL_FAST_TRIGGER, Trigger.QUEUE_FULL, 429, "QUEUE_FULL", "QUEUE_FULL"
        ),
        CX1,
    ),
    Example(
        "session_terminated.conversation_state_drift",
        _terminated(
            "wm-4",
            TerminationReason.FAIL_FAST_TRIGGER,
            Trigger.CONVERSATION_STATE_DRIFT,
            200,
            "CONVERSATION_STATE_DRIFT",
            "CONVERSATION_STATE_DRIFT",
        ),
        WM4,
    ),
    Example(
        "session_terminated.duplicate_message_id",
        _terminated(
            "wm-1",
            TerminationReason.FAIL_FAST_TRIGGER,
            Trigger.DUPLICATE_MESSAGE_ID,
            409,
            "conflict",
            "DUPLICATE_MESSAGE_ID",
        ),
        WM1,
    ),
    Example(
        "session_terminated.incomplete_response",
        _terminated(
            "wm-2",
            TerminationReason.FAIL_FAST_TRIGGER,
            Trigger.INCOMPLETE_RESPONSE,
            200,
            "INCOMPLETE_RESPONSE",
            "INCOMPLETE_RESPONSE",
        ),
        WM2,
    ),
    Example(
        "session_terminated.token_refresh_failed",
        _terminated(
            "cx-1",
            TerminationReason.FAIL_FAST_TRIGGER,
            Trigger.TOKEN_REFRESH_FAILED,
            400,
            "invalid_grant",
            "TOKEN_REFRESH_FAILED",
            revokes=True,
        ),
        CX1,
    ),
    Example(
        "session_terminated.state_corrupting",
        _terminated(
            "wm-3", TerminationReason.STATE_CORRUPTING, None, 4006, "SessionHasExpired", "SESSION_EXPIRED"
        ),
        WM3,
    ),
    Example(
        "session_terminated.permanent_session_error",
        _terminated(
            "wm-4",
            TerminationReason.PERMANENT_SESSION_ERROR,
            None,
            1008,
            "POLICY_VIOLATION",
            "POLICY_VIOLATION",
        ),
        WM4,
    ),
    Example(
        "session_terminated.retry_exhausted",
        _terminated(
            "wm-2", TerminationReason.RETRY_EXHAUSTED, None, 1006, "ABNORMAL_CLOSURE", "ABNORMAL_CLOSURE"
        ),
        WM2,
    ),
    # exhausted while the circuit was open: no failure, so no raw status, code or trigger
    Example(
        "session_terminated.retry_exhausted_circuit_open",
        _terminated("wm-3", TerminationReason.RETRY_EXHAUSTED, None, None, None, None),
        WM3,
    ),
    Example(
        "session_terminated.graceful_close",
        _terminated("wm-1", TerminationReason.GRACEFUL_CLOSE, None, 1000, "NORMAL_CLOSURE", "GRACEFUL_CLOSE"),
        WM1,
    ),
    Example(
        "session_terminated.stopped",
        _terminated("nt-1", TerminationReason.STOPPED, None, None, None, None),
        NT1,
    ),
    # -- SESSION_HANDED_OVER: a stop with a store left the session alive for the next start -------------
    Example("session_handed_over.active", SessionHandedOver("cx-1", SessionState.ACTIVE, timestamp=T1), CX1),
    Example(
        "session_handed_over.reconnecting",
        SessionHandedOver("wm-2", SessionState.RECONNECTING, timestamp=T1),
        WM2,
    ),
    # -- SDK_ERROR_CLASSIFIED (seed section 1): trigger and every flag present and absent -------------
    # published without a correlation: the SdkErrorEvent's context carries the ids
    Example(
        "error_classified.rate_limited_retry_after",
        _sdk(
            "RATE_LIMITED",
            TaxonomyClass.TRANSIENT,
            Scope.OPERATION,
            RATE_LIMIT,
            source="GENESYS_PLATFORM_API_V2",
            raw_status=429,
            raw_code="too.many.requests",
            platform="genesys",
            channel="rest",
            context={
                "conversationId": CONVERSATION,
                "agentId": AGENT,
                "endpoint": f"PATCH /api/v2/conversations/{CONVERSATION}/participants/p-1/attributes",
            },
            retryable=True,
            budget=2,
            retry_after_ms=3000,
            details="Rate limit exceeded the maximum [300] requests within [60] seconds",
        ),
    ),
    Example(
        "error_classified.oauth_token_invalid",
        _sdk(
            "OAUTH_TOKEN_INVALID",
            TaxonomyClass.PERMANENT,
            Scope.SESSION,
            FAIL_FAST,
            source="CXONE_REST",
            raw_status=401,
            raw_code="invalid_token",
            platform="cxone",
            channel="rest",
            context={
                "conversationId": None,
                "agentId": "agent-7",
                "endpoint": "POST /inContactAPI/services/v23.0/agent-sessions/s-43/state",
                "sessionId": "cx-1",
                "authorization": "[REDACTED]",
            },
            trigger=Trigger.OAUTH_TOKEN_INVALID,
            revokes_credential=True,
            details="The access token expired",
        ),
        trace=TRACE,
    ),
    Example(
        "error_classified.abnormal_closure",
        _sdk(
            "ABNORMAL_CLOSURE",
            TaxonomyClass.TRANSIENT,
            Scope.SESSION,
            NETWORK,
            source="GENESYS_WEB_MESSAGING_V1",
            raw_status=1006,
            raw_code="ABNORMAL_CLOSURE",
            platform="genesys",
            channel="webmessaging",
            context=_WM_CONTEXT,
            retryable=True,
            budget=3,
            reconnect=True,
        ),
    ),
    Example(
        "error_classified.graceful_close",
        _sdk(
            "GRACEFUL_CLOSE",
            TaxonomyClass.NONE,
            Scope.SESSION,
            NONE,
            source="GENESYS_WEB_MESSAGING_V1",
            raw_status=1000,
            raw_code="NORMAL_CLOSURE",
            platform="genesys",
            channel="webmessaging",
            context=_WM_CONTEXT,
            graceful=True,
        ),
    ),
    Example(
        "error_classified.outcome_unknown",
        _sdk(
            "OUTCOME_UNKNOWN",
            TaxonomyClass.TRANSIENT,
            Scope.OPERATION,
            SERVER_ERROR,
            source="GENESYS_PLATFORM_API_V2",
            raw_status=504,
            raw_code="request.timeout",
            platform="genesys",
            channel="rest",
            context={
                "conversationId": CONVERSATION,
                "agentId": AGENT,
                "endpoint": "POST /api/v2/conversations/webmessaging/messages",
            },
            retryable=True,
            budget=3,
            reconcile_before_retry=True,
            details="The request timed out.",
        ),
    ),
    Example(
        "error_classified.token_expired",
        _sdk(
            "TOKEN_EXPIRED",
            TaxonomyClass.TRANSIENT,
            Scope.OPERATION,
            TOKEN_REFRESH,
            source="GENESYS_PLATFORM_API_V2",
            raw_status=401,
            raw_code="bad.credentials",
            platform="genesys",
            channel="rest",
            context={
                "conversationId": None,
                "agentId": AGENT,
                "endpoint": "GET /api/v2/users/me",
                "tokenExpired": True,
            },
            retryable=True,
            budget=1,
            replay_with_fresh_token=True,
            circuit_neutral=True,
            details="Invalid login credentials.",
        ),
    ),
    Example(
        "error_classified.session_expired",
        _sdk(
            "SESSION_EXPIRED",
            TaxonomyClass.STATE_CORRUPTING,
            Scope.SESSION,
            FAIL_FAST,
            source="GENESYS_WEB_MESSAGING_V1",
            raw_status=4006,
            raw_code="SessionHasExpired",
            platform="genesys",
            channel="webmessaging",
            context={"conversationId": None, "agentId": None, "endpoint": None},
            details="Session has expired.",
        ),
    ),
    Example(
        "error_classified.network_timeout_no_status",
        _sdk(
            "NETWORK_TIMEOUT",
            TaxonomyClass.TRANSIENT,
            Scope.OPERATION,
            NETWORK,
            source="CXONE_AGENT_SESSION_API",
            raw_status=None,
            raw_code="httpx.ReadTimeout",
            platform="cxone",
            channel="agent-session",
            context={
                "conversationId": None,
                "agentId": None,
                "endpoint": "GET /inContactAPI/services/v23.0/agent-sessions/s-44/get-next-event",
            },
            retryable=True,
            budget=3,
        ),
    ),
    # -- CONNECTION_ROLLED_OVER: every reason; code, previous and make-before-break present and absent --
    Example(
        "connection_rolled_over.platform_signal",
        ConnectionRolledOver(
            "nt-1",
            RolloverReason.PLATFORM_SIGNAL,
            "streaming-0-abc",
            "streaming-1-5f0e",
            True,
            0.8126,
            2,
            T1,
            "SOCKET_CLOSING",
        ),
        NT1,
    ),
    Example(
        "connection_rolled_over.channel_expiring",
        ConnectionRolledOver(
            "nt-1", RolloverReason.CHANNEL_EXPIRING, "streaming-0-abc", "streaming-1-5f0e", True, 1.5, 0, T1
        ),
        NT1,
    ),
    Example(
        "connection_rolled_over.token_expiring",
        ConnectionRolledOver(
            "nt-1", RolloverReason.TOKEN_EXPIRING, "streaming-0-abc", "streaming-1-5f0e", True, 0.25, 1, T1
        ),
        NT1,
    ),
    # the old channel was already gone (a 404): nothing to overlap with
    Example(
        "connection_rolled_over.token_replaced_break_before_make",
        ConnectionRolledOver(
            "nt-1", RolloverReason.TOKEN_REPLACED, None, "streaming-1-5f0e", False, 0.0, 0, T1
        ),
        NT1,
    ),
    # -- circuits: CIRCUIT_TRANSITION (every move) and the seed's CIRCUIT_BREAKER_* ------------------
    Example(
        "circuit_transition.trip",
        CircuitTransition(CIRCUIT_WM, CircuitState.CLOSED, CircuitState.OPEN, "trip", "ABNORMAL_CLOSURE", T0),
        trace=TRACE,
    ),
    Example(
        "circuit_transition.probe",
        CircuitTransition(
            CIRCUIT_WM, CircuitState.OPEN, CircuitState.HALF_OPEN, "probe", "OPEN_PERIOD_ELAPSED", T1
        ),
    ),
    Example(
        "circuit_transition.probe_succeeded",
        CircuitTransition(
            CIRCUIT_WM, CircuitState.HALF_OPEN, CircuitState.CLOSED, "probe_succeeded", "PROBE_SUCCEEDED", T2
        ),
    ),
    Example(
        "circuit_transition.probe_failed",
        CircuitTransition(
            CIRCUIT_CX, CircuitState.HALF_OPEN, CircuitState.OPEN, "probe_failed", "PROBE_TIMEOUT", T2
        ),
    ),
    Example(
        "circuit_breaker_open.trip",
        CircuitOpened(CIRCUIT_WM, "ABNORMAL_CLOSURE", 5, 30.0, 1, timestamp=T0),
        trace=TRACE,
    ),
    Example(
        "circuit_breaker_open.reopened", CircuitOpened(CIRCUIT_CX, "PROBE_FAILED", 1, 47.312, 2, timestamp=T2)
    ),
    Example("circuit_breaker_half_open", CircuitHalfOpened(CIRCUIT_WM, 1, timestamp=T1)),
    Example("circuit_breaker_closed", CircuitClosed(CIRCUIT_WM, 1, timestamp=T2)),
    # -- CIRCUIT_MANUAL: every action; an isolation with an end and one without -------------------
    Example(
        "circuit_transition.isolate",
        CircuitTransition(CIRCUIT_WM, CircuitState.CLOSED, CircuitState.ISOLATED, "isolate", "MANUAL", T0),
    ),
    Example(
        "circuit_manual.isolate_for",
        CircuitManual(
            CIRCUIT_WM,
            ManualAction.ISOLATE,
            CircuitState.OPEN,
            CircuitState.ISOLATED,
            1800.0,
            T2,
            timestamp=T0,
        ),
    ),
    Example(
        "circuit_manual.isolate",
        CircuitManual(
            CIRCUIT_CX, ManualAction.ISOLATE, CircuitState.CLOSED, CircuitState.ISOLATED, timestamp=T0
        ),
    ),
    Example(
        "circuit_manual.close",
        CircuitManual(
            CIRCUIT_WM, ManualAction.CLOSE, CircuitState.ISOLATED, CircuitState.CLOSED, timestamp=T1
        ),
    ),
    Example(
        "circuit_manual.expire",
        CircuitManual(
            CIRCUIT_WM, ManualAction.EXPIRE, CircuitState.ISOLATED, CircuitState.CLOSED, timestamp=T2
        ),
    ),
    Example(
        "circuit_manual.reset",
        CircuitManual(
            CIRCUIT_CX, ManualAction.RESET, CircuitState.HALF_OPEN, CircuitState.CLOSED, timestamp=T2
        ),
    ),
    # -- PACING_CHANGED: every reason; a rate and a previous rate absent (unpaced) --------------------
    Example(
        "pacing_changed.throttled",
        PacingChanged(
            EndpointId(Platform.GENESYS, "webmessaging"), "connect", 10.0, 20.0, "throttled", 3.0, T0
        ),
    ),
    Example(
        "pacing_changed.probe",
        PacingChanged(EndpointId(Platform.CXONE, "rest"), "rest", 12.3456, 6.1, "probe", 0.0, T1),
    ),
    Example(
        "pacing_changed.probe_from_unpaced",
        PacingChanged(EndpointId(Platform.CXONE, "rest"), "rest", 40.0, None, "probe", 0.0, T1),
    ),
    Example(
        "pacing_changed.pause",
        PacingChanged(EndpointId(Platform.GENESYS, "webmessaging"), "connect", 5.0, 5.0, "pause", 7.5, T1),
    ),
    Example(
        "pacing_changed.restart_unpaced",
        PacingChanged(EndpointId(Platform.GENESYS, "webmessaging"), "connect", None, 2.5, "restart", 0.0, T2),
    ),
    # -- the daemon's lifecycle -----------------------------------------------------------------------
    Example("daemon_started", DaemonStarted(50, "/etc/session-supervisor/config.toml")),
    Example("daemon_stopping", DaemonStopping(10.0)),
    Example(
        "daemon_stopped",
        DaemonStopped(
            {"sessions": 3, "states": {"active": 2, "terminated": 1}, "openCircuits": [], "tokenRefreshes": 4}
        ),
    ),
    Example(
        "daemon_forced_exit",
        DaemonForcedExit(
            {
                "sessions": 2,
                "states": {"reconnecting": 2},
                "openCircuits": [CIRCUIT_WM],
                "tokenRefreshes": 0,
            }
        ),
    ),
    Example("events_dropped", EventsDropped("stdout", 12, 40)),
    # a library's log record while run serves: the OTLP exporter's retry warning, and one with an exception
    Example(
        "log_record",
        LogRecorded(
            "warning",
            "opentelemetry.exporter.otlp.proto.http.trace_exporter",
            "Transient error Service Unavailable encountered while exporting span batch, retrying in 1s.",
            timestamp=T0,
        ),
    ),
    Example(
        "log_record_with_exception",
        LogRecorded(
            "error",
            "opentelemetry.sdk.trace.export",
            "Exception while exporting Span.",
            "ConnectionError: [Errno 111] Connection refused",
            timestamp=T0,
        ),
    ),
    # -- the taxonomy at run time ([taxonomy] shadow and capture: docs/taxonomy.md) -------------------
    Example(
        "shadow_divergence",
        ShadowDivergence("v2", "v2-site", "RATE_LIMITED", "THROTTLED", 12, ("code",), 60.0, timestamp=T1),
    ),
    Example(
        "shadow_divergence.same_code_routed_otherwise",
        ShadowDivergence(
            "v2",
            "v2-site",
            "SERVER_ERROR",
            "SERVER_ERROR",
            1,
            ("taxonomyClass", "retryable", "maxRetryBudget", "policy"),
            60.0,
            timestamp=T2,
        ),
    ),
    Example(
        "taxonomy_capture_failed",
        TaxonomyCaptureFailed(
            "/var/lib/session-supervisor/errors.ndjson", "No space left on device", 1520, timestamp=T2
        ),
    ),
    Example(
        "daemon_degraded",
        DaemonDegraded("store", "disk full: /var/lib/session-supervisor/state.db", timestamp=T0),
    ),
    Example("daemon_recovered", DaemonRecovered("store", 12.34567, T1)),
    Example("watchdog_withheld", WatchdogWithheld("event loop starved: 2.4 s late", timestamp=T0)),
    Example("watchdog_resumed", WatchdogResumed(timestamp=T1)),
    Example(
        "config_reloaded",
        ConfigReloaded(("wm-5",), ("wm-0",), ("cx-1", "cx-2"), 47, "v2", kept_down=("cx-9",)),
    ),
    Example("config_reloaded.nothing_changed", ConfigReloaded((), (), (), 50, "v1")),
    Example(
        "config_reloaded.restart_required",
        ConfigReloaded((), (), (), 50, "v2", restart_required=("store", "telemetry")),
    ),
    Example(
        "credential_refused",
        CredentialRefused(
            "genesys",
            "platforms.genesys.clientSecretFile: the genesys token endpoint refused the new credential "
            "(HTTP 401 AUTH_CLIENT_INVALID): the credential in use stays, nothing is reloaded",
            timestamp=T0,
        ),
    ),
    Example("credential_accepted", CredentialAccepted("genesys", True, timestamp=T1)),
    Example("credential_accepted.file_put_back", CredentialAccepted("cxone", False, timestamp=T1)),
    Example(
        "config_reload_failed",
        ConfigReloadFailed("config.toml: sessions[3].platform: expected 'genesys' or 'cxone', got 'avaya'"),
    ),
    # -- the socket API -------------------------------------------------------------------------------
    # a started session also reaches subscribers as a delta (reason STARTED: supervisor/api/board.py);
    # no runner exists where the golden is rendered, so its state there is the board's "unknown"
    Example(
        "control_command.start",
        ControlCommand("start", OPERATOR, True, T0, session_id="wm-1"),
    ),
    Example(
        "control_command.stop_refused",
        ControlCommand("stop", OPERATOR, False, T0, session_id="wm-9", error="NoSuchSession"),
    ),
    Example(
        "control_command.taxonomy_use",
        ControlCommand("taxonomy.use", PEER, True, T1, target="v2"),
    ),
    Example(
        "control_command.drain_permission_denied",
        ControlCommand("drain", OPERATOR, False, T2, error="PermissionDenied", required="administrator"),
    ),
    Example("taxonomy_switched", TaxonomySwitched("v1", "v2", "v2.toml", PEER, T1)),
    Example("socket_peer_refused", PeerRefused("control", OPERATOR, 3, T0, count=2)),
    Example("socket_peer_refused.first", PeerRefused("subscribe", OPERATOR, 1, T0)),
    Example("subscriber_disconnected", SubscriberDisconnected(PEER, "lagged", 4, T2)),
    Example(
        "socket_api_listening",
        SocketApiListening(
            "/run/user/1000/session-supervisor/subscribe.sock",
            "/run/user/1000/session-supervisor/control.sock",
        ),
    ),
    Example(
        "socket_api_listening.off",
        SocketApiListening(None, None, "disabled by sockets.enabled = false"),
    ),
    # -- attribute updates (seed edge case 2) ---------------------------------------------------------
    Example("rate_limit_backpressure", RateLimitBackpressure("genesys", 50, 50, 25, 1.5, T0)),
    Example("rate_limit_backpressure_released", RateLimitBackpressureReleased("genesys", 25, 7, T1)),
    Example(
        "attribute_mismatch",
        AttributeMismatch(
            "wm-1",
            CONVERSATION,
            ("priority", "customerTier"),
            (17, 18),
            {"priority": "still-wrong", "customerTier": "failed: SERVER_ERROR"},
            T1,
            {
                "priority": {"expected": "high", "server": "low"},
                "customerTier": {"expected": "gold", "server": None},
            },
        ),
        Correlation("wm-1", conversation_id=CONVERSATION),
    ),
    # only keys marked sensitive: their values never leave the daemon, so no "values"
    Example(
        "attribute_mismatch.sensitive_only",
        AttributeMismatch("wm-1", CONVERSATION, ("ssn",), (19,), {"ssn": "newer-value"}, T1),
        Correlation("wm-1", conversation_id=CONVERSATION),
    ),
    Example(
        "attribute_mismatch_resolved.resend",
        AttributeMismatchResolved(17, "wm-1", CONVERSATION, "priority", Resolution.RESEND.value, T2),
        Correlation("wm-1", conversation_id=CONVERSATION),
    ),
    Example(
        "attribute_mismatch_resolved.accept_server",
        AttributeMismatchResolved(
            18, "wm-1", CONVERSATION, "customerTier", Resolution.ACCEPT_SERVER.value, T2
        ),
        Correlation("wm-1", conversation_id=CONVERSATION),
    ),
    # -- the durable store ----------------------------------------------------------------------------
    Example(
        "store_degraded",
        StoreDegraded("/var/lib/session-supervisor/state.db", "database or disk is full", timestamp=T0),
    ),
    Example("store_recovered", StoreRecovered("/var/lib/session-supervisor/state.db", timestamp=T1)),
    # -- a fleet member -------------------------------------------------------------------------------
    Example(
        "fleet_degraded",
        FleetDegraded(
            "0b5e2c7a-3d41-4f6e-9a1b-7c2d8e9f0a13/5f1c02ab",
            "cannot reach the database (connection refused)",
            timestamp=T0,
        ),
    ),
    Example("fleet_recovered", FleetRecovered("0b5e2c7a-3d41-4f6e-9a1b-7c2d8e9f0a13/5f1c02ab", timestamp=T1)),
    Example(
        "session_reconciled.ended",
        SessionReconciled("wm-1", "genesys", "webmessaging", "ended", "guest session closed", T0),
        Correlation("wm-1", agent_id=AGENT, conversation_id=CONVERSATION),
    ),
    Example(
        "session_reconciled.not_cleanable",
        SessionReconciled(
            "nt-1",
            "genesys",
            "notifications",
            "not_cleanable",
            "a notifications channel cannot be deleted: it expires with its token",
            T0,
        ),
        Correlation("nt-1", agent_id=AGENT),
    ),
)

#: the taxonomy the classify golden runs under: v1 is frozen (tests/unit/test_taxonomy_loader.py
#: checks its digest), so only a change of the classifier or of the SdkErrorEvent's form moves these
CLASSIFY_TAXONOMY: Final = "v1"

#: RawError envelopes (docs/taxonomy.md) whose ``classify`` line is golden: every SdkErrorEvent field
#: present and absent (trigger, retryAfterMs, each flag v1 sets, details, a null rawStatus), and a
#: context whose secrets are redacted. Each carries a timestamp: the event's is the envelope's.
ENVELOPES: Final[tuple[tuple[str, str], ...]] = (
    (
        "rest_504_outcome_unknown",
        '{"platform":"genesys","channel":"rest","method":"POST","endpoint":"/api/v2/conversations/webmessaging/messages",'
        '"status":504,"body":{"message":"The request timed out.","code":"request.timeout","status":504},'
        '"context":{"conversationId":"conv-88472910","agentId":"agent-19283"},"timestamp":"2024-05-14T09:32:11.004Z"}',
    ),
    (
        "rest_429_retry_after",
        '{"platform":"genesys","channel":"rest","method":"GET","endpoint":"/api/v2/users/me","status":429,'
        '"headers":{"Retry-After":"3"},"body":{"message":"Rate limit exceeded","code":"too.many.requests","status":429},'
        '"timestamp":"2024-05-14T09:32:12.000Z"}',
    ),
    (
        "rest_401_token_expired",
        '{"platform":"genesys","channel":"rest","method":"GET","endpoint":"/api/v2/users/me","status":401,'
        '"body":{"message":"Invalid login credentials.","code":"bad.credentials","status":401},'
        '"context":{"agentId":"agent-19283","tokenExpired":true},"timestamp":"2024-05-14T09:40:00.000Z"}',
    ),
    (
        "rest_401_invalid_token_secrets_redacted",
        '{"platform":"cxone","channel":"rest","method":"POST","endpoint":"/inContactAPI/services/v23.0/agent-sessions/s-43/state?access_token=abcdef123456",'
        '"status":401,"headers":{"Authorization":"Bearer eyJhbGciOiJIUzI1NiJ9.e30.sig"},'
        '"body":{"error":"invalid_token","error_description":"The access token expired"},'
        '"context":{"agentId":"agent-7","refreshToken":"r-secret-1","note":"sent with Bearer abcdef123456"},'
        '"timestamp":"2024-05-14T09:50:04.000Z"}',
    ),
    (
        "rest_409_duplicate_message",
        '{"platform":"genesys","channel":"rest","method":"POST",'
        '"endpoint":"/api/v2/conversations/messages/9b5f7c1e-2d4a-4f5e-9a7b-1c2d3e4f5a6b/communications/c-1/messages",'
        '"status":409,"body":{"message":"Duplicate message id","code":"conflict","status":409},'
        '"timestamp":"2024-05-14T09:46:00.000Z"}',
    ),
    (
        "cxone_429_queue_full",
        '{"platform":"cxone","channel":"rest","method":"POST",'
        '"endpoint":"/inContactAPI/services/v23.0/agent-sessions/s-43/interactions/c-7/accept","status":429,'
        '"body":{"error_code":"QUEUE_FULL","error_message":"Queue capacity exhausted"},"context":{"agentId":"agent-7"},'
        '"timestamp":"2024-05-14T09:50:02.000Z"}',
    ),
    (
        "ws_1006_abnormal_closure",
        '{"platform":"genesys","channel":"webmessaging","closeCode":1006,'
        '"exception":"websockets.exceptions.ConnectionClosedError",'
        '"context":{"conversationId":"9b5f7c1e-2d4a-4f5e-9a7b-1c2d3e4f5a6b","sessionId":"wm-2"},'
        '"timestamp":"2024-05-14T09:48:00.000Z"}',
    ),
    (
        "ws_1000_graceful_close",
        '{"platform":"genesys","channel":"webmessaging","closeCode":1000,'
        '"exception":"websockets.exceptions.ConnectionClosedOK","timestamp":"2024-05-14T09:48:02.000Z"}',
    ),
    (
        "cxone_304_empty_poll",
        '{"platform":"cxone","channel":"agent-session","method":"GET",'
        '"endpoint":"/inContactAPI/services/v23.0/agent-sessions/s-41/get-next-event?timeout=30","status":304,'
        '"timestamp":"2024-05-14T09:50:00.000Z"}',
    ),
    (
        "exception_no_status",
        '{"platform":"cxone","channel":"agent-session","exception":"httpx.ReadTimeout",'
        '"endpoint":"GET /inContactAPI/services/v23.0/agent-sessions/s-44/get-next-event",'
        '"timestamp":"2024-05-14T09:50:06.000Z"}',
    ),
    (
        "notifications_socket_closing",
        '{"platform":"genesys","channel":"notifications","body":{"topicName":"v2.system.socket_closing","version":"2",'
        '"eventBody":{"message":"Socket closing for maintenance","reason":"maintenance"}},'
        '"timestamp":"2024-05-14T09:49:00.000Z"}',
    ),
)

#: the credentials ENVELOPES carry: none may appear in a classified line (docs/taxonomy.md, redaction)
SECRETS_IN_ENVELOPES: Final = ("abcdef123456", "eyJhbGciOiJIUzI1NiJ9", "r-secret-1")
