"""What a simulator saw (docs/simulators.md), shared by the Genesys and CXone simulators.

Benchmarks and tests assert on these counts, never on client logs. Nothing secret is kept:
tokens are counted, never stored; idempotency keys and message ids are client-chosen
identifiers, not secrets.

Public API (stable; the CXone simulator builds on it)::

    rec = Recorder(clock)
    rec.record_attempt("webmessaging", accepted=True)       # one WebSocket/HTTP connection attempt
    rec.handshake_started("webmessaging"); rec.handshake_ended("webmessaging")   # upgrades being answered
    rec.record_request("PATCH", "/api/v2/conversations/{conversationId}/participants/{pid}/attributes",
                       202, idempotency_key=None, message_id=None)
    rec.record_token("issued" | "refreshed" | "rejected" | "expired" | "revoked", grant="client_credentials")
    rec.record_attributes("conv-id", {"k": "v"})            # what the simulator persisted (merged)
    rec.record_attributes_dropped("conv-id", {"k": "v"})     # accepted but not persisted (fault)
    rec.record_ws_message("webmessaging", "in", "configureSession")   # frames by listener/direction/kind
    rec.record_fault_hit(fault)                              # a fault applied once
    rec.record_event("close", listener="streaming", code=1001)   # anything else worth counting

    rec.attempts_per_second(listener=None)   # [{"t": epoch_second, "accepted": n, "refused": n}, ...]
    rec.peak_attempts_per_second(listener=None, which="all"|"accepted"|"refused") -> int
    rec.peak_handshakes(listener=None) -> int   # most upgrades being answered at once (in flight)
    rec.request_count(method=None, endpoint=None, status=None) -> int
    rec.idempotency_keys() -> dict[str, int]   # key/message id -> times seen
    rec.tokens() -> dict[str, int]             # {"issued": n, "refreshed": n, ...}
    rec.attributes(conversation_id) -> dict[str, str]
    rec.snapshot() -> dict                     # JSON-able, what GET /stats returns
    rec.reset()

``snapshot()`` shape::

    {"attempts": {"<listener>": [{"t": 1715679131, "accepted": 3, "refused": 1}, ...]},
     "attempts_total": {"<listener>": {"accepted": n, "refused": n}},
     "peak_attempts_per_second": {"<listener>": {"all": n, "accepted": n, "refused": n}},
     "peak_handshakes": {"<listener>": n},
     "connections_open": {"<listener>": n},
     "requests": [{"method": "GET", "endpoint": "/api/v2/...", "status": 200, "count": n}, ...],
     "idempotency_keys": {"<key>": n},   "message_ids": {"<id>": n},
     "tokens": {"issued": n, "refreshed": n, "rejected": n, "expired": n, "revoked": n},
     "tokens_by_grant": {"client_credentials": n, ...},
     "attributes": {"<conversationId>": {"k": "v"}},
     "attributes_dropped": {"<conversationId>": n},
     "ws_messages": [{"listener": "webmessaging", "direction": "in", "kind": "echo", "count": n}, ...],
     "fault_hits": {"<fault id>": {"kind": "drop", "hits": n}},
     "events": [{"event": "close", "listener": "...", "code": 1001, "count": n}, ...],
     "loop_stalls": {"watched": true, "count": n, "total_s": s, "longest_s": s,
                     "recent": [[epoch_s, s], ...]}}   # {"watched": false} unless watched

The loop's stalls (supervisor/sim/loop_stalls.py) are the simulator's own: attempts sent evenly
during one are stamped together after it, in one second's bucket.

Attempt buckets are whole seconds of ``clock.time()`` (the same windows the ADMISSION_LIMIT fault uses).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import TYPE_CHECKING, Any, Literal

from supervisor.clock import Clock, SystemClock
from supervisor.sim.loop_stalls import LoopStalls

if TYPE_CHECKING:
    from supervisor.sim.faults import Fault

__all__ = ["Recorder", "TokenEvent"]

TokenEvent = Literal["issued", "refreshed", "rejected", "expired", "revoked"]
_TOKEN_EVENTS: tuple[TokenEvent, ...] = ("issued", "refreshed", "rejected", "expired", "revoked")


class Recorder:
    """Counters of what a simulator saw; cheap enough for every request and frame."""

    def __init__(self, clock: Clock | None = None) -> None:
        self._clock: Clock = clock if clock is not None else SystemClock()
        #: the simulator's own loop stalls, when something watches them (``session-supervisor sim``)
        self.loop_stalls: LoopStalls | None = None
        self.reset()

    def reset(self) -> None:
        """Forget everything recorded so far (``POST /stats/reset``); open connections stay counted."""
        # listener -> second -> [accepted, refused]
        self._attempts: dict[str, dict[int, list[int]]] = defaultdict(dict)
        self._requests: Counter[tuple[str, str, int]] = Counter()
        self._idem: Counter[str] = Counter()
        self._message_ids: Counter[str] = Counter()
        self._tokens: Counter[str] = Counter()
        self._grants: Counter[str] = Counter()
        self._attributes: dict[str, dict[str, Any]] = {}
        self._dropped: Counter[str] = Counter()
        self._ws: Counter[tuple[str, str, str]] = Counter()
        self._faults: dict[str, tuple[str, int]] = {}
        self._events: Counter[tuple[tuple[str, Any], ...]] = Counter()
        if not hasattr(self, "_open"):
            self._open: Counter[str] = Counter()
            # upgrades being answered now (they stay counted across a reset, like open connections)
            self._handshaking: Counter[str] = Counter()
        self._peak_handshakes: Counter[str] = Counter(self._handshaking)
        if self.loop_stalls is not None:
            self.loop_stalls.reset()

    # -- recording ----------------------------------------------------------------------------------

    def record_attempt(self, listener: str, *, accepted: bool) -> None:
        """One connection attempt (a WebSocket handshake) on ``listener``, admitted or refused."""
        second = int(self._clock.time())
        bucket = self._attempts[listener].get(second)
        if bucket is None:
            bucket = self._attempts[listener][second] = [0, 0]
        bucket[0 if accepted else 1] += 1

    def handshake_started(self, listener: str) -> None:
        """An upgrade request on ``listener`` is being answered (LATENCY and admission included)."""
        answering = self._handshaking[listener] = self._handshaking[listener] + 1
        if answering > self._peak_handshakes[listener]:
            self._peak_handshakes[listener] = answering

    def handshake_ended(self, listener: str) -> None:
        """That upgrade was answered (accepted or refused), or its client went away meanwhile."""
        self._handshaking[listener] -= 1

    def connection_opened(self, listener: str) -> None:
        """A connection on ``listener`` completed its handshake."""
        self._open[listener] += 1

    def connection_closed(self, listener: str) -> None:
        """A connection on ``listener`` ended (whatever the reason)."""
        self._open[listener] -= 1

    def record_request(
        self,
        method: str,
        endpoint: str,
        status: int,
        *,
        idempotency_key: str | None = None,
        message_id: str | None = None,
    ) -> None:
        """One HTTP request answered with ``status``; ``endpoint`` is the route template, not the path."""
        self._requests[(method, endpoint, status)] += 1
        if idempotency_key:
            self._idem[idempotency_key] += 1
        if message_id:
            self._message_ids[message_id] += 1

    def record_token(self, event: TokenEvent, *, grant: str | None = None) -> None:
        """A token issued, refreshed, rejected (bad client), or found expired/revoked on use."""
        self._tokens[event] += 1
        if grant and event in ("issued", "refreshed"):
            self._grants[grant] += 1

    def record_attributes(self, conversation_id: str, attributes: dict[str, Any]) -> None:
        """Attributes the simulator persisted for a conversation (merged into what it had)."""
        self._attributes.setdefault(conversation_id, {}).update(attributes)

    def record_attributes_dropped(self, conversation_id: str, attributes: dict[str, Any]) -> None:
        """An attribute update answered as success but not persisted (SILENT_DROP_ATTRIBUTES)."""
        del attributes  # the count is what matters; the payload is the client's to know
        self._dropped[conversation_id] += 1

    def record_ws_message(self, listener: str, direction: Literal["in", "out"], kind: str) -> None:
        """One WebSocket frame: ``kind`` is the action (in) or class/topic (out)."""
        self._ws[(listener, direction, kind)] += 1

    def record_fault_hit(self, fault: Fault) -> None:
        """A fault applied once (the simulators call this next to ``FaultController.match``)."""
        key = fault.id or "?"
        _, hits = self._faults.get(key, (fault.kind.value, 0))
        self._faults[key] = (fault.kind.value, hits + 1)

    def record_event(self, event: str, **labels: str | int | float | bool | None) -> None:
        """Count anything else (closes by code, heartbeats, evictions...); labels must be JSON scalars."""
        self._events[(("event", event), *sorted(labels.items()))] += 1

    # -- queries ------------------------------------------------------------------------------------

    def attempts_per_second(self, listener: str | None = None) -> list[dict[str, int]]:
        """Attempts per whole second, ascending, over one listener or all of them."""
        merged: dict[int, list[int]] = {}
        for name, buckets in self._attempts.items():
            if listener is not None and name != listener:
                continue
            for second, (acc, ref) in buckets.items():
                slot = merged.setdefault(second, [0, 0])
                slot[0] += acc
                slot[1] += ref
        return [{"t": t, "accepted": a, "refused": r} for t, (a, r) in sorted(merged.items())]

    def peak_attempts_per_second(
        self, listener: str | None = None, which: Literal["all", "accepted", "refused"] = "all"
    ) -> int:
        """The busiest second's attempts (accepted + refused, or one of them)."""
        best = 0
        for row in self.attempts_per_second(listener):
            value = row["accepted"] + row["refused"] if which == "all" else row[which]
            best = max(best, value)
        return best

    def peak_handshakes(self, listener: str | None = None) -> int:
        """The most upgrades being answered at once on one listener (or the most of any): what a
        client had in flight, as the platform saw it."""
        if listener is not None:
            return self._peak_handshakes[listener]
        return max(self._peak_handshakes.values(), default=0)

    def attempts_total(self, listener: str | None = None) -> dict[str, int]:
        """``{"accepted": n, "refused": n}`` over all seconds."""
        rows = self.attempts_per_second(listener)
        return {"accepted": sum(r["accepted"] for r in rows), "refused": sum(r["refused"] for r in rows)}

    def connections_open(self, listener: str | None = None) -> int:
        """Connections currently open on one listener or all."""
        if listener is not None:
            return self._open[listener]
        return sum(self._open.values())

    def request_count(
        self, method: str | None = None, endpoint: str | None = None, status: int | None = None
    ) -> int:
        """Requests matching every filter given (``endpoint`` is the route template)."""
        return sum(
            n
            for (m, e, s), n in self._requests.items()
            if (method is None or m == method)
            and (endpoint is None or e == endpoint)
            and (status is None or s == status)
        )

    def idempotency_keys(self) -> dict[str, int]:
        """Idempotency keys seen (header ``Idempotency-Key``) and how often."""
        return dict(self._idem)

    def message_ids(self) -> dict[str, int]:
        """Client message ids seen (message creation) and how often."""
        return dict(self._message_ids)

    def tokens(self) -> dict[str, int]:
        """Token events by kind: issued, refreshed, rejected, expired, revoked."""
        return {event: self._tokens[event] for event in _TOKEN_EVENTS}

    def attributes(self, conversation_id: str) -> dict[str, Any]:
        """What the simulator persisted for the conversation (empty when nothing)."""
        return dict(self._attributes.get(conversation_id, {}))

    def attributes_dropped(self, conversation_id: str) -> int:
        """How many updates to the conversation were silently dropped."""
        return self._dropped[conversation_id]

    def ws_messages(
        self, listener: str | None = None, direction: str | None = None, kind: str | None = None
    ) -> int:
        """WebSocket frames matching every filter given."""
        return sum(
            n
            for (li, d, k), n in self._ws.items()
            if (listener is None or li == listener)
            and (direction is None or d == direction)
            and (kind is None or k == kind)
        )

    def fault_hits(self, fault_id: str) -> int:
        """How often the fault applied."""
        return self._faults.get(fault_id, ("", 0))[1]

    def events(self, event: str, **labels: str | int | float | bool | None) -> int:
        """Count of ``record_event(event, **labels)`` calls whose labels include the ones given."""
        want = set(labels.items())
        total = 0
        for key, n in self._events.items():
            items = dict(key)
            if items.get("event") == event and want <= set(key):
                total += n
        return total

    def snapshot(self) -> dict[str, Any]:
        """Everything, JSON-able (``GET /stats``)."""
        listeners = sorted(set(self._attempts) | set(self._open))
        return {
            "attempts": {name: self.attempts_per_second(name) for name in sorted(self._attempts)},
            "attempts_total": {name: self.attempts_total(name) for name in sorted(self._attempts)},
            "peak_attempts_per_second": {
                name: {
                    "all": self.peak_attempts_per_second(name),
                    "accepted": self.peak_attempts_per_second(name, "accepted"),
                    "refused": self.peak_attempts_per_second(name, "refused"),
                }
                for name in sorted(self._attempts)
            },
            "peak_handshakes": {name: self._peak_handshakes[name] for name in sorted(self._peak_handshakes)},
            "connections_open": {name: self._open[name] for name in listeners},
            "requests": [
                {"method": m, "endpoint": e, "status": s, "count": n}
                for (m, e, s), n in sorted(self._requests.items())
            ],
            "idempotency_keys": dict(self._idem),
            "message_ids": dict(self._message_ids),
            "tokens": self.tokens(),
            "tokens_by_grant": dict(self._grants),
            "attributes": {cid: dict(attrs) for cid, attrs in self._attributes.items()},
            "attributes_dropped": dict(self._dropped),
            "ws_messages": [
                {"listener": li, "direction": d, "kind": k, "count": n}
                for (li, d, k), n in sorted(self._ws.items())
            ],
            "fault_hits": {fid: {"kind": kind, "hits": hits} for fid, (kind, hits) in self._faults.items()},
            "events": [{**dict(key), "count": n} for key, n in self._events.items()],
            "loop_stalls": ({"watched": False} if self.loop_stalls is None else self.loop_stalls.snapshot()),
        }
