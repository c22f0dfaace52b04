"""Admission across a fleet (docs/runtime.md, "Admission across a fleet"): what one member learns of an
endpoint's load, every member applies, with no round trip per attempt.

Admission stays each member's own: its pacers, retry budgets and circuits (machines/endpoint.py),
decided in memory on the hot path. Three things cross members:

* **Throttles.** A 429 or 503 with Retry-After pauses the endpoint's pacer (its ``PACING_CHANGED``
  of reason ``throttled`` or ``pause``, ``pausedForS`` > 0). :class:`FleetAdmission` publishes it on
  ``ss_throttle`` (:class:`Hold`: the endpoint, its tenant, ``until`` as a wall-clock instant so that
  members with different monotonic clocks agree, the member); every other member holds the same
  endpoint until then (``Gate.hold``: the pause only, its own rate is not cut since it was not
  refused). Nothing is sent to that endpoint before the Retry-After ends, anywhere in the fleet,
  once the notice has arrived (milliseconds: an attempt admitted before may still leave).
* **Circuit openings.** A circuit that opens on its own failures (``CIRCUIT_BREAKER_OPEN``, any
  reason but ``FLEET``) is published on ``ss_circuit`` with the end of its open period; every other
  member opens its circuit of the endpoint until then (``Circuit.open_for_peer``, reason ``FLEET``,
  which is not published again), then probes it on its own.
* **The rates.** Each member paces at its share of the configured initial and maximum rates: the
  shards it owns out of 256 (:class:`RateShare`, recomputed whenever its leases change), so the
  members' rates add up to what one host is configured with.

A notice lost while the bus reconnects costs a member at most the platform's own refusal
(supervisor/fleet/bus.py says why that is acceptable). The clocks: ``until`` is wall-clock time, so
members whose clocks disagree by *d* hold the endpoint *d* too short or too long; NTP keeps *d* to
milliseconds, well within a Retry-After's one-second resolution (RFC 9110 section 10.2.3).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Final, Protocol, runtime_checkable

import anyio
import msgspec
from anyio.abc import TaskStatus

from machines.circuit import PEER_OPENED
from machines.registry import Endpoints
from supervisor.attempts import Attempts, Gate, Reports
from supervisor.clock import Clock
from supervisor.errors import StoreError
from supervisor.events import CircuitOpened, PacingChanged, Published
from supervisor.runtime.leases import Lease, Leases
from supervisor.store.shards import SHARDS
from supervisor.vocabulary import EndpointId

if TYPE_CHECKING:
    # psycopg is the postgres extra's: a daemon without it imports this module all the same
    from supervisor.fleet.bus import FleetBus, Notice

__all__ = [
    "CIRCUIT_CHANNEL",
    "THROTTLE_CHANNEL",
    "DeadlineSource",
    "FleetAdmission",
    "Hold",
    "RateShare",
    "share_of",
]

THROTTLE_CHANNEL: Final = "ss_throttle"
CIRCUIT_CHANNEL: Final = "ss_circuit"
#: the pacing moves that are a platform's Retry-After (or its default pause): a 429/503 refusal
_THROTTLE_REASONS: Final = frozenset({"throttled", "pause"})

Warn = Callable[[str], object]


class Hold(msgspec.Struct, frozen=True, forbid_unknown_fields=False):
    """What crosses the bus: ``endpoint`` (its id as ``str()`` writes it), its ``tenant`` (empty: the
    default one), its ``kind`` (connect, rest, token), ``until`` (wall-clock epoch seconds) and the
    ``member`` it happened to."""

    member: str
    endpoint: str
    tenant: str
    kind: str
    until: float


_decode_hold = msgspec.json.Decoder(Hold).decode
_encode = msgspec.json.Encoder().encode


class FleetAdmission:
    """Publishes this member's throttles and circuit openings, applies its peers' (module docstring).

    ``observe`` is an event bus sink (sync: it only notes what to send); ``serve`` sends, one notice
    per endpoint and channel with the latest ``until`` (a storm of refusals is one notice, not one per
    refusal). ``reports``: where a circuit a peer opened reports its move (the event bus).
    """

    def __init__(
        self,
        bus: FleetBus,
        attempts: Attempts,
        *,
        clock: Clock,
        reports: Reports,
        warn: Warn | None = None,
    ) -> None:
        self.member = bus.member
        self._bus = bus
        self._attempts = attempts
        self._clock = clock
        self._reports = reports
        self._warn = warn
        # (channel, endpoint) -> the hold to send; woken when one is added
        self._pending: dict[tuple[str, EndpointId], Hold] = {}
        self._wake = anyio.Event()
        #: notices sent, peers' holds applied, and notices that could not be sent (counters)
        self.published = 0
        self.applied = 0
        self.unsent = 0
        bus.on(THROTTLE_CHANNEL, self._peer_throttled)
        bus.on(CIRCUIT_CHANNEL, self._peer_opened)

    # -- this member's moves -----------------------------------------------------------------------

    def observe(self, published: Published) -> None:
        """The event bus sink: a throttle's pause or a circuit's opening is noted to be sent."""
        event = published.event
        if isinstance(event, PacingChanged):
            if event.reason in _THROTTLE_REASONS and event.paused_for_s > 0:
                self._note(THROTTLE_CHANNEL, event.endpoint, event.kind, event.paused_for_s)
        elif isinstance(event, CircuitOpened) and event.reason != PEER_OPENED:
            found = self._by_circuit(event.circuit_id)
            if found is not None:
                self._note(CIRCUIT_CHANNEL, found[0], found[1], event.open_s)

    def _by_circuit(self, circuit_id: str) -> tuple[EndpointId, str] | None:
        for name, endpoint in self._attempts.endpoints.all().items():
            if endpoint.circuit_id == circuit_id:
                return name, endpoint.kind.value
        return None

    def _note(self, channel: str, endpoint: EndpointId, kind: str, for_s: float) -> None:
        until = self._clock.time() + for_s
        key = (channel, endpoint)
        pending = self._pending.get(key)
        if pending is None or pending.until < until:
            self._pending[key] = Hold(self.member, str(endpoint), endpoint.tenant, kind, until)
            self._wake.set()

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Send what :meth:`observe` noted, until cancelled (the bus is served beside it)."""
        task_status.started()
        while True:
            await self._wake.wait()
            self._wake = anyio.Event()
            pending, self._pending = self._pending, {}
            for (channel, _endpoint), hold in pending.items():
                if hold.until <= self._clock.time():
                    continue  # over already: nobody needs to hold it
                try:
                    await self._bus.publish(channel, _encode(hold).decode())
                except StoreError as exc:
                    # the peers meet the platform's own refusal instead (supervisor/fleet/bus.py)
                    self.unsent += 1
                    if self._warn is not None:
                        self._warn(f"{exc}: a {channel} notice for {hold.endpoint} was not sent")
                else:
                    self.published += 1

    # -- the peers' moves --------------------------------------------------------------------------

    def _peer_throttled(self, notice: Notice) -> None:
        found = self._peer_hold(notice)
        if found is not None:
            gate, for_s = found
            gate.hold(self._clock.monotonic() + for_s)
            self.applied += 1

    def _peer_opened(self, notice: Notice) -> None:
        found = self._peer_hold(notice)
        if found is not None:
            gate, for_s = found
            gate.open_for_peer(for_s, self._reports)
            self.applied += 1

    def _peer_hold(self, notice: Notice) -> tuple[Gate, float] | None:
        """The gate a peer's notice is about and how much longer it holds; None when it is over, or
        not a notice this release reads (said once per notice)."""
        try:
            hold = _decode_hold(notice.payload)
            endpoint = EndpointId.parse(hold.endpoint)
        except (msgspec.DecodeError, msgspec.ValidationError, ValueError) as exc:
            if self._warn is not None:
                self._warn(f"fleet bus: a {notice.channel} notice that is not a hold was ignored ({exc})")
            return None
        if endpoint is None:
            return None
        for_s = hold.until - self._clock.time()
        if not (for_s > 0 and math.isfinite(for_s)):
            return None
        return self._gate(endpoint, hold.kind), for_s

    def _gate(self, endpoint: EndpointId, kind: str) -> Gate:
        """The endpoint's gate as this member made it, else made now as the peer's kind (so that
        its first attempt here meets the hold)."""
        if endpoint in self._attempts.endpoints.all():
            return self._attempts.get(endpoint)
        # (machines.endpoint.EndpointKind's values: the shells alone import it)
        if kind == "connect":
            return self._attempts.connect(endpoint)
        if kind == "token":
            return self._attempts.token(endpoint)
        return self._attempts.get(endpoint)


def share_of(owned: int) -> float:
    """A member's share of the configured rates when it owns ``owned`` shards: owned/256, at least
    1/256 (a member between leases still paces what it sends, the socket API's calls)."""
    return max(1, min(owned, SHARDS)) / SHARDS


@runtime_checkable
class DeadlineSource(Protocol):
    """Leases that say when what they own changes (a fleet's: supervisor/fleet/leases.py)."""

    def subscribe_deadlines(self, callback: Callable[[Mapping[int, Lease]], None]) -> None: ...


class RateShare:
    """Keeps the pacers at this member's share of the configured rates: ``owned``/256 of them
    (``Endpoints.scale``), recomputed whenever its leases change. One host owns every shard: 1."""

    def __init__(self, endpoints: Endpoints) -> None:
        self._endpoints = endpoints

    def follow(self, leases: Leases) -> None:
        """Scale now, and again at every change of what ``leases`` own, when they say so (a fleet's
        leases); leases that never change (SoloLeases: every shard) leave the rates as configured."""
        if isinstance(leases, DeadlineSource):
            self.update(leases.owned())
            leases.subscribe_deadlines(self.update)

    def update(self, owned: Mapping[int, Lease]) -> None:
        share = share_of(len(owned))
        if share != self._endpoints.share:
            self._endpoints.scale(share)
