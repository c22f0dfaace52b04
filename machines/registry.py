"""One circuit breaker per endpoint, and one :class:`~machines.endpoint.Endpoint` per endpoint, shared
by every session that talks to it."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import replace

from machines.circuit import Circuit, CircuitConfig
from machines.endpoint import Endpoint, EndpointKind
from machines.pacing import Pacer, PacingConfig
from machines.retry_budget import RetryBudget
from supervisor.clock import Clock, Rng
from supervisor.vocabulary import EndpointId


class CircuitRegistry:
    """Creates each endpoint's :class:`Circuit` on first use; its id is the endpoint's ``circuit_id``
    (``circuit:<endpoint>``)."""

    __slots__ = ("_circuits", "_clock", "_config", "_rng")

    def __init__(self, clock: Clock, config: CircuitConfig | None = None, rng: Rng | None = None) -> None:
        self._clock = clock
        self._config = config or CircuitConfig()
        self._rng: Rng = rng if rng is not None else random.Random()
        self._circuits: dict[EndpointId, Circuit] = {}

    def get(self, endpoint: EndpointId) -> Circuit:
        circuit = self._circuits.get(endpoint)
        if circuit is None:
            circuit = self._circuits[endpoint] = Circuit(
                endpoint.circuit_id, self._clock, self._rng, self._config
            )
        return circuit

    def configure(self, config: CircuitConfig) -> None:
        """Circuits created from now on use ``config``; existing ones keep theirs (and their state)."""
        self._config = config

    def all(self) -> dict[EndpointId, Circuit]:
        return dict(self._circuits)

    def forget(self, endpoint: EndpointId) -> None:
        """Drop ``endpoint``'s circuit (a bounded table evicted the endpoint)."""
        self._circuits.pop(endpoint, None)


class Endpoints:
    """One :class:`~machines.endpoint.Endpoint` per endpoint, made on first use (docs/runtime.md, "One attempt path").

    Its circuit comes from :class:`CircuitRegistry` (``circuit:<endpoint>``, what status reports
    read); beyond the seed (docs/runtime.md, "Admission") a connect endpoint paces connection attempts (handshakes,
    session starts) from ``connect`` and starts in slow start (start-up is a storm too), a REST
    endpoint paces REST calls from ``rest`` and engages only at the first throttle, and both
    cap retries across calls with ``budget`` (ratio, minimum per second). A token endpoint has its
    circuit only. With admission not adaptive (``connect`` and ``rest`` None) there are no pacers.

    ``limit``: at most this many endpoints are kept, the least recently used one (and its circuit)
    forgotten to make room (the library's endpoints are named by route, which a caller's URLs
    could multiply without end); None, the daemon's: its endpoints are few and named by config.
    """

    __slots__ = (
        "_budget",
        "_connect",
        "_endpoints",
        "_fleet",
        "_learned",
        "_limit",
        "_rest",
        "_share",
        "circuits",
        "clock",
    )

    def __init__(
        self,
        clock: Clock,
        circuits: CircuitRegistry | None = None,
        *,
        connect: PacingConfig | None = None,
        rest: PacingConfig | None = None,
        budget: tuple[float, float] | None = None,
        limit: int | None = None,
    ) -> None:
        if limit is not None and limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit!r}")
        self.clock = clock
        self._limit = limit
        self.circuits = circuits if circuits is not None else CircuitRegistry(clock)
        self._connect = connect
        self._rest = rest
        self._budget = budget
        self._endpoints: dict[EndpointId, Endpoint] = {}
        # limits learned before this start (a previous run's), each endpoint's pacer seeded with its own
        self._learned: dict[EndpointId, float] = {}
        # this member's share of the configured rates (:meth:`scale`); 1.0: one host
        self._share = 1.0
        self._fleet = False

    @property
    def share(self) -> float:
        """The share of the configured initial and maximum rates the pacers use (:meth:`scale`)."""
        return self._share

    def scale(self, share: float) -> None:
        """Pace at ``share`` (0 < share <= 1) of the configured initial and maximum rates: a fleet
        member's share of the shards (docs/runtime.md, "Admission across a fleet"), so that the
        members together start from, and never pass, the rates one host is configured with. Every
        pacer made from now on, and those made already, whose rates move in proportion
        (``Pacer.rescale``)."""
        if not 0.0 < share <= 1.0:
            raise ValueError(f"a share of the rates is within (0, 1], got {share!r}")
        factor = share / self._share
        self._share = share
        self._fleet = True  # only a fleet member's admission scales its rates
        for endpoint in self._endpoints.values():
            pacing = self._connect if endpoint.kind is EndpointKind.CONNECT else self._rest
            if pacing is not None and endpoint.kind is not EndpointKind.TOKEN:
                endpoint.rescale(self._scaled(pacing), factor)

    def _scaled(self, pacing: PacingConfig) -> PacingConfig:
        share = self._share
        if not self._fleet:
            return pacing
        # the minimum is shared too: kept whole, it clamped the rate of a member holding few shards
        # (1/256 of 20/s is under 1/s), and the clamped rate then grew with the share out of
        # proportion (x 85 on acquiring 85 shards: 85/s where 85/256 of 20/s is 6.6/s), past the fleet's
        return replace(
            pacing,
            initial_rate=None if pacing.initial_rate is None else pacing.initial_rate * share,
            max_rate=pacing.max_rate * share,
            min_rate=pacing.min_rate * share,
            share=share,
            fleet=True,
        )

    def seed(self, learned: Mapping[EndpointId, float]) -> None:
        """Start each endpoint's pacer from the limit a previous run learned of it
        (:meth:`machines.pacing.Pacer.seed`): those made from now on, and those made already that
        have learned none of their own. A limit is the fleet's (:meth:`learned`): each pacer is
        seeded with this member's share of it."""
        self._learned.update(learned)
        for name, endpoint in self._endpoints.items():
            limit = learned.get(name)
            if limit is not None:
                endpoint.seed(limit * self._share)

    def learned(self) -> dict[EndpointId, float]:
        """Each connect endpoint's learned limit (:meth:`machines.pacing.Pacer.learned`), for those
        that have one: what a later start seeds (a REST endpoint starts unpaced whatever it met)."""
        out: dict[EndpointId, float] = {}
        for name, endpoint in self._endpoints.items():
            limit = endpoint.learned()
            if limit is not None and endpoint.kind is EndpointKind.CONNECT:
                # the fleet's limit: this member's part of it over its share (:meth:`scale`), so that a
                # member that starts again with another share seeds its own part of the same limit
                out[name] = limit / self._share
        return out

    def connect(self, name: EndpointId) -> Endpoint:
        """The endpoint of a session's connection attempts (its WebSocket handshakes, its CXone starts)."""
        return self._made(name, EndpointKind.CONNECT)

    def token(self, name: EndpointId) -> Endpoint:
        """A credential's token endpoint (``EndpointId.oauth(platform)``)."""
        return self._made(name, EndpointKind.TOKEN)

    def get(self, name: EndpointId) -> Endpoint:
        """The endpoint ``name`` as made before, else a REST endpoint."""
        endpoint = self._endpoints.get(name)
        if endpoint is None:
            return self._made(name, EndpointKind.REST)
        if self._limit is not None:
            # most recently used last (a dict keeps insertion order): the first is evicted first
            del self._endpoints[name]
            self._endpoints[name] = endpoint
        return endpoint

    def all(self) -> dict[EndpointId, Endpoint]:
        return dict(self._endpoints)

    def _made(self, name: EndpointId, kind: EndpointKind) -> Endpoint:
        endpoint = self._endpoints.get(name)
        if endpoint is not None:
            if endpoint.kind is not kind:
                raise ValueError(f"endpoint '{name}' is a {endpoint.kind.value} endpoint, not {kind.value}")
            return endpoint
        pacer = budget = None
        if kind is not EndpointKind.TOKEN:
            pacing = self._connect if kind is EndpointKind.CONNECT else self._rest
            if pacing is not None:
                pacer = Pacer(name, self.clock, self._scaled(pacing), kind=kind.value)
                limit = self._learned.get(name)
                if limit is not None:
                    pacer.seed(limit * self._share)
            if self._budget is not None:
                ratio, min_per_s = self._budget
                budget = RetryBudget(self.clock, ratio=ratio, min_per_s=min_per_s)
        if self._limit is not None and len(self._endpoints) >= self._limit:
            oldest = next(iter(self._endpoints))
            del self._endpoints[oldest]
            self.circuits.forget(oldest)
        endpoint = self._endpoints[name] = Endpoint(
            name, kind, self.clock, self.circuits.get(name), pacer=pacer, budget=budget
        )
        return endpoint
