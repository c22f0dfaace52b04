"""What the exported spans promise against the OpenTelemetry semantic conventions (docs/telemetry.md,
"Attribute names"), checked on what a receiver decoded: the project's own OTLP receiver directly, and the
same checks on what a real collector passed on (tests/integration/test_rotel_roundtrip.py).
"""

from __future__ import annotations

from opentelemetry.sdk.version import __version__ as SDK_VERSION

from supervisor.telemetry import attributes as A
from tests.integration.otlp_receiver import Span

__all__ = ["semantic_convention_problems"]


def semantic_convention_problems(spans: list[Span]) -> list[str]:
    """Every broken promise, one line each (empty: all kept)."""
    problems: list[str] = []
    if not spans:
        return ["no span received"]
    by_id = {span.span_id: span for span in spans}
    for span in spans:
        where = f"{span.name} ({span.span_id})"
        parent = by_id.get(span.parent_id)
        # an attempt still waiting when the daemon stopped (a long poll) got no response
        cancelled = parent is not None and bool(parent.attr(A.CANCELLED))
        resource = span.resource
        if resource.get(A.TELEMETRY_SDK_VERSION) != SDK_VERSION:
            problems.append(
                f"{where}: resource telemetry.sdk.version={resource.get(A.TELEMETRY_SDK_VERSION)!r}"
            )
        if (resource.get(A.TELEMETRY_SDK_NAME), resource.get(A.TELEMETRY_SDK_LANGUAGE)) != (
            "opentelemetry",
            "python",
        ):
            problems.append(f"{where}: resource telemetry.sdk.name/language missing")
        if span.resource_schema_url != A.SCHEMA_URL or span.scope_schema_url != A.SCHEMA_URL:
            problems.append(f"{where}: schema_url {span.resource_schema_url!r} / {span.scope_schema_url!r}")
        # an HTTP attempt that succeeded got a response: its status is on it
        http_ok = (
            span.kind == "CLIENT"
            and span.attr(A.HTTP_METHOD) is not None
            and span.status != "ERROR"
            and not cancelled
        )
        if http_ok and not isinstance(span.attr(A.HTTP_STATUS), int):
            problems.append(f"{where}: a successful HTTP attempt without http.response.status_code")
        opened = span.kind == "CLIENT" and span.name.startswith("websocket.open") and span.status != "ERROR"
        if opened and span.attr(A.HTTP_STATUS) != A.SWITCHING_PROTOCOLS:
            problems.append(f"{where}: an opened WebSocket's handshake without status 101")
        if span.status == "ERROR" and span.attr(A.HTTP_STATUS) is None and span.attr(A.ERROR_TYPE) is None:
            problems.append(f"{where}: an error span without error.type")
        if span.name == "circuit.open" and not span.attr(A.ERROR_TYPE):
            problems.append(f"{where}: circuit.open without error.type")
    return problems
