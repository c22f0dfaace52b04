"""Attribute, span, event and metric names: the one list docs/telemetry.md documents.

OpenTelemetry semantic-convention names where one exists (``session.id``, ``error.type``,
``http.request.resend_count``, ``url.template``, ``server.address`` ...); everything else lives
under one project namespace, ``session_supervisor.``. WebSocket connections have no stable
convention: they carry ``network.transport=tcp``, ``network.protocol.name=websocket`` and our
``session_supervisor.websocket.*`` attributes.
"""

from __future__ import annotations

from typing import Final

NS: Final = "session_supervisor"

# -- semantic conventions ---------------------------------------------------------------------------
SESSION_ID: Final = "session.id"
ERROR_TYPE: Final = "error.type"
RESEND_COUNT: Final = "http.request.resend_count"
HTTP_METHOD: Final = "http.request.method"
HTTP_STATUS: Final = "http.response.status_code"
URL_TEMPLATE: Final = "url.template"
SERVER_ADDRESS: Final = "server.address"
SERVER_PORT: Final = "server.port"
NETWORK_TRANSPORT: Final = "network.transport"
NETWORK_PROTOCOL: Final = "network.protocol.name"
SERVICE_NAME: Final = "service.name"
SERVICE_VERSION: Final = "service.version"
SERVICE_INSTANCE: Final = "service.instance.id"
TELEMETRY_SDK_LANGUAGE: Final = "telemetry.sdk.language"
TELEMETRY_SDK_NAME: Final = "telemetry.sdk.name"
TELEMETRY_SDK_VERSION: Final = "telemetry.sdk.version"
# the semantic-conventions version these names follow (every name above is in it), on the resource
# and the instrumentation scope: a backend that knows the schema can translate a later rename
SCHEMA_URL: Final = "https://opentelemetry.io/schemas/1.44.0"
# the status of a WebSocket opening handshake that succeeded (RFC 6455 section 4.2.2: 101 Switching Protocols)
SWITCHING_PROTOCOLS: Final = 101

# -- correlation (docs/runtime.md: sessionId, agentId, conversationId, platformSessionId) ----------
AGENT_ID: Final = f"{NS}.agent.id"
CONVERSATION_ID: Final = f"{NS}.conversation.id"
PLATFORM_SESSION_ID: Final = f"{NS}.platform_session.id"
# a named tenant's session ([tenants.NAME]); absent for the default tenant's
TENANT: Final = f"{NS}.tenant"
PLATFORM: Final = f"{NS}.platform"
CHANNEL: Final = f"{NS}.channel"

# -- operations and attempts ------------------------------------------------------------------------
OPERATION: Final = f"{NS}.operation"
ATTEMPTS: Final = f"{NS}.operation.attempts"
RESEND_REASON: Final = f"{NS}.resend.reason"
ERROR_CLASS: Final = f"{NS}.error.class"
RAW_CODE: Final = f"{NS}.error.raw_code"
CANCELLED: Final = f"{NS}.operation.cancelled"
CIRCUIT_ID: Final = f"{NS}.circuit.id"

# the span event of a backoff decision, and its attributes
RETRY_SCHEDULED: Final = "retry.scheduled"
RETRY_DELAY_MS: Final = f"{NS}.retry.delay_ms"
RETRY_REASON: Final = f"{NS}.retry.reason"
RETRY_FROM_RETRY_AFTER: Final = f"{NS}.retry.from_retry_after"
RETRY_BUDGET_REFUSED: Final = f"{NS}.retry.budget_refused"
RETRY_POLICY: Final = f"{NS}.retry.policy"
RETRY_ATTEMPT: Final = f"{NS}.retry.attempt"
RETRY_KIND: Final = f"{NS}.retry.kind"
RETRY_GIVE_UP: Final = f"{NS}.retry.give_up"

# -- session lifetime segments ----------------------------------------------------------------------
SEGMENT: Final = f"{NS}.session.segment"
SEGMENT_INDEX: Final = f"{NS}.session.segment_index"
SEGMENT_NEXT: Final = f"{NS}.session.next_state"
SEGMENT_END_REASON: Final = f"{NS}.session.end_reason"
RECONNECT_ATTEMPT: Final = f"{NS}.reconnect.attempt"
TERMINATION_REASON: Final = f"{NS}.termination.reason"
TERMINATION_TRIGGER: Final = f"{NS}.termination.trigger"
LINK_RELATION: Final = f"{NS}.link.relation"
SESSION_KIND: Final = f"{NS}.session.kind"
# span events not kept on a long segment (MAX_EVENTS per kind are)
DROPPED_EVENTS: Final = f"{NS}.session.dropped_events"

# -- WebSocket (no stable semantic convention) ------------------------------------------------------
WS_CLOSE_CODE: Final = f"{NS}.websocket.close_code"
WS_URL_TEMPLATE: Final = f"{NS}.websocket.url.template"
# the request type of an in-band socket request (Web Messaging ``onMessage``)
WS_REQUEST: Final = f"{NS}.websocket.request"

# -- circuits ---------------------------------------------------------------------------------------
CIRCUIT_STATE: Final = f"{NS}.circuit.state"
CIRCUIT_NEXT: Final = f"{NS}.circuit.next_state"
CIRCUIT_REASON: Final = f"{NS}.circuit.reason"
CIRCUIT_FAILURES: Final = f"{NS}.circuit.consecutive_failures"
CIRCUIT_OPEN_S: Final = f"{NS}.circuit.open_s"
CIRCUIT_TRIPS: Final = f"{NS}.circuit.trips"
CIRCUIT_PROBE: Final = f"{NS}.circuit.probe_id"
CIRCUIT_TRANSITION: Final = "circuit.transition"
# span events on a session segment
ERROR_CLASSIFIED: Final = "error.classified"
THROTTLED: Final = "reconnection.throttled"
THROTTLE_RETRY_IN_S: Final = f"{NS}.reconnect.retry_in_s"
THROTTLE_DELAY_S: Final = f"{NS}.reconnect.delay_s"
CIRCUIT_FROM: Final = f"{NS}.circuit.from"
CIRCUIT_TO: Final = f"{NS}.circuit.to"
CIRCUIT_TRIGGER: Final = f"{NS}.circuit.trigger"

# -- metric-only labels -----------------------------------------------------------------------------
SESSION_STATE: Final = f"{NS}.session.state"
OUTCOME: Final = f"{NS}.outcome"
CREDENTIAL: Final = f"{NS}.credential"

# -- metric names: every instrument's, in this one list (docs/telemetry.md, "Metrics"; Prometheus spells
# them with underscores, a ``_total`` suffix on counters: docs/monitoring/README.md) ---------------------
M_SESSIONS: Final = f"{NS}.sessions"
M_RECONNECT_ATTEMPTS: Final = f"{NS}.reconnection.attempts"
M_RECONNECT_OUTCOMES: Final = f"{NS}.reconnection.outcomes"
M_RETRIES: Final = f"{NS}.retries"
M_RETRY_EXHAUSTED: Final = f"{NS}.retry.exhausted"
M_CIRCUIT_STATE: Final = f"{NS}.circuit.state"
M_CIRCUIT_TRANSITIONS: Final = f"{NS}.circuit.transitions"
M_TOKEN_FETCHES: Final = f"{NS}.token.fetches"
M_TOKEN_REFRESHES: Final = f"{NS}.token.refreshes"
M_TOKEN_FAILURES: Final = f"{NS}.token.refresh_failures"
M_HANDSHAKE_REFUSALS: Final = f"{NS}.handshake.refusals"
M_TERMINATIONS: Final = f"{NS}.session.terminations"
M_SINK_FAILURES: Final = f"{NS}.bus.sink_failures"
M_EXPORT_FAILURES: Final = f"{NS}.telemetry.export_failures"
M_PACING_RATE: Final = f"{NS}.pacing.rate"
M_PACING_CHANGES: Final = f"{NS}.pacing.changes"
PACING_ENDPOINT: Final = f"{NS}.pacing.endpoint"
PACING_KIND: Final = f"{NS}.pacing.kind"
PACING_REASON: Final = f"{NS}.pacing.reason"
# beyond the seed (docs/runtime.md, "Admission"): retries an endpoint's retry budget refused, by endpoint
M_RETRY_BUDGET_REFUSALS: Final = f"{NS}.retry.budget_refusals"
ENDPOINT: Final = f"{NS}.endpoint"
# attribute updates (docs/attributes.md): waiting in the durable outbox; keys verification could not repair
M_OUTBOX_DEPTH: Final = f"{NS}.attributes.outbox_depth"
M_ATTRIBUTE_MISMATCHES: Final = f"{NS}.attributes.mismatches"
M_SUBSCRIBERS: Final = f"{NS}.api.subscribers"
M_LAGGED_NOTICES: Final = f"{NS}.api.lagged_notices"
M_LAGGED_DISCONNECTS: Final = f"{NS}.api.lagged_disconnects"
# [taxonomy] shadow (docs/taxonomy.md, "Shadow"): every failure the shadow version routes otherwise
M_SHADOW_DIVERGENCES: Final = f"{NS}.taxonomy.shadow_divergences"
TAXONOMY_ACTIVE_CODE: Final = f"{NS}.taxonomy.active_code"
TAXONOMY_SHADOW_CODE: Final = f"{NS}.taxonomy.shadow_code"
