"""One circuit breaker per endpoint, shared by every session that talks to it."""

from __future__ import annotations

import random

from machines.circuit import Circuit, CircuitConfig
from supervisor.clock import Clock, Rng


class CircuitRegistry:
    """Creates each endpoint's :class:`Circuit` on first use; ids are ``circuit:<endpoint>``."""

    __slots__ = ("_circuits", "_clock", "_config", "_rng")

    def __init__(self, clock: Clock, config: CircuitConfig | None = None, rng: Rng | None = None) -> None:
        self._clock = clock
        self._config = config or CircuitConfig()
        self._rng: Rng = rng if rng is not None else random.Random()
        self._circuits: dict[str, Circuit] = {}

    def get(self, endpoint: str) -> Circuit:
        circuit = self._circuits.get(endpoint)
        if circuit is None:
            circuit = self._circuits[endpoint] = Circuit(
                f"circuit:{endpoint}", self._clock, self._rng, self._config
            )
        return circuit

    def configure(self, config: CircuitConfig) -> None:
        """Circuits created from now on use ``config``; existing ones keep theirs (and their state)."""
        self._config = config

    def all(self) -> dict[str, Circuit]:
        return dict(self._circuits)
