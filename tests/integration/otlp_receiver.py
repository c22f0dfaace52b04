"""A real OTLP/HTTP receiver on loopback: decodes the exporter's protobuf payloads with opentelemetry-proto.

It stands where a collector would, so the tests see exactly what went over the wire (no
in-memory exporter stands in for it). It can also misbehave the ways a collector does:
answer 429 with a Retry-After, hang without answering, or be gone (``stop()``: the port then
refuses connections).
"""

from __future__ import annotations

import gzip
import threading
import zlib
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

_KINDS = {0: "UNSPECIFIED", 1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER"}
_STATUS = {0: "UNSET", 1: "OK", 2: "ERROR"}


def value_of(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    if which == "array_value":
        return tuple(value_of(v) for v in value.array_value.values)
    if which == "kvlist_value":
        return attrs_of(value.kvlist_value.values)
    return None if which is None else getattr(value, which)


def attrs_of(pairs: Any) -> dict[str, Any]:
    return {kv.key: value_of(kv.value) for kv in pairs if isinstance(kv, KeyValue)}


@dataclass
class Span:
    """One received span, decoded: ids as lowercase hex, attributes as a dict."""

    trace_id: str
    span_id: str
    parent_id: str
    name: str
    kind: str
    attributes: dict[str, Any]
    events: list[tuple[str, dict[str, Any], int]]
    links: list[tuple[str, str, dict[str, Any]]]
    status: str
    start: int
    end: int
    resource: dict[str, Any]
    # the schema URLs of the span's resource and of its instrumentation scope ("" when none)
    resource_schema_url: str = ""
    scope_schema_url: str = ""

    def attr(self, key: str, default: Any = None) -> Any:
        return self.attributes.get(key, default)


@dataclass
class Point:
    metric: str
    attributes: dict[str, Any]
    value: float
    time: int


@dataclass
class Received:
    """An HTTP request the receiver got (whatever it answered)."""

    path: str
    headers: dict[str, str]
    answered: int | None = None


@dataclass
class OtlpReceiver:
    """``ThreadingHTTPServer`` on 127.0.0.1 speaking OTLP/HTTP protobuf (``/v1/traces``, ``/v1/metrics``)."""

    spans: list[Span] = field(default_factory=list)
    points: list[Point] = field(default_factory=list)
    requests: list[Received] = field(default_factory=list)
    raw: list[bytes] = field(default_factory=list)
    # misbehaviour: answer this many requests with 429 + Retry-After, or hold every request open
    refuse: int = 0
    retry_after: str = "1"
    hang: bool = False

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._release = threading.Event()
        self.holding = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                receiver._handle(self)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # quiet: pytest shows what the tests assert

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="otlp-receiver", daemon=True)
        self._thread.start()
        self._stopped = False

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def stop(self) -> None:
        """Close the port (connections are refused from now on) and let any held request go."""
        if self._stopped:
            return
        self._stopped = True
        self._release.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def release(self) -> None:
        """Stop hanging: held requests are answered (200) and new ones too."""
        self.hang = False
        self._release.set()

    # -- what arrived ---------------------------------------------------------------------------------
    def trace(self, trace_id: str) -> list[Span]:
        with self._lock:
            return [s for s in self.spans if s.trace_id == trace_id]

    def named(self, name: str) -> list[Span]:
        with self._lock:
            return [s for s in self.spans if s.name == name]

    def by_id(self, span_id: str) -> Span | None:
        with self._lock:
            return next((s for s in self.spans if s.span_id == span_id), None)

    def children(self, span: Span) -> list[Span]:
        with self._lock:
            return sorted((s for s in self.spans if s.parent_id == span.span_id), key=lambda s: s.start)

    def latest(self, metric: str) -> dict[tuple[tuple[str, Any], ...], float]:
        """The last value of every series of ``metric`` (cumulative temporality)."""
        out: dict[tuple[tuple[str, Any], ...], tuple[int, float]] = {}
        with self._lock:
            for p in self.points:
                if p.metric == metric:
                    key = tuple(sorted(p.attributes.items()))
                    if key not in out or out[key][0] <= p.time:
                        out[key] = (p.time, p.value)
        return {k: v for k, (_, v) in out.items()}

    # -- the server side ----------------------------------------------------------------------------------
    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length", "0"))
        body = handler.rfile.read(length)
        received = Received(handler.path, {k.lower(): v for k, v in handler.headers.items()})
        with self._lock:
            self.requests.append(received)
            refuse = self.refuse > 0
            if refuse:
                self.refuse -= 1
        if self.hang and not self._release.is_set():
            with self._lock:
                self.holding += 1
            self._release.wait(30)
            if self._stopped:
                return
        if refuse:
            received.answered = 429
            handler.send_response(429)
            handler.send_header("Retry-After", self.retry_after)
            handler.send_header("Content-Length", "0")
            handler.end_headers()
            return
        encoding = handler.headers.get("Content-Encoding", "")
        if encoding == "gzip":
            body = gzip.decompress(body)
        elif encoding == "deflate":
            body = zlib.decompress(body)
        if handler.path.endswith("/v1/traces"):
            self._spans(body)
            answer = ExportTraceServiceResponse().SerializeToString()
        elif handler.path.endswith("/v1/metrics"):
            self._metrics(body)
            answer = ExportMetricsServiceResponse().SerializeToString()
        else:
            received.answered = 404
            handler.send_response(404)
            handler.send_header("Content-Length", "0")
            handler.end_headers()
            return
        received.answered = 200
        handler.send_response(200)
        handler.send_header("Content-Type", "application/x-protobuf")
        handler.send_header("Content-Length", str(len(answer)))
        handler.end_headers()
        handler.wfile.write(answer)

    def _spans(self, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        decoded = []
        for rs in request.resource_spans:
            resource = attrs_of(rs.resource.attributes)
            for ss in rs.scope_spans:
                for s in ss.spans:
                    decoded.append(
                        Span(
                            trace_id=s.trace_id.hex(),
                            span_id=s.span_id.hex(),
                            parent_id=s.parent_span_id.hex(),
                            name=s.name,
                            kind=_KINDS.get(s.kind, str(s.kind)),
                            attributes=attrs_of(s.attributes),
                            events=[(e.name, attrs_of(e.attributes), e.time_unix_nano) for e in s.events],
                            links=[
                                (ln.trace_id.hex(), ln.span_id.hex(), attrs_of(ln.attributes))
                                for ln in s.links
                            ],
                            status=_STATUS.get(s.status.code, str(s.status.code)),
                            start=s.start_time_unix_nano,
                            end=s.end_time_unix_nano,
                            resource=resource,
                            resource_schema_url=rs.schema_url,
                            scope_schema_url=ss.schema_url,
                        )
                    )
        with self._lock:
            self.raw.append(body)
            self.spans.extend(decoded)

    def _metrics(self, body: bytes) -> None:
        request = ExportMetricsServiceRequest()
        request.ParseFromString(body)
        decoded = []
        for rm in request.resource_metrics:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    which = m.WhichOneof("data")
                    data = getattr(m, which)
                    for p in getattr(data, "data_points", ()):
                        if which in ("sum", "gauge"):
                            value = p.as_int if p.WhichOneof("value") == "as_int" else p.as_double
                        else:
                            value = float(p.count)
                        decoded.append(Point(m.name, attrs_of(p.attributes), float(value), p.time_unix_nano))
        with self._lock:
            self.raw.append(body)
            self.points.extend(decoded)
